"""Nodewise NodeResourcesFit (filter, LeastAllocated, MostAllocated, RequestedToCapacityRatio) and
NodeResourcesBalancedAllocation, ported from kube's noderesources/*_test.go tables.

kube's tests write cpu quantities like "4000" (cores); here every cpu figure is milli-CPU. The
ratios, hence the scores, are the same.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from builders import make_node, make_pod

from kubus.api.objects import Container, Node, ObjectMeta, Pod, PodSpec
from kubus.api.resource_names import is_extended_resource_name
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus_reference._gomath import go_div, go_int64, go_round
from kubus_reference._resources import is_scalar_resource_name
from kubus_reference.balanced_allocation import NodeResourcesBalancedAllocation
from kubus_reference.node_resources_fit import (
    NodeResourcesFit,
    broken_linear_function,
    requested_to_capacity_ratio_scorer,
)

_names = itertools.count()

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGEPAGE_A = "hugepages-2Mi"


# ---- builders and args


def pod(*containers: dict[str, int], init: tuple[dict[str, int], ...] = (), overhead=None) -> Pod:
    def c(reqs: dict[str, int], i: int) -> Container:
        return Container(name=f"c{i}", requests=dict(reqs))

    return make_pod(
        f"pod-{next(_names)}",
        containers=[c(r, i) for i, r in enumerate(containers)],
        init_containers=[c(r, i) for i, r in enumerate(init)],
        overhead=overhead,
    )


def node(name: str, **allocatable: int) -> Node:
    return node_res(name, allocatable)


def node_res(name: str, resources: dict[str, int]) -> Node:
    return make_node(name, allocatable=resources)


def info(n: Node, *pods: Pod) -> NodeInfo:
    ni = NodeInfo(n)
    for p in pods:
        ni.add_pod(PodInfo.of(p))
    return ni


@dataclass
class Spec:
    name: str
    weight: int


@dataclass
class Point:
    utilization: int
    score: int


@dataclass
class RTCR:
    shape: list[Point]


@dataclass
class Strategy:
    type: str
    resources: list[Spec] = field(default_factory=list)
    requested_to_capacity_ratio: RTCR | None = None


@dataclass
class FitArgs:
    ignored_resources: list[str] = field(default_factory=list)
    ignored_resource_groups: list[str] = field(default_factory=list)
    scoring_strategy: Strategy | None = None


@dataclass
class BalancedArgs:
    resources: list[Spec] = field(default_factory=list)


DEFAULT = [Spec("cpu", 1), Spec("memory", 1)]


# ---- Go arithmetic and resource names


def test_go_arithmetic() -> None:
    assert go_div(7, 2) == 3 and go_div(-7, 2) == -3 and go_div(7, -2) == -3 and go_div(-7, -2) == 3
    assert go_round(12.5) == 13 and go_round(37.5) == 38 and go_round(-2.5) == -3
    assert go_round(2.4999999) == 2 and go_round(0.49999999999999994) == 0
    assert go_int64(99.99) == 99 and go_int64(-0.5) == 0


@pytest.mark.parametrize(
    ("name", "extended", "scalar"),
    [
        ("cpu", False, False),
        ("memory", False, False),
        ("pods", False, False),
        ("foo", False, False),
        (EXT_A, True, True),
        ("nvidia.com/gpu", True, True),
        (K8S_IO_A, False, True),
        (K8S_IO_B, False, True),
        (HUGEPAGE_A, False, True),
        ("attachable-volumes-aws-ebs", False, True),
        ("requests.example.com/x", False, False),
        ("Example.com/x", False, False),
        ("example.com/-x", False, False),
        ("a/b/c", False, False),
    ],
)
def test_resource_name_classes(name: str, extended: bool, scalar: bool) -> None:
    assert is_extended_resource_name(name) is extended
    assert is_scalar_resource_name(name) is scalar


# ---- Filter (fit_test.go TestEnoughRequests / TestNotEnoughRequests / TestStorageRequests)


def r(cpu: int = 0, mem: int = 0, **scalar: int) -> dict[str, int]:
    return {"cpu": cpu, "memory": mem, "pods": 0, "ephemeral-storage": 0, **scalar}


_FIT_NODE = {"cpu": 10, "memory": 20, "pods": 32, EXT_A: 5, "ephemeral-storage": 20, HUGEPAGE_A: 5}


def ins(name: str) -> str:
    return f"Insufficient {name}"


U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
ENOUGH = [
    ("no resources requested always fits", Pod(ObjectMeta(name="empty")), [r(10, 20)], None, ()),
    ("too many resources fails", pod(r(1, 1)), [r(10, 20)], U, (ins("cpu"), ins("memory"))),
    (
        "fails due to init container cpu",
        pod(r(1, 1), init=(r(3, 1),)),
        [r(8, 19)],
        U,
        (ins("cpu"),),
    ),
    (
        "fails due to highest init container cpu",
        pod(r(1, 1), init=(r(3, 1), r(2, 1))),
        [r(8, 19)],
        U,
        (ins("cpu"),),
    ),
    (
        "fails due to init container memory",
        pod(r(1, 1), init=(r(1, 3),)),
        [r(9, 19)],
        U,
        (ins("memory"),),
    ),
    (
        "fails due to highest init container memory",
        pod(r(1, 1), init=(r(1, 3), r(1, 2))),
        [r(9, 19)],
        U,
        (ins("memory"),),
    ),
    ("init container fits: max, not sum", pod(r(1, 1), init=(r(1, 1),)), [r(9, 19)], None, ()),
    ("multiple init containers fit", pod(r(1, 1), init=(r(1, 1), r(1, 1))), [r(9, 19)], None, ()),
    ("both resources fit", pod(r(1, 1)), [r(5, 5)], None, ()),
    ("one resource memory fits", pod(r(2, 1)), [r(9, 5)], U, (ins("cpu"),)),
    ("one resource cpu fits", pod(r(1, 2)), [r(5, 19)], U, (ins("memory"),)),
    ("equal edge case", pod(r(5, 1)), [r(5, 19)], None, ()),
    ("equal edge case for init container", pod(r(4, 1), init=(r(5, 1),)), [r(5, 19)], None, ()),
    ("extended resource fits", pod(r(**{EXT_A: 1})), [r()], None, ()),
    (
        "extended resource fits for init container",
        pod(r(), init=(r(**{EXT_A: 1}),)),
        [r()],
        None,
        (),
    ),
    (
        "extended resource capacity enforced",
        pod(r(1, 1, **{EXT_A: 10})),
        [r(**{EXT_A: 0})],
        UU,
        (ins(EXT_A),),
    ),
    (
        "extended resource capacity enforced for init container",
        pod(r(), init=(r(1, 1, **{EXT_A: 10}),)),
        [r(**{EXT_A: 0})],
        UU,
        (ins(EXT_A),),
    ),
    (
        "extended resource allocatable enforced",
        pod(r(1, 1, **{EXT_A: 1})),
        [r(**{EXT_A: 5})],
        U,
        (ins(EXT_A),),
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        pod(r(1, 1, **{EXT_A: 3}), r(1, 1, **{EXT_A: 3})),
        [r(**{EXT_A: 2})],
        UU,
        (ins(EXT_A),),
    ),
    (
        "extended resource allocatable admits multiple init containers",
        pod(r(), init=(r(1, 1, **{EXT_A: 3}), r(1, 1, **{EXT_A: 3}))),
        [r(**{EXT_A: 2})],
        None,
        (),
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        pod(r(), init=(r(1, 1, **{EXT_A: 6}), r(1, 1, **{EXT_A: 3}))),
        [r(**{EXT_A: 2})],
        UU,
        (ins(EXT_A),),
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        pod(r(1, 1, **{EXT_B: 1})),
        [r()],
        UU,
        (ins(EXT_B),),
    ),
    (
        "kubernetes.io resource capacity enforced",
        pod(r(1, 1, **{K8S_IO_A: 10})),
        [r()],
        UU,
        (ins(K8S_IO_A),),
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        pod(r(), init=(r(1, 1, **{"subdomain.kubernetes.io/something": 10}),)),
        [r()],
        UU,
        (ins(K8S_IO_B),),
    ),
    (
        "hugepages resource capacity enforced",
        pod(r(1, 1, **{HUGEPAGE_A: 10})),
        [r(**{HUGEPAGE_A: 0})],
        UU,
        (ins(HUGEPAGE_A),),
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        pod(r(1, 1, **{HUGEPAGE_A: 3}), r(1, 1, **{HUGEPAGE_A: 3})),
        [r(**{HUGEPAGE_A: 2})],
        UU,
        (ins(HUGEPAGE_A),),
    ),
    (
        "resources + pod overhead fits",
        pod(r(1, 1), overhead={"cpu": 3, "memory": 13}),
        [r(5, 5)],
        None,
        (),
    ),
    (
        "requests + overhead does not fit for memory",
        pod(r(1, 1), overhead={"cpu": 1, "memory": 15}),
        [r(5, 5)],
        U,
        (ins("memory"),),
    ),
    (
        "every shortfall is reported",
        pod(r(6, 16, **{EXT_A: 3})),
        [r(5, 5, **{EXT_A: 3})],
        U,
        (ins("cpu"), ins("memory"), ins(EXT_A)),
    ),
]


@pytest.mark.parametrize(("name", "p", "existing", "code", "reasons"), ENOUGH, ids=[t[0] for t in ENOUGH])
def test_fit_filter(name, p, existing, code, reasons) -> None:
    ni = info(node_res("n", _FIT_NODE), *(pod(e) for e in existing))
    plugin = NodeResourcesFit()
    state = CycleState()
    _, st = plugin.pre_filter(state, p, [ni])
    assert st.is_success
    got = plugin.filter(state, p, ni)
    if code is None:
        assert got.is_success
    else:
        assert got == Status(code, reasons)


def test_fit_filter_ignored_resources() -> None:
    p = pod(r(1, 1, **{EXT_B: 1, "example.com/ccc": 1, HUGEPAGE_A: 10}))
    ni = info(node_res("n", _FIT_NODE), pod(r()))
    # ignored by name, by group; hugepages are not extended resources, so they stay checked
    for args in (
        FitArgs(ignored_resources=["example.com/bbb", "example.com/ccc", HUGEPAGE_A]),
        FitArgs(ignored_resource_groups=["example.com", "hugepages-2Mi"]),
    ):
        plugin, state = NodeResourcesFit(args), CycleState()
        plugin.pre_filter(state, p, [ni])
        assert plugin.filter(state, p, ni) == Status(UU, (ins(HUGEPAGE_A),))


def test_fit_filter_without_prefilter_is_an_error() -> None:
    ni = info(node_res("n", _FIT_NODE))
    st = NodeResourcesFit().filter(CycleState(), pod(), ni)
    assert st.code is Code.ERROR
    assert st.message() == 'error reading "PreFilterNodeResourcesFit" from cycleState: not found'


NOT_ENOUGH = [
    ("no space without requests", Pod(ObjectMeta(name="empty")), r(10, 20)),
    ("no space, both fit", pod(r(1, 1)), r(5, 5)),
    ("no space, equal edge case", pod(r(5, 1)), r(5, 19)),
    ("no space, init container", pod(r(5, 1), init=(r(5, 1),)), r(5, 19)),
]


@pytest.mark.parametrize(("name", "p", "existing"), NOT_ENOUGH, ids=[t[0] for t in NOT_ENOUGH])
def test_fit_too_many_pods(name, p, existing) -> None:
    ni = info(node("n", cpu=10, memory=20, pods=1), pod(existing))
    plugin, state = NodeResourcesFit(), CycleState()
    plugin.pre_filter(state, p, [ni])
    assert plugin.filter(state, p, ni) == Status(U, ("Too many pods",))


def test_fit_too_many_pods_and_insufficient_cpu() -> None:
    ni = info(node("n", cpu=10, memory=20, pods=1), pod(r(10, 20)))
    p = pod(r(1, 1))
    plugin, state = NodeResourcesFit(), CycleState()
    plugin.pre_filter(state, p, [ni])
    assert plugin.filter(state, p, ni) == Status(U, ("Too many pods", ins("cpu"), ins("memory")))


def test_fit_node_without_pods_allocatable_fits_nothing() -> None:
    ni = info(node("n", cpu=10, memory=20))
    p = Pod(ObjectMeta(name="empty"))
    plugin, state = NodeResourcesFit(), CycleState()
    plugin.pre_filter(state, p, [ni])
    assert plugin.filter(state, p, ni) == Status(U, ("Too many pods",))


STORAGE = [
    ("due to container scratch disk", pod(r(1, 1)), r(10, 10), (ins("cpu"),)),
    ("pod fit", pod(r(1, 1)), r(2, 10), ()),
    (
        "ephemeral storage request exceeds allocatable",
        pod({"ephemeral-storage": 25}),
        r(2, 2),
        (ins("ephemeral-storage"),),
    ),
    ("ephemeral storage fits", pod({"ephemeral-storage": 10}), r(2, 2), ()),
]


@pytest.mark.parametrize(("name", "p", "existing", "reasons"), STORAGE, ids=[t[0] for t in STORAGE])
def test_fit_storage(name, p, existing, reasons) -> None:
    ni = info(node_res("n", _FIT_NODE), pod(existing))
    plugin, state = NodeResourcesFit(), CycleState()
    plugin.pre_filter(state, p, [ni])
    got = plugin.filter(state, p, ni)
    assert got.is_success if not reasons else got.reasons == reasons


def test_fit_ignores_unknown_native_names() -> None:
    # kube drops names that are neither cpu/memory/ephemeral-storage/pods nor scalar
    p = pod({"cpu": 1, "foo": 1000})
    ni = info(node("n", cpu=10, memory=20, pods=5))
    plugin, state = NodeResourcesFit(), CycleState()
    plugin.pre_filter(state, p, [ni])
    assert plugin.filter(state, p, ni).is_success


# ---- Score strategies (fit_test.go TestFitScore, least/most_allocated_test.go, rtcr_test.go)


def scores(plugin, p: Pod, nodes: list[NodeInfo], prescore: bool = True) -> list[int]:
    state = CycleState()
    if prescore:
        assert plugin.pre_score(state, p, nodes).is_success
    return [plugin.score(state, p, n) for n in nodes]


def req(cpu: int | None = None, mem: int | None = None, **scalar: int) -> dict[str, int]:
    out = {}
    if cpu is not None:
        out["cpu"] = cpu
    if mem is not None:
        out["memory"] = mem
    out.update(scalar)
    return out


def fit(kind: str, resources=None, shape=None) -> NodeResourcesFit:
    rtcr = RTCR([Point(u, s) for u, s in shape]) if shape else None
    return NodeResourcesFit(FitArgs(scoring_strategy=Strategy(kind, resources or DEFAULT, rtcr)))


def two_nodes(c1: int, m1: int, c2: int, m2: int, pods1=(), pods2=()) -> list[NodeInfo]:
    return [
        info(node("node1", cpu=c1, memory=m1), *(pod(p) for p in pods1)),
        info(node("node2", cpu=c2, memory=m2), *(pod(p) for p in pods2)),
    ]


@pytest.mark.parametrize("prescore", [True, False])
def test_fit_score_strategies(prescore: bool) -> None:
    """fit_test.go TestFitScore (with and without PreScore)."""
    nodes = lambda: two_nodes(4000, 10000, 6000, 10000, [req(2000, 4000)], [req(1000, 2000)])  # noqa: E731
    big, small = pod(req(3000, 5000)), pod(req(1000, 2000))
    assert scores(fit("RequestedToCapacityRatio", shape=[(0, 10), (100, 0)]), big, nodes(), prescore) == [10, 32]
    assert scores(fit("RequestedToCapacityRatio", shape=[(0, 0), (100, 10)]), big, nodes(), prescore) == [95, 68]
    assert scores(fit("MostAllocated"), small, nodes(), prescore) == [67, 36]
    assert scores(fit("LeastAllocated"), small, nodes(), prescore) == [32, 63]


def test_fit_score_with_sidecar() -> None:
    sidecar = Pod(
        ObjectMeta(name="with-sidecar"),
        PodSpec(
            containers=(Container("c", requests=req(1000, 2000)),),
            init_containers=(Container("s", requests=req(1000, 2000), restart_policy="Always"),),
        ),
    )
    nodes = [
        info(node("node1", cpu=4000, memory=10000), sidecar),
        info(node("node2", cpu=4000, memory=10000), pod(req(1000, 2000))),
    ]
    p = pod(req(1000, 2000))
    assert scores(fit("MostAllocated"), p, nodes) == [67, 45]
    assert scores(fit("LeastAllocated"), p, nodes) == [32, 55]


EXTENDED = "abc.com/xyz"
EXTENDED_SET = [Spec("cpu", 1), Spec("memory", 1), Spec(EXTENDED, 1)]

LEAST = [
    (
        "nothing scheduled, nothing requested",
        Pod(ObjectMeta(name="e")),
        two_nodes(4000, 10000, 4000, 10000),
        DEFAULT,
        [100, 100],
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(4000, 10000, 6000, 10000),
        DEFAULT,
        [37, 50],
    ),
    (
        "no resources requested, pods scheduled",
        Pod(ObjectMeta(name="e")),
        [
            info(
                node("node1", cpu=4000, memory=10000),
                Pod(ObjectMeta(name="a")),
                Pod(ObjectMeta(name="b")),
            ),
            info(node("node2", cpu=4000, memory=10000), Pod(ObjectMeta(name="c"))),
        ],
        DEFAULT,
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        Pod(ObjectMeta(name="e")),
        two_nodes(
            10000,
            20000,
            10000,
            20000,
            [req(3000, 0), req(3000, 0)],
            [req(3000, 0), req(3000, 5000)],
        ),
        DEFAULT,
        [70, 57],
    ),
    (
        "resources requested, pods scheduled with resources",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(10000, 20000, 10000, 20000, [req(3000, 0)], [req(3000, 5000)]),
        DEFAULT,
        [57, 45],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(10000, 20000, 10000, 50000, [req(3000, 0)], [req(3000, 5000)]),
        DEFAULT,
        [57, 60],
    ),
    (
        "requested resources exceed node capacity",
        pod(req(3000, 0)),
        two_nodes(4000, 10000, 4000, 10000, [req(3000, 0)], [req(3000, 5000)]),
        DEFAULT,
        [50, 25],
    ),
    (
        "zero node resources, pods scheduled with resources",
        Pod(ObjectMeta(name="e")),
        [info(node("node1"), pod(req(3000, 0))), info(node("node2"), pod(req(3000, 5000)))],
        DEFAULT,
        [0, 0],
    ),
    (
        "different weights on cpu and memory",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(4000, 10000, 6000, 10000),
        [Spec("memory", 2), Spec("cpu", 1)],
        [41, 50],
    ),
    (
        "bypass extended resource if the pod does not request",
        pod(req(1000, 2000), req(2000, 3000)),
        [
            info(node("node1", cpu=6000, memory=10000)),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
        ],
        EXTENDED_SET,
        [50, 50],
    ),
    (
        "honor extended resource if the pod requests",
        pod(req(3000, 5000, **{EXTENDED: 2})),
        [
            info(node_res("node1", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 10})),
        ],
        EXTENDED_SET,
        [50, 60],
    ),
    (
        "if the node doesn't have a resource",
        pod(req(3000, 4000)),
        [
            info(node("node1", cpu=6000, memory=10000)),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
        ],
        [Spec(EXTENDED, 2), Spec("cpu", 1), Spec("memory", 1)],
        [55, 55],
    ),
]


@pytest.mark.parametrize(("name", "p", "nodes", "resources", "want"), LEAST, ids=[t[0] for t in LEAST])
def test_least_allocated(name, p, nodes, resources, want) -> None:
    assert scores(fit("LeastAllocated", resources), p, nodes) == want


MOST = [
    (
        "nothing scheduled, nothing requested",
        Pod(ObjectMeta(name="e")),
        two_nodes(4000, 10000, 4000, 10000),
        DEFAULT,
        [0, 0],
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(4000, 10000, 6000, 10000),
        DEFAULT,
        [62, 50],
    ),
    (
        "no resources requested, pods scheduled with resources",
        Pod(ObjectMeta(name="e")),
        two_nodes(
            10000,
            20000,
            10000,
            20000,
            [req(3000, 0), req(3000, 0)],
            [req(3000, 0), req(3000, 5000)],
        ),
        DEFAULT,
        [30, 42],
    ),
    (
        "resources requested, pods scheduled with resources",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(10000, 20000, 10000, 20000, [req(3000, 0)], [req(3000, 5000)]),
        DEFAULT,
        [42, 55],
    ),
    (
        "resources requested equal node capacity",
        pod(req(2000, 4000), req(3000, 5000)),
        two_nodes(5000, 10000, 10000, 9000),
        DEFAULT,
        [95, 75],
    ),
    (
        "different weights on cpu and memory",
        pod(req(1000, 2000), req(2000, 3000)),
        two_nodes(4000, 10000, 6000, 10000),
        [Spec("memory", 2), Spec("cpu", 1)],
        [58, 50],
    ),
    (
        "no resources requested, pods scheduled, nonzero request for resource",
        pod({}),
        [
            info(node("node1", cpu=250, memory=1000 * 1024 * 1024), pod({}), pod({})),
            info(node("node2", cpu=250, memory=1000 * 1024 * 1024)),
        ],
        DEFAULT,
        [80, 30],
    ),
    (
        "bypass extended resource if the pod does not request",
        pod(req(1000, 2000), req(2000, 3000)),
        [
            info(node("node1", cpu=6000, memory=10000)),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
        ],
        EXTENDED_SET,
        [50, 50],
    ),
    (
        "honor extended resource if the pod request",
        pod(req(3000, 5000, **{EXTENDED: 2})),
        [
            info(node_res("node1", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 10})),
        ],
        EXTENDED_SET,
        [50, 40],
    ),
    (
        "if the node doesn't have a resource",
        pod(req(3000, 4000)),
        [
            info(node("node1", cpu=6000, memory=10000)),
            info(node_res("node2", {"cpu": 6000, "memory": 10000, EXTENDED: 4})),
        ],
        [Spec(EXTENDED, 2), Spec("cpu", 1), Spec("memory", 1)],
        [45, 45],
    ),
]


@pytest.mark.parametrize(("name", "p", "nodes", "resources", "want"), MOST, ids=[t[0] for t in MOST])
def test_most_allocated(name, p, nodes, resources, want) -> None:
    assert scores(fit("MostAllocated", resources), p, nodes) == want


LEAST_FIRST = [(0, 10), (100, 0)]


def test_requested_to_capacity_ratio_strategy() -> None:
    empty = Pod(ObjectMeta(name="e"))
    f = fit("RequestedToCapacityRatio", shape=LEAST_FIRST)
    nodes = [
        info(
            node("node1", cpu=4000, memory=10000),
            Pod(ObjectMeta(name="a")),
            Pod(ObjectMeta(name="b")),
        ),
        info(node("node2", cpu=4000, memory=10000)),
    ]
    assert scores(f, empty, nodes) == [100, 100]
    nodes = [
        info(node("node1", cpu=4000, memory=10000), Pod(ObjectMeta(name="a"))),
        info(node("node2", cpu=6000, memory=10000)),
    ]
    assert scores(f, pod(req(1000, 2000), req(2000, 3000)), nodes) == [38, 50]
    nodes = two_nodes(4000, 10000, 6000, 10000, [req(3000, 5000)], [req(3000, 5000)])
    assert scores(f, empty, nodes) == [38, 50]


@pytest.mark.parametrize(
    ("points", "assertions"),
    [
        (
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
        ),
        (
            [(0, 2), (40, 10), (100, 0)],
            [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
        ),
        (
            [(0, 2), (40, 2), (100, 2)],
            [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)],
        ),
    ],
)
def test_broken_linear_function(points, assertions) -> None:
    f = broken_linear_function(points)
    for p, want in assertions:
        assert f(p) == want


def test_broken_linear_function_truncates_toward_zero() -> None:
    # (0 - 100) * 33 / 70 = -47.14...: Go truncates to -47, so 100 - 47 = 53 (floor would give 52)
    assert broken_linear_function([(0, 100), (70, 0)])(33) == 53


def test_requested_to_capacity_ratio_rounds_half_away_from_zero() -> None:
    # resource scores 10 and 15 (weights 1, 1): 12.5 rounds to 13 as Go's math.Round does
    scorer = requested_to_capacity_ratio_scorer([1, 1], [(0, 0), (100, 10)])
    assert scorer([10, 15], [100, 100]) == 13


FOO, BAR = "intel.com/foo", "intel.com/bar"


def ext_node(name: str, **ext: int) -> NodeInfo:
    res = {"cpu": 4000, "memory": 10000 * 1024 * 1024}
    res.update({f"intel.com/{k}": v for k, v in ext.items()})
    return info(node_res(name, res))


def test_bin_packing_single_extended() -> None:
    f = fit("RequestedToCapacityRatio", [Spec(FOO, 1)], [(0, 0), (100, 1)])
    mk = lambda: [ext_node("node1", foo=8), ext_node("node2", foo=4)]  # noqa: E731
    assert scores(f, Pod(ObjectMeta(name="e")), mk(), prescore=False) == [0, 0]
    assert scores(f, pod({FOO: 2}), mk(), prescore=False) == [2, 5]
    nodes = mk()
    nodes[1].add_pod(PodInfo.of(pod({FOO: 2})))
    assert scores(f, pod({FOO: 2}), nodes, prescore=False) == [2, 10]
    assert scores(f, pod({FOO: 4}), mk(), prescore=False) == [5, 10]


def test_bin_packing_multiple_extended() -> None:
    f = fit("RequestedToCapacityRatio", [Spec(FOO, 3), Spec(BAR, 5)], [(0, 0), (100, 1)])
    mk = lambda: [ext_node("node1", foo=8, bar=4), ext_node("node2", foo=4, bar=8)]  # noqa: E731
    assert scores(f, Pod(ObjectMeta(name="e")), mk()) == [0, 0]
    assert scores(f, pod({FOO: 2, BAR: 2}), mk()) == [4, 3]
    nodes = mk()
    nodes[1].add_pod(PodInfo.of(pod({FOO: 2, BAR: 2})))
    assert scores(f, pod({FOO: 2, BAR: 2}), nodes) == [4, 7]


def test_rtcr_without_shape_is_rejected() -> None:
    with pytest.raises(ValueError, match="shape"):
        NodeResourcesFit(FitArgs(scoring_strategy=Strategy("RequestedToCapacityRatio", DEFAULT)))
    with pytest.raises(ValueError, match="not supported"):
        NodeResourcesFit(FitArgs(scoring_strategy=Strategy("Fancy", DEFAULT)))


# ---- BalancedAllocation (balanced_allocation_test.go)


def spec_pod(*containers: dict[str, int]) -> Pod:
    return pod(*containers)


CPU_ONLY = ({"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 0})
CPU_AND_MEMORY = ({"cpu": 1000, "memory": 2000}, {"cpu": 2000, "memory": 3000})
CPU_MEM_GPU = ({"cpu": 1000, "memory": 2000}, {"cpu": 2000, "memory": 3000, "nvidia.com/gpu": 3})


def balanced(resources=None) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation(BalancedArgs(resources or DEFAULT))


def test_balanced_skips_best_effort_pods() -> None:
    nodes = two_nodes(4000, 10000, 4000, 10000)
    assert balanced().pre_score(CycleState(), Pod(ObjectMeta(name="e")), nodes).is_skip
    # explicit zero requests are still best effort; non-zero defaults do not count here
    assert balanced().pre_score(CycleState(), pod({}), nodes).is_skip
    assert balanced().pre_score(CycleState(), pod({"cpu": 0, "memory": 0}), nodes).is_skip


BALANCED = [
    (
        "nothing scheduled, resources requested, differently sized nodes",
        CPU_AND_MEMORY,
        (4000, 10000, 6000, 10000),
        (),
        (),
        DEFAULT,
        [87, 100],
    ),
    (
        "resources requested, pods scheduled with resources",
        CPU_AND_MEMORY,
        (10000, 20000, 10000, 20000),
        (CPU_ONLY,),
        (CPU_AND_MEMORY,),
        DEFAULT,
        [82, 95],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        CPU_AND_MEMORY,
        (10000, 20000, 10000, 50000),
        (CPU_ONLY,),
        (CPU_AND_MEMORY,),
        DEFAULT,
        [82, 80],
    ),
    (
        "requested resources at node capacity",
        CPU_ONLY,
        (6000, 10000, 6000, 10000),
        (CPU_ONLY,),
        (CPU_AND_MEMORY,),
        DEFAULT,
        [50, 75],
    ),
]


@pytest.mark.parametrize(
    ("name", "p", "caps", "on1", "on2", "resources", "want"), BALANCED, ids=[t[0] for t in BALANCED]
)
@pytest.mark.parametrize("prescore", [True, False])
def test_balanced_allocation(name, p, caps, on1, on2, resources, want, prescore) -> None:
    nodes = [
        info(node("node1", cpu=caps[0], memory=caps[1]), *(pod(*c) for c in on1)),
        info(node("node2", cpu=caps[2], memory=caps[3]), *(pod(*c) for c in on2)),
    ]
    assert scores(balanced(resources), pod(*p), nodes, prescore) == want


GPU_SET = [Spec("cpu", 1), Spec("memory", 1), Spec("nvidia.com/gpu", 1)]


def test_balanced_allocation_with_scalar_resource() -> None:
    gpu8 = {"nvidia.com/gpu": 8}
    nodes = [
        info(node_res("node1", {"cpu": 3500, "memory": 40000, **gpu8}), pod(*CPU_MEM_GPU)),
        info(node_res("node2", {"cpu": 3500, "memory": 40000, **gpu8}), pod(*CPU_AND_MEMORY)),
    ]
    assert scores(balanced(GPU_SET), pod({"memory": 0, "nvidia.com/gpu": 1}), nodes) == [70, 65]


def test_balanced_allocation_skips_scalar_resource_the_pod_does_not_request() -> None:
    nodes = [
        info(node_res("node1", {"cpu": 3500, "memory": 40000, "nvidia.com/gpu": 8})),
        info(node_res("node2", {"cpu": 3500, "memory": 40000})),
    ]
    assert scores(balanced(GPU_SET), pod(*CPU_AND_MEMORY), nodes) == [63, 63]


def test_balanced_allocation_counts_requests_not_nonzero_defaults() -> None:
    # node1 holds a pod without requests: kube's BalancedAllocation counts its 0, not 100m/200MB
    nodes = [
        info(node("node1", cpu=4000, memory=10000), pod({})),
        info(node("node2", cpu=4000, memory=10000)),
    ]
    assert scores(balanced(), pod({"cpu": 1000, "memory": 2500}), nodes) == [100, 100]
