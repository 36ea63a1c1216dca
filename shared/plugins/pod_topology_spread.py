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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from kubus.api.matching import first_untolerated_taint, labels_match, node_selector_matches
from kubus.api.objects import (
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    Pod,
    SelectorOperator,
    Taint,
    TaintEffect,
    TopologySpreadConstraint,
)
from kubus.api.pod_affinity import selector_key, selector_matches
from kubus.api.workloads import NO_WORKLOADS, ReplicaSet, ReplicationController, StatefulSet, Workloads
from kubus.framework.config.args import DefaultingType, PodTopologySpreadArgs
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import ALL_ROWS, MAX_NODE_SCORE, FilterResult, Rejection, Rows
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
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins._columns import labels_mask, selector_mask
from kubus.plugins._gomath import go_log, go_round

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"

SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_TOPOLOGY_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY),
)
"""kube's systemDefaultConstraints (`defaultingType: System`)."""

PRE_FILTER_STATE_KEY = "PreFilterPodTopologySpread"
PRE_SCORE_STATE_KEY = "PreScorePodTopologySpread"
_SELECTORS_STATE_KEY = "PodTopologySpread/selectors"
_SCORE_NODES_STATE_KEY = "PodTopologySpread/score-nodes"
_SCORE_CONSTRAINTS_STATE_KEY = "PodTopologySpread/score-constraints"
_DEFAULT_SELECTOR_STATE_KEY = "PodTopologySpread/default-selector"
_MAX_INT32 = 2**31 - 1
_NO_ROW = np.empty(0, dtype=np.intp)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """kube's internal topologySpreadConstraint: a pod's constraint with its selector resolved
    (matchLabelKeys merged in) and its defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    """None selects no pod (kube's labels.Nothing for a nil labelSelector)."""
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool

    def selects(self, namespace: str, pod_namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` counts for a pod in ``pod_namespace``."""
        return namespace == pod_namespace and selector_matches(self.selector, labels)


def spread_constraints(
    constraints: Sequence[TopologySpreadConstraint], pod_labels: Mapping[str, str], action: str
) -> tuple[SpreadConstraint, ...]:
    """kube's filterTopologySpreadConstraints: the constraints with `whenUnsatisfiable ==
    action`, each with the pod's values of its matchLabelKeys ANDed into its selector (``key In
    (value)`` for each key the pod has; a nil selector stays nil), minDomains defaulting to 1,
    nodeAffinityPolicy to Honor and nodeTaintsPolicy to Ignore."""
    out = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector = c.label_selector
        if c.match_label_keys and selector is not None:
            extra = tuple(
                LabelSelectorRequirement(key, SelectorOperator.IN, (pod_labels[key],))
                for key in c.match_label_keys
                if key in pod_labels
            )
            if extra:
                selector = LabelSelector(dict(selector.match_labels), selector.match_expressions + extra)
        out.append(
            SpreadConstraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=selector,
                min_domains=1 if c.min_domains is None else c.min_domains,
                honor_node_affinity=c.node_affinity_policy in (None, HONOR),
                honor_node_taints=c.node_taints_policy == HONOR,
            )
        )
    return tuple(out)


def default_selector(pod: Pod, workloads: Workloads) -> LabelSelector | None:
    """kube's helper.DefaultSelector: the labels of every Service of the pod's namespace whose
    ``spec.selector`` selects ``pod`` (a Service without one selects none), merged; then the pod's
    controller, looked up by name in its namespace: a v1 ReplicationController's selector merged
    into those labels, an apps/v1 ReplicaSet's or StatefulSet's label selector ANDed (its
    matchLabels as `In` requirements, so that a key it shares with the merged labels is
    required twice, as kube's selector.Add does). None when that selects by nothing (kube's
    ``selector.Empty()``): no default constraints then."""
    if not workloads:
        return None
    labels = pod.metadata.labels
    merged: dict[str, str] = {}
    for service in workloads.services(pod.namespace):
        if service.selector is not None and labels_match(service.selector, labels):
            merged.update(service.selector)
    added: tuple[LabelSelectorRequirement, ...] = ()
    owner = pod.metadata.controller
    if owner is not None:
        group_version = _group_version(owner.api_version)
        found = workloads.get(owner.kind, pod.namespace, owner.name)
        if isinstance(found, ReplicationController) and group_version == ("", "v1"):
            merged.update(found.selector)
        elif isinstance(found, ReplicaSet | StatefulSet) and group_version == ("apps", "v1") and found.selector:
            own = found.selector
            in_ = SelectorOperator.IN
            added = (
                *(LabelSelectorRequirement(k, in_, (v,)) for k, v in own.match_labels.items()),
                *own.match_expressions,
            )
    if not merged and not added:
        return None
    return LabelSelector(merged, added)


def _group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: ``v1`` is the core group's, ``apps/v1`` (group, version); None for
    more than one slash (kube's parse error)."""
    if api_version.count("/") > 1:
        return None
    group, _, version = api_version.rpartition("/")
    return group, version


def _do_not_schedule_taint(taint: Taint) -> bool:
    return taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


# ---- the cycle state ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Domains:
    """One constraint's topology domains over the table's rows (host arrays; never mutated)."""

    col: np.ndarray
    """int32 per row: the interned value of the topology key (0: the node lacks the key)."""
    counts: np.ndarray
    """int64 per domain id: matching pods on the domain's eligible nodes."""
    present: np.ndarray
    """bool per domain id: the domain has an eligible node (kube's TpValueToMatchNum keys)."""
    ids: Mapping[str, int]
    """Label value -> domain id (the table's vocabulary of the key), for AddPod/RemovePod."""

    def min_match(self, min_domains: int) -> int:
        """kube's preFilterState.minMatchNum: the global minimum, 0 below minDomains domains."""
        n = int(self.present.sum())
        if n < min_domains:
            return 0
        return int(self.counts[self.present].min()) if n else _MAX_INT32


@dataclass(frozen=True, slots=True)
class _PreFilterState:
    constraints: tuple[SpreadConstraint, ...]
    domains: tuple[_Domains, ...]
    self_match: tuple[bool, ...]
    """Whether the pod matches each constraint's selector itself."""


@dataclass(frozen=True, slots=True)
class _PreScoreState:
    raw: np.ndarray
    """int64 per row: the Score of every row (0 for ignored ones)."""
    ignored: np.ndarray
    """bool per row: the node misses a topology key (kube's IgnoredNodes)."""
    rows: np.ndarray
    """The rows PreScore saw, in the order their scores come to NormalizeScore."""


@dataclass(frozen=True, slots=True)
class _ScoreNodes:
    """What PreScore reads of the nodes alone, for one pod and its ScheduleAnyway constraints:
    the same for every decision of a pod class until the node set changes (placements do not
    change it), so it is kept in the class's CycleState."""

    nodes_version: int
    rows: int
    cols: tuple[np.ndarray, ...]
    """The topology key's interned label column, per constraint."""
    has_all: np.ndarray
    """bool per row: the node has every required topology key."""
    eligible: tuple[np.ndarray, ...]
    """bool per row, per constraint: a node (of every key) its inclusion policies admit."""
    ignored: np.ndarray
    """``~has_all``."""
    valid: int
    """How many nodes the table has: PreScore over that many rows is over every node."""
    every_node_keyed: bool
    """Every node has every required topology key (none is ignored)."""
    present: tuple[np.ndarray | None, ...]
    """Per constraint (None for the hostname): bool per domain, some node is in it."""
    admitted: tuple[tuple[np.ndarray, np.ndarray], ...]
    """Per constraint: the rows ``eligible`` holds and their domains."""


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
        state.write(PRE_FILTER_STATE_KEY, self._pre_filter_state(pod, table, constraints))
        return None, Status.success()

    def _pre_filter_state(
        self, pod: Pod, table: NodeTable, constraints: tuple[SpreadConstraint, ...]
    ) -> _PreFilterState:
        cols = [_label_column(table, c.topology_key) for c in constraints]
        eligible_base = _valid_mask(table)
        for col in cols:
            eligible_base &= col != 0
        masks = _InclusionMasks(table, pod)
        domains = []
        for c, col in zip(constraints, cols, strict=True):
            eligible = masks.apply(c, eligible_base)
            per_row = _matching_pods(table, pod, c)
            size = table.domains(c.topology_key)
            in_domain = col[eligible]
            counts = np.bincount(in_domain, weights=per_row[eligible], minlength=size).astype(np.int64)
            present = np.bincount(in_domain, minlength=size) > 0
            values = table.label_values.get(c.topology_key)
            domains.append(_Domains(col, counts, present, values.ids if values is not None else {}))
        labels = pod.metadata.labels
        self_match = tuple(selector_matches(c.selector, labels) for c in constraints)
        return _PreFilterState(constraints, tuple(domains), self_match)

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        s: _PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            # PreFilter did not run (kube errors): compute what it would have stored
            table = view.table
            s = self._pre_filter_state(pod, table, self.constraints(pod, DO_NOT_SCHEDULE, table.workloads, state))
        at = _host_rows(view, rows)
        n = int(view.valid[rows].shape[0])
        # 0 passes, 1 skew too large, 2 missing the topology key: the first failing constraint's
        reason = np.zeros(n, dtype=np.int8)
        for c, d, self_match in zip(s.constraints, s.domains, s.self_match, strict=True):
            col = d.col[at]
            open_ = reason == 0
            missing = col == 0
            reason[open_ & missing] = 2
            skew = d.counts[col] + int(self_match) - d.min_match(c.min_domains)
            reason[open_ & ~missing & (skew > c.max_skew)] = 1
        xp = view.xp
        return FilterResult(
            xp.asarray(reason == 0),
            (
                Rejection(ERR_REASON_CONSTRAINTS_NOT_MATCH, xp.asarray(reason == 1), Code.UNSCHEDULABLE),
                Rejection(
                    ERR_REASON_NODE_LABEL_NOT_MATCH, xp.asarray(reason == 2), Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                ),
            ),
        )

    # ---- PreFilterExtensions: AddPod / RemovePod (what-ifs: preemption, nominated pods) ---------

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status:
        return self._update_with_pod(state, pod_to_schedule, pod_to_add.pod, node_info.node, +1)

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status:
        return self._update_with_pod(state, pod_to_schedule, pod_to_remove.pod, node_info.node, -1)

    def _update_with_pod(self, state: CycleState, pod: Pod, other: Pod, node: Node, delta: int) -> Status:
        """kube's updateWithPod: the count of the node's domain moves by ``delta`` for every
        constraint that selects ``other`` and whose inclusion policies admit the node. The state
        is replaced, never changed in place (clones share it)."""
        s: _PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        labels = node.metadata.labels
        if other.namespace != pod.namespace or not all(c.topology_key in labels for c in s.constraints):
            return Status.success()
        domains = list(s.domains)
        for i, c in enumerate(s.constraints):
            if not selector_matches(c.selector, other.metadata.labels):
                continue
            if not _node_included(c, pod, node):
                continue
            d = domains[i]
            value = d.ids.get(labels[c.topology_key])
            if value is None or value >= len(d.counts):
                continue  # a value the table has never seen: no node of the table is in it
            counts, present = d.counts.copy(), d.present.copy()
            counts[value] += delta
            present[value] = True
            domains[i] = _Domains(d.col, counts, present, d.ids)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(s.constraints, tuple(domains), s.self_match))
        return Status.success()

    # ---- scoring ---------------------------------------------------------------------------

    def pre_score_feasible(self, state: CycleState, pod: Pod, table: NodeTable, rows: Any) -> Status:
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
        nodes: _ScoreNodes | None = state.get(_SCORE_NODES_STATE_KEY)
        if nodes is None or (nodes.nodes_version, nodes.rows) != (table.nodes_version, table.rows):
            nodes = self._score_nodes(pod, table, constraints)
            state.write(_SCORE_NODES_STATE_KEY, nodes)
        state.write(PRE_SCORE_STATE_KEY, self._pre_score_state(pod, table, constraints, rows, nodes))
        return Status.success()

    def _score_nodes(self, pod: Pod, table: NodeTable, constraints: tuple[SpreadConstraint, ...]) -> _ScoreNodes:
        # kube requires every topology key unless the constraints are the System defaults of a
        # pod without its own (there a node lacking the zone counts as a "" zone of its own)
        require_all = bool(pod.spec.topology_spread_constraints) or not self.system_defaulted
        cols = tuple(_label_column(table, c.topology_key) for c in constraints)
        has_all = np.ones(table.rows, dtype=bool)
        if require_all:
            for col in cols:
                has_all &= col != 0
        valid = _valid_mask(table)
        eligible_base = valid & has_all
        masks = _InclusionMasks(table, pod)
        eligible = tuple(masks.apply(c, eligible_base) for c in constraints)
        present = tuple(
            None
            if c.topology_key == LABEL_HOSTNAME
            else np.bincount(col[valid], minlength=table.domains(c.topology_key)) > 0
            for c, col in zip(constraints, cols, strict=True)
        )
        admitted_rows = [np.flatnonzero(e) for e in eligible]
        admitted = tuple((rows, col[rows]) for col, rows in zip(cols, admitted_rows, strict=True))
        return _ScoreNodes(
            table.nodes_version, table.rows, cols, has_all, eligible, ~has_all, int(valid.sum()),
            bool(has_all[valid].all()), present, admitted,
        )  # fmt: skip

    def _pre_score_state(
        self,
        pod: Pod,
        table: NodeTable,
        constraints: tuple[SpreadConstraint, ...],
        rows: Any,
        nodes: _ScoreNodes | None = None,
    ) -> _PreScoreState:
        n = table.rows
        scored = np.asarray(rows, dtype=np.intp)
        if nodes is None:
            nodes = self._score_nodes(pod, table, constraints)
        has_all = nodes.has_all
        # every node scored and keyed (the common case): what the nodes alone give is known
        every = nodes.every_node_keyed and len(scored) == nodes.valid
        ignored_scored = np.zeros(len(scored), dtype=bool) if every else ~has_all[scored]
        kept = scored if every else scored[~ignored_scored]
        score = np.zeros(n, dtype=np.float64)
        raw: np.ndarray | None = None
        for k, (c, col, admitted) in enumerate(zip(constraints, nodes.cols, nodes.eligible, strict=True)):
            per_row = _matching_pods(table, pod, c)
            size = table.domains(c.topology_key)
            if c.topology_key == LABEL_HOSTNAME:
                # the hostname special case: the node's own pods, whatever the policies
                count = per_row.astype(np.float64)
                domains = len(scored) - int(ignored_scored.sum())
                term = count * go_log(float(domains + 2)) + float(c.max_skew - 1)
                score = score + np.where(col != 0, term, 0.0)
                continue
            if every:
                # every node's domain is present: the eligible rows are the admitted ones
                present = nodes.present[k]
                assert present is not None
                admitted_rows, admitted_cols = nodes.admitted[k]
                per_domain = np.bincount(admitted_cols, weights=per_row[admitted_rows], minlength=size)
            else:
                present = np.bincount(col[kept], minlength=size) > 0
                eligible = admitted & present[col]
                per_domain = np.bincount(col[eligible], weights=per_row[eligible], minlength=size)
            domains = int(present.sum())
            # the term of each domain, then of each row: the same float arithmetic per value
            terms = per_domain * go_log(float(domains + 2)) + float(c.max_skew - 1)
            terms[0] = 0.0  # value 0: the node lacks the key
            if len(constraints) == 1:
                raw = go_round(terms)[col]  # one term: round the few domains, not every row
            else:
                score = score + terms[col]
        if raw is None:
            raw = go_round(score)
        ignored = nodes.ignored
        raw[ignored] = 0
        return _PreScoreState(raw, ignored, scored)

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Any:
        s: _PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        at = _host_rows(view, rows)
        if s is None:
            # PreScore did not run (kube errors): compute what it would have stored
            scored = np.arange(view.table.rows)[at] if isinstance(at, slice) else np.asarray(at, dtype=np.intp)
            table = view.table
            s = self._pre_score_state(
                pod, table, self.constraints(pod, SCHEDULE_ANYWAY, table.workloads, state), scored
            )
            state.write(PRE_SCORE_STATE_KEY, s)
        return view.xp.asarray(s.raw[at])

    def normalize_score(self, state: CycleState, pod: Pod, xp: Any, scores: Any) -> Any:
        """kube's NormalizeScore over the scores of the rows PreScore saw, in that order: ignored
        nodes 0; with max and min over the others, 100 when max is 0, else
        100 * (max + min - score) / max."""
        s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        if len(s.rows) != int(scores.shape[0]):
            raise ValueError(
                f"PodTopologySpread: NormalizeScore got {int(scores.shape[0])} scores for the "
                f"{len(s.rows)} rows of its PreScore"
            )
        ignored = xp.asarray(s.ignored[s.rows])
        counted = scores[~ignored]
        if counted.shape[0] == 0:
            return xp.zeros_like(scores)
        top = max(int(counted.max()), 0)
        low = int(counted.min())
        if top == 0:
            normalized = xp.full_like(scores, MAX_NODE_SCORE)
        else:
            normalized = MAX_NODE_SCORE * (top + low - scores) // top
        return xp.where(ignored, 0, normalized).astype(xp.int64)

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


# ---- helpers ------------------------------------------------------------------------------------


class _InclusionMasks:
    """The node inclusion policies as bool per row, each computed once, when first needed."""

    def __init__(self, table: NodeTable, pod: Pod) -> None:
        self.table = table
        self.pod = pod
        self._affinity: np.ndarray | None = None
        self._taints: np.ndarray | None = None

    def apply(self, c: SpreadConstraint, eligible: np.ndarray) -> np.ndarray:
        out = eligible
        if c.honor_node_affinity:
            out = out & self.affinity()
        if c.honor_node_taints:
            out = out & self.taints()
        return out

    def affinity(self) -> np.ndarray:
        """The pod's required node affinity (nodeSelector and required terms) per row: the
        masks NodeAffinity's Filter uses."""
        if self._affinity is None:
            table, pod = self.table, self.pod
            aff = pod.spec.affinity
            required = aff.node_affinity.required if aff is not None and aff.node_affinity is not None else None
            mask = np.ones(table.rows, dtype=bool)
            if pod.spec.node_selector or required is not None:
                view = table.view()
                ok = view.xp.ones(table.rows, dtype=bool)
                if pod.spec.node_selector:
                    ok &= labels_mask(view, pod.spec.node_selector, ALL_ROWS)
                if required is not None:
                    ok &= selector_mask(view, required, ALL_ROWS)
                mask = np.asarray(table.backend.to_host(ok), dtype=bool)
            self._affinity = mask
        return self._affinity

    def taints(self) -> np.ndarray:
        """No untolerated NoSchedule/NoExecute taint, per row (one answer per taint list)."""
        if self._taints is None:
            table = self.table
            tolerations = self.pod.spec.tolerations
            per_set = np.array(
                [
                    first_untolerated_taint(taints, tolerations, _do_not_schedule_taint) is None
                    for taints in table.taint_sets.values
                ],
                dtype=bool,
            )
            self._taints = per_set[table.backend.to_host(table.view().taint_set)]
        return self._taints


def _node_included(c: SpreadConstraint, pod: Pod, node: Node) -> bool:
    """kube's matchNodeInclusionPolicies for one node."""
    labels = node.metadata.labels
    if c.honor_node_affinity:
        if pod.spec.node_selector and not labels_match(pod.spec.node_selector, labels):
            return False
        aff = pod.spec.affinity
        required = aff.node_affinity.required if aff is not None and aff.node_affinity is not None else None
        if required is not None and not node_selector_matches(required, labels, node.name):
            return False
    if c.honor_node_taints:
        return first_untolerated_taint(node.spec.taints, pod.spec.tolerations, _do_not_schedule_taint) is None
    return True


def _label_column(table: NodeTable, key: str) -> np.ndarray:
    """A copy of the interned column of label ``key`` (all 0 when no node has it)."""
    col = table.host_label(key)
    return np.zeros(table.rows, dtype=np.int32) if col is None else col.copy()


def _valid_mask(table: NodeTable) -> np.ndarray:
    mask = np.zeros(table.rows, dtype=bool)
    mask[table.valid_rows()] = True
    return mask


def _matching_pods(table: NodeTable, pod: Pod, c: SpreadConstraint) -> np.ndarray:
    """Pods of the pod's namespace the constraint's selector selects, per row (int64), leaving
    out terminating ones (kube's countPodsMatchSelector skips a pod with a deletionTimestamp)."""
    if c.selector is None:
        return np.zeros(table.rows, dtype=np.int64)
    namespace, selector = pod.namespace, c.selector
    return table.pods.count(
        table.rows,
        lambda ns, labels: ns == namespace and selector_matches(selector, labels),
        ("PodTopologySpread", namespace, selector_key(selector)),
        terminating=False,
    )


def _host_rows(view: TableView, rows: Rows) -> Any:
    """``rows`` as an index into host arrays: the slice itself, or a host int array."""
    if isinstance(rows, slice):
        return rows
    return view.table.backend.to_host(rows)


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
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "LABEL_HOSTNAME",
    "LABEL_TOPOLOGY_ZONE",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread",
    "SpreadConstraint",
    "default_selector",
    "spread_constraints",
]
