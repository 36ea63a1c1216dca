"""Framework: one scheduler profile, its plugins instantiated and ordered per extension point,
and the runs of the extension points that are not array kernels (PostFilter, Reserve/Unreserve,
Permit, PreBind, Bind, PostBind), in kube's order and with kube's rules, for whichever process
runs them (the cycle, the binder, the janitor, `kubus simulate`)."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from kubus.api.objects import Pod
from kubus.framework.config import ProfileConfig
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import (
    BindPlugin,
    FilterDiagnosis,
    FilterPlugin,
    PermitPlugin,
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
    ScorePlugin,
)
from kubus.framework.registry import ExtensionPoint
from kubus.framework.status import Code, Status
from kubus.framework.waiting import WaitingPods

if TYPE_CHECKING:
    from kubus.framework.registry import Registry
    from kubus.kernels.nodeinfo import NodeInfo, PodInfo

__all__ = ["MAX_PERMIT_TIMEOUT", "Framework", "PermitVerdict", "PluginTimer", "UnreserveStore"]

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""Seconds a Permit plugin may make a pod wait at most (kube's maxTimeout)."""

PluginTimer = Callable[[str, ExtensionPoint, Status, float], None]
"""Called after each plugin run with (plugin, extension point, status, seconds): metrics."""

_log = logging.getLogger("kubus.framework")


class UnreserveStore(Protocol):
    """What `Framework.run_unreserve_after` reads and writes (`kubus.store.ClusterState` is one)."""

    async def node_info(self, name: str) -> NodeInfo | None: ...

    async def waiting_pods(self, profile: str) -> Sequence[Any]: ...

    async def apply_permit_decisions(self, decisions: Iterable[Any]) -> None: ...


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
    plugins: Mapping[str, Any] = field(default_factory=dict)
    """Every plugin instance of the profile by name."""
    handle: Any = None
    """What the plugins' factories got (a `kubus.framework.waiting.WaitingPods`, or None)."""

    @classmethod
    def from_profile(
        cls,
        profile: ProfileConfig,
        registry: Registry,
        *,
        percentage_of_nodes_to_score: int | None = None,
        handle: Any = None,
    ) -> Framework:
        """Instantiate a profile's plugins from the registry (one instance per plugin name).

        The profile's own percentageOfNodesToScore wins over the global one, as in kube.
        """
        instances: dict[str, Any] = {}

        def get(name: str) -> Any:
            if name not in instances:
                spec = registry.get(name)
                instances[name] = spec.factory(profile.plugin_args.get(name), handle)
            return instances[name]

        def at(point: ExtensionPoint) -> Sequence[Any]:
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
    name: str, point: ExtensionPoint, timer: PluginTimer | None, fn: Callable[..., Any], *args: Any
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
