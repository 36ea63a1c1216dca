"""DefaultPreemption (PostFilter): when Filter found no node for a pod, find a node where evicting
pods of lower priority lets it fit, and the fewest, least important pods to evict there.

kube's plugin (pkg/scheduler/framework/plugins/defaultpreemption) and its Evaluator
(pkg/scheduler/framework/preemption), step for step:

1. PodEligibleToPreemptOthers: a pod with preemptionPolicy Never does not preempt.
2. The potential nodes are those the pod's Filter rejected only Unschedulable (not
   UnschedulableAndUnresolvable, nor left out by a PreFilter result): `FilterDiagnosis.resolvable`.
3. DryRunPreemption examines them from an offset, in order, and stops once it holds at least one
   candidate that violates no PodDisruptionBudget and numCandidates candidates in all
   (calculateNumCandidates: max(nodes * minCandidateNodesPercentage / 100,
   minCandidateNodesAbsolute), at most the potential nodes; at most numCandidates of each kind
   are kept). Candidates that violate no budget come first.
4. SelectVictimsOnNode, per node: take off every pod of lower priority (RemovePod of the
   PreFilter plugins on a clone of the pod's CycleState), check that the pod fits (every Filter
   plugin); then, most important first (MoreImportantPod: priority, then the earlier start), the
   pods whose eviction would violate a budget and then the others, put each back (AddPod) and
   keep it if the pod still fits, else it is a victim. A budget's disruptionsAllowed counts down
   over the node's candidates for eviction (filterPodsWithPDBViolation).
5. pickOneNodeForPreemption: fewest budget violations, then the lowest highest victim priority,
   then the smallest sum of victim priorities (each offset by MaxInt32+1), then the fewest
   victims, then the latest start of the highest-priority victims, then the first candidate.

The dry run is array work: instead of one node at a time, the victims of every node examined
are taken off at once, each Filter plugin runs once over those rows, and the reprieve goes in
rounds, round k putting back the k-th pod of every node that still has one, one Filter call per
plugin per round over those rows, taking it off again where the pod no longer fits. Where the
Filter plugins that run for the pod allow it, pods are taken off and put back on a what-if copy
of the table's usage arrays only (`_Shadow`; the table is not touched): when every one that
pods can change reads them only through those arrays (`reads_view_only`: NodeResourcesFit,
GPUFit) and no PreFilter plugin keeps what-if state. Otherwise (NodePorts for a pod with host
ports, InterPodAffinity, PodTopologySpread, ...) they are taken off the node table itself
(`NodeTable.forget_many`, `assume`), after the leading plugins the copy can answer have set
aside the nodes where the pod does not fit even with every potential victim gone. Either way
row-local plugins (NodeResourcesFit, NodePorts, GPUFit: their answer for a row reads that row
only) see exactly what kube's per-node NodeInfo copy shows them. Plugins whose answer depends on
other nodes' pods (`is_cluster_scoped`: InterPodAffinity, PodTopologySpread) and plugins that
keep what-if state in the CycleState (PreFilterExtensions) run the kube way, one row at a time,
each node with its own clone of the CycleState that RemovePod/AddPod updated for that node's
pods alone; like kube's, their Filter must see other nodes' pods only through that state
(kube's Filter sees one NodeInfo). Plugins that placements cannot change (placement_sensitive
False) run once. The table is restored before the plugin returns: every pod taken off is put
back and each node's pods keep their order. A node's potential victims (and their usage, in
importance order) are remembered between dry runs while its NodeInfo is unchanged
(`NodeInfo.generation`), so a preemption does not go through the pods of the nodes the last
ones examined again. When every Filter plugin that runs reads one row (on the copy), a row's
whole outcome (candidate or why not) is remembered too, for the kind of pod (`pod_class_key`)
and the budgets' allowances: the next pod of that kind dry-runs only the nodes that changed
(`_OutcomeCache`; a run of identical preemptors, as PreemptionBasic, redoes one node per pod).
The tests hold the result to a plain per-node implementation
(`kubus.reference.default_preemption`), the two ways of taking pods off to each other, and what
is remembered to a fresh plugin's answers.

Differences from kube, each deliberate:
- Nodes are examined one by one from an offset into the potential nodes (in table row order)
  that is drawn from the pod's uid, not at random: `preemption_offset`, a seeded hash (the node
  table's seed) of the uid modulo the number of potential nodes. As kube's random offset, it
  spreads successive preemptions over the cluster instead of examining the nodes preempted
  before first every time; unlike it, the same pod on the same table always examines the same
  nodes. kube examines 16 nodes at a time in parallel, so how far past numCandidates it looks
  varies; here it stops exactly there. Ties among candidates go to the first one examined
  (kube: Go map order).
  Victims of equal importance keep the node's pod order (kube's sort is not stable).
- A pod whose start time is unknown (`PodInfo.start_time` 0) started "now", as kube's
  GetPodStartTime says for pods that have not started: it is the newest.
- kube's "a nominated pod waits while victims terminate" rule (PodEligibleToPreemptOthers: a
  pod whose status.nominatedNodeName names a node where a lower-priority pod is terminating by
  preemption, a deletionTimestamp and a DisruptionTarget condition with reason
  PreemptionByScheduler, is not eligible) never applies: kubus evicts the victims and places the
  preemptor in one step (`Scheduler._place_preemptor`, one store transaction), so no pod waits
  on a nomination. For the same reason there are no nominated pods to add in
  RunFilterPluginsWithNominatedPods.
- Terminating pods (deletionTimestamp set: cluster mode's pods being deleted gracefully) are
  potential victims like any other pod of lower priority, and their room counts until they are
  gone, as in kube 1.28, whose SelectVictimsOnNode takes every lower-priority pod.
- A budget's disruptionsAllowed is computed from the pods in the node table (every one of them
  placed), with `kubus.api.disruption.disruptions_allowed`; kubus has no disruption controller,
  so no DisruptedPods either.
- No extenders.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kubus.api.disruption import PodDisruptionBudget, disruptions_allowed
from kubus.api.objects import PODS, ObjectMeta, Pod, PodSpec, PreemptionPolicy
from kubus.api.pod_affinity import selector_matches
from kubus.framework.config.args import DefaultPreemptionArgs
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import (
    FilterDiagnosis,
    FilterResult,
    PostFilterResult,
    has_pre_filter_extensions,
    is_cluster_scoped,
    is_placement_sensitive,
)
from kubus.framework.scheduling import fit_error_message, pod_class_key
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo, gpu_memory_taken
from kubus.kernels.tiebreak import stable_hash

__all__ = [
    "ERR_NOT_HELPFUL",
    "ERR_NO_VICTIMS",
    "NOT_ELIGIBLE_PREEMPT_NEVER",
    "Candidate",
    "DefaultPreemption",
    "DryRunResult",
    "calculate_num_candidates",
    "earliest_victim_start_time",
    "importance",
    "pick_one_node_for_preemption",
    "preemption_offset",
    "preemption_selects",
    "split_by_pdb_violation",
    "start_time",
    "table_disruptions_allowed",
]

ERR_NO_VICTIMS = "No preemption victims found for incoming pod"
_NO_VICTIMS = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_VICTIMS,))
ERR_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_PREEMPT_NEVER = "not eligible due to preemptionPolicy=Never."
_PRIORITY_OFFSET = 2**31
"""kube adds MaxInt32+1 to every victim priority before summing them, so all terms are >= 0."""


# ---- kube's util: start times and importance ---------------------------------------------------


def start_time(info: PodInfo) -> float:
    """kube's GetPodStartTime: when the pod started; "now" (later than any start) when unknown."""
    return info.start_time if info.start_time > 0 else math.inf


def importance(info: PodInfo) -> tuple[int, float]:
    """Sort key, most important first: kube's MoreImportantPod (higher priority, then the
    earlier start)."""
    return -info.pod.spec.priority, start_time(info)


def earliest_victim_start_time(victims: Sequence[PodInfo]) -> float:
    """kube's GetEarliestPodStartTime: the earliest start among the victims of the highest
    priority. Raises ValueError for no victims."""
    top = max(v.pod.spec.priority for v in victims)
    return min(start_time(v) for v in victims if v.pod.spec.priority == top)


def calculate_num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """kube's calculateNumCandidates: max(num_nodes * percentage / 100, absolute), at most
    num_nodes."""
    return min(max(num_nodes * percentage // 100, absolute), num_nodes)


def preemption_offset(pod: Pod, num_nodes: int, seed: int = 0) -> int:
    """Where in the potential nodes the dry run for ``pod`` starts (kube: rand.Int31n(numNodes)):
    a hash of its uid (its namespace/name when it has none) under ``seed``, modulo
    ``num_nodes``; 0 for no nodes."""
    if num_nodes <= 0:
        return 0
    return stable_hash(seed, "preemption/" + (pod.metadata.uid or pod.key)) % num_nodes


# ---- PodDisruptionBudgets ---------------------------------------------------------------------


def preemption_selects(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    """Whether filterPodsWithPDBViolation counts ``pod`` against ``pdb``: same namespace, and a
    selector that matches its labels. Unlike the disruption controller, a nil or empty selector
    matches nothing here, and so does a pod without labels."""
    selector = pdb.selector
    if not pod.metadata.labels or selector is None:
        return False
    if not selector.match_labels and not selector.match_expressions:
        return False
    return pod.namespace == pdb.namespace and selector_matches(selector, pod.metadata.labels)


def table_disruptions_allowed(pdb: PodDisruptionBudget, table: NodeTable) -> int:
    """status.disruptionsAllowed of ``pdb`` over the pods in the table, every one of them placed:
    `kubus.api.disruption.disruptions_allowed` over a placed stand-in per pod of the budget's
    namespace (the table groups pods by labels; nothing else of them counts)."""

    def placed() -> Iterator[Pod]:
        for group in table.pods.label_groups():
            if group.namespace != pdb.namespace:
                continue
            stand_in = Pod(ObjectMeta("", group.namespace, labels=dict(group.labels)), PodSpec(node_name="-"))
            yield from itertools.repeat(stand_in, group.counts.total)

    return disruptions_allowed(pdb, placed())


def split_by_pdb_violation(
    victims: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget], allowed: Sequence[int]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """kube's filterPodsWithPDBViolation: (pods whose eviction would violate a budget, the
    others), each in the order given. Every budget a pod counts against is counted down as the
    pods go by; a pod violates when one goes below 0."""
    violating, others = _split_by_pdb_violation(range(len(victims)), victims, pdbs, allowed)
    return [victims[j] for j in violating], [victims[j] for j in others]


# ---- candidates -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the pod fits once ``victims`` are evicted (kube's Candidate)."""

    node: str
    victims: tuple[PodInfo, ...]
    """Most important first."""
    num_pdb_violations: int = 0
    scores: tuple[int, int, int, int, float] | None = field(default=None, compare=False, repr=False)
    """`_pick_scores`, when the dry run worked them out for many candidates at once (None: the
    pick works them out)."""


@dataclass(frozen=True, slots=True)
class DryRunResult:
    candidates: tuple[Candidate, ...]
    """Those that violate no budget first, each kind in the order examined."""
    statuses: dict[str, Status] = field(default_factory=dict)
    """Node -> why it is not a candidate, for every node examined that is not."""
    errors: tuple[str, ...] = ()
    """The messages of the Error statuses, in the order examined."""


def pick_one_node_for_preemption(candidates: Sequence[Candidate]) -> Candidate | None:
    """kube's pickOneNodeForPreemption with the default score functions, ties going to the
    earlier candidate; a candidate without victims wins at once. None for no candidates."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c
    # kube keeps the candidates with the best score of each function in turn and then takes the
    # first: the lexicographic best of all five scores, the first one of equals (as max does)
    return max(candidates, key=_scores_of)


def _scores_of(c: Candidate) -> tuple[int, int, int, int, float]:
    return c.scores if c.scores is not None else _pick_scores(c)


def _pick_scores(c: Candidate) -> tuple[int, int, int, int, float]:
    """kube's five default scores of a candidate with victims, higher better: fewest budget
    violations, lowest highest victim priority, smallest sum of victim priorities (each offset
    by MaxInt32+1), fewest victims, latest start of the highest-priority victims."""
    victims = c.victims
    priorities = [v.pod.spec.priority for v in victims]
    top = max(priorities)
    return (
        -c.num_pdb_violations,
        -priorities[0],
        -(sum(priorities) + _PRIORITY_OFFSET * len(priorities)),
        -len(victims),
        min(start_time(v) for v, q in zip(victims, priorities, strict=True) if q == top),  # earliest_victim_start_time
    )


# ---- the plugin -------------------------------------------------------------------------------


class DefaultPreemption:
    name: ClassVar[str] = "DefaultPreemption"

    def __init__(self, args: DefaultPreemptionArgs | None = None, handle: object = None) -> None:
        """``args``: a DefaultPreemptionArgs (None: kube's defaults). Raises FieldError for args
        kube's validation refuses."""
        self.args = args if args is not None else DefaultPreemptionArgs()
        self.args.validate()
        self._victims = _VictimCache()
        self._outcomes = _OutcomeCache()
        self._rate = 1.0
        """Nodes examined per candidate found in the last dry run: how many the next examines at
        first (`_chunk_size`)."""
        self.shadow_dry_run = True
        """Take potential victims off a what-if copy of the table's usage arrays when the Filter
        plugins that run allow it (`_DryRun`); False: always off the node table itself (the
        tests hold both ways to the same answers)."""

    def post_filter(self, state: CycleState, pod: Pod, diagnosis: FilterDiagnosis) -> PostFilterResult:
        """kube's PostFilter: Success with the node and the victims to evict there, or
        Unschedulable with kube's "preemption: ..." message (Error when every node examined
        failed with an error). Leaves the node table as it found it."""
        eligible, why = self.pod_eligible_to_preempt_others(pod)
        if not eligible:
            return PostFilterResult(Status.unschedulable(f"preemption: {why}"))
        table, framework = diagnosis.table, diagnosis.framework
        if table is None or framework is None:
            return PostFilterResult(Status.error("preemption: no node table to dry-run on"))
        num_all = len(table)
        if num_all == 0:
            return PostFilterResult(Status.error("preemption: no nodes available"))
        rows = _potential_rows(table, diagnosis)
        result = DryRunResult(())
        if len(rows):
            offset, num_candidates = self.get_offset_and_num_candidates(len(rows), pod, table.seed)
            result = self.dry_run_preemption(state, pod, table, framework, rows, offset, num_candidates)
        if not result.candidates:
            if result.errors:
                return PostFilterResult(Status.error(f"preemption: {_aggregate(result.errors)}"))
            reasons: Counter[str] = Counter()
            for status in result.statuses.values():
                reasons.update(status.reasons)
            if num_all > len(result.statuses):
                reasons[ERR_NOT_HELPFUL] += num_all - len(result.statuses)
            return PostFilterResult(Status.unschedulable(f"preemption: {fit_error_message(num_all, reasons)}"))
        best = self.select_candidate(result.candidates)
        assert best is not None
        return PostFilterResult(Status.success(), best.node, best.victims)

    def pod_eligible_to_preempt_others(self, pod: Pod) -> tuple[bool, str]:
        """kube's PodEligibleToPreemptOthers: (False, why) for preemptionPolicy Never. kube's
        other rule (lower-priority pods terminating by preemption on the pod's
        status.nominatedNodeName) never applies in kubus, which nominates no node: its victims
        are gone in the step that places the preemptor."""
        if pod.spec.preemption_policy is PreemptionPolicy.NEVER:
            return False, NOT_ELIGIBLE_PREEMPT_NEVER
        return True, ""

    def get_offset_and_num_candidates(self, num_nodes: int, pod: Pod | None = None, seed: int = 0) -> tuple[int, int]:
        """kube's GetOffsetAndNumCandidates: (offset, numCandidates), the offset
        `preemption_offset` of ``pod`` under ``seed`` instead of kube's random one (0 without a
        pod)."""
        args = self.args
        offset = 0 if pod is None else preemption_offset(pod, num_nodes, seed)
        return offset, calculate_num_candidates(
            num_nodes, args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute
        )

    def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """kube's SelectCandidate."""
        return pick_one_node_for_preemption(candidates)

    def dry_run_preemption(
        self,
        state: CycleState,
        pod: Pod,
        table: NodeTable,
        framework: Any,
        rows: Sequence[int] | np.ndarray,
        offset: int,
        num_candidates: int,
        pdbs: Sequence[PodDisruptionBudget] | None = None,
    ) -> DryRunResult:
        """kube's DryRunPreemption over the potential nodes ``rows`` (table rows, in order),
        examined from ``offset`` (wrapping around) one by one until at least one candidate
        violates no budget and ``num_candidates`` candidates are found. ``state`` is the pod's
        CycleState after PreFilter (not changed); ``pdbs`` default to the table's. The rows are
        evaluated in chunks (``num_candidates`` first, then as many as the candidates still
        wanted seem to need), each as array work; the table is restored after each chunk, also
        when a plugin raises."""
        order = np.asarray(rows, dtype=np.intp)
        n = len(order)
        if n:
            order = np.roll(order, -(offset % n))
        budgets = tuple(table.disruption_budgets if pdbs is None else pdbs)
        allowed = tuple(table_disruptions_allowed(pdb, table) for pdb in budgets)
        clean: list[Candidate] = []
        violating: list[Candidate] = []
        statuses: dict[str, Status] = {}
        errors: list[str] = []
        run = _DryRun(framework, table, state, pod, budgets, allowed, shadow=self.shadow_dry_run, victims=self._victims)
        if run.row_local:
            run.outcomes = self._outcomes.rows(table, pod_class_key(pod), budgets, allowed)
        pos, found, size, dry = 0, 0, 0, False
        while pos < n:
            size = _chunk_size(num_candidates, pos, found, len(clean) + len(violating), size, dry, self._rate)
            part = order[pos : pos + size]
            before = found
            try:
                outcomes = run.evaluate(part)
            finally:
                run.restore()
            for name, outcome in outcomes:
                if isinstance(outcome, Candidate):
                    found += 1
                    kept = clean if outcome.num_pdb_violations == 0 else violating
                    if len(kept) < num_candidates:
                        kept.append(outcome)
                    if clean and len(clean) + len(violating) >= num_candidates:
                        self._rate = (pos + len(part)) / found
                        return DryRunResult(tuple(clean + violating), statuses, tuple(errors))
                    continue
                statuses[name] = outcome
                if outcome.code is Code.ERROR:
                    errors.append(outcome.message())
            pos += len(part)
            dry = found == before
        self._rate = n / max(found, 1)
        return DryRunResult(tuple(clean + violating), statuses, tuple(errors))


# ---- the dry run over many rows at once ---------------------------------------------------------


def reads_view_only(plugin: object) -> bool:
    """Whether a Filter plugin sees the pods on a node only through the view's usage arrays
    (its ``reads_view_only`` ClassVar, `kubus.framework.interface`; default False)."""
    return bool(getattr(plugin, "reads_view_only", False))


class _DryRun:
    """SelectVictimsOnNode for a set of rows at once. `evaluate` may change the node table (takes
    pods off, puts some back); `restore` puts every pod back, in each node's order. One use.

    Pods are taken off in one of two ways. On a what-if copy of the table's usage arrays
    (`_Shadow`), the table untouched, when every Filter plugin that runs for the pod is either
    one that placements cannot change or one that reads pods only through those arrays
    (`reads_view_only`: NodeResourcesFit, GPUFit), and no PreFilter plugin keeps what-if state.
    Else on the table itself (`NodeTable.forget` / `assume`), with RemovePod / AddPod on each
    row's CycleState. Even then, the leading Filter plugins the copy can answer (when no
    RemovePod runs: its errors come first) run on it before the table changes, so that the nodes
    they reject with every potential victim gone are never taken apart.
    """

    def __init__(
        self,
        framework: Any,
        table: NodeTable,
        state: CycleState,
        pod: Pod,
        pdbs: Sequence[PodDisruptionBudget],
        allowed: Sequence[int],
        *,
        shadow: bool = True,
        victims: _VictimCache | None = None,
    ) -> None:
        self.fw = framework
        self.victims = _VictimCache() if victims is None else victims
        self.table = table
        self.backend = table.backend
        self.state = state
        self.pod = pod
        self.priority = pod.spec.priority
        self.pdbs = pdbs
        self.allowed = allowed
        skip = state.skip_filter_plugins
        self.filters: list[Any] = [p for p in framework.filter if p.name not in skip]
        """The Filter plugins that run for the pod, in order."""
        self.stateful = any(has_pre_filter_extensions(p) and p.name not in skip for p in framework.pre_filter)
        """Some PreFilter plugin keeps what-if state: each node gets its own CycleState."""
        self.per_row = [p for p in self.filters if is_cluster_scoped(p) or has_pre_filter_extensions(p)]
        """Run one row at a time, with the row's CycleState (kube's way)."""
        per_row = {p.name for p in self.per_row}
        self.sensitive = [p for p in self.filters if p.name not in per_row and is_placement_sensitive(p)]
        """Row-local plugins whose answer pods change: run over many rows in one call."""
        on_copy = [
            p.name not in per_row and (not is_placement_sensitive(p) or reads_view_only(p)) for p in self.filters
        ]
        self.mutates = not shadow or self.stateful or not all(on_copy)
        """Pods are taken off the table itself (else only off the `_Shadow`)."""
        self.lead = 0
        if shadow and not self.stateful:
            self.lead = next((k for k, ok in enumerate(on_copy) if not ok), len(on_copy))
        """The leading Filter plugins that run on the `_Shadow` before the table changes (every
        one of them when the table never does)."""
        self.row_local = not self.mutates and not self.per_row
        """Each row's outcome reads that row alone (every Filter plugin row-local, on the
        `_Shadow`): it may come from, and go to, ``outcomes``."""
        self.outcomes: _Outcomes | None = None
        """Row -> (its NodeInfo, generation, node name, outcome) from earlier dry runs for the same
        kind of pod (`_OutcomeCache.rows`); None: none kept."""
        self._shadow: _Shadow | None = None
        self._order: dict[int, list[str]] = {}
        """Row -> its pods' keys, in order, before the dry run touched it."""
        self._off: dict[int, dict[str, PodInfo]] = {}
        """Row -> the pods taken off it now."""
        self._states: dict[int, CycleState] = {}

    # ---- the algorithm ---------------------------------------------------------------------------

    def evaluate(self, rows: np.ndarray) -> list[tuple[str, Candidate | Status]]:
        """Per row (in order): its node's name and a Candidate, or the Status saying why the
        node is none (from ``outcomes`` where the node is unchanged since it was kept there)."""
        if self.outcomes is None:
            return self._evaluate(rows)
        cache = self.outcomes
        infos = self.table.infos
        named: list[tuple[str, Candidate | Status] | None] = []
        todo: list[int] = []
        for k, row in enumerate(rows.tolist()):
            info = infos[row]
            hit = cache.get(row)
            if hit is not None and hit[0] is info and info is not None and hit[1] == info.generation:
                named.append((hit[2], hit[3]))
            else:
                named.append(None)
                todo.append(k)
        if todo:
            for k, (name, outcome) in zip(todo, self._evaluate(rows[todo]), strict=True):
                row = int(rows[k])
                info = infos[row]
                assert info is not None
                cache[row] = (info, info.generation, name, outcome)
                named[k] = (name, outcome)
        return [n for n in named if n is not None]

    def _evaluate(self, rows: np.ndarray) -> list[tuple[str, Candidate | Status]]:
        """`evaluate`, every row dry-run now."""
        outcomes: list[Candidate | Status | None] = [None] * len(rows)
        table = self.table
        row_of = rows.tolist()
        found = self.victims.of(table, row_of, self.priority)
        live: list[int] = []
        """Positions in ``rows`` still in the running."""
        for i, v in enumerate(found):
            if v.pods:
                live.append(i)
            else:
                outcomes[i] = _NO_VICTIMS

        # does the pod fit with every potential victim gone? first the plugins the copy answers
        shadow: _Shadow | None = None
        if (self.lead or not self.mutates) and live:
            shadow = self._shadow_of()
            at = [row_of[i] for i in live]
            shadow.change(np.asarray(at, dtype=np.intp), self.victims.totals(at), -1)
            live = self._drop_rejected(
                live, at, self._first_rejections(at, self.filters[: self.lead], shadow.view()), outcomes
            )
        if self.mutates:
            kept = []
            for i in live:
                error = self._take_off(row_of[i], found[i].pods)
                if error is None:
                    kept.append(i)
                else:
                    outcomes[i] = error
            at = [row_of[i] for i in kept]
            live = self._drop_rejected(
                kept, at, self._first_rejections(at, self.filters[self.lead :], table.view()), outcomes
            )

        plans: dict[int, _Plan] = {}
        for i in live:
            v = found[i]
            violating, others = _split_by_pdb_violation(v.by_importance, v.pods, self.pdbs, self.allowed)
            plans[i] = _Plan(row_of[i], v, violating + others, len(violating), bool(violating) and bool(others))

        # the reprieve, in rounds: round k puts back every node's k-th pod
        if self.mutates:
            self._reprieve_on_table(plans, outcomes)
        elif plans:
            assert shadow is not None
            self._reprieve_on_shadow(plans, shadow)

        scores = _plan_scores([plan for plan in plans.values() if plan.victims])
        for i, plan in plans.items():
            name = plan.found.name
            if not plan.victims:
                outcomes[i] = Status(Code.ERROR, (f'expected at least one victim pod on node "{name}"',))
                continue
            victims = [plan.found.pods[j] for j in plan.victims]
            if plan.resort:
                victims.sort(key=importance)
            outcomes[i] = Candidate(name, tuple(victims), plan.violations, next(scores))
        named: list[tuple[str, Candidate | Status]] = []
        for v, outcome in zip(found, outcomes, strict=True):
            assert outcome is not None
            named.append((v.name, outcome))
        return named

    @staticmethod
    def _drop_rejected(live: list[int], rows: list[int], rejected: dict[int, Status], outcomes: list[Any]) -> list[int]:
        """``live`` (positions of ``rows``) less those ``rejected`` (row -> Status), whose
        outcomes it sets."""
        if not rejected:
            return live
        kept = []
        for i, row in zip(live, rows, strict=True):
            status = rejected.get(row)
            if status is None:
                kept.append(i)
            else:
                outcomes[i] = status
        return kept

    def _reprieve_on_table(self, plans: dict[int, _Plan], outcomes: list[Any]) -> None:
        for k in itertools.count():
            batch = [i for i, plan in plans.items() if k < len(plan.order)]
            if not batch:
                break
            placed: list[int] = []
            for i in batch:
                plan = plans[i]
                error = self._put_back(plan.row, plan.found.pods[plan.order[k]])
                if error is not None:
                    outcomes[i] = error
                    del plans[i]
                else:
                    placed.append(i)
            fits = self._fits([plans[i].row for i in placed])
            for i, ok in zip(placed, fits.tolist(), strict=True):
                if ok:
                    continue
                plan = plans[i]
                victim = plan.order[k]
                error = self._take_off(plan.row, [plan.found.pods[victim]])
                if error is not None:
                    outcomes[i] = error
                    del plans[i]
                    continue
                plan.victims.append(victim)
                if k < plan.num_violating:
                    plan.violations += 1

    def _reprieve_on_shadow(self, plans: dict[int, _Plan], shadow: _Shadow) -> None:
        items = list(plans.values())
        n = len(items)
        lengths = np.fromiter((len(plan.order) for plan in items), dtype=np.intp, count=n)
        width = int(lengths.max())
        order = np.zeros((n, width), dtype=np.intp)
        for p, plan in enumerate(items):
            order[p, : len(plan.order)] = plan.order
        # the plans' deltas side by side: plan p's pod j at its offset + j
        deltas = _Deltas.concat([plan.found.deltas for plan in items])
        offset = np.cumsum(lengths) - lengths
        plan_rows = np.fromiter((plan.row for plan in items), dtype=np.intp, count=n)
        evicted = np.zeros((n, width), dtype=bool)
        for k in range(width):
            act = np.flatnonzero(lengths > k)
            rows = plan_rows[act]
            back = order[act, k] + offset[act]
            shadow.change(rows, deltas.take(back), +1)
            bad = ~self._fits_row_local(rows, shadow.view())
            if bad.any():
                shadow.change(rows[bad], deltas.take(back[bad]), -1)
                evicted[act[bad], k] = True
        first = np.fromiter((plan.num_violating for plan in items), dtype=np.intp, count=n)
        violations = (evicted & (np.arange(width)[None, :] < first[:, None])).sum(axis=1).tolist()
        at, ks = np.nonzero(evicted)
        flat = order[at, ks].tolist()
        ends = np.cumsum(evicted.sum(axis=1)).tolist()
        begin = 0
        for plan, end, count in zip(items, ends, violations, strict=True):
            plan.victims = flat[begin:end]
            plan.violations = count
            begin = end

    def restore(self) -> None:
        """Every pod taken off back on its node, the node's pods in their first order."""
        for row, off in self._off.items():
            if off:
                self.table.assume_many(off.values(), row)
        for row, order in self._order.items():
            node = self.table.node_info(row)
            if list(node.pods) != order:
                node.pods = {key: node.pods[key] for key in order}
        self._off.clear()
        self._order.clear()
        self._states.clear()

    def _shadow_of(self) -> _Shadow:
        if self._shadow is None:
            self._shadow = _Shadow(self.table)
        return self._shadow

    # ---- taking pods off and putting them back -----------------------------------------------------

    def _take_off(self, row: int, infos: Sequence[PodInfo]) -> Status | None:
        """kube's removePod for each pod, in order: off the node, then RemovePod of the PreFilter
        plugins on the row's state. The Error status when one fails (the pods after it stay)."""
        if row not in self._order:
            self._order[row] = list(self.table.node_info(row).pods)
            if self.stateful:
                self._states[row] = self.state.clone()
        off = self._off.setdefault(row, {})
        state = self._states.get(row)
        if state is None:
            for info in self.table.forget_many([info.pod.key for info in infos], row):
                off[info.pod.key] = info
            return None
        node = self.table.node_info(row)
        for info in infos:
            key = info.pod.key
            off[key] = self.table.forget(key, row)
            status = self.fw.run_remove_pod(state, self.pod, info, node)
            if not status.is_success:
                return _extension_error("RemovePod", status)
        return None

    def _put_back(self, row: int, info: PodInfo) -> Status | None:
        """kube's addPod: on the node, then AddPod of the PreFilter plugins on the row's state."""
        self._off[row].pop(info.pod.key)
        self.table.assume(info, row)
        state = self._states.get(row)
        if state is None:
            return None
        status = self.fw.run_add_pod(state, self.pod, info, self.table.node_info(row))
        return None if status.is_success else _extension_error("AddPod", status)

    # ---- Filter over many rows ---------------------------------------------------------------------

    def _state(self, row: int) -> CycleState:
        return self._states.get(row, self.state)

    def _first_rejections(self, rows: list[int], plugins: Sequence[Any], view: TableView) -> dict[int, Status]:
        """kube's RunFilterPlugins on each row, ``plugins`` (in order) on ``view``: row -> the
        Status of the first plugin that rejects it, for the rows some plugin rejects."""
        out: dict[int, Status] = {}
        if not rows or not plugins:
            return out
        rows_h = np.asarray(rows, dtype=np.intp)
        alive = np.ones(len(rows_h), dtype=bool)
        to_host = self.backend.to_host
        per_row = {id(p) for p in self.per_row}
        d_rows = self.backend.asarray(rows_h)
        for plugin in plugins:
            if not alive.any():
                break
            if id(plugin) in per_row:
                for j in np.flatnonzero(alive).tolist():
                    row = rows[j]
                    res = plugin.filter(self._state(row), self.pod, view, self.backend.asarray(rows_h[j : j + 1]))
                    if not to_host(res.passed)[0]:
                        out[row] = _rejection_status(plugin.name, res, 0, to_host)
                        alive[j] = False
                continue
            res = plugin.filter(self.state, self.pod, view, d_rows)
            passed = to_host(res.passed)
            newly = alive & ~passed
            if newly.any():
                # rows the same rejections mask share one Status
                hit = [to_host(rej.mask)[newly] for rej in res.rejections]
                masks = np.stack(hit, axis=1) if hit else np.zeros((int(newly.sum()), 0), dtype=bool)
                shared: dict[bytes, Status] = {}
                for j, hits in zip(np.flatnonzero(newly).tolist(), masks, strict=True):
                    key = hits.tobytes()
                    status = shared.get(key)
                    if status is None:
                        status = shared[key] = _status_of(plugin.name, itertools.compress(res.rejections, hits))
                    out[rows[j]] = status
                alive &= passed
        return out

    def _fits_row_local(self, rows: np.ndarray, view: TableView) -> np.ndarray:
        """Whether every row-local plugin that placements can change passes on each row."""
        ok = np.ones(len(rows), dtype=bool)
        if self.sensitive and len(rows):
            d_rows = self.backend.asarray(rows)
            to_host = self.backend.to_host
            for plugin in self.sensitive:
                ok &= to_host(plugin.filter(self.state, self.pod, view, d_rows).passed)
        return ok

    def _fits(self, rows: list[int]) -> np.ndarray:
        """Whether the pod fits on each row (every plugin that placements can change passes:
        the others passed when every victim was off and cannot have changed since)."""
        rows_h = np.asarray(rows, dtype=np.intp)
        view = self.table.view()
        ok = self._fits_row_local(rows_h, view)
        if self.per_row:
            for j in np.flatnonzero(ok).tolist():
                row = rows[j]
                one = self.backend.asarray(rows_h[j : j + 1])
                for plugin in self.per_row:
                    if not self.backend.to_host(plugin.filter(self._state(row), self.pod, view, one).passed)[0]:
                        ok[j] = False
                        break
        return ok


@dataclass(slots=True)
class _Plan:
    """One node's reprieve: the potential victims in reprieve order and what came of them."""

    row: int
    found: _Victims
    order: list[int]
    """Budget-violating pods first, then the others; each most important first (indices into
    ``found.pods``)."""
    num_violating: int
    resort: bool
    """Both kinds present: kube sorts the victims by importance again."""
    victims: list[int] = field(default_factory=list)
    violations: int = 0


@dataclass(frozen=True, slots=True)
class _Deltas:
    """What pods add to the usage columns of their rows, one column (index) per pod: as
    NodeInfo.add_pod accounts them and NodeTable writes them."""

    m: np.ndarray
    """[resources + 2, pods]: the requests by `NodeTable.resource_index` (1 for `pods`), then
    the non-zero cpu and memory."""
    gpus: dict[int, list[tuple[int, int]]]
    """Pod index -> (device, memory it takes there) for the pods that hold GPUs."""

    @classmethod
    def of(cls, table: NodeTable, pods: Sequence[PodInfo], rows: Sequence[int]) -> _Deltas:
        """The deltas of ``pods``, each on the node of the same place in ``rows``."""
        n = len(pods)
        r = len(table.resources)
        m = np.zeros((r + 2, n), dtype=np.int64)
        requests = [info.requests for info in pods]
        named: set[str] = set().union(*requests)
        for name, i in table.resource_index.items():
            if name == PODS:
                m[i] = 1
            elif name in named:  # (a resource none of them requests stays 0)
                m[i] = [q.get(name, 0) for q in requests]
        m[r] = [info.non_zero_cpu for info in pods]
        m[r + 1] = [info.non_zero_memory for info in pods]
        gpus: dict[int, list[tuple[int, int]]] = {}
        for j, info in enumerate(pods):
            if info.gpu is not None and info.gpu_devices:
                node = table.node_info(rows[j])
                devices = node.node.gpus
                gpus[j] = [
                    (d, gpu_memory_taken(info.gpu, devices[d].memory))
                    for d in info.gpu_devices
                    if 0 <= d < len(node.gpu_free_memory)
                ]
        return cls(m, gpus)

    def sums(self, starts: Sequence[int]) -> _Deltas:
        """The deltas of consecutive runs of pods, each starting at ``starts`` (ascending, each
        run non-empty, the last to the end)."""
        at = np.asarray(starts, dtype=np.intp)
        gpus: dict[int, list[tuple[int, int]]] = {}
        if self.gpus:
            run = np.searchsorted(at, np.fromiter(self.gpus, dtype=np.intp), side="right") - 1
            for k, entries in zip(run.tolist(), self.gpus.values(), strict=True):
                gpus.setdefault(k, []).extend(entries)
        return _Deltas(np.add.reduceat(self.m, at, axis=1), gpus)

    def split(self, starts: Iterable[int]) -> list[_Deltas]:
        """The deltas cut into consecutive runs, each starting at ``starts`` (ascending, the
        first at 0, the last to the end)."""
        at = np.fromiter(starts, dtype=np.intp)
        bounds = [*at.tolist(), self.m.shape[1]]
        gpus: list[dict[int, list[tuple[int, int]]]] = [{} for _ in range(len(at))]
        if self.gpus:
            run = np.searchsorted(at, np.fromiter(self.gpus, dtype=np.intp), side="right") - 1
            for k, (j, entries) in zip(run.tolist(), self.gpus.items(), strict=True):
                gpus[k][j - bounds[k]] = entries
        return [_Deltas(self.m[:, s:e], g) for s, e, g in zip(bounds, bounds[1:], gpus, strict=False)]

    @staticmethod
    def concat(parts: Sequence[_Deltas]) -> _Deltas:
        """``parts`` side by side, in order."""
        gpus: dict[int, list[tuple[int, int]]] = {}
        at = 0
        for part in parts:
            if part.gpus:
                for j, entries in part.gpus.items():
                    gpus[at + j] = entries
            at += part.m.shape[1]
        return _Deltas(np.concatenate([p.m for p in parts], axis=1), gpus)

    def take(self, pods: np.ndarray) -> _Deltas:
        """The deltas of the pods at ``pods``, in that order."""
        gpus = {k: self.gpus[j] for k, j in enumerate(pods.tolist()) if j in self.gpus} if self.gpus else {}
        return _Deltas(self.m[:, pods], gpus)


@dataclass(frozen=True, slots=True)
class _Victims:
    """One node's potential victims for one priority (its pods of lower priority) and what the
    dry run derives from them: valid while the node's NodeInfo object keeps its generation."""

    info: NodeInfo
    name: str
    """The node's."""
    generation: int
    priority: int
    resources: int
    """len(table.resources) when made."""
    pods: tuple[PodInfo, ...]
    """In the node's order."""
    priorities: np.ndarray
    """Each pod's priority (int64), in the node's order."""
    starts: np.ndarray
    """Each pod's `start_time` (float64, inf when unknown), in the node's order."""
    by_importance: tuple[int, ...]
    """Indices into ``pods``, most important first (`importance`; equals keep their order)."""
    deltas: _Deltas
    """One column per pod."""
    total: _Deltas
    """One column: all of them."""


class _VictimCache:
    """Row -> its `_Victims` as a dry run last found them, for one node table: the nodes a
    preemption did not change are not gone through again by the next one."""

    def __init__(self) -> None:
        self._table: weakref.ref[NodeTable] | None = None
        self._rows: dict[int, _Victims] = {}
        self._totals = np.zeros((0, 0), dtype=np.int64)
        """Column ``row``: the ``total`` of the row's `_Victims` (its m), for `totals`."""
        self._gpu_totals: dict[int, list[tuple[int, int]]] = {}

    def of(self, table: NodeTable, rows: list[int], priority: int) -> list[_Victims]:
        """The `_Victims` of each row (a node) for a pod of ``priority``."""
        resources = len(table.resources)
        if self._table is None or self._table() is not table:
            self._table = weakref.ref(table)
            self._rows = {}
            self._gpu_totals = {}
        if self._totals.shape[0] != resources + 2 or self._totals.shape[1] < table.rows:
            self._totals = np.zeros((resources + 2, max(table.rows, 64)), dtype=np.int64)
            self._rows = {}
            self._gpu_totals = {}
        cache = self._rows
        infos = table.infos
        out: list[_Victims | None] = []
        missing: list[tuple[int, int, NodeInfo, list[PodInfo]]] = []
        for k, row in enumerate(rows):
            info = infos[row]
            assert info is not None
            v = cache.get(row)
            if (
                v is None
                or v.info is not info
                or v.generation != info.generation
                or v.priority != priority
                or v.resources != resources
            ):
                lower = [p for p in info.pods.values() if p.pod.spec.priority < priority]
                missing.append((k, row, info, lower))
                v = None
            out.append(v)
        if missing:
            pods = [p for *_, lower in missing for p in lower]
            spans: dict[int, tuple[int, int]] = {}
            at = 0
            for k, _, _, lower in missing:
                spans[k] = (at, at + len(lower))
                at += len(lower)
            with_pods = {k: span for k, span in spans.items() if span[1] > span[0]}
            empty = _Deltas.of(table, [], [])
            parts: dict[int, tuple[_Deltas, _Deltas]] = {}
            if with_pods:
                deltas = _Deltas.of(table, pods, [row for _, row, _, lower in missing for _ in lower])
                starts = [s for s, _ in with_pods.values()]
                each = deltas.split(starts)
                totals = deltas.sums(starts).split(range(len(with_pods)))
                parts = {k: (d, t) for k, d, t in zip(with_pods, each, totals, strict=True)}
            orders, priorities, start_times = _by_importance(with_pods, pods)
            for k, row, info, lower in missing:
                start, end = spans[k]
                d, t = parts.get(k, (empty, empty))
                order = tuple(j - start for j in orders.get(k, ()))
                v = cache[row] = _Victims(
                    info, info.name, info.generation, priority, resources, tuple(lower),
                    priorities[start:end], start_times[start:end], order, d, t,
                )  # fmt: skip
                out[k] = v
                self._totals[:, row] = t.m[:, 0] if t.m.shape[1] else 0
                if t.gpus:
                    self._gpu_totals[row] = t.gpus[0]
                else:
                    self._gpu_totals.pop(row, None)
        return [v for v in out if v is not None]

    def totals(self, rows: list[int]) -> _Deltas:
        """The ``total`` of each row's `_Victims` (as `of` last made them), side by side."""
        gpus = self._gpu_totals
        at = {k: gpus[row] for k, row in enumerate(rows) if row in gpus} if gpus else {}
        return _Deltas(self._totals[:, rows], at)


_Outcomes = dict[int, tuple[NodeInfo, int, str, "Candidate | Status"]]
"""Row -> (its NodeInfo, generation, node name, the dry run's outcome there)."""


class _OutcomeCache:
    """Per kind of pod, the dry run's outcome for each row (`_DryRun.outcomes`), for one node
    table: a preemption changes one node, so the next pod of the same kind, examining mostly the
    same nodes, reuses what the last dry run found on the others. A kind is what the outcome
    depends on besides the row: the pod as Filter plugins see it (`pod_class_key`), the table's
    resources and the budgets with their disruptionsAllowed. The few kinds used last are kept."""

    KINDS: ClassVar[int] = 8

    def __init__(self) -> None:
        self._table: weakref.ref[NodeTable] | None = None
        self._kinds: dict[Any, tuple[Sequence[PodDisruptionBudget], _Outcomes]] = {}
        """Kind -> (its budgets, kept alive so that their ids in the kind stay theirs; outcomes)."""

    def rows(
        self, table: NodeTable, pod_key: Any, budgets: Sequence[PodDisruptionBudget], allowed: Sequence[int]
    ) -> _Outcomes:
        """The outcomes kept for the kind on ``table`` (filled in by the dry run)."""
        if self._table is None or self._table() is not table:
            self._table = weakref.ref(table)
            self._kinds = {}
        kind = (pod_key, len(table.resources), tuple(map(id, budgets)), tuple(allowed))
        kept = self._kinds.pop(kind, None)
        if kept is None:
            kept = (budgets, {})
            while len(self._kinds) >= self.KINDS:
                del self._kinds[next(iter(self._kinds))]  # the one used longest ago
        self._kinds[kind] = kept  # last in the order: used now
        return kept[1]


class _Shadow:
    """The table's usage columns (`USAGE_COLUMNS`) as a what-if: a copy that pods are taken off
    and put back on (`change`) without touching the table, for the plugins that read pods only
    through those arrays. Rows it changed stay changed: the dry run examines each row once."""

    def __init__(self, table: NodeTable) -> None:
        self.base = table.view()
        self.host = table.usage_copy()
        self.backend = table.backend
        self._device: dict[str, Any] | None = None
        self._dirty: set[int] = set()
        self._view: TableView | None = None

    def change(self, rows: np.ndarray, deltas: _Deltas, sign: int) -> None:
        """Add (``sign`` 1) or take off (-1) ``deltas``, column k on ``rows[k]`` (distinct rows)."""
        if not len(rows):
            return
        h = self.host
        m = deltas.m if sign > 0 else -deltas.m
        r = len(m) - 2
        h["req"][:, rows] += m[:r]
        h["nz_cpu"][rows] += m[r]
        h["nz_mem"][rows] += m[r + 1]
        for k, entries in deltas.gpus.items():
            row = int(rows[k])
            for device, memory in entries:
                h["gpu_free"][row, device] -= sign * memory
                h["gpu_pods"][row, device] += sign
        if self.backend.on_device:
            self._dirty.update(rows.tolist())
            self._view = None

    def view(self) -> TableView:
        """The table's view with the copy in place of its usage columns."""
        if self._view is not None:
            return self._view
        if not self.backend.on_device:
            self._view = self.base.replacing(dict(self.host))  # the arrays it changes in place
            return self._view
        xp = self.backend.xp
        if self._device is None:
            self._device = {k: xp.asarray(v) for k, v in self.host.items()}
        elif self._dirty:
            rows = np.fromiter(self._dirty, dtype=np.intp, count=len(self._dirty))
            d_rows = xp.asarray(rows)
            for k, v in self.host.items():
                if k == "req":
                    self._device[k][:, d_rows] = xp.asarray(v[:, rows])
                else:
                    self._device[k][d_rows] = xp.asarray(v[rows])
        self._dirty.clear()
        self._view = self.base.replacing(self._device)
        return self._view


def _by_importance(
    spans: dict[int, tuple[int, int]], pods: Sequence[PodInfo]
) -> tuple[dict[int, list[int]], np.ndarray, np.ndarray]:
    """For each run ``pods[start:end]`` of ``spans`` (together, ``pods`` in order): its indices
    most important first (`importance`; equals keep their order), as ``sorted(range(start, end),
    key=...)``; and every pod's priority and `start_time`."""
    if not spans:
        return {}, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    n = len(spans)
    starts = np.fromiter((s for s, _ in spans.values()), dtype=np.intp, count=n)
    lengths = np.fromiter((e - s for s, e in spans.values()), dtype=np.intp, count=n)
    ends = np.cumsum(lengths)
    run = np.repeat(np.arange(n), lengths)
    at = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
    chosen = [pods[j] for j in at.tolist()]
    priority = np.fromiter((p.pod.spec.priority for p in chosen), dtype=np.int64, count=len(chosen))
    started = np.fromiter((p.start_time for p in chosen), dtype=np.float64, count=len(chosen))
    started = np.where(started > 0, started, np.inf)  # `start_time`
    ordered = at[np.lexsort((at, started, -priority, run))].tolist()
    bounds = ends.tolist()
    runs = {i: ordered[b - e : b] for i, e, b in zip(spans, lengths.tolist(), bounds, strict=True)}
    return runs, priority, started


def _plan_scores(plans: Sequence[_Plan]) -> Iterator[tuple[int, int, int, int, float]]:
    """`_pick_scores` of the candidate each plan (with victims) makes, in order, worked out for
    all of them at once: reductions over their victims' priorities and start times side by side."""
    if not plans:
        return iter(())
    counts = np.fromiter((len(p.victims) for p in plans), dtype=np.intp, count=len(plans))
    sizes = np.fromiter((len(p.found.pods) for p in plans), dtype=np.intp, count=len(plans))
    at = np.fromiter(itertools.chain.from_iterable(p.victims for p in plans), dtype=np.intp, count=int(counts.sum()))
    at += np.repeat(np.cumsum(sizes) - sizes, counts)
    priority = np.concatenate([p.found.priorities for p in plans])[at]
    started = np.concatenate([p.found.starts for p in plans])[at]
    first = np.cumsum(counts) - counts
    top = np.maximum.reduceat(priority, first)
    total = np.add.reduceat(priority, first)
    earliest = np.minimum.reduceat(np.where(priority == np.repeat(top, counts), started, np.inf), first)
    return (
        (-p.violations, -t, -(s + _PRIORITY_OFFSET * n), -n, e)
        for p, t, s, n, e in zip(plans, top.tolist(), total.tolist(), counts.tolist(), earliest.tolist(), strict=True)
    )


def _split_by_pdb_violation(
    order: Iterable[int], pods: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget], allowed: Sequence[int]
) -> tuple[list[int], list[int]]:
    """`split_by_pdb_violation` of ``pods[j] for j in order``, as indices."""
    if not pdbs:
        return [], list(order)
    left = list(allowed)
    violating: list[int] = []
    others: list[int] = []
    for j in order:
        pod = pods[j].pod
        violated = False
        for i, pdb in enumerate(pdbs):
            if preemption_selects(pdb, pod):
                left[i] -= 1
                violated = violated or left[i] < 0
        (violating if violated else others).append(j)
    return violating, others


def _chunk_size(
    num_candidates: int, examined: int, found: int, kept: int, last: int, dry: bool, rate: float = 1.0
) -> int:
    """How many more nodes to dry-run at once: at first, as many as numCandidates need at
    ``rate`` (nodes examined per candidate found, the last dry run's), at least numCandidates;
    twice the last chunk when it found no candidate (``dry``); else as many as the candidates
    still wanted need at the rate candidates were found so far, a little over. Only the cost
    depends on it, never the result: the dry run stops at the same node whatever the chunks."""
    if examined == 0:
        return max(num_candidates, math.ceil(num_candidates * rate), 1)
    if dry or found == 0:
        return 2 * last
    wanted = max(num_candidates - kept, 1)
    return max(math.ceil(wanted * examined / found * 1.25), 4)


def _potential_rows(table: NodeTable, diagnosis: FilterDiagnosis) -> np.ndarray:
    """The rows where preemption might help, ascending (kube's nodesWherePreemptionMightHelp)."""
    if diagnosis.resolvable is None:
        return np.empty(0, dtype=np.intp)
    resolvable = np.asarray(diagnosis.resolvable, dtype=bool)
    return np.flatnonzero(resolvable[: table.rows]).astype(np.intp)


def _status_of(plugin: str, rejections: Iterable[Any]) -> Status:
    """A node's Status from the rejections of one plugin that masked it: its reasons, and the
    gravest code (an Error reads as kube's RunFilterPlugins words it)."""
    hits = list(rejections)
    reasons = tuple(r.reason for r in hits)
    codes = {r.code for r in hits}
    if Code.ERROR in codes:
        return Status(Code.ERROR, (f'running "{plugin}" filter plugin: {", ".join(reasons)}',), plugin)
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if Code.UNSCHEDULABLE_AND_UNRESOLVABLE in codes else Code.UNSCHEDULABLE
    return Status(code, reasons, plugin)


def _rejection_status(plugin: str, res: FilterResult, j: int, to_host: Any) -> Status:
    return _status_of(plugin, [rej for rej in res.rejections if to_host(rej.mask)[j]])


def _extension_error(operation: str, status: Status) -> Status:
    """kube's words for a PreFilterExtensions failure."""
    return Status(
        Code.ERROR, (f'running {operation} on PreFilter plugin "{status.plugin}": {status.message()}',), status.plugin
    )


def _aggregate(messages: Sequence[str]) -> str:
    """Go's utilerrors.NewAggregate(errs).Error(): one message as is, several (duplicates once)
    as "[a, b]"."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
