"""A plain reference scheduler: kube-scheduler's scheduling cycle, one node at a time.

It follows pkg/scheduler/schedule_one.go (schedulePod, findNodesThatFitPod,
findNodesThatPassFilters, numFeasibleNodesToFind, prioritizeNodes) and the framework's
RunPreFilterPlugins / RunFilterPlugins / RunPreScorePlugins / RunScorePlugins, sequentially:

- PreFilter: plugins run in order; Skip removes the plugin's Filter for this pod; node-name
  results are intersected (empty: UnschedulableAndUnresolvable "node(s) didn't satisfy
  plugin(s) [..] simultaneously", or "node(s) didn't satisfy plugin X" for one plugin);
  UnschedulableAndUnresolvable stops at once, Unschedulable is remembered (the last one wins)
  while the remaining plugins still run; any other failure is an error.
- Filter: nodes are examined from `next_start_node_index` on (modulo the number of candidate
  nodes), each running the filters in order up to the first rejection, until
  numFeasibleNodesToFind feasible nodes are found (1 when no score plugin is configured);
  afterwards next_start_node_index = (next_start_node_index + examined) % len(all nodes).
- One feasible node is chosen without scoring. Otherwise PreScore (on the feasible nodes),
  Score, NormalizeScore (each normalized score must lie in 0..100), times the weight, summed;
  the highest total wins, ties going to the smallest `kubus.kernels.tiebreak` key (kube picks
  at random among them).
- Reserve runs on the chosen node; a rejection undoes every reserve plugin (Unreserve, in
  reverse order) and fails the pod as kube does ("0/1 nodes are available: ...").

Where kube is non-deterministic, this scheduler is not: nodes are examined one by one in the
order given (kube's parallel filter may find a different sample), PreFilter-narrowed nodes keep
that order (kube iterates a Go map), ties go to the tie key. kube's nominated-node and
extender paths, PostFilter (preemption) and Permit are not modelled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kubus.api.objects import Pod
from kubus.api.workloads import NO_WORKLOADS, Workloads
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.nodewise import (
    FilterPlugin,
    NormalizeScorePlugin,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.kernels.tiebreak import node_tie_hash, pod_tie_hash, tie_key
from kubus_reference._normalize import MIN_NODE_SCORE
from kubus_reference.pod_topology_spread import WORKLOADS_STATE_KEY

NO_NODE_AVAILABLE_MSG = "0/{} nodes are available"
ERR_NO_NODES_AVAILABLE = "no nodes available to schedule pods"
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """numFeasibleNodesToFind: every node below 100 nodes; else the percentage (0 or None:
    kube's adaptive 50 - nodes/125, at least 5) of the nodes, at least 100."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage or 0
    if pct == 0:
        pct = 50 - num_all_nodes // 125
        pct = max(pct, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * pct // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


def go_list(items: Sequence[str]) -> str:
    """Go's %v of a []string: [a b c]."""
    return "[" + " ".join(items) + "]"


def fit_error_message(
    num_all_nodes: int,
    statuses: Mapping[str, Status],
    absent: Status | None = None,
    pre_filter_msg: str = "",
) -> str:
    """framework.FitError.Error(): "0/N nodes are available: <PreFilter message>." or
    "0/N nodes are available: <count> <reason>, ...." with "<count> <reason>" strings sorted as
    strings; every reason of every rejected node counts once, and the nodes without a status of
    their own (left out by PreFilter) count `absent`'s reasons."""
    msg = NO_NODE_AVAILABLE_MSG.format(num_all_nodes) + ":"
    if pre_filter_msg:
        return msg + f" {pre_filter_msg}."
    reasons = reason_histogram(num_all_nodes, statuses, absent)
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if parts:
        msg += " " + ", ".join(parts) + "."
    return msg


def reason_histogram(
    num_all_nodes: int, statuses: Mapping[str, Status], absent: Status | None = None
) -> dict[str, int]:
    reasons: Counter[str] = Counter()
    for status in statuses.values():
        for reason in status.reasons:
            reasons[reason] += 1
    if absent is not None and len(statuses) < num_all_nodes:
        for reason in absent.reasons:
            reasons[reason] += num_all_nodes - len(statuses)
    return dict(reasons)


def plugin_reason(status: Status) -> str:
    """How a node's rejection reads in `filter_reasons`: "<Plugin>: reason, reason"."""
    text = status.message()
    return f"{status.plugin}: {text}" if status.plugin else text


class PluginScore(NamedTuple):
    raw: int
    normalized: int
    weighted: int


@dataclass(frozen=True, slots=True)
class ReferenceProfile:
    """The plugins of one profile, in the order they run at each extension point."""

    pre_filter: Sequence[PreFilterPlugin] = ()
    filter: Sequence[FilterPlugin] = ()
    pre_score: Sequence[PreScorePlugin] = ()
    score: Sequence[tuple[ScorePlugin, int]] = ()
    """(plugin, weight) pairs."""
    reserve: Sequence[ReservePlugin] = ()
    percentage_of_nodes_to_score: int | None = None
    """None: the scheduler's global value (itself None: kube's adaptive percentage)."""

    @classmethod
    def of(
        cls,
        plugins: Sequence[Plugin],
        weights: Mapping[str, int] | None = None,
        percentage_of_nodes_to_score: int | None = None,
    ) -> ReferenceProfile:
        """Every plugin at every extension point it implements, in the order given; score
        weights by plugin name (default 1)."""
        weights = weights or {}

        return cls(
            pre_filter=[p for p in plugins if isinstance(p, PreFilterPlugin)],
            filter=[p for p in plugins if isinstance(p, FilterPlugin)],
            pre_score=[p for p in plugins if isinstance(p, PreScorePlugin)],
            score=[(p, weights.get(p.name, 1)) for p in plugins if isinstance(p, ScorePlugin)],
            reserve=[p for p in plugins if isinstance(p, ReservePlugin)],
            percentage_of_nodes_to_score=percentage_of_nodes_to_score,
        )


@dataclass(frozen=True, slots=True)
class ReferenceResult:
    pod: Pod
    node: str | None
    """The chosen node; None when the pod was not scheduled."""
    status: Status
    """Success; Unschedulable for a FitError (the Reserve plugin's code when Reserve rejected);
    UnschedulableAndUnresolvable when there are no nodes; or Error. `plugin` names the PreFilter
    or Reserve plugin that rejected the pod, if one did."""
    message: str = ""
    """kube's FitError text ("0/N nodes are available: ..."), or the error's."""
    filter_reasons: dict[str, str] = field(default_factory=dict)
    """Node -> "<Plugin>: <reason>, ..." for every node examined and rejected (or left out by
    PreFilter)."""
    scores: dict[str, dict[str, PluginScore]] = field(default_factory=dict)
    """Node -> plugin -> (raw, normalized, weighted), for the scored nodes."""
    total: dict[str, int] = field(default_factory=dict)
    """Node -> sum of the weighted scores, for the scored nodes."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Reason -> number of nodes rejected for it (the histogram behind `message`)."""
    feasible: tuple[str, ...] = ()
    """The feasible nodes found, in the order they were examined."""
    evaluated: int = 0
    """Nodes examined (feasible + rejected), kube's ScheduleResult.EvaluatedNodes."""
    gpu_devices: tuple[int, ...] = ()


class ReferenceScheduler:
    """Schedules pods one at a time over a list of NodeInfos. Not thread-safe."""

    def __init__(
        self,
        profile: ReferenceProfile,
        seed: int = 0,
        percentage_of_nodes_to_score: int | None = None,
        *,
        workloads: Workloads = NO_WORKLOADS,
    ) -> None:
        self.profile = profile
        self.seed = seed
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        """The global percentageOfNodesToScore; the profile's own value wins over it."""
        self.workloads = workloads
        """The cluster's Services and workload controllers (default topology spreading's), left
        in each cycle state under WORKLOADS_STATE_KEY when there are any."""
        self.next_start_node_index = 0

    # ---- public ------------------------------------------------------------------------------

    def schedule_all(self, pods: Sequence[Pod], node_infos: Sequence[NodeInfo]) -> list[ReferenceResult]:
        """Schedule pods in order, adding each placed pod (with its GPU devices) to its
        NodeInfo so the pods after it see it. Mutates `node_infos`."""
        by_name = {info.name: info for info in node_infos}
        results = []
        for pod in pods:
            result = self.schedule(pod, node_infos)
            if result.node is not None:
                by_name[result.node].add_pod(PodInfo.of(pod, result.gpu_devices))
            results.append(result)
        return results

    def schedule(self, pod: Pod, node_infos: Sequence[NodeInfo]) -> ReferenceResult:
        """One scheduling cycle (schedulePod + Reserve). Does not add the pod to its node."""
        n_all = len(node_infos)
        if n_all == 0:
            status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_NODES_AVAILABLE,))
            return ReferenceResult(pod, None, status, ERR_NO_NODES_AVAILABLE)
        state = CycleState()
        state.write(SNAPSHOT_STATE_KEY, node_infos)
        if self.workloads:
            state.write(WORKLOADS_STATE_KEY, self.workloads)

        allowed, status, narrowing = self._run_pre_filter(state, pod, node_infos)
        if not status.is_success:
            if not status.is_rejected:
                return ReferenceResult(pod, None, status, status.message())
            # every node gets the PreFilter status; the message names it once. Like any
            # FitError, the pod's status is Unschedulable (the per-node statuses keep the code)
            message = fit_error_message(n_all, {}, status, status.message())
            return ReferenceResult(
                pod,
                None,
                Status(Code.UNSCHEDULABLE, (message,), status.plugin),
                message,
                filter_reasons={info.name: plugin_reason(status) for info in node_infos},
                reasons=reason_histogram(n_all, {}, status),
            )

        absent: Status | None = None
        nodes: Sequence[NodeInfo] = node_infos
        filter_reasons: dict[str, str] = {}
        if allowed is not None:
            nodes = [info for info in node_infos if info.name in allowed]
            absent = Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                (f"node(s) didn't satisfy plugin(s) {go_list(sorted(narrowing))}",),
                ", ".join(sorted(narrowing)),
            )
            filter_reasons = {i.name: plugin_reason(absent) for i in node_infos if i.name not in allowed}

        feasible, statuses, error = self._find_nodes_that_pass_filters(state, pod, nodes)
        self.next_start_node_index = (self.next_start_node_index + len(feasible) + len(statuses)) % n_all
        filter_reasons.update((name, plugin_reason(s)) for name, s in statuses.items())
        evaluated = len(feasible) + len(statuses)
        names = tuple(info.name for info in feasible)
        if error is not None:
            return ReferenceResult(pod, None, error, error.message(), filter_reasons, evaluated=evaluated)
        if not feasible:
            message = fit_error_message(n_all, statuses, absent)
            return ReferenceResult(
                pod,
                None,
                Status(Code.UNSCHEDULABLE, (message,)),
                message,
                filter_reasons,
                reasons=reason_histogram(n_all, statuses, absent),
                evaluated=evaluated,
            )

        scores: dict[str, dict[str, PluginScore]] = {}
        total: dict[str, int] = {}
        if len(feasible) == 1:
            chosen = feasible[0]
        else:
            error = self._prioritize(state, pod, feasible, scores, total)
            if error is not None:
                return ReferenceResult(
                    pod,
                    None,
                    error,
                    error.message(),
                    filter_reasons,
                    scores,
                    total,
                    feasible=names,
                    evaluated=evaluated,
                )
            chosen = self._select_host(pod, feasible, total)

        status = self._reserve(state, pod, chosen)
        if not status.is_success:
            if status.is_rejected:
                message = fit_error_message(1, {chosen.name: status})
                status = Status(status.code, (message,), status.plugin)
            return ReferenceResult(
                pod,
                None,
                status,
                status.message(),
                filter_reasons,
                scores,
                total,
                feasible=names,
                evaluated=evaluated,
            )
        return ReferenceResult(
            pod,
            chosen.name,
            Status.success(),
            "",
            filter_reasons,
            scores,
            total,
            feasible=names,
            evaluated=evaluated,
            gpu_devices=tuple(state.get(GPU_DEVICES_STATE_KEY, ())),
        )

    # ---- the cycle, step by step ---------------------------------------------------------------

    def _run_pre_filter(
        self, state: CycleState, pod: Pod, node_infos: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status, list[str]]:
        allowed: frozenset[str] | None = None
        narrowing: list[str] = []
        rejected = Status.success()
        for plugin in self.profile.pre_filter:
            names, status = plugin.pre_filter(state, pod, node_infos)
            if status.is_skip:
                state.skip_filter_plugins.add(plugin.name)
                continue
            if not status.is_success:
                status = status.with_plugin(plugin.name)
                if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    return None, status, []
                if status.code is Code.UNSCHEDULABLE:
                    # preemption may still help: the remaining PreFilter plugins run
                    rejected = status
                    continue
                error = f'running PreFilter plugin "{plugin.name}": {status.message()}'
                return None, Status(Code.ERROR, (error,), plugin.name), []
            if names is not None:
                narrowing.append(plugin.name)
                allowed = frozenset(names) if allowed is None else allowed & names
                if not allowed:
                    plugins = sorted(set(narrowing))
                    msg = (
                        f"node(s) didn't satisfy plugin {plugins[0]}"
                        if len(plugins) == 1
                        else f"node(s) didn't satisfy plugin(s) {go_list(plugins)} simultaneously"
                    )
                    return allowed, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,)), narrowing
        return allowed, rejected, narrowing

    def _run_filter_plugins(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        for plugin in self.profile.filter:
            if plugin.name in state.skip_filter_plugins:
                continue
            status: Status = plugin.filter(state, pod, node_info)
            if not status.is_success:
                if not status.is_rejected:
                    error = f'running "{plugin.name}" filter plugin: {status.message()}'
                    status = Status(Code.ERROR, (error,))
                return status.with_plugin(plugin.name)
        return Status.success()

    def _find_nodes_that_pass_filters(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[list[NodeInfo], dict[str, Status], Status | None]:
        n = len(nodes)
        pct = self.profile.percentage_of_nodes_to_score
        if pct is None:
            pct = self.percentage_of_nodes_to_score
        want = num_feasible_nodes_to_find(pct, n)
        if not self.profile.score:
            want = 1 if n else 0
        start = self.next_start_node_index
        if not self.profile.filter:
            return [nodes[(start + i) % n] for i in range(want)], {}, None
        feasible: list[NodeInfo] = []
        statuses: dict[str, Status] = {}
        for i in range(n):
            if len(feasible) >= want:
                break
            info = nodes[(start + i) % n]
            status = self._run_filter_plugins(state, pod, info)
            if status.code is Code.ERROR:
                return feasible, statuses, status
            if status.is_success:
                feasible.append(info)
            else:
                statuses[info.name] = status
        return feasible, statuses, None

    def _prioritize(
        self,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        scores: dict[str, dict[str, PluginScore]],
        total: dict[str, int],
    ) -> Status | None:
        """Fill `scores` and `total`; the error status when a plugin fails."""
        if not self.profile.score:
            total.update((info.name, 1) for info in nodes)
            return None
        for pre in self.profile.pre_score:
            status = pre.pre_score(state, pod, nodes)
            if status.is_skip:
                state.skip_score_plugins.add(pre.name)
            elif not status.is_success:
                error = f'running PreScore plugin "{pre.name}": {status.message()}'
                return Status(Code.ERROR, (error,), pre.name)
        for info in nodes:
            scores[info.name] = {}
            total[info.name] = 0
        for plugin, weight in self.profile.score:
            if plugin.name in state.skip_score_plugins:
                continue
            raw = {info.name: int(plugin.score(state, pod, info)) for info in nodes}
            normalized = dict(raw)
            if isinstance(plugin, NormalizeScorePlugin):
                plugin.normalize_score(state, pod, normalized)
            for name, score in normalized.items():
                if not MIN_NODE_SCORE <= score <= MAX_NODE_SCORE:
                    error = (
                        f'plugin "{plugin.name}" returns an invalid score {score}, it should in '
                        f"the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
                    )
                    return Status(Code.ERROR, (error,), plugin.name)
                scores[name][plugin.name] = PluginScore(raw[name], score, score * weight)
                total[name] += score * weight
        return None

    def _select_host(self, pod: Pod, nodes: Sequence[NodeInfo], total: Mapping[str, int]) -> NodeInfo:
        pod_hash = pod_tie_hash(self.seed, pod.metadata.uid or pod.key)
        return max(
            nodes,
            key=lambda info: (
                total[info.name],
                -tie_key(pod_hash, node_tie_hash(self.seed, info.name)),
            ),
        )

    def _reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        for plugin in self.profile.reserve:
            status: Status = plugin.reserve(state, pod, node_info)
            if not status.is_success:
                for undo in reversed(self.profile.reserve):
                    unreserve = getattr(undo, "unreserve", None)
                    if callable(unreserve):
                        unreserve(state, pod, node_info)
                return status.with_plugin(plugin.name)
        return Status.success()
