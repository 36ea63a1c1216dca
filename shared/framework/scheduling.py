"""The scheduling algorithm: kube-scheduler's schedulePod, over the node table, for a batch of pods.

For each pod, in order: PreFilter → Filter → (sample percentageOfNodesToScore) → PreScore →
Score → NormalizeScore → weights → select host → Reserve, then the pod is assumed on its node
so the next pod sees it. Filter and Score are evaluated for a whole batch in one pass: pods with
identical scheduling inputs share one evaluation (a "pod class"), and after each placement only
the touched node's row is recomputed, and only for placement-sensitive plugins. A class outlives
its batch while nothing but the Scheduler changed the table and its plugins read nothing else
(`reads_table_only`). The result is exactly what scheduling the pods one by one gives (the tests
hold it to that).

Differences from kube-scheduler, on purpose: nodes are visited in table row order (kube's order
is its snapshot's, and its parallel filter makes the sampled set racy); ties among the best
nodes go to the smallest seeded tie key (`kubus.kernels.tiebreak`) instead of a random pick.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.api.workloads import Workloads
from kubus.framework.config import num_feasible_nodes_to_find
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.interface import (
    ALL_ROWS,
    FilterDiagnosis,
    FilterResult,
    has_pre_filter_extensions,
    is_cluster_scoped,
    is_placement_sensitive,
    needs_feasible_nodes,
    reads_table_only,
)
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.status import Code, Status
from kubus.framework.waiting import WaitingPods
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.kernels.tiebreak import pod_tie_hash, tie_keys

NO_NODE_AVAILABLE = "0/{} nodes are available"
NO_NODES_IN_CLUSTER = "no nodes available to schedule pods"


@dataclass(frozen=True, slots=True)
class ScoreDetail:
    raw: int
    normalized: int
    weighted: int


@dataclass(frozen=True, slots=True)
class NodeExplain:
    """Why one node was or was not chosen for one pod."""

    filter: str
    """"ok", or "<Plugin>: <reason>[, <reason>]" from the first plugin that rejected the node."""
    scores: dict[str, ScoreDetail] = field(default_factory=dict)
    total: int | None = None
    """None when the node was not scored (rejected, not sampled, or the only feasible node)."""


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    pod: Pod
    node: str | None
    """The chosen node; None when the pod is unschedulable."""
    status: Status
    message: str = ""
    """kube's FitError text for an unschedulable pod: "0/N nodes are available: ..."."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Reason -> number of nodes rejected for it (the histogram behind `message`)."""
    gpu_devices: tuple[int, ...] = ()
    explain: dict[str, NodeExplain] | None = None
    plugins: tuple[str, ...] = ()
    """The plugins that rejected the pod (sorted): the filter plugins that rejected some node, the
    PreFilter plugin that rejected it, or the Reserve or Permit plugin that failed; empty when
    placed (and for an empty cluster). The queue's QueueingHints key on them."""
    state: CycleState | None = None
    """Placed: the pod's CycleState after Reserve, for what runs next (Permit, Unreserve)."""
    nominated_node: str = ""
    """The node a PostFilter plugin nominated (preemption), if any."""
    preempted: tuple[PodInfo, ...] = ()
    """Placed by preemption: the pods evicted from `node` to make room (already forgotten in
    the table). The cycle evicts them and reserves for the pod in one store step."""
    waiting_on: Mapping[str, float] = field(default_factory=dict)
    """Placed, with ``run_permit``: the Permit plugins it waits on, with their timeouts."""
    pod_info: PodInfo | None = None
    """Placed: the PodInfo the table accounts on `node` (what a reservation of it holds)."""

    @property
    def scheduled(self) -> bool:
        return self.node is not None


@dataclass(slots=True)
class _ScoreTerm:
    plugin: Any
    weight: int
    normalizes: bool
    sensitive: bool
    raw: Any = None
    """int64 raw scores for every row (None for a `per_decision` term)."""
    cluster: bool = False
    """Cluster-scoped (`ClusterScopedPlugin`): recomputed over every row when a placement affects it."""
    active: bool = True
    """False while its PreScore said Skip (a cluster-scoped term is kept, to be asked again)."""
    per_decision: bool = False
    """Its PreScore reads the feasible nodes (`FeasibleNodesPreScorePlugin`): PreScore and Score
    run at every decision over the rows being scored."""


@dataclass(slots=True)
class _PodClass:
    """Pods whose scheduling inputs are identical share one evaluation."""

    pod: Pod
    state: CycleState
    status: Status
    """Non-success when PreFilter or PreScore rejected or failed the class."""
    candidates: Any = None
    """bool per row: a node, and allowed by PreFilter results."""
    static_pass: Any = None
    """bool per row: passes every filter plugin whose answer placements cannot change."""
    sensitive_pass: Any = None
    """bool per row: passes every placement-sensitive (row-local) filter plugin."""
    cluster_pass: dict[str, Any] = field(default_factory=dict)
    """Cluster-scoped filter plugin -> bool per row (all True while its PreFilter skips)."""
    feasible: Any = None
    sensitive_filters: tuple[Any, ...] = ()
    cluster_plugins: tuple[Any, ...] = ()
    """The profile's cluster-scoped Filter/Score plugins: asked after every placement."""
    stale: set[str] = field(default_factory=set)
    """Cluster-scoped plugins a placement affected: rerun over every row before deciding."""
    placed: list[tuple[PodInfo, int]] = field(default_factory=list)
    """The pods placed (and rows) since this class last decided, for the PreFilter plugins with
    AddPod: their state moves by these pods instead of being made again over the whole table."""
    evicted: bool = False
    """Pods were evicted since this class last decided: every stale PreFilter runs again."""
    terms: list[_ScoreTerm] = field(default_factory=list)
    base: Any = None
    """Sum of weighted scores of plugins without NormalizeScore (they need no renormalizing)."""
    narrowed_by: tuple[str, ...] = ()
    """PreFilter plugins that limited the pod to some nodes (sorted)."""
    scored: bool = False
    dirty: list[int] = field(default_factory=list)
    """Rows placements touched since this class last decided: stale until `_refresh_rows`."""
    diagnosis: tuple[int, str, dict[str, int], tuple[str, ...]] | None = None
    """(table.version, message, reasons, plugins) of the last failure, reused until the table changes."""
    seen: int = 0
    """How many of the scheduler's placements (`Scheduler._placements`, counted from the first
    kept) this class has taken into `dirty`, `placed`, `evicted` and `stale`."""
    last_call: int = 0
    """The `Scheduler.schedule` call that last used this class (`KEEP_UNUSED_CALLS`)."""
    affected_by: dict[Any, frozenset[str]] = field(default_factory=dict)
    """A placed pod's class key -> the `cluster_plugins` whose `placement_affects` said True for
    it: pods of one class get the same answers, and a batch places many pods of few classes."""
    pod_info: PodInfo | None = None
    """The class's pod's PodInfo, once a pod of the class was placed: the others' are made from it."""
    key: Any = None
    """The class's key (`pod_class_key`): this one object in every placement of its pods, so
    that sets and dicts of placements' keys compare them by identity, not character by character."""


@dataclass(slots=True)
class _Placements:
    """The placements a Scheduler made while its classes are kept, counted from `base` (the
    first one kept), as parallel lists that a class takes in by slices."""

    base: int = 0
    rows: list[int] = field(default_factory=list)
    pairs: list[tuple[PodInfo, int]] = field(default_factory=list)
    """(pod, row) of each placement."""
    keys: list[Any] = field(default_factory=list)
    """The placed pod's class key (`pod_class_key`) of each placement."""
    evictions: list[int] = field(default_factory=list)
    """Ascending indices (counted as `base` is) of the placements that evicted pods."""

    @property
    def end(self) -> int:
        return self.base + len(self.rows)

    def add(self, placed: PodInfo, row: int, evicted: bool, key: Any) -> None:
        if evicted:
            self.evictions.append(self.end)
        self.rows.append(row)
        self.pairs.append((placed, row))
        self.keys.append(key)

    def drop_before(self, oldest: int) -> None:
        """Forget the placements before index ``oldest`` (every kept class has taken them in)."""
        n = oldest - self.base
        del self.rows[:n], self.pairs[:n], self.keys[:n]
        self.evictions = [i for i in self.evictions if i >= oldest]
        self.base = oldest


PointTimer = Callable[[ExtensionPoint, str, float], None]
"""``timer(extension point, plugin or "" for the whole point, seconds)``."""

PLUGIN_SAMPLE = 10
"""One pod class in this many has its plugins timed one by one (kube samples 10%)."""

KEEP_UNUSED_CALLS = 4
"""A kept class is dropped after this many `Scheduler.schedule` calls that did not use it: a
cycle's second call for a batch's refused pods uses few classes, and dropping the others there
made the next batch evaluate them again over the whole table; a class not seen for a while
stops holding placements it has yet to take in."""


class Scheduler:
    """Schedules pods of one profile onto a node table, assuming each placement into it.

    Not thread-safe: one scheduling loop owns a Scheduler and its table, as in kube-scheduler.
    """

    def __init__(
        self,
        framework: Framework,
        table: NodeTable,
        *,
        seed: int = 0,
        run_permit: bool = False,
        waiting: WaitingPods | None = None,
        timer: PointTimer | None = None,
    ) -> None:
        self.framework = framework
        self.table = table
        self.seed = seed
        self.run_permit = run_permit
        """Run Permit right after Reserve (`kubus simulate`, where no store reservation comes
        in between); the cycle service runs it itself once Redis holds the reservation."""
        self.waiting = waiting
        """With ``run_permit``: the handle the framework's plugins see waiting pods through; a
        pod that starts waiting is added to it at once, so the next pod's Permit sees it."""
        self.timer = timer
        """Told how long each extension point took (plugin ""), and each plugin of one pod class
        in `PLUGIN_SAMPLE` (as kube samples its plugin metrics): the services' metrics."""
        self._evaluations = 0
        self.next_start_node_index = 0
        self._classes: dict[Any, _PodClass] = {}
        """The pod classes evaluated so far, while they stay in step with the table."""
        self._calls = 0
        """`schedule` calls so far."""
        self._placements = _Placements()
        """The placements made while the classes are kept: a class takes in those after its
        `seen` when it next decides."""
        self._table_version = -1
        """The table's version when the last batch ended: the classes are kept only if nothing
        but the pods its journal lists changed it since."""
        self._nodes_version = -1
        self._resources = -1
        self._namespaces: dict[str, dict[str, str]] | None = None
        self._workloads: Workloads | None = None
        self._keep_classes = all(
            reads_table_only(p)
            for p in (*framework.pre_filter, *framework.filter, *framework.pre_score, *(p for p, _ in framework.score))
        )
        """Every plugin a class's evaluation runs reads only the table: classes outlive a batch."""

    # ---- public ------------------------------------------------------------------------------

    def schedule(self, pods: Sequence[Pod], *, explain: bool = False) -> list[ScheduleResult]:
        """Schedule `pods` in order, each seeing the placements of the ones before it.

        Placed pods are assumed into the table (call `table.forget` to undo one). With
        `explain`, every result carries per-node filter and score detail.
        """
        classes = self._classes_in_step()
        self._table_version = -1  # until this batch ends well: a half-done batch keeps nothing
        self._calls += 1
        results = []
        for pod in pods:
            key = pod_class_key(pod)
            cls = classes.get(key)
            if cls is None:
                cls = classes[key] = self._evaluate(pod)
                cls.seen, cls.key = self._placements.end, key
            else:
                self._take_in_placements(cls)
                if cls.dirty or cls.stale:
                    self._refresh_rows(cls)
            cls.last_call = self._calls
            result = self._decide(cls, pod, explain)
            results.append(result)
            if result.node is not None:
                row = self.table.row_of[result.node]
                placed = result.pod_info or self.table.node_info(row).pods[pod.key]
                self._placements.add(placed, row, bool(result.preempted), cls.key)
        self._keep()
        return results

    def _classes_in_step(self) -> dict[Any, _PodClass]:
        """The classes kept from the last batch, brought in step with the pods assumed and
        forgotten in the table since (events, a resync, a reservation given back: its journal),
        taken in as placements are, a forgotten pod as an eviction (any count may drop). None
        are kept when anything else changed (a node, a resource, the namespaces or workloads, a change the
        journal missed) or the profile's plugins read more than the table."""
        table = self.table
        journal, table.journal = table.journal, ([] if self._keep_classes else None)
        if not (
            self._keep_classes
            and journal is not None
            and _unbroken(journal, self._table_version, table.version)
            and table.nodes_version == self._nodes_version
            and len(table.resources) == self._resources
            and table.namespaces == self._namespaces
            and table.workloads == self._workloads
        ):
            self._classes, self._placements = {}, _Placements()
        elif self._classes:
            for pod_info, row, forgotten, _ in journal:
                self._placements.add(pod_info, row, forgotten, pod_class_key(pod_info.pod))
        return self._classes

    def _keep(self) -> None:
        """End of a batch: keep the classes used lately (and the placements they have not taken in)."""
        if not self._keep_classes:
            self._classes, self._placements = {}, _Placements()
            return
        oldest = self._calls - KEEP_UNUSED_CALLS
        self._classes = {k: c for k, c in self._classes.items() if c.last_call > oldest}
        self._placements.drop_before(min((c.seen for c in self._classes.values()), default=self._placements.end))
        table = self.table
        table.journal = [] if table.journal is not None else None  # this batch's own are in `_placements`
        self._table_version, self._nodes_version = table.version, table.nodes_version
        self._resources = len(table.resources)
        self._namespaces = {name: dict(labels) for name, labels in table.namespaces.items()}
        self._workloads = table.workloads

    def _take_in_placements(self, cls: _PodClass) -> None:
        """The placements made since the class last decided: their rows are stale for it, and a
        cluster-scoped plugin is stale when a placement affects it (any, if pods were evicted)."""
        p = self._placements
        if cls.seen == p.end:
            return
        start = cls.seen - p.base
        cls.dirty += p.rows[start:]
        cls.placed += p.pairs[start:]
        if p.evictions and p.evictions[-1] >= cls.seen:
            cls.evicted = True
            cls.stale.update(plugin.name for plugin in cls.cluster_plugins)  # pods evicted: any count may drop
        elif cls.cluster_plugins:
            keys = p.keys[start:]
            distinct = set(keys)  # a few classes, however many placements
            for key in distinct.difference(cls.affected_by):
                placed = p.pairs[start + keys.index(key)][0]
                cls.affected_by[key] = frozenset(
                    plugin.name
                    for plugin in cls.cluster_plugins
                    if plugin.placement_affects(cls.state, cls.pod, placed)
                )
            cls.stale.update(*map(cls.affected_by.__getitem__, distinct))
        cls.seen = p.end

    def feasible(self, pod: Pod) -> np.ndarray:
        """Host bool per table row: where ``pod`` passes PreFilter and every Filter plugin now,
        over every node (no sampling), without deciding or placing it. What-ifs use it (what
        would make a pod fit, `kubus.framework.hints`); the table is left as it was."""
        cls = self._evaluate(pod)
        if not cls.status.is_success or cls.feasible is None:
            return np.zeros(self.table.rows, dtype=bool)
        return np.asarray(self.table.backend.to_host(cls.feasible), dtype=bool)

    def preemption(self, pod: Pod) -> tuple[str, tuple[PodInfo, ...]] | None:
        """Where the profile's PostFilter (preemption) would place ``pod`` if no node fits it
        now: (node, the pods it would evict); None when a node fits, there is no PostFilter, or
        it finds no node. A dry run: the table is left as it was."""
        cls = self._evaluate(pod)
        if not self.framework.post_filter or (
            cls.status.is_success and cls.feasible is not None and cls.feasible.any()
        ):
            return None
        if cls.status.is_success:
            _, reasons, plugins = self._diagnose(cls, None)
        else:  # PreFilter rejected the pod: every node for its reasons, as `_fail` says
            reasons = {r: len(self.table) for r in cls.status.reasons}
            plugins = (cls.status.plugin,) if cls.status.plugin else ()
        diagnosis = FilterDiagnosis(
            len(self.table),
            dict(reasons),
            frozenset(plugins),
            table=self.table,
            framework=self.framework,
            resolvable=self._resolvable(cls),
        )
        outcome = self.framework.run_post_filter(cls.state.clone(), pod, diagnosis)
        if outcome is None or not outcome.status.is_success or not outcome.nominated_node:
            return None
        return outcome.nominated_node, tuple(outcome.victims)

    # ---- one class: PreFilter, Filter, PreScore, Score over all rows --------------------------

    def _evaluate(self, pod: Pod) -> _PodClass:
        self._evaluations += 1
        timer = self.timer
        sampled = timer is not None and self._evaluations % PLUGIN_SAMPLE == 1
        began = time.perf_counter()
        try:
            return self._evaluate_timed(pod, sampled)
        finally:
            if timer is not None:
                timer(ExtensionPoint.FILTER, "", time.perf_counter() - began)

    def _timed(self, sampled: bool, point: ExtensionPoint, plugin: str, began: float) -> None:
        if sampled and self.timer is not None:
            self.timer(point, plugin, time.perf_counter() - began)

    def _evaluate_timed(self, pod: Pod, sampled: bool) -> _PodClass:
        fw, table = self.framework, self.table
        state = CycleState()
        view = table.view()
        xp = view.xp
        allowed: frozenset[str] | None = None
        narrowing: list[str] = []
        for plugin in fw.pre_filter:
            began = time.perf_counter()
            names, status = plugin.pre_filter(state, pod, table)
            self._timed(sampled, ExtensionPoint.PRE_FILTER, plugin.name, began)
            if status.is_skip:
                state.skip_filter_plugins.add(plugin.name)
                continue
            if not status.is_success:
                return _PodClass(pod, state, status.with_plugin(plugin.name))
            if names is not None:
                narrowing.append(plugin.name)
                allowed = names if allowed is None else allowed & names
                if not allowed:
                    msg = (
                        f"node(s) didn't satisfy plugin {narrowing[0]}"
                        if len(narrowing) == 1
                        else f"node(s) didn't satisfy plugin(s) {_go_list(sorted(narrowing))} simultaneously"
                    )
                    status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))
                    return _PodClass(pod, state, status, narrowed_by=tuple(sorted(narrowing)))
        candidates = view.valid.copy()
        if allowed is not None:
            mask = np.zeros(table.rows, dtype=bool)
            rows = [table.row_of[n] for n in allowed if n in table.row_of]
            mask[rows] = True
            candidates &= table.backend.asarray(mask)
        cls = _PodClass(pod, state, Status.success(), candidates=candidates, narrowed_by=tuple(sorted(narrowing)))
        cls.cluster_plugins = _cluster_plugins(fw)
        static_pass = candidates.copy()
        sensitive_pass = xp.ones(table.rows, dtype=bool)
        for filter_plugin in fw.filter:
            cluster = is_cluster_scoped(filter_plugin)
            if filter_plugin.name in state.skip_filter_plugins:
                if cluster:
                    cls.cluster_pass[filter_plugin.name] = xp.ones(table.rows, dtype=bool)
                continue
            began = time.perf_counter()
            res = filter_plugin.filter(state, pod, view, ALL_ROWS)
            self._timed(sampled, ExtensionPoint.FILTER, filter_plugin.name, began)
            if cluster:
                cls.cluster_pass[filter_plugin.name] = res.passed
            elif is_placement_sensitive(filter_plugin):
                sensitive_pass &= res.passed
                cls.sensitive_filters += (filter_plugin,)
            else:
                static_pass &= res.passed
        cls.static_pass = static_pass
        cls.sensitive_pass = sensitive_pass
        self._combine(cls)
        cls.base = xp.zeros(table.rows, dtype=xp.int64)
        del xp
        return cls

    @staticmethod
    def _combine(cls: _PodClass) -> None:
        feasible = cls.static_pass & cls.sensitive_pass
        for passed in cls.cluster_pass.values():
            feasible &= passed
        cls.feasible = feasible

    def _prepare_scores(self, cls: _PodClass) -> None:
        """PreScore and raw scores for every row; done once per class, when first needed."""
        began = time.perf_counter()
        try:
            self._prepare_scores_timed(cls)
        finally:
            if self.timer is not None:
                self.timer(ExtensionPoint.SCORE, "", time.perf_counter() - began)

    def _prepare_scores_timed(self, cls: _PodClass) -> None:
        cls.scored = True
        fw, table = self.framework, self.table
        for plugin in fw.pre_score:
            if needs_feasible_nodes(plugin):
                continue  # run at every decision, with the rows being scored
            status = plugin.pre_score(cls.state, cls.pod, table)
            if status.is_skip:
                cls.state.skip_score_plugins.add(plugin.name)
            elif not status.is_success:
                cls.status = status.with_plugin(plugin.name)
                return
        view = table.view()
        for score_plugin, weight in fw.score:
            cluster = is_cluster_scoped(score_plugin)
            per_decision = needs_feasible_nodes(score_plugin)
            skipped = score_plugin.name in cls.state.skip_score_plugins
            if skipped and not cluster:
                continue
            raw = None
            if not per_decision:
                raw = (
                    view.xp.zeros(table.rows, dtype=view.xp.int64)
                    if skipped
                    else score_plugin.score(cls.state, cls.pod, view, ALL_ROWS)
                )
            term = _ScoreTerm(
                score_plugin,
                weight,
                getattr(score_plugin, "normalize_score", None) is not None,
                is_placement_sensitive(score_plugin) and not cluster,
                raw,
                cluster=cluster,
                active=not skipped,
                per_decision=per_decision,
            )
            cls.terms.append(term)
            if not term.normalizes and term.active and raw is not None:
                cls.base = cls.base + raw * weight

    # ---- after a placement: recompute one row --------------------------------------------------

    def _refresh_rows(self, cls: _PodClass) -> None:
        """Recompute the rows placements touched since the class last decided, in one call per
        placement-sensitive plugin (not one per placement)."""
        table = self.table
        rows_h = np.array(sorted(set(cls.dirty)), dtype=np.intp)  # few rows: cheaper than np.unique
        cls.dirty.clear()
        placed, evicted = cls.placed, cls.evicted
        cls.placed, cls.evicted = [], False
        if not cls.status.is_success:
            return
        if cls.stale:
            self._rerun_cluster_plugins(cls, None if evicted else placed)
            if not cls.status.is_success:
                return
        if len(rows_h) == 0:
            return
        view = table.view()
        rows = table.backend.asarray(rows_h)
        ok = cls.static_pass[rows]
        for plugin in cls.sensitive_filters:
            ok = ok & plugin.filter(cls.state, cls.pod, view, rows).passed
        cls.sensitive_pass[rows] = ok
        for passed in cls.cluster_pass.values():
            ok = ok & passed[rows]
        cls.feasible[rows] = ok
        if not cls.scored:
            return
        for term in cls.terms:
            if not term.sensitive or term.raw is None:
                continue
            new = term.plugin.score(cls.state, cls.pod, view, rows)
            if not term.normalizes:
                cls.base[rows] += (new - term.raw[rows]) * term.weight
            term.raw[rows] = new

    def _rerun_cluster_plugins(self, cls: _PodClass, placed: Sequence[tuple[PodInfo, int]] | None) -> None:
        """PreFilter, Filter (and PreScore, Score once scored) of the cluster-scoped plugins a
        placement affected, over every row, as scheduling the pod afresh would run them. A
        PreFilter plugin with AddPod (kube's PreFilterExtensions) whose PreFilter did not skip
        has its state moved by the ``placed`` pods instead (what kube's AddPod is for: the state
        as if those pods were there); None (pods were evicted): every one runs again."""
        fw, table, state, pod = self.framework, self.table, cls.state, cls.pod
        names, cls.stale = cls.stale, set()
        view = table.view()
        xp = view.xp
        for pre_filter in fw.pre_filter:
            if pre_filter.name not in names:
                continue
            if placed is not None and self._add_pods(pre_filter, state, pod, placed):
                continue
            _, status = pre_filter.pre_filter(state, pod, table)
            if status.is_skip:
                state.skip_filter_plugins.add(pre_filter.name)
            elif status.is_success:
                state.skip_filter_plugins.discard(pre_filter.name)
            else:
                cls.status = status.with_plugin(pre_filter.name)
                return
        for filter_plugin in fw.filter:
            name = filter_plugin.name
            if name in names and name in cls.cluster_pass:
                cls.cluster_pass[name] = (
                    xp.ones(table.rows, dtype=bool)
                    if name in state.skip_filter_plugins
                    else filter_plugin.filter(state, pod, view, ALL_ROWS).passed
                )
        self._combine(cls)
        if not cls.scored:
            return
        for pre_score in fw.pre_score:
            if pre_score.name not in names or needs_feasible_nodes(pre_score):
                continue
            add = getattr(pre_score, "pre_score_add_pods", None)
            if (
                placed is not None
                and add is not None
                and pre_score.name not in state.skip_score_plugins
                and add(state, pod, table, placed)
            ):
                continue  # kubus' incremental PreScore: moved by the placed pods
            status = pre_score.pre_score(state, pod, table)
            if status.is_skip:
                state.skip_score_plugins.add(pre_score.name)
            elif status.is_success:
                state.skip_score_plugins.discard(pre_score.name)
            else:
                cls.status = status.with_plugin(pre_score.name)
                return
        for term in cls.terms:
            if not term.cluster or term.raw is None or term.plugin.name not in names:
                continue
            if not term.normalizes and term.active:
                cls.base = cls.base - term.raw * term.weight
            term.active = term.plugin.name not in state.skip_score_plugins
            term.raw = (
                term.plugin.score(state, pod, view, ALL_ROWS) if term.active else xp.zeros(table.rows, dtype=xp.int64)
            )
            if not term.normalizes and term.active:
                cls.base = cls.base + term.raw * term.weight

    def _add_pods(self, plugin: Any, state: CycleState, pod: Pod, placed: Sequence[tuple[PodInfo, int]]) -> bool:
        """AddPod of ``plugin`` for each placed pod, in order; False when it has no AddPod, its
        PreFilter skipped (a placement may end the skip: it must run again) or an AddPod failed
        (the state may be half moved: PreFilter makes it afresh)."""
        if not has_pre_filter_extensions(plugin) or plugin.name in state.skip_filter_plugins:
            return False
        return all(plugin.add_pod(state, pod, info, self.table.node_info(row)).is_success for info, row in placed)

    # ---- one pod -----------------------------------------------------------------------------

    def _decide(self, cls: _PodClass, pod: Pod, explain: bool) -> ScheduleResult:
        table = self.table
        n_nodes = len(table)
        if not cls.status.is_success:
            return self._fail(cls, pod, explain)
        if n_nodes == 0:
            return ScheduleResult(pod, None, Status.unschedulable(NO_NODES_IN_CLUSTER), NO_NODES_IN_CLUSTER)
        rows = self._sample(cls)
        if len(rows) == 0:
            return self._fail(cls, pod, explain)
        xp = table.backend.xp
        details: dict[str, dict[str, ScoreDetail]] = {}
        totals = None
        if len(rows) == 1:
            best = int(rows[0])
        else:
            if not cls.scored:
                self._prepare_scores(cls)
                if not cls.status.is_success:
                    return self._fail(cls, pod, explain)
            d_rows = xp.asarray(rows)
            total = cls.base[d_rows]
            for term in cls.terms:
                if term.per_decision:
                    status = self._pre_score_feasible(cls, term, rows)
                    if status.is_skip:
                        continue
                    if not status.is_success:
                        cls.status = status.with_plugin(term.plugin.name)
                        return self._fail(cls, pod, explain)
                    raw = term.plugin.score(cls.state, pod, table.view(), d_rows)
                elif not term.active or (not term.normalizes and not explain):
                    continue
                else:
                    raw = term.raw[d_rows]
                norm = term.plugin.normalize_score(cls.state, pod, xp, raw) if term.normalizes else raw
                if term.normalizes or term.per_decision:
                    total = total + norm * term.weight
                if explain:
                    h_raw, h_norm = table.backend.to_host(raw), table.backend.to_host(norm)
                    for i, r in enumerate(rows):
                        details.setdefault(table.infos[r].name, {})[term.plugin.name] = ScoreDetail(
                            int(h_raw[i]), int(h_norm[i]), int(h_norm[i]) * term.weight
                        )
            top = total.max()
            tied = d_rows[total == top]
            if len(tied) == 1:
                best = int(tied[0])
            else:
                keys = tie_keys(
                    xp, pod_tie_hash(self.seed, pod.metadata.uid or pod.key), self.table.view().node_hash[tied]
                )
                best = int(tied[int(keys.argmin())])
            if explain:
                totals = dict(zip((int(r) for r in rows), (int(t) for t in table.backend.to_host(total)), strict=True))
        explained = self._explain_success(cls, details, totals) if explain else None
        node_info = table.node_info(best)
        state = cls.state.clone()
        began = time.perf_counter()
        status = self.framework.run_reserve(state, pod, node_info)
        if self.timer is not None:
            self.timer(ExtensionPoint.RESERVE, "", time.perf_counter() - began)
        if not status.is_success:
            return ScheduleResult(pod, None, status, status.message(), plugins=(status.plugin,), state=state)
        waiting_on: Mapping[str, float] = {}
        if self.run_permit and self.framework.permit:
            verdict = self.framework.run_permit(state, pod, node_info.name)
            if not (verdict.status.is_success or verdict.status.is_wait):
                self.framework.run_unreserve(state, pod, node_info)
                status = verdict.status
                message = f"{status.plugin}: {status.message() or 'rejected'}"
                return ScheduleResult(pod, None, status, message, plugins=(status.plugin,), state=state)
            waiting_on = verdict.waiting_on
            if waiting_on and self.waiting is not None:
                group = pod_group_key(pod) or ""
                self.waiting.add(pod.metadata.uid or pod.key, pod.key, node_info.name, 0, waiting_on, group=group)
        devices = tuple(state.get(GPU_DEVICES_STATE_KEY, ()))
        if cls.pod_info is None:
            cls.pod_info = PodInfo.of(cls.pod)
        placed = cls.pod_info.for_pod(pod, devices)
        table.assume(placed, best)
        return ScheduleResult(
            pod,
            node_info.name,
            Status.wait(f"waiting on {', '.join(sorted(waiting_on))}") if waiting_on else Status.success(),
            gpu_devices=devices,
            explain=explained,
            state=state,
            waiting_on=waiting_on,
            pod_info=placed,
        )

    def _pre_score_feasible(self, cls: _PodClass, term: _ScoreTerm, rows: np.ndarray) -> Status:
        """A `FeasibleNodesPreScorePlugin`'s PreScore over the rows being scored (when the
        profile runs it at PreScore; kube runs only the enabled ones)."""
        plugin = term.plugin
        if not any(p is plugin for p in self.framework.pre_score):
            return Status.success()
        status: Status = plugin.pre_score_feasible(cls.state, cls.pod, self.table, rows)
        return status

    def _sample(self, cls: _PodClass) -> np.ndarray:
        """The feasible rows to score, as kube's findNodesThatPassFilters finds them: candidates
        examined in row order from next_start_node_index (rotating), stopping after
        numFeasibleNodesToFind feasible ones (1 when the profile has no score plugin)."""
        table, backend = self.table, self.table.backend
        rows = table.valid_rows()
        feasible = backend.to_host(cls.feasible)
        if cls.narrowed_by:
            rows = rows[backend.to_host(cls.candidates)[rows]]
        n = len(rows)
        if n == 0:
            return rows
        if n != len(feasible):  # tombstones, or narrowed: the candidates' own order
            feasible = feasible[rows]
        want = num_feasible_nodes_to_find(self.framework.percentage_of_nodes_to_score, n) if self.framework.score else 1
        start = self.next_start_node_index % n
        # feasible positions from `start` on, then from 0 (the rotation), without copying the mask
        positions = np.flatnonzero(feasible[start:])
        if len(positions) <= want and start:
            positions = np.concatenate((positions + start, np.flatnonzero(feasible[:start]) + n))
        else:
            positions = positions + start
        if len(positions) > want:
            processed = int(positions[want - 1]) + 1 - start
            positions = positions[:want]
        else:
            processed = n
        self.next_start_node_index = (self.next_start_node_index + processed) % len(table)
        return rows[positions % n]

    # ---- failure and explanation -------------------------------------------------------------

    def _fail(self, cls: _PodClass, pod: Pod, explain: bool) -> ScheduleResult:
        n = len(self.table)
        status = cls.status
        if not status.is_success and status.code is Code.ERROR:
            return ScheduleResult(pod, None, status, status.message(), plugins=_plugins_of(status))
        if not status.is_success:
            # PreFilter rejected the pod: every node gets that status, the message names it once.
            message = f"{NO_NODE_AVAILABLE.format(n)}: {status.message()}."
            rejected_all = {
                i.name: NodeExplain(_plugin_reason(status.plugin, status.reasons)) for i in self.table.node_infos()
            }
            return self._post_filter(
                cls,
                ScheduleResult(
                    pod,
                    None,
                    Status(status.code, (message,), status.plugin),
                    message,
                    {r: n for r in status.reasons},
                    explain=rejected_all if explain else None,
                    plugins=_plugins_of(status) or cls.narrowed_by,
                ),
            )
        per_node: dict[str, NodeExplain] = {}
        if cls.diagnosis is None or cls.diagnosis[0] != self.table.version or explain:
            message, reasons, plugins = self._diagnose(cls, per_node if explain else None)
            cls.diagnosis = (self.table.version, message, reasons, plugins)
        _, message, reasons, plugins = cls.diagnosis
        result = ScheduleResult(
            pod,
            None,
            Status(Code.UNSCHEDULABLE, (message,)),
            message,
            dict(reasons),
            explain=per_node if explain else None,
            plugins=plugins,
        )
        return self._post_filter(cls, result)

    def _post_filter(self, cls: _PodClass, result: ScheduleResult) -> ScheduleResult:
        """PostFilter after Filter found no node (kube runs it for Unschedulable, not Error):
        its message joins the pod's (as kube's "preemption: ..."), its nomination is kept. A
        nomination with victims (preemption) places the pod there at once: the victims are
        forgotten in the table and the pod assumed, as `_decide` places any pod."""
        if not self.framework.post_filter:
            return result
        resolvable = self._resolvable(cls)
        table = self.table
        diagnosis = FilterDiagnosis(
            len(table),
            dict(result.reasons),
            frozenset(result.plugins),
            table=table,
            framework=self.framework,
            resolvable=resolvable,
        )
        began = time.perf_counter()
        outcome = self.framework.run_post_filter(cls.state.clone(), result.pod, diagnosis)
        if self.timer is not None:
            self.timer(ExtensionPoint.POST_FILTER, "", time.perf_counter() - began)
        if outcome is not None and outcome.status.is_success and outcome.victims and outcome.nominated_node:
            placed = self._place_preemptor(cls, result.pod, outcome.nominated_node, outcome.victims)
            if placed is not None:
                return placed
        if outcome is None or not (outcome.status.reasons or outcome.nominated_node):
            return result
        # kube's FitError: the PostFilter message joins with SeparatorFormat " %v."
        extra = f" {outcome.status.message()}." if outcome.status.reasons else ""
        message = result.message + extra
        return replace(
            result,
            status=Status(result.status.code, (message,)),
            message=message,
            nominated_node=outcome.nominated_node,
        )

    def _resolvable(self, cls: _PodClass) -> np.ndarray:
        """Host bool per row: nodes where removing pods might help (kube's
        nodesWherePreemptionMightHelp): a node, not rejected UnschedulableAndUnresolvable by the
        first filter that rejected it (nor left out by a PreFilter result)."""
        table, backend = self.table, self.table.backend
        valid = np.zeros(table.rows, dtype=bool)
        valid[table.valid_rows()] = True
        status = cls.status
        if not status.is_success:
            return valid if status.code is Code.UNSCHEDULABLE else np.zeros(table.rows, dtype=bool)
        alive = backend.to_host(cls.candidates).copy()
        resolvable = alive.copy()
        view = table.view()
        for plugin in self.framework.filter:
            if plugin.name in cls.state.skip_filter_plugins:
                continue
            res: FilterResult = plugin.filter(cls.state, cls.pod, view, ALL_ROWS)
            rejected = alive & ~backend.to_host(res.passed)
            for rej in res.rejections:
                if rej.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    resolvable &= ~(rejected & backend.to_host(rej.mask))
            alive &= ~rejected
        return resolvable

    def _place_preemptor(
        self, cls: _PodClass, pod: Pod, node: str, victims: Sequence[PodInfo]
    ) -> ScheduleResult | None:
        """The victims off ``node`` in the table and the pod reserved there; None (table as it
        was) when a victim is not there any more or a Reserve plugin refuses."""
        table = self.table
        if node not in table.row_of:
            return None
        info = table.node_info(node)
        if any(v.pod.key not in info.pods for v in victims):
            return None
        removed = [table.forget(v.pod.key, node) for v in victims]
        state = cls.state.clone()
        status = self.framework.run_reserve(state, pod, info)
        if not status.is_success:
            for v in removed:
                table.assume(v, node)
            return None
        devices = tuple(state.get(GPU_DEVICES_STATE_KEY, ()))
        placed = PodInfo.of(pod, devices)
        table.assume(placed, node)
        return ScheduleResult(
            pod,
            node,
            Status.success(),
            gpu_devices=devices,
            state=state,
            nominated_node=node,
            preempted=tuple(removed),
            pod_info=placed,
        )

    def _diagnose(
        self, cls: _PodClass, per_node: dict[str, NodeExplain] | None
    ) -> tuple[str, dict[str, int], tuple[str, ...]]:
        """Run the filters over every candidate node and attribute each rejection to the first
        plugin that rejected the node, as kube's RunFilterPlugins stops at the first failure.
        Returns the message, the reason histogram and the plugins that rejected some node."""
        table, backend = self.table, self.table.backend
        view = table.view()
        alive = backend.to_host(cls.candidates).copy()
        reasons: Counter[str] = Counter()
        node_reasons: dict[int, str] = {}
        plugins: set[str] = set()
        if cls.narrowed_by:
            # kube gives nodes a PreFilter result left out one status of their own
            reason = f"node(s) didn't satisfy plugin(s) {_go_list(cls.narrowed_by)}"
            left_out = table.valid_rows()[~alive[table.valid_rows()]]
            if len(left_out):
                plugins.update(cls.narrowed_by)
                reasons[reason] += len(left_out)
                text = _plugin_reason(", ".join(cls.narrowed_by), [reason])
                node_reasons.update((int(r), text) for r in left_out)
        for plugin in self.framework.filter:
            if plugin.name in cls.state.skip_filter_plugins:
                continue
            res: FilterResult = plugin.filter(cls.state, cls.pod, view, ALL_ROWS)
            passed = backend.to_host(res.passed)
            rejected = alive & ~passed
            if rejected.any():
                plugins.add(plugin.name)
                per_row: dict[int, list[str]] = {}
                for rej in res.rejections:
                    hit = rejected & backend.to_host(rej.mask)
                    count = int(hit.sum())
                    if count:
                        reasons[rej.reason] += count
                        if per_node is not None:
                            for r in np.flatnonzero(hit):
                                per_row.setdefault(int(r), []).append(rej.reason)
                for row, rs in per_row.items():
                    node_reasons[row] = _plugin_reason(plugin.name, rs)
            alive &= passed
        message = fit_error_message(len(table), reasons)
        if per_node is not None:
            for r in table.valid_rows():
                name = table.node_info(int(r)).name
                per_node[name] = NodeExplain(node_reasons.get(int(r), "ok"))
        return message, dict(reasons), tuple(sorted(plugins))

    def _explain_success(
        self, cls: _PodClass, details: dict[str, dict[str, ScoreDetail]], totals: dict[int, int] | None
    ) -> dict[str, NodeExplain]:
        per_node: dict[str, NodeExplain] = {}
        self._diagnose(cls, per_node)
        if totals:
            for row, total in totals.items():
                name = self.table.node_info(row).name
                per_node[name] = NodeExplain(per_node[name].filter, details.get(name, {}), total)
        return per_node


def fit_error_message(num_nodes: int, reasons: Counter[str] | dict[str, int]) -> str:
    """kube's FitError.Error(): "0/N nodes are available: <count reason>, ... ." (sorted)."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    msg = NO_NODE_AVAILABLE.format(num_nodes) + ":"
    if parts:
        msg += " " + ", ".join(parts) + "."
    return msg


def _plugin_reason(plugin: str, reasons: Sequence[str]) -> str:
    """How a node's rejection reads in explain: "<Plugin>: reason, reason" (no plugin: the reasons)."""
    text = ", ".join(reasons)
    return f"{plugin}: {text}" if plugin else text


def _plugins_of(status: Status) -> tuple[str, ...]:
    return (status.plugin,) if status.plugin else ()


def _go_list(items: Sequence[str]) -> str:
    """Go's %v of a []string: [a b c]."""
    return "[" + " ".join(items) + "]"


def _cluster_plugins(fw: Framework) -> tuple[Any, ...]:
    found: dict[str, Any] = {}
    for plugin in (*fw.filter, *(p for p, _ in fw.score)):
        if is_cluster_scoped(plugin):
            found.setdefault(plugin.name, plugin)
    return tuple(found.values())


def _unbroken(journal: Sequence[tuple[Any, int, bool, int]], since: int, now: int) -> bool:
    """Whether the journal accounts for every change of the table from version ``since`` to
    ``now``: each change bumps the version by one, so the versions it noted are exactly those."""
    versions = sorted({entry[3] for entry in journal})
    return versions == list(range(since + 1, now + 1))


def pod_class_key(pod: Pod) -> Any:
    """Pods with equal keys get equal Filter/Score results (all plugins read only these: the
    namespace, labels, annotations, controller (default topology spreading's workload) and spec;
    not the name or uid)."""
    m = pod.metadata
    controller = m.controller
    return (
        m.namespace,
        repr(sorted(m.labels.items())),
        repr(sorted(m.annotations.items())),
        repr(pod.spec),
        None if controller is None else (controller.api_version, controller.kind, controller.name),
    )


__all__ = ["NodeExplain", "ScheduleResult", "Scheduler", "ScoreDetail", "fit_error_message", "pod_class_key"]
