"""PodTopologySpread, vectorized (`kubus.plugins`) and one node at a time (`kubus_reference`).

kube's podtopologyspread filtering_test.go (TestSingleConstraint, TestMultipleConstraints) and
scoring_test.go (TestPodTopologySpreadScore, TestPreScoreSkip) tables run against both forms,
with kube's expected codes and normalized scores; then what kubus adds (reasons and their order,
matchLabelKeys, AddPod/RemovePod, placement_affects, queueing hints, args, manifest validation),
and hypothesis checks that both forms agree on random clusters, alone and inside the schedulers
(batches included).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from builders import labels_of, make_node, make_pod
from hypothesis import given, settings
from hypothesis import strategies as st
from support import without_post_filter

from kubus.api.errors import ManifestError
from kubus.api.manifests import parse_pod
from kubus.api.objects import (
    CPU,
    PODS,
    Affinity,
    Container,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
)
from kubus.framework.config import ConfigError, DefaultingType, PodTopologySpreadArgs, load_config
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.interface import ALL_ROWS, FilterResult
from kubus.framework.queueing_hints import NODE_LOST, QueueingHint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import in_tree_registry
from kubus.plugins._gomath import go_log
from kubus.plugins.pod_topology_spread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)
from kubus_reference import ReferenceScheduler, reference_profile
from kubus_reference.pod_topology_spread import PodTopologySpread as RefPodTopologySpread

IN, NOT_IN, EXISTS = SelectorOperator.IN, SelectorOperator.NOT_IN, SelectorOperator.EXISTS
DNS, SA = "DoNotSchedule", "ScheduleAnyway"
HOST = "kubernetes.io/hostname"
OK, U, UU = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
REASON = {U: ERR_REASON_CONSTRAINTS_NOT_MATCH, UU: ERR_REASON_NODE_LABEL_NOT_MATCH}
TAINTS = (Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE),)


def exists(key: str) -> LabelSelector:
    return LabelSelector(match_expressions=(LabelSelectorRequirement(key, EXISTS),))


FOO, BAR = exists("foo"), exists("bar")


def spread(
    max_skew: int,
    key: str,
    when: str,
    selector: LabelSelector | None,
    min_domains: int | None = None,
    affinity_policy: str | None = None,
    taints_policy: str | None = None,
    match_label_keys: tuple[str, ...] = (),
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        max_skew, key, when, selector, min_domains, affinity_policy, taints_policy, match_label_keys
    )


def affinity_in(key: str, *values: str) -> Affinity:
    term = NodeSelectorTerm((NodeSelectorRequirement(key, IN, values),))
    return Affinity(node_affinity=NodeAffinity(required=NodeSelector((term,))))


def affinity_not_in(key: str, *values: str) -> Affinity:
    term = NodeSelectorTerm((NodeSelectorRequirement(key, NOT_IN, values),))
    return Affinity(node_affinity=NodeAffinity(required=NodeSelector((term,))))


def pod(
    name: str,
    *labels: str,
    node: str = "",
    ns: str = "default",
    spreads: tuple[TopologySpreadConstraint, ...] = (),
    node_selector: dict[str, str] | None = None,
    affinity: Affinity | None = None,
    tolerations: tuple[Toleration, ...] = (),
    terminating: bool = False,
) -> Pod:
    """A pod; each of `labels` is `key` (value "") or `key=value`; `terminating`: kube's
    st.MakePod().Terminating() (a deletionTimestamp)."""
    return make_pod(
        name,
        namespace=ns,
        uid=f"{ns}/{name}",
        labels=labels_of(*labels),
        deleted=1_700_000_000.0 if terminating else None,
        node_name=node,
        spread=spreads,
        node_selector=node_selector,
        affinity=affinity,
        tolerations=tolerations,
    )


def node(name: str, taints: tuple[Taint, ...] = (), **labels: str) -> Node:
    return make_node(name, labels=labels, taints=taints)


def zn(name: str, zone: str, taints: tuple[Taint, ...] = (), **labels: str) -> Node:
    """A node with `zone` and `node` labels (kube's test nodes)."""
    return node(name, taints, zone=zone, node=name, **labels)


def _host_node(name: str, **labels: str) -> Node:
    """A node with the hostname label (kube's score test nodes)."""
    return Node(ObjectMeta(name=name, namespace="", labels={HOST: name, **labels}))


def foo_pods(counts: dict[str, int], label: str = "foo") -> list[Pod]:
    """`counts[node]` pods labelled `label` on each node."""
    return [pod(f"p-{n}{i}", label, node=n) for n, c in counts.items() for i in range(c)]


# ---- running both forms --------------------------------------------------------------------------


def table_of(nodes: list[Node], pods: list[Pod], seed: int = 0) -> NodeTable:
    table = NodeTable(seed=seed, capacity=4)
    table.add_nodes(nodes)
    for p in pods:
        table.assume(PodInfo.of(p), p.spec.node_name)
    return table


def infos_of(nodes: list[Node], pods: list[Pod]) -> list[NodeInfo]:
    infos = {n.name: NodeInfo(n) for n in nodes}
    for p in pods:
        infos[p.spec.node_name].add_pod(PodInfo.of(p))
    return list(infos.values())


Verdict = tuple[Code, str] | None
"""None: the node passes; else the node's one code and reason."""


def verdicts(result: FilterResult, table: NodeTable, rows: Any = ALL_ROWS) -> dict[str, Verdict]:
    index = np.arange(table.rows)[rows] if isinstance(rows, slice) else np.asarray(rows)
    out: dict[str, Verdict] = {}
    for i, row in enumerate(index):
        name = table.node_info(int(row)).name
        if result.passed[i]:
            assert not any(r.mask[i] for r in result.rejections)
            out[name] = None
            continue
        hits = [(r.code, r.reason) for r in result.rejections if r.mask[i]]
        assert len(hits) == 1, hits
        out[name] = hits[0]
    return out


def vec_filter(p: Pod, nodes: list[Node], pods: list[Pod], args: Any = None) -> dict[str, Verdict]:
    table = table_of(nodes, pods)
    plugin = PodTopologySpread(args)
    state = CycleState()
    _, status = plugin.pre_filter(state, p, table)
    if status.is_skip:
        return dict.fromkeys((n.name for n in nodes), None)
    assert status.is_success
    got = verdicts(plugin.filter(state, p, table.view(), ALL_ROWS), table)
    # any subset of rows, in any order, gets the same answers
    rows = np.array(sorted(table.row_of.values(), reverse=True), dtype=np.intp)
    assert verdicts(plugin.filter(state, p, table.view(), rows), table, rows) == got
    return got


def ref_filter(p: Pod, nodes: list[Node], pods: list[Pod], args: Any = None) -> dict[str, Verdict]:
    infos = infos_of(nodes, pods)
    plugin = RefPodTopologySpread(args)
    state = CycleState()
    state.write(SNAPSHOT_STATE_KEY, infos)
    _, status = plugin.pre_filter(state, p, infos)
    if status.is_skip:
        return dict.fromkeys((n.name for n in nodes), None)
    assert status.is_success
    out: dict[str, Verdict] = {}
    for info in infos:
        s = plugin.filter(state, p, info)
        out[info.name] = None if s.is_success else (s.code, s.message())
    return out


def codes(got: dict[str, Verdict]) -> dict[str, Code]:
    return {name: OK if v is None else v[0] for name, v in got.items()}


def vec_scores(
    p: Pod, nodes: list[Node], failed: list[Node], pods: list[Pod], args: Any = None
) -> tuple[Status, dict[str, int], dict[str, int]]:
    """(PreScore status, raw scores, normalized scores) over `nodes` (the feasible ones)."""
    table = table_of(nodes + failed, pods)
    plugin = PodTopologySpread(args)
    state = CycleState()
    rows = np.array([table.row_of[n.name] for n in nodes], dtype=np.intp)
    status = plugin.pre_score_feasible(state, p, table, rows)
    if not status.is_success:
        return status, {}, {}
    raw = plugin.score(state, p, table.view(), rows)
    norm = plugin.normalize_score(state, p, np, raw)
    names = [n.name for n in nodes]
    return status, dict(zip(names, map(int, raw), strict=True)), dict(zip(names, map(int, norm), strict=True))


def ref_scores(
    p: Pod, nodes: list[Node], failed: list[Node], pods: list[Pod], args: Any = None
) -> tuple[Status, dict[str, int], dict[str, int]]:
    infos = infos_of(nodes + failed, pods)
    feasible = [i for i in infos if i.name in {n.name for n in nodes}]
    plugin = RefPodTopologySpread(args)
    state = CycleState()
    state.write(SNAPSHOT_STATE_KEY, infos)
    status = plugin.pre_score(state, p, feasible)
    if not status.is_success:
        return status, {}, {}
    raw = {i.name: plugin.score(state, p, i) for i in feasible}
    norm = dict(raw)
    plugin.normalize_score(state, p, norm)
    return status, raw, norm


# ---- Filter: kube's TestSingleConstraint ----------------------------------------------------------

FOUR = [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")]
A, B, X, Y = "node-a", "node-b", "node-x", "node-y"


def _codes(a: Code, b: Code, x: Code, y: Code) -> dict[str, Code]:
    return {A: a, B: b, X: x, Y: y}


@dataclass
class FilterCase:
    name: str
    pod: Pod
    nodes: list[Node]
    pods: list[Pod]
    want: dict[str, Code]


def _fp(*spreads: TopologySpreadConstraint, labels: tuple[str, ...] = ("foo",), **kw: Any) -> Pod:
    return pod("p", *labels, spreads=spreads, **kw)


SINGLE = [
    FilterCase("no existing pods", _fp(spread(1, "zone", DNS, FOO)), FOUR, [], _codes(OK, OK, OK, OK)),
    FilterCase(
        "no existing pods, incoming pod doesn't match itself",
        _fp(spread(1, "zone", DNS, BAR)),
        FOUR,
        [],
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "existing pods in a different namespace do not count",
        _fp(spread(1, "zone", DNS, FOO)),
        FOUR,
        [pod("p-a1", "foo", node=A, ns="ns1"), pod("p-b1", "foo", node=A, ns="ns2"), *foo_pods({X: 1, Y: 1})],
        _codes(OK, OK, U, U),
    ),
    FilterCase(
        "existing pods do not match null selector",
        _fp(spread(1, "zone", DNS, None)),
        FOUR,
        foo_pods({X: 1, Y: 1}),
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "pods spread across zones as 3/3, all nodes fit",
        _fp(spread(1, "zone", DNS, FOO)),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        _fp(spread(1, "zone", DNS, FOO)),
        [zn(A, "zone1"), node(B, zon="zone1", node=B), zn(X, "zone2"), zn(Y, "zone2")],
        foo_pods({A: 1, B: 1, X: 1, Y: 1}),
        _codes(OK, UU, U, U),
    ),
    FilterCase(
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        _fp(spread(1, "rack", DNS, FOO)),
        [zn(A, "zone1"), zn(X, "zone2")],
        [],
        {A: UU, X: UU},
    ),
    FilterCase(
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        _fp(spread(1, "node", DNS, FOO)),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        _fp(spread(2, "node", DNS, FOO)),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(U, OK, OK, U),
    ),
    FilterCase(
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        _fp(spread(1, "node", DNS, FOO), labels=("bar",)),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(U, OK, OK, U),
    ),
    FilterCase(
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        _fp(spread(1, "node", DNS, FOO), affinity=affinity_in("node", A, Y)),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(OK, OK, OK, U),
    ),
    FilterCase(
        "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
        _fp(spread(1, "zone", DNS, FOO), affinity=affinity_not_in("node", B)),
        FOUR,
        foo_pods({B: 2, Y: 1}),
        _codes(OK, OK, U, U),
    ),
    FilterCase(
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains",
        _fp(spread(2, "node", DNS, FOO, min_domains=4)),
        [node("node-a", node="node-a"), node("node-b", node="node-b"), node("node-c", node="node-c")],
        foo_pods({"node-a": 2, "node-b": 2, "node-c": 1}),
        {"node-a": U, "node-b": U, "node-c": OK},
    ),
    FilterCase(
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains",
        _fp(spread(2, "node", DNS, FOO, min_domains=2)),
        [node("node-a", node="node-a"), node("node-b", node="node-b"), node("node-c", node="node-c")],
        foo_pods({"node-a": 2, "node-b": 2, "node-c": 1}),
        {"node-a": OK, "node-b": OK, "node-c": OK},
    ),
    FilterCase(
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains",
        _fp(spread(2, "zone", DNS, FOO, min_domains=3)),
        FOUR,
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains",
        _fp(spread(2, "zone", DNS, FOO, min_domains=1)),
        FOUR,
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "NodeAffinityPolicy honored with labelSelectors",
        _fp(spread(1, "node", DNS, FOO), node_selector={"foo": ""}),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "NodeAffinityPolicy ignored with labelSelectors",
        _fp(spread(1, "node", DNS, FOO, affinity_policy="Ignore"), node_selector={"foo": ""}),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "NodeAffinityPolicy honored with nodeAffinity",
        _fp(spread(1, "node", DNS, FOO), affinity=affinity_in("foo", "")),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "NodeAffinityPolicy ignored with nodeAffinity",
        _fp(spread(1, "node", DNS, FOO, affinity_policy="Ignore"), affinity=affinity_in("foo", "")),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "NodeTaintsPolicy honored",
        _fp(spread(1, "node", DNS, FOO, taints_policy="Honor")),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, TAINTS, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "NodeTaintsPolicy ignored",
        _fp(spread(1, "node", DNS, FOO)),
        [node(A, node=A, foo=""), node(B, node=B, foo=""), node(X, node=X, foo=""), node(Y, TAINTS, node=Y)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "terminating Pods should be excluded",
        _fp(spread(1, "node", DNS, FOO)),
        [node(A, node=A), node(B, node=B)],
        [pod("p-a", "foo", node=A, terminating=True), pod("p-b", "foo", node=B)],
        {A: OK, B: U},
    ),
]

# ---- Filter: kube's TestMultipleConstraints -------------------------------------------------------

ZONE_NODE_FOO = (spread(1, "zone", DNS, FOO), spread(1, "node", DNS, FOO))
ZONE_FOO_NODE_BAR = (spread(1, "zone", DNS, FOO), spread(1, "node", DNS, BAR))
FOO_NODES = [zn(A, "zone1", foo=""), zn(B, "zone1", foo=""), zn(X, "zone2", foo="")]

MULTIPLE = [
    FilterCase(
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        _fp(*ZONE_NODE_FOO),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 3}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        _fp(*ZONE_NODE_FOO),
        FOUR,
        foo_pods({A: 2, B: 1, Y: 4}),
        _codes(U, U, U, U),
    ),
    FilterCase(
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        _fp(*ZONE_FOO_NODE_BAR, labels=("foo", "bar")),
        FOUR,
        [pod("p-a1", "foo", node=A), pod("p-y1", "bar", node=Y)],
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        _fp(*ZONE_FOO_NODE_BAR, labels=("foo", "bar")),
        FOUR,
        [pod("p-a1", "foo", node=A), pod("p-x1", "bar", node=X), pod("p-y1", "bar", node=Y)],
        _codes(U, U, U, U),
    ),
    FilterCase(
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        _fp(*ZONE_FOO_NODE_BAR, labels=("foo", "bar")),
        FOUR,
        [
            pod("p-a1", "foo", node=A),
            pod("p-a2", "foo", "bar", node=A),
            pod("p-y1", "foo", node=Y),
            pod("p-y2", "foo", "bar", node=Y),
            pod("p-y3", "foo", node=Y),
        ],
        _codes(U, OK, U, U),
    ),
    FilterCase(
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
        _fp(*ZONE_FOO_NODE_BAR, labels=("bar",)),
        FOUR,
        [pod("p-a1", "foo", node=A), pod("p-x1", "bar", node=X), pod("p-y1", "bar", node=Y)],
        _codes(OK, OK, U, U),
    ),
    FilterCase(
        "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
        _fp(*ZONE_NODE_FOO),
        [zn(A, "zone1"), zn(B, "zone1"), node(X, zone="zone2"), zn(Y, "zone2")],
        [pod("p-a1", "foo", node=A), pod("p-y3", "foo", node=Y)],
        _codes(U, OK, UU, U),
    ),
    FilterCase(
        "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
        _fp(
            spread(1, "zone", DNS, FOO),
            spread(1, "node", DNS, FOO, affinity_policy="Ignore"),
            node_selector={"foo": ""},
        ),
        [*FOO_NODES, zn(Y, "zone2")],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
        _fp(spread(1, "zone", DNS, FOO, taints_policy="Honor"), spread(1, "node", DNS, FOO)),
        [*FOO_NODES, zn(Y, "zone2", TAINTS)],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
    FilterCase(
        "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
        _fp(*ZONE_NODE_FOO, node_selector={"foo": ""}),
        [zn(A, "zone1", foo=""), zn(B, "zone1"), zn(X, "zone2", foo=""), zn(Y, "zone2", TAINTS, foo="")],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, OK, OK, U),
    ),
    FilterCase(
        "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
        _fp(
            spread(1, "zone", DNS, FOO, taints_policy="Honor"),
            spread(1, "node", DNS, FOO, affinity_policy="Ignore"),
            node_selector={"foo": ""},
        ),
        [zn(A, "zone1", foo=""), zn(B, "zone1"), zn(X, "zone2", foo=""), zn(Y, "zone2", TAINTS, foo="")],
        foo_pods({A: 1, B: 1, Y: 1}),
        _codes(U, U, OK, U),
    ),
]

# ---- Filter: what kubus adds ----------------------------------------------------------------------

MORE_FILTER = [
    FilterCase(
        "an empty selector counts every pod of the namespace (kubernetes/kubernetes#141340)",
        _fp(spread(1, "zone", DNS, LabelSelector())),
        FOUR,
        [pod("p-a1", "x", node=A), pod("p-b1", node=B), pod("p-y1", "y", node=Y, ns="other")],
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "matchLabelKeys: only the pods with the pod's own value count",
        _fp(spread(1, "zone", DNS, FOO, match_label_keys=("rev",)), labels=("foo", "rev=2")),
        FOUR,
        [pod("p-a1", "foo", "rev=1", node=A), pod("p-a2", "foo", "rev=1", node=A), pod("p-y1", "foo", "rev=2", node=Y)],
        _codes(OK, OK, U, U),
    ),
    FilterCase(
        "matchLabelKeys: a key the pod lacks is ignored",
        _fp(spread(1, "zone", DNS, FOO, match_label_keys=("rev",))),
        FOUR,
        [pod("p-a1", "foo", "rev=1", node=A), pod("p-a2", "foo", "rev=1", node=A), pod("p-y1", "foo", "rev=2", node=Y)],
        _codes(U, U, OK, OK),
    ),
    FilterCase(
        "matchLabelKeys on a null selector: still nothing counts",
        _fp(spread(1, "zone", DNS, None, match_label_keys=("foo",))),
        FOUR,
        foo_pods({A: 3}),
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "one reason per node: the first constraint's skew before the second's missing label",
        _fp(spread(1, "zone", DNS, FOO), spread(1, "rack", DNS, FOO)),
        [zn(A, "zone1", rack="r1"), zn(B, "zone1"), zn(X, "zone2", rack="r2")],
        foo_pods({A: 1, B: 1}),
        {A: U, B: U, X: OK},
    ),
    FilterCase(
        "one reason per node: the first constraint's missing label before the second's skew",
        _fp(spread(1, "rack", DNS, FOO), spread(1, "zone", DNS, FOO)),
        [zn(A, "zone1", rack="r1"), zn(B, "zone1"), zn(X, "zone2", rack="r2")],
        foo_pods({A: 1, B: 1}),
        {A: U, B: UU, X: OK},
    ),
    FilterCase(
        "nodes without every topology key do not count, in any domain",
        _fp(spread(1, "zone", DNS, FOO), spread(5, "rack", DNS, FOO)),
        [zn(A, "zone1", rack="r1"), zn(B, "zone1"), zn(X, "zone2", rack="r2")],
        foo_pods({B: 4}),
        {A: OK, B: UU, X: OK},
    ),
    FilterCase(
        "a domain with no eligible node is not a domain: minDomains sees one",
        _fp(spread(1, "zone", DNS, FOO, min_domains=2), node_selector={"pool": "a"}),
        [zn(A, "zone1", pool="a"), zn(X, "zone2")],
        foo_pods({A: 1}),
        {A: U, X: OK},
    ),
    FilterCase(
        "soft constraints do not filter",
        _fp(spread(1, "zone", SA, FOO)),
        FOUR,
        foo_pods({A: 5}),
        _codes(OK, OK, OK, OK),
    ),
    FilterCase(
        "an untolerated NoExecute taint counts for Honor; a tolerated one does not exclude",
        _fp(
            spread(1, "node", DNS, FOO, taints_policy="Honor"),
            tolerations=(Toleration("node.kubernetes.io/unschedulable", TolerationOperator.EXISTS),),
        ),
        [node(A, node=A), node(B, TAINTS, node=B), node(X, (Taint("k", "v", TaintEffect.NO_EXECUTE),), node=X)],
        foo_pods({A: 1, X: 1}),
        {A: U, B: OK, X: OK},
    ),
]


@pytest.mark.parametrize("case", SINGLE + MULTIPLE + MORE_FILTER, ids=lambda c: c.name)
def test_filter(case: FilterCase) -> None:
    vec = vec_filter(case.pod, case.nodes, case.pods)
    ref = ref_filter(case.pod, case.nodes, case.pods)
    assert codes(vec) == case.want
    assert vec == ref
    for verdict in vec.values():
        assert verdict is None or verdict[1] == REASON[verdict[0]]


def test_pre_filter_skips_a_pod_without_hard_constraints() -> None:
    for p in (pod("p", "foo"), pod("p", "foo", spreads=(spread(1, "zone", SA, FOO),))):
        table = table_of(FOUR, [])
        state = CycleState()
        assert PodTopologySpread().pre_filter(state, p, table) == (None, Status.skip())
        infos = infos_of(FOUR, [])
        assert RefPodTopologySpread().pre_filter(CycleState(), p, infos) == (None, Status.skip())


def test_filter_without_pre_filter() -> None:
    """kube errors; kubus computes what PreFilter would have stored (vectorized) or errs (nodewise)."""
    p = _fp(spread(1, "node", DNS, FOO))
    table = table_of(FOUR, foo_pods({A: 2, B: 1, Y: 3}))
    got = verdicts(PodTopologySpread().filter(CycleState(), p, table.view(), ALL_ROWS), table)
    assert codes(got) == _codes(U, U, OK, U)
    status = RefPodTopologySpread().filter(CycleState(), p, NodeInfo(FOUR[0]))
    assert status.code is Code.ERROR


# ---- AddPod / RemovePod (kube's TestPreFilterStateAddPod / RemovePod) ----------------------------


@pytest.mark.parametrize("form", ["vectorized", "reference"])
def test_add_and_remove_pod(form: str) -> None:
    p = _fp(spread(1, "zone", DNS, FOO), spread(1, "node", DNS, FOO), node_selector={"foo": ""})
    nodes = [zn(A, "zone1", foo=""), zn(B, "zone1", foo=""), zn(X, "zone2", foo=""), zn(Y, "zone2")]
    pods = foo_pods({A: 1, X: 1})
    state = CycleState()
    if form == "vectorized":
        table = table_of(nodes, pods)
        plugin: Any = PodTopologySpread()
        plugin.pre_filter(state, p, table)

        def run() -> dict[str, Code]:
            return codes(verdicts(plugin.filter(state, p, table.view(), ALL_ROWS), table))

        info = {n.name: table.node_info(n.name) for n in nodes}
    else:
        infos = infos_of(nodes, pods)
        plugin = RefPodTopologySpread()
        plugin.pre_filter(state, p, infos)

        def run() -> dict[str, Code]:
            return {i.name: plugin.filter(state, p, i).code for i in infos}

        info = {i.name: i for i in infos}
    assert run() == _codes(U, OK, U, OK)
    before = state.clone()
    # a matching pod on node-b: zone1 2 / zone2 1, node 1/1/1/-
    assert plugin.add_pod(state, p, PodInfo.of(pod("new", "foo", node=B)), info[B]).is_success
    assert run() == _codes(U, U, OK, OK)
    # on node-y, which the pod's nodeSelector excludes (Honor): nothing changes
    assert plugin.add_pod(state, p, PodInfo.of(pod("y", "foo", node=Y)), info[Y]).is_success
    assert run() == _codes(U, U, OK, OK)
    # other namespace, or not selected: nothing changes
    assert plugin.add_pod(state, p, PodInfo.of(pod("o", "foo", node=X, ns="other")), info[X]).is_success
    assert plugin.add_pod(state, p, PodInfo.of(pod("n", "bar", node=X)), info[X]).is_success
    assert run() == _codes(U, U, OK, OK)
    assert plugin.remove_pod(state, p, PodInfo.of(pod("new", "foo", node=B)), info[B]).is_success
    assert plugin.remove_pod(state, p, PodInfo.of(pod("p-a0", "foo", node=A)), info[A]).is_success
    assert run() == _codes(OK, OK, U, U)
    # the clone taken before is untouched
    state = before
    assert run() == _codes(U, OK, U, OK)


# ---- Score: kube's TestPodTopologySpreadScore -----------------------------------------------------


@dataclass
class ScoreCase:
    name: str
    pod: Pod
    nodes: list[Node]
    pods: list[Pod]
    want: dict[str, int]
    failed: list[Node] = field(default_factory=list)


AB = [_host_node("node-a"), _host_node("node-b")]
ABCD = [_host_node(n) for n in ("node-a", "node-b", "node-c", "node-d")]
C, D = "node-c", "node-d"
SPREAD_2103 = foo_pods({A: 2, B: 1, D: 3})
SPREAD_4321 = foo_pods({A: 4, B: 3, C: 2, D: 1})
SPREAD_4213 = foo_pods({A: 4, B: 2, X: 1, Y: 3})
ZONE_NODES = [
    _host_node(A, zone="zone1"),
    _host_node(B, zone="zone1"),
    _host_node(X, zone="zone2"),
    _host_node(Y, zone="zone2"),
]
POLICY_NODES = [node(A, node=A, foo=""), node(B, node=B, foo=""), node(C, node=C)]
TAINT_NODES = [node(A, node=A), node(B, node=B), node(C, TAINTS, node=C)]


def _sp(*spreads: TopologySpreadConstraint, labels: tuple[str, ...] = ("foo",), **kw: Any) -> Pod:
    return pod("p", *labels, spreads=spreads, **kw)


HOST_FOO = spread(1, HOST, SA, FOO)
MLK_PODS = [
    pod("p-a1", "foo", node=A),
    pod("p-b1", "foo", "bar", node=B),
    pod("p-y1", "foo", node=C),
    pod("p-y2", "bar", node=C),
]
DIFFERENT = [
    pod("p-a1", "foo", node=A),
    pod("p-b1", "foo", "bar", node=B),
    pod("p-y1", "foo", node=Y),
    pod("p-y2", "bar", node=Y),
]

SCORES = [
    ScoreCase("one constraint on node, no existing pods", _sp(HOST_FOO), AB, [], {A: 100, B: 100}),
    ScoreCase(
        "one constraint on node, only one node is candidate",
        _sp(HOST_FOO),
        [_host_node(A)],
        foo_pods({A: 2, B: 1}),
        {A: 100},
        failed=[_host_node(B)],
    ),
    ScoreCase(
        "one constraint on node, all nodes have the same number of matching pods",
        _sp(HOST_FOO),
        AB,
        foo_pods({A: 1, B: 1}),
        {A: 100, B: 100},
    ),
    ScoreCase(
        "one constraint on node, all 4 nodes are candidates",
        _sp(HOST_FOO),
        ABCD,
        SPREAD_2103,
        {A: 20, B: 60, C: 100, D: 0},
    ),
    ScoreCase(
        "one constraint on node, null selector",
        _sp(spread(1, HOST, SA, None)),
        ABCD,
        SPREAD_2103,
        {A: 100, B: 100, C: 100, D: 100},
    ),
    ScoreCase(
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        _sp(spread(2, HOST, SA, FOO)),
        ABCD,
        SPREAD_2103,
        {A: 33, B: 66, C: 100, D: 16},
    ),
    ScoreCase(
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        _sp(spread(3, HOST, SA, FOO)),
        ABCD,
        SPREAD_4321,
        {A: 44, B: 66, C: 77, D: 100},
    ),
    ScoreCase(
        "one constraint on node, 3 out of 4 nodes are candidates",
        _sp(HOST_FOO),
        [_host_node(A), _host_node(B), _host_node(X)],
        SPREAD_4213,
        {A: 33, B: 83, X: 100},
        failed=[_host_node(Y)],
    ),
    ScoreCase(
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
        _sp(HOST_FOO),
        [_host_node(A), node(B, n=B), _host_node(X)],
        SPREAD_4213,
        {A: 16, B: 0, X: 100},
        failed=[_host_node(Y)],
    ),
    ScoreCase(
        "one constraint on zone, 3 out of 4 nodes are candidates",
        _sp(spread(1, "zone", SA, FOO)),
        ZONE_NODES[:3],
        SPREAD_4213,
        {A: 75, B: 75, X: 100},
        failed=ZONE_NODES[3:],
    ),
    ScoreCase(
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        _sp(spread(1, "zone", SA, FOO), HOST_FOO),
        [ZONE_NODES[0], ZONE_NODES[2]],
        foo_pods({A: 2, B: 1, X: 2, Y: 4}),
        {A: 100, X: 63},
        failed=[ZONE_NODES[1], ZONE_NODES[3]],
    ),
    ScoreCase(
        "two Constraints on zone and node, with different labelSelectors",
        _sp(spread(1, "zone", SA, FOO), spread(1, HOST, SA, BAR), labels=("foo", "bar")),
        ZONE_NODES,
        DIFFERENT,
        {A: 60, B: 20, X: 100, Y: 60},
    ),
    ScoreCase(
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        _sp(spread(1, "zone", SA, FOO), spread(1, HOST, SA, BAR), labels=("foo", "bar")),
        ZONE_NODES,
        [pod("p-b1", "bar", node=B), pod("p-x1", "foo", node=X), pod("p-y1", "foo", "bar", node=Y)],
        {A: 100, B: 60, X: 40, Y: 0},
    ),
    ScoreCase(
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
        _sp(spread(1, "zone", SA, FOO), spread(1, HOST, SA, BAR), labels=("foo", "bar")),
        ZONE_NODES[:3],
        DIFFERENT,
        {A: 50, B: 25, X: 100},
        failed=ZONE_NODES[3:],
    ),
    ScoreCase(
        "existing pods in a different namespace do not count",
        _sp(HOST_FOO),
        AB,
        [pod("p-a1", "foo", node=A, ns="ns1"), *foo_pods({A: 1, B: 2})],
        {A: 100, B: 33},
    ),
    ScoreCase(
        "terminating Pods should be excluded",
        _sp(HOST_FOO),
        AB,
        [pod("p-a", "foo", node=A, terminating=True), pod("p-b", "foo", node=B)],
        {A: 100, B: 0},
    ),
    ScoreCase(
        "minDomains has no effect when ScheduleAnyway",
        _sp(spread(2, "node", SA, FOO, min_domains=10)),
        [node(n, node=n) for n in (A, B, C)],
        foo_pods({A: 2, B: 2, C: 1}),
        {A: 75, B: 75, C: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy honored with labelSelectors",
        _sp(spread(1, "node", SA, FOO), node_selector={"foo": ""}),
        POLICY_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 0, B: 33, C: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy ignored with labelSelectors",
        _sp(spread(1, "node", SA, FOO, affinity_policy="Ignore"), node_selector={"foo": ""}),
        POLICY_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 66, B: 100, C: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy honored with nodeAffinity",
        _sp(spread(1, "node", SA, FOO), affinity=affinity_in("foo", "")),
        POLICY_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 0, B: 33, C: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy ignored with nodeAffinity",
        _sp(spread(1, "node", SA, FOO, affinity_policy="Ignore"), affinity=affinity_in("foo", "")),
        POLICY_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 66, B: 100, C: 100},
    ),
    ScoreCase(
        "NodeTaintsPolicy honored",
        _sp(spread(1, "node", SA, FOO, taints_policy="Honor")),
        TAINT_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 0, B: 33, C: 100},
    ),
    ScoreCase(
        "NodeTaintsPolicy ignored",
        _sp(spread(1, "node", SA, FOO)),
        TAINT_NODES,
        foo_pods({A: 2, B: 1, C: 1}),
        {A: 66, B: 100, C: 100},
    ),
    ScoreCase(
        # kube's "matchLabelKeys ignored when feature gate disabled" gives 60/20/60/100; the gate
        # is on by default since 1.27 and kubus always has it on: no existing pod has baz
        "matchLabelKeys always apply",
        _sp(
            spread(1, "zone", SA, FOO, match_label_keys=("baz",)),
            spread(1, HOST, SA, BAR, match_label_keys=("baz",)),
            labels=("foo", "bar", "baz"),
        ),
        [ZONE_NODES[0], ZONE_NODES[1], _host_node(C, zone="zone2"), _host_node(D, zone="zone2")],
        MLK_PODS,
        {A: 100, B: 100, C: 100, D: 100},
    ),
    ScoreCase(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        _sp(
            spread(1, "zone", SA, LabelSelector(), match_label_keys=("foo",)),
            spread(1, HOST, SA, LabelSelector(), match_label_keys=("bar",)),
            labels=("foo", "bar"),
        ),
        [ZONE_NODES[0], ZONE_NODES[1], _host_node(C, zone="zone2"), _host_node(D, zone="zone2")],
        MLK_PODS,
        {A: 60, B: 20, C: 60, D: 100},
    ),
    ScoreCase(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        _sp(
            spread(1, "zone", SA, FOO),
            spread(1, HOST, SA, BAR, match_label_keys=("baz",)),
            labels=("foo", "bar", "baz"),
        ),
        [ZONE_NODES[0], ZONE_NODES[1], _host_node(C, zone="zone2"), _host_node(D, zone="zone2")],
        [
            pod("p-a1", "foo", node=A),
            pod("p-b1", "foo", "bar", "baz", node=B),
            pod("p-c1", "foo", node=C),
            pod("p-c2", "bar", node=C),
            pod("p-d3", "bar", "baz", node=C),
        ],
        {A: 60, B: 20, C: 60, D: 100},
    ),
    # what kubus adds
    ScoreCase(
        # kube's Legend "X/?Y?": a node without the key is ignored (score 0, the lowest), its
        # pods counted nowhere, and left out of the domains and of NormalizeScore's max and min
        "one constraint on zone, one node doesn't have the zone",
        _sp(spread(1, "zone", SA, FOO)),
        [*ZONE_NODES[:2], _host_node(X), _host_node(Y, zone="zone2")],
        foo_pods({A: 2, B: 1, X: 3, Y: 1}),
        {A: 25, B: 25, X: 0, Y: 100},
    ),
    ScoreCase(
        "two constraints on zone and node, one node doesn't have the zone",
        _sp(spread(1, "zone", SA, FOO), HOST_FOO),
        [*ZONE_NODES[:2], _host_node(X), _host_node(Y, zone="zone2")],
        foo_pods({A: 2, B: 1, X: 3, Y: 1}),
        {A: 42, B: 57, X: 0, Y: 100},
    ),
    ScoreCase(
        "NodeTaintsPolicy honored, one node doesn't have the zone",
        _sp(spread(1, "zone", SA, FOO, taints_policy="Honor")),
        [*ZONE_NODES[:2], _host_node(X), node(Y, TAINTS, **{HOST: Y, "zone": "zone2"})],
        foo_pods({A: 2, B: 1, X: 3, Y: 1}),
        {A: 0, B: 0, X: 0, Y: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy ignored, one node doesn't have the zone",
        _sp(spread(1, "zone", SA, FOO, affinity_policy="Ignore"), node_selector={"zone": "zone1"}),
        [*ZONE_NODES[:2], _host_node(X), _host_node(Y, zone="zone2")],
        foo_pods({A: 2, B: 1, X: 3, Y: 1}),
        {A: 25, B: 25, X: 0, Y: 100},
    ),
    ScoreCase(
        "NodeAffinityPolicy honored, one node doesn't have the zone",
        _sp(spread(1, "zone", SA, FOO), node_selector={"zone": "zone1"}),
        [*ZONE_NODES[:2], _host_node(X), _host_node(Y, zone="zone2")],
        foo_pods({A: 2, B: 1, X: 3, Y: 1}),
        {A: 0, B: 0, X: 0, Y: 100},
    ),
    ScoreCase(
        "every scored node ignored: all 0",
        _sp(spread(1, "rack", SA, FOO)),
        ABCD,
        SPREAD_2103,
        {A: 0, B: 0, C: 0, D: 0},
    ),
    ScoreCase(
        "an empty selector counts every pod of the namespace",
        _sp(spread(1, HOST, SA, LabelSelector())),
        AB,
        [pod("p-a1", node=A), pod("p-a2", "x", node=A), pod("p-b1", "y", node=B, ns="other")],
        {A: 0, B: 100},
    ),
    ScoreCase(
        "hard constraints do not score",
        _sp(spread(1, HOST, DNS, FOO), spread(1, "zone", SA, BAR)),
        ZONE_NODES,
        SPREAD_4213,
        {A: 100, B: 100, X: 100, Y: 100},
    ),
]


@pytest.mark.parametrize("case", SCORES, ids=lambda c: c.name)
def test_score(case: ScoreCase) -> None:
    vec_status, vec_raw, vec_norm = vec_scores(case.pod, case.nodes, case.failed, case.pods)
    ref_status, ref_raw, ref_norm = ref_scores(case.pod, case.nodes, case.failed, case.pods)
    assert vec_status.is_success and ref_status.is_success
    assert vec_norm == case.want
    assert ref_norm == case.want
    assert vec_raw == ref_raw


def test_one_key_under_both_actions_counts_each_constraint_alone() -> None:
    """The only way two constraints of a pod share a topology key: one DoNotSchedule, one
    ScheduleAnyway (the API rejects a repeated {topologyKey, whenUnsatisfiable}). Filter sees the
    first alone and Score the second, so kube 1.28's maps keyed by {key, value} hold one
    constraint's counts each. Expected values worked out by hand from kube's code: foo pods
    zone1 2, zone2 0; bar pods zone1 0, zone2 3. Filter: 2 + 1 - 0 > 1 in zone1, 0 + 1 - 0 in
    zone2. Score: two zones, weight log(4); zone1 0, zone2 round(3 * 1.386) = 4; normalized
    100 * (4 + 0 - s) / 4."""
    p = _fp(spread(1, "zone", DNS, FOO), spread(1, "zone", SA, BAR))
    pods = foo_pods({A: 2}) + foo_pods({X: 1, Y: 2}, label="bar")
    assert codes(vec_filter(p, FOUR, pods)) == _codes(U, U, OK, OK)
    assert vec_filter(p, FOUR, pods) == ref_filter(p, FOUR, pods)
    vec_status, vec_raw, vec_norm = vec_scores(p, FOUR, [], pods)
    ref_status, ref_raw, ref_norm = ref_scores(p, FOUR, [], pods)
    assert vec_status.is_success and ref_status.is_success
    assert vec_raw == ref_raw == {A: 0, B: 0, X: 4, Y: 4}
    assert vec_norm == ref_norm == {A: 100, B: 100, X: 0, Y: 0}


def test_pre_score_state_node_without_the_zone() -> None:
    """kube's TestPreScoreStateEmptyNodes "node-x doesn't have label zone": node-x is ignored,
    zone1 is the zone constraint's one domain (weight log(1 + 2)), and the hostname constraint
    has the two nodes left (log(2 + 2))."""
    p = _sp(spread(1, "zone", SA, FOO), spread(1, HOST, SA, BAR))
    nodes = [_host_node(A, zone="zone1"), _host_node(B, zone="zone1"), _host_node(X)]
    infos = infos_of(nodes, [])
    plugin, state = RefPodTopologySpread(), CycleState()
    state.write(SNAPSHOT_STATE_KEY, infos)
    assert plugin.pre_score(state, p, infos).is_success
    s = state.read("PreScorePodTopologySpread")
    assert s.ignored_nodes == {X}
    assert s.topology_value_to_pod_counts[0] == {"zone1": 0}
    assert s.topology_normalizing_weight == [go_log(3.0), go_log(4.0)]
    table = table_of(nodes, [])
    vec, vec_state = PodTopologySpread(), CycleState()
    rows = np.array([table.row_of[n.name] for n in nodes], dtype=np.intp)
    assert vec.pre_score_feasible(vec_state, p, table, rows).is_success
    v = vec_state.read("PreScorePodTopologySpread")
    assert {table.node_info(int(r)).name for r in np.flatnonzero(v.ignored)} == {X}


def test_round_halves_away_from_zero_and_go_log() -> None:
    """Score rounds x.5 up as Go's math.Round does, with Go's math.Log (not the C library's,
    which differs for log(3): one domain)."""
    from kubus.plugins._gomath import go_log, go_round
    from kubus_reference import _gomath

    assert go_log(3.0) == 1.0986122886681096 == _gomath.go_log(3.0)
    assert all(go_log(float(n)) == _gomath.go_log(float(n)) for n in range(1, 5000))
    assert list(go_round(np.array([0.5, 1.5, 2.5, 2.4999999999999996, 0.49999999999999994]))) == [1, 2, 3, 2, 0]
    assert [_gomath.go_round(x) for x in (0.5, 1.5, 2.5)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("name", "p", "args"),
    [
        ("the pod doesn't have soft topology spread constraints", pod("p", "foo"), PodTopologySpreadArgs()),
        (
            "only hard constraints",
            pod("p", "foo", spreads=(spread(1, "zone", DNS, FOO),)),
            PodTopologySpreadArgs(defaulting_type=DefaultingType.LIST),
        ),
        (
            # no workload selects the pod: the default selector is empty, the List constraints
            # apply to no pod (kube's own case, with a ReplicaSet: test_default_spreading.py)
            "default constraints without a selecting workload",
            pod("p", "foo=bar", "baz=sup"),
            PodTopologySpreadArgs((spread(2, "planet", SA, None),), DefaultingType.LIST),
        ),
        (
            # no Service selects the pod (kube's "system defaulting, nodes don't have zone, pods
            # match service" scores: test_default_spreading.py)
            "system defaults without a selecting workload",
            pod("p", "foo"),
            PodTopologySpreadArgs(),
        ),
    ],
)
def test_pre_score_skips(name: str, p: Pod, args: PodTopologySpreadArgs) -> None:
    nodes = [_host_node(A, planet="mars", zone="z"), _host_node(B, planet="mars", zone="z")]
    assert vec_scores(p, nodes, [], foo_pods({A: 1}), args)[0] == Status.skip()
    assert ref_scores(p, nodes, [], foo_pods({A: 1}), args)[0] == Status.skip()


def test_pre_score_skips_without_nodes() -> None:
    p = _sp(HOST_FOO)
    table = NodeTable()
    assert PodTopologySpread().pre_score_feasible(CycleState(), p, table, np.empty(0, dtype=np.intp)).is_skip
    assert RefPodTopologySpread().pre_score(CycleState(), p, []).is_skip


def test_default_constraints_without_workloads_apply_to_no_pod() -> None:
    """Without a Service or workload controller selecting the pod (here: none at all), its
    default constraints select nothing and are dropped, as kube drops them (tests/unit/
    test_default_spreading.py has the pods some do select)."""
    args = PodTopologySpreadArgs((spread(1, "zone", DNS, None), spread(1, HOST, SA, None)), DefaultingType.LIST)
    plugin = PodTopologySpread(args)
    p = pod("p", "app=web")
    assert plugin.constraints(p, DNS) == () and plugin.constraints(p, SA) == ()
    assert vec_filter(p, FOUR, foo_pods({A: 4}), args) == dict.fromkeys([A, B, X, Y], None)
    assert ref_filter(p, FOUR, foo_pods({A: 4}), args) == dict.fromkeys([A, B, X, Y], None)
    # the pod's own constraints win over the defaults
    own = pod("p", "foo", spreads=(spread(1, "node", DNS, FOO),))
    assert codes(vec_filter(own, FOUR, foo_pods({A: 1}), args)) == _codes(U, OK, OK, OK)


def test_normalize_score_wants_the_rows_of_pre_score() -> None:
    p = _sp(HOST_FOO)
    table = table_of(ABCD, SPREAD_2103)
    plugin, state = PodTopologySpread(), CycleState()
    plugin.pre_score_feasible(state, p, table, np.array([0, 1, 2], dtype=np.intp))
    with pytest.raises(ValueError, match="NormalizeScore got 4 scores"):
        plugin.normalize_score(state, p, np, np.zeros(4, dtype=np.int64))


# ---- placement_affects and queueing hints ---------------------------------------------------------


def test_placement_affects() -> None:
    plugin = PodTopologySpread()
    p = pod("p", "app=web", spreads=(spread(1, "zone", DNS, exists("app")), spread(1, HOST, SA, exists("tier"))))
    state = CycleState()
    plugin.pre_filter(state, p, table_of(FOUR, []))

    def affects(other: Pod) -> bool:
        return plugin.placement_affects(state, p, PodInfo.of(other))

    assert affects(pod("q", "app=db", node=A))
    assert affects(pod("q", "tier=1", node=A))  # a soft constraint's selector counts too
    assert not affects(pod("q", "other", node=A))
    assert not affects(pod("q", "app=web", node=A, ns="other"))
    # a pod that PreFilter skipped (soft constraints only) is asked all the same
    soft = pod("s", spreads=(spread(1, HOST, SA, exists("tier")),))
    state = CycleState()
    assert plugin.pre_filter(state, soft, table_of(FOUR, []))[1].is_skip
    assert plugin.placement_affects(state, soft, PodInfo.of(pod("q", "tier", node=A)))
    assert not plugin.placement_affects(CycleState(), pod("n", "app"), PodInfo.of(pod("q", "app", node=A)))


def test_events_to_register() -> None:
    events = {e.kind for e in PodTopologySpread().events_to_register()}
    assert events == {
        "pod.bound",
        "pod.finished",
        "pod.deleted",
        "pod.unreserved",
        "node.added",
        "node.updated",
        "node.deleted",
        "node.lost",
    }
    assert all(e.hint is not None for e in PodTopologySpread().events_to_register())


Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
HINT_POD = pod("p", "foo", spreads=(spread(1, "zone", DNS, FOO), spread(1, "node", DNS, BAR)))


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("add a pod that matches", None, pod("q", "foo", node=A), Q),
        ("add a pod that matches the second constraint", None, pod("q", "bar", node=A), Q),
        ("add a pod that doesn't match", None, pod("q", "baz", node=A), SKIP),
        ("add a pod of another namespace", None, pod("q", "foo", node=A, ns="x"), SKIP),
        ("add an unscheduled pod", None, pod("q", "foo"), SKIP),
        ("delete a pod that matches", pod("q", "foo", node=A), None, Q),
        ("delete a pod that doesn't match", pod("q", "baz", node=A), None, SKIP),
        ("update without label change", pod("q", "foo", node=A), pod("q", "foo", node=A), SKIP),
        ("update making a pod match", pod("q", "baz", node=A), pod("q", "foo", node=A), Q),
        ("update changing an irrelevant label", pod("q", "foo", "x=1", node=A), pod("q", "foo", "x=2", node=A), SKIP),
        ("unknown objects", None, None, Q),
    ],
)
def test_hint_pod_change(name: str, old: Pod | None, new: Pod | None, want: QueueingHint) -> None:
    assert PodTopologySpread().is_schedulable_after_pod_change(HINT_POD, old, new) is want


def test_hint_pod_toleration_change_with_taints_policy_honor() -> None:
    honor = pod("p", "foo", spreads=(spread(1, "zone", DNS, FOO, taints_policy="Honor"),))
    ignore = pod("p", "foo", spreads=(spread(1, "zone", DNS, FOO),))
    tolerating = Pod(honor.metadata, PodSpec(tolerations=(Toleration("k", TolerationOperator.EXISTS),)))
    hint = PodTopologySpread().is_schedulable_after_pod_change
    assert hint(honor, honor, tolerating) is Q
    assert hint(ignore, ignore, Pod(ignore.metadata, tolerating.spec)) is SKIP


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("add a node with every key", None, zn("n", "zone1"), Q),
        ("add a node missing a key", None, node("n", zone="zone1"), SKIP),
        ("delete a node with every key", zn("n", "zone1"), None, Q),
        ("delete a node missing a key", node("n", zone="zone1"), None, SKIP),
        ("a node gains the missing key", node("n", zone="zone1"), zn("n", "zone1"), Q),
        ("a node loses a key", zn("n", "zone1"), node("n", zone="zone1"), Q),
        ("a node changes zone", zn("n", "zone1"), zn("n", "zone2"), Q),
        ("a node changes an unrelated label", zn("n", "zone1", x="1"), zn("n", "zone1", x="2"), SKIP),
        ("a node changes taints", zn("n", "zone1"), zn("n", "zone1", TAINTS), Q),
        ("a node missing keys changes taints", node("n", zone="z"), node("n", TAINTS, zone="z"), SKIP),
        ("unknown objects", None, None, Q),
    ],
)
def test_hint_node_change(name: str, old: Node | None, new: Node | None, want: QueueingHint) -> None:
    assert PodTopologySpread().is_schedulable_after_node_change(HINT_POD, old, new) is want


def test_hint_node_lost() -> None:
    hint = next(e.hint for e in PodTopologySpread().events_to_register() if e.kind == NODE_LOST)
    assert hint is not None
    assert hint(HINT_POD, zn("n", "z"), zn("n", "z")) is Q
    assert hint(HINT_POD, node("n", zone="z"), node("n", zone="z")) is SKIP
    assert hint(HINT_POD, None, None) is Q


# ---- args and manifests -------------------------------------------------------------------------

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def pts_args(args: str) -> Any:
    text = HEADER + f"profiles: [{{pluginConfig: [{{name: PodTopologySpread, args: {args}}}]}}]"
    return load_config(text, registry=in_tree_registry()).profiles[0].plugin_args["PodTopologySpread"]


def pts_error(args: str) -> str:
    with pytest.raises(ConfigError) as e:
        pts_args(args)
    msg = str(e.value)
    prefix = 'profile "default-scheduler": pluginConfig[0].args'
    assert msg.startswith(prefix), msg
    return msg[len(prefix) :]


def test_args_defaults() -> None:
    assert pts_args("{}") == PodTopologySpreadArgs((), DefaultingType.SYSTEM)
    assert pts_args("{defaultingType: List}") == PodTopologySpreadArgs((), DefaultingType.LIST)
    assert pts_args("{defaultingType: List, defaultConstraints: []}") == PodTopologySpreadArgs((), DefaultingType.LIST)


def test_args_list() -> None:
    got = pts_args(
        "{defaultingType: List, defaultConstraints: ["
        "{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway},"
        "{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, minDomains: 3,"
        " nodeAffinityPolicy: Ignore, nodeTaintsPolicy: Honor, matchLabelKeys: [pod-template-hash]}]}"
    )
    assert got == PodTopologySpreadArgs(
        (
            spread(1, "topology.kubernetes.io/zone", SA, None),
            spread(2, HOST, DNS, None, 3, "Ignore", "Honor", ("pod-template-hash",)),
        ),
        DefaultingType.LIST,
    )


def test_args_enabled_plugin_gets_default_args() -> None:
    text = HEADER + "profiles: [{plugins: {multiPoint: {enabled: [{name: PodTopologySpread, weight: 2}]}}}]"
    profile = load_config(text, registry=in_tree_registry()).profiles[0]
    assert profile.plugin_args["PodTopologySpread"] == PodTopologySpreadArgs()


C0 = "{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}"


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (
            f"{{defaultConstraints: [{C0}]}}",
            '.defaultingType: invalid value "System": when .defaultConstraints are not empty',
        ),
        (
            f"{{defaultingType: System, defaultConstraints: [{C0}]}}",
            '.defaultingType: invalid value "System": when .defaultConstraints are not empty',
        ),
        ("{defaultingType: Both}", '.defaultingType: unsupported value "Both" (supported: "System", "List")'),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 0, topologyKey: zone, "
            "whenUnsatisfiable: DoNotSchedule}]}",
            ".defaultConstraints[0].maxSkew: invalid value 0: not in valid range (0, inf)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}",
            ".defaultConstraints[0].maxSkew: invalid value 0: not in valid range (0, inf)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]}",
            ".defaultConstraints[0].topologyKey: required: can not be empty",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: 'a b', "
            "whenUnsatisfiable: DoNotSchedule}]}",
            '.defaultConstraints[0].topologyKey: invalid value "a b"',
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone}]}",
            ".defaultConstraints[0].whenUnsatisfiable: required: can not be empty",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Never}]}",
            '.defaultConstraints[0].whenUnsatisfiable: unsupported value "Never" '
            '(supported: "DoNotSchedule", "ScheduleAnyway")',
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}",
            ".defaultConstraints[0].labelSelector: forbidden: constraint must not define a selector, "
            "as they deduced for each pod",
        ),
        (
            f"{{defaultingType: List, defaultConstraints: [{C0}, {C0}]}}",
            '.defaultConstraints[1]: duplicate value "{zone, DoNotSchedule}" (also defaultConstraints[0])',
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Respect}]}",
            '.defaultConstraints[0].nodeTaintsPolicy: unsupported value "Respect" (supported: "Honor", "Ignore")',
        ),
        (
            "{defaultConstraint: []}",
            ': unknown field "defaultConstraint" (known fields: defaultConstraints, defaultingType)',
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: DoNotSchedule, skew: 1}]}",
            '.defaultConstraints[0]: unknown field "skew"',
        ),
    ],
)
def test_args_errors(args: str, want: str) -> None:
    got = pts_error(args)
    assert got.startswith(want), got


POD_HEAD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}


def manifest(**tsc: Any) -> dict[str, Any]:
    base = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    return {**POD_HEAD, "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [{**base, **tsc}]}}


@pytest.mark.parametrize(
    ("tsc", "want"),
    [
        ({"maxSkew": 0}, "maxSkew: must be between 1 and 2147483647"),
        ({"minDomains": 0}, "minDomains: must be between 1 and 2147483647"),
        ({"whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}, "minDomains: can only be set when"),
        ({"matchLabelKeys": ["app"]}, "matchLabelKeys: must not be specified when labelSelector is not set"),
        (
            {"labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev", "app"]},
            'matchLabelKeys[1]: "app" exists in both matchLabelKeys and labelSelector',
        ),
        (
            {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "matchLabelKeys": ["app"]},
            'matchLabelKeys[0]: "app" exists in both matchLabelKeys and labelSelector',
        ),
        ({"labelSelector": {}, "matchLabelKeys": ["not a key"]}, "matchLabelKeys[0]"),
        ({"nodeAffinityPolicy": "Sometimes"}, 'nodeAffinityPolicy: unsupported value "Sometimes"'),
    ],
)
def test_manifest_validation(tsc: dict[str, Any], want: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_pod(manifest(**tsc))
    assert f"spec.topologySpreadConstraints[0].{want}" in str(e.value)


def test_manifest_accepts_match_label_keys_with_a_selector() -> None:
    got = parse_pod(manifest(labelSelector={"matchLabels": {"app": "web"}}, matchLabelKeys=["rev"]))
    (c,) = got.spec.topology_spread_constraints
    assert c.match_label_keys == ("rev",) and c.label_selector == LabelSelector({"app": "web"})


# ---- vectorized == reference, on random clusters -------------------------------------------------

KEYS = ("zone", "rack", HOST)
VALUES = {"zone": ("z1", "z2", "z3"), "rack": ("r1", "r2", "r3", "r4")}
POD_LABELS = {"app": ("web", "db"), "tier": ("1", "2"), "rev": ("a", "b")}
NAMESPACES = ("default", "default", "other")


def random_selector(rng: random.Random) -> LabelSelector | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.2:
        return LabelSelector()
    key = rng.choice(sorted(POD_LABELS))
    op = rng.choice((IN, NOT_IN, EXISTS, SelectorOperator.DOES_NOT_EXIST))
    values = (rng.choice(POD_LABELS[key]),) if op in (IN, NOT_IN) else ()
    extra = {"tier": rng.choice(POD_LABELS["tier"])} if rng.random() < 0.3 else {}
    return LabelSelector(extra, (LabelSelectorRequirement(key, op, values),))


def random_node(rng: random.Random, i: int) -> Node:
    name = f"n{i:02d}"
    labels = {k: rng.choice(v) for k, v in VALUES.items() if rng.random() < 0.85}
    if rng.random() < 0.9:
        labels[HOST] = name
    if rng.random() < 0.5:
        labels["pool"] = rng.choice(("a", "b"))
    taints = tuple(
        t
        for t in (Taint("gpu", "true", TaintEffect.NO_SCHEDULE), Taint("x", "", TaintEffect.NO_EXECUTE))
        if rng.random() < 0.2
    )
    return Node(
        ObjectMeta(name=name, namespace="", labels=labels),
        NodeSpec(taints=taints),
        NodeStatus(capacity={CPU: 64000, PODS: 110}, allocatable={CPU: 64000, PODS: 110}),
    )


def random_labels(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(v) for k, v in POD_LABELS.items() if rng.random() < 0.6}


def random_pod(rng: random.Random, name: str, node_name: str = "") -> Pod:
    spreads = []
    used: set[tuple[str, str]] = set()
    for _ in range(rng.randint(0 if node_name else 1, 3)):
        key, when = rng.choice(KEYS), rng.choice((DNS, SA))
        # the API rejects a repeated {topologyKey, whenUnsatisfiable}; one key under both is valid
        if (key, when) in used:
            continue
        used.add((key, when))
        spreads.append(
            spread(
                rng.randint(1, 3),
                key,
                when,
                random_selector(rng),
                rng.choice((None, 1, 2, 4)) if when == DNS else None,
                rng.choice((None, "Honor", "Ignore")),
                rng.choice((None, "Honor", "Ignore")),
                ("rev",) if rng.random() < 0.3 else (),
            )
        )
    node_selector = {"pool": rng.choice(("a", "b"))} if rng.random() < 0.2 else {}
    affinity = affinity_in("zone", *rng.sample(VALUES["zone"], 2)) if rng.random() < 0.2 else None
    tolerations = (Toleration("gpu", TolerationOperator.EXISTS),) if rng.random() < 0.3 else ()
    # some placed pods are terminating (deletionTimestamp set): not counted, still on the node
    deleted = 1_700_000_000.0 if node_name and rng.random() < 0.2 else None
    return Pod(
        ObjectMeta(
            name=name, namespace=rng.choice(NAMESPACES), uid=name, labels=random_labels(rng), deletion_timestamp=deleted
        ),
        PodSpec(
            containers=(Container("c", requests={CPU: 100}),),
            node_name=node_name,
            topology_spread_constraints=tuple(spreads),
            node_selector=node_selector,
            affinity=affinity,
            tolerations=tolerations,
        ),
    )


@dataclass(frozen=True)
class Cluster:
    nodes: list[Node]
    pods: list[Pod]
    incoming: list[Pod]
    feasible: list[int]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    rng = random.Random(draw(st.integers(0, 2**32)))
    nodes = [random_node(rng, i) for i in range(draw(st.integers(1, 12)))]
    pods = [random_pod(rng, f"e{i}", rng.choice(nodes).name) for i in range(draw(st.integers(0, 25)))]
    incoming = [random_pod(rng, f"p{i}") for i in range(draw(st.integers(1, 12)))]
    feasible = sorted(rng.sample(range(len(nodes)), rng.randint(1, len(nodes))))
    return Cluster(nodes, pods, incoming, feasible)


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_vectorized_equals_reference(cluster: Cluster) -> None:
    feasible = [cluster.nodes[i] for i in cluster.feasible]
    failed = [n for i, n in enumerate(cluster.nodes) if i not in set(cluster.feasible)]
    for p in cluster.incoming:
        assert vec_filter(p, cluster.nodes, cluster.pods) == ref_filter(p, cluster.nodes, cluster.pods)
        vec = vec_scores(p, feasible, failed, cluster.pods)
        ref = ref_scores(p, feasible, failed, cluster.pods)
        assert vec == ref
        assert all(0 <= s <= 100 for s in vec[2].values())


PTS_CONFIG = HEADER + "profiles: [{plugins: {multiPoint: {enabled: [{name: PodTopologySpread, weight: 2}]}}}]"


@settings(max_examples=80, deadline=None)
@given(clusters(), st.integers(0, 2**32))
def test_classes_kept_across_batches_follow_pods_that_come_and_go_between_them(cluster: Cluster, seed: int) -> None:
    """Between two batches pods leave nodes and others arrive (events, a resync): a Scheduler
    that keeps its classes (their spread counts among them) decides each batch as a Scheduler
    made anew for it does."""
    rng = random.Random(seed)
    registry = in_tree_registry()
    profile = without_post_filter(load_config(PTS_CONFIG, registry=registry).profiles[0])
    tables = [table_of(cluster.nodes, cluster.pods, seed=3) for _ in range(2)]
    kept = Scheduler(Framework.from_profile(profile, registry), tables[0], seed=3)
    start_index = 0
    for b in range(4):
        batch = [
            replace(p, metadata=replace(p.metadata, name=f"{p.name}-{b}-{k}", uid=f"{p.metadata.uid}-{b}-{k}"))
            for k in range(2)
            for p in cluster.incoming
        ]
        fresh = Scheduler(Framework.from_profile(profile, registry), tables[1], seed=3)
        fresh.next_start_node_index = start_index
        want = [(r.pod.name, r.node, r.message) for r in fresh.schedule(batch)]
        start_index = fresh.next_start_node_index
        assert [(r.pod.name, r.node, r.message) for r in kept.schedule(batch)] == want
        on_nodes = [(key, info.name) for info in tables[0].node_infos() for key in sorted(info.pods)]
        for key, node in rng.sample(on_nodes, min(len(on_nodes), rng.randint(0, 3))):
            elsewhere, move = rng.choice(cluster.nodes).name, rng.random() < 0.5
            for table in tables:
                left = table.forget(key, node)
                if move and key not in table.node_info(elsewhere).pods:
                    table.assume(left, elsewhere)  # moved: counted in another domain now


@settings(max_examples=80, deadline=None)
@given(clusters(), st.sampled_from((None, 100, 50)), st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_schedulers_agree(cluster: Cluster, pct: int | None, batches: list[int]) -> None:
    """The vectorized scheduler (one by one, and in batches, with placement_affects) places the
    pods exactly as the reference scheduler does with the nodewise plugins."""
    registry = in_tree_registry()
    profile = without_post_filter(load_config(PTS_CONFIG, registry=registry).profiles[0])
    # twins (same spec and labels) share a pod class: placements must refresh it
    pods = [
        replace(p, metadata=replace(p.metadata, name=f"{p.name}-{k}", uid=f"{p.metadata.uid}-{k}"))
        for k in range(2)
        for p in cluster.incoming
    ]
    infos = infos_of(cluster.nodes, cluster.pods)
    ref = ReferenceScheduler(reference_profile(profile, pct), seed=3).schedule_all(pods, infos)
    want = [(r.pod.name, r.node, r.message) for r in ref]
    for sizes in ([1], batches):
        table = table_of(cluster.nodes, cluster.pods, seed=3)
        framework = Framework.from_profile(profile, registry, percentage_of_nodes_to_score=pct)
        scheduler = Scheduler(framework, table, seed=3)
        got, i, b = [], 0, 0
        while i < len(pods):
            size = sizes[b % len(sizes)]
            got += [(r.pod.name, r.node, r.message) for r in scheduler.schedule(pods[i : i + size])]
            i, b = i + size, b + 1
        assert got == want
