"""kubus.framework: kube-scheduler's framework with vectorized Filter and Score.

Extension-point interfaces, Status, CycleState, NodeInfo, the plugin registry, scheduler
configuration (KubeSchedulerConfiguration), a profile's instantiated plugins (Framework) and
the scheduling algorithm (Scheduler).
"""

from typing import TYPE_CHECKING, Any

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
from kubus.framework.nodeinfo import NodeInfo, PodInfo
from kubus.framework.registry import ExtensionPoint, PluginSpec, Registry, RegistryError
from kubus.framework.status import Code, Status

if TYPE_CHECKING:
    from kubus.framework.adapter import NodewisePlugin, nodewise_spec
    from kubus.framework.runtime import Framework
    from kubus.framework.scheduling import NodeExplain, Scheduler, ScheduleResult, ScoreDetail

# These sit above kubus.kernels (which itself needs NodeInfo from here): imported on first use,
# so that importing kubus.kernels first does not loop back into a half-built kubus.framework.
_LAZY = {
    "NodewisePlugin": "kubus.framework.adapter",
    "nodewise_spec": "kubus.framework.adapter",
    "Framework": "kubus.framework.runtime",
    "NodeExplain": "kubus.framework.scheduling",
    "ScheduleResult": "kubus.framework.scheduling",
    "Scheduler": "kubus.framework.scheduling",
    "ScoreDetail": "kubus.framework.scheduling",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kubus.framework' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ALL_ROWS",
    "MAX_NODE_SCORE",
    "Code",
    "ConfigError",
    "CycleState",
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
