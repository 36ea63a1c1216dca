"""PodTopologySpread (PreFilter, Filter, PreScore, Score, NormalizeScore): spread matching pods
evenly over topology domains, as kube-scheduler's podtopologyspread plugin does.

A constraint counts the pods of the incoming pod's namespace that its labelSelector selects
(with the pod's values of `matchLabelKeys` ANDed in), per topology domain (a value of the node
label `topologyKey`), over the nodes that have every topology key of the pod's constraints and
pass the constraint's node inclusion policies (nodeAffinityPolicy Honor, the default: the node
matches the pod's nodeSelector and required node affinity; nodeTaintsPolicy Honor: the node has
no NoSchedule/NoExecute taint the pod does not tolerate; Ignore, the default, counts any node).

- Filter (`DoNotSchedule` constraints), kube's doFilter, constraints in order, the first failure
  is the node's one reason: a node without the topology key is
  "node(s) didn't match pod topology spread constraints (missing required label)"
  (UnschedulableAndUnresolvable); otherwise `matching pods in the node's domain + 1 if the pod
  matches its own selector - global minimum > maxSkew` is
  "node(s) didn't match pod topology spread constraints" (Unschedulable). The global minimum is
  the smallest count among the eligible domains, or 0 when there are fewer than `minDomains`.
- Score (`ScheduleAnyway` constraints), over the feasible nodes being scored: nodes missing a
  topology key are ignored (score 0); every other node scores
  round(sum over constraints of count * log(domains + 2) + maxSkew - 1), where count is the
  matching pods in the node's domain (on the node itself for `kubernetes.io/hostname`) and
  domains the distinct values among the scored nodes that are not ignored (their number for
  hostname). NormalizeScore: ignored nodes get 0, the lowest score, and are left out of max and
  min; the others 100 * (max + min - score) / max (100 for every node when max is 0). Only the
  System default constraints of a pod without its own do not require every key (kube's
  requireAllTopologies): there a node lacking a key is scored without that constraint's term,
  and its missing value ("") counts as one more domain among the scored nodes, as in kube.

Default constraints. A pod without topologySpreadConstraints gets the args' default constraints
(`defaultingType: System`, kube's default: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway;
or `List`: `defaultConstraints`), each with a label selector kube builds with
`helper.DefaultSelector` (`default_selector`) from the table's `workloads`: the labels of every
Service of the pod's namespace whose selector selects the pod, merged, plus its controller's
selector (metadata.ownerReferences with `controller: true`): a v1 ReplicationController's map
merged in, an apps/v1 ReplicaSet's or StatefulSet's requirements added. The constraints are
skipped when that selector is empty: a pod no such object selects has no default constraints.
They are never built from the pod's own labels (kube does not do that either). The selector is
worked out once per pod class (the CycleState keeps it), and not at all in a cluster without
such objects. Queueing hints see no workloads: a pod whose DoNotSchedule constraints are the
default ones is queued by every pod and node event (its selector is not known there).

Vectorized: PreFilter counts the matching pods per row with `NodeTable.pods` and sums them per
domain with a bincount over the interned label column; Filter and Score gather the per-domain
numbers back over the rows. All of it is host numpy; results go to the backend at the end.
Existing pods' counts change only when a matching pod lands, so the plugin is cluster-scoped
(`placement_affects`) and not placement-sensitive.

Terminating pods (metadata.deletionTimestamp set: a pod being deleted that still runs out its
grace period) are not counted, in PreFilter and PreScore alike, as kube's countPodsMatchSelector
skips them; AddPod/RemovePod move the counts for any pod, terminating or not, as kube's
updateWithPod does (it has no such check).

Counts are kept per constraint. kube 1.28 keys them by topologyPair{key, value} instead
(calPreFilterState's TpPairToMatchNum, where a later constraint's count of a node overwrites an
earlier one's on the same key; PreScore's TopologyPairToPodCounts, where they add up). That
differs only for two constraints of one whenUnsatisfiable on one key, and the API rejects those
(a repeated {topologyKey, whenUnsatisfiable}; kubus's manifests and args too), so the results are
kube's; kube itself went per constraint in kubernetes/kubernetes#129119.

Divergences from kube, on purpose: kube's countPodsMatchSelector counted no pod for an empty
(`{}`) labelSelector from 1.27 until kubernetes/kubernetes#141340 fixed it; kubus counts every
pod of the namespace, as the fix does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kubus.api.objects import LabelSelector, Node, Pod, TopologySpreadConstraint
from kubus.api.pod_affinity import selector_matches
from kubus.api.workloads import NO_WORKLOADS, Workloads
from kubus.framework.config.args import DefaultingType, PodTopologySpreadArgs
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_DELETED,
    NODE_LOST,
    NODE_UPDATED,
    POD_BOUND,
    POD_FREED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
)
from kubus.framework.status import Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins._spreading_constraints import (
    DO_NOT_SCHEDULE,
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_ZONE,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULT_CONSTRAINTS,
    SpreadConstraint,
    default_selector,
    spread_constraints,
)
from kubus.plugins._spreading_counts import host_rows
from kubus.plugins._spreading_filter import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PreFilterState,
    filter_rows,
    pre_filter_state,
    updated_with_pod,
)
from kubus.plugins._spreading_score import PreScoreState, ScoreNodes, normalized, pre_score_state, score_nodes

PRE_FILTER_STATE_KEY = "PreFilterPodTopologySpread"
PRE_SCORE_STATE_KEY = "PreScorePodTopologySpread"
_SELECTORS_STATE_KEY = "PodTopologySpread/selectors"
_SCORE_NODES_STATE_KEY = "PodTopologySpread/score-nodes"
_SCORE_CONSTRAINTS_STATE_KEY = "PodTopologySpread/score-constraints"
_DEFAULT_SELECTOR_STATE_KEY = "PodTopologySpread/default-selector"


# ---- the plugin --------------------------------------------------------------------------------


class PodTopologySpread:
    name: ClassVar[str] = "PodTopologySpread"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True
    args_type: ClassVar[type] = PodTopologySpreadArgs

    def __init__(self, args: PodTopologySpreadArgs | None = None, handle: object = None) -> None:
        args = args if args is not None else PodTopologySpreadArgs()
        self.system_defaulted = args.defaulting_type is DefaultingType.SYSTEM
        self.default_constraints: tuple[TopologySpreadConstraint, ...] = (
            SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else tuple(args.default_constraints)
        )
        self._hard_defaults = any(c.when_unsatisfiable == DO_NOT_SCHEDULE for c in self.default_constraints)

    # ---- constraints -----------------------------------------------------------------------

    def constraints(
        self, pod: Pod, action: str, workloads: Workloads = NO_WORKLOADS, state: CycleState | None = None
    ) -> tuple[SpreadConstraint, ...]:
        """The pod's constraints for ``action`` (DoNotSchedule: Filter, ScheduleAnyway: Score):
        its own, else the default ones with the selector `default_selector` finds among
        ``workloads`` (kube's getConstraints / buildDefaultConstraints); that selector is kept in
        ``state``, when given, for the pod's next calls."""
        if pod.spec.topology_spread_constraints:
            return spread_constraints(pod.spec.topology_spread_constraints, pod.metadata.labels, action)
        if not workloads:
            return ()  # no object selects the pod: no default constraint (the common case, free)
        defaults = spread_constraints(self.default_constraints, pod.metadata.labels, action)
        if not defaults:
            return ()
        selector = self._default_selector(pod, workloads, state)
        if selector is None:
            return ()
        return tuple(replace(c, selector=selector) for c in defaults)

    @staticmethod
    def _default_selector(pod: Pod, workloads: Workloads, state: CycleState | None) -> LabelSelector | None:
        if state is None:
            return default_selector(pod, workloads)
        kept: tuple[Workloads, LabelSelector | None] | None = state.get(_DEFAULT_SELECTOR_STATE_KEY)
        if kept is None or kept[0] is not workloads:
            kept = (workloads, default_selector(pod, workloads))
            state.write(_DEFAULT_SELECTOR_STATE_KEY, kept)
        return kept[1]

    def _hint_constraints(self, pod: Pod) -> tuple[SpreadConstraint, ...] | None:
        """The DoNotSchedule constraints queueing hints look at: None when they are default ones,
        whose selector comes from workloads the hints do not see."""
        if pod.spec.topology_spread_constraints:
            return self.constraints(pod, DO_NOT_SCHEDULE)
        return None if self._hard_defaults else ()

    def _selectors(
        self, state: CycleState, pod: Pod, workloads: Workloads = NO_WORKLOADS
    ) -> tuple[LabelSelector | None, ...]:
        selectors: tuple[LabelSelector | None, ...] | None = state.get(_SELECTORS_STATE_KEY)
        if selectors is None:
            selectors = tuple(
                c.selector
                for action in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
                for c in self.constraints(pod, action, workloads, state)
            )
            state.write(_SELECTORS_STATE_KEY, selectors)
        return selectors

    def placement_affects(self, state: CycleState, pod: Pod, placed: PodInfo) -> bool:
        """True when ``placed`` is in the pod's namespace and one of the pod's constraints (hard
        or soft) selects it: only such a pod changes a domain's count. The constraints are those
        PreFilter saw (without it, those of a cluster with no workloads)."""
        other = placed.pod
        if other.namespace != pod.namespace:
            return False
        return any(selector_matches(s, other.metadata.labels) for s in self._selectors(state, pod))

    # ---- filtering -------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[frozenset[str] | None, Status]:
        """kube's calPreFilterState over every node; Skip when the pod has no DoNotSchedule
        constraint."""
        self._selectors(state, pod, table.workloads)
        constraints = self.constraints(pod, DO_NOT_SCHEDULE, table.workloads, state)
        if not constraints:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, pre_filter_state(pod, table, constraints))
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            # PreFilter did not run (kube errors): compute what it would have stored
            table = view.table
            s = pre_filter_state(pod, table, self.constraints(pod, DO_NOT_SCHEDULE, table.workloads, state))
        return filter_rows(s, view, rows)

    # ---- PreFilterExtensions: AddPod / RemovePod (what-ifs: preemption, nominated pods) ---------

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status:
        return self._update_with_pod(state, pod_to_schedule, pod_to_add.pod, node_info.node, +1)

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status:
        return self._update_with_pod(state, pod_to_schedule, pod_to_remove.pod, node_info.node, -1)

    def _update_with_pod(self, state: CycleState, pod: Pod, other: Pod, node: Node, delta: int) -> Status:
        """kube's updateWithPod (`updated_with_pod`) on the pod's PreFilter state."""
        s: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        moved = updated_with_pod(s, pod, other, node, delta)
        if moved is not s:
            state.write(PRE_FILTER_STATE_KEY, moved)
        return Status.success()

    # ---- scoring ---------------------------------------------------------------------------

    def pre_score_feasible(self, state: CycleState, pod: Pod, table: NodeTable, rows: NDArray[np.intp]) -> Status:
        """kube's PreScore over the feasible ``rows``: Skip without ScheduleAnyway constraints
        (or nodes); computes every row's Score for `score` and the ignored rows for
        NormalizeScore."""
        if len(table) == 0:
            return Status.skip()
        # Read once per CycleState: the cycle runs this at every decision of a pod class (equal
        # pods, equal constraints), and building the defaults showed in its profile.
        constraints: tuple[SpreadConstraint, ...] | None = state.get(_SCORE_CONSTRAINTS_STATE_KEY)
        if constraints is None:
            constraints = self.constraints(pod, SCHEDULE_ANYWAY, table.workloads, state)
            state.write(_SCORE_CONSTRAINTS_STATE_KEY, constraints)
        if not constraints:
            return Status.skip()
        nodes: ScoreNodes | None = state.get(_SCORE_NODES_STATE_KEY)
        if nodes is None or (nodes.nodes_version, nodes.rows) != (table.nodes_version, table.rows):
            nodes = score_nodes(pod, table, constraints, self.system_defaulted)
            state.write(_SCORE_NODES_STATE_KEY, nodes)
        state.write(PRE_SCORE_STATE_KEY, pre_score_state(pod, table, constraints, rows, nodes))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        s: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        at = host_rows(view, rows)
        if s is None:
            # PreScore did not run (kube errors): compute what it would have stored
            scored = np.arange(view.table.rows)[at] if isinstance(at, slice) else np.asarray(at, dtype=np.intp)
            table = view.table
            constraints = self.constraints(pod, SCHEDULE_ANYWAY, table.workloads, state)
            nodes = score_nodes(pod, table, constraints, self.system_defaulted)
            s = pre_score_state(pod, table, constraints, scored, nodes)
            state.write(PRE_SCORE_STATE_KEY, s)
        return view.xp.asarray(s.raw[at])

    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        """kube's NormalizeScore over the scores of the rows PreScore saw, in that order (`normalized`)."""
        s: PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        return normalized(s, xp, scores)

    # ---- queueing hints --------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Pod Add | UpdatePodLabel | Delete (`is_schedulable_after_pod_change`), Node Add |
        Delete | UpdateNodeLabel | UpdateNodeTaint (`is_schedulable_after_node_change`). A lost
        node (it gains the unreachable taint) is a taint update: `is_schedulable_after_node_lost`.
        kubus pods never change labels or tolerations once submitted, so no pod update is
        registered."""
        return (
            *events_on((POD_BOUND, *POD_FREED), self.is_schedulable_after_pod_change),
            *events_on((NODE_ADDED, NODE_UPDATED, NODE_DELETED), self.is_schedulable_after_node_change),
            ClusterEventWithHint(NODE_LOST, self.is_schedulable_after_node_lost),
        )

    def is_schedulable_after_pod_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterPodChange: QUEUE when an assigned pod of the pod's namespace
        that one of its DoNotSchedule constraints selects comes or goes (or changes labels so
        that a selector's answer changes)."""
        original = old if isinstance(old, Pod) else None
        modified = new if isinstance(new, Pod) else None
        if original is None and modified is None:
            return QueueingHint.QUEUE
        if (modified is not None and not _involved(modified, pod)) or (
            original is not None and not _involved(original, pod)
        ):
            return QueueingHint.QUEUE_SKIP
        constraints = self._hint_constraints(pod)
        if constraints is None:
            return QueueingHint.QUEUE
        if modified is not None and original is not None:
            if (
                _uid(pod) == _uid(modified)
                and modified.spec.tolerations != original.spec.tolerations
                and any(c.honor_node_taints for c in constraints)
            ):
                return QueueingHint.QUEUE
            if modified.metadata.labels == original.metadata.labels:
                return QueueingHint.QUEUE_SKIP
            for c in constraints:
                if selector_matches(c.selector, original.metadata.labels) != selector_matches(
                    c.selector, modified.metadata.labels
                ):
                    return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        changed = modified if modified is not None else original
        assert changed is not None
        labels = changed.metadata.labels
        return (
            QueueingHint.QUEUE
            if any(selector_matches(c.selector, labels) for c in constraints)
            else QueueingHint.QUEUE_SKIP
        )

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeChange: QUEUE when a node that has every topology key of
        the pod's DoNotSchedule constraints comes or goes, gains or loses one of them, changes
        a topology value or its taints."""
        original, modified = node_change(old, new)
        if original is None and modified is None:
            return QueueingHint.QUEUE
        constraints = self._hint_constraints(pod)
        if constraints is None:
            return QueueingHint.QUEUE
        was = original is not None and _has_keys(original, constraints)
        now = modified is not None and _has_keys(modified, constraints)
        if original is not None and modified is not None:
            if was != now:
                return QueueingHint.QUEUE
            if now and (
                any(
                    original.metadata.labels.get(c.topology_key) != modified.metadata.labels.get(c.topology_key)
                    for c in constraints
                )
                or original.spec.taints != modified.spec.taints
            ):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        return _hint(now if modified is not None else was)

    def is_schedulable_after_node_lost(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """A node lost (kube: it gains the unreachable taint, an UpdateNodeTaint): QUEUE when it
        has every topology key of the pod's DoNotSchedule constraints, as kube's hint answers a
        taint change of such a node."""
        original, modified = node_change(old, new)
        node = modified if modified is not None else original
        constraints = self._hint_constraints(pod)
        if node is None or constraints is None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if _has_keys(node, constraints) else QueueingHint.QUEUE_SKIP


# ---- queueing hints' helpers ---------------------------------------------------------------------


def _has_keys(node: Node, constraints: Sequence[SpreadConstraint]) -> bool:
    """kube's nodeLabelsMatchSpreadConstraints: the node has every constraint's topology key."""
    labels = node.metadata.labels
    return all(c.topology_key in labels for c in constraints)


def _hint(queue: bool) -> QueueingHint:
    return QueueingHint.QUEUE if queue else QueueingHint.QUEUE_SKIP


def _uid(pod: Pod) -> str:
    return pod.metadata.uid or pod.key


def _involved(incoming: Pod, pod: Pod) -> bool:
    """kube's involvedInTopologySpreading: ``incoming`` is the pod itself, or an assigned pod of
    its namespace."""
    return _uid(incoming) == _uid(pod) or (incoming.spec.node_name != "" and incoming.namespace == pod.namespace)


__all__ = [
    "DO_NOT_SCHEDULE",
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "LABEL_HOSTNAME",
    "LABEL_TOPOLOGY_ZONE",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "SCHEDULE_ANYWAY",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread",
    "SpreadConstraint",
    "default_selector",
    "spread_constraints",
]
