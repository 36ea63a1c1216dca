"""The binder: the binding cycle of every reserved pod (WaitOnPermit, PreBind, Bind, PostBind).

Any number of replicas share one durable pull consumer on the KUBUS_BIND stream (filter
``kubus.bind.>``, so every profile's requests). Each fetched batch is handled concurrently. Per
`BindRequest`, exactly as docs/services.md step 5 says, every step conditional on the request's
attempt id so a duplicate or stale delivery can never undo a newer attempt:

1. WaitOnPermit (bounded by ``permit_timeout``; no Permit plugin exists yet, so it passes).
2. PreBind (none yet).
3. ``mark_bound(node, uid, attempt)``: NOT_FOUND/CONFLICT mean the attempt was abandoned (the
   janitor or a newer attempt took over): drop it. If the pod is still Reserved at this very
   attempt (our own earlier hand-back was cut short) it is handed back to the queue.
4. Bind: ``bind_pod(uid, node, devices, expected_version=attempt)``. OK or ALREADY (a
   redelivery) → the `NodeAssignment` for the node's agent (msg id ``assign/<uid>/<attempt>``),
   a ``pod.bound`` event and a "Scheduled" pod event. GONE (deleted meanwhile) → release the
   room. CONFLICT/NOT_FOUND (the pod moved on) → release this attempt's room.
5. PostBind (none yet). Ack.

Handing a pod back (Permit rejected, or retries exhausted): give the room back (unreserve, or
release once marked bound; both on the attempt), a ``pod.unreserved`` event, then
``Outcomes([Outcome(BIND_FAILED, attempt=...)])`` on ``kubus.pods.requeue`` (msg id
``requeue/<uid>/<attempt>``), then ack. The queue moves the pod back to Pending with a
compare-and-set on that attempt, so a stale hand-back changes nothing.

Transient errors (Redis or NATS away): ``nak`` with a growing delay; on the last allowed
delivery (``max_deliver``) the pod is handed back instead. Garbage on the subject is
terminated with a log line and ``kubus_rejected_messages_total``, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import nats.errors
import nats.js.errors
import redis.exceptions
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.bus import (
    BIND_STREAM,
    PODS_REQUEUE,
    EventKind,
    consumer_name,
    ensure_pull_consumer,
    event_subject,
    node_pods,
    publish_durable,
    redelivery_delay,
)
from kubus.bus.messages import (
    BindRequest,
    ClusterEvent,
    MessageError,
    NodeAssignment,
    Outcome,
    OutcomeKind,
    Outcomes,
    decode,
    encode,
)
from kubus.framework.status import Status
from kubus.service import Service, StructuredLogger
from kubus.settings import ConnectionSettings
from kubus.store import ClusterState, EventType, PodEvent, PodPhase, StoreCode

__all__ = ["AllowAll", "BindResult", "BinderOptions", "BinderService", "PermitGate", "is_transient"]


class PermitGate(Protocol):
    """WaitOnPermit: decides whether a reserved pod may be bound (gangs wait here for their
    members). Returns Success to go on, anything else (with reasons) to hand the pod back.
    The binder bounds the wait with its ``permit_timeout``."""

    async def wait_on_permit(self, request: BindRequest) -> Status: ...


class AllowAll:
    """The WaitOnPermit of a profile without Permit plugins: every pod may be bound at once."""

    async def wait_on_permit(self, request: BindRequest) -> Status:
        return Status.success()


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


_TRANSIENT: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    TimeoutError,
    ConnectionError,
    OSError,
)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` means Redis or NATS is briefly unreachable (retry later), not a bug."""
    return isinstance(exc, _TRANSIENT)


@dataclass(frozen=True, slots=True)
class BinderOptions:
    """How a binder replica works. Every replica of a deployment should use the same values."""

    permit_timeout: float = 30.0
    """Seconds WaitOnPermit may wait before the pod is handed back (kube's Permit timeout)."""
    max_deliver: int = 5
    """Deliveries of one BindRequest at most; the last one that fails hands the pod back."""
    ack_wait: float = 30.0
    """Seconds JetStream waits for an ack before redelivering; a long handler (a permit wait)
    reports progress every third of it."""
    batch: int = 64
    """BindRequests fetched and handled concurrently at a time."""
    fetch_timeout: float = 1.0
    """Seconds one fetch waits for requests (how quickly an idle binder notices stop)."""
    durable: str = "kubus-binder"
    """Name of the durable consumer every replica shares."""

    def __post_init__(self) -> None:
        for name in ("permit_timeout", "ack_wait", "fetch_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if self.max_deliver < 1:
            raise ValueError(f"max_deliver: must be at least 1, got {self.max_deliver}")
        if self.batch < 1:
            raise ValueError(f"batch: must be at least 1, got {self.batch}")


class BinderService(Service):
    """The binding-cycle service; see the module docstring for the protocol it follows.

    ``BinderService(settings, options)``; `run()` until stopped. ``permit`` is the
    WaitOnPermit gate (default `AllowAll`). ``clock`` gives seconds since the epoch (tests).
    """

    def __init__(
        self,
        settings: ConnectionSettings | None,
        options: BinderOptions | None = None,
        *,
        permit: PermitGate | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "binder",
    ) -> None:
        super().__init__(name, settings)
        self.options = options or BinderOptions()
        self.permit: PermitGate = permit or AllowAll()
        self.clock = clock
        self.source = f"{name}/{socket.gethostname()}"
        """Who recorded the pod events this binder writes."""
        self.cluster: ClusterState | None = None
        self._loop: asyncio.Task[None] | None = None
        self._consumed = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.js is not None and self.redis is not None
        self.cluster = ClusterState(self.redis, clock=self.clock)
        # intake: stop() unsubscribes it first, so no new request is fetched while stopping.
        subscription = self.intake(
            await ensure_pull_consumer(
                self.js,
                BIND_STREAM.name,
                consumer_name(self.options.durable),
                BIND_STREAM.subjects[0],
                ack_wait=self.options.ack_wait,
                max_deliver=self.options.max_deliver,
                description="Binders: every replica takes reserved pods to bind from here.",
            )
        )
        # Binds reserved pods: fetches batches from the consumer every replica shares.
        self._loop = self.spawn("bind loop", self._bind_loop, subscription)

    async def on_stop(self) -> None:
        # The bind loop finishes the batch in hand and returns; unfetched requests stay in the
        # stream for the other replicas (or this one, restarted).
        if self._loop is not None and not self._loop.done():
            await self._consumed.wait()

    # -- the loop --------------------------------------------------------------------------------

    async def _bind_loop(self, subscription: JetStreamContext.PullSubscription) -> None:
        try:
            while not self.stopping.is_set():
                messages = await self._fetch(subscription)
                if not messages:
                    continue
                async with asyncio.TaskGroup() as group:
                    for msg in messages:
                        group.create_task(self.handle(msg))
        finally:
            self._consumed.set()

    async def _fetch(self, subscription: JetStreamContext.PullSubscription) -> list[Msg]:
        """The next batch, or [] on a timeout, a passing NATS hiccup or stop."""
        fetch = asyncio.ensure_future(subscription.fetch(self.options.batch, timeout=self.options.fetch_timeout))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((fetch, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(BaseException):
                await fetch
            return []
        try:
            return fetch.result()
        except TimeoutError:  # nats.errors.TimeoutError is one too: nothing to fetch
            return []
        except (nats.errors.ConnectionClosedError, nats.js.errors.APIError, OSError) as exc:
            if not self.stopping.is_set():
                self.log.warning("fetch failed, retrying", error=repr(exc))
                await asyncio.sleep(min(1.0, self.options.fetch_timeout))
            return []

    # -- one request -----------------------------------------------------------------------------

    async def handle(self, msg: Msg) -> BindResult | None:
        """Handle one delivered BindRequest to the end (acked, nak'ed or terminated). Never
        raises (but for cancellation). Returns what became of it; None for garbage."""
        started = time.perf_counter()
        try:
            request = decode(BindRequest, msg.data)
            _check(request)
        except MessageError as exc:
            await self._reject(msg, str(exc))
            return None
        log = self.log.bind(pod=request.key, uid=request.uid, node=request.node, attempt=request.attempt)
        keepalive = asyncio.ensure_future(self._keep_alive(msg))
        try:
            result = await self._bind(request, msg, log)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = await self._failed(request, msg, exc, log)
        finally:
            keepalive.cancel()
        self.metrics.binding_duration.labels(result=str(result)).observe(time.perf_counter() - started)
        return result

    async def _bind(self, request: BindRequest, msg: Msg, log: StructuredLogger) -> BindResult:
        state = self._store()
        uid, node = request.uid, request.node
        attempt = str(request.attempt) if request.attempt else None
        version = request.attempt or None

        # WaitOnPermit: gangs wait here; the timeout is kube's Permit timeout.
        try:
            async with asyncio.timeout(self.options.permit_timeout):
                status = await self.permit.wait_on_permit(request)
        except TimeoutError:
            status = Status.unschedulable(f"rejected due to timeout after waiting {self.options.permit_timeout:g}s")
        if not status.is_success:
            await self.hand_back(request, f"Permit: {status.message() or status.code.name}", msg)
            return BindResult.HANDED_BACK

        # PreBind: no PreBind plugin exists yet (volumes would be bound here).

        # Bind, step 1: the reservation becomes bound, so nobody can unreserve it under us.
        code = await state.mark_bound(node, uid, attempt)
        if code in (StoreCode.NOT_FOUND, StoreCode.CONFLICT):
            why = "no reservation" if code is StoreCode.NOT_FOUND else "the reservation is another attempt's"
            # Still Reserved at this attempt with its room gone: a hand-back of ours was cut short.
            record = await state.get_pod(uid) if code is StoreCode.NOT_FOUND and version else None
            unfinished = record is not None and record.phase is PodPhase.RESERVED and record.version == version
            if unfinished:
                await self._requeue(request, f"reservation lost before binding ({why})")
            log.info("bind request dropped: attempt abandoned", reason=why, handed_back=unfinished)
            await msg.ack()
            return BindResult.ABANDONED

        # Bind, step 2: the pod is bound, exactly once in its life.
        write = await state.bind_pod(uid, node, request.gpu_devices, expected_version=version)
        if write.code in (StoreCode.OK, StoreCode.ALREADY):
            await self._announce(request, fresh=write.code is StoreCode.OK)
            # PostBind: no PostBind plugin exists yet.
            await msg.ack()
            log.info("pod bound", already=write.code is StoreCode.ALREADY)
            return BindResult.BOUND
        if write.code is StoreCode.GONE:
            if await state.release(node, uid, attempt) is StoreCode.OK:
                await self._event(EventKind.POD_UNRESERVED, request, f"unreserved/{uid}/{request.attempt}")
            await msg.ack()
            log.info("pod deleted while binding: room released")
            return BindResult.DELETED
        # CONFLICT or NOT_FOUND: the pod moved on (bound elsewhere, a newer attempt, gone).
        released = await state.release(node, uid, attempt)
        if released is StoreCode.OK:
            await self._event(EventKind.POD_UNRESERVED, request, f"unreserved/{uid}/{request.attempt}")
        await msg.ack()
        log.warning(
            "bind refused: the pod moved on; this attempt's room released",
            code=str(write.code),
            phase=str(write.phase or "-"),
            version=write.version,
        )
        return BindResult.CONFLICT

    async def _failed(self, request: BindRequest, msg: Msg, exc: Exception, log: StructuredLogger) -> BindResult:
        """A step raised: retry later (nak), or on the last delivery hand the pod back."""
        delivered = _num_delivered(msg)
        transient = is_transient(exc)
        if delivered < self.options.max_deliver:
            delay = redelivery_delay(delivered)
            if transient:
                log.warning("bind failed, will retry", error=repr(exc), delivery=delivered, delay=delay)
            else:
                log.log(logging.ERROR, "bind failed, will retry", exc_info=exc, error=repr(exc), delivery=delivered)
            with contextlib.suppress(Exception):  # unacked, it comes back after ack_wait anyway
                await msg.nak(delay=delay)
            return BindResult.RETRY
        reason = f"binding failed {delivered} times, last: {exc!r}"
        log.error("bind failed on the last delivery, handing the pod back", error=repr(exc))
        try:
            handed = await self.hand_back(request, reason, msg)
        except Exception as again:
            # Nothing more this binder can do; the queue's janitor repairs what is left.
            log.log(logging.ERROR, "hand back failed; leaving it to the janitor", exc_info=again, error=repr(again))
            with contextlib.suppress(Exception):
                await msg.term()
            return BindResult.HANDED_BACK
        return BindResult.HANDED_BACK if handed else BindResult.BOUND

    # -- outcomes --------------------------------------------------------------------------------

    async def hand_back(self, request: BindRequest, message: str, msg: Msg | None = None) -> bool:
        """Unreserve and hand the pod back: give this attempt's room back, tell the queue
        (`_requeue`), ack ``msg`` last. Idempotent; raises on Redis/NATS errors.

        A pod that is bound already (a delivery before this one got that far, and only telling
        its node failed) stays bound: bound is for life, its room stays, the queue is not told,
        and the node's agent picks the pod up by its resync. Returns False then, True when the
        pod was handed back."""
        state = self._store()
        attempt = str(request.attempt) if request.attempt else None
        code = await state.unreserve(request.node, request.uid, attempt)
        if code is StoreCode.BOUND:  # marked bound by a delivery before this one: bound already?
            record = await state.get_pod(request.uid)
            if record is not None and record.bindings and record.phase is not PodPhase.DELETED:
                if msg is not None:
                    await msg.ack()
                self.log.error(
                    "pod bound, but its node may not have been told; the node's agent finds it by resync",
                    pod=request.key,
                    uid=request.uid,
                    node=request.node,
                    phase=str(record.phase),
                    reason=message,
                )
                return False
            code = await state.release(request.node, request.uid, attempt)
        if code is StoreCode.OK:
            await self._event(EventKind.POD_UNRESERVED, request, f"unreserved/{request.uid}/{request.attempt}")
        await self._requeue(request, message)
        if msg is not None:
            await msg.ack()
        self.log.warning(
            "pod handed back to the queue",
            pod=request.key,
            uid=request.uid,
            node=request.node,
            attempt=request.attempt,
            room=str(code),
            reason=message,
        )
        return True

    async def _requeue(self, request: BindRequest, message: str) -> None:
        """``Outcome(BIND_FAILED)`` on kubus.pods.requeue: the queue moves the pod back to Pending
        (compare-and-set on the attempt) and queues it. Once per attempt (the msg id)."""
        outcome = Outcome(
            uid=request.uid, kind=OutcomeKind.BIND_FAILED, node=request.node, message=message, attempt=request.attempt
        )
        msg_id = f"requeue/{request.uid}/{request.attempt}"
        await publish_durable(self._js(), PODS_REQUEUE, encode(Outcomes((outcome,))), msg_id)

    async def _announce(self, request: BindRequest, *, fresh: bool) -> None:
        """Tell the node's agent and everyone else that the pod is bound. Idempotent: the msg
        ids dedupe a redelivery's repeats within the streams' duplicate window."""
        uid, attempt = request.uid, request.attempt
        assignment = NodeAssignment(
            uid=uid,
            key=request.key,
            node=request.node,
            manifest=request.manifest,
            gpu_devices=request.gpu_devices,
            attempt=attempt,
        )
        js = self._js()
        await publish_durable(js, node_pods(request.node), encode(assignment), f"assign/{uid}/{attempt}")
        await self._event(EventKind.POD_BOUND, request, f"bound/{uid}/{attempt}")
        if not fresh:
            return
        state = self._store()
        await state.append_event(
            uid,
            PodEvent(
                self.clock(),
                EventType.NORMAL,
                "Scheduled",
                f"Successfully assigned {request.key} to {request.node}",
                self.source,
            ),
        )
        record = await state.get_pod(uid)
        if record is not None and record.created_at:
            latency = max(0.0, self.clock() - record.created_at)
            self.metrics.pod_scheduling_sli_duration.labels(attempts=str(record.attempts)).observe(latency)

    async def _event(self, kind: EventKind, request: BindRequest, msg_id: str) -> None:
        event = ClusterEvent(
            kind=kind.value,
            name=request.key,
            node=request.node,
            at=self.clock(),
            data={"uid": request.uid, "attempt": request.attempt, "profile": request.profile},
        )
        await publish_durable(self._js(), event_subject(kind, request.key), encode(event), msg_id)

    async def _reject(self, msg: Msg, reason: str) -> None:
        self.metrics.rejected_messages.labels(subject=msg.subject).inc()
        self.log.error("bind request rejected: not a BindRequest", subject=msg.subject, reason=reason)
        with contextlib.suppress(Exception):
            await msg.term()

    async def _keep_alive(self, msg: Msg) -> None:
        """Tell JetStream the request is still being worked on (a long permit wait)."""
        while True:
            await asyncio.sleep(self.options.ack_wait / 3)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    # -- helpers ---------------------------------------------------------------------------------

    def _store(self) -> ClusterState:
        if self.cluster is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.cluster

    def _js(self) -> JetStreamContext:
        if self.js is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.js


def _check(request: BindRequest) -> None:
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


def _num_delivered(msg: Msg) -> int:
    try:
        return int(msg.metadata.num_delivered)
    except Exception:
        return 1
