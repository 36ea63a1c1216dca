"""The extension points of a nodewise (kube-style, one node at a time) plugin, as Protocols.

A plugin implements any of them; `name` is kube's plugin name. `state` is the pod's
CycleState for this scheduling cycle; `nodes` are NodeInfos (all of them for PreFilter, the
feasible ones for PreScore); `scores` maps node name -> score and is normalized in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.nodeinfo import NodeInfo
from kubus.framework.status import Status


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
