"""The extension points of a nodewise plugin (kube-style, one node at a time), as Protocols.

Such a plugin plugs into the vectorized framework through `kubus.framework.adapter`
(`nodewise_spec`); `kubus_reference` (tests/reference, not shipped) holds kube's in-tree
plugins written this way.

Plugin shape: a class with `name: ClassVar[str]`, constructed as `Plugin(args=None,
handle=None)` (args: the plugin's args dataclass, or None for kube's defaults), with any of
the methods below. A plugin that needs every node of the cycle (kube reaches them through its
framework handle) reads them from the cycle state under SNAPSHOT_STATE_KEY, which the adapter
and the reference scheduler write before PreFilter.

A plugin implements any of them; `name` is kube's plugin name. `state` is the pod's
CycleState for this scheduling cycle; `nodes` are NodeInfos (all of them for PreFilter, the
feasible ones for PreScore); `scores` maps node name -> score and is normalized in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo


class Plugin(Protocol):
    name: ClassVar[str]


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        """The node names the pod may go to (None: any) and a Status; Skip drops this plugin's
        Filter for the pod."""
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip drops this plugin's Score for the pod."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int: ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize_score(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status: ...


__all__ = [
    "FilterPlugin",
    "NormalizeScorePlugin",
    "Plugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "ReservePlugin",
    "ScorePlugin",
]
