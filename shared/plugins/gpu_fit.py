"""GPUFit (PreFilter, Filter, PreScore, Score, Reserve): kubus's GPU plugin.

Filters on healthy GPUs of the requested model with enough memory (free memory for shared
slices, idle devices for whole GPUs), scores nodes by GPU memory utilization after placement
(binpack: fuller is better; spread: emptier is better) and picks the concrete devices at
Reserve. The request format (`nvidia.com/gpu`, `kubus.io/gpu-memory`, `kubus.io/gpu-model`,
`kubus.io/gpu-count`) is documented in `kubus.api.gpus`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kubus.api.gpus import (
    BINPACK,
    REASON_FREE_GPUS,
    REASON_FREE_MEMORY,
    REASON_HEALTHY,
    REASON_MEMORY,
    REASON_MODEL,
    REASON_NO_GPUS,
    GPUAnnotationError,
    GPURequest,
    gpu_mode,
    pod_gpu_request,
)
from kubus.api.objects import GPUDevice, Node, Pod
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.interface import MAX_NODE_SCORE, FilterResult, Rejection, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    POD_FREED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
    removed_pod,
)
from kubus.framework.status import Status
from kubus.kernels.backend import Array
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo

_REQUEST_KEY = "PreFilterGPUFit"


def pick_devices(request: GPURequest, node_info: NodeInfo, mode: str = BINPACK) -> tuple[int, ...]:
    """The devices GPUFit gives the pod on this node, as Score assumed it would: of the devices
    that can take the request now, the `request.count` with the least free memory (binpack) or
    the most (spread), ties to the lower index; sorted by index. Fewer when the node lacks them
    (the caller checks)."""
    free = node_info.gpu_free_memory
    pods = node_info.gpu_pod_count
    candidates = [
        (free[d] if mode == BINPACK else -free[d], d)
        for d, g in enumerate(node_info.node.gpus)
        if g.healthy
        and g.memory >= request.memory
        and (not request.models or g.model in request.models)
        and (free[d] >= request.memory if request.shared else pods[d] == 0)
    ]
    return tuple(sorted(d for _, d in sorted(candidates)[: request.count]))


class GPUFit:
    name: ClassVar[str] = "GPUFit"
    placement_sensitive: ClassVar[bool] = True
    reads_table_only: ClassVar[bool] = True
    reads_view_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        self.mode = gpu_mode(args)

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[None, Status]:
        request = pod_gpu_request(pod)
        if request is None:
            return None, Status.skip()
        state.write(_REQUEST_KEY, request)
        return None, Status.success()

    def _devices(self, view: TableView, request: GPURequest, rows: Rows) -> dict[str, Array]:
        """Per-device masks [rows, GPUs] of the successive conditions a device must meet."""
        xp = view.xp
        total = view.gpu_total[rows]
        g = total.shape[1]
        present = xp.arange(g)[None, :] < view.gpu_count[rows][:, None]
        if request.models:
            lut = np.zeros(len(view.table.gpu_models), dtype=bool)
            lut[[view.table.gpu_models.ids[m] for m in request.models if m in view.table.gpu_models.ids]] = True
            model = present & xp.asarray(lut)[view.gpu_model[rows]]
        else:
            model = present
        healthy = model & view.gpu_healthy[rows]
        big = healthy & (total >= request.memory)
        if request.shared:
            eligible = big & (view.gpu_free[rows] >= request.memory)
        else:
            eligible = big & (view.gpu_pods[rows] == 0)
        return {"present": present, "model": model, "healthy": healthy, "big": big, "eligible": eligible}

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        request: GPURequest = state.read(_REQUEST_KEY)
        m = self._devices(view, request, rows)
        k = request.count
        # Eligible devices are present, of the model, healthy and big enough: k of them is a
        # pass. When every row passes (most calls: the rows a placement touched), no reason masks.
        passed = m["eligible"].sum(axis=1) >= k
        if bool(passed.all()):
            return FilterResult(passed)
        no_gpus = ~m["present"].any(axis=1)
        no_model = ~no_gpus & ~m["model"].any(axis=1) if request.models else no_gpus & False
        before = no_gpus | no_model
        few_healthy = ~before & (m["healthy"].sum(axis=1) < k)
        before = before | few_healthy
        few_big = ~before & (m["big"].sum(axis=1) < k)
        before = before | few_big
        few_free = ~before & (m["eligible"].sum(axis=1) < k)
        rejections = (
            Rejection(REASON_NO_GPUS, no_gpus),
            Rejection(REASON_MODEL, no_model),
            Rejection(REASON_HEALTHY, few_healthy),
            Rejection(REASON_MEMORY, few_big),
            Rejection(REASON_FREE_MEMORY if request.shared else REASON_FREE_GPUS, few_free),
        )
        return FilterResult(~(before | few_free), rejections)

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        return Status.success() if state.get(_REQUEST_KEY) is not None else Status.skip()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        xp = view.xp
        request: GPURequest = state.read(_REQUEST_KEY)
        total = view.gpu_total[rows]
        free = view.gpu_free[rows]
        healthy = view.gpu_healthy[rows]
        capacity = xp.where(healthy, total, 0).sum(axis=1)
        used = xp.where(healthy, total - free, 0).sum(axis=1)
        if request.shared:
            taken = xp.int64(request.count * request.memory)
        else:
            eligible = self._devices(view, request, rows)["eligible"]
            # the devices Reserve would pick: by free memory (ascending to binpack, descending to
            # spread), then by index; a stable sort keeps index order among equals
            key = xp.where(eligible, free if self.mode == BINPACK else -free, xp.iinfo(xp.int64).max)
            order = xp.argsort(key, axis=1, kind="stable")[:, : request.count]
            taken = xp.take_along_axis(total, order, axis=1).sum(axis=1)
        util = (used + taken) * MAX_NODE_SCORE // xp.where(capacity == 0, 1, capacity)
        util = xp.where(capacity == 0, 0, util)
        return util if self.mode == BINPACK else MAX_NODE_SCORE - util

    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Pick the devices and record them under GPU_DEVICES_STATE_KEY (nothing for a pod
        without GPUs); Unschedulable when the node no longer has enough."""
        request: GPURequest | None = state.get(_REQUEST_KEY) or pod_gpu_request(pod)
        if request is None:
            return Status.success()
        devices = pick_devices(request, node_info, self.mode)
        if len(devices) < request.count:
            return Status.unschedulable(REASON_FREE_MEMORY if request.shared else REASON_FREE_GPUS)
        state.write(GPU_DEVICES_STATE_KEY, devices)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        state.write(GPU_DEVICES_STATE_KEY, ())

    # ---- queueing hints ----------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """As NodeResourcesFit, for GPUs: a pod that held GPUs leaving a node
        (`is_schedulable_after_pod_event`); a node added, or its GPUs changed for the better
        (`is_schedulable_after_node_change`)."""
        return (
            *events_on(POD_FREED, self.is_schedulable_after_pod_event),
            *events_on((NODE_ADDED, NODE_UPDATED), self.is_schedulable_after_node_change),
        )

    def is_schedulable_after_pod_event(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """QUEUE when the pod that left a node held GPUs there."""
        deleted = removed_pod(old)
        if deleted is None:
            return QueueingHint.QUEUE
        if not deleted.spec.node_name:
            return QueueingHint.QUEUE_SKIP
        try:
            freed = pod_gpu_request(deleted)
        except GPUAnnotationError:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if freed is not None else QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """QUEUE when the node, empty, has enough devices that could serve the pod, and it was
        added or one of those devices is new to it (added, healthy again, bigger)."""
        original, modified = node_change(old, new)
        if modified is None:
            return QueueingHint.QUEUE
        try:
            request = pod_gpu_request(pod)
        except GPUAnnotationError:
            return QueueingHint.QUEUE
        if request is None:
            return QueueingHint.QUEUE  # it asks no GPU: nothing to reason about
        serving = _serving(request, modified)
        if len(serving) < request.count:
            return QueueingHint.QUEUE_SKIP
        if original is None or serving - _serving(request, original):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def _serving(request: GPURequest, node: Node) -> set[GPUDevice]:
    """The node's devices that could ever serve ``request`` (free or not)."""
    return {device for device in node.gpus if request.accepts(device)}
