"""Batches from a durable JetStream pull consumer, without a task and a timer per message.

nats-py's ``PullSubscription.fetch`` waits for each message of a batch with a task and a
``wait_for`` of its own: in profiles of the services, that was about half of the client's CPU
per message fetched. `PullConsumer.fetch` speaks the same protocol to the server (JetStream's
``CONSUMER.MSG.NEXT`` requests, as nats-py sends them) and hands each delivered message to one
callback, with one wait per fetch:

- messages left over from an earlier request come first;
- then one request for the rest of the batch, ``no_wait``: the server delivers what it has at
  once and ends the request with a status (404 no messages, 408 request timeout). With nothing
  at hand the request also ``expires`` after the timeout, so the server holds it until a
  message comes;
- the fetch returns when the batch is full, or when the server ended the request and at least
  one message came; with none, a request the server ended early is made again lingering for
  what is left of the timeout; TimeoutError when none came in time.

The messages are nats-py's own `Msg`: ``ack``, ``nak``, ``in_progress``, ``term`` and
``metadata`` work on them as on fetched ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig

__all__ = ["PullConsumer", "in_progress_while"]

_STATUS = "Status"
_HEARTBEAT = "100"
_REQUEST_ENDED = frozenset({"404", "408", "409"})
"""No messages, request timeout, conflict (e.g. too many waiting requests): the request is over,
nothing is wrong (nats-py's temporary errors)."""
_EXPIRES_MARGIN_NS = 100_000
"""The request expires this much before the fetch gives up, as nats-py's do."""


class PullConsumer:
    """Fetches batches from the durable pull consumer ``consumer`` of ``stream`` (created by
    whoever calls this; see `kubus.bus.consumers.ensure_pull_consumer`). `subscribe` first;
    `unsubscribe` when done (idempotent)."""

    __slots__ = ("_closed", "_ended", "_error", "_inbox", "_nc", "_next", "_ready", "_sub", "_wake", "config", "stream")

    def __init__(self, nc: NATS, stream: str, consumer: str, *, api_prefix: str = "$JS.API") -> None:
        self.stream = stream
        self.config: ConsumerConfig | None = None
        """The consumer's config, when `ensure_pull_consumer` made it (to put it back later)."""
        self._nc = nc
        self._next = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._ready: deque[Msg] = deque()
        """Messages delivered and not yet handed out by a fetch."""
        self._ended = 0
        """Requests the server ended (a status), counted: a fetch compares before and after."""
        self._error: Msg | None = None
        """The last status that was not a request ending (an error the server replied)."""
        self._wake: asyncio.Future[None] | None = None
        self._closed = False

    async def subscribe(self) -> PullConsumer:
        """Start receiving on this consumer's inbox. Returns itself."""
        if self._closed:
            raise RuntimeError("PullConsumer.subscribe after unsubscribe()")
        if self._sub is None:
            self._sub = await self._nc.subscribe(self._inbox, cb=self._deliver)
        return self

    async def unsubscribe(self) -> None:
        """Stop receiving; messages delivered and not fetched are left to be redelivered. Idempotent."""
        sub, self._sub = self._sub, None
        self._closed = True
        self._ready.clear()
        if sub is not None:
            await sub.unsubscribe()
        self._wake_up()

    async def fetch(self, batch: int = 1, timeout: float = 5.0) -> list[Msg]:
        """Up to ``batch`` messages: waits at most ``timeout`` seconds for the first, then takes
        what the server has at once. Raises TimeoutError when none came (after `unsubscribe`,
        always, once the timeout is out, as nats-py's would), nats' ConnectionClosedError when
        the connection is closed, and nats.js.errors.APIError for a status the server replied
        that is not the end of a request (ServiceUnavailableError: no consumer answers)."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if self._sub is None and not self._closed:
            raise RuntimeError("PullConsumer.fetch before subscribe()")
        if self._closed:
            await asyncio.sleep(timeout)
            raise TimeoutError
        out = self._take(batch, [])
        if len(out) == batch:
            return out
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        ended = self._ended
        self._error = None
        await self._request(batch - len(out), (timeout if not out else None))
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    self._take(batch, out)
                    if len(out) == batch:
                        return out
                    if self._error is not None:
                        error, self._error = self._error, None
                        if out:
                            return out
                        raise _status_error(error)
                    if self._ended != ended:
                        if out:
                            return out
                        # Ended with none (a no-wait answer, or an older request's end): wait on
                        # with a lingering request for the time left.
                        ended = self._ended
                        await self._request(batch, deadline - loop.time(), no_wait=False)
                    self._wake = loop.create_future()
                    try:
                        await self._wake
                    finally:
                        self._wake = None
        except TimeoutError:
            if out:
                return out
            raise

    # -- internals -------------------------------------------------------------------------------

    async def _request(self, batch: int, expires: float | None, *, no_wait: bool = True) -> None:
        request: dict[str, object] = {"batch": batch}
        if expires is not None:
            request["expires"] = max(int(expires * 1e9) - _EXPIRES_MARGIN_NS, _EXPIRES_MARGIN_NS)
        if no_wait:
            request["no_wait"] = True
        await self._nc.publish(self._next, orjson.dumps(request), reply=self._inbox)

    def _take(self, batch: int, out: list[Msg]) -> list[Msg]:
        ready = self._ready
        while ready and len(out) < batch:
            out.append(ready.popleft())
        return out

    async def _deliver(self, msg: Msg) -> None:
        headers = msg.headers
        status = headers.get(_STATUS) if headers else None
        if status is None:
            self._ready.append(msg)
        elif status == _HEARTBEAT:
            return
        elif status in _REQUEST_ENDED:
            self._ended += 1
        else:
            self._error = msg
        self._wake_up()

    def _wake_up(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)


def _status_error(msg: Msg) -> nats.js.errors.APIError:
    """The error a status reply stands for (nats-py's ``APIError.from_msg``, which fails on a
    status without a description)."""
    headers = msg.headers or {}
    status = headers.get(_STATUS, "")
    description = headers.get("Description", "")
    if status == "503":
        return nats.js.errors.ServiceUnavailableError(code=503, description=description or "no responders")
    return nats.js.errors.APIError(code=int(status) if status.isdigit() else None, description=description)


@contextlib.asynccontextmanager
async def in_progress_while(msgs: Sequence[Msg], every: float) -> AsyncIterator[None]:
    """While the body runs, tell JetStream every ``every`` seconds (a third of the consumer's
    ack_wait) that those of ``msgs`` not yet acked, nak'd or terminated are still being worked
    on (``+WPI``), so a short ack_wait redelivers only what was lost, not what takes long (a
    wait on Permit, a Redis failover). A batch done within ``every`` sends nothing."""

    async def tick() -> None:
        while True:
            await asyncio.sleep(every)
            for msg in msgs:
                if not msg.is_acked:
                    with contextlib.suppress(nats.errors.Error):  # not sent: redelivered, handlers are idempotent
                        await msg.in_progress()

    ticking = asyncio.ensure_future(tick())
    try:
        yield
    finally:
        ticking.cancel()
