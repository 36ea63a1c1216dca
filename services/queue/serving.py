"""Serving the cycles (`Serving`): ``kubus.queue.<profile>.pop`` hands out pods, ``.done`` takes
their outcomes (kube's Pop and Done / AddUnschedulableIfNotPresent)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from functools import partial

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.bus import EventKind, announcements, queue_done, queue_pop, queue_serving
from kubus.bus.messages import (
    ERROR_HEADER,
    FENCED,
    MessageError,
    Outcome,
    OutcomeKind,
    Outcomes,
    PopReply,
    PopRequest,
    QueuedPod,
    decode,
    encode,
)
from kubus.core.metrics import Metrics
from kubus.queue._pods import count_rejected, parse_stored, publish, record_event
from kubus.queue.options import QueueOptions
from kubus.queue.queueing import QueueName
from kubus.queue.queues import Queues
from kubus.queue.term import Term
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger, Throttle
from kubus.store import (
    ClusterState,
    EventType,
    PodPhase,
    cycle_lease,
    queue_lease,
)

__all__ = ["Serving", "Subscriptions"]


class Subscriptions:
    """NATS subscriptions held for a while (the queue's pop and done ones, while it serves), let
    go together: `unsubscribe` is idempotent, so stop() may call it after a step-down did."""

    def __init__(self) -> None:
        self._held: list[Subscription] = []

    def add(self, subscription: Subscription) -> None:
        self._held.append(subscription)

    async def unsubscribe(self) -> None:
        held, self._held = self._held, []
        for subscription in held:
            # One closed already (its connection closed) has nothing left to undo.
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()


class Serving:
    """The pop and done request handlers."""

    def __init__(
        self,
        *,
        store: ClusterState,
        nc: NATS,
        js: JetStreamContext,
        options: QueueOptions,
        queues: Queues,
        term: Term,
        hand_back: Callable[[Outcome], Awaitable[None]],
        on_reserved: Callable[[Pod], None],
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        """``hand_back``: what a failed bind's outcome does to its pod (`Intake.hand_back`);
        ``on_reserved``: told each pod its cycle reserved (the hints of its later events read it)."""
        self.store = store
        self.nc = nc
        self.js = js
        self.options = options
        self.queues = queues
        self.term = term
        self.hand_back = hand_back
        self.on_reserved = on_reserved
        self.log = log
        self.metrics = metrics
        self.subscriptions = Subscriptions()
        """The pop and done subscriptions: held only while serving."""
        self._tokens: dict[str, int] = {}
        """Profile -> the newest fencing token a pop carried that the lease in Redis confirmed."""
        self._refused_pops: dict[str, Throttle] = {}
        """Profile -> the throttle of its 'pop refused' lines."""
        self._redis_slots = asyncio.Semaphore(32)
        """Bounds the Redis writes one batch of outcomes makes at once."""

    async def subscribe(self) -> None:
        """Serve every profile's pops and outcomes (core NATS request/reply). Returns once the
        server has the subscriptions (a flush: a round trip after them), so a queue that says it
        serves answers the next pop rather than leaving it to "no responders"."""
        for profile in self.queues:
            self.subscriptions.add(await self.nc.subscribe(queue_pop(profile), cb=partial(self.on_pop, profile)))
            self.subscriptions.add(await self.nc.subscribe(queue_done(profile), cb=partial(self.on_done, profile)))
        await self.nc.flush()

    async def announce(self) -> None:
        """Say on ``kubus.queue.<profile>.serving`` that this queue is about to serve (just before
        `subscribe`): a cycle whose pop still waits on a queue that died asks again."""
        for profile in self.queues:
            await self.nc.publish(queue_serving(profile), b"")

    def forget(self) -> None:
        """Forget the fencing tokens seen (the queues they fenced are gone)."""
        self._tokens.clear()

    async def on_pop(self, profile: str, msg: Msg) -> None:
        if not self.term.serves():
            return  # not the leader (any more): the leader answers, or nobody, and the cycle asks again
        served = self.term.served_term
        if not msg.reply:
            count_rejected(self.metrics, msg.subject)
            self.log.warning("pop without a reply subject ignored", profile=profile)
            return
        try:
            request = decode(PopRequest, msg.data)
        except MessageError as exc:
            count_rejected(self.metrics, msg.subject)
            self.log.warning("bad pop request", profile=profile, error=str(exc))
            await self._reply_error(msg, str(exc))
            return
        queue = self.queues[profile]
        token = request.fencing_token
        refusal = await self._fencing_refusal(profile, token)
        if not self.term.serves():
            return  # the lease in Redis names another queue: deposed, it answers nothing
        if refusal is not None:
            if (dropped := self._refused_pops.setdefault(profile, Throttle()).allow()) is not None:
                self.log.warning("pop refused", profile=profile, holder=request.holder, token=token, reason=refusal,
                                 refused_before_unlogged=dropped)  # fmt: skip
            await self._reply_error(msg, f"{FENCED}: {refusal}")
            return
        if token > self._tokens.get(profile, 0):
            self._tokens[profile] = token
            if back := queue.fence(token):
                self.log.info(
                    "a new cycle took over; its predecessor's pods are handed out again",
                    profile=profile,
                    token=token,
                    pods=len(back),
                )
        count = max(0, min(request.max_pods, self.options.max_pop))
        entries = queue.pop(count, holder=request.holder, token=token, max_bytes=self._pop_budget())
        if not entries and count and request.wait_ms > 0:
            ready = self.queues.ready(profile)
            ready.clear()
            try:
                async with asyncio.timeout(min(request.wait_ms / 1000, self.options.max_pop_wait)):
                    await ready.wait()
            except TimeoutError:
                pass
            entries = queue.pop(count, holder=request.holder, token=token, max_bytes=self._pop_budget())
        if not self.term.serves() or self.term.served_term != served:
            return  # lost the lease while waiting: these queues are gone, the next leader has the pods
        reply = PopReply(
            pods=tuple(QueuedPod(uid=e.uid, key=e.key, manifest=e.manifest, attempts=e.attempts - 1) for e in entries)
        )
        await msg.respond(encode(reply))
        if entries:
            self.log.debug("pods popped", profile=profile, holder=request.holder, pods=len(entries))
            self.queues.changed()

    async def _fencing_refusal(self, profile: str, token: int) -> str | None:
        """Why a pop with fencing ``token`` is refused, or None: the token must be the one of
        the profile's cycle lease as Redis has it now, never taken on the asker's word (a
        forged token refused is refused alone, and remembered by nobody). Token 0 (no lease)
        passes while no cycle holds the lease: tools and tests that pop by hand.

        The queue's own lease is read in the same round trip: when Redis names another holder
        or token than this replica's, it steps down (`_serves` is False from then on)."""
        name, own = cycle_lease(profile), queue_lease()
        try:
            held, lease = await self.store.get_leases(own, name)
        except TRANSIENT_ERRORS as exc:
            return f"the lease {name} cannot be read: {exc!r}"
        leadership = self.term.leadership
        if held is None or held.holder != leadership.holder or held.token != leadership.token:
            now = "free" if held is None else f"held by {held.holder} with token {held.token}"
            leadership.step_down(f"a pop found the lease {own} {now}")
            return f"this queue no longer holds the lease {own}"
        if lease is None:
            return None if token == 0 else f"token {token}: no cycle holds the lease {name}"
        if token != lease.token:
            return f"token {token} is not the lease's: {lease.holder} holds {name} with token {lease.token}"
        return None

    def _pop_budget(self) -> int:
        """Manifest bytes one pop reply may carry: escaping may double them inside the JSON."""
        max_payload = self.nc.max_payload or 1024 * 1024
        return max(max_payload // 2 - 16 * 1024, 1024)

    async def _reply_error(self, msg: Msg, error: str) -> None:
        if msg.reply:
            await self.nc.publish(msg.reply, b"", headers={ERROR_HEADER: error[:1000]})

    async def on_done(self, profile: str, msg: Msg) -> None:
        if not self.term.serves():
            return  # the leader takes outcomes; the cycle reports again, or the leader's rebuild covers it
        try:
            outcomes = decode(Outcomes, msg.data)
        except MessageError as exc:
            count_rejected(self.metrics, msg.subject)
            self.log.warning("bad outcomes", profile=profile, error=str(exc))
            await self._reply_error(msg, str(exc))
            return
        # A reserved pod that was in flight just leaves the queue: no Redis, no task. The rest
        # (failures, reports after a restart) take their round trips, all at once.
        queue = self.queues[profile]
        rest = []
        groups = set()
        for o in outcomes.outcomes:
            entry = queue.done(o.uid) if o.kind is OutcomeKind.RESERVED else None
            if entry is None:
                rest.append(o)
            else:
                self.on_reserved(entry.pod)
                if (group := pod_group_key(entry.pod)) is not None:
                    groups.add(group)
        queue.activate_siblings(groups)
        if rest:
            await asyncio.gather(*(self._outcome(profile, o) for o in rest))
        self.queues.changed()
        if msg.reply:
            await msg.respond(b"")

    async def _outcome(self, profile: str, outcome: Outcome) -> None:
        """What became of a popped pod (kube's Done / AddUnschedulableIfNotPresent). Never raises:
        a pod whose outcome could not be recorded stays in flight and is handed out again."""
        try:
            async with self._redis_slots:
                await self._apply_outcome(profile, outcome)
        except Exception as exc:
            self.log.warning(
                "outcome not recorded", profile=profile, uid=outcome.uid, kind=str(outcome.kind), error=repr(exc)
            )

    async def _apply_outcome(self, profile: str, outcome: Outcome) -> None:
        if outcome.kind is OutcomeKind.RESERVED:
            await self._reserved(profile, outcome.uid)
        elif outcome.kind is OutcomeKind.BIND_FAILED:
            await self.hand_back(outcome)
        elif outcome.kind is OutcomeKind.REFUSED and self.queues[profile].retry_refused(outcome.uid) is not None:
            self.log.debug("reservation refused; retried at once", profile=profile, uid=outcome.uid, node=outcome.node)
        else:
            await self._failed(profile, outcome)

    async def _reserved(self, profile: str, uid: str) -> None:
        queue = self.queues[profile]
        if (entry := queue.done(uid)) is not None:
            self.on_reserved(entry.pod)
            return
        if queue.where(uid) is None:
            return
        # Not in flight, yet queued: popped before a restart, or handed back before this report.
        record = await self.store.get_pod(uid)
        if record is None or record.phase is not PodPhase.PENDING:
            queue.delete(uid)

    async def _failed(self, profile: str, outcome: Outcome) -> None:
        """An attempt found no node (UNSCHEDULABLE), had its reservation refused by Redis too
        many attempts in a row (REFUSED: `retry_refused` said no) or failed (ERROR): record
        why, then back off."""
        queue = self.queues[profile]
        uid = outcome.uid
        where = queue.where(uid)
        if where is not None and where is not QueueName.IN_FLIGHT:
            # Its attempt is over already: a repeated report (the cycle retries done requests), or
            # the deadline or a restart put it back. Counting it again would count one attempt twice.
            self.log.debug("outcome for a pod already queued ignored", profile=profile, uid=uid, queue=str(where))
            return
        # A pod refused too often (`retry_refused`) failed to fit where it was placed: Unschedulable.
        unschedulable = outcome.kind in (OutcomeKind.UNSCHEDULABLE, OutcomeKind.REFUSED)
        reason = "Unschedulable" if unschedulable else "SchedulerError"
        message = outcome.message or ("no node fits the pod" if unschedulable else "scheduling failed")
        w = await self.store.transition(
            uid,
            PodPhase.PENDING,
            expected_phases={PodPhase.PENDING},
            reason=reason,
            message=message,
            count_attempt=True,
        )
        if not w.ok:
            # Deleted, or no longer Pending (a newer attempt has it): not ours to requeue.
            queue.delete(uid)
            self.log.info(
                "outcome for a pod no longer pending",
                profile=profile,
                uid=uid,
                code=str(w.code),
                phase=str(w.phase or "-"),
            )
            return
        await record_event(self.store, uid, EventType.WARNING, "FailedScheduling", message, profile)
        plugins = outcome.plugins if unschedulable else ()
        where = queue.add_unschedulable(uid, plugins)
        if where is None and queue.where(uid) is None:
            record = await self.store.get_pod(uid)  # popped before a restart: not in flight here
            pod = parse_stored(record, self.log) if record is not None else None
            if (
                record is not None
                and pod is not None
                and record.phase is PodPhase.PENDING
                and record.profile == profile
            ):
                where = queue.add_unschedulable(
                    uid, plugins, pod=pod, manifest=record.manifest, attempts=max(record.attempts, 1)
                )
        entry = queue.get(uid)
        key = entry.key if entry else uid
        self.log.info(
            "pod unschedulable" if unschedulable else "scheduling failed",
            pod=key,
            uid=uid,
            profile=profile,
            queue=str(where or queue.where(uid) or "-"),
            plugins=",".join(plugins) or "-",
            message=message,
        )
        if entry is not None:  # for whoever reports it outside kubus (the watcher: FailedScheduling)
            event = announcements.pod_event(
                EventKind.POD_UNSCHEDULABLE, key, uid, at=time.time(), attempt=w.version, profile=profile,
                reason=reason, message=message,
            )  # fmt: skip
            try:
                await publish(self.js, event)
            except TRANSIENT_ERRORS as exc:  # an announcement: the store has the reason
                self.log.warning("could not announce an unschedulable pod", pod=key, error=repr(exc))
