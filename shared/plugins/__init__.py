"""The in-tree plugins, vectorized over the node table, and the registry that names them.

Each plugin matches kube-scheduler's plugin of the same name (results, reasons, scores);
GPUFit is kubus's own; Coscheduling is scheduler-plugins' (gang scheduling), enabled by a
profile, never by default. `kubus_reference` (tests/reference, not shipped) holds the same
plugins written one node at a time, the kube way: the reference the tests compare against and
the benchmark's baseline.
"""

from __future__ import annotations

from kubus.framework.registry import ENTRY_POINT_GROUP, Registry, load_entry_point_plugins
from kubus.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from kubus.plugins.coscheduling import Coscheduling
from kubus.plugins.default_binder import DefaultBinder
from kubus.plugins.default_preemption import DefaultPreemption
from kubus.plugins.gpu_fit import GPUFit
from kubus.plugins.image_locality import ImageLocality
from kubus.plugins.inter_pod_affinity import InterPodAffinity
from kubus.plugins.node_affinity import NodeAffinity
from kubus.plugins.node_name import NodeName
from kubus.plugins.node_ports import NodePorts
from kubus.plugins.node_resources_fit import NodeResourcesFit
from kubus.plugins.node_unschedulable import NodeUnschedulable
from kubus.plugins.pod_topology_spread import PodTopologySpread
from kubus.plugins.priority_sort import PrioritySort, QueuedPodInfo
from kubus.plugins.scheduling_gates import SchedulingGates
from kubus.plugins.taint_toleration import TaintToleration

IN_TREE = (
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
    DefaultPreemption,
    NodeResourcesBalancedAllocation,
    ImageLocality,
    DefaultBinder,
    GPUFit,
    Coscheduling,
)


def in_tree_registry(*, entry_points: bool = False) -> Registry:
    """A registry of the in-tree plugins; with `entry_points`, plus the out-of-tree plugins
    installed under the `kubus.plugins` entry-point group."""
    registry = Registry(IN_TREE)
    if entry_points:
        load_entry_point_plugins(registry, ENTRY_POINT_GROUP)
    return registry


__all__ = [
    "IN_TREE",
    "Coscheduling",
    "DefaultBinder",
    "DefaultPreemption",
    "GPUFit",
    "ImageLocality",
    "InterPodAffinity",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "PodTopologySpread",
    "PrioritySort",
    "QueuedPodInfo",
    "SchedulingGates",
    "TaintToleration",
    "in_tree_registry",
]
