"""InterPodAffinity, vectorized (`kubus.plugins`) and one node at a time (`kubus_reference`).

Ported from kube's interpodaffinity filtering_test.go (TestRequiredAffinitySingleNode,
TestRequiredAffinityMultipleNodes, TestPreFilterStateAddRemovePod,
TestGetTPMapMatchingIncomingAffinityAntiAffinity) and scoring_test.go (TestPreferredAffinity,
TestPreferredAffinityWithHardPodAffinitySymmetricWeight), every case run against both plugins;
plus matchLabelKeys / mismatchLabelKeys and "first pod of a series" cases of our own, the args,
the queueing hints, `placement_affects`, and hypothesis: both plugins agree on random clusters,
and a placement `placement_affects` calls harmless changes nothing.

kube's test pods live in namespace "" (its tests' defaultNamespace); so do these.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import without_post_filter

from kubus.api.objects import (
    Affinity,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    SelectorOperator,
    WeightedPodAffinityTerm,
)
from kubus.framework.config import ConfigError, InterPodAffinityArgs, load_config
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.interface import ALL_ROWS, ClusterScopedPlugin
from kubus.framework.queueing_hints import QueueingHint
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import in_tree_registry
from kubus.plugins.inter_pod_affinity import InterPodAffinity
from kubus_reference import ReferenceScheduler, reference_profile
from kubus_reference.inter_pod_affinity import NAMESPACES_STATE_KEY
from kubus_reference.inter_pod_affinity import InterPodAffinity as ReferenceInterPodAffinity

U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
AFF = (UU, "node(s) didn't match pod affinity rules")
ANTI = (U, "node(s) didn't match pod anti-affinity rules")
EXISTING = (U, "node(s) didn't satisfy existing pods anti-affinity rules")
SKIP = "skip"
MAX = 100
IN, NOT_IN = SelectorOperator.IN, SelectorOperator.NOT_IN
EXISTS, DNE = SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST
Q, QS = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP

_names = itertools.count()

# ---- builders (kube's st.MakePod and friends) ------------------------------------------------


def req(key: str, op: SelectorOperator, *values: str) -> LabelSelectorRequirement:
    return LabelSelectorRequirement(key, op, tuple(values))


def sel(*reqs: LabelSelectorRequirement, **labels: str) -> LabelSelector:
    return LabelSelector(dict(labels), tuple(reqs))


def term(
    topology: str,
    selector: LabelSelector | None,
    *,
    namespaces: tuple[str, ...] = (),
    ns_selector: LabelSelector | None = None,
    match_label_keys: tuple[str, ...] = (),
    mismatch_label_keys: tuple[str, ...] = (),
) -> PodAffinityTerm:
    return PodAffinityTerm(topology, selector, namespaces, ns_selector, match_label_keys, mismatch_label_keys)


def t_in(key: str, topology: str, *values: str) -> PodAffinityTerm:
    return term(topology, sel(req(key, IN, *values)))


def t_not_in(key: str, topology: str, *values: str) -> PodAffinityTerm:
    return term(topology, sel(req(key, NOT_IN, *values)))


def t_exists(key: str, topology: str) -> PodAffinityTerm:
    return term(topology, sel(req(key, EXISTS)))


def w(weight: int, t: PodAffinityTerm) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight, t)


def affinity(
    aff: tuple[PodAffinityTerm, ...] = (),
    anti: tuple[PodAffinityTerm, ...] = (),
    pref: tuple[WeightedPodAffinityTerm, ...] = (),
    pref_anti: tuple[WeightedPodAffinityTerm, ...] = (),
) -> Affinity:
    return Affinity(
        pod_affinity=PodAffinity(aff, pref) if aff or pref else None,
        pod_anti_affinity=PodAffinity(anti, pref_anti) if anti or pref_anti else None,
    )


def mkpod(
    labels: dict[str, str] | None = None,
    *,
    ns: str = "",
    node: str = "",
    aff: tuple[PodAffinityTerm, ...] = (),
    anti: tuple[PodAffinityTerm, ...] = (),
    pref: tuple[WeightedPodAffinityTerm, ...] = (),
    pref_anti: tuple[WeightedPodAffinityTerm, ...] = (),
    spec_affinity: Affinity | None = None,
) -> Pod:
    a = spec_affinity if spec_affinity is not None else affinity(aff, anti, pref, pref_anti)
    has = a.pod_affinity is not None or a.pod_anti_affinity is not None
    return Pod(
        ObjectMeta(name=f"p{next(_names)}", namespace=ns, labels=dict(labels or {})),
        PodSpec(node_name=node, affinity=a if has else None),
    )


def mknode(name: str, labels: dict[str, str] | None = None) -> Node:
    return Node(ObjectMeta(name=name, namespace="", labels=dict(labels or {})))


TEAM_NAMESPACES = {
    "subteam1.team1": {"team": "team1"},
    "subteam2.team1": {"team": "team1"},
    "subteam1.team2": {"team": "team2"},
    "subteam2.team2": {"team": "team2"},
}


@dataclass
class Cluster:
    nodes: list[Node]
    pods: list[Pod] = field(default_factory=list)
    """Existing pods; those naming a node the cluster lacks are left out (kube's snapshot
    gives them no node either)."""
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    def placed(self) -> list[Pod]:
        names = {n.name for n in self.nodes}
        return [p for p in self.pods if p.spec.node_name in names]

    def table(self) -> NodeTable:
        table = NodeTable()
        table.add_nodes(self.nodes)
        table.namespaces = {k: dict(v) for k, v in self.namespaces.items()}
        for p in self.placed():
            table.assume(PodInfo.of(p), p.spec.node_name)
        return table

    def infos(self) -> list[NodeInfo]:
        infos = {n.name: NodeInfo(n) for n in self.nodes}
        for p in self.placed():
            infos[p.spec.node_name].add_pod(PodInfo.of(p))
        return list(infos.values())


# ---- running both plugins ----------------------------------------------------------------------

Verdict = tuple[Code, str] | None


def vec_filter(c: Cluster, pod: Pod, args: Any = None) -> str | list[Verdict]:
    table = c.table()
    plugin = InterPodAffinity(args)
    state = CycleState()
    names, status = plugin.pre_filter(state, pod, table)
    assert names is None
    if status.is_skip:
        return SKIP
    assert status.is_success
    return _verdicts(plugin, state, pod, table, c.nodes)


def _verdicts(
    plugin: InterPodAffinity, state: CycleState, pod: Pod, table: NodeTable, nodes: list[Node]
) -> list[Verdict]:
    res = plugin.filter(state, pod, table.view(), ALL_ROWS)
    out: list[Verdict] = []
    for n in nodes:
        row = table.row_of[n.name]
        hits = [(r.code, r.reason) for r in res.rejections if r.mask[row]]
        if res.passed[row]:
            assert hits == []
            out.append(None)
        else:
            assert len(hits) == 1, hits  # one reason per node: the first check that fails
            out.append(hits[0])
    # a few rows at once give the same answers
    rows = np.array([table.row_of[n.name] for n in nodes[::-1]], dtype=np.intp)
    some = plugin.filter(state, pod, table.view(), rows)
    assert list(some.passed) == [v is None for v in out[::-1]]
    return out


def ref_state(c: Cluster, infos: list[NodeInfo]) -> CycleState:
    state = CycleState()
    state.write(SNAPSHOT_STATE_KEY, infos)
    state.write(NAMESPACES_STATE_KEY, c.namespaces)
    return state


def ref_filter(c: Cluster, pod: Pod, args: Any = None) -> str | list[Verdict]:
    infos = c.infos()
    plugin = ReferenceInterPodAffinity(args)
    state = ref_state(c, infos)
    names, status = plugin.pre_filter(state, pod, infos)
    assert names is None
    if status.is_skip:
        return SKIP
    assert status.is_success
    out: list[Verdict] = []
    for info in infos:
        s = plugin.filter(state, pod, info)
        if s.is_success:
            out.append(None)
        else:
            assert len(s.reasons) == 1
            out.append((s.code, s.reasons[0]))
    return out


def vec_scores(c: Cluster, pod: Pod, args: Any = None, scored: list[str] | None = None) -> Any:
    """SKIP, or (raw scores of every node, normalized scores of the ``scored`` nodes)."""
    table = c.table()
    plugin = InterPodAffinity(args)
    state = CycleState()
    status = plugin.pre_score(state, pod, table)
    if status.is_skip:
        return SKIP
    assert status.is_success
    raw = plugin.score(state, pod, table.view(), ALL_ROWS)
    names = [n.name for n in c.nodes] if scored is None else scored
    some = raw[[table.row_of[n] for n in names]]
    normalized = plugin.normalize_score(state, pod, np, some)
    return [int(raw[table.row_of[n.name]]) for n in c.nodes], [int(x) for x in normalized]


def ref_scores(c: Cluster, pod: Pod, args: Any = None, scored: list[str] | None = None) -> Any:
    infos = c.infos()
    plugin = ReferenceInterPodAffinity(args)
    state = ref_state(c, infos)
    names = [n.name for n in c.nodes] if scored is None else scored
    by_name = {i.name: i for i in infos}
    status = plugin.pre_score(state, pod, [by_name[n] for n in names])
    if status.is_skip:
        return SKIP
    assert status.is_success
    raw = {i.name: plugin.score(state, pod, i) for i in infos}
    scores = {n: raw[n] for n in names}
    plugin.normalize_score(state, pod, scores)
    return [raw[n.name] for n in c.nodes], [scores[n] for n in names]


def both_filter(c: Cluster, pod: Pod, args: Any = None) -> str | list[Verdict]:
    mine, ref = vec_filter(c, pod, args), ref_filter(c, pod, args)
    assert mine == ref
    return mine


def both_normalized(c: Cluster, pod: Pod, args: Any = None) -> str | list[int]:
    mine, ref = vec_scores(c, pod, args), ref_scores(c, pod, args)
    assert mine == ref
    return mine if mine == SKIP else mine[1]


# ---- Filter: TestRequiredAffinitySingleNode --------------------------------------------------

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = mknode("node1", {"region": "r1", "zone": "z11"})


def _existing() -> Pod:
    return mkpod(POD_LABEL, node="node1")


SINGLE_NODE = [
    ("no required affinity, no existing pods", mkpod(), [], SKIP),
    (
        "affinity In matches the existing pod",
        mkpod(POD_LABEL2, aff=(t_in("service", "region", "securityscan", "value2"),)),
        [_existing()],
        [None],
    ),
    (
        "affinity NotIn matches the existing pod",
        mkpod(POD_LABEL2, aff=(t_not_in("service", "region", "securityscan3", "value3"),)),
        [_existing()],
        [None],
    ),
    (
        "affinity fails: the existing pod is in another namespace",
        mkpod(
            POD_LABEL2,
            aff=(term("", sel(req("service", IN, "securityscan", "value2")), namespaces=("DiffNameSpace",)),),
        ),
        [mkpod({"service": "securityscan"}, ns="ns", node="node1")],
        [AFF],
    ),
    (
        "affinity fails: the selector does not match the existing pod",
        mkpod(POD_LABEL, aff=(t_in("service", "", "antivirusscan", "value2"),)),
        [_existing()],
        [AFF],
    ),
    (
        "affinity with several terms and operators, all matching",
        mkpod(
            POD_LABEL2,
            aff=(
                term("region", sel(req("service", EXISTS), req("wrongkey", DNE))),
                term("region", sel(req("service", IN, "securityscan"), req("service", NOT_IN, "WrongValue"))),
            ),
        ),
        [_existing()],
        [None],
    ),
    (
        "affinity terms are ANDed: one term does not match",
        mkpod(
            POD_LABEL2,
            aff=(
                term("region", sel(req("service", EXISTS), req("wrongkey", DNE))),
                term("region", sel(req("service", IN, "securityscan2"), req("service", NOT_IN, "WrongValue"))),
            ),
        ),
        [_existing()],
        [AFF],
    ),
    (
        "affinity and anti-affinity both satisfied",
        mkpod(
            POD_LABEL2,
            aff=(t_in("service", "region", "securityscan", "value2"),),
            anti=(t_in("service", "node", "antivirusscan", "value2"),),
        ),
        [_existing()],
        [None],
    ),
    (
        "affinity, anti-affinity and the existing pod's anti-affinity satisfied",
        mkpod(
            POD_LABEL2,
            aff=(t_in("service", "region", "securityscan", "value2"),),
            anti=(t_in("service", "node", "antivirusscan", "value2"),),
        ),
        [mkpod(POD_LABEL, node="node1", anti=(t_in("service", "node", "antivirusscan", "value2"),))],
        [None],
    ),
    (
        "affinity satisfied, anti-affinity not",
        mkpod(
            POD_LABEL2,
            aff=(t_in("service", "region", "securityscan", "value2"),),
            anti=(t_in("service", "zone", "securityscan", "value2"),),
        ),
        [_existing()],
        [ANTI],
    ),
    (
        "affinity and anti-affinity satisfied, the existing pod's anti-affinity not",
        mkpod(
            POD_LABEL,
            aff=(t_in("service", "region", "securityscan", "value2"),),
            anti=(t_in("service", "node", "antivirusscan", "value2"),),
        ),
        [mkpod(POD_LABEL, node="node1", anti=(t_in("service", "zone", "securityscan", "value2"),))],
        [EXISTING],
    ),
    (
        "the pod does not match its own NotIn term, the matching pod is on another node: rejected",
        mkpod(POD_LABEL, aff=(t_not_in("service", "region", "securityscan", "value2"),)),
        [mkpod({"service": "securityscan"}, node="node2")],
        [AFF],
    ),
    (
        "the existing pod's anti-affinity applies to a pod without terms",
        mkpod(POD_LABEL),
        [mkpod(POD_LABEL, node="node1", anti=(t_in("service", "zone", "securityscan", "value2"),))],
        [EXISTING],
    ),
    (
        "the existing pod's anti-affinity does not select the pod: PreFilter skips",
        mkpod(POD_LABEL),
        [mkpod(POD_LABEL, node="node1", anti=(t_not_in("service", "zone", "securityscan", "value2"),))],
        SKIP,
    ),
    (
        "anti-affinity satisfied by the existing pod, symmetry not",
        mkpod(POD_LABEL, anti=(t_exists("service", "region"), t_exists("security", "region"))),
        [mkpod(POD_LABEL2, node="node1", anti=(t_exists("security", "zone"),))],
        [ANTI],
    ),
    (
        "symmetry a1: partial matches each way",
        mkpod(POD_LABEL, anti=(t_exists("service", "zone"), t_exists("security", "zone"))),
        [mkpod(POD_LABEL2, node="node1", anti=(t_exists("security", "zone"),))],
        [ANTI],
    ),
    (
        "symmetry a2: partial matches each way",
        mkpod(POD_LABEL2, anti=(t_exists("security", "zone"),)),
        [mkpod(POD_LABEL, node="node1", anti=(t_exists("service", "zone"), t_exists("security", "zone")))],
        [EXISTING],
    ),
    (
        "symmetry b1",
        mkpod({"abc": "", "xyz": ""}, anti=(t_exists("abc", "zone"), t_exists("def", "zone"))),
        [mkpod({"def": "", "xyz": ""}, node="node1", anti=(t_exists("abc", "zone"), t_exists("def", "zone")))],
        [ANTI],
    ),
    (
        "symmetry b2",
        mkpod({"def": "", "xyz": ""}, anti=(t_exists("abc", "zone"), t_exists("def", "zone"))),
        [mkpod({"abc": "", "xyz": ""}, node="node1", anti=(t_exists("abc", "zone"), t_exists("def", "zone")))],
        [ANTI],
    ),
    (
        "affinity with a matching namespaceSelector",
        mkpod(
            POD_LABEL2,
            aff=(
                term(
                    "region",
                    sel(req("service", IN, "securityscan", "value2")),
                    ns_selector=sel(req("team", IN, "team1")),
                ),
            ),
        ),
        [mkpod(POD_LABEL, ns="subteam1.team1", node="node1")],
        [None],
    ),
    (
        "affinity with a namespaceSelector that does not match",
        mkpod(
            POD_LABEL2,
            aff=(
                term(
                    "region",
                    sel(req("service", IN, "securityscan", "value2")),
                    ns_selector=sel(req("team", IN, "team1")),
                ),
            ),
        ),
        [mkpod(POD_LABEL, ns="subteam1.team2", node="node1")],
        [AFF],
    ),
    (
        "anti-affinity with a matching namespaceSelector",
        mkpod(
            POD_LABEL2,
            ns="subteam1.team1",
            anti=(
                term(
                    "zone",
                    sel(req("service", IN, "securityscan", "value2")),
                    ns_selector=sel(req("team", IN, "team1")),
                ),
            ),
        ),
        [mkpod(POD_LABEL, ns="subteam2.team1", node="node1")],
        [ANTI],
    ),
    (
        "anti-affinity with an empty namespaceSelector: every namespace",
        mkpod(
            POD_LABEL2,
            ns="subteam1.team1",
            anti=(term("zone", sel(req("service", IN, "securityscan", "value2")), ns_selector=LabelSelector()),),
        ),
        [mkpod(POD_LABEL, ns="subteam2.team1", node="node1")],
        [ANTI],
    ),
    (
        "anti-affinity with a namespaceSelector that does not match",
        mkpod(
            POD_LABEL2,
            ns="subteam1.team1",
            anti=(
                term(
                    "zone",
                    sel(req("service", IN, "securityscan", "value2")),
                    ns_selector=sel(req("team", IN, "team1")),
                ),
            ),
        ),
        [mkpod(POD_LABEL, ns="subteam1.team2", node="node1")],
        [None],
    ),
]


@pytest.mark.parametrize(("name", "pod", "pods", "want"), SINGLE_NODE, ids=[c[0] for c in SINGLE_NODE])
def test_required_affinity_single_node(name: str, pod: Pod, pods: list[Pod], want: Any) -> None:
    assert both_filter(Cluster([NODE1], pods, TEAM_NAMESPACES), pod) == want


# ---- Filter: TestRequiredAffinityMultipleNodes -----------------------------------------------

RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}


def _abc(a: dict[str, str], b: dict[str, str], c: dict[str, str] | None = None) -> list[Node]:
    names = ("nodeA", "nodeB", "nodeC")
    return [mknode(n, labels) for n, labels in zip(names, (a, b, c), strict=False) if labels is not None]


def _rz(region: str, zone: str, host: str) -> dict[str, str]:
    return {"region": region, "zone": zone, "hostname": host}


MULTI_NODE = [
    (
        "nodes sharing the topology value of a node with a matching pod pass",
        mkpod(aff=(t_in("foo", "region", "bar"),)),
        [mkpod({"foo": "bar"}, node="node1")],
        [mknode("node1", RG_CHINA), mknode("node2", RG_CHINA_AZ1), mknode("node3", RG_INDIA)],
        [None, None, AFF],
    ),
    (
        "the first pod of a series is not blocked where the topology keys exist",
        mkpod(
            {"foo": "bar", "service": "securityscan"},
            aff=(t_in("foo", "zone", "bar"), t_in("service", "zone", "securityscan")),
        ),
        [mkpod({"foo": "bar"}, node="nodeA")],
        _abc({"zone": "az1", "hostname": "h1"}, {"zone": "az2", "hostname": "h2"}),
        [None, None],
    ),
    (
        "the first pod of a series needs the topology keys on the node",
        mkpod(
            {"foo": "bar", "service": "securityscan"},
            aff=(t_in("foo", "zone", "bar"), t_in("service", "zone", "securityscan")),
        ),
        [mkpod({"foo": "bar"}, node="nodeA")],
        _abc({"zoneLabel": "az1", "hostname": "h1"}, {"zoneLabel": "az2", "hostname": "h2"}),
        [AFF, AFF],
    ),
    (
        "anti-affinity: both nodes share the region of the matching pod",
        mkpod(anti=(t_in("foo", "region", "abc"),)),
        [mkpod({"foo": "abc"}, node="nodeA")],
        _abc({"region": "r1", "hostname": "nodeA"}, {"region": "r1", "hostname": "nodeB"}),
        [ANTI, ANTI],
    ),
    (
        "anti-affinity matches when any term does",
        mkpod(anti=(t_in("foo", "region", "abc"), t_in("service", "zone", "securityscan"))),
        [mkpod({"foo": "abc", "service": "securityscan"}, node="nodeA")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [ANTI, ANTI],
    ),
    (
        "anti-affinity: another region passes",
        mkpod(anti=(t_in("foo", "region", "abc"),)),
        [mkpod({"foo": "abc"}, node="nodeA")],
        _abc(RG_CHINA, RG_CHINA_AZ1, RG_INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "anti-affinity: the pod in another namespace does not count either way",
        mkpod({"foo": "123"}, ns="NS1", anti=(t_in("foo", "region", "bar"),)),
        [
            mkpod({"foo": "bar"}, ns="NS1", node="nodeA"),
            mkpod(ns="NS2", node="nodeC", anti=(t_in("foo", "region", "123"),)),
        ],
        _abc(RG_CHINA, RG_CHINA_AZ1, RG_INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "an existing pod's term on a key no node has: PreFilter skips",
        mkpod({"foo": ""}),
        [mkpod(node="nodeA", anti=(t_exists("foo", "invalid-node-label"),))],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z1", "nodeB")),
        SKIP,
    ),
    (
        "the pod's anti-affinity term on a key no node has matches nowhere",
        mkpod(node="nodeA", anti=(t_exists("foo", "invalid-node-label"),)),
        [mkpod({"foo": ""}, node="nodeA")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z1", "nodeB")),
        [None, None],
    ),
    (
        "the existing pods' anti-affinity rejects the pod everywhere",
        mkpod({"foo": "", "bar": ""}),
        [
            mkpod(node="nodeA", anti=(t_exists("foo", "zone"),)),
            mkpod(node="nodeA", anti=(t_exists("bar", "region"),)),
        ],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [EXISTING, EXISTING],
    ),
    (
        "the pod's anti-affinity: one term rejects each node",
        mkpod(anti=(t_exists("foo", "zone"), t_exists("bar", "region"))),
        [mkpod({"foo": ""}, node="nodeA"), mkpod({"bar": ""}, node="nodeB")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [ANTI, ANTI],
    ),
    (
        "existing anti-affinity: selector and topology key must both match (one key invalid)",
        mkpod({"foo": "", "bar": ""}),
        [mkpod(node="nodeA", anti=(t_exists("foo", "invalid-node-label"), t_exists("bar", "zone")))],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [EXISTING, None],
    ),
    (
        "the pod's anti-affinity: selector and topology key must both match (one key invalid)",
        mkpod(anti=(t_exists("foo", "invalid-node-label"), t_exists("bar", "zone"))),
        [mkpod({"foo": "", "bar": ""}, node="nodeA")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [ANTI, None],
    ),
    (
        "existing anti-affinity: selector and topology key both match (all keys valid)",
        mkpod({"foo": "", "bar": ""}),
        [mkpod(node="nodeA", anti=(t_exists("foo", "region"), t_exists("bar", "zone")))],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [EXISTING, EXISTING],
    ),
    (
        "the pod's anti-affinity: selector and topology key both match (all keys valid)",
        mkpod(anti=(t_exists("foo", "region"), t_exists("bar", "zone"))),
        [mkpod({"foo": "", "bar": ""}, node="nodeA")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [ANTI, ANTI],
    ),
    (
        "existing pods on nodeA and nodeB reject the pod: only nodeC",
        mkpod({"foo": "", "bar": ""}),
        [
            mkpod(node="nodeA", anti=(t_exists("foo", "zone"), t_exists("labelA", "zone"))),
            mkpod(node="nodeB", anti=(t_exists("bar", "zone"), t_exists("labelB", "zone"))),
        ],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB"), _rz("r1", "z3", "nodeC")),
        [EXISTING, EXISTING, None],
    ),
    (
        "affinity: all terms match one pod, then the topology keys",
        mkpod(aff=(t_exists("foo", "region"), t_exists("bar", "zone"))),
        [mkpod({"foo": "", "bar": ""}, node="nodeA")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z1", "nodeB")),
        [None, None],
    ),
    (
        "affinity: the terms must be matched by the same pod",
        mkpod(aff=(t_exists("foo", "region"), t_exists("bar", "zone"))),
        [mkpod({"foo": ""}, node="nodeA"), mkpod({"bar": ""}, node="nodeB")],
        _abc(_rz("r1", "z1", "nodeA"), _rz("r1", "z2", "nodeB")),
        [AFF, AFF],
    ),
]


@pytest.mark.parametrize(("name", "pod", "pods", "nodes", "want"), MULTI_NODE, ids=[c[0] for c in MULTI_NODE])
def test_required_affinity_multiple_nodes(name: str, pod: Pod, pods: list[Pod], nodes: list[Node], want: Any) -> None:
    assert both_filter(Cluster(nodes, pods, {"NS1": {}}), pod) == want


# ---- Filter: our own cases (matchLabelKeys, mismatchLabelKeys, first of a series) -------------

ZONES = [mknode("a1", {"zone": "a"}), mknode("a2", {"zone": "a"}), mknode("b1", {"zone": "b"}), mknode("x", {})]

OWN_FILTER = [
    (
        "matchLabelKeys: only pods of the same version repel",
        mkpod(
            {"app": "web", "version": "v2"},
            anti=(term("zone", sel(app="web"), match_label_keys=("version",)),),
        ),
        [mkpod({"app": "web", "version": "v1"}, node="a1"), mkpod({"app": "web", "version": "v2"}, node="b1")],
        [None, None, ANTI, None],
    ),
    (
        "matchLabelKeys: a key the pod lacks is ignored",
        mkpod({"app": "web"}, anti=(term("zone", sel(app="web"), match_label_keys=("version",)),)),
        [mkpod({"app": "web", "version": "v1"}, node="a1")],
        [ANTI, ANTI, None, None],
    ),
    (
        "mismatchLabelKeys: only other tenants' pods attract",
        mkpod(
            {"app": "web", "tenant": "t1"},
            aff=(term("zone", sel(req("app", EXISTS)), mismatch_label_keys=("tenant",)),),
        ),
        [mkpod({"app": "db", "tenant": "t1"}, node="a1"), mkpod({"app": "db", "tenant": "t2"}, node="b1")],
        [AFF, AFF, None, AFF],
    ),
    (
        "an existing pod's matchLabelKeys take its own labels",
        mkpod({"app": "web", "version": "v1"}),
        [
            mkpod(
                {"app": "web", "version": "v1"},
                node="a1",
                anti=(term("zone", sel(app="web"), match_label_keys=("version",)),),
            ),
            mkpod(
                {"app": "web", "version": "v2"},
                node="b1",
                anti=(term("zone", sel(app="web"), match_label_keys=("version",)),),
            ),
        ],
        [EXISTING, EXISTING, None, None],
    ),
    (
        "first of a series: a matching pod on a node without the key does not count",
        mkpod({"app": "web"}, aff=(term("zone", sel(app="web")),)),
        [mkpod({"app": "web"}, node="x")],
        [None, None, None, AFF],
    ),
    (
        "not the first of a series: only the domain with a matching pod",
        mkpod({"app": "web"}, aff=(term("zone", sel(app="web")),)),
        [mkpod({"app": "web"}, node="b1")],
        [AFF, AFF, None, AFF],
    ),
    (
        "the pod does not match its own terms: nowhere",
        mkpod({"app": "db"}, aff=(term("zone", sel(app="web")),)),
        [],
        [AFF, AFF, AFF, AFF],
    ),
    (
        "affinity fails first: one reason per node",
        mkpod({"app": "web"}, aff=(term("zone", sel(app="db")),), anti=(term("zone", sel(app="web")),)),
        [mkpod({"app": "db"}, node="a1"), mkpod({"app": "web"}, node="a2", anti=(term("zone", sel(app="web")),))],
        [ANTI, ANTI, AFF, AFF],
    ),
    (
        "a nil label selector selects nothing, an empty one everything",
        mkpod({"app": "web"}, anti=(term("zone", None),), aff=(term("zone", LabelSelector()),)),
        [mkpod({"app": "db"}, node="b1")],
        [AFF, AFF, None, AFF],
    ),
    (
        "the pod's own namespace by default",
        mkpod({"app": "web"}, ns="other", anti=(term("zone", sel(app="db")),)),
        [mkpod({"app": "db"}, node="a1"), mkpod({"app": "db"}, ns="other", node="b1")],
        [None, None, ANTI, None],
    ),
    (
        "a namespaceSelector on the name label kube gives every namespace",
        mkpod(
            {"app": "web"},
            anti=(term("zone", sel(app="db"), ns_selector=sel(**{"kubernetes.io/metadata.name": "unlisted"})),),
        ),
        [mkpod({"app": "db"}, ns="unlisted", node="a1"), mkpod({"app": "db"}, ns="listed", node="b1")],
        [ANTI, ANTI, None, None],
    ),
]


@pytest.mark.parametrize(("name", "pod", "pods", "want"), OWN_FILTER, ids=[c[0] for c in OWN_FILTER])
def test_filter_own_cases(name: str, pod: Pod, pods: list[Pod], want: Any) -> None:
    assert both_filter(Cluster(ZONES, pods, {"listed": {"team": "x"}}), pod) == want


def test_terminating_pods_still_count() -> None:
    """kube 1.28's InterPodAffinity has no DeletionTimestamp check (unlike PodTopologySpread's
    countPodsMatchSelector): a terminating pod still matches affinity and anti-affinity terms,
    and its own anti-affinity still keeps pods away, in Filter and in Score."""

    def terminating(p: Pod) -> Pod:
        return dataclasses.replace(p, metadata=dataclasses.replace(p.metadata, deletion_timestamp=1_700_000_000.0))

    db = terminating(mkpod({"app": "db"}, ns="default", node="a1"))
    anti = mkpod(ns="default", anti=(t_in("app", "zone", "db"),))
    assert both_filter(Cluster(ZONES, [db]), anti) == [ANTI, ANTI, None, None]
    near = mkpod(ns="default", aff=(t_in("app", "zone", "db"),))
    assert both_filter(Cluster(ZONES, [db]), near) == [None, None, AFF, AFF]
    keeper = terminating(mkpod({"app": "db"}, ns="default", node="a1", anti=(t_in("app", "zone", "web"),)))
    assert both_filter(Cluster(ZONES, [keeper]), mkpod({"app": "web"}, ns="default")) == [
        (U, "node(s) didn't satisfy existing pods anti-affinity rules"),
        (U, "node(s) didn't satisfy existing pods anti-affinity rules"),
        None,
        None,
    ]
    preferred = mkpod(ns="default", pref=(w(10, t_in("app", "zone", "db")),))
    assert both_normalized(Cluster(ZONES, [db]), preferred) == [100, 100, 0, 0]


# ---- PreFilter state: TestPreFilterStateAddRemovePod, TestGetTPMapMatchingIncomingAffinityAntiAffinity


def vec_counts(table: NodeTable, state: CycleState) -> dict[str, dict[tuple[str, str], int]]:
    s = state.read("PreFilterInterPodAffinity")

    def pairs(counts: dict[str, np.ndarray]) -> dict[tuple[str, str], int]:
        return {
            (key, table.label_values[key].values[i]): int(c)
            for key, per_domain in counts.items()
            for i, c in enumerate(per_domain)
            if c
        }

    return {
        "existing": pairs(s.existing_anti_affinity),
        "affinity": pairs(s.affinity),
        "anti": pairs(s.anti_affinity),
    }


def ref_counts(state: CycleState) -> dict[str, dict[tuple[str, str], int]]:
    s = state.read("PreFilterInterPodAffinity")
    return {
        "existing": dict(s.existing_anti_affinity_counts),
        "affinity": dict(s.affinity_counts),
        "anti": dict(s.anti_affinity_counts),
    }


ANTI_FOO_BAR = (t_in("foo", "region", "bar"),)
COMPLEX = (t_in("foo", "region", "bar", "buzz"), t_not_in("service", "zone", "bar", "security", "test"))
L1, L2, L3 = {"region": "r1", "zone": "z11"}, {"region": "r1", "zone": "z12"}, {"region": "r2", "zone": "z21"}
ADD_REMOVE = [
    (
        "anti-affinity counts after adding and removing a pod",
        mkpod({"foo": "bar"}, anti=ANTI_FOO_BAR),
        [mkpod({"foo": "bar"}, node="nodeA"), mkpod(node="nodeC", anti=ANTI_FOO_BAR)],
        mkpod({"foo": "bar"}, node="nodeB", anti=ANTI_FOO_BAR),
        {("region", "r1"): 2},
        {},
    ),
    (
        "anti-affinity counts with several terms",
        mkpod({"foo": "bar"}, anti=COMPLEX),
        [mkpod({"foo": "bar"}, node="nodeA"), mkpod(node="nodeC", anti=ANTI_FOO_BAR)],
        mkpod({"foo": "bar"}, node="nodeA", anti=COMPLEX),
        {("region", "r1"): 2, ("zone", "z11"): 2, ("zone", "z21"): 1},
        {},
    ),
    (
        "affinity counts with several terms",
        mkpod({"foo": "bar"}, aff=COMPLEX),
        [mkpod({"foo": "bar"}, node="nodeA"), mkpod(node="nodeC", anti=ANTI_FOO_BAR, aff=COMPLEX)],
        mkpod({"foo": "bar"}, node="nodeA", anti=COMPLEX),
        {},
        {("region", "r1"): 2, ("zone", "z11"): 2},
    ),
]


@pytest.mark.parametrize(
    ("name", "pending", "existing", "added", "want_anti", "want_affinity"), ADD_REMOVE, ids=[c[0] for c in ADD_REMOVE]
)
def test_pre_filter_state_add_remove_pod(
    name: str, pending: Pod, existing: list[Pod], added: Pod, want_anti: dict, want_affinity: dict
) -> None:
    nodes = _abc(L1, L2, L3)
    before, after = Cluster(nodes, existing), Cluster(nodes, [*existing, added])
    added_info = PodInfo.of(added)

    # vectorized
    plugin = InterPodAffinity()
    table, all_table = before.table(), after.table()
    state, all_state = CycleState(), CycleState()
    assert plugin.pre_filter(state, pending, table)[1].is_success
    assert plugin.pre_filter(all_state, pending, all_table)[1].is_success
    original = vec_counts(table, state)
    original_verdicts = _verdicts(plugin, state, pending, table, nodes)
    clone = state.clone()
    assert plugin.add_pod(state, pending, added_info, table.node_info(added.spec.node_name)).is_success
    got = vec_counts(table, state)
    assert (got["anti"], got["affinity"]) == (want_anti, want_affinity)
    assert got == vec_counts(all_table, all_state)
    assert _verdicts(plugin, state, pending, table, nodes) == _verdicts(plugin, all_state, pending, all_table, nodes)
    assert vec_counts(table, clone) == original  # the clone kept its own state
    assert plugin.remove_pod(state, pending, added_info, table.node_info(added.spec.node_name)).is_success
    assert vec_counts(table, state) == original
    assert _verdicts(plugin, state, pending, table, nodes) == original_verdicts

    # reference
    ref = ReferenceInterPodAffinity()
    infos, all_infos = before.infos(), after.infos()
    rstate, rall = ref_state(before, infos), ref_state(after, all_infos)
    assert ref.pre_filter(rstate, pending, infos)[1].is_success
    assert ref.pre_filter(rall, pending, all_infos)[1].is_success
    roriginal = ref_counts(rstate)
    node_info = next(i for i in infos if i.name == added.spec.node_name)
    assert ref.add_pod(rstate, pending, added_info, node_info).is_success
    rgot = ref_counts(rstate)
    assert (rgot["anti"], rgot["affinity"]) == (want_anti, want_affinity)
    assert rgot == ref_counts(rall) == got
    assert ref.remove_pod(rstate, pending, added_info, node_info).is_success
    assert ref_counts(rstate) == roriginal == original


HOST_A = mknode("nodeA", {"hostname": "nodeA"})
INCOMING_COUNTS = [
    ("nil test", [], mkpod(), {}, {}),
    ("a pod without terms is a no-op", [mkpod({"aaa": ""}, node="nodeA")], mkpod(), {}, {}),
    (
        "no pod matches",
        [mkpod({"bbb": ""}, node="nodeA")],
        mkpod(aff=(t_exists("aaa", "hostname"),), anti=(t_exists("aaa", "hostname"),)),
        {},
        {},
    ),
    (
        "the pod matches affinity and anti-affinity, one term",
        [mkpod({"aaa": ""}, node="nodeA")],
        mkpod(aff=(t_exists("aaa", "hostname"),), anti=(t_exists("aaa", "hostname"),)),
        {("hostname", "nodeA"): 1},
        {("hostname", "nodeA"): 1},
    ),
    (
        "the pod matches affinity and anti-affinity, several terms",
        [mkpod({"aaa": "", "bbb": ""}, node="nodeA")],
        mkpod(
            aff=(t_exists("aaa", "hostname"), t_exists("bbb", "hostname")),
            anti=(t_exists("aaa", "hostname"),),
        ),
        {("hostname", "nodeA"): 2},
        {("hostname", "nodeA"): 1},
    ),
    (
        "the pod matches anti-affinity but not all affinity terms",
        [mkpod({"aaa": ""}, node="nodeA")],
        mkpod(
            aff=(t_exists("aaa", "hostname"), t_exists("bbb", "hostname")),
            anti=(t_exists("aaa", "hostname"), t_exists("bbb", "hostname")),
        ),
        {},
        {("hostname", "nodeA"): 1},
    ),
    (
        "anti-affinity with several terms, some matched - 1",
        [mkpod({"aaa": "", "bbb": ""}, node="nodeA")],
        mkpod(
            aff=(t_exists("aaa", "hostname"), t_exists("ccc", "hostname")),
            anti=(t_exists("aaa", "hostname"), t_exists("ccc", "hostname")),
        ),
        {},
        {("hostname", "nodeA"): 1},
    ),
    (
        "anti-affinity with several terms, some matched - 2",
        [mkpod({"bbb": ""}, node="nodeA")],
        mkpod(
            aff=(t_exists("aaa", "hostname"), t_exists("bbb", "hostname")),
            anti=(t_exists("aaa", "hostname"), t_exists("bbb", "hostname")),
        ),
        {},
        {("hostname", "nodeA"): 1},
    ),
]


@pytest.mark.parametrize(
    ("name", "existing", "pod", "want_aff", "want_anti"), INCOMING_COUNTS, ids=[c[0] for c in INCOMING_COUNTS]
)
def test_incoming_affinity_anti_affinity_counts(
    name: str, existing: list[Pod], pod: Pod, want_aff: dict, want_anti: dict
) -> None:
    c = Cluster([HOST_A], existing)
    table, infos = c.table(), c.infos()
    state, rstate = CycleState(), ref_state(c, infos)
    skipped = InterPodAffinity().pre_filter(state, pod, table)[1].is_skip
    assert ReferenceInterPodAffinity().pre_filter(rstate, pod, infos)[1].is_skip == skipped
    if skipped:
        assert (want_aff, want_anti) == ({}, {})
        return
    for got in (vec_counts(table, state), ref_counts(rstate)):
        assert (got["affinity"], got["anti"]) == (want_aff, want_anti)


# ---- Score: TestPreferredAffinity ------------------------------------------------------------

S1, S2 = {"security": "S1"}, {"security": "S2"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
STAY_S1_REGION = (w(5, t_in("security", "region", "S1")),)
STAY_S2_REGION = (w(6, t_in("security", "region", "S2")),)
AFFINITY3 = (
    w(8, term("region", sel(req("security", NOT_IN, "S1"), req("security", IN, "S2")))),
    w(2, term("region", sel(req("security", EXISTS), req("wrongkey", DNE)))),
)
HARD_AFFINITY = (
    t_in("security", "region", "S1", "value2"),
    term("region", sel(req("security", EXISTS), req("wrongkey", DNE))),
)
AWAY_S1_AZ = (w(5, t_in("security", "az", "S1")),)
AWAY_S2_AZ = (w(5, t_in("security", "az", "S2")),)
NS_SELECTED = (
    w(
        5,
        term(
            "region",
            sel(req("security", IN, "S1")),
            namespaces=("subteam2.team2",),
            ns_selector=sel(req("team", IN, "team1")),
        ),
    ),
)


def stay_s1_away_s2(labels: dict[str, str] | None = None, node: str = "", ns: str = "") -> Pod:
    return mkpod(labels, node=node, ns=ns, pref=(w(8, t_in("security", "region", "S1")),), pref_anti=AWAY_S2_AZ)


def _n(*labels: dict[str, str]) -> list[Node]:
    return [mknode(f"node{i + 1}", lab) for i, lab in enumerate(labels)]


PREFERRED = [
    ("no affinity: Skip", mkpod(S1), [], _n(RG_CHINA, RG_INDIA, AZ1), False, SKIP),
    (
        "affinity: the matching topology value with matching pods scores high",
        mkpod(S1, pref=STAY_S1_REGION),
        [mkpod(S1, node="node1"), mkpod(S2, node="node2"), mkpod(S1, node="node3")],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [MAX, 0, 0],
    ),
    (
        "affinity: every node of the matching topology value scores the same",
        mkpod(pref=STAY_S1_REGION),
        [mkpod(S1, node="node1")],
        _n(RG_CHINA, RG_CHINA_AZ1, RG_INDIA),
        False,
        [MAX, MAX, 0],
    ),
    (
        "affinity: the region with more matching pods scores high",
        mkpod(S1, pref=STAY_S2_REGION),
        [mkpod(S2, node=n) for n in ("node1", "node1", "node2", "node3", "node4", "node5")],
        _n(RG_CHINA, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA),
        False,
        [MAX, 0, MAX, MAX, 0],
    ),
    (
        "affinity: different operators, some match failures",
        mkpod(S1, pref=AFFINITY3),
        [mkpod(S1, node="node1"), mkpod(S2, node="node2"), mkpod(S1, node="node3")],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [20, MAX, 0],
    ),
    (
        "affinity symmetry: the existing pods' preferred terms",
        mkpod(S2),
        [mkpod(S1, node="node1", pref=STAY_S1_REGION), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [0, MAX, 0],
    ),
    (
        "affinity symmetry with a namespace selector",
        mkpod(S1, ns="subteam1.team1"),
        [mkpod(S1, node="node1", pref=NS_SELECTED), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [MAX, 0, 0],
    ),
    (
        "anti-affinity symmetry with a namespace selector",
        mkpod(S1, ns="subteam1.team1"),
        [mkpod(S1, node="node1", pref_anti=NS_SELECTED), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [0, MAX, MAX],
    ),
    (
        "affinity symmetry: the existing pods' required terms (hardPodAffinityWeight)",
        mkpod(S1),
        [mkpod(S1, node="node1", aff=HARD_AFFINITY), mkpod(S2, node="node2", aff=HARD_AFFINITY)],
        _n(RG_CHINA, RG_INDIA, AZ1),
        False,
        [MAX, MAX, 0],
    ),
    (
        "anti-affinity: the node without matching pods scores high",
        mkpod(S1, pref_anti=AWAY_S1_AZ),
        [mkpod(S1, node="node1"), mkpod(S2, node="node2")],
        _n(AZ1, RG_CHINA),
        False,
        [0, MAX],
    ),
    (
        "anti-affinity: the node without the topology key scores high",
        mkpod(S1, pref_anti=AWAY_S1_AZ),
        [mkpod(S1, node="node1"), mkpod(S1, node="node2")],
        _n(AZ1, RG_CHINA),
        False,
        [0, MAX],
    ),
    (
        "anti-affinity: more matching pods score lower",
        mkpod(S1, pref_anti=AWAY_S1_AZ),
        [mkpod(S1, node="node1"), mkpod(S1, node="node1"), mkpod(S2, node="node2")],
        _n(AZ1, RG_INDIA),
        False,
        [0, MAX],
    ),
    (
        "anti-affinity symmetry",
        mkpod(S2),
        [mkpod(S1, node="node1", pref_anti=AWAY_S2_AZ), mkpod(S2, node="node2", pref_anti=AWAY_S1_AZ)],
        _n(AZ1, AZ2),
        False,
        [0, MAX],
    ),
    (
        "affinity and anti-affinity",
        stay_s1_away_s2(S1),
        [mkpod(S1, node="node1"), mkpod(S1, node="node2")],
        _n(RG_CHINA, AZ1),
        False,
        [MAX, 0],
    ),
    (
        "affinity and anti-affinity, the pods alike",
        stay_s1_away_s2(S1),
        [mkpod(S1, node=n) for n in ("node1", "node1", "node2", "node3", "node3", "node4", "node5")],
        _n(RG_CHINA_AZ1, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA),
        False,
        [MAX, 0, MAX, MAX, 0],
    ),
    (
        "affinity, anti-affinity and symmetry together",
        stay_s1_away_s2(S1),
        [
            mkpod(S1, node="node1"),
            mkpod(S2, node="node2"),
            stay_s1_away_s2(node="node3"),
            mkpod(node="node4", pref_anti=AWAY_S1_AZ),
        ],
        _n(RG_CHINA, AZ1, RG_INDIA, AZ2),
        False,
        [MAX, 0, MAX, 0],
    ),
    (
        "no panic when some nodes of a domain hold no pod with affinity",
        mkpod(S1),
        [mkpod(S1, node="node1"), stay_s1_away_s2(node="node2")],
        _n(RG_CHINA, RG_CHINA),
        False,
        [0, 0],
    ),
    (
        "affinity with pods matching the namespaceSelector",
        mkpod(S1, ns="subteam1.team1", pref=NS_SELECTED),
        [
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team2", node="node1"),
            mkpod(S1, ns="subteam2.team1", node="node2"),
        ],
        _n(RG_CHINA, RG_INDIA),
        False,
        [MAX, 0],
    ),
    (
        "affinity with pods matching the namespaceSelector and the namespaces",
        mkpod(S1, ns="subteam1.team1", pref=NS_SELECTED),
        [
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam2.team2", node="node1"),
            mkpod(S1, ns="subteam2.team1", node="node2"),
        ],
        _n(RG_CHINA, RG_INDIA),
        False,
        [MAX, 0],
    ),
    (
        "anti-affinity with pods matching the namespaceSelector",
        mkpod(S1, ns="subteam1.team1", pref_anti=NS_SELECTED),
        [
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team2", node="node1"),
            mkpod(S1, ns="subteam2.team1", node="node2"),
        ],
        _n(RG_CHINA, RG_INDIA),
        False,
        [0, MAX],
    ),
    (
        "anti-affinity with pods matching the namespaceSelector and the namespaces",
        mkpod(S1, ns="subteam1.team1", pref_anti=NS_SELECTED),
        [
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam1.team1", node="node1"),
            mkpod(S1, ns="subteam2.team2", node="node1"),
            mkpod(S1, ns="subteam2.team1", node="node2"),
        ],
        _n(RG_CHINA, RG_INDIA),
        False,
        [0, MAX],
    ),
    (
        "ignore the existing pods' preferred terms: Skip",
        mkpod(S2),
        [stay_s1_away_s2(S1, node="node1"), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA),
        True,
        SKIP,
    ),
    (
        "do not ignore the existing pods' preferred terms",
        mkpod(S2),
        [stay_s1_away_s2(S1, node="node1"), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA),
        False,
        [0, MAX],
    ),
    (
        "ignore flag, but the pod has preferred terms: the existing pods' terms count",
        mkpod(S2, pref_anti=(w(1, t_in("security", "nothing", "x")),)),
        [stay_s1_away_s2(S1, node="node1"), mkpod(S2, node="node2", pref=STAY_S2_REGION)],
        _n(RG_CHINA, RG_INDIA),
        True,
        [0, MAX],
    ),
    ("no nodes to score: Skip", mkpod(S2), [], [], False, SKIP),
]


@pytest.mark.parametrize(("name", "pod", "pods", "nodes", "ignore", "want"), PREFERRED, ids=[c[0] for c in PREFERRED])
def test_preferred_affinity(name: str, pod: Pod, pods: list[Pod], nodes: list[Node], ignore: bool, want: Any) -> None:
    args = InterPodAffinityArgs(1, ignore)
    assert both_normalized(Cluster(nodes, pods, TEAM_NAMESPACES), pod, args) == want


HARD_POD_AFFINITY = (
    term(
        "region",
        sel(req("service", IN, "S1")),
        namespaces=("", "subteam2.team2"),
        ns_selector=sel(req("team", IN, "team1")),
    ),
)
HARD_WEIGHT = [
    ("default weight", "", 1, [MAX, MAX, 0]),
    ("zero weight: Skip", "", 0, SKIP),
    ("no matching namespace: Skip", "subteam1.team2", 1, SKIP),
    ("matching namespaceSelector", "subteam1.team1", 1, [MAX, MAX, 0]),
    ("matching namespaces", "subteam2.team2", 1, [MAX, MAX, 0]),
]


@pytest.mark.parametrize(("name", "ns", "weight", "want"), HARD_WEIGHT, ids=[c[0] for c in HARD_WEIGHT])
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(name: str, ns: str, weight: int, want: Any) -> None:
    pods = [mkpod(node="node1", aff=HARD_POD_AFFINITY), mkpod(node="node2", aff=HARD_POD_AFFINITY)]
    c = Cluster(_n(RG_CHINA, RG_INDIA, AZ1), pods, TEAM_NAMESPACES)
    assert both_normalized(c, mkpod({"service": "S1"}, ns=ns), InterPodAffinityArgs(weight)) == want


def test_raw_scores_and_weights() -> None:
    """The raw score is the sum of what the node's domains collected, per key."""
    nodes = [mknode("a", {"zone": "z1", "rack": "r1"}), mknode("b", {"zone": "z1"}), mknode("c", {"rack": "r1"})]
    pods = [
        mkpod({"app": "db"}, node="a"),
        mkpod({"app": "db"}, node="b"),
        mkpod({"app": "cache"}, node="c", aff=(term("rack", sel(app="web")),)),
    ]
    pod = mkpod(
        {"app": "web"},
        pref=(w(3, term("zone", sel(app="db"))),),
        pref_anti=(w(2, term("rack", sel(req("app", EXISTS)))),),
    )
    c = Cluster(nodes, pods)
    # zone z1: 2 db pods * 3 = 6; rack r1: -2 * (db on a, cache on c) + 7 (hard weight, cache's term)
    assert vec_scores(c, pod, InterPodAffinityArgs(7)) == ref_scores(c, pod, InterPodAffinityArgs(7))
    raw, normalized = vec_scores(c, pod, InterPodAffinityArgs(7))
    assert raw == [6 + 3, 6, 3]
    assert normalized == [100, 50, 0]
    # normalized over the scored nodes only
    assert vec_scores(c, pod, InterPodAffinityArgs(7), ["b", "c"])[1] == [100, 0]
    assert ref_scores(c, pod, InterPodAffinityArgs(7), ["b", "c"])[1] == [100, 0]


# ---- args ------------------------------------------------------------------------------------

_CONFIG = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: InterPodAffinity, weight: 2}]\n"
    "  pluginConfig:\n  - name: InterPodAffinity\n    args: %s\n"
)


def _args(text: str) -> Any:
    profile = load_config(_CONFIG % text, registry=in_tree_registry()).profiles[0]
    return profile.plugin_args["InterPodAffinity"]


def test_args_defaults_and_decoding() -> None:
    assert InterPodAffinityArgs() == InterPodAffinityArgs(1, False)
    assert _args("{}") == InterPodAffinityArgs(1, False)
    assert _args("{hardPodAffinityWeight: 0}") == InterPodAffinityArgs(0, False)
    assert _args("{hardPodAffinityWeight: 100, ignorePreferredTermsOfExistingPods: true}") == (
        InterPodAffinityArgs(100, True)
    )
    assert _args("{kind: InterPodAffinityArgs, hardPodAffinityWeight: 5}") == InterPodAffinityArgs(5)
    profile = load_config(_CONFIG % "{}", registry=in_tree_registry()).profiles[0]
    for point in (ExtensionPoint.PRE_FILTER, ExtensionPoint.FILTER, ExtensionPoint.PRE_SCORE):
        assert "InterPodAffinity" in [r.name for r in profile.plugins[point]]
    assert [(r.name, r.weight) for r in profile.plugins[ExtensionPoint.SCORE] if r.name == "InterPodAffinity"] == [
        ("InterPodAffinity", 2)
    ]


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ("{hardPodAffinityWeight: -1}", ".hardPodAffinityWeight: invalid value -1: not in valid range [0, 100]"),
        ("{hardPodAffinityWeight: 101}", ".hardPodAffinityWeight: invalid value 101: not in valid range [0, 100]"),
        ("{hardPodAffinityWeight: '1'}", ".hardPodAffinityWeight: expected an integer, got string '1'"),
        (
            "{ignorePreferredTermsOfExistingPods: 1}",
            ".ignorePreferredTermsOfExistingPods: expected a boolean, got number 1",
        ),
        (
            "{hardPodAffinityWeigth: 1}",
            ': unknown field "hardPodAffinityWeigth" (known fields: hardPodAffinityWeight, '
            "ignorePreferredTermsOfExistingPods)",
        ),
    ],
)
def test_args_validation(args: str, want: str) -> None:
    with pytest.raises(ConfigError) as e:
        _args(args)
    prefix = 'profile "default-scheduler": pluginConfig[0].args'
    assert str(e.value) == prefix + want


def test_plugin_takes_its_args() -> None:
    plugin = InterPodAffinity(InterPodAffinityArgs(3, True))
    assert (plugin.hard_pod_affinity_weight, plugin.ignore_preferred_terms_of_existing_pods) == (3, True)
    assert isinstance(plugin, ClusterScopedPlugin)
    assert plugin.placement_sensitive is False


# ---- queueing hints --------------------------------------------------------------------------

HINT_POD = mkpod(
    {"app": "web"},
    aff=(term("zone", sel(app="db")), term("rack", sel(req("tier", EXISTS)))),
    anti=(term("zone", sel(app="web")),),
)


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        (None, None, Q),
        (None, mkpod({"app": "db", "tier": "x"}), QS),  # not on a node
        (None, mkpod({"app": "db", "tier": "x"}, node="n"), Q),  # matches all affinity terms
        (None, mkpod({"app": "db"}, node="n"), QS),  # not all
        (None, mkpod({"app": "web"}, node="n"), QS),  # only hurts
        (mkpod({"app": "web"}, node="n"), None, Q),  # was repelling it
        (mkpod({"app": "cache"}, node="n"), None, QS),
        (mkpod({"app": "cache"}, node="n", anti=(term("zone", sel(app="web")),)), None, Q),  # its anti-affinity
        (mkpod({"app": "cache"}, node="n", anti=(term("zone", sel(app="db")),)), None, QS),
        (mkpod({"app": "db", "tier": "x"}, node="n"), None, Q),  # the pod may be first of a series now
        (mkpod({"app": "web"}, node="n"), mkpod({"app": "web"}, node="n"), QS),  # running: nothing changed
    ],
)
def test_pod_change_hint(old: Pod | None, new: Pod | None, want: QueueingHint) -> None:
    if old is not None and new is not None:
        new = Pod(old.metadata, new.spec)
    assert InterPodAffinity().is_schedulable_after_pod_change(HINT_POD, old, new) is want


def test_node_hints() -> None:
    plugin = InterPodAffinity()
    both_keys, one_key = mknode("n", {"zone": "a", "rack": "r"}), mknode("n", {"zone": "a"})
    assert plugin.is_schedulable_after_node_added(HINT_POD, None, both_keys) is Q
    assert plugin.is_schedulable_after_node_added(HINT_POD, None, one_key) is QS
    assert plugin.is_schedulable_after_node_added(mkpod(), None, mknode("n")) is Q  # only others' terms: maybe
    assert plugin.is_schedulable_after_node_added(HINT_POD, None, None) is Q
    assert plugin.is_schedulable_after_node_change(HINT_POD, one_key, mknode("n", {"zone": "a"})) is QS
    assert plugin.is_schedulable_after_node_change(HINT_POD, one_key, both_keys) is Q
    assert plugin.is_schedulable_after_node_change(HINT_POD, None, one_key) is Q
    kinds = {e.kind for e in plugin.events_to_register()}
    assert kinds == {
        "pod.bound",
        "pod.finished",
        "pod.deleted",
        "pod.unreserved",
        "node.added",
        "node.updated",
    }


# ---- placement_affects -------------------------------------------------------------------------


def _affects(pod: Pod, placed: Pod, args: Any = None, namespaces: dict | None = None) -> bool:
    table = NodeTable()
    table.add_nodes(ZONES)
    table.namespaces = namespaces or {}
    plugin = InterPodAffinity(args)
    state = CycleState()
    plugin.pre_filter(state, pod, table)
    return plugin.placement_affects(state, pod, PodInfo.of(placed))


def test_placement_affects() -> None:
    web = {"app": "web"}
    assert not _affects(mkpod(web), mkpod({"app": "db"}))
    assert _affects(mkpod(web, aff=(term("zone", sel(app="db")),)), mkpod({"app": "db"}))
    assert not _affects(mkpod(web, aff=(term("zone", sel(app="db")),)), mkpod({"app": "db"}, ns="other"))
    assert _affects(mkpod(web, anti=(term("zone", sel(app="db")),)), mkpod({"app": "db"}))
    assert _affects(mkpod(web, pref=(w(1, term("zone", sel(app="db"))),)), mkpod({"app": "db"}))
    # the placed pod's terms select the pod
    assert _affects(mkpod(web), mkpod({"app": "db"}, anti=(term("zone", sel(app="web")),)))
    assert _affects(mkpod(web), mkpod({"app": "db"}, aff=(term("zone", sel(app="web")),)))
    assert not _affects(mkpod(web), mkpod({"app": "db"}, aff=(term("zone", sel(app="web")),)), InterPodAffinityArgs(0))
    assert _affects(mkpod(web), mkpod({"app": "db"}, pref_anti=(w(1, term("zone", sel(app="web"))),)))
    # ignorePreferredTermsOfExistingPods: a pod without preferred terms is not scored
    ignore = InterPodAffinityArgs(1, True)
    assert not _affects(mkpod(web), mkpod({"app": "db"}, pref=(w(1, term("zone", sel(app="web"))),)), ignore)
    assert _affects(mkpod(web), mkpod({"app": "db"}, anti=(term("zone", sel(app="web")),)), ignore)
    # namespaceSelector, with the table's namespaces
    ns_term = term("zone", sel(app="db"), ns_selector=sel(team="a"))
    assert _affects(mkpod(web, anti=(ns_term,)), mkpod({"app": "db"}, ns="x"), namespaces={"x": {"team": "a"}})
    assert not _affects(mkpod(web, anti=(ns_term,)), mkpod({"app": "db"}, ns="x"), namespaces={"x": {"team": "b"}})


# ---- hypothesis: both plugins agree; placement_affects is exact-but-conservative ----------------

TOPOLOGY = {"zone": ("a", "b", "c"), "rack": ("r1", "r2", "r3", "r4"), "host": ()}
APPS = ("web", "db", "cache")
NAMESPACES = ("default", "team-a", "team-b", "loose")


def _random_selector(rng: random.Random) -> LabelSelector | None:
    roll = rng.random()
    if roll < 0.08:
        return None
    if roll < 0.15:
        return LabelSelector()
    reqs = []
    for _ in range(rng.randint(0, 2)):
        key = rng.choice(("app", "tier", "version"))
        op = rng.choice(list(SelectorOperator)[:4])
        values = (rng.choice((*APPS, "fe", "be", "v1")),) if op in (IN, NOT_IN) else ()
        reqs.append(LabelSelectorRequirement(key, op, values))
    labels = {"app": rng.choice(APPS)} if rng.random() < 0.4 else {}
    return LabelSelector(labels, tuple(reqs))


def _random_term(rng: random.Random) -> PodAffinityTerm:
    namespaces: tuple[str, ...] = ()
    ns_selector = None
    roll = rng.random()
    if roll < 0.2:
        namespaces = tuple(rng.sample(NAMESPACES, rng.randint(1, 2)))
    elif roll < 0.3:
        ns_selector = LabelSelector()
    elif roll < 0.45:
        ns_selector = LabelSelector({"team": rng.choice(("a", "b"))})
        if rng.random() < 0.3:
            namespaces = (rng.choice(NAMESPACES),)
    selector = _random_selector(rng)
    keys = ("version", "tier")
    mlk = (rng.choice(keys),) if selector is not None and rng.random() < 0.2 else ()
    mmlk = (rng.choice(keys),) if selector is not None and rng.random() < 0.1 else ()
    topology = rng.choice((*TOPOLOGY, "missing"))
    return PodAffinityTerm(topology, selector, namespaces, ns_selector, mlk, mmlk)


def _random_pod(rng: random.Random, node: str = "", terms: float = 0.5) -> Pod:
    labels = {}
    if rng.random() < 0.9:
        labels["app"] = rng.choice(APPS)
    for key, values in (("tier", ("fe", "be")), ("version", ("v1", "v2"))):
        if rng.random() < 0.5:
            labels[key] = rng.choice(values)

    def some(p: float) -> tuple[PodAffinityTerm, ...]:
        return tuple(_random_term(rng) for _ in range(rng.randint(1, 2))) if rng.random() < p else ()

    def weighted(p: float) -> tuple[WeightedPodAffinityTerm, ...]:
        return (
            tuple(w(rng.randint(1, 100), _random_term(rng)) for _ in range(rng.randint(1, 2)))
            if rng.random() < p
            else ()
        )

    has = rng.random() < terms
    return mkpod(
        labels,
        ns=rng.choice(NAMESPACES),
        node=node,
        aff=some(0.4) if has else (),
        anti=some(0.4) if has else (),
        pref=weighted(0.4) if has else (),
        pref_anti=weighted(0.4) if has else (),
    )


def _random_cluster(rng: random.Random) -> Cluster:
    nodes = []
    for i in range(rng.randint(1, 8)):
        labels = {k: rng.choice(v) for k, v in TOPOLOGY.items() if v and rng.random() < 0.8}
        if rng.random() < 0.8:
            labels["host"] = f"h{i}"
        nodes.append(mknode(f"n{i}", labels))
    pods = [_random_pod(rng, rng.choice(nodes).name, 0.3) for _ in range(rng.randint(0, 12))]
    namespaces = {"team-a": {"team": "a"}, "team-b": {"team": "b"}, "default": {}}
    return Cluster(nodes, pods, namespaces)


def _random_args(rng: random.Random) -> InterPodAffinityArgs:
    return InterPodAffinityArgs(rng.choice((0, 1, 5)), rng.random() < 0.3)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_vectorized_equals_reference(seed: int) -> None:
    rng = random.Random(seed)
    c = _random_cluster(rng)
    pod = _random_pod(rng, terms=0.8)
    args = _random_args(rng)
    assert vec_filter(c, pod, args) == ref_filter(c, pod, args)
    assert vec_scores(c, pod, args) == ref_scores(c, pod, args)
    scored = [n.name for n in c.nodes if rng.random() < 0.6] or [c.nodes[0].name]
    assert vec_scores(c, pod, args, scored) == ref_scores(c, pod, args, scored)


def _outcome(c: Cluster, table: NodeTable, pod: Pod, args: Any) -> tuple[Any, Any]:
    plugin = InterPodAffinity(args)
    state = CycleState()
    filtered: Any = SKIP
    if not plugin.pre_filter(state, pod, table)[1].is_skip:
        filtered = _verdicts(plugin, state, pod, table, c.nodes)
    scored: Any = SKIP
    if not plugin.pre_score(state, pod, table).is_skip:
        raw = plugin.score(state, pod, table.view(), ALL_ROWS)
        scored = [int(raw[table.row_of[n.name]]) for n in c.nodes]
    return filtered, scored


def _random_case(seed: int) -> tuple[random.Random, Cluster, Pod, Any, NodeTable, InterPodAffinity]:
    """A random cluster, a pod with terms, random args, the cluster's table and the plugin."""
    rng = random.Random(seed)
    c = _random_cluster(rng)
    pod = _random_pod(rng, terms=0.8)
    args = _random_args(rng)
    return rng, c, pod, args, c.table(), InterPodAffinity(args)


def _pre_filtered(plugin: InterPodAffinity, pod: Pod, table: NodeTable) -> CycleState:
    state = CycleState()
    plugin.pre_filter(state, pod, table)
    return state


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_placement_affects_is_never_wrongly_false(seed: int) -> None:
    rng, c, pod, args, table, plugin = _random_case(seed)
    state = _pre_filtered(plugin, pod, table)
    before = _outcome(c, table, pod, args)
    placed = _random_pod(rng, terms=0.6)
    affects = plugin.placement_affects(state, pod, PodInfo.of(placed))
    table.assume(PodInfo.of(placed), rng.choice(c.nodes).name)
    if before != _outcome(c, table, pod, args):
        assert affects


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_pre_score_moved_by_placed_pods_equals_pre_score_again(seed: int) -> None:
    """`pre_score_add_pods` (the batch's incremental PreScore) after each placement gives the
    scores PreScore over the whole table gives, or says it cannot (a skipped PreScore)."""
    rng, c, pod, _, table, plugin = _random_case(seed)
    state = _pre_filtered(plugin, pod, table)
    skipped = plugin.pre_score(state, pod, table).is_skip
    for _ in range(rng.randint(1, 4)):
        placed = PodInfo.of(_random_pod(rng, terms=0.6))
        node = rng.choice(c.nodes).name
        table.assume(placed, node)
        placed = table.node_info(table.row_of[node]).pods[placed.pod.key]
        moved = not skipped and plugin.pre_score_add_pods(state, pod, table, [(placed, table.row_of[node])])
        again = _pre_filtered(plugin, pod, table)
        skipped_again = plugin.pre_score(again, pod, table).is_skip
        if skipped:
            assert not moved
        else:
            assert moved
            if skipped_again:  # nothing left to score: the moved state scores 0 everywhere too
                assert not plugin.score(state, pod, table.view(), ALL_ROWS).any()
            else:
                want = plugin.score(again, pod, table.view(), ALL_ROWS)
                assert plugin.score(state, pod, table.view(), ALL_ROWS).tolist() == want.tolist()
        if skipped or skipped_again:  # as the scheduler does: PreScore again
            state = again
            skipped = skipped_again


# ---- through the scheduler: one by one and in batches, as the reference scheduler -------------

_PROFILE = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: InterPodAffinity, weight: 2}]\n"
    "  pluginConfig:\n  - name: InterPodAffinity\n    args: {hardPodAffinityWeight: %d}\n"
)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32))
def test_scheduler_places_as_the_reference(seed: int) -> None:
    """Replicas of a few pod templates (pod classes the batch scheduler evaluates once and
    re-evaluates after placements that `placement_affects`): one by one, in one batch, and by
    the reference scheduler, the same nodes and messages."""
    rng = random.Random(seed)
    c = _random_cluster(rng)
    c.namespaces = {}  # the reference scheduler knows no namespaces
    templates = [_random_pod(rng, terms=0.9) for _ in range(rng.randint(1, 3))]
    pods = []
    for _ in range(rng.randint(1, 10)):
        template = rng.choice(templates)
        pods.append(
            Pod(ObjectMeta(f"r{next(_names)}", template.namespace, labels=template.metadata.labels), template.spec)
        )
    registry = in_tree_registry()
    profile = without_post_filter(load_config(_PROFILE % rng.choice((0, 1, 10)), registry=registry).profiles[0])

    def vectorized(batch: bool) -> list[tuple[str | None, str]]:
        table = c.table()
        scheduler = Scheduler(
            Framework.from_profile(profile, registry, percentage_of_nodes_to_score=100), table, seed=7
        )
        results = scheduler.schedule(pods) if batch else [r for p in pods for r in scheduler.schedule([p])]
        return [(r.node, r.message) for r in results]

    reference = ReferenceScheduler(reference_profile(profile, 100), seed=7).schedule_all(pods, c.infos())
    want = [(r.node, r.message) for r in reference]
    assert vectorized(False) == want
    assert vectorized(True) == want


def test_add_pod_after_a_skipped_pre_filter() -> None:
    """kube does not call AddPod/RemovePod of a plugin whose PreFilter skipped: a no-op here."""
    c = Cluster(_abc(L1, L2))
    pod, added = mkpod(), PodInfo.of(mkpod({"foo": "bar"}, node="nodeA", anti=ANTI_FOO_BAR))
    plugin, table = InterPodAffinity(), c.table()
    assert plugin.add_pod(CycleState(), pod, added, table.node_info("nodeA")).code is Code.ERROR  # no PreFilter
    state = CycleState()
    assert plugin.pre_filter(state, pod, table)[1].is_skip
    assert plugin.add_pod(state, pod, added, table.node_info("nodeA")).is_success
    ref, infos = ReferenceInterPodAffinity(), c.infos()
    rstate = ref_state(c, infos)
    assert ref.pre_filter(rstate, pod, infos)[1].is_skip
    assert ref.add_pod(rstate, pod, added, infos[0]).code is Code.ERROR
    rstate.skip_filter_plugins.add(ref.name)  # as the scheduler records the Skip
    assert ref.remove_pod(rstate, pod, added, infos[0]).is_success
