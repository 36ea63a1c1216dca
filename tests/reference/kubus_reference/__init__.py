"""kubus_reference: the in-tree plugins written the kube-scheduler way, one node at a time, and a
plain scheduler that runs them as kube's schedule_one.go does (`ReferenceScheduler`).

Not part of the kubus distribution: its own (tests/reference, installed into the development
virtualenv by the Makefile, as the test plugins are), so the oracle never ships. Each plugin mirrors
kube-scheduler's plugin of the same name (reason strings, integer and float64 arithmetic in Go's
order); GPUFit is kubus's own. They are the oracle the vectorized plugins of `kubus.plugins` are
tested against (so they share no code with them beyond `kubus.api`'s specs), the baseline of the
benchmark, and an example of plugins written to `kubus.framework.nodewise`'s Protocols (they plug
into the vectorized framework through `kubus.framework.adapter`).
"""

from __future__ import annotations

from typing import Any

from kubus.framework.config import ProfileConfig
from kubus.framework.nodewise import (
    FilterPlugin,
    NormalizeScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from kubus.framework.registry import ExtensionPoint

# Plugins that look at no node are the same in both forms: one implementation.
from kubus.plugins.default_binder import DefaultBinder
from kubus.plugins.priority_sort import PrioritySort, QueuedPodInfo
from kubus.plugins.scheduling_gates import SchedulingGates
from kubus_reference.balanced_allocation import NodeResourcesBalancedAllocation
from kubus_reference.gpu_fit import GPUFit, pick_gpu_devices, reserve_gpu_devices
from kubus_reference.image_locality import ImageLocality
from kubus_reference.inter_pod_affinity import InterPodAffinity
from kubus_reference.node_affinity import NodeAffinity
from kubus_reference.node_name import NodeName
from kubus_reference.node_ports import NodePorts
from kubus_reference.node_resources_fit import NodeResourcesFit
from kubus_reference.node_unschedulable import NodeUnschedulable
from kubus_reference.pod_topology_spread import PodTopologySpread
from kubus_reference.scheduler import (
    PluginScore,
    ReferenceProfile,
    ReferenceResult,
    ReferenceScheduler,
    fit_error_message,
    num_feasible_nodes_to_find,
)
from kubus_reference.taint_toleration import TaintToleration

ALL_PLUGINS = (
    SchedulingGates,
    PrioritySort,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    PodTopologySpread,
    InterPodAffinity,
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

    def at(point: ExtensionPoint) -> tuple[Any, ...]:
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
    "InterPodAffinity",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "NormalizeScorePlugin",
    "PluginScore",
    "PodTopologySpread",
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
