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
   redelivery) → the `NodeAssignment` for the node's agent (msg id ``assign/<uid>/<attempt>``),
   a ``pod.bound`` event and (OK only) a "Scheduled" pod event. GONE (deleted meanwhile) →
   release the room. CONFLICT/NOT_FOUND (the pod moved on) → release this attempt's room.
5. PostBind plugins (errors logged). Ack.

A fetched batch is handled together: each request waits on Permit on its own (a waiting pod
holds up no other), and the requests that pass, as many as pass at a time, go through steps 3
and 4 in one `ClusterState.bind_many` call (per pod one atomic script on a single Redis: mark
bound, bind, the "Scheduled" event, release when refused), their messages go out in one
`publish_durable_many`, then each is acked. A request whose message could not be published
is retried alone (nak); the rest of its batch is acked.

Handing a pod back (Permit rejected or timed out, PreBind or Bind failed, retries exhausted):
Unreserve (the profile's Reserve plugins, in reverse order), give the room back (unreserve, or
release once marked bound; both on the attempt), a ``pod.unreserved`` event, then
``Outcomes([Outcome(BIND_FAILED, attempt=...)])`` on ``kubus.pods.requeue`` (msg id
``requeue/<uid>/<attempt>``), then ack. The queue moves the pod back to Pending with a
compare-and-set on that attempt, so a stale hand-back changes nothing.

Transient errors (Redis or NATS away, `kubus.service.is_transient`): ``nak`` with a growing
delay and intake paused until the servers answer (`kubus.service.Outage`), as long as it takes.
Other failures are counted per request (`kubus.bus.MessageFaults`); the last allowed one
(``max_failures``) hands the pod back instead. Garbage on the subject is
terminated with a log line and ``kubus_rejected_messages_total``, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from nats.aio.msg import Msg
from nats.js.api import PubAck

from kubus.api.errors import ManifestError
from kubus.api.manifests import wire_pod
from kubus.api.objects import Pod
from kubus.binder.apiserver import ApiBinding, ApiBindResult
from kubus.bus import (
    BIND_ALL,
    BIND_STREAM,
    PODS_REQUEUE,
    EventKind,
    MessageFaults,
    Publication,
    PullConsumer,
    announcements,
    consumer_name,
    deliveries,
    ensure_pull_consumer,
    msgids,
    node_pods,
    publish_durable,
    publish_durable_many,
    redelivery_delay,
)
from kubus.bus.messages import (
    BindRequest,
    MessageError,
    NodeAssignment,
    Outcome,
    OutcomeKind,
    Outcomes,
    decode,
    encode,
)
from kubus.framework.cycle_state import CycleState
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import MAX_PERMIT_TIMEOUT, Framework
from kubus.framework.status import Code, Status
from kubus.metrics import Metrics
from kubus.service import TRANSIENT_ERRORS, Service, StructuredLogger, is_transient
from kubus.settings import ConnectionSettings
from kubus.store import ClusterState, EventType, PermitState, PodEvent, PodPhase, StoreCode
from kubus.store.cluster_state import Binding, BindingResult

__all__ = ["AllowAll", "BindResult", "BinderOptions", "BinderService", "PermitGate", "PermitWatcher"]


_log = logging.getLogger("kubus.binder")


class PermitGate(Protocol):
    """WaitOnPermit: decides whether a reserved pod may be bound (gangs wait here for their
    members). Returns Success to go on, anything else (with reasons) to hand the pod back.
    The binder bounds the wait with its ``permit_timeout``."""

    async def wait_on_permit(self, request: BindRequest) -> Status: ...


class AllowAll:
    """The WaitOnPermit of a profile without Permit plugins: every pod may be bound at once."""

    async def wait_on_permit(self, request: BindRequest) -> Status:
        return Status.success()


class PermitWatcher:
    """WaitOnPermit over the waits in Redis: a pod the cycle made wait is let go when no plugin
    holds it any more, failed when one rejected it or its deadline passed. One task reads every
    waiting pod's state in one pipelined round trip every ``poll`` seconds. Whoever ends a wait
    clears it. Records `scheduler_permit_wait_duration_seconds`."""

    def __init__(self, store: ClusterState, metrics: Metrics, *, poll: float, clock: Callable[[], float]) -> None:
        self.store = store
        self.metrics = metrics
        self.poll = poll
        self.clock = clock
        self._waiters: dict[tuple[str, int], asyncio.Future[Status]] = {}
        self._wake = asyncio.Event()

    async def wait_on_permit(self, request: BindRequest) -> Status:
        key = (request.uid, request.attempt)
        future = self._waiters.get(key)
        if future is None:
            future = self._waiters[key] = asyncio.get_running_loop().create_future()
            self._wake.set()
        started = time.perf_counter()
        status = await asyncio.shield(future)
        if status is _NO_WAIT:
            return Status.success()
        result = "allowed" if status.is_success else "rejected"
        self.metrics.permit_wait_duration.labels(result=result).observe(time.perf_counter() - started)
        await self.store.clear_permit(request.uid, request.profile, request.attempt)
        return status

    def waits(self, request: BindRequest, state: PermitState | None) -> bool:
        """Whether ``state`` (read for ``request``'s pod) is a wait of the request's attempt."""
        return state is not None and state.attempt == request.attempt

    async def run(self) -> None:
        """The watcher loop (a root task of the binder)."""
        while True:
            if not self._waiters:
                self._wake.clear()
                await self._wake.wait()
            waiting = [(key, f) for key, f in self._waiters.items() if not f.done()]
            try:
                states = await self.store.permit_states(uid for (uid, _), _ in waiting)
            except TRANSIENT_ERRORS as exc:  # Redis away: the waits go on; read again later
                _log.warning("event=%r error=%r", "permit states unreadable; retrying", exc)
                await asyncio.sleep(max(self.poll, 0.5))
                continue
            now = self.clock()
            for (uid, attempt), future in waiting:
                state = states.get(uid)
                if state is None or state.attempt != attempt:
                    future.set_result(_NO_WAIT)  # Permit did not make it wait (or it ended)
                elif state.rejected:
                    future.set_result(Status.unschedulable(state.rejected))
                elif state.allowed:
                    future.set_result(Status.success())
                elif state.timed_out(now):
                    plugins = ", ".join(sorted(state.pending))
                    future.set_result(Status.unschedulable(f"rejected due to timeout waiting on {plugins}"))
            for key in [k for k, f in self._waiters.items() if f.done()]:
                del self._waiters[key]
            await asyncio.sleep(self.poll)


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


@dataclass(frozen=True, slots=True)
class BinderOptions:
    """How a binder replica works. Every replica of a deployment should use the same values."""

    permit_timeout: float = MAX_PERMIT_TIMEOUT
    """Seconds WaitOnPermit waits at most, whatever the Permit plugins' own timeouts (kube caps
    them at 15 minutes)."""
    permit_poll: float = 0.05
    """Seconds between two reads of the waits on Permit (one pipelined read for all of them)."""
    max_failures: int = 5
    """Failed tries of one BindRequest at most; the last hands the pod back. A try that failed
    because NATS or Redis was away is not counted: the request waits out the outage."""
    ack_wait: float = 30.0
    """Seconds JetStream waits for an ack before redelivering; a long handler (a permit wait)
    reports progress every third of it."""
    batch: int = 64
    """BindRequests fetched and handled concurrently at a time."""
    batches_in_flight: int = 8
    """Fetched batches handled at once at most (a batch waiting on Permit keeps its slot)."""
    fetch_timeout: float = 1.0
    """Seconds one fetch waits for requests (how quickly an idle binder notices stop)."""
    fetch_pace: float = 0.01
    """Seconds between a fetch that came back short and the next (`kubus.service.Service.fetch`):
    requests trickling in are bound, stored and announced as one batch."""
    durable: str = "kubus-binder"
    """Name of the durable consumer every replica shares."""

    def __post_init__(self) -> None:
        for name in ("permit_timeout", "ack_wait", "fetch_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if not 0 <= self.fetch_pace <= 1:
            raise ValueError(f"fetch_pace: must be 0 to 1 second, got {self.fetch_pace!r}")
        if self.max_failures < 1:
            raise ValueError(f"max_failures: must be at least 1, got {self.max_failures}")
        if self.batch < 1 or self.batches_in_flight < 1:
            raise ValueError(
                f"batch, batches_in_flight: must be at least 1, got {self.batch}, {self.batches_in_flight}"
            )


class BinderService(Service):
    """The binding-cycle service; see the module docstring for the protocol it follows.

    ``BinderService(settings, options)``; `run()` until stopped. ``permit`` is the
    WaitOnPermit gate (default `AllowAll`). ``clock`` gives seconds since the epoch (tests).
    """

    metrics_role = "binder"

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
        self.cluster: ClusterState | None = None
        self._loop: asyncio.Task[None] | None = None
        self._consumed = asyncio.Event()
        self._faults = MessageFaults(self.options.max_failures)

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.nc is not None and self.js is not None and self.redis is not None
        self.cluster = ClusterState(self.redis, clock=self.clock)
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
        if self._given_permit is None and any(fw.permit for fw in self.frameworks.values()):
            watcher = PermitWatcher(self.cluster, self.metrics, poll=self.options.permit_poll, clock=self.clock)
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
        slots: list[_Work | None] = []
        works: list[_Work] = []
        for msg in msgs:
            try:
                request = decode(BindRequest, msg.data)
                _check(request)
            except MessageError as exc:
                await self._reject(msg, str(exc))
                slots.append(None)
                continue
            work = _Work(msg, request, started)
            slots.append(work)
            works.append(work)
        if works:
            keepalive = asyncio.ensure_future(self._keep_alive(works))
            try:
                await self._through_permit(works)
            finally:
                keepalive.cancel()
        return [w.result if w is not None else None for w in slots]

    async def _through_permit(self, works: list[_Work]) -> None:
        """WaitOnPermit for each request; bind those that pass, group by group as they pass."""
        if isinstance(self.permit, AllowAll):  # passes at once: no task per request
            await self._bind_group(works)
            return
        if isinstance(self.permit, PermitWatcher):  # one read: most pods do not wait at all
            try:
                states = await self._store().permit_states(w.request.uid for w in works)
            except Exception as exc:
                for work in works:
                    self._finish(work, await self._failed(work.request, work.msg, exc, self._log(work.request)))
                return
            free = [w for w in works if not self.permit.waits(w.request, states.get(w.request.uid))]
            if free:
                await self._bind_group(free)
            works = [w for w in works if self.permit.waits(w.request, states.get(w.request.uid))]
            if not works:
                return
        tasks: dict[asyncio.Future[Status], tuple[int, _Work]] = {
            asyncio.ensure_future(self._wait_on_permit(w.request)): (i, w) for i, w in enumerate(works)
        }
        pending: set[asyncio.Future[Status]] = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                group: list[_Work] = []
                for task in sorted(done, key=lambda t: tasks[t][0]):  # in the order delivered
                    work = tasks[task][1]
                    error = task.exception()
                    if error is not None:
                        assert isinstance(error, Exception)
                        self._finish(work, await self._failed(work.request, work.msg, error, self._log(work.request)))
                    elif not task.result().is_success:
                        status = task.result()
                        await self._hand_back_now(work, f"Permit: {status.message() or status.code.name}")
                    else:
                        group.append(work)
                if group:
                    await self._bind_group(group)
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

    async def _hand_back_now(self, work: _Work, reason: str) -> None:
        try:
            await self.hand_back(work.request, reason, work.msg)
            result = BindResult.HANDED_BACK
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            result = await self._failed(work.request, work.msg, exc, self._log(work.request))
        self._finish(work, result)

    async def _bind_group(self, works: list[_Work]) -> None:
        """PreBind, Bind and PostBind of requests whose Permit passed, exactly as docs/services.md
        step 5 says, every step conditional on the attempt. Pods of profiles with binding
        plugins run them one by one first; the store's bind is one call for the group."""
        plain: list[_Work] = []
        plugged: list[_Work] = []
        for work in works:
            (plain if self._framework(work.request).binds_plainly else plugged).append(work)
        if plugged:
            works = plain + [w for w in await asyncio.gather(*map(self._bind_plugins, plugged)) if w is not None]
        if works and self.apiserver is not None:
            works = await self._bind_in_apiserver(self.apiserver, works)
        if not works:
            return
        await self._store_bind(works)
        for work in works:
            if work.result is BindResult.BOUND and work.pod is not None:
                fw = self._framework(work.request)
                await fw.run_post_bind(work.cycle_state, work.pod, work.request.node, self._time_plugin)

    async def _bind_in_apiserver(self, apiserver: ApiBinding, works: list[_Work]) -> list[_Work]:
        """Bind in the apiserver (cluster mode); the works it bound, for the store's bind. The
        others are finished here: retried (an error), or this attempt given up (the pod bound
        elsewhere, or gone: its room given back, the message acked)."""
        bound: list[_Work] = []
        for work, result in zip(works, await apiserver.bind_all([w.request for w in works]), strict=True):
            if result is ApiBindResult.BOUND:
                bound.append(work)
            elif isinstance(result, Exception):
                self._finish(work, await self._failed(work.request, work.msg, result, self._log(work.request)))
            else:
                try:
                    await self._unreserve_plugins(work.request)
                    await self._store().unreserve(work.request.node, work.request.uid, str(work.request.attempt))
                    await work.msg.ack()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._finish(work, await self._failed(work.request, work.msg, exc, self._log(work.request)))
                    continue
                elsewhere = result is ApiBindResult.ELSEWHERE
                self._log(work.request).info(
                    "bind given up: the apiserver has the pod " + ("bound elsewhere" if elsewhere else "no more")
                )
                self._finish(work, BindResult.CONFLICT if elsewhere else BindResult.DELETED)
        return bound

    async def _bind_plugins(self, work: _Work) -> _Work | None:
        """PreBind, then Bind plugins until one does not Skip, for one request; the work to
        record in the store (Bind said Success), or None once it was handed back."""
        request, fw = work.request, self._framework(work.request)
        try:
            work.pod = wire_pod(request.manifest, request.uid, request.key)
        except (ManifestError, ValueError) as exc:
            await self._hand_back_now(work, f"unreadable manifest: {exc}")
            return None
        point, status = "PreBind", await fw.run_pre_bind(work.cycle_state, work.pod, request.node, self._time_plugin)
        if status.is_success:
            point, status = "Bind", await fw.run_bind(work.cycle_state, work.pod, request.node, self._time_plugin)
        if status.is_success:
            return work
        await self._hand_back_now(work, f"{point} plugin {status.plugin}: {status.message() or status.code.name}")
        return None

    def _time_plugin(self, plugin: str, point: ExtensionPoint, status: Status, seconds: float) -> None:
        self.metrics.plugin_execution_duration.labels(
            plugin=plugin, extension_point=point.label, status=status.code.name
        ).observe(seconds)

    def _framework(self, request: BindRequest) -> Framework:
        return self.frameworks.get(request.profile) or _PLAIN

    async def _store_bind(self, works: list[_Work]) -> None:
        """The store's bind (DefaultBinder) of a group, and what follows it."""
        state = self._store()
        now = self.clock()
        bindings = [
            Binding(
                uid=r.uid,
                node=r.node,
                attempt=r.attempt,
                devices=r.gpu_devices,
                profile=r.profile,
                event=PodEvent(
                    now, EventType.NORMAL, "Scheduled", f"Successfully assigned {r.key} to {r.node}", self.source
                ),
            )
            for r in (w.request for w in works)
        ]
        try:
            # mark_bound, bind_pod, the Scheduled event, and release when refused: per pod atomic.
            results = await state.bind_many(bindings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if len(works) > 1 and not is_transient(exc):  # find the one at fault: each alone
                for work in works:
                    await self._store_bind([work])
                return
            for work in works:
                self._finish(work, await self._failed(work.request, work.msg, exc, self._log(work.request)))
            return

        publications: list[Publication] = []
        owners: list[int] = []
        outcomes: list[BindResult] = []
        failures: dict[int, Exception] = {}
        for i, (work, result) in enumerate(zip(works, results, strict=True)):
            try:
                outcome, pubs = self._after_bind(work.request, result)
            except Exception as exc:  # a bug: this request alone is retried
                outcomes.append(BindResult.RETRY)
                failures[i] = exc
                continue
            outcomes.append(outcome)
            publications += pubs
            owners += [i] * len(pubs)

        if publications:
            try:
                acks = await self._publish(publications)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                acks = [exc] * len(publications)
            for owner, ack in zip(owners, acks, strict=True):
                if isinstance(ack, Exception):
                    failures.setdefault(owner, ack)
        for i, work in enumerate(works):
            failure = failures.get(i)
            if failure is None:
                try:
                    await work.msg.ack()
                    self._finish(work, outcomes[i])
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as ack_exc:
                    failure = ack_exc
            self._finish(work, await self._failed(work.request, work.msg, failure, self._log(work.request)))

    def _after_bind(self, request: BindRequest, result: BindingResult) -> tuple[BindResult, list[Publication]]:
        """What one pod's Bind step means, and the messages that tell everyone (published before
        the ack; their msg ids make a redelivery's repeats harmless)."""
        uid, attempt = request.uid, request.attempt
        if result.marked in (StoreCode.NOT_FOUND, StoreCode.CONFLICT):
            # The attempt was abandoned (the janitor or a newer attempt took over). Still Reserved
            # at this attempt with its room gone: a hand-back of ours was cut short: finish it.
            why = "no reservation" if result.marked is StoreCode.NOT_FOUND else "the reservation is another attempt's"
            unfinished = (
                result.marked is StoreCode.NOT_FOUND
                and bool(attempt)
                and result.phase is PodPhase.RESERVED
                and result.version == attempt
            )
            pubs = (
                [self._requeue_publication(request, f"reservation lost before binding ({why})")] if unfinished else []
            )
            self._log(request).info("bind request dropped: attempt abandoned", reason=why, handed_back=unfinished)
            return BindResult.ABANDONED, pubs
        write = result.write
        assert write is not None
        if result.bound:
            # Bound now, or before (a redelivery): the node's agent and everyone else are told.
            assignment = NodeAssignment(
                uid=uid,
                key=request.key,
                node=request.node,
                manifest=request.manifest,
                gpu_devices=request.gpu_devices,
                attempt=attempt,
            )
            pubs = announcements.bound(assignment, request.profile, at=self.clock())
            if self.apiserver is not None:  # no agents: the kubelet runs it, told by the apiserver
                pubs = [p for p in pubs if p.subject != node_pods(request.node)]
            if write.ok and result.created_at:
                latency = max(0.0, self.clock() - result.created_at)
                self.metrics.pod_scheduling_sli_duration.labels(attempts=str(result.attempts)).observe(latency)
                self.metrics.pod_scheduling_attempts.observe(max(result.attempts, 1))
            if self.log.logger.isEnabledFor(logging.DEBUG):
                self._log(request).debug("pod bound", already=write.code is StoreCode.ALREADY)
            return BindResult.BOUND, pubs
        pubs = []
        if result.released is StoreCode.OK:
            pubs.append(self._event_publication(EventKind.POD_UNRESERVED, request))
        if write.code is StoreCode.GONE:
            self._log(request).info("pod deleted while binding: room released")
            return BindResult.DELETED, pubs
        # CONFLICT or NOT_FOUND: the pod moved on (bound elsewhere, a newer attempt, gone).
        self._log(request).warning(
            "bind refused: the pod moved on; this attempt's room released",
            code=str(write.code),
            phase=str(write.phase or "-"),
            version=write.version,
        )
        return BindResult.CONFLICT, pubs

    def _finish(self, work: _Work, result: BindResult) -> None:
        work.result = result
        self.metrics.binding_duration.labels(result=str(result)).observe(time.perf_counter() - work.started_at)

    async def _publish(self, publications: Sequence[Publication]) -> list[PubAck | Exception]:
        """Publish durably, all at once; an error in the place of each message not stored."""
        return await publish_durable_many(self.jetstream(), publications, return_exceptions=True)

    async def _failed(self, request: BindRequest, msg: Msg, exc: Exception, log: StructuredLogger) -> BindResult:
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
        failures = self._faults.failed(msg)
        if failures < self.options.max_failures:
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

    # -- outcomes --------------------------------------------------------------------------------

    async def hand_back(self, request: BindRequest, message: str, msg: Msg | None = None) -> bool:
        """Unreserve and hand the pod back: give this attempt's room back, tell the queue
        (`_requeue`), ack ``msg`` last. Idempotent; raises on Redis/NATS errors.

        A pod that is bound already (a delivery before this one got that far, and only telling
        its node failed) stays bound: bound is for life, its room stays, the queue is not told,
        and the node's agent picks the pod up by its resync. Returns False then, True when the
        pod was handed back."""
        state = self._store()
        await self._unreserve_plugins(request)
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
            p = self._event_publication(EventKind.POD_UNRESERVED, request)
            await publish_durable(self.jetstream(), p.subject, p.payload, p.msg_id)
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

    async def _unreserve_plugins(self, request: BindRequest) -> None:
        """Unreserve of the profile's Reserve plugins (reverse order), with a fresh CycleState
        and the node as the store has it: what a failure after Reserve owes them."""
        fw = self._framework(request)
        if not fw.reserve:
            return
        try:
            pod = wire_pod(request.manifest, request.uid, request.key)
        except (ManifestError, ValueError):
            return  # no pod to unreserve: what the plugins reserved for it cannot be named
        await fw.run_unreserve_after(self._store(), pod, request.node)

    async def _requeue(self, request: BindRequest, message: str) -> None:
        """``Outcome(BIND_FAILED)`` on kubus.pods.requeue: the queue moves the pod back to Pending
        (compare-and-set on the attempt) and queues it. Once per attempt (the msg id)."""
        p = self._requeue_publication(request, message)
        await publish_durable(self.jetstream(), p.subject, p.payload, p.msg_id)

    def _requeue_publication(self, request: BindRequest, message: str) -> Publication:
        outcome = Outcome(
            uid=request.uid, kind=OutcomeKind.BIND_FAILED, node=request.node, message=message, attempt=request.attempt
        )
        return Publication(PODS_REQUEUE, encode(Outcomes((outcome,))), msgids.requeue(request.uid, request.attempt))

    def _event_publication(self, kind: EventKind, request: BindRequest) -> Publication:
        return announcements.pod_event(
            kind,
            request.key,
            request.uid,
            at=self.clock(),
            node=request.node,
            attempt=request.attempt,
            profile=request.profile,
        )

    async def _reject(self, msg: Msg, reason: str) -> None:
        # By the stream's filter, not the subject: garbage on many subjects is not many series.
        self.metrics.rejected_messages.labels(subject=BIND_ALL).inc()
        self.log.error("bind request rejected: not a BindRequest", subject=msg.subject, reason=reason)
        with contextlib.suppress(Exception):
            await msg.term()

    async def _keep_alive(self, works: list[_Work]) -> None:
        """Tell JetStream the requests not yet done are still being worked on (a long permit
        wait)."""
        while True:
            await asyncio.sleep(self.options.ack_wait / 3)
            for work in works:
                if work.result is None:
                    with contextlib.suppress(Exception):
                        await work.msg.in_progress()

    # -- helpers ---------------------------------------------------------------------------------

    def _store(self) -> ClusterState:
        if self.cluster is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.cluster

    def _log(self, request: BindRequest) -> StructuredLogger:
        return self.log.bind(pod=request.key, uid=request.uid, node=request.node, attempt=request.attempt)


@dataclass(slots=True)
class _Work:
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


_NO_WAIT = Status(Code.SUCCESS, ("no wait on Permit",))

_PLAIN = Framework()
"""A profile the binder has no configuration for: the store's bind alone."""


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
