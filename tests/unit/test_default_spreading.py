"""Default topology spreading: kube's helper.DefaultSelector over the cluster's Services,
ReplicationControllers, ReplicaSets and StatefulSets (`kubus.api.workloads`), and the default
constraints of PodTopologySpread (System and List) built from it, vectorized (`kubus.plugins`)
and one node at a time (`kubus_reference`).

Ported from kube: helper/spread_test.go (TestGetPodServices), podtopologyspread's
filtering_test.go (TestPreFilterState: "default constraints and a service", "... that doesn't
match", "... but pod has constraints", "default soft constraints and a service") and
scoring_test.go (TestPreScoreSkip "default constraints and a replicaset that doesn't match",
TestPreScoreStateEmptyNodes "system default constraints and a replicaset", "default constraints
and a replicaset", "... but pod has constraints", TestPodTopologySpreadScore "system defaulting,
nodes don't have zone, pods match service"). Then a DefaultSelector table of kubus's own (every
branch of kube's function), the manifests of the four kinds, pod classes, queueing hints,
`kubus simulate`, and both schedulers agreeing on random clusters with workloads.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import labels_of, make_node, make_pod
from hypothesis import given, settings
from hypothesis import strategies as st
from support import without_post_filter

from kubus.api.errors import ManifestError
from kubus.api.manifests import parse_manifests, parse_object, wire_pod
from kubus.api.objects import (
    CPU,
    PODS,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    ObjectMeta,
    OwnerReference,
    Pod,
    SelectorOperator,
    TopologySpreadConstraint,
)
from kubus.api.pod_affinity import selector_matches
from kubus.api.workloads import NO_WORKLOADS, ReplicaSet, ReplicationController, Service, StatefulSet, Workloads
from kubus.cli.simulate import SCHEDULED, simulate
from kubus.framework.config import DefaultingType, PodTopologySpreadArgs, default_config, load_config
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.queueing_hints import QueueingHint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler, pod_class_key
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import in_tree_registry
from kubus.plugins._gomath import go_log
from kubus.plugins.pod_topology_spread import PodTopologySpread, default_selector
from kubus_reference import ReferenceScheduler, reference_profile
from kubus_reference import pod_topology_spread as ref
from kubus_reference.pod_topology_spread import WORKLOADS_STATE_KEY

IN, NOT_IN, EXISTS = SelectorOperator.IN, SelectorOperator.NOT_IN, SelectorOperator.EXISTS
DNS, SA = "DoNotSchedule", "ScheduleAnyway"
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
RS_KIND = ("apps/v1", "ReplicaSet")
SS_KIND = ("apps/v1", "StatefulSet")
RC_KIND = ("v1", "ReplicationController")


def owner(name: str, kind: tuple[str, str] = RS_KIND, *, controller: bool = True) -> OwnerReference:
    return OwnerReference(kind[0], kind[1], name, f"uid-{name}", controller)


def pod(
    name: str,
    *labels: str,
    ns: str = "default",
    node: str = "",
    owners: tuple[OwnerReference, ...] = (),
    spreads: tuple[TopologySpreadConstraint, ...] = (),
) -> Pod:
    """A pod; each of `labels` is `key` (value "") or `key=value`."""
    return make_pod(
        name,
        namespace=ns,
        uid=f"{ns}/{name}",
        labels=labels_of(*labels),
        owners=owners,
        requests={CPU: 100},
        node_name=node,
        spread=spreads,
    )


def node(name: str, **labels: str) -> Node:
    return make_node(name, labels={HOST: name, **labels}, allocatable={CPU: 64000, PODS: 110})


def svc(name: str, ns: str = "default", **selector: str) -> Service:
    return Service(ns, name, dict(selector))


def exists(key: str) -> LabelSelector:
    return LabelSelector(match_expressions=(LabelSelectorRequirement(key, EXISTS),))


def spread(max_skew: int, key: str, when: str, selector: LabelSelector | None = None) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(max_skew, key, when, selector)


def list_args(*constraints: TopologySpreadConstraint) -> PodTopologySpreadArgs:
    return PodTopologySpreadArgs(tuple(constraints), DefaultingType.LIST)


# ---- DefaultSelector ------------------------------------------------------------------------------

PROBES = [
    {k: v for k, v in zip(("foo", "app", "tier"), values, strict=True) if v is not None}
    for values in itertools.product(("bar", "baz", None), ("web", "db", None), ("1", None))
]
"""Label sets every selector of the table is tried on: selectors are equal when they agree on all."""


def selected(selector: LabelSelector | None) -> list[bool]:
    return [selector is not None and selector_matches(selector, labels) for labels in PROBES]


@dataclass(frozen=True)
class SelectorCase:
    name: str
    pod: Pod
    objects: list[Any]
    want: LabelSelector | None
    """None: empty, no default constraint."""


WEB = pod("p", "foo=bar", "app=web", "tier=1")
RS_TIER = ReplicaSet("default", "rs", exists("tier"))

SELECTOR_CASES = [
    SelectorCase("no objects", WEB, [], None),
    SelectorCase("a service that selects the pod", WEB, [svc("s", foo="bar")], LabelSelector({"foo": "bar"})),
    SelectorCase(
        "two services: their labels merged",
        WEB,
        [svc("s1", foo="bar"), svc("s2", app="web")],
        LabelSelector({"foo": "bar", "app": "web"}),
    ),
    SelectorCase("a service that does not select the pod", WEB, [svc("s", foo="baz")], None),
    SelectorCase("a service of another namespace", WEB, [svc("s", "other", foo="bar")], None),
    SelectorCase("a service without a selector selects no pod", WEB, [Service("default", "s")], None),
    SelectorCase("a service with an empty selector selects the pod, adds nothing", WEB, [svc("s")], None),
    SelectorCase(
        "a replication controller: its map merged",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rc", RC_KIND),))),
        [svc("s", foo="bar"), ReplicationController("default", "rc", {"app": "web"})],
        LabelSelector({"foo": "bar", "app": "web"}),
    ),
    SelectorCase(
        "a replica set: its requirements added",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs"),))),
        [svc("s", foo="bar"), RS_TIER],
        LabelSelector({"foo": "bar"}, (LabelSelectorRequirement("tier", EXISTS),)),
    ),
    SelectorCase(
        "a stateful set: its matchLabels and expressions added",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("ss", SS_KIND),))),
        [
            StatefulSet(
                "default", "ss", LabelSelector({"app": "web"}, (LabelSelectorRequirement("foo", NOT_IN, ("x",)),))
            )
        ],
        LabelSelector({"app": "web"}, (LabelSelectorRequirement("foo", NOT_IN, ("x",)),)),
    ),
    SelectorCase(
        "a replica set's requirement on a key a service has too: both required",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs"),))),
        [svc("s", app="web"), ReplicaSet("default", "rs", LabelSelector({"app": "db"}))],
        LabelSelector({"app": "web"}, (LabelSelectorRequirement("app", IN, ("db",)),)),
    ),
    SelectorCase(
        "an owner that is not the controller",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs", controller=False),))),
        [RS_TIER],
        None,
    ),
    SelectorCase(
        "the controller is the first reference with controller true",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("x", controller=False), owner("rs")))),
        [RS_TIER],
        exists("tier"),
    ),
    SelectorCase(
        "a replica set of another namespace",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs"),))),
        [ReplicaSet("other", "rs", exists("tier"))],
        None,
    ),
    SelectorCase(
        "a replica set under another group version is not kube's rsKind",
        replace(
            WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs", ("extensions/v1beta1", "ReplicaSet")),))
        ),
        [RS_TIER],
        None,
    ),
    SelectorCase(
        "a replication controller under apps/v1 is not kube's rcKind",
        replace(
            WEB, metadata=replace(WEB.metadata, owner_references=(owner("rc", ("apps/v1", "ReplicationController")),))
        ),
        [ReplicationController("default", "rc", {"app": "web"})],
        None,
    ),
    SelectorCase(
        "a controller kubus does not know (a Deployment)",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("d", ("apps/v1", "Deployment")),))),
        [svc("s", foo="bar"), RS_TIER],
        LabelSelector({"foo": "bar"}),
    ),
    SelectorCase(
        "the controller is not found",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("gone"),))),
        [RS_TIER],
        None,
    ),
    SelectorCase(
        "an apiVersion that does not parse: the services only",
        replace(WEB, metadata=replace(WEB.metadata, owner_references=(owner("rs", ("a/b/v1", "ReplicaSet")),))),
        [svc("s", foo="bar"), RS_TIER],
        LabelSelector({"foo": "bar"}),
    ),
]


@pytest.mark.parametrize("case", SELECTOR_CASES, ids=lambda c: c.name)
def test_default_selector(case: SelectorCase) -> None:
    workloads = Workloads(case.objects)
    vec = default_selector(case.pod, workloads)
    reference = ref.default_selector(case.pod, workloads)
    assert (vec is None) == (case.want is None) == reference.empty
    assert selected(vec) == selected(case.want)
    assert [reference.matches(labels) for labels in PROBES] == selected(case.want) or case.want is None


def test_get_pod_services() -> None:
    """kube's TestGetPodServices: three services of namespace test select app=test-0..2."""
    services = [svc(f"service-{i}", "test", app=f"test-{i}") for i in range(3)]
    workloads = Workloads(services)
    for i in range(5):
        p = pod(f"test-pod-{i}", f"app=test-{i}", f"label=label-{i}", ns="test")
        assert ref.get_pod_services(workloads, p) == services[i : i + 1]


# ---- PreFilter: kube's TestPreFilterState --------------------------------------------------------

FOO_BAR_SERVICE = Workloads([svc("s", foo="bar")])
PRE_FILTER_DEFAULTS = list_args(spread(3, "node", DNS), spread(2, "node", SA), spread(5, "rack", DNS))


def vec_constraints(p: Pod, args: PodTopologySpreadArgs, workloads: Workloads, action: str) -> list[Any]:
    return [
        (c.max_skew, c.topology_key, selected(c.selector))
        for c in PodTopologySpread(args).constraints(p, action, workloads)
    ]


def ref_constraints(p: Pod, args: PodTopologySpreadArgs, workloads: Workloads, action: str) -> list[Any]:
    return [
        (c.max_skew, c.topology_key, [c.selector.matches(labels) for labels in PROBES])
        for c in ref.PodTopologySpread(args).get_constraints(p, action, workloads)
    ]


def pre_filter_skips(p: Pod, args: PodTopologySpreadArgs, workloads: Workloads) -> tuple[bool, bool]:
    table = NodeTable()
    table.add_nodes([node("n", node="n", rack="r")])
    table.workloads = workloads
    vec = PodTopologySpread(args).pre_filter(CycleState(), p, table)[1].is_skip
    state = CycleState()
    state.write(WORKLOADS_STATE_KEY, workloads)
    infos = [NodeInfo(n) for n in [node("n", node="n", rack="r")]]
    reference = ref.PodTopologySpread(args).pre_filter(state, p, infos)[1].is_skip
    return vec, reference


def test_pre_filter_default_constraints_and_a_service() -> None:
    p = pod("p", "foo=bar", "baz=kar")
    want = [(3, "node", selected(LabelSelector({"foo": "bar"}))), (5, "rack", selected(LabelSelector({"foo": "bar"})))]
    assert vec_constraints(p, PRE_FILTER_DEFAULTS, FOO_BAR_SERVICE, DNS) == want
    assert ref_constraints(p, PRE_FILTER_DEFAULTS, FOO_BAR_SERVICE, DNS) == want
    assert pre_filter_skips(p, PRE_FILTER_DEFAULTS, FOO_BAR_SERVICE) == (False, False)


def test_pre_filter_default_constraints_and_a_service_that_does_not_match() -> None:
    p = pod("p", "foo=bar")
    args = list_args(spread(3, "node", DNS))
    assert pre_filter_skips(p, args, Workloads([svc("s", baz="kep")])) == (True, True)


def test_pre_filter_default_constraints_and_a_service_but_the_pod_has_constraints() -> None:
    own = (
        spread(1, "zone", DNS, LabelSelector({"baz": "tar"})),
        spread(2, "planet", SA, LabelSelector({"fot": "rok"})),
    )
    p = pod("p", "foo=bar", "baz=tar", spreads=own)
    args = list_args(spread(2, "node", DNS))
    want = [(1, "zone", selected(LabelSelector({"baz": "tar"})))]
    assert vec_constraints(p, args, FOO_BAR_SERVICE, DNS) == want
    assert ref_constraints(p, args, FOO_BAR_SERVICE, DNS) == want


def test_pre_filter_default_soft_constraints_and_a_service() -> None:
    args = list_args(spread(2, "node", SA))
    assert pre_filter_skips(pod("p", "foo=bar"), args, FOO_BAR_SERVICE) == (True, True)


def test_default_hard_constraints_filter() -> None:
    """List defaults with a DoNotSchedule constraint: the pods of the Service are spread by the
    filter (maxSkew 1 over `node`), both forms."""
    args = list_args(spread(1, "node", DNS))
    nodes = [node(n, node=n) for n in ("a", "b")]
    existing = [pod("e1", "foo=bar", node="a"), pod("e2", "foo=bar", node="a"), pod("e3", "foo=baz", node="b")]
    p = pod("p", "foo=bar")
    table = NodeTable()
    table.add_nodes(nodes)
    for e in existing:
        table.assume(PodInfo.of(e), e.spec.node_name)
    table.workloads = FOO_BAR_SERVICE
    plugin, state = PodTopologySpread(args), CycleState()
    assert plugin.pre_filter(state, p, table)[1].is_success
    result = plugin.filter(state, p, table.view(), slice(0, table.rows))
    passed = {table.node_info(r).name: bool(result.passed[i]) for i, r in enumerate(range(table.rows))}
    assert passed == {"a": False, "b": True}
    infos = [NodeInfo(n) for n in nodes]
    for e in existing:
        infos[0 if e.spec.node_name == "a" else 1].add_pod(PodInfo.of(e))
    rplugin, rstate = ref.PodTopologySpread(args), CycleState()
    rstate.write(WORKLOADS_STATE_KEY, FOO_BAR_SERVICE)
    assert rplugin.pre_filter(rstate, p, infos)[1].is_success
    assert {i.name: rplugin.filter(rstate, p, i).is_success for i in infos} == {"a": False, "b": True}


# ---- PreScore and Score: kube's scoring_test.go --------------------------------------------------


def vec_scores(
    p: Pod, nodes: list[Node], existing: list[Pod], args: PodTopologySpreadArgs | None, workloads: Workloads
) -> tuple[bool, dict[str, int], dict[str, int]]:
    table = NodeTable(capacity=8)
    table.add_nodes(nodes)
    for e in existing:
        table.assume(PodInfo.of(e), e.spec.node_name)
    table.workloads = workloads
    plugin, state = PodTopologySpread(args), CycleState()
    rows = np.array([table.row_of[n.name] for n in nodes], dtype=np.intp)
    if plugin.pre_score_feasible(state, p, table, rows).is_skip:
        return False, {}, {}
    raw = plugin.score(state, p, table.view(), rows)
    norm = plugin.normalize_score(state, p, np, raw)
    names = [n.name for n in nodes]
    return True, dict(zip(names, map(int, raw), strict=True)), dict(zip(names, map(int, norm), strict=True))


def ref_state(
    p: Pod, nodes: list[Node], existing: list[Pod], args: PodTopologySpreadArgs | None, workloads: Workloads
) -> tuple[ref.PodTopologySpread, CycleState, list[NodeInfo]]:
    infos = {n.name: NodeInfo(n) for n in nodes}
    for e in existing:
        infos[e.spec.node_name].add_pod(PodInfo.of(e))
    state = CycleState()
    state.write(SNAPSHOT_STATE_KEY, list(infos.values()))
    state.write(WORKLOADS_STATE_KEY, workloads)
    return ref.PodTopologySpread(args), state, list(infos.values())


def ref_scores(
    p: Pod, nodes: list[Node], existing: list[Pod], args: PodTopologySpreadArgs | None, workloads: Workloads
) -> tuple[bool, dict[str, int], dict[str, int]]:
    plugin, state, infos = ref_state(p, nodes, existing, args, workloads)
    if plugin.pre_score(state, p, infos).is_skip:
        return False, {}, {}
    raw = {i.name: plugin.score(state, p, i) for i in infos}
    norm = dict(raw)
    plugin.normalize_score(state, p, norm)
    return True, raw, norm


def test_pre_score_skips_default_constraints_and_a_replica_set_that_does_not_match() -> None:
    p = pod("p", "foo=bar", "baz=sup", owners=(owner("rs2"),))
    args = list_args(spread(2, "planet", SA))
    workloads = Workloads([ReplicaSet("default", "rs1", exists("tar"))])
    nodes = [Node(ObjectMeta(name="node-a", namespace="", labels={"planet": "mars"}))]
    assert not vec_scores(p, nodes, [], args, workloads)[0]
    assert not ref_scores(p, nodes, [], args, workloads)[0]


RS1_FOO = Workloads([ReplicaSet("default", "rs1", exists("foo"))])
POD_OF_RS1 = pod("p", "foo=tar", "baz=sup", owners=(owner("rs1"),))


def test_pre_score_state_system_default_constraints_and_a_replica_set() -> None:
    """Nodes without a zone are not ignored under the System defaults: their zone "" is one
    more domain (kube: "They are considered a separate zone")."""
    nodes = [node("node-a", **{ZONE: "mars"}), node("node-b", **{ZONE: "mars"}), node("node-c"), node("node-d")]
    plugin, state, infos = ref_state(POD_OF_RS1, nodes, [], None, RS1_FOO)
    assert plugin.pre_score(state, POD_OF_RS1, infos).is_success
    s = state.read(ref.PRE_SCORE_STATE_KEY)
    assert [(c.max_skew, c.topology_key) for c in s.constraints] == [(3, HOST), (5, ZONE)]
    assert all(c.selector.matches({"foo": "x"}) and not c.selector.matches({}) for c in s.constraints)
    assert s.ignored_nodes == set()
    assert s.topology_value_to_pod_counts[1] == {"mars": 0, "": 0}
    assert s.topology_normalizing_weight == [go_log(6.0), go_log(4.0)]
    assert vec_scores(POD_OF_RS1, nodes, [], None, RS1_FOO) == ref_scores(POD_OF_RS1, nodes, [], None, RS1_FOO)


def test_pre_score_state_default_constraints_and_a_replica_set() -> None:
    args = list_args(spread(1, HOST, SA), spread(2, "rack", DNS), spread(2, "planet", SA))
    nodes = [node("node-a", rack="rack1", planet="mars")]
    plugin, state, infos = ref_state(POD_OF_RS1, nodes, [], args, RS1_FOO)
    assert plugin.pre_score(state, POD_OF_RS1, infos).is_success
    s = state.read(ref.PRE_SCORE_STATE_KEY)
    assert [(c.max_skew, c.topology_key) for c in s.constraints] == [(1, HOST), (2, "planet")]
    assert s.topology_value_to_pod_counts[1] == {"mars": 0}
    assert s.topology_normalizing_weight == [go_log(3.0), go_log(3.0)]
    assert vec_scores(POD_OF_RS1, nodes, [], args, RS1_FOO) == ref_scores(POD_OF_RS1, nodes, [], args, RS1_FOO)
    # the pod's own constraints win over the defaults
    own = pod(
        "p",
        "foo=bar",
        "baz=sup",
        owners=(owner("rs1"),),
        spreads=(
            spread(1, "zone", DNS, LabelSelector({"foo": "bar"})),
            spread(2, "planet", SA, LabelSelector({"baz": "sup"})),
        ),
    )
    plugin, state, infos = ref_state(
        own, [node("node-a", planet="mars", galaxy="andromeda")], [], list_args(spread(2, "galaxy", SA)), RS1_FOO
    )
    assert plugin.pre_score(state, own, infos).is_success
    assert [(c.max_skew, c.topology_key) for c in state.read(ref.PRE_SCORE_STATE_KEY).constraints] == [(2, "planet")]


def test_score_system_defaulting_nodes_without_zone_pods_match_a_service() -> None:
    """kube: "system defaulting, nodes don't have zone, pods match service": the same scores as
    one hostname constraint of maxSkew 3."""
    p = pod("p", "foo")
    nodes = [node(n) for n in ("node-a", "node-b", "node-c", "node-d")]
    counts = {"node-a": 4, "node-b": 3, "node-c": 2, "node-d": 1}
    existing = [pod(f"p-{n}{i}", "foo", node=n) for n, c in counts.items() for i in range(c)]
    workloads = Workloads([svc("s", foo="")])
    want = {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}
    vec = vec_scores(p, nodes, existing, None, workloads)
    assert vec[0] and vec[2] == want
    assert vec == ref_scores(p, nodes, existing, None, workloads)
    # without the Service: no default constraint, PreScore skips
    assert not vec_scores(p, nodes, existing, None, NO_WORKLOADS)[0]


# ---- classes, hints -------------------------------------------------------------------------------


def test_pods_of_different_controllers_are_different_classes() -> None:
    a, b = pod("a", "app=web", owners=(owner("rs1"),)), pod("b", "app=web", owners=(owner("rs2"),))
    twin = pod("c", "app=web", owners=(replace(owner("rs1"), uid="other"),))
    assert pod_class_key(a) != pod_class_key(b)
    assert pod_class_key(a) == pod_class_key(twin)
    assert pod_class_key(pod("d", "app=web")) != pod_class_key(a)


PTS_CONFIG = (
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    "profiles: [{plugins: {multiPoint: {enabled: [{name: PodTopologySpread, weight: 2}]}}}]"
)


def test_kept_classes_are_dropped_when_the_workloads_change() -> None:
    registry = in_tree_registry()
    profile = without_post_filter(load_config(PTS_CONFIG, registry=registry).profiles[0])
    nodes = [node("a", **{ZONE: "z1"}), node("b", **{ZONE: "z2"})]
    table = NodeTable(seed=1)
    table.add_nodes(nodes)
    scheduler = Scheduler(Framework.from_profile(profile, registry), table, seed=1)
    first = scheduler.schedule([pod(f"w{i}", "app=web") for i in range(3)])
    assert {r.node for r in first} <= {"a", "b"}
    start = scheduler.next_start_node_index
    table.workloads = Workloads([svc("web", app="web")])
    got = [r.node for r in scheduler.schedule([pod(f"x{i}", "app=web") for i in range(4)])]
    fresh_table = NodeTable(seed=1)
    fresh_table.add_nodes(nodes)
    for r in first:
        fresh_table.assume(PodInfo.of(r.pod), r.node or "")
    fresh_table.workloads = table.workloads
    fresh = Scheduler(Framework.from_profile(profile, registry), fresh_table, seed=1)
    fresh.next_start_node_index = start
    want = [r.node for r in fresh.schedule([pod(f"x{i}", "app=web") for i in range(4)])]
    assert got == want
    counts = {n: sum(1 for r in first if r.node == n) + got.count(n) for n in ("a", "b")}
    assert abs(counts["a"] - counts["b"]) <= 1  # the Service's pods spread from then on


def test_hints_of_default_hard_constraints_queue() -> None:
    """Queueing hints see no workloads: a pod whose DoNotSchedule constraints are default ones is
    queued by any pod or node change; System defaults (soft only) change nothing."""
    hard = PodTopologySpread(list_args(spread(1, "node", DNS)))
    p = pod("p", "foo=bar")
    other = pod("q", "x", node="a")
    assert hard.is_schedulable_after_pod_change(p, None, other) is QueueingHint.QUEUE
    assert hard.is_schedulable_after_node_change(p, None, node("n")) is QueueingHint.QUEUE
    system = PodTopologySpread()
    assert system.is_schedulable_after_pod_change(p, None, other) is QueueingHint.QUEUE_SKIP
    # a pod in another namespace never matters
    assert (
        hard.is_schedulable_after_pod_change(p, None, pod("q", "foo=bar", node="a", ns="x")) is QueueingHint.QUEUE_SKIP
    )


# ---- manifests ------------------------------------------------------------------------------------

WORKLOAD_MANIFESTS = """\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ml, uid: s-1}
spec: {selector: {app: web}, ports: [{port: 80}], type: ClusterIP}
---
apiVersion: v1
kind: Service
metadata: {name: external}
spec: {type: ExternalName, externalName: example.com}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: old}
spec: {replicas: 2, template: {metadata: {labels: {app: old}}, spec: {containers: [{name: c}]}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web-1, namespace: ml}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}, matchExpressions: [{key: tier, operator: Exists}]}
  template: {metadata: {labels: {app: web, tier: "1"}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec: {serviceName: db, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}}}
"""


def test_the_four_kinds_are_read() -> None:
    m = parse_manifests(WORKLOAD_MANIFESTS)
    assert m.workloads == (
        Service("ml", "web", {"app": "web"}, uid="s-1"),
        Service("default", "external", None, uid=m.workloads[1].uid),
        ReplicationController("default", "old", {"app": "old"}, uid=m.workloads[2].uid),
        ReplicaSet(
            "ml",
            "web-1",
            LabelSelector({"app": "web"}, (LabelSelectorRequirement("tier", EXISTS),)),
            uid=m.workloads[3].uid,
        ),
        StatefulSet("default", "db", LabelSelector({"app": "db"}), uid=m.workloads[4].uid),
    )
    assert parse_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}) == Service(
        "default", "s", None, uid=parse_manifests("kind: Service\nmetadata: {name: s}\n").workloads[0].uid
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selecter: {app: web}}\n",
            "m.yaml: Service default/s: spec.selecter: unknown field (a Service spec has ports, selector,",
        ),
        (
            "kind: Service\nmetadata: {name: s}\nspec: {selector: {app: [web]}}\n",
            "m.yaml: Service default/s: spec.selector",
        ),
        (
            "apiVersion: apps/v1\nkind: Service\nmetadata: {name: s}\n",
            'm.yaml: Service default/s: apiVersion: "apps/v1" is not supported for Service (want v1)',
        ),
        (
            "apiVersion: v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {selector: {matchLabels: {a: b}}}\n",
            'm.yaml: ReplicaSet default/r: apiVersion: "v1" is not supported for ReplicaSet (want apps/v1)',
        ),
        (
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: 1}\n",
            "m.yaml: ReplicaSet default/r: spec.selector: is required",
        ),
        (
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec: {selector: {}}\n",
            "m.yaml: StatefulSet default/s: spec.selector: must not be empty",
        ),
        (
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\n"
            "spec: {selector: {matchExpressions: [{key: a, operator: In}]}}\n",
            "m.yaml: StatefulSet default/s: spec.selector.matchExpressions[0].values",
        ),
        (
            "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: r}\nspec: {replicas: 1}\n",
            "m.yaml: ReplicationController default/r: spec.selector: is required",
        ),
        (
            "kind: Service\nmetadata: {name: s}\n---\nkind: Service\nmetadata: {name: s}\n",
            "m.yaml: Service default/s: metadata.name: duplicate: the same service is already defined in document 1",
        ),
        (
            "kind: Pod\nmetadata: {name: p, ownerReferences: [{kind: ReplicaSet, name: r}]}\n"
            "spec: {containers: [{name: c}]}\n",
            "m.yaml: Pod default/p: metadata.ownerReferences[0].apiVersion: is required",
        ),
        (
            "kind: Pod\nmetadata:\n  name: p\n  ownerReferences:\n"
            "  - {apiVersion: apps/v1, kind: ReplicaSet, name: r, controller: true}\n"
            "  - {apiVersion: apps/v1, kind: StatefulSet, name: s, controller: true}\n"
            "spec: {containers: [{name: c}]}\n",
            "m.yaml: Pod default/p: metadata.ownerReferences[1].controller: only one reference can have controller "
            "set to true (also ownerReferences[0])",
        ),
    ],
)
def test_manifest_errors(text: str, want: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_manifests(text, source="m.yaml")
    assert str(e.value).startswith(want), str(e.value)


def test_a_service_and_a_replica_set_of_one_name_are_two_objects() -> None:
    text = (
        "kind: Service\nmetadata: {name: web}\n---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web}\n"
        "spec: {selector: {matchLabels: {app: web}}}\n"
    )
    assert len(parse_manifests(text).workloads) == 2


SERVICE_S = b"---\nkind: Service\nmetadata: {name: s}\n"


def test_a_wire_pod_is_one_pod_and_keeps_its_controller() -> None:
    manifest = (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","ownerReferences":[{"apiVersion":"apps/v1",'
        b'"kind":"ReplicaSet","name":"r","uid":"u","controller":true}]},"spec":{"containers":[{"name":"c"}]}}'
    )
    assert wire_pod(manifest, "u1", "default/p").metadata.controller == OwnerReference(
        "apps/v1", "ReplicaSet", "r", "u", True
    )
    with pytest.raises(ValueError, match="other object"):
        wire_pod(b"kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n" + SERVICE_S, "u1", "default/p")


# ---- kubus simulate ------------------------------------------------------------------------------

CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: a1, labels: {topology.kubernetes.io/zone: a}}
status: {allocatable: {cpu: "64", memory: 256Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: b1, labels: {topology.kubernetes.io/zone: b}}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: c1, labels: {topology.kubernetes.io/zone: c}}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
"""
WEB_PODS = "".join(
    f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: web-{i}, labels: {{app: web}}}}\n"
    "spec: {containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]}\n"
    for i in range(6)
)
WEB_SERVICE = (
    "---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n"
)


def placements(text: str) -> dict[str, int]:
    manifests = parse_manifests(text)
    registry = in_tree_registry()
    outcomes, _ = simulate(
        manifests, default_config(registry=registry), backend=select_backend("numpy"), registry=registry
    )
    assert all(o.status == SCHEDULED for o in outcomes)
    counts: dict[str, int] = {}
    for o in outcomes:
        assert o.node is not None
        counts[o.node] = counts.get(o.node, 0) + 1
    # kube's answer: the reference scheduler, one node at a time, with the same workloads
    profile = reference_profile(default_config(registry=registry).profiles[0])
    scheduler = ReferenceScheduler(profile, workloads=Workloads(manifests.workloads))
    results = scheduler.schedule_all(manifests.pods, [NodeInfo(n) for n in manifests.nodes])
    assert [r.node for r in results] == [o.node for o in outcomes]
    return counts


def test_simulate_spreads_the_pods_of_a_service_over_zones() -> None:
    """Six pods on three nodes in three zones, one node four times the others: without a Service
    the roomiest node takes most (NodeResourcesFit's LeastAllocated); with one, the system
    default constraints (hostname maxSkew 3, zone maxSkew 5, weight 2) spread them 2/2/2, as
    kube-scheduler does."""
    assert placements(CLUSTER + WEB_PODS) == {"a1": 4, "b1": 1, "c1": 1}
    assert placements(CLUSTER + WEB_PODS + WEB_SERVICE) == {"a1": 2, "b1": 2, "c1": 2}


def test_kubus_simulate_reads_a_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kubus.cli.main import main

    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "pods.yaml").write_text(WEB_PODS)
    (tmp_path / "svc.yaml").write_text(WEB_SERVICE)
    files = ["-f", str(tmp_path / "cluster.yaml"), "-f", str(tmp_path / "pods.yaml"), "-f", str(tmp_path / "svc.yaml")]
    assert main(["simulate", *files, "-o", "json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    pods = out["pods"] if isinstance(out, dict) else out
    nodes = sorted(p["node"] for p in pods)
    assert nodes == ["a1", "a1", "b1", "b1", "c1", "c1"]


# ---- both schedulers agree, with workloads -------------------------------------------------------

APPS = ("web", "db", "api")


@dataclass(frozen=True)
class Cluster:
    nodes: list[Node]
    pods: list[Pod]
    incoming: list[Pod]
    workloads: Workloads
    args: PodTopologySpreadArgs | None = field(default=None)


def random_cluster(rng: random.Random) -> Cluster:
    nodes = []
    for i in range(rng.randint(1, 9)):
        labels = {"rack": rng.choice(("r1", "r2", "r3"))}
        if rng.random() < 0.8:
            labels[ZONE] = rng.choice(("z1", "z2", "z3"))
        n = node(f"n{i}", **labels)
        if rng.random() < 0.1:
            n = replace(n, metadata=replace(n.metadata, labels={k: v for k, v in labels.items()}))  # no hostname
        nodes.append(n)
    objects: list[Any] = []
    for app in APPS:
        if rng.random() < 0.6:
            objects.append(svc(f"svc-{app}", rng.choice(("default", "default", "other")), app=app))
        roll = rng.random()
        if roll < 0.3:
            objects.append(ReplicaSet("default", f"rs-{app}", LabelSelector({"app": app}, ())))
        elif roll < 0.5:
            objects.append(StatefulSet("default", f"ss-{app}", exists("tier")))
        elif roll < 0.6:
            objects.append(ReplicationController("default", f"rc-{app}", {"app": app}))

    def a_pod(name: str, node_name: str = "") -> Pod:
        app = rng.choice(APPS)
        labels = [f"app={app}"] + (["tier=1"] if rng.random() < 0.5 else [])
        owners: tuple[OwnerReference, ...] = ()
        roll = rng.random()
        if roll < 0.3:
            owners = (owner(f"rs-{app}"),)
        elif roll < 0.45:
            owners = (owner(f"ss-{app}", SS_KIND),)
        elif roll < 0.55:
            owners = (owner(f"rc-{app}", RC_KIND),)
        return pod(name, *labels, ns=rng.choice(("default", "default", "other")), node=node_name, owners=owners)

    existing = [a_pod(f"e{i}", rng.choice(nodes).name) for i in range(rng.randint(0, 20))]
    incoming = [a_pod(f"p{i}") for i in range(rng.randint(1, 8))]
    args = None
    if rng.random() < 0.4:
        args = list_args(spread(rng.randint(1, 2), "rack", DNS), spread(1, ZONE, SA))
    return Cluster(nodes, existing, incoming, Workloads(objects), args)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.integers(1, 5), min_size=1, max_size=3))
def test_schedulers_agree_with_workloads(seed: int, batches: list[int]) -> None:
    """The vectorized scheduler (one by one and in batches) places pods under default
    constraints exactly as the reference scheduler does, System and List defaulting alike."""
    cluster = random_cluster(random.Random(seed))
    registry = in_tree_registry()
    text = PTS_CONFIG
    if cluster.args is not None:
        text = text.replace(
            "}]}}}]",
            "}]}}, pluginConfig: [{name: PodTopologySpread, args: {defaultingType: List, defaultConstraints: "
            f"[{{maxSkew: {cluster.args.default_constraints[0].max_skew}, topologyKey: rack, "
            "whenUnsatisfiable: DoNotSchedule}, "
            "{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]}}]}]",
        )
    profile = without_post_filter(load_config(text, registry=registry).profiles[0])
    pods = [
        replace(p, metadata=replace(p.metadata, name=f"{p.name}-{k}", uid=f"{p.metadata.uid}-{k}"))
        for k in range(2)
        for p in cluster.incoming
    ]
    infos = {n.name: NodeInfo(n) for n in cluster.nodes}
    for e in cluster.pods:
        infos[e.spec.node_name].add_pod(PodInfo.of(e))
    reference = ReferenceScheduler(reference_profile(profile), seed=3, workloads=cluster.workloads)
    want = [(r.pod.name, r.node, r.message) for r in reference.schedule_all(pods, list(infos.values()))]
    for sizes in ([1], batches):
        table = NodeTable(seed=3, capacity=4)
        table.add_nodes(cluster.nodes)
        for e in cluster.pods:
            table.assume(PodInfo.of(e), e.spec.node_name)
        table.workloads = cluster.workloads
        scheduler = Scheduler(Framework.from_profile(profile, registry), table, seed=3)
        got, i, b = [], 0, 0
        while i < len(pods):
            size = sizes[b % len(sizes)]
            got += [(r.pod.name, r.node, r.message) for r in scheduler.schedule(pods[i : i + size])]
            i, b = i + size, b + 1
        assert got == want
