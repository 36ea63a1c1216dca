"""What scheduling one pod gives: the ScheduleResult, and with ``explain`` why each node was or
was not chosen (NodeExplain, ScoreDetail)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import PodInfo

__all__ = ["NodeExplain", "ScheduleResult", "ScoreDetail"]


@dataclass(frozen=True, slots=True)
class ScoreDetail:
    raw: int
    normalized: int
    weighted: int


@dataclass(frozen=True, slots=True)
class NodeExplain:
    """Why one node was or was not chosen for one pod."""

    filter: str
    """"ok", or "<Plugin>: <reason>[, <reason>]" from the first plugin that rejected the node."""
    scores: dict[str, ScoreDetail] = field(default_factory=dict)
    total: int | None = None
    """None when the node was not scored (rejected, not sampled, or the only feasible node)."""


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    pod: Pod
    node: str | None
    """The chosen node; None when the pod is unschedulable."""
    status: Status
    message: str = ""
    """kube's FitError text for an unschedulable pod: "0/N nodes are available: ..."."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Reason -> number of nodes rejected for it (the histogram behind `message`)."""
    gpu_devices: tuple[int, ...] = ()
    explain: dict[str, NodeExplain] | None = None
    plugins: tuple[str, ...] = ()
    """The plugins that rejected the pod (sorted): the filter plugins that rejected some node, the
    PreFilter plugin that rejected it, or the Reserve or Permit plugin that failed; empty when
    placed (and for an empty cluster). The queue's QueueingHints key on them."""
    state: CycleState | None = None
    """Placed: the pod's CycleState after Reserve, for what runs next (Permit, Unreserve)."""
    nominated_node: str = ""
    """The node a PostFilter plugin nominated (preemption), if any."""
    preempted: tuple[PodInfo, ...] = ()
    """Placed by preemption: the pods evicted from `node` to make room (already forgotten in
    the table). The cycle evicts them and reserves for the pod in one store step."""
    waiting_on: Mapping[str, float] = field(default_factory=dict)
    """Placed, with ``run_permit``: the Permit plugins it waits on, with their timeouts."""
    pod_info: PodInfo | None = None
    """Placed: the PodInfo the table accounts on `node` (what a reservation of it holds)."""

    @property
    def scheduled(self) -> bool:
        return self.node is not None
