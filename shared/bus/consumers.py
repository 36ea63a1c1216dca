"""Durable JetStream pull consumers: created once, shared by every replica that binds to them.

A service that takes work from a stream calls `ensure_pull_consumer` at start: it creates the
durable consumer with kubus' settings (explicit acks, bounded redeliveries) or brings an
existing one up to them, and returns a `kubus.bus.pull.PullConsumer` bound to it. Every replica of the
service does the same with the same name and shares the consumer (each message goes to one).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from kubus.bus.pull import PullConsumer
from kubus.core.errors import KubusError

__all__ = [
    "ACK_WAIT",
    "WATCHER_CONSUMER",
    "ConsumerConflictError",
    "MessageFaults",
    "consumer_name",
    "deliveries",
    "ensure_pull_consumer",
    "put_consumer",
    "redelivery_delay",
]

ACK_WAIT = 5.0
"""Seconds JetStream waits for an ack before delivering a message again, for the consumers whose
handlers report progress while they work (`kubus.bus.pull.in_progress_while`: the queue's,
the binders', the agents'). A delivery lost on its way (a NATS server dying, or handing a
consumer's leadership over in lame duck mode, as it sends) comes back this soon instead of
after JetStream's default 30 s, which held a pod that long."""

_NOT_UNIQUE_ON_WORK_QUEUE = 10100  # JetStream err_code: filtered consumer not unique on workqueue stream
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


class ConsumerConflictError(KubusError, RuntimeError):
    """JetStream refused the consumer: on a work-queue stream no two consumers may have
    overlapping filters, and another consumer's filter overlaps this one's."""


def consumer_name(*parts: str) -> str:
    """A durable consumer name from ``parts`` joined by ``-``: characters JetStream forbids in
    names (``.``, ``*``, ``>``, path separators, whitespace) and anything else outside
    ``[A-Za-z0-9_-]`` become ``_``. Distinct inputs may map to one name; callers pass names
    that are distinct after this mapping (node names are DNS subdomains: only ``.`` changes)."""
    return "-".join(_UNSAFE_NAME.sub("_", p) for p in parts)


WATCHER_CONSUMER = "kubus-watcher"
"""The watcher's durable consumer on KUBUS_EVENTS: the events it reports to the apiserver."""


def agent_consumer(node: str | None) -> str:
    """The durable consumer on KUBUS_NODES of the agent of ``node`` (filtered on its pods'
    subject), or of an agent simulating many nodes (None; filtered on every node's)."""
    return "kubus-agent-simulated" if node is None else consumer_name("kubus-agent", node)


async def ensure_pull_consumer(
    nc: NATS,
    js: JetStreamContext,
    stream: str,
    durable: str,
    filter_subject: str = "",
    *,
    filter_subjects: Sequence[str] = (),
    ack_wait: float = 30.0,
    max_deliver: int = -1,
    max_ack_pending: int = 10_000,
    description: str = "",
) -> PullConsumer:
    """Create (or update to these settings) the durable pull consumer ``durable`` on ``stream``
    and return a `PullConsumer` of it, subscribed (on ``nc``, the connection of ``js``).

    ``max_deliver`` -1 (the default): JetStream delivers a message until it is acked or
    terminated. Its delivery count also counts the deliveries a server outage failed, so the
    service decides when to give up on a message itself (`MessageFaults`), not the server.

    ``filter_subjects``: several subjects (NATS 2.10) instead of the one ``filter_subject``.

    Idempotent, and safe from several replicas at once: creating an identical consumer is a
    no-op for JetStream, and a differing one is updated (ack_wait, max_deliver, max_ack_pending
    and the filter can change in place). Raises ConsumerConflictError when the stream is a
    work queue and another consumer's filter overlaps ``filter_subject`` (the message names
    both), nats.js.errors.APIError for other refusals.
    """
    config = ConsumerConfig(
        name=durable,
        durable_name=durable,
        description=description or None,
        filter_subject=filter_subject or None,
        filter_subjects=list(filter_subjects) or None,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        max_ack_pending=max_ack_pending,
    )
    await put_consumer(js, stream, config)
    consumer = await PullConsumer(nc, stream, durable).subscribe()
    consumer.config = config
    return consumer


async def put_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create the consumer ``config`` describes on ``stream``, or bring it back to ``config``
    (a consumer someone changed is put back). Raises as `ensure_pull_consumer`."""
    try:
        await js.add_consumer(stream, config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != _NOT_UNIQUE_ON_WORK_QUEUE:
            raise
        raise ConsumerConflictError(
            f"stream {stream}: consumer {config.durable_name!r} (filter {config.filter_subject}) overlaps another "
            f"consumer's filter, and {stream} is a work queue ({exc.description}); list the consumers with "
            f"`nats consumer ls {stream}` and delete the one that no longer runs"
        ) from exc


def redelivery_delay(num_delivered: int, *, base: float = 0.5, cap: float = 15.0) -> float:
    """Seconds to wait before a retryable message is delivered again (``nak(delay)``): ``base``
    after the first delivery, doubling per delivery, at most ``cap``."""
    return min(cap, base * 2.0 ** max(0, num_delivered - 1))


def deliveries(msg: Msg) -> int:
    """How many times JetStream has delivered ``msg`` (1 the first time; 1 when it cannot say)."""
    try:
        return int(msg.metadata.num_delivered) or 1
    except Exception:
        return 1


class MessageFaults:
    """When to give up on a message: after ``limit`` failures of its own handling (a bug, a
    state that does not come right), counted per message (its stream sequence). Failures
    because a server is away are not the message's fault and are not counted: JetStream's
    delivery count, which counts them too, would give up on acknowledged work during an outage.

    In memory, at most ``size`` messages (the oldest forgotten): a restarted service counts
    again from zero, so a message gets more tries, never fewer."""

    __slots__ = ("_counts", "limit", "size")

    def __init__(self, limit: int, *, size: int = 100_000) -> None:
        if limit < 1:
            raise ValueError(f"a message is tried at least once, not {limit} times")
        self.limit = limit
        self.size = size
        self._counts: OrderedDict[int, int] = OrderedDict()

    def failed(self, msg: Msg) -> int:
        """Count one failure of ``msg``; how many it has had (this one included)."""
        key = _sequence(msg)
        if key is None:  # not a JetStream message: its deliveries are all there is
            return deliveries(msg)
        count = self._counts.pop(key, 0) + 1
        self._counts[key] = count
        while len(self._counts) > self.size:
            self._counts.popitem(last=False)
        return count

    def exhausted(self, msg: Msg) -> bool:
        """Count one failure of ``msg``; True when that was its last try (it is forgotten)."""
        if self.failed(msg) < self.limit:
            return False
        key = _sequence(msg)
        if key is not None:
            self._counts.pop(key, None)
        return True


def _sequence(msg: Msg) -> int | None:
    try:
        return int(msg.metadata.sequence.stream)
    except Exception:
        return None
