"""Framework: one scheduler profile, its plugins instantiated and ordered per extension point,
and the runs of every extension point from PreFilter to PostBind, in kube's order and with kube's
rules, for whichever process runs them (the cycle's Scheduler, the binder, the janitor, `kubus
simulate`).

One way for every point: a ``run_*`` method loops over the point's plugins, applies the point's
status rules (Skip, the first failure naming its plugin) and, given a timer, times each plugin;
the caller times the point as a whole. PreFilter, Filter, PreScore, Score and NormalizeScore run
as array kernels over many rows at once; the Scheduler says which rows, and which plugins when a
placement made only some of them stale (`run_pre_filter_again`, `run_score_rows`, ...).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from kubus.api.objects import Pod
from kubus.framework.config import ProfileConfig
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import (
    ALL_ROWS,
    BindPlugin,
    FilterDiagnosis,
    FilterPlugin,
    FilterResult,
    PermitPlugin,
    PluginInstance,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    Rows,
    ScorePlugin,
    has_pre_filter_extensions,
    is_cluster_scoped,
    is_placement_sensitive,
    needs_feasible_nodes,
)
from kubus.framework.registry import ExtensionPoint
from kubus.framework.status import Code, Status
from kubus.framework.waiting import Decision, WaitingPods
from kubus.kernels.backend import Array

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kubus.framework.registry import Registry
    from kubus.kernels.node_table import NodeTable, TableView
    from kubus.kernels.nodeinfo import NodeInfo, PodInfo

__all__ = [
    "MAX_PERMIT_TIMEOUT",
    "Framework",
    "PermitVerdict",
    "PluginTimer",
    "PodScores",
    "PointTimer",
    "PreFilterResult",
    "ScoreTerm",
    "UnreserveStore",
]

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""Seconds a Permit plugin may make a pod wait at most (kube's maxTimeout)."""

PluginTimer = Callable[[str, ExtensionPoint, Status, float], None]
"""Called after each plugin run with (plugin, extension point, status, seconds): metrics."""

PointTimer = Callable[[ExtensionPoint, str, float], None]
"""``timer(extension point, plugin or "" for the whole point, seconds)``: the cycle's metrics
(scheduler_framework_extension_point_duration_seconds for "", else
scheduler_plugin_execution_duration_seconds)."""

_log = logging.getLogger("kubus.framework")


class UnreserveStore(Protocol):
    """What `Framework.run_unreserve_after` reads and writes (`kubus.store.ClusterState` is one)."""

    async def node_info(self, name: str) -> NodeInfo | None: ...

    # Any: `kubus.store.PermitState`s, of a layer above the framework (read as `WaitingPods.load_states` reads them).
    async def waiting_pods(self, profile: str) -> Sequence[Any]: ...

    async def apply_permit_decisions(self, decisions: Iterable[Decision]) -> None: ...


@dataclass(frozen=True, slots=True)
class PermitVerdict:
    """What the Permit plugins said about a pod (kube's RunPermitPlugins)."""

    status: Status
    """Success, rejected (Unschedulable/Error: the first plugin that did not allow), or Wait."""
    waiting_on: Mapping[str, float] = field(default_factory=dict)
    """Wait: plugin -> its timeout in seconds (capped at `MAX_PERMIT_TIMEOUT`)."""

    @property
    def timeout(self) -> float:
        """Seconds until the first waiting plugin's timer rejects the pod (0 when none waits)."""
        return min(self.waiting_on.values(), default=0.0)


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """What the PreFilter plugins said about a pod (kube's RunPreFilterPlugins)."""

    status: Status
    """Success; or the first failure, naming its plugin; or UnschedulableAndUnresolvable when
    the plugins' node sets have nothing in common."""
    allowed: frozenset[str] | None = None
    """The node names every narrowing plugin allowed (None: any node)."""
    narrowed_by: tuple[str, ...] = ()
    """The plugins that limited the pod to some nodes (sorted)."""


@dataclass(slots=True)
class ScoreTerm:
    """One Score plugin's raw scores for one pod, kept between decisions."""

    plugin: PluginInstance
    """A Score plugin; NormalizeScore and feasible-nodes PreScore too, where it has them."""
    weight: int
    normalizes: bool
    sensitive: bool
    """Placement-sensitive and row-local: rescored on the rows placements touch (`run_score_rows`)."""
    raw: Array = None
    """int64 raw scores for every row (None for a `per_decision` term)."""
    cluster: bool = False
    """Cluster-scoped (`ClusterScopedPlugin`): rescored over every row when a placement affects it."""
    active: bool = True
    """False while its PreScore said Skip (a cluster-scoped term is kept, to be asked again)."""
    per_decision: bool = False
    """Its PreScore reads the feasible nodes (`FeasibleNodesPreScorePlugin`): PreScore and Score
    run at every decision over the rows being scored."""


@dataclass(slots=True)
class PodScores:
    """A pod's Score plugins over every row (`Framework.run_score`), moved by the later runs."""

    terms: list[ScoreTerm]
    base: Array
    """int64 per row: the weighted sum of the active terms without NormalizeScore (they need no
    renormalizing at a decision)."""


@dataclass(frozen=True, slots=True)
class Framework:
    """The plugins of one profile, in the order they run at each extension point."""

    scheduler_name: str = "default-scheduler"
    pre_enqueue: tuple[PreEnqueuePlugin, ...] = ()
    queue_sort: QueueSortPlugin | None = None
    pre_filter: tuple[PreFilterPlugin, ...] = ()
    filter: tuple[FilterPlugin, ...] = ()
    pre_score: tuple[PreScorePlugin, ...] = ()
    score: tuple[tuple[ScorePlugin, int], ...] = ()
    """(plugin, weight) pairs."""
    post_filter: tuple[PostFilterPlugin, ...] = ()
    reserve: tuple[ReservePlugin, ...] = ()
    permit: tuple[PermitPlugin, ...] = ()
    pre_bind: tuple[PreBindPlugin, ...] = ()
    bind: tuple[BindPlugin, ...] = ()
    post_bind: tuple[PostBindPlugin, ...] = ()
    percentage_of_nodes_to_score: int | None = None
    """None: kube's adaptive percentage."""
    plugins: Mapping[str, PluginInstance] = field(default_factory=dict)
    """Every plugin instance of the profile by name."""
    handle: WaitingPods | None = None
    """What the plugins' factories got (a `kubus.framework.waiting.WaitingPods`, or None)."""

    @classmethod
    def from_profile(
        cls,
        profile: ProfileConfig,
        registry: Registry,
        *,
        percentage_of_nodes_to_score: int | None = None,
        handle: WaitingPods | None = None,
    ) -> Framework:
        """Instantiate a profile's plugins from the registry (one instance per plugin name).

        The profile's own percentageOfNodesToScore wins over the global one, as in kube.
        """
        instances: dict[str, PluginInstance] = {}

        def get(name: str) -> PluginInstance:
            if name not in instances:
                spec = registry.get(name)
                instances[name] = spec.factory(profile.plugin_args.get(name), handle)
            return instances[name]

        def at(point: ExtensionPoint) -> Sequence[PluginInstance]:
            return [get(ref.name) for ref in profile.plugins.get(point, ())]

        sorts = at(ExtensionPoint.QUEUE_SORT)
        pct = profile.percentage_of_nodes_to_score
        return cls(
            scheduler_name=profile.scheduler_name,
            pre_enqueue=tuple(at(ExtensionPoint.PRE_ENQUEUE)),
            queue_sort=sorts[0] if sorts else None,
            pre_filter=tuple(at(ExtensionPoint.PRE_FILTER)),
            filter=tuple(at(ExtensionPoint.FILTER)),
            post_filter=tuple(at(ExtensionPoint.POST_FILTER)),
            pre_score=tuple(at(ExtensionPoint.PRE_SCORE)),
            score=tuple((get(r.name), r.weight) for r in profile.plugins.get(ExtensionPoint.SCORE, ())),
            reserve=tuple(at(ExtensionPoint.RESERVE)),
            permit=tuple(at(ExtensionPoint.PERMIT)),
            pre_bind=tuple(at(ExtensionPoint.PRE_BIND)),
            bind=tuple(at(ExtensionPoint.BIND)),
            post_bind=tuple(at(ExtensionPoint.POST_BIND)),
            percentage_of_nodes_to_score=pct if pct is not None else percentage_of_nodes_to_score,
            plugins=instances,
            handle=handle,
        )

    # -- the array extension points: PreFilter, Filter, PreScore, Score, NormalizeScore ------------
    # With a ``timer``, each plugin's run is timed (the Scheduler passes one for the pod classes it
    # samples); without, nothing is timed: the decisions' reruns stay cheap. A plugin that raises
    # propagates: the caller fails the attempt (kube's Error).

    def run_pre_filter(
        self, state: CycleState, pod: Pod, table: NodeTable, *, timer: PointTimer | None = None
    ) -> PreFilterResult:
        """PreFilter plugins in order (kube's RunPreFilterPlugins). Skip: the plugin joins
        ``state.skip_filter_plugins`` (its Filter is not run for the pod). The first failure ends
        the run, naming its plugin. The node sets of the plugins that return one are intersected;
        an empty intersection is UnschedulableAndUnresolvable, as kube words it."""
        allowed: frozenset[str] | None = None
        narrowing: list[str] = []
        for plugin in self.pre_filter:
            began = time.perf_counter()
            names, status = plugin.pre_filter(state, pod, table)
            if timer is not None:
                timer(ExtensionPoint.PRE_FILTER, plugin.name, time.perf_counter() - began)
            if status.is_skip:
                state.skip_filter_plugins.add(plugin.name)
                continue
            if not status.is_success:
                return PreFilterResult(status.with_plugin(plugin.name))
            if names is not None:
                narrowing.append(plugin.name)
                allowed = names if allowed is None else allowed & names
                if not allowed:
                    msg = (
                        f"node(s) didn't satisfy plugin {narrowing[0]}"
                        if len(narrowing) == 1
                        else f"node(s) didn't satisfy plugin(s) {go_list(sorted(narrowing))} simultaneously"
                    )
                    status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))
                    return PreFilterResult(status, narrowed_by=tuple(sorted(narrowing)))
        return PreFilterResult(Status.success(), allowed, tuple(sorted(narrowing)))

    def run_pre_filter_again(
        self,
        state: CycleState,
        pod: Pod,
        table: NodeTable,
        names: Container[str],
        placed: Sequence[tuple[PodInfo, int]] | None,
    ) -> Status:
        """PreFilter again of the plugins in ``names`` (profile order), after placements, over
        the pod's state: a plugin with AddPod (kube's PreFilterExtensions) whose PreFilter did not
        skip is moved by the ``placed`` (pod, row) pairs instead, as AddPod is for; None (pods
        were evicted): every one runs afresh. Skip and Success set or clear the plugin's skip; the
        first failure is returned, naming its plugin. Node sets are not intersected again."""
        for plugin in self.pre_filter:
            if plugin.name not in names:
                continue
            if placed is not None and self._add_pods(plugin, state, pod, table, placed):
                continue
            _, status = plugin.pre_filter(state, pod, table)
            if status.is_skip:
                state.skip_filter_plugins.add(plugin.name)
            elif status.is_success:
                state.skip_filter_plugins.discard(plugin.name)
            else:
                return status.with_plugin(plugin.name)
        return Status.success()

    @staticmethod
    def _add_pods(
        plugin: PluginInstance, state: CycleState, pod: Pod, table: NodeTable, placed: Sequence[tuple[PodInfo, int]]
    ) -> bool:
        """AddPod of ``plugin`` for each placed pod, in order; False when it has no AddPod, its
        PreFilter skipped (a placement may end the skip: it must run again) or an AddPod failed
        (the state may be half moved: PreFilter makes it afresh)."""
        if not has_pre_filter_extensions(plugin) or plugin.name in state.skip_filter_plugins:
            return False
        return all(plugin.add_pod(state, pod, info, table.node_info(row)).is_success for info, row in placed)

    def run_filter(
        self,
        state: CycleState,
        pod: Pod,
        view: TableView,
        rows: Rows = ALL_ROWS,
        *,
        plugins: Sequence[FilterPlugin] | None = None,
        timer: PointTimer | None = None,
    ) -> list[tuple[FilterPlugin, FilterResult | None]]:
        """Filter of ``plugins`` (default: the profile's), in order, each over ``rows`` at once:
        (plugin, its result), the result None for a plugin whose PreFilter said Skip (it passes
        every node). Every plugin runs (a node's first rejecting plugin is the caller's to find)."""
        skipped = state.skip_filter_plugins
        out: list[tuple[FilterPlugin, FilterResult | None]] = []
        for plugin in self.filter if plugins is None else plugins:
            if plugin.name in skipped:
                out.append((plugin, None))
                continue
            began = time.perf_counter()
            result = plugin.filter(state, pod, view, rows)
            if timer is not None:
                timer(ExtensionPoint.FILTER, plugin.name, time.perf_counter() - began)
            out.append((plugin, result))
        return out

    @staticmethod
    def run_filter_passed(
        state: CycleState, pod: Pod, view: TableView, rows: Rows, plugins: Sequence[FilterPlugin], passed: Array
    ) -> Array:
        """``passed`` (bool per row of ``rows``) and-ed with the Filter of each of ``plugins`` over
        ``rows``, skipped plugins passing: a placement's rows, rechecked at a decision. A new
        array; untimed."""
        skipped = state.skip_filter_plugins
        for plugin in plugins:
            if plugin.name not in skipped:
                passed = passed & plugin.filter(state, pod, view, rows).passed
        return passed

    def run_pre_score(
        self,
        state: CycleState,
        pod: Pod,
        table: NodeTable,
        *,
        only: Container[str] | None = None,
        placed: Sequence[tuple[PodInfo, int]] | None = None,
        timer: PointTimer | None = None,
    ) -> Status:
        """PreScore of the profile's plugins (those in ``only``, when given), in order, but for the
        ones reading the feasible nodes (they run at each decision, `run_normalize_score`). Skip
        puts the plugin in ``state.skip_score_plugins``, Success takes it out (a rerun after
        placements may end a Skip); the first failure is returned, naming its plugin. With
        ``placed`` (pods placed since the state was made), a plugin with ``pre_score_add_pods``
        that did not skip is moved by them instead, when it can."""
        skipped = state.skip_score_plugins
        for plugin in self.pre_score:
            name = plugin.name
            if (only is not None and name not in only) or needs_feasible_nodes(plugin):
                continue
            if placed is not None and name not in skipped:
                add = getattr(plugin, "pre_score_add_pods", None)
                if add is not None and add(state, pod, table, placed):
                    continue  # kubus' incremental PreScore: moved by the placed pods
            began = time.perf_counter()
            status = plugin.pre_score(state, pod, table)
            if timer is not None:
                timer(ExtensionPoint.PRE_SCORE, name, time.perf_counter() - began)
            if status.is_skip:
                skipped.add(name)
            elif status.is_success:
                skipped.discard(name)
            else:
                return status.with_plugin(name)
        return Status.success()

    def run_score(self, state: CycleState, pod: Pod, table: NodeTable, *, timer: PointTimer | None = None) -> PodScores:
        """Score of every Score plugin over every row, after `run_pre_score`: one term per
        plugin, in order, but for a plugin that skipped and is not cluster-scoped (a skipped
        cluster-scoped one is kept, inactive with zero scores, to be asked again after
        placements); a plugin reading the feasible nodes gets a term without scores (scored at
        each decision)."""
        view = table.view()
        xp = view.xp
        skipped = state.skip_score_plugins
        scores = PodScores([], xp.zeros(table.rows, dtype=xp.int64))
        for plugin, weight in self.score:
            cluster = is_cluster_scoped(plugin)
            per_decision = needs_feasible_nodes(plugin)
            skip = plugin.name in skipped
            if skip and not cluster:
                continue
            raw = None
            if skip and not per_decision:
                raw = xp.zeros(table.rows, dtype=xp.int64)
            elif not per_decision:
                began = time.perf_counter()
                raw = plugin.score(state, pod, view, ALL_ROWS)
                if timer is not None:
                    timer(ExtensionPoint.SCORE, plugin.name, time.perf_counter() - began)
            term = ScoreTerm(
                plugin,
                weight,
                getattr(plugin, "normalize_score", None) is not None,
                is_placement_sensitive(plugin) and not cluster,
                raw,
                cluster=cluster,
                active=not skip,
                per_decision=per_decision,
            )
            scores.terms.append(term)
            if not term.normalizes and term.active and raw is not None:
                scores.base = scores.base + raw * weight
        return scores

    @staticmethod
    def run_score_rows(state: CycleState, pod: Pod, view: TableView, scores: PodScores, rows: Rows) -> None:
        """Score again over ``rows`` (the rows placements touched) of the placement-sensitive,
        row-local terms, in place. Untimed."""
        base = scores.base
        for term in scores.terms:
            if not term.sensitive or term.raw is None:
                continue
            new = term.plugin.score(state, pod, view, rows)
            if not term.normalizes:
                base[rows] += (new - term.raw[rows]) * term.weight
            term.raw[rows] = new

    @staticmethod
    def run_score_again(
        state: CycleState, pod: Pod, table: NodeTable, scores: PodScores, names: Container[str]
    ) -> None:
        """Score again over every row of the cluster-scoped terms in ``names``, after their
        PreScore ran again (`run_pre_score` with ``only``): active again unless it skipped. In
        place; untimed."""
        view = table.view()
        xp = view.xp
        for term in scores.terms:
            if not term.cluster or term.raw is None or term.plugin.name not in names:
                continue
            if not term.normalizes and term.active:
                scores.base = scores.base - term.raw * term.weight
            term.active = term.plugin.name not in state.skip_score_plugins
            term.raw = (
                term.plugin.score(state, pod, view, ALL_ROWS) if term.active else xp.zeros(table.rows, dtype=xp.int64)
            )
            if not term.normalizes and term.active:
                scores.base = scores.base + term.raw * term.weight

    def run_normalize_score(
        self,
        state: CycleState,
        pod: Pod,
        table: NodeTable,
        scores: PodScores,
        rows: NDArray[np.intp],
        *,
        explain: bool = False,
    ) -> tuple[Status, Array, list[tuple[ScoreTerm, Array, Array]]]:
        """The total score of each of ``rows`` (a host int array: the feasible rows being scored)
        as kube's RunScorePlugins gives it: PreScore (when the profile runs it at PreScore) and
        Score of the terms reading the feasible nodes over ``rows``, NormalizeScore of every
        normalizing term over ``rows``, each weighted, plus ``scores.base``. Returns (Status,
        int64 total per row, and with ``explain`` (term, raw, normalized) of every term scored).
        Not Success: a feasible-nodes PreScore failed, naming its plugin. Untimed."""
        xp = table.backend.xp
        d_rows = xp.asarray(rows)
        total = scores.base[d_rows]
        details: list[tuple[ScoreTerm, Array, Array]] = []
        for term in scores.terms:
            plugin = term.plugin
            if term.per_decision:
                status = (
                    plugin.pre_score_feasible(state, pod, table, rows)
                    if any(p is plugin for p in self.pre_score)
                    else Status.success()  # kube runs only the enabled PreScore plugins
                )
                if status.is_skip:
                    continue
                if not status.is_success:
                    return status.with_plugin(plugin.name), total, details
                raw = plugin.score(state, pod, table.view(), d_rows)
            elif not term.active or (not term.normalizes and not explain):
                continue
            else:
                raw = term.raw[d_rows]
            norm = plugin.normalize_score(state, pod, xp, raw) if term.normalizes else raw
            if term.normalizes or term.per_decision:
                total = total + norm * term.weight
            if explain:
                details.append((term, raw, norm))
        return Status.success(), total, details

    # -- the extension points that run one pod at a time ------------------------------------------

    @property
    def binds_plainly(self) -> bool:
        """No PreBind, PostBind or Bind plugin but DefaultBinder: binding is the store's bind
        alone (the binder's fast path)."""
        return not self.pre_bind and not self.post_bind and all(p.name == "DefaultBinder" for p in self.bind)

    def run_post_filter(self, state: CycleState, pod: Pod, diagnosis: FilterDiagnosis) -> PostFilterResult | None:
        """PostFilter after a failed Filter: plugins in order until one returns Success (the pod
        may fit later, e.g. after preemption) or Error; None when there is none or every one
        says Unschedulable. A plugin that raises is an Error result."""
        last: PostFilterResult | None = None
        for plugin in self.post_filter:
            try:
                result = plugin.post_filter(state, pod, diagnosis)
            except Exception as exc:
                _log.exception("event=%r plugin=%s pod=%s", "post_filter failed", plugin.name, pod.key)
                return PostFilterResult(Status.error(f"{plugin.name}: {exc!r}").with_plugin(plugin.name))
            result = replace(result, status=result.status.with_plugin(plugin.name))
            if result.status.is_success or result.status.code is Code.ERROR:
                return result
            last = result
        return last

    def run_add_pod(self, state: CycleState, pod: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status:
        """PreFilterExtensions.AddPod of every PreFilter plugin that has it, in order: the
        pod's CycleState as if ``pod_to_add`` ran on ``node_info``. The first failure is
        returned, naming its plugin. Plugins whose PreFilter said Skip for the pod are left
        out, as kube's RunPreFilterExtensionAddPod leaves them out."""
        for plugin in self.pre_filter:
            if isinstance(plugin, PreFilterExtensions) and plugin.name not in state.skip_filter_plugins:
                status = plugin.add_pod(state, pod, pod_to_add, node_info)
                if not status.is_success:
                    return status.with_plugin(plugin.name)
        return Status.success()

    def run_remove_pod(self, state: CycleState, pod: Pod, pod_to_remove: PodInfo, node_info: NodeInfo) -> Status:
        """PreFilterExtensions.RemovePod, as `run_add_pod` (a victim taken off the node)."""
        for plugin in self.pre_filter:
            if isinstance(plugin, PreFilterExtensions) and plugin.name not in state.skip_filter_plugins:
                status = plugin.remove_pod(state, pod, pod_to_remove, node_info)
                if not status.is_success:
                    return status.with_plugin(plugin.name)
        return Status.success()

    def run_reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Reserve plugins in order; the first failure runs Unreserve of all of them (reverse
        order) and is returned, naming its plugin."""
        for plugin in self.reserve:
            status = plugin.reserve(state, pod, node_info)
            if not status.is_success:
                self.run_unreserve(state, pod, node_info)
                return status.with_plugin(plugin.name)
        return Status.success()

    def run_unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        """Unreserve of every Reserve plugin, in reverse order: whatever failed after Reserve.
        Idempotent as the plugins are; a plugin that raises is logged and the others still run."""
        for plugin in reversed(self.reserve):
            try:
                plugin.unreserve(state, pod, node_info)
            except Exception:
                _log.exception("event=%r plugin=%s pod=%s", "unreserve failed", plugin.name, pod.key)

    async def run_unreserve_after(self, store: UnreserveStore, pod: Pod, node_name: str) -> None:
        """Unreserve for a failure outside the scheduling cycle (the binder's hand-back, the
        janitor's timeout): a fresh CycleState and the node as ``store`` has it; the plugins see
        the profile's waiting pods (a gang's members), and what they decide about them is
        applied. Nothing to do without Reserve plugins or an unknown node."""
        if not self.reserve:
            return
        node_info = await store.node_info(node_name)
        if node_info is None:
            return
        waiting = self.handle if isinstance(self.handle, WaitingPods) else None
        if waiting is not None and self.permit:
            waiting.load_states(await store.waiting_pods(self.scheduler_name))
        self.run_unreserve(CycleState(), pod, node_info)
        if waiting is not None:
            await store.apply_permit_decisions(waiting.take_decisions())

    def run_permit(self, state: CycleState, pod: Pod, node_name: str) -> PermitVerdict:
        """Permit plugins in order (kube's RunPermitPlugins): the first that rejects (or errs,
        or raises) decides; those that say Wait are waited on, each with its timeout (at most
        `MAX_PERMIT_TIMEOUT`); Success when none rejects or waits."""
        waiting: dict[str, float] = {}
        for plugin in self.permit:
            try:
                status, timeout = plugin.permit(state, pod, node_name)
            except Exception as exc:
                _log.exception("event=%r plugin=%s pod=%s", "permit failed", plugin.name, pod.key)
                return PermitVerdict(Status.error(f"{plugin.name}: {exc!r}").with_plugin(plugin.name))
            if status.is_wait:
                waiting[plugin.name] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT)
            elif not status.is_success:
                code = status.code if status.is_rejected else Code.ERROR
                return PermitVerdict(Status(code, status.reasons, plugin.name))
        if waiting:
            return PermitVerdict(Status.wait(f"waiting on {', '.join(sorted(waiting))}"), waiting)
        return PermitVerdict(Status.success())

    async def run_pre_bind(
        self, state: CycleState, pod: Pod, node_name: str, timer: PluginTimer | None = None
    ) -> Status:
        """PreBind plugins in order; the first that does not succeed is returned (Skip counts
        as success, as in kube)."""
        for plugin in self.pre_bind:
            status = await _call(plugin.name, ExtensionPoint.PRE_BIND, timer, plugin.pre_bind, state, pod, node_name)
            if not (status.is_success or status.is_skip):
                return status.with_plugin(plugin.name)
        return Status.success()

    async def run_bind(self, state: CycleState, pod: Pod, node_name: str, timer: PluginTimer | None = None) -> Status:
        """Bind plugins in order until one does not Skip; its Status decides (Success: the
        binding is recorded in the store). All Skip: an error, as in kube."""
        for plugin in self.bind:
            status = await _call(plugin.name, ExtensionPoint.BIND, timer, plugin.bind, state, pod, node_name)
            if not status.is_skip:
                return status.with_plugin(plugin.name)
        return Status.error("all bind plugins skipped the pod")

    async def run_post_bind(
        self, state: CycleState, pod: Pod, node_name: str, timer: PluginTimer | None = None
    ) -> None:
        """PostBind plugins in order, informational: a failure is logged."""
        for plugin in self.post_bind:
            try:
                result = plugin.post_bind(state, pod, node_name)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                _log.exception("event=%r plugin=%s pod=%s", "post_bind failed", plugin.name, pod.key)


async def _call(
    name: str, point: ExtensionPoint, timer: PluginTimer | None, fn: Callable[..., object], *args: object
) -> Status:
    """Run one plugin method (sync or a coroutine); a raise is an Error status."""
    started = time.perf_counter()
    try:
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await result
        status = result if isinstance(result, Status) else Status.error(f"{name}: returned {result!r}, not a Status")
    except Exception as exc:
        _log.exception("event=%r plugin=%s point=%s", "plugin failed", name, point.value)
        status = Status.error(f"{name}: {exc!r}")
    if timer is not None:
        timer(name, point, status, time.perf_counter() - started)
    return status


def go_list(items: Sequence[str]) -> str:
    """Go's %v of a []string: [a b c]."""
    return "[" + " ".join(items) + "]"
