"""One BindRequest in a binder's hands: the request as delivered, checked (`check_request`), its
binding cycle's state, and what became of it (`BindResult`, the ``result`` label of
scheduler_binding_duration_seconds)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from nats.aio.msg import Msg

from kubus.api.objects import Pod
from kubus.bus.messages import BindRequest, MessageError
from kubus.core.metrics import Metrics
from kubus.framework.cycle_state import CycleState
from kubus.framework.runtime import Framework
from kubus.runtime.service import StructuredLogger

__all__ = ["BindResult", "Work", "check_request", "framework_of", "request_log"]


class BindResult(StrEnum):
    """What became of one BindRequest: the ``result`` label of scheduler_binding_duration_seconds."""

    BOUND = "bound"
    """Bound now, or found bound already (a redelivery); the agent has its assignment."""
    ABANDONED = "abandoned"
    """The attempt was given up by someone else (no reservation of this attempt): dropped."""
    DELETED = "deleted"
    """The pod was deleted meanwhile: its room was released."""
    CONFLICT = "conflict"
    """The pod moved on (bound elsewhere, a newer attempt): this attempt's room was released."""
    HANDED_BACK = "handed_back"
    """Permit rejected, or retries exhausted: room given back, pod Pending again, queue told."""
    RETRY = "retry"
    """A transient error: nak'ed, to be delivered again."""


@dataclass(slots=True)
class Work:
    """One BindRequest being handled."""

    msg: Msg
    request: BindRequest
    started_at: float
    """perf_counter() when its batch was taken up (scheduler_binding_duration_seconds)."""
    result: BindResult | None = None
    """Set when it is done (acked, nak'ed or handed back)."""
    pod: Pod | None = None
    """The pod, read from the request when binding plugins need it."""
    cycle_state: CycleState = field(default_factory=CycleState)
    """The binding cycle's state, shared by its PreBind, Bind and PostBind plugins."""

    def finish(self, result: BindResult, metrics: Metrics) -> None:
        """Done, with ``result``: recorded in scheduler_binding_duration_seconds."""
        self.result = result
        metrics.binding_duration.labels(result=str(result)).observe(time.perf_counter() - self.started_at)


def check_request(request: BindRequest) -> None:
    """MessageError for a BindRequest no binder can act on."""
    for name in ("uid", "key", "node", "profile"):
        if not getattr(request, name):
            raise MessageError(f"BindRequest.{name}: empty")
    if "/" not in request.key:
        raise MessageError(f"BindRequest.key: {request.key!r} is not namespace/name")
    if request.attempt < 0:
        raise MessageError(f"BindRequest.attempt: negative ({request.attempt})")
    if any(d < 0 for d in request.gpu_devices):
        raise MessageError(f"BindRequest.gpu_devices: negative index in {list(request.gpu_devices)}")


_PLAIN = Framework()
"""A profile the binder has no configuration for: the store's bind alone."""


def framework_of(frameworks: Mapping[str, Framework], request: BindRequest) -> Framework:
    """The framework of the request's profile; one that binds with the store's bind alone for a
    profile not in ``frameworks``."""
    return frameworks.get(request.profile) or _PLAIN


def request_log(log: StructuredLogger, request: BindRequest) -> StructuredLogger:
    """``log`` with the request's pod, uid, node and attempt bound."""
    return log.bind(pod=request.key, uid=request.uid, node=request.node, attempt=request.attempt)
