"""Asking the queue for pods: `PopRequest` on ``kubus.queue.<profile>.pop`` with the lease's
fencing token, paced after a pop that came back short (`Popper`)."""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from kubus.bus import queue_pop, queue_serving
from kubus.bus.messages import ERROR_HEADER, MessageError, PopReply, PopRequest, QueuedPod, decode, encode
from kubus.core.metrics import Metrics
from kubus.cycle.options import CycleOptions
from kubus.runtime.service import StructuredLogger, Throttle


class Popper:
    """Pops batches of up to ``batch_size`` pods from the profile's queue."""

    def __init__(
        self,
        *,
        nc: NATS,
        profile: str,
        holder: str,
        options: CycleOptions,
        stopping: asyncio.Event,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.nc = nc
        self.profile = profile
        self.holder = holder
        self.options = options
        self.stopping = stopping
        self.metrics = metrics
        self.log = log
        self._short_pop_at: float | None = None
        """When the last pop came back short (loop time); None after a full one (`pop`)."""
        self._queue_answering = True
        self._new_queue = asyncio.Event()
        """Set when a queue starts serving the profile (``kubus.queue.<profile>.serving``)."""
        self._refused_pops = Throttle()
        """The throttle of the "the queue refused a pop" lines (one per interval, with a count)."""

    async def listen(self) -> None:
        """Hear when a queue starts serving (a standby that took over): a pop waiting on the old
        one, which died holding it, is given up and asked again at once instead of timing out."""
        await self.nc.subscribe(queue_serving(self.profile), cb=self._on_serving)

    async def _on_serving(self, msg: Msg) -> None:
        self._new_queue.set()

    async def pop(self, token: int) -> list[QueuedPod]:
        """Up to batch_size pods from the queue; [] when it has none or does not answer. After a
        pop that came back short, the next waits out `CycleOptions.pop_pace` first."""
        loop = asyncio.get_running_loop()
        if self._short_pop_at is not None:
            wait = self._short_pop_at + self.options.pop_pace - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), wait)
        pods = await self._pop_now(token)
        self._short_pop_at = loop.time() if len(pods) < self.options.batch_size else None
        return pods

    async def _pop_now(self, token: int) -> list[QueuedPod]:
        request = PopRequest(
            max_pods=self.options.batch_size,
            wait_ms=self.options.pop_wait_ms,
            holder=self.holder,
            fencing_token=token,
        )
        subject = queue_pop(self.profile)
        self._new_queue.clear()
        timeout = self.options.pop_wait_ms / 1000 + self.options.request_timeout
        asked = asyncio.ensure_future(self.nc.request(subject, encode(request), timeout=timeout))
        new_queue = asyncio.ensure_future(self._new_queue.wait())
        try:
            await asyncio.wait((asked, new_queue), return_when=asyncio.FIRST_COMPLETED)
        finally:
            new_queue.cancel()
            given_up = not asked.done()
            if given_up:
                asked.cancel()  # a new queue serves: whatever the old one held comes back from Redis
        if given_up:
            self.log.info("a queue took over; popping again", subject=subject)
            return []
        try:
            msg = asked.result()
        except nats.errors.NoRespondersError:
            if self._queue_answering:
                self.log.warning("the queue does not answer pops; retrying", subject=subject)
                self._queue_answering = False
            # Asked again soon: a standby queue that takes over serves the moment it subscribes,
            # and "no responders" costs the server next to nothing (10 a second).
            await self._pause(0.1)
            return []
        except nats.errors.TimeoutError:
            self.log.warning("pop timed out; retrying", subject=subject)
            return []
        if not self._queue_answering:
            self.log.info("the queue answers pops again", subject=subject)
            self._queue_answering = True
        refusal = (msg.headers or {}).get(ERROR_HEADER)
        if refusal:
            # Fenced (the lease in Redis names another token: the lease loop finds out) or a
            # queue that cannot read the lease now: either way, ask again in a moment.
            if (dropped := self._refused_pops.allow()) is not None:
                self.log.warning("the queue refused a pop; retrying", reason=refusal, refused_before_unlogged=dropped)
            await self._pause(0.5)
            return []
        try:
            return list(decode(PopReply, msg.data).pods)
        except MessageError as exc:
            self.metrics.rejected_messages.labels(subject=subject).inc()
            self.log.error("pop reply rejected: not a PopReply", subject=subject, reason=str(exc))
            return []

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
