"""kubus.framework: kube-scheduler's framework with vectorized Filter and Score.

Extension-point interfaces (vectorized, and one node at a time: `kubus.framework.nodewise`, with
its adapter), Status, CycleState, the plugin registry, scheduler configuration
(KubeSchedulerConfiguration), a profile's instantiated plugins (Framework) and the scheduling
algorithm (Scheduler). The framework sits above `kubus.kernels` (the node table, NodeInfo) and
`kubus.api`; neither imports it.
"""

from kubus.framework.adapter import NodewisePlugin, nodewise_spec
from kubus.framework.config import (
    ConfigError,
    PluginRef,
    ProfileConfig,
    SchedulerConfiguration,
    default_config,
    load_config,
    num_feasible_nodes_to_find,
)
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import ALL_ROWS, MAX_NODE_SCORE, FilterResult, Rejection
from kubus.framework.queueing_hints import (
    ClusterEventWithHint,
    EnqueueExtensions,
    QueueingHint,
    QueueingHintFn,
)
from kubus.framework.registry import ExtensionPoint, PluginSpec, Registry, RegistryError
from kubus.framework.results import NodeExplain, ScheduleResult, ScoreDetail
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo

__all__ = [
    "ALL_ROWS",
    "MAX_NODE_SCORE",
    "ClusterEventWithHint",
    "Code",
    "ConfigError",
    "CycleState",
    "EnqueueExtensions",
    "ExtensionPoint",
    "FilterResult",
    "Framework",
    "NodeExplain",
    "NodeInfo",
    "NodewisePlugin",
    "PluginRef",
    "PluginSpec",
    "PodInfo",
    "ProfileConfig",
    "QueueingHint",
    "QueueingHintFn",
    "Registry",
    "RegistryError",
    "Rejection",
    "ScheduleResult",
    "Scheduler",
    "SchedulerConfiguration",
    "ScoreDetail",
    "Status",
    "default_config",
    "load_config",
    "nodewise_spec",
    "num_feasible_nodes_to_find",
]
