"""DefaultPreemption: kube's default_preemption_test.go tables (TestPostFilter, TestDryRunPreemption,
TestSelectBestCandidate, TestPodEligibleToPreemptOthers, TestPreempt), pickOneNodeForPreemption
and PodDisruptionBudget cases, the plugin inside `Scheduler.schedule`, its args, and the
vectorized dry run held to the one-node-at-a-time reference on random clusters (PostFilter's
offset, `preemption_offset` of the pod's uid, given to the reference too), its two ways of taking
pods off (a what-if copy of the usage arrays, the node table itself) held to each other on random
clusters with GPUs and host ports, and the victims it remembers between dry runs.

kube's resource sizes and priorities are kept (smallRes = 100m cpu / 100 bytes, ...); kube's
epochTimeN start times are 1 + N seconds here (a kubus start time of 0 means "unknown"). kube
picks a random offset where these tests give one (kube's seeded offsets 4, 1, 3 where its own
tests depend on them). Not ported: extenders, custom IsEligiblePod/MoreImportantPod hooks,
DisruptedPods, pod groups, nominated pods and terminating victims (kubus has none of them), and
kube's counts of Filter calls (the dry run here makes one call per plugin per round, by design).
"""

from __future__ import annotations

import random
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.gpus import GPU_COUNT_ANNOTATION, GPU_MEMORY_ANNOTATION
from kubus.api.manifests import parse_node
from kubus.api.objects import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Affinity,
    Container,
    ContainerPort,
    GPUDevice,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    PreemptionPolicy,
    SelectorOperator,
    TopologySpreadConstraint,
)
from kubus.framework.config import ConfigError, DefaultPreemptionArgs, load_config
from kubus.framework.config._fields import FieldError
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterDiagnosis, FilterResult, PostFilterResult, Rows
from kubus.framework.registry import Registry
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code, Status
from kubus.kernels.backend import NUMPY, Backend
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import IN_TREE, in_tree_registry
from kubus.plugins._preemption_candidates import pick_scores
from kubus.plugins._preemption_dry_run import DryRun
from kubus.plugins._preemption_victims import Deltas, Shadow, VictimCache
from kubus.plugins.default_preemption import (
    Candidate,
    DefaultPreemption,
    calculate_num_candidates,
    pick_one_node_for_preemption,
    preemption_offset,
    split_by_pdb_violation,
    table_disruptions_allowed,
)
from kubus_reference import reference_profile
from kubus_reference.default_preemption import ReferencePreemption

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {CPU: 100, MEMORY: 100}
MEDIUM = {CPU: 200, MEMORY: 200}
LARGE = {CPU: 300, MEMORY: 300}
VERY_LARGE = {CPU: 500, MEMORY: 500}
ONE_POD = {PODS: 1}
HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
LABEL_KEYS = ("hostname", "zone", "region")
GI = 1024**3


def epoch(n: int) -> float:
    """kube's epochTimeN (time.Unix(0, N)), as a kubus start time."""
    return 1.0 + n


# ---- building clusters -----------------------------------------------------------------------


def make_pod(
    name: str,
    priority: int = 0,
    req: dict[str, int] | None = None,
    *,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    host_port: int = 0,
    affinity: Affinity | None = None,
    spread: tuple[TopologySpreadConstraint, ...] = (),
) -> Pod:
    ports = (ContainerPort(80, host_port=host_port),) if host_port else ()
    return Pod(
        ObjectMeta(name, namespace, uid=name, labels=dict(labels or {})),
        PodSpec(
            containers=(Container("c", requests=dict(req or {}), ports=ports),),
            priority=priority,
            preemption_policy=policy,
            affinity=affinity,
            topology_spread_constraints=spread,
        ),
    )


def make_node(spec: str, alloc: dict[str, int] | None = None, labels: dict[str, str] | None = None) -> Node:
    """``spec`` "name" or kube's "name/zone/region" (labels hostname, zone, region)."""
    values = spec.split("/")
    all_labels = dict(zip(LABEL_KEYS, values, strict=False)) | dict(labels or {})
    allocatable = {PODS: 32} | dict(alloc if alloc is not None else VERY_LARGE)
    return Node(ObjectMeta(values[0], "", labels=all_labels), status=NodeStatus(allocatable=allocatable))


@dataclass(frozen=True)
class Placed:
    pod: Pod
    node: str
    start: float = 0.0
    gpus: tuple[int, ...] = ()


def on(node: str, pod: Pod, start: float = 0.0, gpus: tuple[int, ...] = ()) -> Placed:
    return Placed(pod, node, start, gpus)


def exists(key: str) -> LabelSelector:
    return LabelSelector(match_expressions=(LabelSelectorRequirement(key, SelectorOperator.EXISTS),))


def anti_affinity(key: str, topology: str) -> Affinity:
    return Affinity(pod_anti_affinity=PodAffinity(required=(PodAffinityTerm(topology, exists(key)),)))


def spread(topology: str, key: str = "foo", skew: int = 1) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(skew, topology, "DoNotSchedule", exists(key))


def pdb(
    name: str,
    labels: dict[str, str] | None,
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    namespace: str = "default",
) -> PodDisruptionBudget:
    selector = None if labels is None else LabelSelector(match_labels=dict(labels))
    return PodDisruptionBudget(namespace, name, selector, min_available, max_unavailable)


def framework(
    *plugins: str, args: str = "", extra: Sequence[type] = (), preemption: bool = True
) -> tuple[Framework, Registry]:
    """A profile of ``plugins`` (every extension point they have) and DefaultPreemption."""
    registry = Registry((*IN_TREE, *extra))
    names = (*plugins, "DefaultPreemption") if preemption else plugins
    enabled = ", ".join(f"{{name: {n}}}" for n in names)
    text = (
        f"{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled: [{enabled}]\n"
        "      disabled: [{name: '*'}]\n    queueSort: {enabled: [{name: PrioritySort}]}\n"
        "    bind: {enabled: [{name: DefaultBinder}]}\n"
    )
    if args:
        text += f"  pluginConfig:\n  - name: DefaultPreemption\n    args: {args}\n"
    profile = load_config(text, registry=registry).profiles[0]
    return Framework.from_profile(profile, registry), registry


def build_table(
    nodes: Iterable[Node], pods: Iterable[Placed], pdbs: Sequence[PodDisruptionBudget] = (), backend: Backend = NUMPY
) -> NodeTable:
    table = NodeTable(backend, capacity=8)
    table.add_nodes(nodes)
    for p in pods:
        table.assume(PodInfo.of(p.pod, p.gpus, start_time=p.start), p.node)
    table.disruption_budgets = tuple(pdbs)
    return table


def pre_filter(fw: Framework, table: NodeTable, pod: Pod) -> CycleState:
    """The pod's CycleState after PreFilter (each plugin succeeds or skips)."""
    state = CycleState()
    for plugin in fw.pre_filter:
        _, status = plugin.pre_filter(state, pod, table)
        if status.is_skip:
            state.skip_filter_plugins.add(plugin.name)
        else:
            assert status.is_success, status
    return state


def plugin_of(fw: Framework) -> DefaultPreemption:
    plugin = fw.post_filter[0]
    assert isinstance(plugin, DefaultPreemption)
    return plugin


def diagnosis(table: NodeTable, fw: Framework, unschedulable: Iterable[str]) -> FilterDiagnosis:
    """kube's NodeToStatusMap as kubus passes it: the nodes rejected only Unschedulable."""
    resolvable = np.zeros(table.rows, dtype=bool)
    for name in unschedulable:
        resolvable[table.row_of[name]] = True
    return FilterDiagnosis(len(table), {}, frozenset(), table=table, framework=fw, resolvable=resolvable)


def dry_run(
    fw: Framework, table: NodeTable, pod: Pod, offset: int = 0, rows: Sequence[int] | None = None
) -> tuple[dict[str, tuple[list[str], int]], dict[str, Status]]:
    """DryRunPreemption over every node (kube's tests pass them all) from ``offset``:
    ({node: (victim names sorted, violations)}, statuses)."""
    plugin = plugin_of(fw)
    state = pre_filter(fw, table, pod)
    all_rows = list(table.valid_rows()) if rows is None else list(rows)
    _, num = plugin.get_offset_and_num_candidates(len(all_rows))
    result = plugin.dry_run_preemption(state, pod, table, fw, all_rows, offset, num)
    got = {c.node: (sorted(v.pod.name for v in c.victims), c.num_pdb_violations) for c in result.candidates}
    return got, result.statuses


def table_state(table: NodeTable) -> tuple[Any, ...]:
    """Everything the node table holds about pods, orders included."""
    view = table.view()
    arrays = {k: table.backend.to_host(getattr(view, k)).tolist() for k in ("req", "nz_cpu", "nz_mem", "gpu_free")}
    infos = [
        None
        if i is None
        else (
            list(i.pods),
            sorted((k, v) for k, v in i.requested.items() if v),
            i.non_zero_cpu,
            i.non_zero_memory,
            sorted((k, v) for k, v in i.used_ports.items() if v),
            list(i.gpu_free_memory),
        )
        for i in table.infos
    ]
    ports = sorted((k, sorted(v)) for k, v in table.port_rows.items() if v)
    groups = sorted(
        (g.namespace, sorted(g.labels.items()), sorted(g.counts.rows.items())) for g in table.pods.label_groups()
    )
    terms = sorted(
        (g.kind.value, repr(g.term.key), g.weight, sorted(g.counts.rows.items())) for g in table.pods.term_groups()
    )
    return arrays, infos, ports, groups, terms, len(table.pods)


# ---- test plugins (kube's testing/framework fakes) -------------------------------------------------

ERR_REASON_FAKE = "Nodes failed the fake plugin"


def _rows(view: TableView, rows: Rows) -> np.ndarray:
    return np.arange(view.table.rows)[rows] if isinstance(rows, slice) else view.table.backend.to_host(rows)


class FalseFilter:
    name: ClassVar[str] = "FalseFilter"
    placement_sensitive: ClassVar[bool] = False

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        return FilterResult.single(np.zeros(len(_rows(view, rows)), dtype=bool), ERR_REASON_FAKE)


class TrueFilter:
    name: ClassVar[str] = "TrueFilter"
    placement_sensitive: ClassVar[bool] = False

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        return FilterResult(np.ones(len(_rows(view, rows)), dtype=bool))


class MatchFilter:
    """Passes the node named as the pod."""

    name: ClassVar[str] = "MatchFilter"
    placement_sensitive: ClassVar[bool] = False

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        infos = view.table.infos
        passed = np.array([(i := infos[r]) is not None and i.name == pod.name for r in _rows(view, rows)], dtype=bool)
        return FilterResult.single(passed, ERR_REASON_FAKE)


class ErrorOnLabel:
    """kube's TestPlugin: a PreFilter plugin whose AddPod/RemovePod fail on nodes labeled error=true."""

    name: ClassVar[str] = "test-plugin"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[None, Status]:
        return None, Status.success()

    def add_pod(self, state: CycleState, pod: Pod, other: PodInfo, node_info: NodeInfo) -> Status:
        if node_info.node.metadata.labels.get("error") == "true":
            return Status.error(f"failed to add pod: {pod.name}")
        return Status.success()

    def remove_pod(self, state: CycleState, pod: Pod, other: PodInfo, node_info: NodeInfo) -> Status:
        if node_info.node.metadata.labels.get("error") == "true":
            return Status.error(f"failed to remove pod: {pod.name}")
        return Status.success()


# ---- TestPostFilter ----------------------------------------------------------------------------------


@dataclass
class PostFilterCase:
    name: str
    pod: Pod
    pods: list[Placed]
    nodes: list[Node]
    unschedulable: tuple[str, ...]
    """The nodes whose Filter status was Unschedulable (the others: UnschedulableAndUnresolvable or absent)."""
    want_node: str = ""
    want_status: Status = field(default_factory=Status.success)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)


NODE_RES = {CPU: 200, MEMORY: 400}

POST_FILTER_CASES = [
    PostFilterCase(
        "pod with higher priority can be made schedulable",
        make_pod("p", HIGH),
        [on("node1", make_pod("p1"))],
        [make_node("node1", ONE_POD)],
        ("node1",),
        want_node="node1",
    ),
    PostFilterCase(
        "pod with tied priority is still unschedulable",
        make_pod("p"),
        [on("node1", make_pod("p1"))],
        [make_node("node1", ONE_POD)],
        ("node1",),
        want_status=Status.unschedulable(
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        ),
    ),
    PostFilterCase(
        "preemption should respect filteredNodesStatuses",
        make_pod("p", HIGH),
        [on("node1", make_pod("p1"))],
        [make_node("node1", ONE_POD)],
        (),
        want_status=Status.unschedulable(
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        ),
    ),
    PostFilterCase(
        "pod can be made schedulable on one node",
        make_pod("p", MID),
        [on("node1", make_pod("p1", HIGH)), on("node2", make_pod("p2", LOW))],
        [make_node("node1", ONE_POD), make_node("node2", ONE_POD)],
        ("node1", "node2"),
        want_node="node2",
    ),
    PostFilterCase(
        "pod can be made schedulable on minHighestPriority node",
        make_pod("p", VERY_HIGH),
        [
            on("node1", make_pod("p1", HIGH, labels={"pdb": "non-violating"})),
            on("node1", make_pod("p2", LOW, labels={"pdb": "violating"})),
            on("node2", make_pod("p3", MID, labels={"pdb": "violating"})),
        ],
        [make_node("node1", ONE_POD), make_node("node2", ONE_POD)],
        ("node1", "node2"),
        want_node="node2",
        pdbs=[
            pdb("violating-pdb", {"pdb": "violating"}, min_available="100%"),
            pdb("non-violating-pdb", {"pdb": "non-violating"}, min_available=0),
        ],
    ),
    PostFilterCase(
        "no candidate nodes found, no enough resource after removing low priority pods",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1")), on("node2", make_pod("p2"))],
        [make_node("node1", NODE_RES), make_node("node2", NODE_RES)],
        ("node1", "node2"),
        want_status=Status.unschedulable("preemption: 0/2 nodes are available: 2 Insufficient cpu."),
    ),
    PostFilterCase(
        "no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1", HIGH)), on("node2", make_pod("p2")), on("node3", make_pod("p3", HIGH))],
        [make_node("node1", ONE_POD), make_node("node2", NODE_RES), make_node("node3", ONE_POD)],
        ("node1", "node2", "node3"),
        want_status=Status.unschedulable(
            "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod."
        ),
    ),
    PostFilterCase(
        "no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 nodes don't have "
        "enough CPU resource",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1")), on("node2", make_pod("p2"))],
        [make_node(f"node{i}", NODE_RES) for i in range(1, 5)],
        ("node1", "node2"),
        want_status=Status.unschedulable(
            "preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling."
        ),
    ),
    PostFilterCase(
        "only one node but failed with TestPlugin",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1"))],
        [make_node("node1", LARGE, {"error": "true"})],
        ("node1",),
        want_status=Status.error(
            'preemption: running RemovePod on PreFilter plugin "test-plugin": failed to remove pod: p'
        ),
    ),
    PostFilterCase(
        "one failed with TestPlugin and the other pass",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1")), on("node2", make_pod("p2", req=MEDIUM))],
        [make_node("node1", LARGE, {"error": "true"}), make_node("node2", LARGE)],
        ("node1", "node2"),
        want_node="node2",
    ),
]


@pytest.mark.parametrize("case", POST_FILTER_CASES, ids=lambda c: c.name)
def test_post_filter(case: PostFilterCase) -> None:
    fw, _ = framework("NodeResourcesFit", "test-plugin", extra=[ErrorOnLabel])
    table = build_table(case.nodes, case.pods, case.pdbs)
    before = table_state(table)
    state = pre_filter(fw, table, case.pod)
    got = plugin_of(fw).post_filter(state, case.pod, diagnosis(table, fw, case.unschedulable))
    assert (got.status, got.nominated_node) == (case.want_status, case.want_node)
    assert table_state(table) == before


def test_post_filter_without_potential_nodes_or_table() -> None:
    fw, _ = framework("NodeResourcesFit")
    table = build_table([make_node("node1", ONE_POD)], [on("node1", make_pod("p1"))])
    pod = make_pod("p", HIGH)
    # kube: "preemption should respect absent NodeToStatusReader entry meaning UnschedulableAndUnresolvable"
    got = plugin_of(fw).post_filter(pre_filter(fw, table, pod), pod, diagnosis(table, fw, ()))
    assert got.status.message() == "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    bare = plugin_of(fw).post_filter(CycleState(), pod, FilterDiagnosis(1, {}, frozenset()))
    assert bare.status.code is Code.ERROR


# ---- TestDryRunPreemption ------------------------------------------------------------------------------


def test_dry_run_a_pod_that_does_not_fit_on_any_node() -> None:
    fw, _ = framework("FalseFilter", extra=[FalseFilter])
    table = build_table(
        [make_node("node1"), make_node("node2")], [on("node1", make_pod("p1", MID)), on("node2", make_pod("p2", MID))]
    )
    got, statuses = dry_run(fw, table, make_pod("p", HIGH))
    assert got == {}
    assert {n: (s.code, s.reasons, s.plugin) for n, s in statuses.items()} == {
        n: (Code.UNSCHEDULABLE, (ERR_REASON_FAKE,), "FalseFilter") for n in ("node1", "node2")
    }


@pytest.mark.parametrize("plugin", [TrueFilter, MatchFilter])
def test_dry_run_a_pod_that_fits_with_no_preemption(plugin: type[TrueFilter | MatchFilter]) -> None:
    # kube: "a pod that fits with no preemption", "a pod that fits on one node with no preemption"
    fw, _ = framework(plugin.name, extra=[plugin])
    table = build_table(
        [make_node("node1"), make_node("node2")], [on("node1", make_pod("p1", MID)), on("node2", make_pod("p2", MID))]
    )
    got, statuses = dry_run(fw, table, make_pod("node1", HIGH))
    assert got == {}
    assert statuses["node1"] == Status(Code.ERROR, ('expected at least one victim pod on node "node1"',))
    assert statuses["node2"].code is (Code.ERROR if plugin is TrueFilter else Code.UNSCHEDULABLE)


@dataclass
class DryRunCase:
    name: str
    pod: Pod
    pods: list[Placed]
    expected: dict[str, tuple[list[str], int]]
    nodes: tuple[str, ...] = ("node1", "node2")
    plugins: tuple[str, ...] = ("NodeResourcesFit",)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)


DRY_RUN_CASES = [
    DryRunCase(
        "a pod that fits on both nodes when lower priority pods are preempted",
        make_pod("p", HIGH, LARGE),
        [on("node1", make_pod("p1", MID, LARGE)), on("node2", make_pod("p2", MID, LARGE))],
        {"node1": (["p1"], 0), "node2": (["p2"], 0)},
    ),
    DryRunCase(
        "a pod that would fit on the nodes, but other pods running are higher priority, no preemption would happen",
        make_pod("p", LOW, LARGE),
        [on("node1", make_pod("p1", MID, LARGE)), on("node2", make_pod("p2", MID, LARGE))],
        {},
    ),
    DryRunCase(
        "medium priority pod is preempted, but lower priority one stays as it is small",
        make_pod("p", HIGH, LARGE),
        [
            on("node1", make_pod("p1.1", LOW, SMALL)),
            on("node1", make_pod("p1.2", MID, LARGE)),
            on("node2", make_pod("p2", MID, LARGE)),
        ],
        {"node1": (["p1.2"], 0), "node2": (["p2"], 0)},
    ),
    DryRunCase(
        "mixed priority pods are preempted",
        make_pod("p", HIGH, LARGE),
        [
            on("node1", make_pod("p1.1", MID, SMALL)),
            on("node1", make_pod("p1.2", LOW, SMALL)),
            on("node1", make_pod("p1.3", MID, MEDIUM)),
            on("node1", make_pod("p1.4", HIGH, SMALL)),
            on("node2", make_pod("p2", HIGH, LARGE)),
        ],
        {"node1": (["p1.2", "p1.3"], 0)},
    ),
    DryRunCase(
        "mixed priority pods are preempted, pick later StartTime one when priorities are equal",
        make_pod("p", HIGH, LARGE),
        [
            on("node1", make_pod("p1.1", LOW, SMALL), epoch(5)),
            on("node1", make_pod("p1.2", LOW, SMALL), epoch(4)),
            on("node1", make_pod("p1.3", MID, MEDIUM), epoch(3)),
            on("node1", make_pod("p1.4", HIGH, SMALL), epoch(2)),
            on("node2", make_pod("p2", HIGH, LARGE), epoch(1)),
        ],
        {"node1": (["p1.1", "p1.3"], 0)},
    ),
    DryRunCase(
        "pod with anti-affinity is preempted",
        make_pod("p", HIGH, SMALL, labels={"foo": ""}),
        [
            on("node1", make_pod("p1.1", LOW, SMALL, labels={"foo": ""}, affinity=anti_affinity("foo", "hostname"))),
            on("node1", make_pod("p1.2", MID, SMALL)),
            on("node1", make_pod("p1.3", HIGH, SMALL)),
            on("node2", make_pod("p2", HIGH, SMALL)),
        ],
        {"node1": (["p1.1"], 0)},
        plugins=("NodeResourcesFit", "InterPodAffinity"),
    ),
    DryRunCase(
        "preemption to resolve pod topology spread filter failure",
        make_pod("p", HIGH, labels={"foo": ""}, spread=(spread("zone"), spread("hostname"))),
        [
            on("node-a", make_pod("pod-a1", MID, labels={"foo": ""})),
            on("node-a", make_pod("pod-a2", LOW, labels={"foo": ""})),
            on("node-b", make_pod("pod-b1", LOW, labels={"foo": ""})),
            on("node-x", make_pod("pod-x1", HIGH, labels={"foo": ""})),
            on("node-x", make_pod("pod-x2", HIGH, labels={"foo": ""})),
        ],
        {"node-a": (["pod-a2"], 0), "node-b": (["pod-b1"], 0)},
        nodes=("node-a/zone1", "node-b/zone1", "node-x/zone2"),
        plugins=("PodTopologySpread",),
    ),
    DryRunCase(
        "preemption with violation of same pdb",
        make_pod("p", HIGH, VERY_LARGE),
        [
            on("node1", make_pod("p1.1", MID, MEDIUM, labels={"app": "foo"})),
            on("node1", make_pod("p1.2", MID, MEDIUM, labels={"app": "foo"})),
        ],
        {"node1": (["p1.1", "p1.2"], 1)},
        nodes=("node1",),
        pdbs=[pdb("foo", {"app": "foo"}, max_unavailable=1)],  # kube: DisruptionsAllowed 1
    ),
]


@pytest.mark.parametrize("case", DRY_RUN_CASES, ids=lambda c: c.name)
def test_dry_run_preemption(case: DryRunCase) -> None:
    fw, _ = framework(*case.plugins)
    table = build_table([make_node(n) for n in case.nodes], case.pods, case.pdbs)
    before = table_state(table)
    got, _ = dry_run(fw, table, case.pod)
    assert got == case.expected
    assert table_state(table) == before


FIVE = tuple(f"node{i}" for i in range(1, 6))


@pytest.mark.parametrize(
    ("priorities", "offsets", "expected"),
    [
        # kube: "all nodes are possible candidates, but DefaultPreemptionArgs limits to 2"
        ((MID,) * 5, (4,), [{"node1": (["p1"], 0), "node5": (["p5"], 0)}]),
        ((MID,) * 5, (0,), [{"node1": (["p1"], 0), "node2": (["p2"], 0)}]),
        # kube: "some nodes are not possible candidates, DefaultPreemptionArgs limits to 2"
        ((MID, VERY_HIGH, MID, MID, VERY_HIGH), (4,), [{"node1": (["p1"], 0), "node3": (["p3"], 0)}]),
        # kube: "preemption offset across multiple scheduling cycles and wrap around"
        (
            (MID,) * 5,
            (4, 1, 3),
            [
                {"node1": (["p1"], 0), "node5": (["p5"], 0)},
                {"node2": (["p2"], 0), "node3": (["p3"], 0)},
                {"node4": (["p4"], 0), "node5": (["p5"], 0)},
            ],
        ),
    ],
)
def test_dry_run_stops_after_num_candidates(
    priorities: tuple[int, ...], offsets: tuple[int, ...], expected: list[dict[str, Any]]
) -> None:
    fw, _ = framework("NodeResourcesFit", args="{minCandidateNodesPercentage: 40, minCandidateNodesAbsolute: 1}")
    pods = [on(n, make_pod(f"p{i}", prio, LARGE)) for i, (n, prio) in enumerate(zip(FIVE, priorities, strict=True), 1)]
    table = build_table([make_node(n) for n in FIVE], pods)
    for offset, want in zip(offsets, expected, strict=True):
        assert dry_run(fw, table, make_pod("tp", HIGH, LARGE), offset)[0] == want


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        # kube (offset 4): node5 (pdb), node1 (pdb), node2 (pdb: more than numCandidates of a kind, dropped),
        # node3 (no pdb): stop
        (4, {"node1": (["p1"], 1), "node3": (["p3"], 0), "node5": (["p5"], 1)}),
        (0, {"node1": (["p1"], 1), "node2": (["p2"], 1), "node3": (["p3"], 0)}),
    ],
)
def test_dry_run_looks_past_num_candidates_until_a_non_violating_node(offset: int, expected: dict[str, Any]) -> None:
    fw, _ = framework("NodeResourcesFit", args="{minCandidateNodesPercentage: 40, minCandidateNodesAbsolute: 2}")
    foo = {"app": "foo"}
    pods = [
        on("node1", make_pod("p1", MID, LARGE, labels=foo)),
        on("node2", make_pod("p2", MID, LARGE, labels=foo)),
        on("node3", make_pod("p3", MID, LARGE)),
        on("node4", make_pod("p4", MID, LARGE)),
        on("node5", make_pod("p5", MID, LARGE, labels=foo)),
    ]
    table = build_table([make_node(n) for n in FIVE], pods, [pdb("foo", foo, min_available="100%")])
    assert dry_run(fw, table, make_pod("p", HIGH, LARGE), offset)[0] == expected


def test_candidates_that_violate_no_budget_come_first() -> None:
    fw, _ = framework("NodeResourcesFit", args="{minCandidateNodesPercentage: 40, minCandidateNodesAbsolute: 2}")
    foo = {"app": "foo"}
    pods = [on("node1", make_pod("p1", MID, LARGE, labels=foo)), on("node2", make_pod("p2", MID, LARGE))]
    table = build_table([make_node(n) for n in FIVE[:2]], pods, [pdb("foo", foo, min_available=1)])
    pod = make_pod("p", HIGH, LARGE)
    plugin = plugin_of(fw)
    result = plugin.dry_run_preemption(pre_filter(fw, table, pod), pod, table, fw, [0, 1], 0, 2)
    assert [(c.node, c.num_pdb_violations) for c in result.candidates] == [("node2", 0), ("node1", 1)]


# ---- TestSelectBestCandidate --------------------------------------------------------------------------


SELECT_BEST_CASES = [
    (
        "a pod that fits on both nodes when lower priority pods are preempted",
        LARGE,
        [("node1", "p1", MID, LARGE), ("node2", "p2", MID, LARGE)],
        "node2",  # kube: node1 or node2; the first examined here (offset 4 of 3 nodes: node2)
    ),
    (
        "node with min highest priority pod is picked",
        VERY_LARGE,
        [
            ("node1", "p1.1", MID, MEDIUM),
            ("node1", "p1.2", MID, LARGE),
            ("node2", "p2.1", MID, MEDIUM),
            ("node2", "p2.2", LOW, MEDIUM),
            ("node3", "p3.1", LOW, MEDIUM),
            ("node3", "p3.2", LOW, MEDIUM),
        ],
        "node3",
    ),
    (
        "when highest priorities are the same, minimum sum of priorities is picked",
        VERY_LARGE,
        [
            ("node1", "p1.1", MID, MEDIUM),
            ("node1", "p1.2", MID, LARGE),
            ("node2", "p2.1", MID, LARGE),
            ("node2", "p2.2", LOW, MEDIUM),
            ("node3", "p3.1", MID, MEDIUM),
            ("node3", "p3.2", MID, MEDIUM),
        ],
        "node2",
    ),
    (
        "when highest priority and sum are the same, minimum number of pods is picked",
        VERY_LARGE,
        [
            ("node1", "p1.1", MID, SMALL),
            ("node1", "p1.2", NEG, SMALL),
            ("node1", "p1.3", MID, SMALL),
            ("node1", "p1.4", NEG, SMALL),
            ("node2", "p2.1", MID, LARGE),
            ("node2", "p2.2", NEG, MEDIUM),
            ("node3", "p3.1", MID, MEDIUM),
            ("node3", "p3.2", NEG, SMALL),
            ("node3", "p3.3", LOW, SMALL),
        ],
        "node2",
    ),
    (
        "sum of adjusted priorities is considered",
        VERY_LARGE,
        [
            ("node1", "p1.1", MID, SMALL),
            ("node1", "p1.2", NEG, SMALL),
            ("node1", "p1.3", NEG, SMALL),
            ("node2", "p2.1", MID, LARGE),
            ("node2", "p2.2", NEG, MEDIUM),
            ("node3", "p3.1", MID, MEDIUM),
            ("node3", "p3.2", NEG, SMALL),
            ("node3", "p3.3", LOW, SMALL),
        ],
        "node2",
    ),
    (
        "non-overlapping lowest high priority, sum priorities, and number of pods",
        VERY_LARGE,
        [
            ("node1", "p1.1", MID, SMALL),
            ("node1", "p1.2", LOW, SMALL),
            ("node1", "p1.3", LOW, SMALL),
            ("node2", "p2.1", HIGH, LARGE),
            ("node3", "p3.1", MID, MEDIUM),
            ("node3", "p3.2", LOW, SMALL),
            ("node3", "p3.3", LOW, SMALL),
            ("node3", "p3.4", LOW, MEDIUM),
            ("node4", "p4.1", MID, MEDIUM),
            ("node4", "p4.2", MID, SMALL),
            ("node4", "p4.3", MID, SMALL),
            ("node4", "p4.4", NEG, SMALL),
        ],
        "node1",
    ),
]


@pytest.mark.parametrize(("name", "req", "pods", "expected"), SELECT_BEST_CASES, ids=[c[0] for c in SELECT_BEST_CASES])
def test_select_best_candidate(
    name: str, req: dict[str, int], pods: list[tuple[str, str, int, Any]], expected: str
) -> None:
    pod = make_pod("p", VERY_HIGH if "non-overlapping" in name else HIGH, req)
    placed = [on(node, make_pod(p, prio, r), epoch(0)) for node, p, prio, r in pods]
    nodes = sorted({node for node, *_ in pods} | {"node1", "node2", "node3"})
    fw, _ = framework("NodeResourcesFit")
    table = build_table([make_node(n) for n in nodes], placed)
    plugin = plugin_of(fw)
    rows = list(table.valid_rows())
    result = plugin.dry_run_preemption(pre_filter(fw, table, pod), pod, table, fw, rows, 4, len(rows))
    best = plugin.select_candidate(result.candidates)
    assert best is not None and best.node == expected


@pytest.mark.parametrize(
    ("starts", "priorities", "expected"),
    [
        # kube: "same priority, same number of victims, different start time for each node's pod"
        ((2, 2, 3, 3, 1, 1), (MID,) * 6, "node2"),
        # kube: "same priority, same number of victims, different start time for all pods"
        ((4, 2, 5, 1, 3, 6), (MID,) * 6, "node3"),
        # kube: "different priority, same number of victims, different start time for all pods"
        ((4, 2, 6, 1, 3, 5), (LOW, MID, MID, LOW, LOW, MID), "node2"),
    ],
)
def test_select_best_candidate_by_start_time(
    starts: tuple[int, ...], priorities: tuple[int, ...], expected: str
) -> None:
    names = ("p1.1", "p1.2", "p2.1", "p2.2", "p3.1", "p3.2")
    placed = [
        on(f"node{name[1]}", make_pod(name, prio, MEDIUM), epoch(start))
        for name, prio, start in zip(names, priorities, starts, strict=True)
    ]
    fw, _ = framework("NodeResourcesFit")
    table = build_table([make_node(f"node{i}") for i in (1, 2, 3)], placed)
    pod = make_pod("p", HIGH, VERY_LARGE)
    got = plugin_of(fw).post_filter(pre_filter(fw, table, pod), pod, diagnosis(table, fw, ("node1", "node2", "node3")))
    assert got.nominated_node == expected


# ---- pickOneNodeForPreemption ------------------------------------------------------------------------


def victim(name: str, priority: int, start: float = 0.0) -> PodInfo:
    return PodInfo.of(make_pod(name, priority), start_time=start)


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        # fewest budget violations first, whatever the rest
        ([Candidate("a", (victim("a1", LOW),), 2), Candidate("b", (victim("b1", HIGH),), 1)], "b"),
        # then the lowest highest priority
        ([Candidate("a", (victim("a1", MID),)), Candidate("b", (victim("b1", LOW), victim("b2", LOW)))], "b"),
        # then the smallest sum of priorities, each offset by MaxInt32+1: two -100 pods sum higher than one
        (
            [
                Candidate("a", (victim("a1", MID), victim("a2", NEG), victim("a3", NEG))),
                Candidate("b", (victim("b1", MID), victim("b2", NEG))),
            ],
            "b",
        ),
        # then the fewest victims
        (
            [
                Candidate("a", (victim("a1", MID), victim("a2", LOW), victim("a3", LOW))),
                Candidate("b", (victim("b1", MID), victim("b2", 2 * LOW))),
            ],
            "b",
        ),
        # then the latest start of the highest-priority victims (an unknown start is "now")
        ([Candidate("a", (victim("a1", MID, 5.0),)), Candidate("b", (victim("b1", MID, 9.0),))], "b"),
        ([Candidate("a", (victim("a1", MID),)), Candidate("b", (victim("b1", MID, 9.0),))], "a"),
        (
            [
                Candidate("a", (victim("a1", MID, 5.0), victim("a2", MID, 7.0))),
                Candidate("b", (victim("b1", MID, 6.0), victim("b2", MID, 2.0))),
            ],
            "a",
        ),
        # then the first one
        ([Candidate("a", (victim("a1", MID, 5.0),)), Candidate("b", (victim("b1", MID, 5.0),))], "a"),
        # a node that needs no victim wins at once
        ([Candidate("a", (victim("a1", LOW),)), Candidate("b", ())], "b"),
    ],
)
def test_pick_one_node_for_preemption(candidates: list[Candidate], expected: str) -> None:
    best = pick_one_node_for_preemption(candidates)
    assert best is not None and best.node == expected


def test_pick_one_of_no_candidates() -> None:
    assert pick_one_node_for_preemption([]) is None


def test_calculate_num_candidates() -> None:
    # kube: TestCalculateNumCandidates (default args 10% / 100)
    assert calculate_num_candidates(10, 10, 100) == 10
    assert calculate_num_candidates(1000, 10, 100) == 100
    assert calculate_num_candidates(3000, 10, 100) == 300
    assert calculate_num_candidates(5, 40, 1) == 2
    assert calculate_num_candidates(5, 40, 0) == 2
    assert calculate_num_candidates(2, 40, 0) == 0


# ---- PodDisruptionBudgets and SelectVictimsOnNode ---------------------------------------------------------


def test_pdb_violations_count_down_the_budget_in_importance_order() -> None:
    foo = {"app": "foo"}
    pods = [victim("v1", MID, 1.0), victim("v2", LOW, 1.0), victim("v3", LOW, 2.0), victim("other", LOW)]
    pods = [replace(p, pod=replace(p.pod, metadata=replace(p.pod.metadata, labels=foo))) for p in pods[:3]] + pods[3:]
    budgets = [pdb("foo", foo, max_unavailable=1)]
    violating, others = split_by_pdb_violation(pods, budgets, [1])
    assert ([p.pod.name for p in violating], [p.pod.name for p in others]) == (["v2", "v3"], ["v1", "other"])
    # a nil or empty selector counts nothing against the budget (kube's filterPodsWithPDBViolation)
    selectors: tuple[dict[str, str] | None, ...] = (None, {})
    for selector in selectors:
        violating, _ = split_by_pdb_violation(pods, [pdb("x", selector, max_unavailable=0)], [0])
        assert violating == []


def test_disruptions_allowed_come_from_the_pods_in_the_table() -> None:
    foo = {"app": "foo"}
    pods = [on("node1", make_pod(f"p{i}", labels=foo)) for i in range(4)] + [on("node1", make_pod("q"))]
    table = build_table([make_node("node1")], pods)
    assert table_disruptions_allowed(pdb("a", foo, min_available=3), table) == 1
    assert table_disruptions_allowed(pdb("b", foo, max_unavailable="50%"), table) == 2
    assert table_disruptions_allowed(pdb("c", {}, max_unavailable=1), table) == 1  # selects every pod: 5 - 4
    assert table_disruptions_allowed(pdb("d", foo, min_available=1, namespace="other"), table) == 0


def test_victims_that_violate_a_budget_are_reprieved_first() -> None:
    # Room for one of the two low pods: the one whose eviction would violate the budget stays,
    # though it is less important (it started later).
    foo = {"app": "foo"}
    pods = [
        on("node1", make_pod("keep", LOW, LARGE), epoch(1)),
        on("node1", make_pod("guarded", LOW, LARGE, labels=foo), epoch(2)),
    ]
    table = build_table([make_node("node1", {CPU: 600, MEMORY: 600})], pods, [pdb("foo", foo, min_available=1)])
    fw, _ = framework("NodeResourcesFit")
    assert dry_run(fw, table, make_pod("p", HIGH, LARGE))[0] == {"node1": (["keep"], 0)}
    # without the budget the most important pod (the older one) stays
    table.disruption_budgets = ()
    assert dry_run(fw, table, make_pod("p", HIGH, LARGE))[0] == {"node1": (["guarded"], 0)}


def test_victims_are_sorted_by_importance_when_both_kinds_are_evicted() -> None:
    foo = {"app": "foo"}
    pods = [
        on("node1", make_pod("plain", MID, LARGE)),
        on("node1", make_pod("guarded", LOW, LARGE, labels=foo)),
    ]
    table = build_table([make_node("node1", {CPU: 600, MEMORY: 600})], pods, [pdb("foo", foo, min_available=1)])
    fw, _ = framework("NodeResourcesFit")
    pod = make_pod("p", HIGH, {CPU: 600, MEMORY: 600})
    got = plugin_of(fw).post_filter(pre_filter(fw, table, pod), pod, diagnosis(table, fw, ("node1",)))
    assert [v.pod.name for v in got.victims] == ["plain", "guarded"]


def test_host_port_victims() -> None:
    # NodePorts: only the pod holding the port must go, though a bigger one is less important
    pods = [
        on("node1", make_pod("port", MID, SMALL, host_port=8080)),
        on("node1", make_pod("big", LOW, LARGE)),
    ]
    table = build_table([make_node("node1")], pods)
    fw, _ = framework("NodePorts", "NodeResourcesFit")
    assert dry_run(fw, table, make_pod("p", HIGH, SMALL, host_port=8080))[0] == {"node1": (["port"], 0)}


def test_gpu_victims() -> None:
    # GPUFit: the pods holding the GPUs the pod needs go, those on the CPU stay; the devices
    # they held are free for the preemptor, and the table's GPU accounting is exact afterwards
    gpus = tuple(GPUDevice(d, f"gpu-{d}", "H100", 80 * GI) for d in range(2))
    node = replace(make_node("gpu1", {CPU: 8000, MEMORY: 64 * GI, NVIDIA_GPU: 2}), gpus=gpus)
    pods = [
        on("gpu1", make_pod("cpu-only", LOW, {CPU: 1000})),
        on("gpu1", make_pod("train-0", LOW, {CPU: 1000, NVIDIA_GPU: 1}), 1.0, (0,)),
        on("gpu1", make_pod("train-1", MID, {CPU: 1000, NVIDIA_GPU: 1}), 2.0, (1,)),
    ]
    fw, _ = framework("NodeResourcesFit", "GPUFit")
    table = build_table([node], pods)
    result = Scheduler(fw, table).schedule([make_pod("big", HIGH, {CPU: 1000, NVIDIA_GPU: 2})])[0]
    assert result.node == "gpu1" and result.gpu_devices == (0, 1)
    assert [v.pod.name for v in result.preempted] == ["train-1", "train-0"]
    expected = build_table(
        [node], [pods[0], Placed(make_pod("big", HIGH, {CPU: 1000, NVIDIA_GPU: 2}), "gpu1", 0, (0, 1))]
    )
    assert table_state(table) == table_state(expected)


# ---- TestPodEligibleToPreemptOthers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (PreemptionPolicy.PREEMPT_LOWER_PRIORITY, (True, "")),
        (PreemptionPolicy.NEVER, (False, "not eligible due to preemptionPolicy=Never.")),
    ],
)
def test_pod_eligible_to_preempt_others(policy: PreemptionPolicy, expected: tuple[bool, str]) -> None:
    assert DefaultPreemption().pod_eligible_to_preempt_others(make_pod("p", HIGH, policy=policy)) == expected


def test_a_pod_that_never_preempts_is_told_why() -> None:
    fw, _ = framework("NodeResourcesFit")
    table = build_table([make_node("node1", ONE_POD)], [on("node1", make_pod("p1"))])
    pod = make_pod("p", HIGH, policy=PreemptionPolicy.NEVER)
    got = plugin_of(fw).post_filter(pre_filter(fw, table, pod), pod, diagnosis(table, fw, ("node1",)))
    assert got == PostFilterResult(Status.unschedulable("preemption: not eligible due to preemptionPolicy=Never."))


# ---- TestPreempt, through Scheduler.schedule --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pod", "pods", "nodes", "plugins", "want_node", "want_victims"),
    [
        (
            "basic preemption logic",
            make_pod("p", HIGH, VERY_LARGE),
            [
                on("node1", make_pod("p1.1", LOW, SMALL)),
                on("node1", make_pod("p1.2", LOW, SMALL)),
                on("node2", make_pod("p2.1", HIGH, LARGE)),
                on("node3", make_pod("p3.1", MID, MEDIUM)),
            ],
            ("node1", "node2", "node3"),
            ("NodeResourcesFit",),
            "node1",
            ["p1.1", "p1.2"],
        ),
        (
            "preemption for topology spread constraints",
            make_pod("p", HIGH, labels={"foo": ""}, spread=(spread("zone"), spread("hostname"))),
            [
                on("node-a", make_pod("p-a1", HIGH, labels={"foo": ""})),
                on("node-a", make_pod("p-a2", HIGH, labels={"foo": ""})),
                on("node-b", make_pod("p-b1", LOW, labels={"foo": ""})),
                on("node-x", make_pod("p-x1", HIGH, labels={"foo": ""})),
                on("node-x", make_pod("p-x2", HIGH, labels={"foo": ""})),
            ],
            ("node-a/zone1", "node-b/zone1", "node-x/zone2"),
            ("PodTopologySpread",),
            "node-b",
            ["p-b1"],
        ),
        (
            "no preempting in pod",
            make_pod("p", HIGH, VERY_LARGE, policy=PreemptionPolicy.NEVER),
            [on("node1", make_pod("p1.1", LOW, SMALL)), on("node2", make_pod("p2.1", HIGH, LARGE))],
            ("node1", "node2"),
            ("NodeResourcesFit",),
            None,
            [],
        ),
    ],
)
def test_preempt_through_the_scheduler(
    name: str,
    pod: Pod,
    pods: list[Placed],
    nodes: tuple[str, ...],
    plugins: tuple[str, ...],
    want_node: str | None,
    want_victims: list[str],
) -> None:
    fw, _ = framework(*plugins)
    table = build_table([make_node(n) for n in nodes], pods)
    before = table_state(table)
    result = Scheduler(fw, table).schedule([pod])[0]
    assert result.node == want_node
    assert [v.pod.name for v in result.preempted] == want_victims
    if want_node is None:
        assert table_state(table) == before
        return
    assert result.status.is_success and result.nominated_node == want_node
    expected = build_table(
        [make_node(n) for n in nodes],
        [p for p in pods if p.pod.name not in want_victims] + [on(want_node, pod)],
    )
    left = {p.pod.key for p in pods if p.pod.name not in want_victims} | {pod.key}
    assert {k for i in table.node_infos() for k in i.pods} == left
    assert table_state(table)[0] == table_state(expected)[0]


def test_preemption_basic_shape_end_to_end() -> None:
    """scheduler_perf PreemptionBasic in small: 4-cpu nodes with four 900m low-priority pods,
    3-cpu high-priority pods. Each evicts the three newest pods of one node; a node preempted
    once has no room left for another."""
    mi = 1024**2
    nodes = [make_node(f"n{i}", {CPU: 4000, MEMORY: 32 * GI, PODS: 110}) for i in range(5)]
    low = [
        on(f"n{i}", make_pod(f"low-{i}-{j}", 0, {CPU: 900, MEMORY: 500 * mi}), float(1 + 4 * i + j))
        for i in range(5)
        for j in range(4)
    ]
    fw, _ = framework("NodeResourcesFit", "NodePorts", "TaintToleration", "PodTopologySpread", "InterPodAffinity")
    table = build_table(nodes, low)
    scheduler = Scheduler(fw, table)
    high = [make_pod(f"high-{i}", 10, {CPU: 3000, MEMORY: 500 * mi}) for i in range(6)]
    results = scheduler.schedule(high)
    placed = [(r.node, sorted(v.pod.name for v in r.preempted)) for r in results[:5]]
    # the latest start of the highest-priority victims wins: the newest node first
    assert placed == [(f"n{i}", [f"low-{i}-{j}" for j in (1, 2, 3)]) for i in (4, 3, 2, 1, 0)]
    last = results[5]
    assert last.node is None and "preemption: 0/5 nodes are available: 5 Insufficient cpu." in last.message, (
        last.message
    )
    assert {k for i in table.node_infos() for k in i.pods} == {f"default/low-{i}-0" for i in range(5)} | {
        f"default/high-{i}" for i in range(5)
    }


def test_the_table_is_left_as_it_was_when_nothing_is_found() -> None:
    pods = [
        on("node1", make_pod("a", LOW, SMALL, labels={"x": "1"}, host_port=80), 3.0),
        on("node1", make_pod("b", HIGH, LARGE), 1.0),
        on("node1", make_pod("c", LOW, SMALL, labels={"x": "1"}), 2.0),
        on("node2", make_pod("d", HIGH, VERY_LARGE, affinity=anti_affinity("y", "zone"))),
    ]
    table = build_table([make_node("node1/z1"), make_node("node2/z1")], pods)
    fw, _ = framework("NodePorts", "NodeResourcesFit", "InterPodAffinity")
    before = table_state(table)
    # node1 is too small even without a and c (which the dry run takes off, with InterPodAffinity's
    # state following them); node2 has nothing to evict
    result = Scheduler(fw, table).schedule([make_pod("p", MID, {CPU: 400}, labels={"y": ""})])[0]
    assert result.node is None and result.preempted == ()
    assert (
        "preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 No preemption victims found for incoming pod."
        in result.message
    ), result.message
    assert table_state(table) == before


def test_a_plugin_that_raises_leaves_the_table_as_it_was() -> None:
    class Boom:
        name: ClassVar[str] = "Boom"
        placement_sensitive: ClassVar[bool] = True

        def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
            if not isinstance(rows, slice):  # the scheduler filters every row, the dry run a few
                raise RuntimeError("bug")
            return FilterResult.single(np.zeros(len(_rows(view, rows)), dtype=bool), "full")

    fw, _ = framework("Boom", extra=[Boom])
    table = build_table([make_node("node1")], [on("node1", make_pod("a", LOW)), on("node1", make_pod("b", LOW))])
    before = table_state(table)
    result = Scheduler(fw, table).schedule([make_pod("p", HIGH)])[0]
    assert result.node is None and "DefaultPreemption" in result.message
    assert table_state(table) == before


# ---- DefaultPreemptionArgs ----------------------------------------------------------------------------


def _args(text: str) -> DefaultPreemptionArgs:
    profile = load_config(
        f"{HEADER}profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n    args: {text}\n",
        registry=in_tree_registry(),
    ).profiles[0]
    args = profile.plugin_args["DefaultPreemption"]
    assert isinstance(args, DefaultPreemptionArgs)
    return args


def test_args_defaults_and_values() -> None:
    assert _args("{}") == DefaultPreemptionArgs(10, 100)
    assert _args("{minCandidateNodesPercentage: 0}") == DefaultPreemptionArgs(0, 100)
    assert _args("{minCandidateNodesPercentage: 50, minCandidateNodesAbsolute: 0}") == DefaultPreemptionArgs(50, 0)
    assert DefaultPreemption().args == DefaultPreemptionArgs()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # kube: TestValidateDefaultPreemptionArgs
        (
            "{minCandidateNodesPercentage: -1}",
            "minCandidateNodesPercentage: invalid value -1: not in valid range [0, 100]",
        ),
        (
            "{minCandidateNodesPercentage: 900}",
            "minCandidateNodesPercentage: invalid value 900: not in valid range [0, 100]",
        ),
        ("{minCandidateNodesAbsolute: -1}", "minCandidateNodesAbsolute: invalid value -1: not in valid range [0, inf)"),
        (
            "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}",
            "minCandidateNodesPercentage: invalid value 0: cannot be zero at the same time as "
            "minCandidateNodesAbsolute",
        ),
        ("{minCandidateNodes: 3}", 'unknown field "minCandidateNodes"'),
        ("{minCandidateNodesAbsolute: many}", "minCandidateNodesAbsolute: expected an integer"),
    ],
)
def test_args_validation(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _args(text)
    assert problem in str(err.value)
    assert "pluginConfig[0].args" in str(err.value)


def test_the_plugin_refuses_invalid_args() -> None:
    with pytest.raises(FieldError):
        DefaultPreemption(DefaultPreemptionArgs(0, 0))


# ---- the vectorized dry run equals kube's per-node algorithm ---------------------------------------------


@dataclass
class RandomCase:
    nodes: list[Node]
    pods: list[Placed]
    pdbs: list[PodDisruptionBudget]
    preemptor: Pod
    pct: int
    absolute: int


def _random_case(rng: random.Random) -> RandomCase:
    nodes = [
        make_node(
            f"n{i}/{rng.choice(('z1', 'z2', 'z3'))}",
            {CPU: rng.choice((1000, 2000, 4000)), MEMORY: 4 * GI, PODS: rng.choice((2, 3, 5, 110))},
        )
        for i in range(rng.randint(1, 8))
    ]
    apps = ("a", "b", None)
    pods = []
    for node in nodes:
        for j in range(rng.randint(0, 5)):
            app = rng.choice(apps)
            affinity = None
            if rng.random() < 0.15:
                affinity = anti_affinity("app", rng.choice(("hostname", "zone")))
            pod = make_pod(
                f"{node.name}-{j}",
                rng.choice((-5, 0, 0, 3, 5, 10)),
                {CPU: rng.choice((100, 300, 500, 900, 1500)), MEMORY: rng.choice((1, 2)) * GI // 4},
                labels={"app": app} if app else {},
                namespace=rng.choice(("default", "default", "other")),
                host_port=rng.choice((0, 0, 0, 8080, 9090)),
                affinity=affinity,
            )
            pods.append(on(node.name, pod, rng.choice((0.0, 1.0, 2.0, 3.0, 4.0, 5.0))))
    pdbs = []
    for k in range(rng.randint(0, 3)):
        selector = rng.choice(({"app": "a"}, {"app": "b"}, {}, None))
        budget = rng.choice((0, 1, 2, "50%", "100%"))
        kind = rng.choice(("min", "max"))
        pdbs.append(
            pdb(
                f"pdb{k}",
                selector,
                namespace=rng.choice(("default", "other")),
                min_available=budget if kind == "min" else None,
                max_unavailable=budget if kind == "max" else None,
            )
        )
    app = rng.choice(apps)
    preemptor = make_pod(
        "preemptor",
        rng.choice((0, 5, 10, 20)),
        {CPU: rng.choice((500, 1000, 2000, 3500)), MEMORY: GI // 2},
        labels={"app": app} if app else {},
        policy=PreemptionPolicy.NEVER if rng.random() < 0.05 else PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
        host_port=rng.choice((0, 0, 8080)),
        affinity=anti_affinity("app", "zone") if rng.random() < 0.15 else None,
        spread=(TopologySpreadConstraint(1, "zone", "DoNotSchedule", exists("app")),) if rng.random() < 0.2 else (),
    )
    return RandomCase(nodes, pods, pdbs, preemptor, rng.choice((10, 40, 100)), rng.choice((1, 2, 100)))


class Spy:
    """DefaultPreemption that records what it answered, and the full dry run beside it."""

    name: ClassVar[str] = "DefaultPreemption"

    def __init__(self, inner: DefaultPreemption) -> None:
        self.inner = inner
        self.calls: list[tuple[PostFilterResult, Any, int]] = []
        """(its answer, the full dry run, the offset it started at)"""

    def post_filter(self, state: CycleState, pod: Pod, diag: FilterDiagnosis) -> PostFilterResult:
        table = diag.table
        assert table is not None
        rows = np.flatnonzero(diag.resolvable)
        full = self.inner.dry_run_preemption(state.clone(), pod, table, diag.framework, rows, 0, len(rows))
        result = self.inner.post_filter(state, pod, diag)
        self.calls.append((result, full, preemption_offset(pod, len(rows), table.seed)))
        return result


def _copies(table: NodeTable) -> list[NodeInfo]:
    out = []
    for info in table.node_infos():
        copy = NodeInfo(info.node)
        for p in info.pods.values():
            copy.add_pod(p)
        out.append(copy)
    return out


def _candidates(cands: Iterable[Any]) -> list[tuple[str, list[str], int]]:
    return [(c.node, [v.pod.key for v in c.victims], c.num_pdb_violations) for c in cands]


class _EmulatedDevice(types.ModuleType):
    """numpy behind a device's manners: `asarray` copies (arrays live apart from the host
    table until `NodeTable.view` uploads the rows that changed) and `asnumpy` copies back."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def asarray(a: Any, dtype: Any = None) -> np.ndarray:
        return np.array(a, dtype=dtype, copy=True)

    @staticmethod
    def asnumpy(a: Any) -> np.ndarray:
        return np.array(a, copy=True)


EMULATED_DEVICE = Backend("emulated-device", _EmulatedDevice("emulated_device"))
"""A backend with `on_device` True, without a GPU: the dry run must refresh its views."""


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_vectorized_dry_run_equals_the_per_node_reference(seed: int) -> None:
    _check_against_reference(seed, NUMPY)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_vectorized_dry_run_on_a_device_table_equals_the_reference(seed: int) -> None:
    _check_against_reference(seed, EMULATED_DEVICE)


def _check_against_reference(seed: int, backend: Backend) -> None:
    case = _random_case(random.Random(seed))
    args = f"{{minCandidateNodesPercentage: {case.pct}, minCandidateNodesAbsolute: {case.absolute}}}"
    plugins = ("NodeUnschedulable", "TaintToleration", "NodePorts", "NodeResourcesFit", "PodTopologySpread")
    fw, registry = framework(*plugins, "InterPodAffinity", args=args)
    spy = Spy(plugin_of(fw))
    fw = replace(fw, post_filter=(spy,))
    table = build_table(case.nodes, case.pods, case.pdbs, backend)
    infos = _copies(table)
    before = table_state(table)

    result = Scheduler(fw, table).schedule([case.preemptor])[0]

    profile = load_config(
        f"{HEADER}profiles:\n- plugins:\n    multiPoint:\n      enabled: ["
        + ", ".join(f"{{name: {n}}}" for n in (*plugins, "InterPodAffinity"))
        + "]\n      disabled: [{name: '*'}]\n    queueSort: {enabled: [{name: PrioritySort}]}\n"
        "    bind: {enabled: [{name: DefaultBinder}]}\n",
        registry=registry,
    ).profiles[0]
    reference = ReferencePreemption(reference_profile(profile), case.pct, case.absolute)
    offset = spy.calls[0][2] if spy.calls else 0
    want = reference.schedule_and_preempt(case.preemptor, infos, case.pdbs, offset)
    if want is None:
        assert result.node is not None and not result.preempted and not spy.calls
        return
    assert len(spy.calls) == 1
    got, full, _ = spy.calls[0]
    assert (got.status, got.nominated_node) == (want.status, want.node)
    assert [v.pod.key for v in got.victims] == [v.pod.key for v in want.victims]

    if case.preemptor.spec.preemption_policy is not PreemptionPolicy.NEVER:
        # the whole dry run, every potential node examined, candidate by candidate
        every = reference.schedule_and_preempt(case.preemptor, infos, case.pdbs, every_candidate=True)
        assert every is not None
        assert _candidates(full.candidates) == _candidates(every.candidates)
        # the pick's scores, worked out for all candidates at once, are each one's own
        assert all(c.scores is not None and c.scores == pick_scores(c) for c in full.candidates)
        assert {n: (s.code, s.reasons) for n, s in full.statuses.items()} == {
            n: (s.code, s.reasons) for n, s in every.statuses.items()
        }

    if got.status.is_success:
        assert result.node == got.nominated_node and result.preempted == got.victims
        gone = {v.pod.key for v in got.victims}
        expected = build_table(
            case.nodes, [p for p in case.pods if p.pod.key not in gone] + [on(got.nominated_node, case.preemptor)]
        )
        assert table_state(table) == table_state(expected)
    else:
        assert result.node is None
        assert table_state(table) == before


# ---- the view-only dry run (a what-if copy of the usage arrays) equals the table dry run ----------------


def _gpu_pod(rng: random.Random, name: str, priority: int, *, host_port: int = 0, gpu: str = "") -> Pod:
    """A pod of random cpu asking ``gpu``: "" none, "whole" nvidia.com/gpu, "shared" a slice."""
    requests = {CPU: rng.choice((100, 500, 1000, 2000)), MEMORY: rng.choice((1, 2)) * GI // 4}
    annotations: dict[str, str] = {}
    if gpu == "whole":
        requests[NVIDIA_GPU] = rng.choice((1, 1, 2))
    elif gpu == "shared":
        annotations = {
            GPU_MEMORY_ANNOTATION: f"{rng.choice((10, 20, 40))}Gi",
            GPU_COUNT_ANNOTATION: str(rng.choice((1, 2))),
        }
    ports = (ContainerPort(80, host_port=host_port),) if host_port else ()
    return Pod(
        ObjectMeta(name, "default", uid=name, labels={"app": rng.choice(("a", "b"))}, annotations=annotations),
        PodSpec(containers=(Container("c", requests=requests, ports=ports),), priority=priority),
    )


def _gpu_cluster(rng: random.Random) -> tuple[list[Node], list[Placed], list[PodDisruptionBudget]]:
    """Nodes, some with GPUs (unhealthy ones too); pods on them holding random devices (a device
    the node no longer reports, now and then), some with host ports."""
    nodes = []
    for i in range(rng.randint(1, 8)):
        g = rng.choice((0, 0, 2, 4))
        gpus = tuple(
            GPUDevice(d, f"gpu-{i}-{d}", rng.choice(("H100", "L4")), rng.choice((40, 80)) * GI, rng.random() > 0.1)
            for d in range(g)
        )
        alloc = {CPU: rng.choice((2000, 4000)), MEMORY: 4 * GI, PODS: rng.choice((3, 5, 110))}
        if g:
            alloc[NVIDIA_GPU] = g
        nodes.append(replace(make_node(f"n{i}", alloc), gpus=gpus))
    pods = []
    for node in nodes:
        for j in range(rng.randint(0, 5)):
            gpu = rng.choice(("", "", "whole", "shared")) if node.gpus else ""
            pod = _gpu_pod(
                rng, f"{node.name}-{j}", rng.choice((-5, 0, 0, 3, 5, 10)), host_port=rng.choice((0, 0, 8080)), gpu=gpu
            )
            devices: tuple[int, ...] = ()
            if gpu:
                devices = tuple(sorted(rng.sample(range(len(node.gpus) + 1), rng.choice((1, 2)))))
            pods.append(on(node.name, pod, rng.choice((0.0, 1.0, 2.0, 3.0)), devices))
    pdbs = [pdb("pdb", {"app": "a"}, max_unavailable=rng.choice((0, 1, 2)))] if rng.random() < 0.4 else []
    return nodes, pods, pdbs


def _dry_run_answer(result: Any) -> tuple[Any, ...]:
    return (
        _candidates(result.candidates),
        {n: (s.code, s.reasons, s.plugin) for n, s in result.statuses.items()},
        result.errors,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_the_view_only_dry_run_equals_the_table_dry_run(seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods, pdbs = _gpu_cluster(rng)
    plugins = rng.sample(["NodeResourcesFit", "GPUFit", "NodePorts", "TaintToleration"], rng.randint(2, 4))
    fw, _ = framework(*plugins, args="{minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 2}")
    table = build_table(nodes, pods, pdbs, rng.choice((NUMPY, EMULATED_DEVICE)))
    before = table_state(table)
    preemptor = _gpu_pod(
        rng,
        "preemptor",
        rng.choice((0, 5, 10, 20)),
        host_port=rng.choice((0, 0, 8080)),
        gpu=rng.choice(("", "whole", "shared")),
    )
    state = pre_filter(fw, table, preemptor)
    rows = table.valid_rows()
    offset = rng.randrange(len(rows))
    answers = []
    for shadow in (True, False):
        plugin = DefaultPreemption(DefaultPreemptionArgs(10, 2))
        plugin.shadow_dry_run = shadow
        for start, num in ((0, len(rows)), (offset, 2)):
            answers.append(
                _dry_run_answer(plugin.dry_run_preemption(state.clone(), preemptor, table, fw, rows, start, num))
            )
            assert table_state(table) == before
    assert answers[:2] == answers[2:]
    # the copy serves whenever no plugin that pods change reads them from the table
    run = DryRun(fw, table, state, preemptor, (), ())
    table_only = "NodePorts" in plugins and preemptor.spec.containers[0].ports
    assert run.mutates == bool(table_only)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_victims_remembered_between_dry_runs_follow_the_table(seed: int) -> None:
    # one plugin dry-runs again and again while pods come and go, nodes change and priorities
    # differ: each answer is a fresh plugin's
    rng = random.Random(seed)
    nodes, pods, pdbs = _gpu_cluster(rng)
    fw, _ = framework("NodeResourcesFit", "GPUFit")
    table = build_table(nodes, pods, pdbs)
    plugin = DefaultPreemption()
    for step in range(6):
        preemptor = _gpu_pod(rng, f"p{step}", rng.choice((0, 5, 10, 20)), gpu=rng.choice(("", "whole")))
        state = pre_filter(fw, table, preemptor)
        rows = table.valid_rows()
        got = plugin.dry_run_preemption(state.clone(), preemptor, table, fw, rows, 0, len(rows))
        fresh = DefaultPreemption().dry_run_preemption(state.clone(), preemptor, table, fw, rows, 0, len(rows))
        assert _dry_run_answer(got) == _dry_run_answer(fresh)
        _change_the_table(rng, table, nodes, step, preemptor, got.candidates, (0.4, 0.7, 0.85))


def _change_the_table(
    rng: random.Random,
    table: NodeTable,
    nodes: Sequence[Node],
    step: int,
    preemptor: Pod,
    candidates: Sequence[Candidate],
    odds: tuple[float, float, float],
) -> None:
    """One change, by the cumulative ``odds``: a new pod on a node, a pod gone, a node's
    allocatable changed; else the preemptor placed as the plugin would pick."""
    node = rng.choice(nodes)
    change = rng.random()
    if change < odds[0]:
        table.assume(PodInfo.of(_gpu_pod(rng, f"new-{step}", rng.choice((0, 5))), start_time=float(step)), node.name)
    elif change < odds[1] and table.node_info(node.name).pods:
        table.forget(rng.choice(sorted(table.node_info(node.name).pods)), node.name)
    elif change < odds[2]:
        table.set_node(replace(node, status=NodeStatus(allocatable={**node.status.allocatable, CPU: 8000})))
    elif candidates:
        best = pick_one_node_for_preemption(candidates)
        assert best is not None
        table.forget_many([v.pod.key for v in best.victims], best.node)
        table.assume(PodInfo.of(preemptor, start_time=float(step)), best.node)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_outcomes_remembered_for_pods_of_one_kind_follow_the_table(seed: int) -> None:
    # pods of two kinds (same spec, other names) preempt in turn, each from some offset, while
    # the table and the budgets' allowances change under them: each answer is a fresh plugin's
    rng = random.Random(seed)
    nodes, pods, _ = _gpu_cluster(rng)
    covered = sum(p.pod.metadata.labels["app"] == "a" for p in pods)
    # minAvailable: the allowance moves as the covered pods come and go
    pdbs = [pdb("pdb", {"app": "a"}, min_available=max(covered - rng.randint(0, 2), 0))] if rng.random() < 0.6 else []
    plugins = rng.sample(["NodeResourcesFit", "GPUFit", "TaintToleration"], rng.randint(1, 3))
    fw, _ = framework(*plugins)
    table = build_table(nodes, pods, pdbs)
    plugin = DefaultPreemption()
    kinds = [_gpu_pod(rng, "kind", rng.choice((5, 10, 20)), gpu=rng.choice(("", "whole", "shared"))) for _ in "ab"]
    for step in range(10):
        kind = rng.choice(kinds)
        preemptor = replace(kind, metadata=replace(kind.metadata, name=f"p{step}", uid=f"uid-p{step}"))
        state = pre_filter(fw, table, preemptor)
        rows = table.valid_rows()
        start, num = rng.randrange(len(rows)), rng.randint(1, len(rows))
        got = plugin.dry_run_preemption(state.clone(), preemptor, table, fw, rows, start, num)
        fresh = DefaultPreemption().dry_run_preemption(state.clone(), preemptor, table, fw, rows, start, num)
        assert _dry_run_answer(got) == _dry_run_answer(fresh)
        _change_the_table(rng, table, nodes, step, preemptor, got.candidates, (0.2, 0.35, 0.45))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_the_usage_copy_is_the_table_with_the_same_pods_taken_off(seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods, _ = _gpu_cluster(rng)
    backend = rng.choice((NUMPY, EMULATED_DEVICE))
    table = build_table(nodes, pods, (), backend)
    rows = table.valid_rows().tolist()
    cache = VictimCache()
    found = cache.of(table, rows, rng.choice((0, 5, 20)))
    shadow = Shadow(table)
    live = [row for row, v in zip(rows, found, strict=True) if v.pods]
    if not live:
        return
    shadow.change(np.asarray(live), cache.totals(live), -1)
    for row, v in zip(rows, found, strict=True):
        table.forget_many([p.pod.key for p in v.pods], row)
    # then one pod back on some nodes
    back = [
        (row, v, rng.randrange(len(v.pods)))
        for row, v in zip(rows, found, strict=True)
        if v.pods and rng.random() < 0.5
    ]
    if back:
        at = np.asarray([row for row, _, _ in back])
        shadow.change(at, Deltas.concat([v.deltas.take(np.asarray([j])) for _, v, j in back]), +1)
        for row, v, j in back:
            table.assume(v.pods[j], row)
    view = shadow.view()
    for column, values in table.usage_copy().items():
        assert np.array_equal(backend.to_host(getattr(view, column)), values), column


def test_the_diagnosis_names_the_resolvable_rows() -> None:
    table = NodeTable()
    table.add_nodes([parse_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}) for n in "abc"])
    resolvable = np.array([True, False, True])
    assert FilterDiagnosis(3, {}, frozenset(), table=table, resolvable=resolvable).resolvable_nodes == ("a", "c")
    assert FilterDiagnosis(3, {}, frozenset()).resolvable_nodes == ()
