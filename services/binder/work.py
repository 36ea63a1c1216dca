"""One BindRequest in a binder's hands: the request as delivered (its share of the message it came
in: `Delivery`, `Part`), checked (`check_request`), its binding cycle's state, and what became of
it (`BindResult`, the ``result`` label of scheduler_binding_duration_seconds)."""

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

__all__ = ["BindResult", "Delivery", "Part", "Work", "check_request", "framework_of", "request_log"]


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


class Delivery:
    """One delivered `BindRequests` message, settled once each request it carries is: nak'ed
    with the longest delay asked when any asked to be tried again, so the message comes back
    whole (its requests bound already are found bound, and announced again); terminated when
    every one was (nothing more to try); else acked. `part` gives each request its share."""

    __slots__ = ("_delay", "_open", "_retry", "_terms", "msg", "requests")

    def __init__(self, msg: Msg, requests: int) -> None:
        self.msg = msg
        self.requests = requests
        self._open = requests
        self._terms = 0
        self._retry = False
        self._delay: float | None = None

    def part(self, index: int) -> Part:
        """The share of the message's request ``index``."""
        return Part(self, index)

    async def _settle(self, verb: str, delay: float | None) -> None:
        self._open -= 1
        if verb == "nak":
            self._retry = True
            if delay is not None:
                self._delay = delay if self._delay is None else max(self._delay, delay)
        elif verb == "term":
            self._terms += 1
        if self._open > 0:
            return
        if self._retry:
            await self.msg.nak(delay=self._delay)
        elif self._terms == self.requests:
            await self.msg.term()
        else:
            await self.msg.ack()


class Part:
    """One request's share of its `Delivery`: what its binding cycle acks, naks or terminates
    (once: a second settling changes nothing)."""

    __slots__ = ("delivery", "index", "settled")

    def __init__(self, delivery: Delivery, index: int) -> None:
        self.delivery = delivery
        self.index = index
        """The request's place in its message (its failures are counted on their own)."""
        self.settled = False

    @property
    def msg(self) -> Msg:
        """The message the request came in."""
        return self.delivery.msg

    async def ack(self) -> None:
        await self._settle("ack")

    async def nak(self, delay: float | None = None) -> None:
        await self._settle("nak", delay)

    async def term(self) -> None:
        await self._settle("term")

    async def _settle(self, verb: str, delay: float | None = None) -> None:
        if not self.settled:
            self.settled = True
            await self.delivery._settle(verb, delay)


@dataclass(slots=True)
class Work:
    """One BindRequest being handled."""

    msg: Part
    """Its share of the message it came in: acked, nak'ed or terminated when it is done."""
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
