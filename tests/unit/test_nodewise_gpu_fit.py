"""Nodewise GPUFit: every filter rule, the device pick, the score and Reserve."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from kubus.api.gpus import (
    REASON_FREE_GPUS,
    REASON_FREE_MEMORY,
    REASON_HEALTHY,
    REASON_MEMORY,
    REASON_MODEL,
    REASON_NO_GPUS,
    GPURequest,
)
from kubus.api.objects import Container, GPUDevice, Node, ObjectMeta, Pod, PodSpec
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus_reference.gpu_fit import GPUFit, pick_gpu_devices

GI = 1024**3
_names = itertools.count()


@dataclass
class GPUArgs:
    mode: str


def whole(count: int, memory: str | None = None, models: str | None = None) -> Pod:
    ann = {}
    if memory:
        ann["kubus.io/gpu-memory"] = memory
    if models:
        ann["kubus.io/gpu-model"] = models
    return Pod(
        ObjectMeta(name=f"whole-{next(_names)}", annotations=ann),
        PodSpec(containers=(Container("c", requests={"nvidia.com/gpu": count}),)),
    )


def shared(memory: str, count: int = 1, models: str | None = None) -> Pod:
    ann = {"kubus.io/gpu-memory": memory, "kubus.io/gpu-count": str(count)}
    if models:
        ann["kubus.io/gpu-model"] = models
    return Pod(ObjectMeta(name=f"shared-{next(_names)}", annotations=ann), PodSpec(containers=(Container("c"),)))


def gpus(*specs: tuple[str, int, bool]) -> tuple[GPUDevice, ...]:
    return tuple(GPUDevice(i, f"GPU-{i}", model, mem * GI, healthy) for i, (model, mem, healthy) in enumerate(specs))


def info(devices: tuple[GPUDevice, ...] = (), *placed: tuple[Pod, tuple[int, ...]], name: str = "n") -> NodeInfo:
    ni = NodeInfo(Node(ObjectMeta(name=name), gpus=devices))
    for p, devs in placed:
        ni.add_pod(PodInfo.of(p, devs))
    return ni


A100x4 = gpus(("A100", 40, True), ("A100", 40, True), ("A100", 40, True), ("A100", 40, True))


def run_filter(p: Pod, ni: NodeInfo, mode: str = "binpack") -> Status:
    plugin, state = GPUFit(GPUArgs(mode)), CycleState()
    _, st = plugin.pre_filter(state, p, [ni])
    assert st.is_success
    return plugin.filter(state, p, ni)


def test_pods_without_gpus_skip_the_plugin() -> None:
    p = Pod(ObjectMeta(name="cpu-only"), PodSpec(containers=(Container("c", requests={"cpu": 100}),)))
    plugin, state = GPUFit(), CycleState()
    assert plugin.pre_filter(state, p, []) == (None, Status.skip())
    assert plugin.pre_score(state, p, []).is_skip
    assert plugin.reserve(state, p, info(A100x4)).is_success
    assert state.get(GPU_DEVICES_STATE_KEY) is None


FILTER = [
    ("whole GPUs fit", whole(2), info(A100x4), None),
    ("no GPUs", whole(1), info(), REASON_NO_GPUS),
    ("no GPUs for a shared slice", shared("1Gi"), info(), REASON_NO_GPUS),
    ("no device of the model", whole(1, models="H100"), info(A100x4), REASON_MODEL),
    (
        "an unhealthy device of the model is still the model",
        whole(1, models="H100"),
        info(gpus(("A100", 40, True), ("H100", 80, False))),
        REASON_HEALTHY,
    ),
    ("any of several models", whole(1, models="H100,A100"), info(A100x4), None),
    ("too few healthy devices", whole(2), info(gpus(("A100", 40, True), ("A100", 40, False))), REASON_HEALTHY),
    (
        "too few healthy devices of the model",
        whole(2, models="A100"),
        info(gpus(("A100", 40, True), ("H100", 80, True))),
        REASON_HEALTHY,
    ),
    ("whole devices too small", whole(1, memory="80Gi"), info(A100x4), REASON_MEMORY),
    ("whole devices big enough", whole(1, memory="40Gi"), info(A100x4), None),
    ("shared slice larger than any device", shared("41Gi"), info(A100x4), REASON_MEMORY),
    (
        "whole devices all taken",
        whole(1),
        info(gpus(("A100", 40, True), ("A100", 40, True)), (whole(1), (0,)), (whole(1), (1,))),
        REASON_FREE_GPUS,
    ),
    (
        "a device with a shared slice is not free for a whole request",
        whole(1),
        info(gpus(("A100", 40, True)), (shared("1Gi"), (0,))),
        REASON_FREE_GPUS,
    ),
    (
        "shared slices exhaust free memory",
        shared("20Gi"),
        info(gpus(("A100", 40, True)), (shared("30Gi"), (0,))),
        REASON_FREE_MEMORY,
    ),
    (
        "shared slice fits the remaining memory exactly",
        shared("10Gi"),
        info(gpus(("A100", 40, True)), (shared("30Gi"), (0,))),
        None,
    ),
    (
        "a whole-held device has no free memory for a slice",
        shared("1Gi"),
        info(gpus(("A100", 40, True)), (whole(1), (0,))),
        REASON_FREE_MEMORY,
    ),
    (
        "shared slices on several devices",
        shared("10Gi", count=3),
        info(gpus(("A100", 40, True), ("A100", 40, True), ("A100", 40, True)), (shared("35Gi"), (1,))),
        REASON_FREE_MEMORY,
    ),
    (
        "shared slices may share a device with other slices",
        shared("10Gi", count=2),
        info(gpus(("A100", 40, True), ("A100", 40, True)), (shared("30Gi"), (1,))),
        None,
    ),
    (
        "unhealthy devices never count as free",
        whole(1),
        info(gpus(("A100", 40, False), ("A100", 40, True)), (whole(1), (1,))),
        REASON_FREE_GPUS,
    ),
]


@pytest.mark.parametrize(("name", "p", "ni", "reason"), FILTER, ids=[t[0] for t in FILTER])
def test_filter(name, p, ni, reason) -> None:
    got = run_filter(p, ni)
    assert got == (Status.success() if reason is None else Status(Code.UNSCHEDULABLE, (reason,)))


def busy_node() -> NodeInfo:
    """4 x 40Gi A100 + 1 unhealthy; device 0 holds a 10Gi slice, device 1 a whole-GPU pod."""
    devices = (*A100x4, GPUDevice(4, "GPU-4", "A100", 40 * GI, False))
    return info(devices, (shared("10Gi"), (0,)), (whole(1), (1,)))


def req(count: int, memory_gi: int = 0, shared_: bool = False, models: tuple[str, ...] = ()) -> GPURequest:
    return GPURequest(count=count, memory=memory_gi * GI, models=models, shared=shared_)


@pytest.mark.parametrize(
    ("request_", "mode", "want"),
    [
        (req(2, 5, shared_=True), "binpack", (0, 2)),
        (req(2, 5, shared_=True), "spread", (2, 3)),
        (req(1, 31, shared_=True), "binpack", (2,)),
        (req(2), "binpack", (2, 3)),
        (req(2), "spread", (2, 3)),
        (req(3), "binpack", (2, 3)),
        (req(1, 5, shared_=True, models=("H100",)), "binpack", ()),
    ],
)
def test_pick_gpu_devices(request_: GPURequest, mode: str, want: tuple[int, ...]) -> None:
    assert pick_gpu_devices(request_, busy_node(), mode) == want


def test_pick_orders_by_free_memory_then_index() -> None:
    ni = info(A100x4, (shared("5Gi"), (3,)), (shared("10Gi"), (1,)), (shared("5Gi"), (2,)))
    # free: [40, 30, 35, 35]
    assert pick_gpu_devices(req(1, 1, shared_=True), ni, "binpack") == (1,)
    assert pick_gpu_devices(req(2, 1, shared_=True), ni, "binpack") == (1, 2)
    assert pick_gpu_devices(req(2, 1, shared_=True), ni, "spread") == (0, 2)
    with pytest.raises(ValueError, match="mode"):
        pick_gpu_devices(req(1), ni, "random")


def score(p: Pod, ni: NodeInfo, mode: str) -> int:
    plugin, state = GPUFit(GPUArgs(mode)), CycleState()
    plugin.pre_filter(state, p, [ni])
    assert plugin.pre_score(state, p, [ni]).is_success
    return plugin.score(state, p, ni)


@pytest.mark.parametrize(
    ("p", "binpack", "spread"),
    [
        # healthy total 160Gi, used 10 + 40 = 50Gi
        (shared("10Gi"), 37, 63),  # (50 + 10) * 100 // 160 = 37
        (shared("10Gi", count=2), 43, 57),  # (50 + 20) * 100 // 160 = 43
        (whole(2), 81, 19),  # devices 2 and 3: (50 + 80) * 100 // 160 = 81
        (whole(1), 56, 44),  # (50 + 40) * 100 // 160 = 56
    ],
)
def test_score(p: Pod, binpack: int, spread: int) -> None:
    assert score(p, busy_node(), "binpack") == binpack
    assert score(p, busy_node(), "spread") == spread


def test_score_without_healthy_gpus() -> None:
    ni = info(gpus(("A100", 40, False)))
    assert score(shared("1Gi"), ni, "binpack") == 0
    assert score(shared("1Gi"), ni, "spread") == 100


def test_reserve_records_the_picked_devices() -> None:
    plugin, state, p, ni = GPUFit(), CycleState(), shared("5Gi", count=2), busy_node()
    plugin.pre_filter(state, p, [ni])
    assert plugin.reserve(state, p, ni).is_success
    assert state.read(GPU_DEVICES_STATE_KEY) == (0, 2)
    plugin.unreserve(state, p, ni)
    assert state.read(GPU_DEVICES_STATE_KEY) == ()


def test_reserve_fails_when_the_node_no_longer_fits() -> None:
    plugin, state, p = GPUFit(), CycleState(), whole(3)
    plugin.pre_filter(state, p, [])
    assert plugin.reserve(state, p, busy_node()) == Status(Code.UNSCHEDULABLE, (REASON_FREE_GPUS,))


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        GPUFit(GPUArgs("random"))
