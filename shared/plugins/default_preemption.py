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
of the table's usage arrays only (`Shadow`; the table is not touched): when every one that
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
(`OutcomeCache`; a run of identical preemptors, as PreemptionBasic, redoes one node per pod).
The tests hold the result to a plain per-node implementation
(`kubus_reference.default_preemption`), the two ways of taking pods off to each other, and what
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

import math
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.objects import Pod, PreemptionPolicy
from kubus.framework.config.args import DefaultPreemptionArgs
from kubus.framework.cycle_state import CycleState
from kubus.framework.diagnosis import fit_error_message
from kubus.framework.interface import FilterDiagnosis, PostFilterResult
from kubus.framework.pod_classes import pod_class_key
from kubus.framework.runtime import Framework
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable
from kubus.plugins._preemption_budgets import preemption_selects, split_by_pdb_violation, table_disruptions_allowed
from kubus.plugins._preemption_candidates import (
    Candidate,
    DryRunResult,
    calculate_num_candidates,
    earliest_victim_start_time,
    importance,
    pick_one_node_for_preemption,
    preemption_offset,
    start_time,
)
from kubus.plugins._preemption_dry_run import ERR_NO_VICTIMS, DryRun, OutcomeCache
from kubus.plugins._preemption_victims import VictimCache

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

ERR_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_PREEMPT_NEVER = "not eligible due to preemptionPolicy=Never."


# ---- the plugin -------------------------------------------------------------------------------


class DefaultPreemption:
    name: ClassVar[str] = "DefaultPreemption"

    def __init__(self, args: DefaultPreemptionArgs | None = None, handle: object = None) -> None:
        """``args``: a DefaultPreemptionArgs (None: kube's defaults). Raises FieldError for args
        kube's validation refuses."""
        self.args = args if args is not None else DefaultPreemptionArgs()
        self.args.validate()
        self._victims = VictimCache()
        self._outcomes = OutcomeCache()
        self._rate = 1.0
        """Nodes examined per candidate found in the last dry run: how many the next examines at
        first (`_chunk_size`)."""
        self.shadow_dry_run = True
        """Take potential victims off a what-if copy of the table's usage arrays when the Filter
        plugins that run allow it (`DryRun`); False: always off the node table itself (the
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
        framework: Framework,
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
        run = DryRun(framework, table, state, pod, budgets, allowed, shadow=self.shadow_dry_run, victims=self._victims)
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


def _aggregate(messages: Sequence[str]) -> str:
    """Go's utilerrors.NewAggregate(errs).Error(): one message as is, several (duplicates once)
    as "[a, b]"."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
