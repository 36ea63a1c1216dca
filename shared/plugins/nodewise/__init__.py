"""The in-tree plugins written the kube-scheduler way, one node at a time, and a plain scheduler.

Each plugin mirrors kube-scheduler's plugin of the same name (reason strings, integer and
float64 arithmetic in Go's order); GPUFit is kubus's own. They are the oracle the vectorized
plugins in `kubus.plugins` are tested against, the baseline of the benchmark, and an example of
a kube-style plugin (it plugs into the vectorized framework through
`kubus.framework.adapter`). `ReferenceScheduler` runs them as kube's schedule_one.go does.

Plugin shape (the Protocols of `kubus.plugins.nodewise.interface`): a class with
`name: ClassVar[str]`, constructed as `Plugin(args=None, handle=None)` (args: the plugin's args
dataclass, or None for kube's defaults), with any of

    pre_filter(state, pod, nodes) -> (frozenset[str] | None, Status)
    filter(state, pod, node_info) -> Status
    pre_score(state, pod, nodes) -> Status
    score(state, pod, node_info) -> int
    normalize_score(state, pod, scores: dict[str, int]) -> None      (in place)
    reserve(state, pod, node_info) -> Status / unreserve(state, pod, node_info)

A plugin that needs every node of the cycle (kube reaches them through its framework handle)
reads them from the cycle state under SNAPSHOT_STATE_KEY, which the scheduler writes before
PreFilter (ImageLocality does, for the spread of images).
"""

from __future__ import annotations

from kubus.framework.config import ProfileConfig
from kubus.framework.registry import ExtensionPoint

# Plugins that look at no node are the same in both forms: one implementation.
from kubus.plugins.default_binder import DefaultBinder
from kubus.plugins.nodewise.balanced_allocation import NodeResourcesBalancedAllocation
from kubus.plugins.nodewise.gpu_fit import GPUFit, pick_gpu_devices, reserve_gpu_devices
from kubus.plugins.nodewise.image_locality import ImageLocality
from kubus.plugins.nodewise.interface import (
    FilterPlugin,
    NormalizeScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from kubus.plugins.nodewise.node_affinity import NodeAffinity
from kubus.plugins.nodewise.node_name import NodeName
from kubus.plugins.nodewise.node_ports import NodePorts
from kubus.plugins.nodewise.node_resources_fit import NodeResourcesFit
from kubus.plugins.nodewise.node_unschedulable import NodeUnschedulable
from kubus.plugins.nodewise.scheduler import (
    PluginScore,
    ReferenceProfile,
    ReferenceResult,
    ReferenceScheduler,
    fit_error_message,
    num_feasible_nodes_to_find,
)
from kubus.plugins.nodewise.taint_toleration import TaintToleration
from kubus.plugins.priority_sort import PrioritySort, QueuedPodInfo
from kubus.plugins.scheduling_gates import SchedulingGates

ALL_PLUGINS = (
    SchedulingGates,
    PrioritySort,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    NodeResourcesBalancedAllocation,
    ImageLocality,
    GPUFit,
    DefaultBinder,
)
"""Every nodewise plugin class, in kube's default plugin order (GPUFit after the in-tree ones)."""


def reference_profile(profile: ProfileConfig, percentage_of_nodes_to_score: int | None = None) -> ReferenceProfile:
    """The nodewise plugins of a configured profile (same plugins, order, args and weights), for
    the reference scheduler. Raises KeyError for a plugin that has no nodewise version."""
    classes = {cls.name: cls for cls in ALL_PLUGINS}
    instances: dict[str, object] = {}

    def at(point: ExtensionPoint) -> tuple:
        return tuple(
            instances.setdefault(r.name, classes[r.name](profile.plugin_args.get(r.name)))
            for r in profile.plugins.get(point, ())
        )

    weights = {r.name: r.weight for r in profile.plugins.get(ExtensionPoint.SCORE, ())}
    pct = profile.percentage_of_nodes_to_score
    return ReferenceProfile(
        pre_filter=at(ExtensionPoint.PRE_FILTER),
        filter=at(ExtensionPoint.FILTER),
        pre_score=at(ExtensionPoint.PRE_SCORE),
        score=tuple((p, weights[p.name]) for p in at(ExtensionPoint.SCORE)),
        reserve=at(ExtensionPoint.RESERVE),
        percentage_of_nodes_to_score=pct if pct is not None else percentage_of_nodes_to_score,
    )


__all__ = [
    "ALL_PLUGINS",
    "DefaultBinder",
    "FilterPlugin",
    "GPUFit",
    "ImageLocality",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "NormalizeScorePlugin",
    "PluginScore",
    "PreFilterPlugin",
    "PreScorePlugin",
    "PrioritySort",
    "QueuedPodInfo",
    "ReferenceProfile",
    "ReferenceResult",
    "ReferenceScheduler",
    "ReservePlugin",
    "SchedulingGates",
    "ScorePlugin",
    "TaintToleration",
    "fit_error_message",
    "num_feasible_nodes_to_find",
    "pick_gpu_devices",
    "reference_profile",
    "reserve_gpu_devices",
]
