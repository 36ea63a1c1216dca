"""InterPodAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore), one node at a time.

kube-scheduler's plugin as its filtering.go and scoring.go write it: PreFilter walks the pods of
every node and counts, per topology pair (key, value), the existing pods whose required
anti-affinity selects the pod, the pods matching all the pod's required affinity terms and the
pods matching each of its required anti-affinity terms; Filter looks the node's pairs up; PreScore
walks the pods again into topologyScore; Score adds up the node's pairs; NormalizeScore is
min-max to 0..100. The incoming pod's namespaceSelectors are merged into its namespaces first, as
mergeAffinityTermNamespacesIfNotEmpty does, over the namespaces the cycle knows: those of
NAMESPACES_STATE_KEY (name -> labels; none when absent) and every pod's (a pod's namespace exists,
with kube's `kubernetes.io/metadata.name` label at least).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kubus.api.namespaces import namespace_labels
from kubus.api.objects import LabelSelector, Node, Pod
from kubus.api.pod_affinity import (
    AffinityTerm,
    PodAffinityTerms,
    WeightedAffinityTerm,
    selector_matches,
)
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus_reference._snapshot import snapshot_node_infos

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
PRE_FILTER_STATE_KEY = "PreFilterInterPodAffinity"
PRE_SCORE_STATE_KEY = "PreScoreInterPodAffinity"
NAMESPACES_STATE_KEY = "kubus/namespaces"
"""Where a scheduler leaves the cluster's namespaces (name -> labels) for this plugin (kube's
namespace lister); absent, no namespace has labels beyond its name."""

TopologyPair = tuple[str, str]


class TopologyToMatchedTermCount(dict[TopologyPair, int]):
    """kube's topologyToMatchedTermCount: (topology key, value) -> count, no zero entries."""

    def update_pair(self, node: Node, topology_key: str, value: int) -> None:
        tv = node.metadata.labels.get(topology_key)
        if tv is None:
            return
        pair = (topology_key, tv)
        self[pair] = self.get(pair, 0) + value
        if self[pair] == 0:
            del self[pair]

    def update_with_affinity_terms(self, terms: Sequence[AffinityTerm], pod: Pod, node: Node, value: int) -> None:
        """One count per term, when ``pod`` matches ALL the terms."""
        if pod_matches_all_affinity_terms(terms, pod):
            for t in terms:
                self.update_pair(node, t.topology_key, value)

    def update_with_anti_affinity_terms(
        self, terms: Sequence[AffinityTerm], pod: Pod, ns_labels: Mapping[str, str], node: Node, value: int
    ) -> None:
        """One count per term that matches ``pod``."""
        for t in terms:
            if t.matches(pod.namespace, pod.metadata.labels, ns_labels):
                self.update_pair(node, t.topology_key, value)

    def clone(self) -> TopologyToMatchedTermCount:
        return TopologyToMatchedTermCount(self)


_NO_LABELS: Mapping[str, str] = {}


def pod_matches_all_affinity_terms(terms: Sequence[AffinityTerm], pod: Pod) -> bool:
    """kube's podMatchesAllAffinityTerms, for the incoming pod's merged terms (no namespace
    labels needed). False for no terms."""
    if not terms:
        return False
    return all(t.matches(pod.namespace, pod.metadata.labels, _NO_LABELS) for t in terms)


def _is_empty(selector: LabelSelector) -> bool:
    """kube's labels.Selector.Empty(): the selector of everything."""
    return not selector.match_labels and not selector.match_expressions


def merge_affinity_term_namespaces(
    term: AffinityTerm, known_namespaces: Iterable[str], namespaces: Mapping[str, Mapping[str, str]]
) -> AffinityTerm:
    """kube's mergeAffinityTermNamespacesIfNotEmpty: the namespaces a non-empty namespaceSelector
    selects join the term's namespaces, and the selector then selects nothing. An empty selector
    (every namespace) is left as it is; a nil one selects nothing already."""
    selector = term.namespace_selector
    if selector is None or _is_empty(selector):
        return term
    selected = {ns for ns in known_namespaces if selector_matches(selector, namespace_labels(namespaces, ns))}
    return AffinityTerm(term.namespaces | selected, term.selector, term.topology_key, None)


def _cluster_namespaces(state: CycleState) -> Mapping[str, Mapping[str, str]]:
    namespaces: Mapping[str, Mapping[str, str]] | None = state.get(NAMESPACES_STATE_KEY)
    return namespaces if namespaces is not None else {}


def _known_namespaces(pod: Pod, nodes: Sequence[NodeInfo], namespaces: Mapping[str, Mapping[str, str]]) -> set[str]:
    """The namespace lister's contents: the recorded namespaces, and every pod's."""
    known = set(namespaces) | {pod.namespace}
    for node_info in nodes:
        known.update(p.pod.namespace for p in node_info.pods.values())
    return known


@dataclass(frozen=True, slots=True)
class IncomingPodInfo:
    """The incoming pod's terms, namespaceSelectors merged (kube's preFilterState.podInfo)."""

    pod: Pod
    required_affinity_terms: tuple[AffinityTerm, ...] = ()
    required_anti_affinity_terms: tuple[AffinityTerm, ...] = ()
    preferred_affinity_terms: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity_terms: tuple[WeightedAffinityTerm, ...] = ()

    @classmethod
    def of(cls, pod: Pod, nodes: Sequence[NodeInfo], namespaces: Mapping[str, Mapping[str, str]]) -> IncomingPodInfo:
        terms = PodAffinityTerms.of(pod)
        if terms is None:
            return cls(pod)
        known = _known_namespaces(pod, nodes, namespaces)

        def merged(ts: Iterable[AffinityTerm]) -> tuple[AffinityTerm, ...]:
            return tuple(merge_affinity_term_namespaces(t, known, namespaces) for t in ts)

        def merged_weighted(ws: Iterable[WeightedAffinityTerm]) -> tuple[WeightedAffinityTerm, ...]:
            return tuple(
                WeightedAffinityTerm(merge_affinity_term_namespaces(w.term, known, namespaces), w.weight) for w in ws
            )

        return cls(
            pod,
            merged(terms.required_affinity),
            merged(terms.required_anti_affinity),
            merged_weighted(terms.preferred_affinity),
            merged_weighted(terms.preferred_anti_affinity),
        )


@dataclass(slots=True)
class PreFilterState:
    """kube's preFilterState."""

    pod_info: IncomingPodInfo
    namespace_labels: Mapping[str, str]
    """The incoming pod's namespace's labels."""
    existing_anti_affinity_counts: TopologyToMatchedTermCount = field(default_factory=TopologyToMatchedTermCount)
    affinity_counts: TopologyToMatchedTermCount = field(default_factory=TopologyToMatchedTermCount)
    anti_affinity_counts: TopologyToMatchedTermCount = field(default_factory=TopologyToMatchedTermCount)

    def clone(self) -> PreFilterState:
        return PreFilterState(
            self.pod_info,
            self.namespace_labels,
            self.existing_anti_affinity_counts.clone(),
            self.affinity_counts.clone(),
            self.anti_affinity_counts.clone(),
        )

    def update_with_pod(self, p_info: PodInfo, node: Node, multiplier: int) -> None:
        incoming = self.pod_info
        if p_info.affinity is not None:
            self.existing_anti_affinity_counts.update_with_anti_affinity_terms(
                p_info.affinity.required_anti_affinity, incoming.pod, self.namespace_labels, node, multiplier
            )
        self.affinity_counts.update_with_affinity_terms(incoming.required_affinity_terms, p_info.pod, node, multiplier)
        self.anti_affinity_counts.update_with_anti_affinity_terms(
            incoming.required_anti_affinity_terms, p_info.pod, _NO_LABELS, node, multiplier
        )


@dataclass(slots=True)
class PreScoreState:
    """kube's preScoreState."""

    topology_score: dict[str, dict[str, int]]
    pod_info: IncomingPodInfo
    namespace_labels: Mapping[str, str]


def _process_term(
    topology_score: dict[str, dict[str, int]],
    term: AffinityTerm,
    weight: int,
    pod: Pod,
    ns_labels: Mapping[str, str],
    node: Node,
    multiplier: int,
) -> None:
    """kube's scoreMap.processTerm."""
    if term.matches(pod.namespace, pod.metadata.labels, ns_labels):
        tp_value = node.metadata.labels.get(term.topology_key)
        if tp_value is not None:
            values = topology_score.setdefault(term.topology_key, {})
            values[tp_value] = values.get(tp_value, 0) + weight * multiplier


def _process_terms(
    topology_score: dict[str, dict[str, int]],
    terms: Iterable[WeightedAffinityTerm],
    pod: Pod,
    ns_labels: Mapping[str, str],
    node: Node,
    multiplier: int,
) -> None:
    for t in terms:
        _process_term(topology_score, t.term, t.weight, pod, ns_labels, node, multiplier)


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    placement_sensitive: ClassVar[bool] = False

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """``args``: an InterPodAffinityArgs, or None for kube's defaults (weight 1, False)."""
        self.hard_pod_affinity_weight: int = getattr(args, "hard_pod_affinity_weight", 1)
        self.ignore_preferred_terms_of_existing_pods: bool = getattr(
            args, "ignore_preferred_terms_of_existing_pods", False
        )

    # ---- filtering ---------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> tuple[None, Status]:
        all_nodes = snapshot_node_infos(state, nodes)
        namespaces = _cluster_namespaces(state)
        s = PreFilterState(IncomingPodInfo.of(pod, all_nodes, namespaces), namespace_labels(namespaces, pod.namespace))

        # getExistingAntiAffinityCounts
        for node_info in all_nodes:
            node = node_info.node
            for existing in node_info.pods.values():
                if existing.affinity is not None and existing.affinity.required_anti_affinity:
                    s.existing_anti_affinity_counts.update_with_anti_affinity_terms(
                        existing.affinity.required_anti_affinity, pod, s.namespace_labels, node, 1
                    )

        # getIncomingAffinityAntiAffinityCounts
        info = s.pod_info
        if info.required_affinity_terms or info.required_anti_affinity_terms:
            for node_info in all_nodes:
                node = node_info.node
                for existing in node_info.pods.values():
                    s.affinity_counts.update_with_affinity_terms(info.required_affinity_terms, existing.pod, node, 1)
                    s.anti_affinity_counts.update_with_anti_affinity_terms(
                        info.required_anti_affinity_terms, existing.pod, _NO_LABELS, node, 1
                    )

        if (
            not s.existing_anti_affinity_counts
            and not info.required_affinity_terms
            and not info.required_anti_affinity_terms
        ):
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, Status.success()

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_info_to_add: PodInfo, node_info: NodeInfo) -> Status:
        return self._update(state, pod_info_to_add, node_info, 1)

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_info_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status:
        return self._update(state, pod_info_to_remove, node_info, -1)

    def _update(self, state: CycleState, p_info: PodInfo, node_info: NodeInfo, multiplier: int) -> Status:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None and self.name in state.skip_filter_plugins:
            return Status.success()  # kube does not call AddPod/RemovePod of a plugin that skipped
        if s is None:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        # the state is shared with clones of the cycle state: update a copy
        s = s.clone()
        s.update_with_pod(p_info, node_info.node, multiplier)
        state.write(PRE_FILTER_STATE_KEY, s)
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        if not _satisfy_pod_affinity(s, node_info):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_AFFINITY_RULES_NOT_MATCH,))
        if not _satisfy_pod_anti_affinity(s, node_info):
            return Status(Code.UNSCHEDULABLE, (ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,))
        if not _satisfy_existing_pods_anti_affinity(s, node_info):
            return Status(Code.UNSCHEDULABLE, (ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,))
        return Status.success()

    def placement_affects(self, state: CycleState, pod: Pod, placed: PodInfo) -> bool:
        """Always: the reference runs PreFilter and PreScore again after every placement."""
        return True

    # ---- scoring -----------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        affinity = pod.spec.affinity
        has_preferred_affinity = bool(affinity and affinity.pod_affinity and affinity.pod_affinity.preferred)
        has_preferred_anti_affinity = bool(
            affinity and affinity.pod_anti_affinity and affinity.pod_anti_affinity.preferred
        )
        has_constraints = has_preferred_affinity or has_preferred_anti_affinity
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status.skip()

        # topologyScore comes from every node of the snapshot, not only the feasible ones
        all_nodes = snapshot_node_infos(state, nodes)
        namespaces = _cluster_namespaces(state)
        s = PreScoreState(
            {}, IncomingPodInfo.of(pod, all_nodes, namespaces), namespace_labels(namespaces, pod.namespace)
        )
        for node_info in all_nodes:
            pods = [
                p for p in node_info.pods.values() if has_constraints or p.affinity is not None
            ]  # PodsWithAffinity, unless the pod has preferred terms
            for existing in pods:
                self._process_existing_pod(s, existing, node_info, pod)
        if not s.topology_score:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, s)
        return Status.success()

    def _process_existing_pod(self, s: PreScoreState, existing: PodInfo, node_info: NodeInfo, incoming: Pod) -> None:
        node = node_info.node
        if not node.metadata.labels:
            return
        topo = s.topology_score
        # the incoming pod's preferred terms select the existing pod (namespaceSelector merged)
        _process_terms(topo, s.pod_info.preferred_affinity_terms, existing.pod, _NO_LABELS, node, 1)
        _process_terms(topo, s.pod_info.preferred_anti_affinity_terms, existing.pod, _NO_LABELS, node, -1)
        theirs = existing.affinity
        if theirs is None:
            return
        # the existing pod's terms select the incoming pod
        if self.hard_pod_affinity_weight > 0:
            for t in theirs.required_affinity:
                _process_term(topo, t, self.hard_pod_affinity_weight, incoming, s.namespace_labels, node, 1)
        _process_terms(topo, theirs.preferred_affinity, incoming, s.namespace_labels, node, 1)
        _process_terms(topo, theirs.preferred_anti_affinity, incoming, s.namespace_labels, node, -1)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        labels = node_info.node.metadata.labels
        score = 0
        for tp_key, tp_values in s.topology_score.items():
            v = labels.get(tp_key)
            if v is not None:
                score += tp_values.get(v, 0)
        return score

    def normalize_score(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        s: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        if not s.topology_score:
            return
        min_count, max_count = 2**63 - 1, -(2**63)
        for score in scores.values():
            max_count = max(max_count, score)
            min_count = min(min_count, score)
        max_min_diff = max_count - min_count
        for name, score in scores.items():
            f_score = 0.0
            if max_min_diff > 0:
                f_score = float(MAX_NODE_SCORE) * (float(score - min_count) / float(max_min_diff))
            scores[name] = int(f_score)


def _satisfy_existing_pods_anti_affinity(s: PreFilterState, node_info: NodeInfo) -> bool:
    if s.existing_anti_affinity_counts:
        for topology_key, topology_value in node_info.node.metadata.labels.items():
            if s.existing_anti_affinity_counts.get((topology_key, topology_value), 0) > 0:
                return False
    return True


def _satisfy_pod_anti_affinity(s: PreFilterState, node_info: NodeInfo) -> bool:
    if s.anti_affinity_counts:
        labels = node_info.node.metadata.labels
        for term in s.pod_info.required_anti_affinity_terms:
            value = labels.get(term.topology_key)
            if value is not None and s.anti_affinity_counts.get((term.topology_key, value), 0) > 0:
                return False
    return True


def _satisfy_pod_affinity(s: PreFilterState, node_info: NodeInfo) -> bool:
    pods_exist = True
    labels = node_info.node.metadata.labels
    for term in s.pod_info.required_affinity_terms:
        value = labels.get(term.topology_key)
        if value is None:
            return False  # all topology labels must exist on the node
        if s.affinity_counts.get((term.topology_key, value), 0) <= 0:
            pods_exist = False
    if not pods_exist:
        # the first pod of a series with affinity to itself: no pod anywhere matches the terms,
        # the pod matches them itself, and the node has every topology key
        return not s.affinity_counts and pod_matches_all_affinity_terms(
            s.pod_info.required_affinity_terms, s.pod_info.pod
        )
    return True


__all__ = [
    "ERR_REASON_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH",
    "NAMESPACES_STATE_KEY",
    "InterPodAffinity",
    "merge_affinity_term_namespaces",
    "pod_matches_all_affinity_terms",
]
