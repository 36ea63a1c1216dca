"""PodTopologySpread (PreFilter with AddPod/RemovePod, Filter, PreScore, Score, NormalizeScore),
one node at a time. After kube's pkg/scheduler/framework/plugins/podtopologyspread (plugin.go,
common.go, filtering.go, scoring.go).

PreFilter walks every node's pods and counts, per DoNotSchedule constraint and topology value,
the pods of the incoming pod's namespace its selector selects, on the nodes that carry every
topology key and pass the constraint's node inclusion policies. Filter rejects a node missing a
topology key (UnschedulableAndUnresolvable) or whose domain would exceed maxSkew above the global
minimum (0 below minDomains domains). PreScore (over the filtered nodes) sets the ignored nodes,
the domains of the ScheduleAnyway constraints and their weights log(domains + 2), and counts
every node's pods into them; Score sums count * weight + maxSkew - 1, rounded as Go does, the
hostname topology counting the node's own pods; NormalizeScore maps ignored nodes to 0.

Default constraints (System or List) get their selector from the Services, ReplicationControllers,
ReplicaSets and StatefulSets selecting the pod (kube's helper.DefaultSelector), read from the
cycle state (WORKLOADS_STATE_KEY, as kube's plugin reads its listers); an empty selector drops them.
Terminating pods (deletionTimestamp set) are skipped when counting, as kube's
countPodsMatchSelector skips them (AddPod/RemovePod do not check, as kube's updateWithPod does
not). An empty (`{}`) labelSelector counts every pod of the namespace, as kube does since
kubernetes/kubernetes#141340 (before it, kube counted none).
Counts are per constraint (TpValueToMatchNum, TopologyValueToPodCounts: kube since
kubernetes/kubernetes#129119); kube 1.28's maps keyed by topologyPair{key, value} differ only for
two constraints of one whenUnsatisfiable on one key, which the API (and kubus's manifests and
args) reject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from kubus.api.objects import (
    LabelSelector,
    OwnerReference,
    Pod,
    SelectorOperator,
    Taint,
    TaintEffect,
    TopologySpreadConstraint,
)
from kubus.api.workloads import NO_WORKLOADS, ReplicaSet, ReplicationController, Service, StatefulSet, Workloads
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus_reference._gomath import go_log, go_round
from kubus_reference._selectors import find_matching_untolerated_taint
from kubus_reference._snapshot import snapshot_node_infos
from kubus_reference.node_affinity import RequiredNodeAffinity

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
PRE_FILTER_STATE_KEY = "PreFilterPodTopologySpread"
PRE_SCORE_STATE_KEY = "PreScorePodTopologySpread"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
NODE_INCLUSION_POLICY_HONOR = "Honor"
NODE_INCLUSION_POLICY_IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
INVALID_SCORE = -1
WORKLOADS_STATE_KEY = "kubus/workloads"
"""Where a scheduler leaves the cluster's `Workloads` (Services, ReplicationControllers,
ReplicaSets, StatefulSets) for default spreading (kube's plugin reads its listers)."""
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1

SYSTEM_DEFAULT_CONSTRAINTS = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_TOPOLOGY_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY),
)


# ---- labels.Selector -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selector:
    """A labels.Selector: requirements ANDed; `nothing` for labels.Nothing (a nil selector)."""

    requirements: tuple[tuple[str, SelectorOperator, frozenset[str]], ...] = ()
    nothing: bool = False

    @classmethod
    def of(cls, selector: LabelSelector | None) -> Selector:
        """metav1.LabelSelectorAsSelector: nil matches nothing, empty everything."""
        if selector is None:
            return cls(nothing=True)
        reqs = [(k, SelectorOperator.IN, frozenset([v])) for k, v in selector.match_labels.items()]
        reqs += [(r.key, r.operator, frozenset(r.values)) for r in selector.match_expressions]
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, op, values in self.requirements:
            has = key in labels
            if op is SelectorOperator.IN:
                ok = has and labels[key] in values
            elif op is SelectorOperator.NOT_IN:
                ok = not has or labels[key] not in values
            elif op is SelectorOperator.EXISTS:
                ok = has
            elif op is SelectorOperator.DOES_NOT_EXIST:
                ok = not has
            else:
                ok = False
            if not ok:
                return False
        return True

    @property
    def empty(self) -> bool:
        """labels.Selector.Empty(): no requirements (Nothing is not empty)."""
        return not self.nothing and not self.requirements

    def merged(self, match_labels: Mapping[str, str]) -> Selector:
        """mergeLabelSetWithSelector: the labels' requirements, then the selector's; a Nothing
        selector stays Nothing (it has no requirements to merge)."""
        if self.nothing:
            return self
        extra = tuple((k, SelectorOperator.IN, frozenset([v])) for k, v in match_labels.items())
        return Selector(extra + self.requirements)


# ---- constraints -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Constraint:
    """topologySpreadConstraint: the internal version, selector parsed."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int
    node_affinity_policy: str
    node_taints_policy: str

    def match_node_inclusion_policies(self, pod: Pod, node_info: NodeInfo, require: RequiredNodeAffinity) -> bool:
        # kube ignores the required affinity's parse errors here (a term that does not parse
        # matches no node)
        if self.node_affinity_policy == NODE_INCLUSION_POLICY_HONOR and not require.matches(node_info):
            return False
        taints = node_info.node.spec.taints
        return not (
            self.node_taints_policy == NODE_INCLUSION_POLICY_HONOR
            and find_matching_untolerated_taint(taints, pod.spec.tolerations, _do_not_schedule) is not None
        )


def _do_not_schedule(taint: Taint) -> bool:
    """helper.DoNotScheduleTaintsFilterFunc."""
    return taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def filter_topology_spread_constraints(
    constraints: Sequence[TopologySpreadConstraint], pod_labels: Mapping[str, str], action: str
) -> list[Constraint]:
    result = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector = Selector.of(c.label_selector)
        if c.match_label_keys:
            match_labels = {k: pod_labels[k] for k in c.match_label_keys if k in pod_labels}
            if match_labels:
                selector = selector.merged(match_labels)
        result.append(
            Constraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=selector,
                min_domains=1 if c.min_domains is None else c.min_domains,
                node_affinity_policy=c.node_affinity_policy or NODE_INCLUSION_POLICY_HONOR,
                node_taints_policy=c.node_taints_policy or NODE_INCLUSION_POLICY_IGNORE,
            )
        )
    return result


def default_selector(pod: Pod, workloads: Workloads) -> Selector:
    """helper.DefaultSelector: the selectors of the Services, ReplicationControllers, ReplicaSets
    and StatefulSets that select ``pod``."""
    label_set: dict[str, str] = {}
    for service in get_pod_services(workloads, pod):
        label_set.update(service.selector or {})  # labels.Merge: the later wins
    selector = Selector.of(LabelSelector(dict(label_set)))
    owner = metadata_controller(pod)
    if owner is None:
        return selector
    group_version = parse_group_version(owner.api_version)
    if group_version is None:
        return selector
    gvk = (*group_version, owner.kind)
    if gvk == ("", "v1", "ReplicationController"):
        rc = workloads.get("ReplicationController", pod.namespace, owner.name)
        if isinstance(rc, ReplicationController):
            label_set.update(rc.selector)
            selector = Selector.of(LabelSelector(dict(label_set)))
    elif gvk in (("apps", "v1", "ReplicaSet"), ("apps", "v1", "StatefulSet")):
        found = workloads.get(owner.kind, pod.namespace, owner.name)
        if isinstance(found, ReplicaSet | StatefulSet):
            other = Selector.of(found.selector)
            if not other.nothing:  # other.Requirements() is (nil, false) for labels.Nothing
                selector = Selector(selector.requirements + other.requirements)
    return selector


def get_pod_services(workloads: Workloads, pod: Pod) -> list[Service]:
    """helper.GetPodServices: the Services of the pod's namespace whose selector selects it
    (a nil selector selects nothing, not everything)."""
    services = []
    for service in workloads.services(pod.namespace):
        if service.selector is None:
            continue
        if Selector.of(LabelSelector(dict(service.selector))).matches(pod.metadata.labels):
            services.append(service)
    return services


def metadata_controller(pod: Pod) -> OwnerReference | None:
    """metav1.GetControllerOfNoCopy: the first owner reference with controller true."""
    return next((ref for ref in pod.metadata.owner_references if ref.controller), None)


def parse_group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: "" -> ("", ""), "v1" -> ("", "v1"), "g/v" -> ("g", "v"), an error
    (None) for more than one slash."""
    if not api_version:
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", api_version
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def cycle_workloads(state: CycleState) -> Workloads:
    """The cluster's workloads a scheduler left in the cycle state (none when absent)."""
    workloads: Workloads | None = state.get(WORKLOADS_STATE_KEY)
    return NO_WORKLOADS if workloads is None else workloads


def node_labels_match_spread_constraints(labels: Mapping[str, str], constraints: Sequence[Constraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def count_pods_match_selector(pods: Sequence[PodInfo], selector: Selector, namespace: str) -> int:
    """kube's countPodsMatchSelector: pods of ``namespace`` the selector selects, bypassing
    terminating pods (DeletionTimestamp set, kubernetes/kubernetes#87621)."""
    return sum(
        1
        for p in pods
        if not p.pod.terminating and p.pod.namespace == namespace and selector.matches(p.pod.metadata.labels)
    )


# ---- states ------------------------------------------------------------------------------------


@dataclass(slots=True)
class PreFilterState:
    constraints: list[Constraint] = field(default_factory=list)
    tp_value_to_match_num: list[dict[str, int]] = field(default_factory=list)

    def min_match_num(self, i: int, min_domains: int) -> int:
        domains = self.tp_value_to_match_num[i]
        if len(domains) < min_domains:
            return 0
        return min(domains.values(), default=MAX_INT32)

    def clone(self) -> PreFilterState:
        return PreFilterState(list(self.constraints), [dict(m) for m in self.tp_value_to_match_num])


@dataclass(slots=True)
class PreScoreState:
    constraints: list[Constraint] = field(default_factory=list)
    ignored_nodes: set[str] = field(default_factory=set)
    topology_value_to_pod_counts: list[dict[str, int]] = field(default_factory=list)
    topology_normalizing_weight: list[float] = field(default_factory=list)


def topology_normalizing_weight(size: int) -> float:
    return go_log(float(size + 2))


def score_for_count(cnt: int, max_skew: int, tp_weight: float) -> float:
    return float(cnt) * tp_weight + float(max_skew - 1)


# ---- the plugin --------------------------------------------------------------------------------


class PodTopologySpread:
    name: ClassVar[str] = "PodTopologySpread"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """`args` is a PodTopologySpreadArgs (or None: System defaulting)."""
        defaulting = getattr(args, "defaulting_type", "System")
        self.system_defaulted = str(defaulting) == "System"
        self.default_constraints: tuple[TopologySpreadConstraint, ...] = (
            SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else tuple(getattr(args, "default_constraints", ()))
        )

    # ---- constraints -------------------------------------------------------------------------

    def get_constraints(self, pod: Pod, action: str, workloads: Workloads = NO_WORKLOADS) -> list[Constraint]:
        if pod.spec.topology_spread_constraints:
            return filter_topology_spread_constraints(pod.spec.topology_spread_constraints, pod.metadata.labels, action)
        return self.build_default_constraints(pod, action, workloads)

    def build_default_constraints(self, pod: Pod, action: str, workloads: Workloads = NO_WORKLOADS) -> list[Constraint]:
        constraints = filter_topology_spread_constraints(self.default_constraints, pod.metadata.labels, action)
        if not constraints:
            return []
        selector = default_selector(pod, workloads)
        if selector.empty:
            return []
        return [replace(c, selector=selector) for c in constraints]

    # ---- filtering ---------------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        s = self.cal_pre_filter_state(pod, nodes, cycle_workloads(state))
        if not s.constraints:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, Status.success()

    def cal_pre_filter_state(
        self, pod: Pod, all_nodes: Sequence[NodeInfo], workloads: Workloads = NO_WORKLOADS
    ) -> PreFilterState:
        constraints = self.get_constraints(pod, DO_NOT_SCHEDULE, workloads)
        if not constraints:
            return PreFilterState()
        s = PreFilterState(constraints, [{} for _ in constraints])
        require = RequiredNodeAffinity.of(pod)
        for node_info in all_nodes:
            labels = node_info.node.metadata.labels
            if not node_labels_match_spread_constraints(labels, constraints):
                continue
            for i, c in enumerate(constraints):
                if not c.match_node_inclusion_policies(pod, node_info, require):
                    continue
                value = labels[c.topology_key]
                count = count_pods_match_selector(list(node_info.pods.values()), c.selector, pod.namespace)
                s.tp_value_to_match_num[i][value] = s.tp_value_to_match_num[i].get(value, 0) + count
        return s

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        if not s.constraints:
            return Status.success()
        labels = node_info.node.metadata.labels
        pod_labels = pod.metadata.labels
        for i, c in enumerate(s.constraints):
            if c.topology_key not in labels:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_NODE_LABEL_NOT_MATCH,))
            min_match_num = s.min_match_num(i, c.min_domains)
            self_match_num = 1 if c.selector.matches(pod_labels) else 0
            match_num = s.tp_value_to_match_num[i].get(labels[c.topology_key], 0)
            skew = match_num + self_match_num - min_match_num
            if skew > c.max_skew:
                return Status(Code.UNSCHEDULABLE, (ERR_REASON_CONSTRAINTS_NOT_MATCH,))
        return Status.success()

    # ---- PreFilterExtensions -----------------------------------------------------------------

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status:
        return self._update_with_pod(state, pod_to_add.pod, pod_to_schedule, node_info, 1)

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status:
        return self._update_with_pod(state, pod_to_remove.pod, pod_to_schedule, node_info, -1)

    def _update_with_pod(
        self, state: CycleState, updated: Pod, preemptor: Pod, node_info: NodeInfo, delta: int
    ) -> Status:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        if updated.namespace != preemptor.namespace:
            return Status.success()
        labels = node_info.node.metadata.labels
        if not node_labels_match_spread_constraints(labels, s.constraints):
            return Status.success()
        s = s.clone()  # the state's clones share it: replace, never change in place
        require = RequiredNodeAffinity.of(preemptor)
        for i, c in enumerate(s.constraints):
            if not c.selector.matches(updated.metadata.labels):
                continue
            if not c.match_node_inclusion_policies(preemptor, node_info, require):
                continue
            value = labels[c.topology_key]
            s.tp_value_to_match_num[i][value] = s.tp_value_to_match_num[i].get(value, 0) + delta
        state.write(PRE_FILTER_STATE_KEY, s)
        return Status.success()

    # ---- scoring -----------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """`nodes` are the filtered nodes; every node comes from the cycle's snapshot."""
        all_nodes = snapshot_node_infos(state, nodes)
        if not all_nodes:
            return Status.skip()
        s = PreScoreState()
        require_all_topologies = bool(pod.spec.topology_spread_constraints) or not self.system_defaulted
        self.init_pre_score_state(s, pod, nodes, require_all_topologies, cycle_workloads(state))
        if not s.constraints:
            return Status.skip()
        require = RequiredNodeAffinity.of(pod)
        for node_info in all_nodes:
            labels = node_info.node.metadata.labels
            if require_all_topologies and not node_labels_match_spread_constraints(labels, s.constraints):
                continue
            for i, c in enumerate(s.constraints):
                if not c.match_node_inclusion_policies(pod, node_info, require):
                    continue
                value = labels.get(c.topology_key, "")
                counts = s.topology_value_to_pod_counts[i]
                if value not in counts:
                    continue
                counts[value] += count_pods_match_selector(list(node_info.pods.values()), c.selector, pod.namespace)
        state.write(PRE_SCORE_STATE_KEY, s)
        return Status.success()

    def init_pre_score_state(
        self,
        s: PreScoreState,
        pod: Pod,
        filtered_nodes: Sequence[NodeInfo],
        require_all_topologies: bool,
        workloads: Workloads = NO_WORKLOADS,
    ) -> None:
        s.constraints = self.get_constraints(pod, SCHEDULE_ANYWAY, workloads)
        if not s.constraints:
            return
        s.topology_value_to_pod_counts = [{} for _ in s.constraints]
        topo_size = [0] * len(s.constraints)
        for node_info in filtered_nodes:
            labels = node_info.node.metadata.labels
            if require_all_topologies and not node_labels_match_spread_constraints(labels, s.constraints):
                s.ignored_nodes.add(node_info.name)
                continue
            for i, c in enumerate(s.constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue  # per-node counts are taken in Score
                value = labels.get(c.topology_key, "")
                if value not in s.topology_value_to_pod_counts[i]:
                    s.topology_value_to_pod_counts[i][value] = 0
                    topo_size[i] += 1
        s.topology_normalizing_weight = []
        for i, c in enumerate(s.constraints):
            size = topo_size[i]
            if c.topology_key == LABEL_HOSTNAME:
                size = len(filtered_nodes) - len(s.ignored_nodes)
            s.topology_normalizing_weight.append(topology_normalizing_weight(size))

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        if node_info.name in s.ignored_nodes:
            return 0
        labels = node_info.node.metadata.labels
        score = 0.0
        for i, c in enumerate(s.constraints):
            if c.topology_key not in labels:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = count_pods_match_selector(list(node_info.pods.values()), c.selector, pod.namespace)
            else:
                cnt = s.topology_value_to_pod_counts[i].get(labels[c.topology_key], 0)
            score += score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i])
        return go_round(score)

    def normalize_score(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            return
        min_score, max_score = MAX_INT64, 0
        for name, score in scores.items():
            if name in s.ignored_nodes:
                scores[name] = INVALID_SCORE
                continue
            min_score = min(min_score, score)
            max_score = max(max_score, score)
        for name, score in scores.items():
            if score == INVALID_SCORE:
                scores[name] = 0
            elif max_score == 0:
                scores[name] = MAX_NODE_SCORE
            else:
                scores[name] = MAX_NODE_SCORE * (max_score + min_score - score) // max_score
