"""Asking the queue for pods: `PopRequest` on ``kubus.queue.<profile>.pop`` with the lease's
fencing token, paced after a pop that came back short (`Popper`).

A pop is given up when a queue says it starts serving (a standby took over): the pop may wait on
the queue that died. It may as well have reached the new queue, which holds it until pods come
and answers with pods now in flight to this cycle; so a pop given up is still listened to, and
the pods it brings are the next pop's, as long as this cycle still pops with the same token
(else the queue hands them out again to the new term: `SchedulingQueue.fence`)."""

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
        self._given_up: list[tuple[asyncio.Future[Msg], int]] = []
        """Pops given up for a new queue, still listened to, each with the token it carried."""

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
        pods = self._late_pods(token) or await self._pop_now(token)
        self._short_pop_at = loop.time() if len(pods) < self.options.batch_size else None
        return pods

    def close(self) -> None:
        """Stop listening to the pops given up (their pods, if any, come back to the queue after
        its in-flight deadline). Idempotent."""
        for asked, _ in self._given_up:
            asked.cancel()
        self._given_up.clear()

    def _late_pods(self, token: int) -> list[QueuedPod]:
        """The pods of the pops given up that have been answered since, popped with ``token``."""
        pods: list[QueuedPod] = []
        for entry in [e for e in self._given_up if e[0].done()]:
            self._given_up.remove(entry)
            asked, popped_with = entry
            if asked.cancelled() or asked.exception() is not None:
                continue  # the dead queue's: never answered
            late = self._answer(asked.result(), queue_pop(self.profile), quiet=True)
            if late and popped_with == token:
                self.log.info("a pop given up for a new queue was answered: its pods are scheduled", pods=len(late))
                pods += late
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
        except BaseException:  # cancelled (stopping): nobody listens to this pop any more
            asked.cancel()
            raise
        finally:
            new_queue.cancel()
        if not asked.done():
            # It waits on the dead queue (never answered: it times out) or on the new one, which
            # may answer it with pods: listened to until then (`_late_pods`).
            self._given_up.append((asked, token))
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
        pods = self._answer(msg, subject)
        if pods is None:
            # Fenced (the lease in Redis names another token: the lease loop finds out) or a
            # queue that cannot read the lease now: either way, ask again in a moment.
            await self._pause(0.5)
        return pods or []

    def _answer(self, msg: Msg, subject: str, *, quiet: bool = False) -> list[QueuedPod] | None:
        """The pods of a pop's answer; None when the queue refused the pop (said, unless
        ``quiet``), [] for an unreadable answer (said)."""
        refusal = (msg.headers or {}).get(ERROR_HEADER)
        if refusal:
            if not quiet and (dropped := self._refused_pops.allow()) is not None:
                self.log.warning("the queue refused a pop; retrying", reason=refusal, refused_before_unlogged=dropped)
            return None
        try:
            return list(decode(PopReply, msg.data).pods)
        except MessageError as exc:
            self.metrics.rejected_messages.labels(subject=subject).inc()
            self.log.error("pop reply rejected: not a PopReply", subject=subject, reason=str(exc))
            return []

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
