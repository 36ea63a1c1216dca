"""Handing a pod back, and what a failed step of a bind leads to (`HandBack`), as the protocol
of `kubus.binder.service` says: a pod handed back is unreserved (its Reserve plugins, then its
room, on the attempt), announced (``pod.unreserved``) and requeued (``Outcome(BIND_FAILED)`` on
``kubus.pods.requeue``, msg id ``requeue/<uid>/<attempt>``) before its message is acked; a step
that failed because a server is away is waited out, any other failure counted per request, the
last allowed one handing the pod back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.api.errors import ManifestError
from kubus.api.manifests import wire_pod
from kubus.binder.work import BindResult, Work, framework_of, request_log
from kubus.bus import (
    PODS_REQUEUE,
    EventKind,
    MessageFaults,
    Publication,
    announcements,
    deliveries,
    msgids,
    publish_durable,
    redelivery_delay,
)
from kubus.bus.messages import BindRequest, Outcome, OutcomeKind, Outcomes, encode
from kubus.core.metrics import Metrics
from kubus.framework.runtime import Framework
from kubus.runtime.service import Outage, StructuredLogger, is_transient
from kubus.store import ClusterState, PodPhase, StoreCode

__all__ = ["HandBack", "requeue_publication", "unreserved_publication"]


class HandBack:
    """Hands pods back to the queue, and decides what a failed step of a bind leads to: a retry
    (nak), or, after the request's last allowed failure, the pod handed back."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        frameworks: Mapping[str, Framework],
        outage: Outage,
        faults: MessageFaults,
        max_failures: int,
        metrics: Metrics,
        clock: Callable[[], float],
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.js = js
        self.frameworks = frameworks
        self.outage = outage
        self.faults = faults
        self.max_failures = max_failures
        self.metrics = metrics
        self.clock = clock
        self.log = log

    async def hand_back(self, request: BindRequest, message: str, msg: Msg | None = None) -> bool:
        """Unreserve and hand the pod back: give this attempt's room back, tell the queue
        (`requeue`), ack ``msg`` last. Idempotent; raises on Redis/NATS errors.

        A pod that is bound already (a delivery before this one got that far, and only telling
        its node failed) stays bound: bound is for life, its room stays, the queue is not told,
        and the node's agent picks the pod up by its resync. Returns False then, True when the
        pod was handed back."""
        store = self.store
        await self.unreserve_plugins(request)
        code = await store.unreserve(request.node, request.uid, request.attempt)
        if code is StoreCode.BOUND:  # marked bound by a delivery before this one: bound already?
            record = await store.get_pod(request.uid)
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
            code = await store.release(request.node, request.uid, request.attempt)
        if code is StoreCode.OK:
            p = unreserved_publication(request, at=self.clock())
            await publish_durable(self.js, p.subject, p.payload, p.msg_id)
        await self.requeue(request, message)
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

    async def hand_back_now(self, work: Work, reason: str) -> None:
        """`hand_back` of ``work``'s pod, finished with what became of it (a failure to hand it
        back is a failed step: `failed`)."""
        try:
            await self.hand_back(work.request, reason, work.msg)
            result = BindResult.HANDED_BACK
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = await self.failed(work.request, work.msg, exc, request_log(self.log, work.request))
        work.finish(result, self.metrics)

    async def failed(self, request: BindRequest, msg: Msg, exc: Exception, log: StructuredLogger) -> BindResult:
        """A step raised: retry later (nak), or after its last allowed failure hand the pod back.
        A server that is away pauses intake and is waited out, however long (`Outage`)."""
        delivered = deliveries(msg)
        delay = redelivery_delay(delivered)
        if is_transient(exc):
            self.outage.note(exc)  # says so once per outage; each request only at debug level
            log.debug("bind failed, will retry", error=repr(exc), delivery=delivered, delay=delay)
            with contextlib.suppress(Exception):  # unacked, it comes back after ack_wait anyway
                await msg.nak(delay=delay)
            return BindResult.RETRY
        failures = self.faults.failed(msg)
        if failures < self.max_failures:
            log.log(logging.ERROR, "bind failed, will retry", exc_info=exc, error=repr(exc), failures=failures)
            with contextlib.suppress(Exception):
                await msg.nak(delay=delay)
            return BindResult.RETRY
        reason = f"binding failed {failures} times, last: {exc!r}"
        log.error("bind failed for the last time, handing the pod back", error=repr(exc))
        try:
            handed = await self.hand_back(request, reason, msg)
        except Exception as again:
            # Nothing more this binder can do; the queue's janitor repairs what is left.
            log.log(logging.ERROR, "hand back failed; leaving it to the janitor", exc_info=again, error=repr(again))
            with contextlib.suppress(Exception):
                await msg.term()
            return BindResult.HANDED_BACK
        return BindResult.HANDED_BACK if handed else BindResult.BOUND

    async def fail(self, work: Work, exc: Exception) -> None:
        """`failed` for ``work``, finished with what it led to."""
        work.finish(await self.failed(work.request, work.msg, exc, request_log(self.log, work.request)), self.metrics)

    async def unreserve_plugins(self, request: BindRequest) -> None:
        """Unreserve of the profile's Reserve plugins (reverse order), with a fresh CycleState
        and the node as the store has it: what a failure after Reserve owes them."""
        fw = framework_of(self.frameworks, request)
        if not fw.reserve:
            return
        try:
            pod = wire_pod(request.manifest, request.uid, request.key)
        except (ManifestError, ValueError):
            return  # no pod to unreserve: what the plugins reserved for it cannot be named
        await fw.run_unreserve_after(self.store, pod, request.node)

    async def requeue(self, request: BindRequest, message: str) -> None:
        """``Outcome(BIND_FAILED)`` on kubus.pods.requeue: the queue moves the pod back to Pending
        (compare-and-set on the attempt) and queues it. Once per attempt (the msg id)."""
        p = requeue_publication(request, message)
        await publish_durable(self.js, p.subject, p.payload, p.msg_id)


def requeue_publication(request: BindRequest, message: str) -> Publication:
    """``Outcome(BIND_FAILED)`` of the request's attempt, for kubus.pods.requeue (msg id
    ``requeue/<uid>/<attempt>``)."""
    outcome = Outcome(
        uid=request.uid, kind=OutcomeKind.BIND_FAILED, node=request.node, message=message, attempt=request.attempt
    )
    return Publication(PODS_REQUEUE, encode(Outcomes((outcome,))), msgids.requeue(request.uid, request.attempt))


def unreserved_publication(request: BindRequest, *, at: float) -> Publication:
    """The ``pod.unreserved`` event of the request's pod: its room given back at ``at``."""
    return announcements.pod_event(
        EventKind.POD_UNRESERVED,
        request.key,
        request.uid,
        at=at,
        node=request.node,
        attempt=request.attempt,
        profile=request.profile,
    )
