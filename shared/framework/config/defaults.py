"""kube's default plugins, and which of them kubus leaves out (and why)."""

from __future__ import annotations

from collections.abc import Mapping

from kubus.framework.config.model import PluginRef

KUBE_DEFAULT_PLUGINS: tuple[PluginRef, ...] = (
    PluginRef("SchedulingGates"),
    PluginRef("PrioritySort"),
    PluginRef("NodeUnschedulable"),
    PluginRef("NodeName"),
    PluginRef("TaintToleration", 3),
    PluginRef("NodeAffinity", 2),
    PluginRef("NodePorts"),
    PluginRef("NodeResourcesFit", 1),
    PluginRef("VolumeRestrictions"),
    PluginRef("NodeVolumeLimits"),
    PluginRef("VolumeBinding"),
    PluginRef("VolumeZone"),
    PluginRef("PodTopologySpread", 2),
    PluginRef("InterPodAffinity", 2),
    PluginRef("DefaultPreemption"),
    PluginRef("NodeResourcesBalancedAllocation", 1),
    PluginRef("ImageLocality", 1),
    PluginRef("DefaultBinder"),
)
"""kube's `getDefaultPlugins()` multiPoint list with its weights (feature gates off: newer kube
also inserts DynamicResources and NodeDeclaredFeatures, which kubus does not have either)."""

OMITTED_KUBE_DEFAULT_PLUGINS: Mapping[str, str] = {
    "VolumeRestrictions": "kubus does not model volumes",
    "NodeVolumeLimits": "kubus does not model volumes",
    "VolumeBinding": "kubus does not model volumes",
    "VolumeZone": "kubus does not model volumes",
}
"""kube default plugins that kubus's default set leaves out, and why."""

DEFAULT_PLUGINS: tuple[PluginRef, ...] = tuple(
    p for p in KUBE_DEFAULT_PLUGINS if p.name not in OMITTED_KUBE_DEFAULT_PLUGINS
)
"""kubus's default multiPoint set: KUBE_DEFAULT_PLUGINS in kube's order, less the omitted ones."""

KUBE_IN_TREE_PLUGINS: frozenset[str] = frozenset(
    [p.name for p in KUBE_DEFAULT_PLUGINS] + ["DynamicResources", "NodeDeclaredFeatures"]
)
"""kube's in-tree plugin names: `pluginConfig` for one the registry lacks is accepted and ignored
(a kube config configuring, say, PodTopologySpread still loads)."""

REMOVED_PLUGINS: frozenset[str] = frozenset(["AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"])
"""Plugins kube's v1 validation rejects as removed (validation.go invalidPluginsByVersion)."""
