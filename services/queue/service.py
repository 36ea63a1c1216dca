"""QueueService: the scheduling queue of every profile, fed from the bus, kept in step with Redis.

What it does, per docs/services.md (the contract):

- takes pods from JetStream ``KUBUS_PODS`` (``kubus.pods.submit`` / ``.delete`` / ``.requeue``)
  through one durable pull consumer; bad input is acked, announced as a ``pod.rejected`` event
  with its one-line error and counted, and never stops the service;
- keeps one `SchedulingQueue` per profile and serves ``kubus.queue.<profile>.pop`` and
  ``.done`` (core NATS request/reply);
- records why a pod is pending on its PodRecord (reason/message) and as PodEvents, as
  ``kubectl describe`` shows them;
- moves unschedulable pods when cluster events (``kubus.events.>``) may help them, flushes the
  backoffQ every second and the unschedulable leftovers after five minutes;
- repairs what crashed services leave (the janitor), watches node heartbeats, and resyncs
  with Redis, which is also how a restarted queue rebuilds: nothing pending is lost.

Redis is the truth; the queues are an in-memory index over the Pending pods of each profile.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import nats.errors
import redis.exceptions
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from kubus import codec
from kubus.api.errors import ManifestError
from kubus.api.objects import Pod
from kubus.bus import (
    EVENTS,
    EVENTS_STREAM,
    MAX_MANIFEST_SIZE,
    MSG_ID_HEADER,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    EventKind,
    Publication,
    deliveries,
    ensure_pull_consumer,
    event_filter,
    event_subject,
    node_pods,
    publish_durable,
    publish_durable_many,
    queue_done,
    queue_pop,
    redelivery_delay,
)
from kubus.bus.messages import (
    ClusterEvent,
    MessageError,
    NodeAssignment,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodDeletion,
    PopReply,
    PopRequest,
    QueuedPod,
    decode,
    encode,
)
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.registry import ExtensionPoint, Registry
from kubus.plugins import in_tree_registry
from kubus.queue.intake import Rejected, Submission, identify, read_submission
from kubus.queue.queueing import CLUSTER_EVENTS, QueueName, SchedulingQueue
from kubus.service import Service
from kubus.settings import ConnectionSettings
from kubus.store import (
    ClusterState,
    EventType,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
    StoreCode,
)

__all__ = ["ERROR_HEADER", "QueueOptions", "QueueService"]

ERROR_HEADER = "Kubus-Error"
"""Header of an empty reply to a pop or done request the queue could not read: the one-line error."""

_PENDING_QUEUES = (QueueName.ACTIVE, QueueName.BACKOFF, QueueName.UNSCHEDULABLE, QueueName.GATED)
_TRANSIENT = (redis.exceptions.RedisError, ConnectionError, TimeoutError, OSError, nats.errors.Error)
"""Errors of a server that is down or slow: logged and retried, never fatal."""


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """How the queue service runs. Seconds unless said otherwise."""

    in_flight_timeout: float = 30.0
    """A popped pod whose outcome has not come back after this is handed out again (if it is
    still Pending in Redis; otherwise it is dropped)."""
    reserve_timeout: float = 60.0
    """A pod Reserved this long whose reservation no binder marked bound is given back and
    requeued by the janitor; one whose reservation is bound has its bind finished."""
    reconcile_grace: float = 30.0
    """Grace the full reconcile gives a step in flight (ClusterState.reconcile's grace_s)."""
    node_grace: float = 40.0
    """A node whose last heartbeat is older than this is marked unreachable (node.lost)."""
    resync: float = 30.0
    """How often Pending pods in Redis are compared with the queues (missing ones added,
    vanished ones dropped)."""
    flush_interval: float = 1.0
    """How often the backoffQ is flushed (kube: every second)."""
    leftover_interval: float = 30.0
    """How often unschedulable leftovers are looked for (kube: every 30 s)."""
    max_in_unschedulable: float = 300.0
    """podMaxInUnschedulablePodsDuration: an unschedulable pod is retried after this anyway."""
    in_flight_interval: float = 1.0
    """How often in-flight deadlines are checked."""
    janitor_interval: float = 10.0
    """How often Reserved pods past reserve_timeout are looked for (cheap: reads the Reserved
    pods only)."""
    reconcile_interval: float = 300.0
    """How often the full ClusterState.reconcile runs (reads every node's reservations)."""
    node_interval: float = 5.0
    """How often node heartbeats are checked."""
    fetch_batch: int = 256
    """Messages fetched from KUBUS_PODS at a time (the submits among them are stored with one
    Redis round trip and announced with one JetStream round trip)."""
    max_deliver: int = 5
    """Deliveries of one KUBUS_PODS message at most; the last failure rejects it."""
    ack_wait: float = 30.0
    """Seconds JetStream waits for an ack before redelivering."""
    durable: str = "kubus-queue"
    """Name of the durable consumer on KUBUS_PODS."""
    max_manifest_bytes: int = MAX_MANIFEST_SIZE
    """Largest pod manifest (as JSON) accepted; bigger ones are rejected (TooLarge). Default:
    `kubus.bus.MAX_MANIFEST_SIZE`, the limit `kubus apply` checks too."""
    max_pop: int = 10_000
    """Most pods one pop hands out, whatever it asks."""
    max_pop_wait: float = 5.0
    """Longest a pop waits for a first pod, whatever it asks."""

    def __post_init__(self) -> None:
        for name in (
            "in_flight_timeout",
            "reserve_timeout",
            "node_grace",
            "resync",
            "flush_interval",
            "leftover_interval",
            "in_flight_interval",
            "janitor_interval",
            "reconcile_interval",
            "node_interval",
            "ack_wait",
        ):
            if not getattr(self, name) > 0:
                value = getattr(self, name)
                raise ValueError(f"queue option {name}: must be a positive number of seconds, got {value!r}")
        if self.fetch_batch < 1 or self.max_deliver < 1 or self.max_pop < 1 or self.max_manifest_bytes < 1024:
            raise ValueError("queue options fetch_batch, max_deliver, max_pop must be >= 1, max_manifest_bytes >= 1024")


def _lane(msg: Msg) -> str:
    """Which pod a KUBUS_PODS message is about, cheaply: messages of one lane are handled in
    order, lanes at once. Submits name their pod in the msg id (``submit/<ns>/<name>/<sha>``,
    docs/services.md); a submit without one is read for its name; deletions and hand-backs
    are small JSON. Whatever cannot be told shares one lane (in order, as before)."""
    try:
        if msg.subject == PODS_SUBMIT:
            msg_id = (msg.headers or {}).get(MSG_ID_HEADER, "")
            parts = msg_id.split("/")
            if len(parts) == 4 and parts[0] == "submit" and parts[1] and parts[2]:
                return f"pod:{parts[1]}/{parts[2]}"
            key = identify(msg.data)[0]
            return f"pod:{key}" if key else "?"
        if msg.subject == PODS_DELETE:
            deletion = decode(PodDeletion, msg.data)
            return f"pod:{deletion.namespace}/{deletion.name}"
        if msg.subject == PODS_REQUEUE:
            outcomes = decode(Outcomes, msg.data).outcomes
            return f"uid:{outcomes[0].uid}" if len(outcomes) == 1 else "?"
    except Exception:  # bad input: read again, and rejected, in its turn
        pass
    return "?"


class _Retry(Exception):
    """A message to process again later (the state it needs is changing); nak'd with a delay."""


class QueueService(Service):
    """The queue service; see the module docstring. ``settings`` None connects nothing (tests of
    the wiring only). ``registry`` builds each profile's PreEnqueue and QueueSort plugins
    (default: the in-tree plugins and the installed out-of-tree ones)."""

    def __init__(
        self,
        settings: ConnectionSettings | None,
        config: SchedulerConfiguration,
        options: QueueOptions | None = None,
        *,
        registry: Registry | None = None,
    ) -> None:
        super().__init__("queue", settings)
        self.config = config
        self.options = options or QueueOptions()
        registry = registry if registry is not None else in_tree_registry(entry_points=True)
        self.queues: dict[str, SchedulingQueue] = {
            profile.scheduler_name: self._build_queue(profile.scheduler_name, registry) for profile in config.profiles
        }
        """One scheduling queue per profile (schedulerName)."""
        self.store: ClusterState | None = None
        self._ready = {profile: asyncio.Event() for profile in self.queues}
        self._tokens: dict[str, int] = {}
        self._lost_nodes: set[str] | None = None
        self._next_node_scan = 0.0
        """When _check_nodes next reads every node's heartbeat (not only the silent ones)."""
        self._pods_sub: Any = None
        self._consumer_idle = asyncio.Event()
        self._consumer_idle.set()
        self._redis_slots = asyncio.Semaphore(32)
        """Bounds the Redis writes one batch of outcomes makes at once."""

    def _build_queue(self, name: str, registry: Registry) -> SchedulingQueue:
        profile = self.config.profile(name)

        def plugin(plugin_name: str) -> Any:
            return registry.get(plugin_name).factory(profile.plugin_args.get(plugin_name), None)

        sorts = [plugin(ref.name) for ref in profile.enabled(ExtensionPoint.QUEUE_SORT)]
        return SchedulingQueue(
            name,
            initial_backoff=float(self.config.pod_initial_backoff_seconds),
            max_backoff=float(self.config.pod_max_backoff_seconds),
            max_in_unschedulable=self.options.max_in_unschedulable,
            in_flight_timeout=self.options.in_flight_timeout,
            pre_enqueue=[plugin(ref.name) for ref in profile.enabled(ExtensionPoint.PRE_ENQUEUE)],
            queue_sort=sorts[0] if sorts else None,
            on_incoming=self._count_incoming,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        if self.nc is None or self.js is None or self.redis is None:
            return  # no connections: nothing to serve
        self.store = ClusterState(self.redis)
        # Rebuild the queues from Redis before serving a pop: a restart loses nothing pending.
        await self._resync()
        for profile in self.queues:
            self.intake(await self.nc.subscribe(queue_pop(profile), cb=partial(self._on_pop, profile)))
            self.intake(await self.nc.subscribe(queue_done(profile), cb=partial(self._on_done, profile)))
        # Only the cluster events (the kinds that can move a pod): not the bookkeeping ones, such
        # as the pod.accepted this service publishes for every pod.
        only = ConsumerConfig(filter_subjects=[event_filter(kind) for kind in sorted(CLUSTER_EVENTS)])
        self.intake(
            await self.js.subscribe(
                EVENTS,
                stream=EVENTS_STREAM.name,
                config=only,
                cb=self._on_event,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        )
        self._pods_sub = self.intake(
            await ensure_pull_consumer(
                self.js,
                PODS_STREAM.name,
                self.options.durable,
                f"{PODS_STREAM.subjects[0]}",
                ack_wait=self.options.ack_wait,
                max_deliver=self.options.max_deliver,
                description="the queue service: submitted, deleted and handed-back pods",
            )
        )
        o = self.options
        # Takes submitted, deleted and handed-back pods from JetStream, one at a time, in order.
        self.spawn("consume pods", self._consume_pods)
        # Pods whose backoff expired go to the activeQ (kube's flushBackoffQCompleted, every second).
        self.spawn("flush backoffQ", self._every, o.flush_interval, self._flush_backoff)
        # Pods unschedulable for too long are retried anyway (kube's flushUnschedulablePodsLeftover).
        self.spawn("flush unschedulable leftover", self._every, o.leftover_interval, self._flush_leftover)
        # A cycle that popped pods and died never reports them: hand them out again.
        self.spawn("in-flight deadlines", self._every, o.in_flight_interval, self._expire_in_flight)
        # A cycle or binder that died mid-attempt leaves pods Reserved: give them back or finish the bind.
        self.spawn("janitor", self._every, o.janitor_interval, self._repair_reserved)
        # Everything else a crash between two protocol steps leaves (ClusterState.reconcile).
        self.spawn("reconcile", self._every, o.reconcile_interval, self._reconcile)
        # Nodes that stopped heartbeating are marked lost, and found again when they come back.
        self.spawn("node lifecycle", self._every, o.node_interval, self._check_nodes)
        # Heals anything missed (a lost event, a pod changed behind our back) from Redis, the truth.
        self.spawn("resync", self._every, o.resync, self._resync)
        self._after_change()

    async def _every(self, interval: float, step: Callable[[], Awaitable[Any]]) -> None:
        """Run ``step`` every ``interval`` seconds; a server being down is logged, not fatal."""
        while True:
            await asyncio.sleep(interval)
            try:
                await step()
            except _TRANSIENT as exc:
                self.log.warning("periodic step failed; retrying", step=step.__name__, error=repr(exc))
            self._after_change()

    # -- bookkeeping -----------------------------------------------------------------------------

    def _count_rejected(self, subject: str) -> None:
        # The subjects the queue reads by name, or their stream's filter: a bounded label set.
        known = subject in (PODS_SUBMIT, PODS_DELETE, PODS_REQUEUE) or subject.startswith("kubus.queue.")
        label = subject if known else PODS_STREAM.subjects[0] if subject.startswith("kubus.pods.") else EVENTS
        self.metrics.rejected_messages.labels(subject=label).inc()

    def _count_incoming(self, queue: QueueName, event: str) -> None:
        self.metrics.queue_incoming_pods.labels(queue=str(queue), event=event).inc()

    def _after_change(self) -> None:
        """Refresh the pending-pods gauges and wake pops waiting for a profile that has pods."""
        totals: Counter[QueueName] = Counter()
        for profile, queue in self.queues.items():
            for name, count in queue.counts().items():
                totals[name] += count
            if len(queue):
                self._ready[profile].set()
        for name in _PENDING_QUEUES:
            self.metrics.pending_pods.labels(queue=str(name)).set(totals[name])

    def _pod_of(self, record: PodRecord) -> Pod | None:
        """The stored pod, parsed; None (logged) for a manifest that no longer parses."""
        try:
            return record.pod()
        except (ManifestError, codec.DecodeError) as exc:
            self.log.error("stored pod unreadable; not queued", pod=record.key, uid=record.uid, error=str(exc))
            return None

    def _cluster(self) -> ClusterState:
        if self.store is None:
            raise RuntimeError("queue: not connected")
        return self.store

    async def _publish_event(self, kind: EventKind, name: str, msg_id: str, **fields: Any) -> None:
        """Publish one event; ``fields`` as `_event_publication` takes them."""
        assert self.js is not None
        p = self._event_publication(kind, name, msg_id, **fields)
        await publish_durable(self.js, p.subject, p.payload, p.msg_id)

    @staticmethod
    def _event_publication(
        kind: EventKind,
        name: str,
        msg_id: str,
        *,
        node: str = "",
        reason: str = "",
        message: str = "",
        data: Mapping[str, Any] | None = None,
    ) -> Publication:
        event = ClusterEvent(
            kind=kind.value, name=name, node=node, at=time.time(), reason=reason, message=message, data=dict(data or {})
        )
        # orjson encodes the dataclass itself: the bytes encode() gives (no bytes fields), 8x faster.
        return Publication(event_subject(kind, name), codec.dumps(event), msg_id)

    async def _pod_event(self, uid: str, type_: EventType, reason: str, message: str, source: str) -> None:
        await self._cluster().append_event(uid, PodEvent(time.time(), type_, reason, message, source))

    # -- KUBUS_PODS: submit, delete, requeue -------------------------------------------------------

    async def _consume_pods(self) -> None:
        sub = self._pods_sub
        while not self.stopping.is_set():
            msgs = await self.fetch(sub, self.options.fetch_batch, timeout=1.0)
            if not msgs:
                continue
            self._consumer_idle.clear()
            try:
                # One lane per pod: a pod's messages in their order, different pods at once. The
                # batch runs in rounds, round i taking the i-th message of every lane, so the
                # submits of one round (each about another pod) share their round trips.
                lanes: dict[str, list[Msg]] = {}
                for msg in msgs:
                    lanes.setdefault(_lane(msg), []).append(msg)
                for i in range(max((len(lane) for lane in lanes.values()), default=0)):
                    round_ = [lane[i] for lane in lanes.values() if i < len(lane)]
                    if self.stopping.is_set():  # hand the rest back: the next queue gets them at once
                        for msg in round_:
                            await self._settle(msg.nak())
                        continue
                    submits = [m for m in round_ if m.subject == PODS_SUBMIT]
                    others = [m for m in round_ if m.subject != PODS_SUBMIT]
                    await asyncio.gather(self._submit_batch(submits), *map(self._handle_pods_message, others))
            finally:
                self._consumer_idle.set()
            self._after_change()

    async def on_stop(self) -> None:
        # The message being handled finishes (its ack is sent); the rest of its batch is nak'd.
        await self._consumer_idle.wait()

    async def _handle_pods_message(self, msg: Msg) -> None:
        """Process one KUBUS_PODS message; ack once its effect is in Redis. Never raises."""
        try:
            if msg.subject == PODS_SUBMIT:
                await self._on_submit(msg)
            elif msg.subject == PODS_DELETE:
                await self._on_delete(msg)
            elif msg.subject == PODS_REQUEUE:
                await self._on_requeue(msg)
            else:
                raise Rejected(f"{msg.subject}: not a subject the queue reads", reason="UnknownSubject")
        except Rejected as exc:
            await self._reject(msg, exc)
        except MessageError as exc:
            await self._reject(msg, Rejected(f"{msg.subject}: {exc}"))
        except Exception as exc:
            await self._failed_message(msg, exc)
            return
        await self._settle(msg.ack())

    async def _failed_message(self, msg: Msg, exc: Exception) -> None:
        """A message whose handling failed (not bad input): nak'd to be retried after a delay,
        rejected after its last delivery. Called while ``exc`` is being handled. Never raises."""
        delivered = deliveries(msg)
        if delivered >= self.options.max_deliver:
            self.log.exception("giving up on a message", subject=msg.subject, deliveries=delivered)
            await self._reject(
                msg, Rejected(f"{msg.subject}: gave up after {delivered} deliveries: {exc!r}", reason="Failed")
            )
        else:
            delay = redelivery_delay(delivered)
            self.log.warning(
                "message will be retried", subject=msg.subject, deliveries=delivered, delay=delay, error=repr(exc)
            )
            await self._settle(msg.nak(delay=delay))

    async def _settle(self, ack: Awaitable[Any]) -> None:
        try:
            await ack
        except Exception as exc:  # the server redelivers it after ack_wait: handlers are idempotent
            self.log.warning("ack failed", error=repr(exc))

    async def _reject(self, msg: Msg, exc: Rejected) -> None:
        """Bad input: count it, log it, announce it (pod.rejected, and a Warning PodEvent when
        the pod is named). The caller acks it. Never raises."""
        self._count_rejected(msg.subject)
        seq = msg.metadata.sequence.stream if msg.metadata.sequence else 0
        name = exc.key or f"invalid/{seq}"
        self.log.warning("message rejected", subject=msg.subject, pod=exc.key or "-", reason=exc.reason, error=str(exc))
        try:
            await self._publish_event(
                EventKind.POD_REJECTED,
                name,
                f"rejected/{seq}",
                reason=exc.reason,
                message=str(exc),
                data={"subject": msg.subject, "seq": seq},
            )
            if exc.uid:
                await self._pod_event(exc.uid, EventType.WARNING, "Rejected", str(exc), "queue")
        except Exception as publish_error:
            self.log.warning("could not announce a rejection", pod=name, error=repr(publish_error))

    async def _on_submit(self, msg: Msg) -> None:
        for submission in read_submission(
            msg.data, source=PODS_SUBMIT, max_manifest_bytes=self.options.max_manifest_bytes
        ):
            await self._accept(submission.pod, submission.manifest, redelivered=deliveries(msg) > 1)

    async def _submit_batch(self, msgs: list[Msg]) -> None:
        """Submits about different pods, handled together: each read once, every pod stored
        with one round trip (`put_pods`), the pod.accepted events published with one, then each
        message acked, only once Redis has its pods. A pod stored already (a redelivery, a
        resubmit) takes `_accept`'s path for it. Per message as `_handle_pods_message`: bad
        input rejected and acked, a failure nak'd or given up on. Never raises."""
        if not msgs:
            return
        read: list[tuple[Msg, list[Submission]]] = []
        for msg in msgs:
            try:
                subs = read_submission(msg.data, source=PODS_SUBMIT, max_manifest_bytes=self.options.max_manifest_bytes)
            except Rejected as exc:
                await self._reject(msg, exc)
                await self._settle(msg.ack())
            except Exception:  # cannot be; the one-message path says what it is
                await self._handle_pods_message(msg)
            else:
                read.append((msg, subs))
        if not read:
            return
        now = time.time()
        records = [self._pending_record(sub.pod, sub.manifest, now) for _, subs in read for sub in subs]
        try:
            stored = await self._cluster().put_pods(records)
        except Exception as exc:
            if len(read) == 1:
                await self._failed_message(read[0][0], exc)
                return
            # One message at a time (as before batching), so that whatever failed fails alone.
            self.log.warning("storing a batch failed; one message at a time", messages=len(read), error=repr(exc))
            await asyncio.gather(*(self._handle_pods_message(msg) for msg, _ in read))
            return
        announce: list[Publication] = []
        settled: list[Msg] = []
        at = 0
        for msg, subs in read:
            first, at = at, at + len(subs)
            try:
                for sub, record, new in zip(subs, records[first:at], stored[first:at], strict=True):
                    if new:
                        if (publication := await self._accepted(record, sub.pod, sub.manifest)) is not None:
                            announce.append(publication)
                    else:
                        redelivered = deliveries(msg) > 1
                        await self._accept_stored(sub.pod, sub.manifest, redelivered=redelivered)
            except Rejected as exc:
                await self._reject(msg, exc)
            except Exception as exc:
                await self._failed_message(msg, exc)
                continue
            settled.append(msg)
        await self._announce(announce)
        for msg in settled:
            await self._settle(msg.ack())

    def _pending_record(self, pod: Pod, manifest: bytes, now: float) -> PodRecord:
        reason, message = self._pending_reason(pod)
        record = PodRecord.of(pod, manifest, now=now)
        return replace(record, reason=reason, message=message) if reason or message else record

    async def _announce(self, publications: list[Publication]) -> None:
        """Publish pod.accepted events, all at once. An announcement only: failures are logged."""
        if not publications:
            return
        assert self.js is not None
        try:
            results = await publish_durable_many(self.js, publications, return_exceptions=True)
        except Exception as exc:
            self.log.warning("could not announce accepted pods", pods=len(publications), error=repr(exc))
            return
        for publication, result in zip(publications, results, strict=True):
            if isinstance(result, Exception):
                self.log.warning("could not announce an accepted pod", event=publication.msg_id, error=repr(result))

    async def _accept(self, pod: Pod, manifest: bytes, *, redelivered: bool = False) -> None:
        """Store the pod Pending (insert if absent) and queue it; a pending pod resubmitted with
        a changed manifest is updated. Idempotent."""
        record = self._pending_record(pod, manifest, time.time())
        if not await self._cluster().put_pod(record):
            await self._accept_stored(pod, manifest, redelivered=redelivered)
            return
        if (publication := await self._accepted(record, pod, manifest)) is not None:
            await self._announce([publication])

    async def _accept_stored(self, pod: Pod, manifest: bytes, *, redelivered: bool) -> None:
        """A submitted pod whose uid Redis has already: a redelivery (queued again if pending),
        a resubmit with changes (`_update`), or a pod that is over (refused)."""
        state = self._cluster()
        uid, key = pod.metadata.uid, pod.key
        queue = self.queues.get(pod.spec.scheduler_name)
        existing = await state.get_pod(uid)
        if existing is None:
            raise _Retry(f"pod {key}: stored and gone at once")
        if existing.phase.terminal:
            if redelivered:
                return  # our own earlier delivery, acked too late
            raise Rejected(
                f"{PODS_SUBMIT}: Pod {key}: its uid {uid} belongs to a pod already {existing.phase}; "
                "give the new pod its own metadata.uid to run it again",
                reason="AlreadyExists",
                key=key,
            )
        if existing.manifest != manifest:
            await self._update(existing, pod, manifest)
        elif existing.phase is PodPhase.PENDING and queue is not None:
            queue.add(pod, manifest, attempts=existing.attempts)  # a redelivery: make sure it is queued

    async def _accepted(self, record: PodRecord, pod: Pod, manifest: bytes) -> Publication | None:
        """A pod stored just now: queue it. Returns its pod.accepted event for the caller to
        publish (None for a pod of no profile, announced here as unschedulable)."""
        uid, key, profile = pod.metadata.uid, pod.key, pod.spec.scheduler_name
        queue = self.queues.get(profile)
        if queue is None:
            self.log.warning("pod accepted for no profile", pod=key, uid=uid, profile=profile)
            await self._pod_event(uid, EventType.WARNING, "FailedScheduling", record.message, "queue")
            await self._publish_event(
                EventKind.POD_UNSCHEDULABLE,
                key,
                f"unschedulable/{uid}/1",
                reason=record.reason,
                message=record.message,
            )
            return None
        where = queue.add(pod, manifest)
        self.log.info("pod accepted", pod=key, uid=uid, profile=profile, queue=where)
        return self._event_publication(EventKind.POD_ACCEPTED, key, f"accepted/{uid}", data={"profile": profile})

    def _pending_reason(self, pod: Pod) -> tuple[str, str]:
        """The (reason, message) a pod starts Pending with: none, no such profile, or gated."""
        profile = pod.spec.scheduler_name
        queue = self.queues.get(profile)
        if queue is None:
            known = ", ".join(f'"{p}"' for p in self.queues)
            return "NoSchedulerProfile", f'no scheduler profile "{profile}" (known: {known})'
        gate = queue.gate_message(pod)
        if gate:
            return "SchedulingGated", gate
        return "", ""

    async def _update(self, existing: PodRecord, pod: Pod, manifest: bytes) -> None:
        """A pending pod resubmitted with changes (e.g. its scheduling gates removed)."""
        key, uid = pod.key, pod.metadata.uid
        if existing.phase is not PodPhase.PENDING:
            raise Rejected(
                f"{PODS_SUBMIT}: Pod {key}: already {existing.phase}; a changed manifest is applied only while the "
                "pod is Pending",
                reason="AlreadyScheduled",
                key=key,
                uid=uid,
            )
        if existing.profile != pod.spec.scheduler_name:
            raise Rejected(
                f'{PODS_SUBMIT}: Pod {key}: spec.schedulerName: cannot change from "{existing.profile}" to '
                f'"{pod.spec.scheduler_name}"',
                key=key,
                uid=uid,
            )
        queue = self.queues.get(existing.profile)
        if queue is not None and queue.where(uid) is QueueName.IN_FLIGHT:
            raise _Retry(f"pod {key}: being scheduled; the update waits for the attempt's outcome")
        reason, message = self._pending_reason(pod)
        w = await self._cluster().transition(
            uid,
            PodPhase.PENDING,
            expected_version=existing.version,
            expected_phases={PodPhase.PENDING},
            manifest=manifest,
            reason=reason,
            message=message,
        )
        if not w.ok:
            raise _Retry(f"pod {key}: changed while being updated ({w.code})")
        where = None
        if queue is not None:
            where = queue.update(pod, manifest) or queue.add(pod, manifest, attempts=existing.attempts)
        self.log.info("pod updated", pod=key, uid=uid, queue=str(where) if where else "-")

    async def _on_delete(self, msg: Msg) -> None:
        deletion = decode(PodDeletion, msg.data)
        state = self._cluster()
        key = f"{deletion.namespace}/{deletion.name}"
        record = await state.find_pod(deletion.namespace, deletion.name)
        if record is None:
            raise Rejected(f"{PODS_DELETE}: Pod {key}: not found", reason="NotFound", key=key)
        w = await state.transition(record.uid, PodPhase.DELETED)
        if w.code not in (StoreCode.OK, StoreCode.ALREADY, StoreCode.GONE):
            raise _Retry(f"pod {key}: delete refused ({w.code})")
        after = await state.get_pod(record.uid)
        node = after.node if after is not None else record.node
        if node:
            await state.release(node, record.uid)
        for queue in self.queues.values():
            queue.delete(record.uid)
        if w.ok:
            await self._pod_event(record.uid, EventType.NORMAL, "Deleted", f"deleted (was {w.phase})", "queue")
        self.log.info("pod deleted", pod=key, uid=record.uid, node=node or "-", was=str(w.phase or "-"))
        await self._publish_event(EventKind.POD_DELETED, key, f"deleted/{record.uid}", node=node)

    async def _on_requeue(self, msg: Msg) -> None:
        outcomes = decode(Outcomes, msg.data)
        for outcome in outcomes.outcomes:
            await self._hand_back(outcome)

    # -- pop and done --------------------------------------------------------------------------------

    async def _on_pop(self, profile: str, msg: Msg) -> None:
        if not msg.reply:
            self._count_rejected(msg.subject)
            self.log.warning("pop without a reply subject ignored", profile=profile)
            return
        try:
            request = decode(PopRequest, msg.data)
        except MessageError as exc:
            self._count_rejected(msg.subject)
            self.log.warning("bad pop request", profile=profile, error=str(exc))
            await self._reply_error(msg, str(exc))
            return
        queue = self.queues[profile]
        token = request.fencing_token
        newest = self._tokens.get(profile, 0)
        if token and token < newest:
            self.log.warning("pop from a deposed cycle refused", profile=profile, holder=request.holder, token=token)
            await msg.respond(encode(PopReply()))
            return
        if token > newest:
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
            ready = self._ready[profile]
            ready.clear()
            try:
                async with asyncio.timeout(min(request.wait_ms / 1000, self.options.max_pop_wait)):
                    await ready.wait()
            except TimeoutError:
                pass
            entries = queue.pop(count, holder=request.holder, token=token, max_bytes=self._pop_budget())
        reply = PopReply(
            pods=tuple(QueuedPod(uid=e.uid, key=e.key, manifest=e.manifest, attempts=e.attempts - 1) for e in entries)
        )
        await msg.respond(encode(reply))
        if entries:
            self.log.debug("pods popped", profile=profile, holder=request.holder, pods=len(entries))
            self._after_change()

    def _pop_budget(self) -> int:
        """Manifest bytes one pop reply may carry: escaping may double them inside the JSON."""
        max_payload = self.nc.max_payload if self.nc is not None and self.nc.max_payload else 1024 * 1024
        return max(max_payload // 2 - 16 * 1024, 1024)

    async def _reply_error(self, msg: Msg, error: str) -> None:
        if msg.reply and self.nc is not None:
            await self.nc.publish(msg.reply, b"", headers={ERROR_HEADER: error[:1000]})

    async def _on_done(self, profile: str, msg: Msg) -> None:
        try:
            outcomes = decode(Outcomes, msg.data)
        except MessageError as exc:
            self._count_rejected(msg.subject)
            self.log.warning("bad outcomes", profile=profile, error=str(exc))
            await self._reply_error(msg, str(exc))
            return
        # A reserved pod that was in flight just leaves the queue: no Redis, no task. The rest
        # (failures, reports after a restart) take their round trips, all at once.
        queue = self.queues[profile]
        rest = [o for o in outcomes.outcomes if o.kind is not OutcomeKind.RESERVED or queue.done(o.uid) is None]
        if rest:
            await asyncio.gather(*(self._outcome(profile, o) for o in rest))
        self._after_change()
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
            await self._hand_back(outcome)
        else:
            await self._failed(profile, outcome)

    async def _reserved(self, profile: str, uid: str) -> None:
        queue = self.queues[profile]
        if queue.done(uid) is not None or queue.where(uid) is None:
            return
        # Not in flight, yet queued: popped before a restart, or handed back before this report.
        record = await self._cluster().get_pod(uid)
        if record is None or record.phase is not PodPhase.PENDING:
            queue.delete(uid)

    async def _failed(self, profile: str, outcome: Outcome) -> None:
        """An attempt found no node (UNSCHEDULABLE) or failed (ERROR): record why, then back off."""
        state = self._cluster()
        queue = self.queues[profile]
        uid = outcome.uid
        where = queue.where(uid)
        if where is not None and where is not QueueName.IN_FLIGHT:
            # Its attempt is over already: a repeated report (the cycle retries done requests), or
            # the deadline or a restart put it back. Counting it again would count one attempt twice.
            self.log.debug("outcome for a pod already queued ignored", profile=profile, uid=uid, queue=str(where))
            return
        unschedulable = outcome.kind is OutcomeKind.UNSCHEDULABLE
        reason = "Unschedulable" if unschedulable else "SchedulerError"
        message = outcome.message or ("no node fits the pod" if unschedulable else "scheduling failed")
        w = await state.transition(
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
        await self._pod_event(uid, EventType.WARNING, "FailedScheduling", message, profile)
        plugins = outcome.plugins if unschedulable else ()
        where = queue.add_unschedulable(uid, plugins)
        if where is None and queue.where(uid) is None:
            record = await state.get_pod(uid)  # popped before a restart: not in flight here
            pod = self._pod_of(record) if record is not None else None
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
        self.log.info(
            "pod unschedulable" if unschedulable else "scheduling failed",
            pod=entry.key if entry else uid,
            uid=uid,
            profile=profile,
            queue=str(where or queue.where(uid) or "-"),
            plugins=",".join(plugins) or "-",
            message=message,
        )

    async def _hand_back(self, outcome: Outcome) -> None:
        """A pod handed back after its reservation was given up (a failed Permit or bind): back
        to Pending (compare-and-set on the attempt when given), its reason recorded, requeued."""
        state = self._cluster()
        uid = outcome.uid
        if outcome.kind is OutcomeKind.RESERVED:
            return  # nothing to hand back
        record = await state.get_pod(uid)
        if record is None:
            self.log.warning("hand-back of an unknown pod ignored", uid=uid)
            return
        bind_failed = outcome.kind is OutcomeKind.BIND_FAILED
        unschedulable = outcome.kind is OutcomeKind.UNSCHEDULABLE
        reason = "Unschedulable" if unschedulable else "SchedulerError"
        message = outcome.message or "handed back"
        if bind_failed:
            message = f"binding rejected: {message}"
        if record.phase is PodPhase.RESERVED:
            if outcome.node and record.node != outcome.node:
                self.log.info("stale hand-back ignored", pod=record.key, uid=uid, node=outcome.node, now_on=record.node)
                return
            if not outcome.attempt:
                held = await state.reservation(record.node, uid)
                if held is not None:  # without the attempt we cannot tell whose it is: the janitor decides
                    self.log.info(
                        "hand-back without attempt while a reservation is held; left to the janitor",
                        pod=record.key,
                        uid=uid,
                        node=record.node,
                        state=str(held.state),
                    )
                    return
            w = await state.transition(
                uid,
                PodPhase.PENDING,
                expected_version=outcome.attempt or record.version,
                expected_phases={PodPhase.RESERVED},
                reason=reason,
                message=message,
            )
            if not w.ok:
                self.log.info("stale hand-back ignored", pod=record.key, uid=uid, code=str(w.code))
                return
        elif record.phase is PodPhase.PENDING:
            w = await state.transition(
                uid, PodPhase.PENDING, expected_phases={PodPhase.PENDING}, reason=reason, message=message
            )
            if not w.ok:
                return
        else:
            self.log.info(
                "hand-back of a pod no longer reserved ignored", pod=record.key, uid=uid, phase=str(record.phase)
            )
            return
        await self._pod_event(uid, EventType.WARNING, "FailedScheduling", message, record.profile)
        queue = self.queues.get(record.profile)
        pod = self._pod_of(record)
        if queue is None or pod is None:
            return
        plugins = outcome.plugins if unschedulable else ()
        where = queue.add_unschedulable(
            uid, plugins, pod=pod, manifest=record.manifest, attempts=max(record.attempts, 1)
        )
        self.log.info(
            "pod handed back", pod=record.key, uid=uid, kind=str(outcome.kind), queue=str(where or "-"), message=message
        )
        self._after_change()

    # -- events ----------------------------------------------------------------------------------

    async def _on_event(self, msg: Msg) -> None:
        # kubus.events.<resource>.<verb>.<name>: most events (pod.accepted, one per pod) cannot
        # move any pod; they are dropped by their subject, unread. With no unschedulable pod
        # anywhere, a cluster event is only noted for the pods in flight (O(1)), unread too.
        parts = msg.subject.split(".", 4)
        if len(parts) >= 4:
            kind = f"{parts[2]}.{parts[3]}"
            if kind not in CLUSTER_EVENTS:
                return
            if not any(queue.unschedulable_count for queue in self.queues.values()):
                for queue in self.queues.values():
                    queue.move_for_event(kind)
                return
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self._count_rejected(EVENTS)
            self.log.warning("bad cluster event", subject=msg.subject, error=str(exc))
            return
        moved = sum(queue.move_for_event(event.kind) for queue in self.queues.values())
        if moved:
            self.log.info("unschedulable pods moved", cluster_event=event.kind, name=event.name, pods=moved)
            self._after_change()

    # -- periodic steps --------------------------------------------------------------------------

    async def _flush_backoff(self) -> None:
        for queue in self.queues.values():
            queue.flush_backoff()

    async def _flush_leftover(self) -> None:
        for profile, queue in self.queues.items():
            if moved := queue.flush_unschedulable_leftover():
                self.log.info("unschedulable leftovers requeued", profile=profile, pods=moved)

    async def _expire_in_flight(self) -> None:
        state = self._cluster()
        for profile, queue in self.queues.items():
            expired = queue.take_expired_in_flight()
            if not expired:
                continue
            try:
                records = await state.get_pods([e.uid for e in expired])
            except Exception:
                for entry in expired:
                    queue.restore(entry)
                raise
            for entry, record in zip(expired, records, strict=True):
                if record is not None and record.phase is PodPhase.PENDING:
                    queue.restore(entry)
                    self.log.info(
                        "in-flight deadline passed; pod handed out again", profile=profile, pod=entry.key, uid=entry.uid
                    )
                else:
                    self.log.info(
                        "in-flight deadline passed; pod no longer pending, dropped",
                        profile=profile,
                        pod=entry.key,
                        uid=entry.uid,
                        phase=str(record.phase) if record else "gone",
                    )

    async def _resync(self) -> None:
        """Compare each profile's queue with its Pending pods in Redis: add the missing ones (this
        is also the rebuild after a restart), drop the ones no longer Pending."""
        state = self._cluster()
        for profile, queue in self.queues.items():
            pending = await state.pod_uids_in_phase(PodPhase.PENDING, profile=profile)
            known = queue.uids()
            missing = sorted(pending - known)
            added = 0
            if missing:
                records = [r for r in await state.get_pods(missing) if r is not None]
                records.sort(key=lambda r: (r.created_at, r.key))
                for record in records:
                    if record.phase is not PodPhase.PENDING or record.profile != profile:
                        continue
                    pod = self._pod_of(record)
                    if pod is None:
                        continue
                    queue.add(pod, record.manifest, attempts=record.attempts, event="Resync")
                    added += 1
            stale = sorted(uid for uid in known - pending if queue.where(uid) is not QueueName.IN_FLIGHT)
            dropped = 0
            if stale:
                for uid, record in zip(stale, await state.get_pods(stale), strict=True):
                    if record is None or record.phase is not PodPhase.PENDING:
                        queue.delete(uid)
                        dropped += 1
            if added or dropped:
                self.log.info("resynced with redis", profile=profile, added=added, dropped=dropped)
        self._after_change()

    async def _repair_reserved(self) -> None:
        """The janitor: Reserved pods older than reserve_timeout. Not bound → the reservation is
        given back (on its attempt) and the pod goes back to Pending (compare-and-set on the
        attempt) and is requeued; bound → the binder died after mark_bound: finish the bind."""
        state = self._cluster()
        timeout = self.options.reserve_timeout
        for pod in await self._reserved_longer_than(timeout):
            held = await state.reservation(pod.node, pod.uid)
            if held is not None and held.state is ReservationState.BOUND:
                await self._finish_bind(pod, held)
                continue
            if held is None:
                reason, message = "ReservationLost", f"its reservation on node {pod.node} is gone"
                expected = pod.version
            else:
                code = await state.unreserve(pod.node, pod.uid, held.attempt)
                if code is StoreCode.BOUND:  # a binder marked it just now
                    fresh = await state.reservation(pod.node, pod.uid)
                    if fresh is not None:
                        await self._finish_bind(pod, fresh)
                    continue
                if code not in (StoreCode.OK, StoreCode.NOOP):
                    continue
                reason, message = "ReservationTimeout", f"not bound on node {pod.node} within {timeout:g}s"
                expected = int(held.attempt) if held.attempt.isdigit() else pod.version
                await self._announce_unreserved(pod, held.attempt)
            w = await state.transition(
                pod.uid,
                PodPhase.PENDING,
                expected_version=expected,
                expected_phases={PodPhase.RESERVED},
                reason=reason,
                message=message,
            )
            if not w.ok:
                continue
            self.log.warning(
                "janitor: reserved pod back to pending", pod=pod.key, uid=pod.uid, node=pod.node, reason=reason
            )
            await self._pod_event(pod.uid, EventType.WARNING, "FailedScheduling", message, "queue")
            queue = self.queues.get(pod.profile)
            parsed = self._pod_of(pod)
            if queue is not None and parsed is not None:
                queue.delete(pod.uid)  # a stale in-flight entry, if any
                queue.add(parsed, pod.manifest, attempts=pod.attempts, event="ReservationTimeout")

    async def _reserved_longer_than(self, timeout: float) -> list[PodRecord]:
        """The Reserved pods untouched for ``timeout`` seconds, oldest first. Reads only the
        update times of the others (their manifests stay in Redis)."""
        state = self._cluster()
        uids = sorted(await state.pod_uids_in_phase(PodPhase.RESERVED))
        cutoff = time.time() - timeout
        old: list[str] = []
        for start in range(0, len(uids), 500):
            chunk = uids[start : start + 500]
            pipe = state.redis.pipeline(transaction=False)
            for uid in chunk:
                pipe.hget(state.keys.pod_record(uid), "updated_at")
            for uid, updated in zip(chunk, await pipe.execute(), strict=True):
                if updated is not None and float(updated) <= cutoff:
                    old.append(uid)
        records = [r for r in await state.get_pods(old) if r is not None and r.phase is PodPhase.RESERVED]
        return sorted((r for r in records if r.updated_at <= cutoff), key=lambda r: r.updated_at)

    async def _announce_unreserved(self, pod: PodRecord, attempt: str) -> None:
        # Room was given back: pods waiting for room on that node may fit now.
        await self._publish_event(
            EventKind.POD_UNRESERVED,
            pod.key,
            f"unreserved/{pod.uid}/{attempt}",
            node=pod.node,
            reason="ReservationTimeout",
            data={"uid": pod.uid, "attempt": int(attempt) if attempt.isdigit() else 0, "profile": pod.profile},
        )

    async def _finish_bind(self, pod: PodRecord, reservation: Reservation) -> None:
        """The binder died between mark_bound and bind_pod (or its assignment): do the rest,
        idempotently (bind_pod answers ALREADY, the assignment's msg id dedups)."""
        state = self._cluster()
        assert self.js is not None
        attempt = int(reservation.attempt) if reservation.attempt.isdigit() else 0
        w = await state.bind_pod(pod.uid, pod.node, reservation.gpu_devices, expected_version=attempt or None)
        if w.code not in (StoreCode.OK, StoreCode.ALREADY):
            self.log.warning(
                "janitor: could not finish a bind", pod=pod.key, uid=pod.uid, node=pod.node, code=str(w.code)
            )
            return
        assignment = NodeAssignment(
            uid=pod.uid,
            key=pod.key,
            node=pod.node,
            manifest=pod.manifest,
            gpu_devices=reservation.gpu_devices,
            attempt=attempt,
        )
        await publish_durable(self.js, node_pods(pod.node), encode(assignment), f"assign/{pod.uid}/{attempt}")
        await self._publish_event(
            EventKind.POD_BOUND,
            pod.key,
            f"bound/{pod.uid}/{attempt}",
            node=pod.node,
            data={"uid": pod.uid, "attempt": attempt, "profile": pod.profile},
        )
        await self._pod_event(
            pod.uid, EventType.NORMAL, "Scheduled", f"Successfully assigned {pod.key} to {pod.node}", "queue"
        )
        self.log.warning("janitor: finished a bind a binder left", pod=pod.key, uid=pod.uid, node=pod.node)

    async def _reconcile(self) -> None:
        fixes = await self._cluster().reconcile(
            grace_s=self.options.reconcile_grace, reserved_timeout_s=self.options.reserve_timeout
        )
        for fix in fixes:
            self.log.warning("reconcile", fix=fix)
        if fixes:
            await self._resync()

    async def _check_nodes(self) -> None:
        """Mark nodes whose heartbeat is older than node_grace unreachable (node.lost); announce
        nodes that came back (node.updated). Nodes that never heartbeated are left alone.

        Reads only the silent nodes (the heartbeats index, by time) and the ones it marked lost;
        every node's heartbeat is read at the first check and every reconcile_interval after it,
        which also heals the index (a node missing there)."""
        state = self._cluster()
        now = time.time()
        full = self._lost_nodes is None or now >= self._next_node_scan
        if full:
            liveness = await self._node_liveness(await state.node_names())
            await state.index_heartbeats({n: hb for n, (hb, _, _) in liveness.items() if hb is not None})
            self._next_node_scan = now + self.options.reconcile_interval
        else:
            silent = await state.silent_nodes(now - self.options.node_grace)
            names = set(silent) | (self._lost_nodes or set())
            liveness = await self._node_liveness(sorted(names)) if names else {}
            if gone := [n for n in silent if n not in liveness]:
                await state.forget_heartbeats(gone)  # deleted without delete_node
        if self._lost_nodes is None:
            self._lost_nodes = {name for name, (_, unreachable, _) in liveness.items() if unreachable}
        ready = unreachable_count = 0
        for name, (heartbeat, unreachable, generation) in liveness.items():
            if unreachable:
                unreachable_count += 1
                continue
            if name in self._lost_nodes:
                self._lost_nodes.discard(name)
                self.log.info("node back", node=name)
                await self._publish_event(
                    EventKind.NODE_UPDATED, name, f"node.updated/{name}/{generation}", node=name, reason="NodeReachable"
                )
            if heartbeat is not None and now - heartbeat > self.options.node_grace:
                if await state.mark_unreachable(name):
                    self._lost_nodes.add(name)
                    unreachable_count += 1
                    self.log.warning("node lost", node=name, silent_for=round(now - heartbeat, 1))
                    await self._publish_event(
                        EventKind.NODE_LOST,
                        name,
                        f"node.lost/{name}/{generation}",
                        node=name,
                        reason="NodeUnreachable",
                        message=f"no heartbeat for {now - heartbeat:.0f}s",
                    )
                continue
            ready += 1
        if full:
            self._lost_nodes &= set(liveness)
        else:  # every lost node was read: the ones not found are gone
            self._lost_nodes = {n for n in self._lost_nodes if n in liveness}
            ready = max(await state.node_count() - unreachable_count, 0)
        self.metrics.nodes.labels(state="ready").set(ready)
        self.metrics.nodes.labels(state="unreachable").set(unreachable_count)

    async def _node_liveness(self, names: list[str]) -> dict[str, tuple[float | None, bool, int]]:
        """name -> (last heartbeat, unreachable, generation) of these nodes (those that exist),
        read without decoding whole nodes."""
        state = self._cluster()
        out: dict[str, tuple[float | None, bool, int]] = {}
        for start in range(0, len(names), 500):
            chunk = names[start : start + 500]
            pipe = state.redis.pipeline(transaction=False)
            for name in chunk:
                pipe.hmget(state.keys.node_info(name), "heartbeat", "unreachable", "generation")
            for name, (heartbeat, unreachable, generation) in zip(chunk, await pipe.execute(), strict=True):
                if generation is None:
                    continue  # deleted since listed
                out[name] = (
                    float(heartbeat) if heartbeat else None,
                    unreachable in (b"1", "1"),
                    int(generation),
                )
        return out
