"""The binder: the binding cycle of every reserved pod (WaitOnPermit, PreBind, Bind, PostBind).

Any number of replicas share one durable pull consumer on the KUBUS_BIND stream (filter
``kubus.bind.>``, so every profile's requests). Per `BindRequest`, exactly as docs/services.md
step 5 says, every step conditional on the request's attempt id so a duplicate or stale
delivery can never undo a newer attempt:

1. WaitOnPermit: when the cycle's Permit plugins made the pod wait, its wait lives in Redis
   (`kubus.store.permits`); the binder waits until no plugin holds it (allowed), one rejected it,
   or its deadline passed (kube's Permit timeout; at most ``permit_timeout``), then ends the wait.
   One watcher task polls every waiting pod of the binder at once.
2. PreBind plugins of the pod's profile (``--config``), then its Bind plugins until one does not
   Skip (DefaultBinder: the store's bind, below). A profile with neither binds as before.
3. ``mark_bound(node, uid, attempt)``: NOT_FOUND/CONFLICT mean the attempt was abandoned (the
   janitor or a newer attempt took over): drop it. If the pod is still Reserved at this very
   attempt (our own earlier hand-back was cut short) it is handed back to the queue.
4. Bind: ``bind_pod(uid, node, devices, expected_version=attempt)``. OK or ALREADY (a
   redelivery) → the `NodeAssignment` for the node's agent (msg id ``assign/<uid>/<attempt>``;
   bus mode), the pod among its group's ``pods.bound`` event, and (OK only) a "Scheduled" pod
   event (cluster mode: also written to
   the apiserver, `kubus.binder.apiserver.ScheduledEvents`). GONE (deleted meanwhile) →
   release the room. CONFLICT/NOT_FOUND (the pod moved on) → release this attempt's room.
5. PostBind plugins (errors logged). Ack.

A fetched batch is handled together: each request waits on Permit on its own (a waiting pod
holds up no other), and the requests that pass, as many as pass at a time, go through steps 3
and 4 in one `ClusterState.bind_many` call (per pod one atomic script on a single Redis: mark
bound, bind, the "Scheduled" event, release when refused), their messages (one ``pods.bound``
for the group) go out in one `publish_durable_many`, then each is acked. A request whose
message could not be published is retried (nak); the rest of its batch is acked.

The service is built from parts, each given what it needs when the service starts:
`PermitWatcher` (`kubus.binder.permits`: the waits on Permit in Redis), `BindingCycle`
(`kubus.binder.binding`: PreBind, Bind, the store's bind and its announcements, PostBind) and
`HandBack` (`kubus.binder.handback`: pods handed back, failed steps retried or given up). The
service fetches the requests, checks them (`kubus.binder.work`) and takes each through Permit
to its binding cycle.

Handing a pod back (Permit rejected or timed out, PreBind or Bind failed, retries exhausted):
Unreserve (the profile's Reserve plugins, in reverse order), give the room back (unreserve, or
release once marked bound; both on the attempt), a ``pod.unreserved`` event, then
``Outcomes([Outcome(BIND_FAILED, attempt=...)])`` on ``kubus.pods.requeue`` (msg id
``requeue/<uid>/<attempt>``), then ack. The queue moves the pod back to Pending with a
compare-and-set on that attempt, so a stale hand-back changes nothing.

Transient errors (Redis or NATS away, `kubus.runtime.service.is_transient`): ``nak`` with a growing
delay and intake paused until the servers answer (`kubus.runtime.service.Outage`), as long as it takes.
Other failures are counted per request (`kubus.bus.MessageFaults`); the last allowed one
(``max_failures``) hands the pod back instead. Garbage on the subject is
terminated with a log line and ``kubus_rejected_messages_total``, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Mapping, Sequence

from nats.aio.msg import Msg
from nats.js.api import PubAck

from kubus.binder.apiserver import ApiBinding, ScheduledEvents
from kubus.binder.binding import BindingCycle
from kubus.binder.handback import HandBack
from kubus.binder.options import BinderOptions
from kubus.binder.permits import AllowAll, PermitGate, PermitWatcher
from kubus.binder.work import BindResult, Work, check_request
from kubus.bus import (
    APISERVER_DELETED,
    BIND_ALL,
    BIND_STREAM,
    MessageFaults,
    Publication,
    PullConsumer,
    consumer_name,
    ensure_pull_consumer,
    in_progress_while,
    publish_durable_many,
)
from kubus.bus.messages import BindRequest, MessageError, decode
from kubus.core.settings import ConnectionSettings
from kubus.framework.runtime import Framework
from kubus.framework.status import Status
from kubus.runtime.service import Service
from kubus.store import ClusterState

__all__ = ["AllowAll", "BindResult", "BinderOptions", "BinderService", "PermitGate", "PermitWatcher"]

_EVENTS_DRAIN = 5.0
"""Seconds a stopping binder gives the Scheduled events it is writing."""


class BinderService(Service):
    """The binding-cycle service; see the module docstring for the protocol it follows.

    ``BinderService(settings, options)``; `run()` until stopped. ``permit`` is the
    WaitOnPermit gate (default `AllowAll`). ``clock`` gives seconds since the epoch (tests).
    """

    metrics_role = "binder"

    store: ClusterState
    """The shared state, once started."""
    binding: BindingCycle
    """PreBind, Bind (apiserver, store) and PostBind of the requests that passed Permit, once started."""
    handback: HandBack
    """Pods handed back, and failed steps retried or given up, once started."""

    def __init__(
        self,
        settings: ConnectionSettings | None,
        options: BinderOptions | None = None,
        *,
        frameworks: Mapping[str, Framework] | None = None,
        permit: PermitGate | None = None,
        apiserver: ApiBinding | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "binder",
    ) -> None:
        super().__init__(name, settings)
        self.apiserver = apiserver
        """Cluster mode: bind in the kube-apiserver first (`kubus.binder.apiserver`); None: the
        bus mode, where the store's bind is the binding and the node's agent is told."""
        self.options = options or BinderOptions()
        self.frameworks: Mapping[str, Framework] = dict(frameworks or {})
        """Each profile's framework (its PreBind, Bind, PostBind, Reserve plugins), from the
        scheduler configuration; a profile not in it binds with the store's bind alone."""
        self._given_permit = permit
        self.permit: PermitGate = permit or AllowAll()
        """WaitOnPermit: a `PermitWatcher` over Redis once started (when a profile has Permit
        plugins), unless one was given."""
        self.clock = clock
        self.source = f"{name}/{socket.gethostname()}"
        """Who recorded the pod events this binder writes."""
        self.events = None if apiserver is None else ScheduledEvents(apiserver.client, instance=socket.gethostname())
        """Cluster mode: the Scheduled events of the pods it binds, written to the apiserver."""
        self._loop: asyncio.Task[None] | None = None
        self._consumed = asyncio.Event()
        self._faults = MessageFaults(self.options.max_failures)

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.nc is not None and self.js is not None and self.redis is not None
        self.store = ClusterState(self.redis, clock=self.clock)
        # intake: stop() unsubscribes it first, so no new request is fetched while stopping.
        subscription = self.intake(
            await ensure_pull_consumer(
                self.nc,
                self.js,
                BIND_STREAM.name,
                consumer_name(self.options.durable),
                BIND_STREAM.subjects[0],
                ack_wait=self.options.ack_wait,
                description="Binders: every replica takes reserved pods to bind from here.",
            )
        )
        self.handback = HandBack(
            store=self.store,
            js=self.js,
            frameworks=self.frameworks,
            outage=self.outage,
            faults=self._faults,
            max_failures=self.options.max_failures,
            metrics=self.metrics,
            clock=self.clock,
            log=self.log,
        )
        self.binding = BindingCycle(
            store=self.store,
            frameworks=self.frameworks,
            apiserver=self.apiserver,
            events=self.events,
            handback=self.handback,
            publish=self._publish,
            metrics=self.metrics,
            clock=self.clock,
            source=self.source,
            log=self.log,
        )
        if self.apiserver is not None:
            # The pods the watcher sees the apiserver delete: a preemptor's binding waits on its victims'.
            await self.nc.subscribe(APISERVER_DELETED, cb=self.apiserver.deletions.on_message)
        if self._given_permit is None and any(fw.permit for fw in self.frameworks.values()):
            watcher = PermitWatcher(
                store=self.store, metrics=self.metrics, poll=self.options.permit_poll, clock=self.clock
            )
            self.permit = watcher
            # Reads the waits on Permit of every pod this binder waits for, in one round trip a poll.
            self.spawn("permit watcher", watcher.run)
        # Binds reserved pods: fetches batches from the consumer every replica shares.
        self._loop = self.spawn("bind loop", self._bind_loop, subscription)

    async def on_stop(self) -> None:
        # The bind loop finishes the batch in hand and returns; unfetched requests stay in the
        # stream for the other replicas (or this one, restarted).
        if self._loop is not None and not self._loop.done():
            await self._consumed.wait()
        if self.events is not None:
            await self.events.drain(_EVENTS_DRAIN)
        if self.apiserver is not None:
            await self.apiserver.client.close()

    # -- the loop --------------------------------------------------------------------------------

    async def _bind_loop(self, subscription: PullConsumer) -> None:
        # Batches run as tasks, so a batch whose pods wait on Permit holds up no later one: the
        # loop fetches on while at most `batches_in_flight` batches are being handled.
        in_flight: set[asyncio.Task[list[BindResult | None]]] = set()
        try:
            while not self.stopping.is_set():
                messages = await self.fetch(
                    subscription, self.options.batch, self.options.fetch_timeout, pace=self.options.fetch_pace
                )
                if messages:
                    task = asyncio.ensure_future(self.handle_batch(messages))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                    if len(in_flight) >= self.options.batches_in_flight:
                        await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            if in_flight:
                await asyncio.wait(in_flight)
        finally:
            for task in in_flight:
                task.cancel()
            self._consumed.set()

    async def handle(self, msg: Msg) -> BindResult | None:
        """Handle one delivered BindRequest to the end (acked, nak'ed or terminated). Never
        raises (but for cancellation). Returns what became of it; None for garbage."""
        return (await self.handle_batch([msg]))[0]

    async def handle_batch(self, msgs: Sequence[Msg]) -> list[BindResult | None]:
        """Handle delivered BindRequests to the end (each acked, nak'ed or terminated). Never
        raises (but for cancellation). Returns what became of each, in order; None for garbage.

        Every request waits on Permit on its own; those that pass are bound together: one
        `ClusterState.bind_many` (about one Redis round trip), one `publish_durable_many` of
        every assignment and event (about one NATS round trip), then the acks. A pod still
        waiting on Permit holds up no other: what passes meanwhile is bound in the next group."""
        started = time.perf_counter()
        slots: list[Work | None] = []
        works: list[Work] = []
        for msg in msgs:
            try:
                request = decode(BindRequest, msg.data)
                check_request(request)
            except MessageError as exc:
                await self._reject(msg, str(exc))
                slots.append(None)
                continue
            work = Work(msg, request, started)
            slots.append(work)
            works.append(work)
        if works:
            async with in_progress_while([w.msg for w in works], self.options.ack_wait / 3):
                await self._through_permit(works)
        return [w.result if w is not None else None for w in slots]

    async def _through_permit(self, works: list[Work]) -> None:
        """WaitOnPermit for each request; bind those that pass, group by group as they pass."""
        if isinstance(self.permit, AllowAll):  # passes at once: no task per request
            await self.binding.bind_group(works)
            return
        if isinstance(self.permit, PermitWatcher):  # one read: most pods do not wait at all
            try:
                states = await self.store.permit_states(w.request.uid for w in works)
            except Exception as exc:
                for work in works:
                    await self.handback.fail(work, exc)
                return
            free = [w for w in works if not self.permit.waits(w.request, states.get(w.request.uid))]
            if free:
                await self.binding.bind_group(free)
            works = [w for w in works if self.permit.waits(w.request, states.get(w.request.uid))]
            if not works:
                return
        tasks: dict[asyncio.Future[Status], tuple[int, Work]] = {
            asyncio.ensure_future(self._wait_on_permit(w.request)): (i, w) for i, w in enumerate(works)
        }
        pending: set[asyncio.Future[Status]] = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                group: list[Work] = []
                for task in sorted(done, key=lambda t: tasks[t][0]):  # in the order delivered
                    work = tasks[task][1]
                    error = task.exception()
                    if error is not None:
                        assert isinstance(error, Exception)
                        await self.handback.fail(work, error)
                    elif not task.result().is_success:
                        status = task.result()
                        await self.handback.hand_back_now(work, f"Permit: {status.message() or status.code.name}")
                    else:
                        group.append(work)
                if group:
                    await self.binding.bind_group(group)
        finally:
            for task in pending:
                task.cancel()

    async def _wait_on_permit(self, request: BindRequest) -> Status:
        """WaitOnPermit: gangs wait here; the timeout is kube's Permit timeout."""
        try:
            async with asyncio.timeout(self.options.permit_timeout):
                return await self.permit.wait_on_permit(request)
        except TimeoutError:
            return Status.unschedulable(f"rejected due to timeout after waiting {self.options.permit_timeout:g}s")

    async def hand_back(self, request: BindRequest, message: str, msg: Msg | None = None) -> bool:
        """Unreserve and hand the pod back (`HandBack.hand_back`): False when it was bound
        already and stays bound, True when handed back. Idempotent; raises on Redis/NATS errors."""
        return await self.handback.hand_back(request, message, msg)

    async def _publish(self, publications: Sequence[Publication]) -> list[PubAck | Exception]:
        """Publish durably, all at once; an error in the place of each message not stored (the
        binding cycle's `Publish`)."""
        return await publish_durable_many(self.jetstream(), publications, return_exceptions=True)

    async def _reject(self, msg: Msg, reason: str) -> None:
        # By the stream's filter, not the subject: garbage on many subjects is not many series.
        self.metrics.rejected_messages.labels(subject=BIND_ALL).inc()
        self.log.error("bind request rejected: not a BindRequest", subject=msg.subject, reason=reason)
        with contextlib.suppress(Exception):
            await msg.term()
