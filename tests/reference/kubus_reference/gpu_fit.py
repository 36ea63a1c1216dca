"""GPUFit (PreFilter, Filter, PreScore, Score, Reserve): kubus's own GPU plugin, one node at a time.

A device of the node is *eligible* for a request when it is healthy, of an accepted model (any,
when the request names none), and either (shared slice) has at least `request.memory` bytes
free, or (whole GPU) holds no pod and has at least `request.memory` bytes in total. A node
passes when it has `request.count` eligible devices; otherwise the first reason that applies:

1. "node(s) had no GPUs"                        -- the node has no GPU at all
2. "node(s) didn't have the requested GPU model" -- models requested, no device (healthy or
                                                    not) of any of them
3. "node(s) didn't have enough healthy GPUs"     -- fewer healthy devices of those models
4. "node(s) didn't have GPUs with enough memory" -- fewer of those with enough total memory
5. "node(s) didn't have enough free GPU memory" (shared) / "node(s) didn't have enough free
   GPUs" (whole)                                  -- fewer eligible devices

Devices are picked by `pick_gpu_devices` (binpack: fullest first; spread: emptiest first). The
score is the node's GPU memory utilization (over healthy devices) after the pod is placed:
binpack scores it as is, spread as 100 - it. Reserve writes the picked devices into the cycle
state under GPU_DEVICES_STATE_KEY; the scheduler records them on the pod's PodInfo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from kubus.api.gpus import (
    BINPACK,
    GPU_MODES,
    REASON_FREE_GPUS,
    REASON_FREE_MEMORY,
    REASON_HEALTHY,
    REASON_MEMORY,
    REASON_MODEL,
    REASON_NO_GPUS,
    GPURequest,
    gpu_mode,
    pod_gpu_request,
)
from kubus.api.objects import Pod
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo

PRE_FILTER_STATE_KEY = "PreFilterGPUFit"


def _model_ok(request: GPURequest, model: str) -> bool:
    return not request.models or model in request.models


def eligible_gpu_devices(request: GPURequest, node_info: NodeInfo) -> list[int]:
    """Indices of the node's devices that can take the request now, ascending."""
    out = []
    for d, device in enumerate(node_info.node.gpus):
        if not device.healthy or not _model_ok(request, device.model):
            continue
        if request.shared:
            ok = node_info.gpu_free_memory[d] >= request.memory
        else:
            ok = node_info.gpu_pod_count[d] == 0 and device.memory >= request.memory
        if ok:
            out.append(d)
    return out


def pick_gpu_devices(request: GPURequest, node_info: NodeInfo, mode: str = BINPACK) -> tuple[int, ...]:
    """The devices the pod gets on this node, sorted by index.

    The eligible devices ordered by (free memory, index) for binpack, (-free memory, index) for
    spread; the first `request.count` of them. Fewer than `request.count` when the node does
    not have enough (the caller checks). Raises ValueError for an unknown mode.
    """
    if mode not in GPU_MODES:
        raise ValueError(f"GPUFit mode {mode!r} is not one of {', '.join(GPU_MODES)}")
    free = node_info.gpu_free_memory
    sign = 1 if mode == BINPACK else -1
    ordered = sorted(eligible_gpu_devices(request, node_info), key=lambda d: (sign * free[d], d))
    return tuple(sorted(ordered[: request.count]))


def gpu_filter_reason(request: GPURequest, node_info: NodeInfo) -> str | None:
    """The reason the node cannot take the request (rules 1-5 above), or None when it can."""
    gpus = node_info.node.gpus
    k = request.count
    if len(eligible_gpu_devices(request, node_info)) >= k:
        return None
    if not gpus:
        return REASON_NO_GPUS
    if request.models and not any(_model_ok(request, g.model) for g in gpus):
        return REASON_MODEL
    healthy = [g for g in gpus if g.healthy and _model_ok(request, g.model)]
    if len(healthy) < k:
        return REASON_HEALTHY
    if sum(1 for g in healthy if g.memory >= request.memory) < k:
        return REASON_MEMORY
    return REASON_FREE_MEMORY if request.shared else REASON_FREE_GPUS


def gpu_utilization_after(request: GPURequest, node_info: NodeInfo, mode: str) -> int:
    """(used + taken) * 100 // total over the node's healthy devices; 0 without any."""
    gpus = node_info.node.gpus
    free = node_info.gpu_free_memory
    total = sum(g.memory for g in gpus if g.healthy)
    if total == 0:
        return 0
    used = sum(g.memory - free[d] for d, g in enumerate(gpus) if g.healthy)
    if request.shared:
        taken = request.count * request.memory
    else:
        taken = sum(gpus[d].memory for d in pick_gpu_devices(request, node_info, mode))
    return (used + taken) * MAX_NODE_SCORE // total


def reserve_gpu_devices(state: CycleState, pod: Pod, node_info: NodeInfo, mode: str) -> Status:
    """GPUFit's Reserve: pick the devices and
    record them under GPU_DEVICES_STATE_KEY; nothing to do for a pod without GPUs.
    Unschedulable when the node no longer has enough."""
    request = state.get(PRE_FILTER_STATE_KEY)
    if request is None:
        request = pod_gpu_request(pod)
        if request is None:
            return Status.success()
    devices = pick_gpu_devices(request, node_info, mode)
    if len(devices) < request.count:
        return Status.unschedulable(REASON_FREE_MEMORY if request.shared else REASON_FREE_GPUS)
    state.write(GPU_DEVICES_STATE_KEY, devices)
    return Status.success()


class GPUFit:
    name: ClassVar[str] = "GPUFit"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """GPUArgs (`mode`: "binpack" or "spread"), or None: binpack. Raises ValueError for an
        unknown mode."""
        self.mode = gpu_mode(args)

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        request = pod_gpu_request(pod)
        if request is None:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, request)
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        request = state.get(PRE_FILTER_STATE_KEY)
        if request is None:
            request = pod_gpu_request(pod)
            if request is None:
                return Status.success()
        reason = gpu_filter_reason(request, node_info)
        return Status.success() if reason is None else Status.unschedulable(reason)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        request = state.get(PRE_FILTER_STATE_KEY)
        if request is None:
            request = pod_gpu_request(pod)
            if request is None:
                return Status.skip()
            state.write(PRE_FILTER_STATE_KEY, request)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        util = gpu_utilization_after(state.read(PRE_FILTER_STATE_KEY), node_info, self.mode)
        return util if self.mode == BINPACK else MAX_NODE_SCORE - util

    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        return reserve_gpu_devices(state, pod, node_info, self.mode)

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        """Forget the picked devices. Idempotent."""
        state.write(GPU_DEVICES_STATE_KEY, ())
