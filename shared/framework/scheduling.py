"""The scheduling algorithm: kube-scheduler's schedulePod, over the node table, for a batch of pods.

For each pod, in order: PreFilter → Filter → (sample percentageOfNodesToScore) → PreScore →
Score → NormalizeScore → weights → select host → Reserve, then the pod is assumed on its node
so the next pod sees it. Filter and Score are evaluated for a whole batch in one pass: pods with
identical scheduling inputs share one evaluation (a "pod class"), and after each placement only
the touched node's row is recomputed, and only for placement-sensitive plugins. A class outlives
its batch while nothing but the Scheduler changed the table and its plugins read nothing else
(`reads_table_only`). The result is exactly what scheduling the pods one by one gives (the tests
hold it to that). The Framework (`kubus.framework.runtime`) runs every extension point; the
Scheduler decides over which rows, for which pods, and times each point as a whole.

Differences from kube-scheduler, on purpose: nodes are visited in table row order (kube's order
is its snapshot's, and its parallel filter makes the sampled set racy); ties among the best
nodes go to the smallest seeded tie key (`kubus.kernels.tiebreak`) instead of a random pick.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.api.workloads import Workloads
from kubus.framework.config import num_feasible_nodes_to_find
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.diagnosis import (
    NO_NODE_AVAILABLE,
    NO_NODES_IN_CLUSTER,
    diagnose,
    fit_error_message,
    plugin_reason,
    plugins_of,
    resolvable,
)
from kubus.framework.interface import FilterDiagnosis, is_cluster_scoped, is_placement_sensitive, reads_table_only
from kubus.framework.pod_classes import (
    Placements,
    PodClass,
    PodClassKey,
    cluster_plugins,
    journal_unbroken,
    pod_class_key,
)
from kubus.framework.registry import ExtensionPoint
from kubus.framework.results import NodeExplain, ScheduleResult, ScoreDetail
from kubus.framework.runtime import Framework, PodScores, PointTimer, PreFilterResult
from kubus.framework.status import Code, Status
from kubus.framework.waiting import WaitingPods
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.kernels.tiebreak import pod_tie_hash, tie_keys

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
        self._classes: dict[PodClassKey, PodClass] = {}
        """The pod classes evaluated so far, while they stay in step with the table."""
        self._calls = 0
        """`schedule` calls so far."""
        self._placements = Placements()
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
                if cls.stale:
                    self._refresh_rows(cls)
                # Rows only placements touched wait: `_sample` refreshes them when it reaches one.
            cls.last_call = self._calls
            result = self._decide(cls, pod, explain)
            results.append(result)
            if result.node is not None:
                row = self.table.row_of[result.node]
                placed = result.pod_info or self.table.node_info(row).pods[pod.key]
                assert cls.key is not None  # set when the class was made, above
                self._placements.add(placed, row, bool(result.preempted), cls.key)
        self._keep()
        return results

    def _classes_in_step(self) -> dict[PodClassKey, PodClass]:
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
            and journal_unbroken(journal, self._table_version, table.version)
            and table.nodes_version == self._nodes_version
            and len(table.resources) == self._resources
            and table.namespaces == self._namespaces
            and table.workloads == self._workloads
        ):
            self._classes, self._placements = {}, Placements()
        elif self._classes:
            for pod_info, row, forgotten, _ in journal:
                self._placements.add(pod_info, row, forgotten, pod_class_key(pod_info.pod))
        return self._classes

    def _keep(self) -> None:
        """End of a batch: keep the classes used lately (and the placements they have not taken in)."""
        if not self._keep_classes:
            self._classes, self._placements = {}, Placements()
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

    def _take_in_placements(self, cls: PodClass) -> None:
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
            _, reasons, plugins = diagnose(self.framework, self.table, cls, None)
        else:  # PreFilter rejected the pod: every node for its reasons, as `_fail` says
            reasons = {r: len(self.table) for r in cls.status.reasons}
            plugins = (cls.status.plugin,) if cls.status.plugin else ()
        diagnosis = FilterDiagnosis(
            len(self.table),
            dict(reasons),
            frozenset(plugins),
            table=self.table,
            framework=self.framework,
            resolvable=resolvable(self.framework, self.table, cls),
        )
        outcome = self.framework.run_post_filter(cls.state.clone(), pod, diagnosis)
        if outcome is None or not outcome.status.is_success or not outcome.nominated_node:
            return None
        return outcome.nominated_node, tuple(outcome.victims)

    # ---- one class: PreFilter, Filter, PreScore, Score over all rows --------------------------

    def _evaluate(self, pod: Pod) -> PodClass:
        """PreFilter and Filter of a new class over every row, each point timed as itself (as
        kube's framework does); the plugins one by one in one class out of `PLUGIN_SAMPLE` (that
        class's PreScore and Score too)."""
        self._evaluations += 1
        timer = self.timer
        plugin_timer = timer if timer is not None and self._evaluations % PLUGIN_SAMPLE == 1 else None
        fw, table = self.framework, self.table
        state = CycleState()
        began = time.perf_counter()
        pre = fw.run_pre_filter(state, pod, table, timer=plugin_timer)
        began = self._point_done(ExtensionPoint.PRE_FILTER, began)
        if not pre.status.is_success:
            return PodClass(pod, state, pre.status, narrowed_by=pre.narrowed_by)
        try:
            return self._filter(pod, state, pre, plugin_timer)
        finally:
            self._point_done(ExtensionPoint.FILTER, began)

    def _point_done(self, point: ExtensionPoint, began: float) -> float:
        """Time ``point`` from ``began`` (perf_counter) to now, when timed; returns now."""
        now = time.perf_counter()
        if self.timer is not None:
            self.timer(point, "", now - began)
        return now

    def _filter(self, pod: Pod, state: CycleState, pre: PreFilterResult, plugin_timer: PointTimer | None) -> PodClass:
        fw, table = self.framework, self.table
        view = table.view()
        xp = view.xp
        candidates = view.valid.copy()
        if pre.allowed is not None:
            mask = np.zeros(table.rows, dtype=bool)
            rows = [table.row_of[n] for n in pre.allowed if n in table.row_of]
            mask[rows] = True
            candidates &= table.backend.asarray(mask)
        cls = PodClass(pod, state, Status.success(), candidates=candidates, narrowed_by=pre.narrowed_by)
        cls.plugin_timer = plugin_timer
        cls.cluster_plugins = cluster_plugins(fw)
        static_pass = candidates.copy()
        sensitive_pass = xp.ones(table.rows, dtype=bool)
        for filter_plugin, res in fw.run_filter(state, pod, view, timer=plugin_timer):
            cluster = is_cluster_scoped(filter_plugin)
            if res is None:  # its PreFilter said Skip
                if cluster:
                    cls.cluster_pass[filter_plugin.name] = xp.ones(table.rows, dtype=bool)
            elif cluster:
                cls.cluster_pass[filter_plugin.name] = res.passed
            elif is_placement_sensitive(filter_plugin):
                sensitive_pass &= res.passed
                cls.sensitive_filters += (filter_plugin,)
            else:
                static_pass &= res.passed
        cls.static_pass = static_pass
        cls.sensitive_pass = sensitive_pass
        cls.combine()
        return cls

    def _prepare_scores(self, cls: PodClass) -> PodScores | None:
        """PreScore and raw scores for every row, each point timed as itself; done once per
        class, when first needed. None when PreScore failed (`cls.status` says why)."""
        fw = self.framework
        began = time.perf_counter()
        status = fw.run_pre_score(cls.state, cls.pod, self.table, timer=cls.plugin_timer)
        began = self._point_done(ExtensionPoint.PRE_SCORE, began)
        if not status.is_success:
            cls.status = status
            return None
        try:
            cls.scores = fw.run_score(cls.state, cls.pod, self.table, timer=cls.plugin_timer)
            return cls.scores
        finally:
            self._point_done(ExtensionPoint.SCORE, began)

    # ---- after a placement: recompute one row --------------------------------------------------

    def _refresh_rows(self, cls: PodClass) -> None:
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
        fw, state, pod = self.framework, cls.state, cls.pod
        view = table.view()
        rows = table.backend.asarray(rows_h)
        ok = fw.run_filter_passed(state, pod, view, rows, cls.sensitive_filters, cls.static_pass[rows])
        cls.sensitive_pass[rows] = ok
        for passed in cls.cluster_pass.values():
            ok = ok & passed[rows]
        cls.feasible[rows] = ok
        if cls.scores is not None:
            fw.run_score_rows(state, pod, view, cls.scores, rows)

    def _rerun_cluster_plugins(self, cls: PodClass, placed: Sequence[tuple[PodInfo, int]] | None) -> None:
        """PreFilter, Filter (and PreScore, Score once scored) of the cluster-scoped plugins a
        placement affected, over every row, as scheduling the pod afresh would run them; a
        PreFilter (or PreScore) plugin that can is moved by the ``placed`` pods instead (None:
        pods were evicted, every one runs again)."""
        fw, table, state, pod = self.framework, self.table, cls.state, cls.pod
        names, cls.stale = cls.stale, set()
        status = fw.run_pre_filter_again(state, pod, table, names, placed)
        if not status.is_success:
            cls.status = status
            return
        view = table.view()
        xp = view.xp
        rerun = [p for p in fw.filter if p.name in names and p.name in cls.cluster_pass]
        for filter_plugin, res in fw.run_filter(state, pod, view, plugins=rerun):
            cls.cluster_pass[filter_plugin.name] = xp.ones(table.rows, dtype=bool) if res is None else res.passed
        cls.combine()
        if cls.scores is None:
            return
        status = fw.run_pre_score(state, pod, table, only=names, placed=placed)
        if not status.is_success:
            cls.status = status
            return
        fw.run_score_again(state, pod, table, cls.scores, names)

    # ---- one pod -----------------------------------------------------------------------------

    def _decide(self, cls: PodClass, pod: Pod, explain: bool) -> ScheduleResult:
        table = self.table
        n_nodes = len(table)
        if cls.dirty and explain:  # every row is shown
            self._refresh_rows(cls)
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
            scores = cls.scores if cls.scores is not None else self._prepare_scores(cls)
            if scores is None:
                return self._fail(cls, pod, explain)
            status, total, scored = self.framework.run_normalize_score(
                cls.state, pod, table, scores, rows, explain=explain
            )
            if not status.is_success:
                cls.status = status
                return self._fail(cls, pod, explain)
            for term, raw, norm in scored:
                h_raw, h_norm = table.backend.to_host(raw), table.backend.to_host(norm)
                for i, r in enumerate(rows):
                    details.setdefault(table.infos[r].name, {})[term.plugin.name] = ScoreDetail(
                        int(h_raw[i]), int(h_norm[i]), int(h_norm[i]) * term.weight
                    )
            d_rows = xp.asarray(rows)
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

    def _sample(self, cls: PodClass) -> np.ndarray:
        """The feasible rows to score, as kube's findNodesThatPassFilters finds them: candidates
        examined in row order from next_start_node_index (rotating), stopping after
        numFeasibleNodesToFind feasible ones (1 when the profile has no score plugin).

        Rows placements touched since the class's rows were last refreshed (`PodClass.dirty`)
        are refreshed only when the examination reaches one: up to there the class's rows are what refreshing
        would make them, so the rows found are the same. With kube's sampling a pod examines a
        few hundred rows from where the last one stopped, so a placed row is reached again only
        after the rotation comes round: its refresh then serves the placements of many pods at once."""
        rows, processed, examined_dirty = self._find_feasible(cls)
        if examined_dirty:
            self._refresh_rows(cls)
            rows, processed, _ = self._find_feasible(cls)
        self.next_start_node_index = (self.next_start_node_index + processed) % len(self.table)
        return rows

    def _find_feasible(self, cls: PodClass) -> tuple[np.ndarray, int, bool]:
        """`_sample`'s rows, how many candidates it examined, and whether a dirty row is among
        them; next_start_node_index is left as it was."""
        table, backend = self.table, self.table.backend
        rows = table.valid_rows()
        feasible = backend.to_host(cls.feasible)
        if cls.narrowed_by:
            rows = rows[backend.to_host(cls.candidates)[rows]]
        n = len(rows)
        if n == 0:
            return rows, 0, False
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
        return rows[positions % n], processed, bool(cls.dirty) and self._dirty_among(cls, rows, start, processed)

    @staticmethod
    def _dirty_among(cls: PodClass, rows: np.ndarray, start: int, processed: int) -> bool:
        """Whether a dirty row of ``cls`` is among the ``processed`` candidates from position
        ``start`` of ``rows`` (ascending table rows), round the end."""
        n = len(rows)
        if processed >= n:
            return True  # every candidate examined (a dirty row that is none costs one refresh)
        dirty = np.fromiter(set(cls.dirty), dtype=np.intp)
        if n == rows[-1] + 1:  # every row from 0 on: a row is its own position
            positions = dirty[dirty < n]
        else:
            at = np.searchsorted(rows, dirty)
            inside = at < n
            positions = at[inside][rows[at[inside]] == dirty[inside]]
        return bool((((positions - start) % n) < processed).any())

    # ---- failure and explanation -------------------------------------------------------------

    def _fail(self, cls: PodClass, pod: Pod, explain: bool) -> ScheduleResult:
        if cls.dirty:  # the diagnosis reads every row
            self._refresh_rows(cls)
        n = len(self.table)
        status = cls.status
        if not status.is_success and status.code is Code.ERROR:
            return ScheduleResult(pod, None, status, status.message(), plugins=plugins_of(status))
        if not status.is_success:
            # PreFilter rejected the pod: every node gets that status, the message names it once.
            message = f"{NO_NODE_AVAILABLE.format(n)}: {status.message()}."
            rejected_all = {
                i.name: NodeExplain(plugin_reason(status.plugin, status.reasons)) for i in self.table.node_infos()
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
                    plugins=plugins_of(status) or cls.narrowed_by,
                ),
            )
        per_node: dict[str, NodeExplain] = {}
        if cls.diagnosis is None or cls.diagnosis[0] != self.table.version or explain:
            message, reasons, plugins = diagnose(self.framework, self.table, cls, per_node if explain else None)
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

    def _post_filter(self, cls: PodClass, result: ScheduleResult) -> ScheduleResult:
        """PostFilter after Filter found no node (kube runs it for Unschedulable, not Error):
        its message joins the pod's (as kube's "preemption: ..."), its nomination is kept. A
        nomination with victims (preemption) places the pod there at once: the victims are
        forgotten in the table and the pod assumed, as `_decide` places any pod."""
        if not self.framework.post_filter:
            return result
        table = self.table
        diagnosis = FilterDiagnosis(
            len(table),
            dict(result.reasons),
            frozenset(result.plugins),
            table=table,
            framework=self.framework,
            resolvable=resolvable(self.framework, table, cls),
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

    def _place_preemptor(self, cls: PodClass, pod: Pod, node: str, victims: Sequence[PodInfo]) -> ScheduleResult | None:
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

    def _explain_success(
        self, cls: PodClass, details: dict[str, dict[str, ScoreDetail]], totals: dict[int, int] | None
    ) -> dict[str, NodeExplain]:
        per_node: dict[str, NodeExplain] = {}
        diagnose(self.framework, self.table, cls, per_node)
        if totals:
            for row, total in totals.items():
                name = self.table.node_info(row).name
                per_node[name] = NodeExplain(per_node[name].filter, details.get(name, {}), total)
        return per_node


__all__ = [
    "KEEP_UNUSED_CALLS",
    "PLUGIN_SAMPLE",
    "NodeExplain",
    "PointTimer",
    "ScheduleResult",
    "Scheduler",
    "ScoreDetail",
    "fit_error_message",
    "pod_class_key",
]
