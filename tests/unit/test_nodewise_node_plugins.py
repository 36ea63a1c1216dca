"""Nodewise NodeName, NodeUnschedulable, NodePorts, SchedulingGates, PrioritySort,
TaintToleration and ImageLocality, ported from kube's *_test.go tables for those plugins."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from kubus.api.objects import (
    Container,
    ContainerImage,
    ContainerPort,
    Node,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import PrioritySort, QueuedPodInfo, SchedulingGates
from kubus_reference.image_locality import ImageLocality, normalized_image_name
from kubus_reference.node_name import NodeName
from kubus_reference.node_ports import NodePorts
from kubus_reference.node_unschedulable import NodeUnschedulable
from kubus_reference.taint_toleration import TaintToleration

_names = itertools.count()
NS, PNS, NE = TaintEffect.NO_SCHEDULE, TaintEffect.PREFER_NO_SCHEDULE, TaintEffect.NO_EXECUTE
EQUAL, EXISTS = TolerationOperator.EQUAL, TolerationOperator.EXISTS
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def pod(**spec) -> Pod:
    return Pod(ObjectMeta(name=f"pod-{next(_names)}"), PodSpec(**spec))


def node(name: str = "node", *, taints=(), unschedulable=False, images=()) -> Node:
    return Node(
        ObjectMeta(name=name),
        NodeSpec(unschedulable=unschedulable, taints=tuple(taints)),
        NodeStatus(images=tuple(images)),
    )


def info(n: Node, *pods: Pod) -> NodeInfo:
    ni = NodeInfo(n)
    for p in pods:
        ni.add_pod(PodInfo.of(p))
    return ni


# ---- NodeName (node_name_test.go)


@pytest.mark.parametrize(
    ("pod_node", "node_name", "ok"),
    [("", "foo", True), ("foo", "foo", True), ("bar", "foo", False)],
    ids=["no host specified", "host matches", "host doesn't match"],
)
def test_node_name(pod_node: str, node_name: str, ok: bool) -> None:
    got = NodeName().filter(CycleState(), pod(node_name=pod_node), info(node(node_name)))
    want = Status.success() if ok else Status(UU, ("node(s) didn't match the requested node name",))
    assert got == want


# ---- NodeUnschedulable (node_unschedulable_test.go)

UNSCHEDULABLE_TOLERATION = Toleration(key="node.kubernetes.io/unschedulable", effect=NS)


@pytest.mark.parametrize(
    ("unschedulable", "tolerations", "ok"),
    [
        (False, (), True),
        (True, (), False),
        (False, (UNSCHEDULABLE_TOLERATION,), True),
        (True, (UNSCHEDULABLE_TOLERATION,), True),
        (True, (Toleration(operator=EXISTS),), True),
        (True, (Toleration(key="node.kubernetes.io/unschedulable", effect=PNS),), False),
    ],
)
def test_node_unschedulable(unschedulable: bool, tolerations, ok: bool) -> None:
    got = NodeUnschedulable().filter(
        CycleState(), pod(tolerations=tolerations), info(node(unschedulable=unschedulable))
    )
    assert got == (Status.success() if ok else Status(UU, ("node(s) were unschedulable",)))


# ---- NodePorts (node_ports_test.go)


def port_pod(*specs: str) -> Pod:
    """Ports as "PROTO/IP/PORT" strings, like kube's newPod helper."""
    ports = []
    for s in specs:
        proto, ip, port = s.split("/")
        ports.append(ContainerPort(container_port=int(port), host_port=int(port), protocol=proto, host_ip=ip))
    return pod(containers=(Container(name="c", ports=tuple(ports)),))


PORTS = [
    ("nothing running", port_pod("UDP/127.0.0.1/8080"), [], True),
    ("other port", port_pod("UDP/127.0.0.1/8080"), ["UDP/127.0.0.1/9090"], True),
    ("same udp port", port_pod("UDP/127.0.0.1/8080"), ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", port_pod("TCP/127.0.0.1/8080"), ["TCP/127.0.0.1/8080"], False),
    ("different host ip", port_pod("TCP/127.0.0.1/8080"), ["TCP/127.0.0.2/8080"], True),
    ("different protocol", port_pod("UDP/127.0.0.1/8080"), ["TCP/127.0.0.1/8080"], True),
    (
        "second udp port conflict",
        port_pod("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"),
        ["UDP/127.0.0.1/8080"],
        False,
    ),
    (
        "first tcp port conflict",
        port_pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
        False,
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        port_pod("TCP/0.0.0.0/8001"),
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        port_pod("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"),
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        port_pod("TCP/127.0.0.1/8001"),
        ["TCP/0.0.0.0/8001"],
        False,
    ),
    (
        "second different protocol",
        port_pod("UDP/127.0.0.1/8001"),
        ["TCP/0.0.0.0/8001"],
        True,
    ),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        port_pod("UDP/127.0.0.1/8001"),
        ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
        False,
    ),
]


@pytest.mark.parametrize(("name", "p", "existing", "ok"), PORTS, ids=[t[0] for t in PORTS])
def test_node_ports(name: str, p: Pod, existing: list[str], ok: bool) -> None:
    ni = info(node(), port_pod(*existing)) if existing else info(node())
    plugin, state = NodePorts(), CycleState()
    _, st = plugin.pre_filter(state, p, [ni])
    assert st.is_success
    got = plugin.filter(state, p, ni)
    want = (
        Status.success()
        if ok
        else Status(Code.UNSCHEDULABLE, ("node(s) didn't have free ports for the requested pod ports",))
    )
    assert got == want


def test_node_ports_prefilter_skips_pods_without_host_ports() -> None:
    p = pod(containers=(Container(name="c", ports=(ContainerPort(container_port=80),)),))
    assert NodePorts().pre_filter(CycleState(), p, []) == (None, Status.skip())


def test_node_ports_count_sidecars_but_not_plain_init_containers() -> None:
    def init(restart_policy):
        port = ContainerPort(container_port=80, host_port=80)
        return Container(name="i", ports=(port,), restart_policy=restart_policy)

    taken = info(node(), port_pod("TCP/0.0.0.0/80"))
    plain, sidecar = pod(init_containers=(init(None),)), pod(init_containers=(init("Always"),))
    assert NodePorts().pre_filter(CycleState(), plain, [taken])[1].is_skip
    state = CycleState()
    NodePorts().pre_filter(state, sidecar, [taken])
    assert NodePorts().filter(state, sidecar, taken).code is Code.UNSCHEDULABLE


# ---- SchedulingGates (scheduling_gates_test.go) and PrioritySort (priority_sort_test.go)


def test_scheduling_gates() -> None:
    assert SchedulingGates().pre_enqueue(pod()).is_success
    got = SchedulingGates().pre_enqueue(pod(scheduling_gates=("foo", "bar")))
    assert got == Status(UU, ("waiting for scheduling gates: [foo bar]",))


def test_priority_sort() -> None:
    less = PrioritySort().less
    low, high = pod(priority=100), pod(priority=200)
    assert less(QueuedPodInfo(high, 2.0), QueuedPodInfo(low, 1.0))
    assert not less(QueuedPodInfo(low, 1.0), QueuedPodInfo(high, 2.0))
    assert less(QueuedPodInfo(low, 1.0), QueuedPodInfo(pod(priority=100), 2.0))
    assert not less(QueuedPodInfo(low, 2.0), QueuedPodInfo(pod(priority=100), 2.0))


# ---- TaintToleration (taint_toleration_test.go)


def tol(key: str, value: str = "", effect=None, operator=EQUAL) -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def taint(key: str, value: str, effect) -> Taint:
    return Taint(key=key, value=value, effect=effect)


FILTER = [
    (
        "no tolerations, nonempty taints",
        (),
        [taint("dedicated", "user1", NS)],
        "{dedicated: user1}",
    ),
    (
        "dedicated node assigned to user1",
        (tol("dedicated", "user1", NS),),
        [taint("dedicated", "user1", NS)],
        None,
    ),
    (
        "dedicated node of user1, pod of user2",
        (tol("dedicated", "user2", NS),),
        [taint("dedicated", "user1", NS)],
        "{dedicated: user1}",
    ),
    ("operator Exists", (tol("foo", effect=NS, operator=EXISTS),), [taint("foo", "bar", NS)], None),
    (
        "multiple tolerations, all taints tolerated",
        (tol("dedicated", "user2", NS), tol("foo", effect=NS, operator=EXISTS)),
        [taint("dedicated", "user2", NS), taint("foo", "bar", NS)],
        None,
    ),
    (
        "non-empty effect doesn't match",
        (tol("foo", "bar", PNS),),
        [taint("foo", "bar", NS)],
        "{foo: bar}",
    ),
    ("empty toleration effect matches any", (tol("foo", "bar"),), [taint("foo", "bar", NS)], None),
    (
        "PreferNoSchedule taints don't filter",
        (tol("dedicated", "user2", NS),),
        [taint("dedicated", "user1", PNS)],
        None,
    ),
    ("no toleration, PreferNoSchedule taint", (), [taint("dedicated", "user1", PNS)], None),
    ("NoExecute taints filter", (), [taint("a", "b", NE)], "{a: b}"),
    (
        "the first untolerated taint is reported",
        (tol("a", "b"),),
        [taint("a", "b", NS), taint("c", "", NE), taint("d", "e", NS)],
        "{c: }",
    ),
    (
        "key-less Exists tolerates everything",
        (Toleration(operator=EXISTS),),
        [taint("a", "b", NS), taint("c", "d", NE)],
        None,
    ),
]


@pytest.mark.parametrize(("name", "tolerations", "taints", "untolerated"), FILTER, ids=[t[0] for t in FILTER])
def test_taint_toleration_filter(name, tolerations, taints, untolerated) -> None:
    got = TaintToleration().filter(CycleState(), pod(tolerations=tolerations), info(node(taints=taints)))
    if untolerated is None:
        assert got.is_success
    else:
        assert got == Status(UU, (f"node(s) had untolerated taint {untolerated}",))


SCORE = [
    (
        "tolerated taints score higher than intolerable ones",
        (tol("foo", "bar", PNS),),
        [[taint("foo", "bar", PNS)], [taint("foo", "blah", PNS)]],
        [100, 0],
    ),
    (
        "all taints tolerated: same score however many",
        (tol("cpu-type", "arm64", PNS), tol("disk-type", "ssd", PNS)),
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 100, 100],
    ),
    (
        "the more intolerable taints, the lower the score",
        (tol("foo", "bar", PNS),),
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 50, 0],
    ),
    (
        "only PreferNoSchedule taints and tolerations count",
        (tol("cpu-type", "arm64", NS), tol("disk-type", "ssd", PNS)),
        [[], [taint("cpu-type", "arm64", NS)], [taint("cpu-type", "arm64", PNS)]],
        [100, 100, 0],
    ),
    (
        "no taints and tolerations: no taints wins",
        (),
        [[], [taint("cpu-type", "arm64", PNS)]],
        [100, 0],
    ),
    ("no node has intolerable taints", (), [[], []], [100, 100]),
]


@pytest.mark.parametrize(("name", "tolerations", "taint_sets", "want"), SCORE, ids=[t[0] for t in SCORE])
def test_taint_toleration_score(name, tolerations, taint_sets, want) -> None:
    plugin, state, p = TaintToleration(), CycleState(), pod(tolerations=tolerations)
    nodes = [info(node(f"node{i}", taints=ts)) for i, ts in enumerate(taint_sets)]
    assert plugin.pre_score(state, p, nodes).is_success
    scores = {n.name: plugin.score(state, p, n) for n in nodes}
    plugin.normalize_score(state, p, scores)
    assert list(scores.values()) == want


# ---- ImageLocality (image_locality_test.go)

MB = 1024 * 1024


def images(*entries: tuple[tuple[str, ...], int]) -> list[ContainerImage]:
    return [ContainerImage(names=names, size_bytes=size * MB) for names, size in entries]


NODE_40_300_2000 = images(
    (("gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"), 40),
    (("gcr.io/300:latest", "gcr.io/300:v1"), 300),
    (("gcr.io/2000:latest",), 2000),
)
NODE_250_10 = images((("gcr.io/250:latest",), 250), (("gcr.io/10:latest", "gcr.io/10:v1"), 10))
NODE_600_40_900 = images((("gcr.io/600:latest",), 600), (("gcr.io/40:latest",), 40), (("gcr.io/900:latest",), 900))
NODE_300_600_900 = images((("gcr.io/300:latest",), 300), (("gcr.io/600:latest",), 600), (("gcr.io/900:latest",), 900))
NODE_4000_30 = images((("gcr.io/4000:latest",), 4000), (("gcr.io/30:latest",), 30))
NODE_20_30_40 = images((("gcr.io/20:latest",), 20), (("gcr.io/30:latest",), 30), (("gcr.io/40:latest",), 40))


def image_pod(*names: str, init: tuple[str, ...] = ()) -> Pod:
    return pod(
        containers=tuple(Container(name=f"c{i}", image=n) for i, n in enumerate(names)),
        init_containers=tuple(Container(name=f"i{i}", image=n) for i, n in enumerate(init)),
    )


LOCALITY = [
    (
        "two images spread on two nodes",
        image_pod("gcr.io/40", "gcr.io/250"),
        [NODE_40_300_2000, NODE_250_10],
        [0, 5],
    ),
    (
        "two images on one node",
        image_pod("gcr.io/40", "gcr.io/300"),
        [NODE_40_300_2000, NODE_250_10],
        [7, 0],
    ),
    (
        "if exceed limit, use limit",
        image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10],
        [100, 0],
    ),
    (
        "exceed limit, with a node without images",
        image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10, []],
        [66, 0, 0],
    ),
    (
        "pod with multiple large images",
        image_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
        [NODE_600_40_900, NODE_300_600_900, []],
        [32, 36, 0],
    ),
    (
        "pod with multiple small images",
        image_pod("gcr.io/30", "gcr.io/40"),
        [NODE_20_30_40, NODE_4000_30],
        [1, 0],
    ),
    (
        "init containers count",
        image_pod("gcr.io/30", init=("gcr.io/300",)),
        [NODE_40_300_2000, NODE_20_30_40],
        [6, 0],
    ),
]


@pytest.mark.parametrize(("name", "p", "node_images", "want"), LOCALITY, ids=[t[0] for t in LOCALITY])
@pytest.mark.parametrize("via_snapshot", [True, False])
def test_image_locality(name, p, node_images, want, via_snapshot) -> None:
    nodes = [info(node(f"node{i}", images=imgs)) for i, imgs in enumerate(node_images)]
    plugin, state = ImageLocality(), CycleState()
    if via_snapshot:
        # the scheduler passes only the feasible nodes to PreScore; the spread is over all
        state.write(SNAPSHOT_STATE_KEY, nodes)
        assert plugin.pre_score(state, p, nodes[:1]).is_success
    else:
        assert plugin.pre_score(state, p, nodes).is_success
    assert [plugin.score(state, p, n) for n in nodes] == want


def test_image_locality_pod_without_containers() -> None:
    ni = info(node(images=NODE_250_10))
    plugin, state, p = ImageLocality(), CycleState(), pod()
    plugin.pre_score(state, p, [ni])
    assert plugin.score(state, p, ni) == 0


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        ("root@" + _digest("root"), "root@" + _digest("root")),
    ],
)
def test_normalized_image_name(given: str, want: str) -> None:
    assert normalized_image_name(given) == want
