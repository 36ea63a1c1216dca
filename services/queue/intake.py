"""The queue's intake (`Intake`): the messages of KUBUS_PODS. Submitted pods are read, admitted
(kube's Priority admission: `Intake._admit`), stored Pending and queued (in batches); deletions
and hand-backs are applied; bad input is rejected with an event. A pod that names its node
(`spec.nodeName`) is never queued: `NodePlacement` puts it on that node."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.api.errors import ManifestError
from kubus.api.objects import Pod
from kubus.api.podgroups import POD_GROUP_LABEL, pod_group_key
from kubus.api.submission import Rejected, Submission, admit_priority, identify, read_submissions
from kubus.bus import (
    MSG_ID_HEADER,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_SUBMIT,
    EventKind,
    MessageFaults,
    announcements,
    deliveries,
    msgids,
    publish_durable_many,
    redelivery_delay,
)
from kubus.bus.messages import (
    BatchedPod,
    MessageError,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodDeletion,
    decode,
)
from kubus.core.codec import DecodeError
from kubus.core.metrics import Metrics
from kubus.queue._pods import count_rejected, parse_stored, pod_announcement, publish, record_event
from kubus.queue.options import QueueOptions
from kubus.queue.placement import NodePlacement
from kubus.queue.queueing import QueueName
from kubus.queue.queues import Queues
from kubus.runtime.service import Outage, StructuredLogger, is_transient
from kubus.store import (
    ClusterState,
    EventType,
    PodPhase,
    PodRecord,
    StoreCode,
)
from kubus.store.preemption import PREEMPTED

__all__ = ["Intake", "Retry"]


_GROUP_LABEL_NAME = POD_GROUP_LABEL.rpartition("/")[2].encode()
"""The group label's name ("pod-group")."""


class Retry(Exception):
    """A message to process again later (the state it needs is changing); nak'd with a delay."""


def _lane(msg: Msg) -> str:
    """Which pod a KUBUS_PODS message is about, cheaply: messages of one lane are handled in
    order, lanes at once. Submits name their pod in the msg id (``submit/<ns>/<name>/<sha>``,
    docs/services.md); a submit without one is read for its name; deletions and hand-backs
    are small JSON. Whatever cannot be told shares one lane (in order, as before). A PodList
    of the watcher's is in no lane: `_in_order`."""
    try:
        if msg.subject == PODS_SUBMIT:
            named = msgids.submitted_pod((msg.headers or {}).get(MSG_ID_HEADER, ""))
            if named is not None:
                return f"pod:{named[0]}/{named[1]}"
            key = identify(msg.data)[0]
            return f"pod:{key}" if key else "?"
        if msg.subject == PODS_DELETE:
            deletion = decode(PodDeletion, msg.data)
            return f"pod:{deletion.namespace}/{deletion.name}"
        if msg.subject == PODS_REQUEUE:
            outcomes = decode(Outcomes, msg.data).outcomes
            return f"uid:{outcomes[0].uid}" if len(outcomes) == 1 else "?"
    except MessageError:  # bad input: read again, and rejected, in its turn
        return "?"
    return "?"


def _in_order(msgs: list[Msg]) -> Iterator[list[Msg]]:
    """A fetched batch in parts to take one after the other: each PodList the watcher submits
    (``submits/<digest>``, hundreds of pods) a part of its own, the messages between them a
    part, so that no message is handled before one fetched ahead of it about the same pod
    (lanes order messages within a part only)."""
    part: list[Msg] = []
    for msg in msgs:
        if msg.subject == PODS_SUBMIT and msgids.is_submit_list((msg.headers or {}).get(MSG_ID_HEADER, "")):
            if part:
                yield part
                part = []
            yield [msg]
        else:
            part.append(msg)
    if part:
        yield part


async def settle(log: StructuredLogger, ack: Awaitable[object]) -> None:
    """Await an ack, nak or term; a failure is logged, never raised."""
    try:
        await ack
    except Exception as exc:  # the server redelivers it after ack_wait: handlers are idempotent
        log.warning("ack failed", error=repr(exc))


class Intake:
    """Takes submitted, deleted and handed-back pods from JetStream."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        options: QueueOptions,
        queues: Queues,
        placement: NodePlacement,
        outage: Outage,
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.js = js
        self.options = options
        self.queues = queues
        self.placement = placement
        self.outage = outage
        self.log = log
        self.metrics = metrics
        self.faults = MessageFaults(options.max_failures)
        """Failed tries of each KUBUS_PODS message that were its own fault (not an outage's)."""

    async def take(self, msgs: list[Msg], *, go_on: Callable[[], bool]) -> None:
        """Handle a fetched batch; each message is acked once its effect is in Redis. Once
        ``go_on`` says no (stopping, or not serving any more), the rest is nak'd. Never raises."""
        for part in _in_order(msgs):
            await self._take_part(part, go_on=go_on)

    async def _take_part(self, msgs: list[Msg], *, go_on: Callable[[], bool]) -> None:
        # One lane per pod: a pod's messages in their order, different pods at once. The
        # batch runs in rounds, round i taking the i-th message of every lane, so the
        # submits of one round (each about another pod) share their round trips.
        lanes: dict[str, list[Msg]] = {}
        for msg in msgs:
            lanes.setdefault(_lane(msg), []).append(msg)
        for i in range(max((len(lane) for lane in lanes.values()), default=0)):
            round_ = [lane[i] for lane in lanes.values() if i < len(lane)]
            if not go_on():
                # Hand the rest back: the next queue (or the next leader) gets them at once.
                for msg in round_:
                    await settle(self.log, msg.nak())
                continue
            submits = [m for m in round_ if m.subject == PODS_SUBMIT]
            others = [m for m in round_ if m.subject != PODS_SUBMIT]
            records = await self._deleted_records([m for m in others if m.subject == PODS_DELETE])
            await asyncio.gather(
                self._submit_batch(submits), *(self._handle_pods_message(m, records) for m in others)
            )

    async def _deleted_records(self, msgs: list[Msg]) -> dict[str, PodRecord | None]:
        """The stored records of the pods these deletions name by uid, read in one round trip:
        a preemption's victims are deleted several at once. {} for fewer than two, or when the
        read fails (each deletion then reads its own, and fails in its own way)."""
        uids = []
        for msg in msgs:
            try:
                uid = decode(PodDeletion, msg.data).uid
            except MessageError:
                continue  # rejected when handled
            if uid:
                uids.append(uid)
        if len(uids) < 2:
            return {}
        try:
            return dict(zip(uids, await self.store.get_pods(uids), strict=True))
        except Exception:
            return {}

    async def _handle_pods_message(self, msg: Msg, records: Mapping[str, PodRecord | None]) -> None:
        """Process one KUBUS_PODS message but a submit (those go by the batch, `_submit_batch`);
        ack once its effect is in Redis. Never raises. ``records``: pods' records read for this
        round already (`_deleted_records`)."""
        try:
            if msg.subject == PODS_DELETE:
                await self._on_delete(msg, records)
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
        await settle(self.log, msg.ack())

    async def _failed_message(self, msg: Msg, exc: Exception) -> None:
        """A message whose handling failed (not bad input): nak'd to be retried after a delay.
        A server that is away (`is_transient`) pauses intake and is waited out, however long:
        an acknowledged submission is never dropped for it. Any other failure is counted, and
        the message rejected after ``max_failures`` of them. Called while ``exc`` is being
        handled. Never raises."""
        delivered = deliveries(msg)
        delay = redelivery_delay(delivered)
        if is_transient(exc):
            self.outage.note(exc)  # says so once per outage; each message only at debug level
            self.log.debug("message will be retried when the servers answer", subject=msg.subject,
                          deliveries=delivered, delay=delay, error=repr(exc))  # fmt: skip
            await settle(self.log, msg.nak(delay=delay))
            return
        failures = self.faults.failed(msg)
        if failures >= self.options.max_failures:
            self.log.exception("giving up on a message", subject=msg.subject, failures=failures)
            await self._reject(
                msg, Rejected(f"{msg.subject}: gave up after {failures} failed tries: {exc!r}", reason="Failed")
            )
            await settle(self.log, msg.term())
        else:
            self.log.warning(
                "message will be retried", subject=msg.subject, failures=failures, delay=delay, error=repr(exc)
            )
            await settle(self.log, msg.nak(delay=delay))

    async def _reject(self, msg: Msg, exc: Rejected) -> None:
        """Bad input: count it, log it, announce it (pod.rejected, and a Warning PodEvent when
        the pod is named). The caller acks it. Never raises."""
        count_rejected(self.metrics, msg.subject)
        seq = msg.metadata.sequence.stream if msg.metadata.sequence else 0
        name = exc.key or f"invalid/{seq}"
        self.log.warning("message rejected", subject=msg.subject, pod=exc.key or "-", reason=exc.reason, error=str(exc))
        try:
            await publish(
                self.js,
                announcements.rejection_event(
                    name, msg.subject, seq, at=time.time(), reason=exc.reason, message=str(exc), uid=exc.uid
                ),
            )
            if exc.uid:
                await record_event(self.store, exc.uid, EventType.WARNING, "Rejected", str(exc), "queue")
        except Exception as publish_error:
            self.log.warning("could not announce a rejection", pod=name, error=repr(publish_error))

    async def _submit_batch(self, msgs: list[Msg]) -> None:
        """Submits about different pods, handled together: each read once, every pod stored
        with one round trip (`put_pods`), announced accepted together (``pods.accepted``), then each
        message acked, only once Redis has its pods. A pod stored already (a redelivery, a
        resubmit) takes `_accept_stored`. Per message: bad input rejected and acked, a failure
        nak'd or given up on (`_failed_message`). Never raises."""
        if not msgs:
            return
        read: list[tuple[Msg, list[Submission]]] = []
        for msg in msgs:
            try:
                subs = await self._read(msg)
            except Exception as exc:  # not bad input: a bug or a server error; retried, then rejected
                await self._failed_message(msg, exc)
            else:
                if subs:
                    read.append((msg, subs))
        read = await self._admit(read)
        if not read:
            return
        now = time.time()
        records = [self._pending_record(sub.pod, sub.manifest, now) for _, subs in read for sub in subs]
        try:
            stored = await self.store.put_pods(records)
            # A gang's members are indexed before any of them is queued or placed (Coscheduling
            # counts them); a redelivery adds them again, harmlessly.
            await self.store.add_group_members(
                (group, sub.pod.metadata.uid)
                for _, subs in read
                for sub in subs
                if (group := pod_group_key(sub.pod)) is not None
            )
        except Exception as exc:
            if len(read) == 1 or is_transient(exc):  # a server away: every message waits for it
                for msg, _ in read:
                    await self._failed_message(msg, exc)
                return
            # One message at a time (as before batching), so that whatever failed fails alone.
            self.log.warning("storing a batch failed; one message at a time", messages=len(read), error=repr(exc))
            await asyncio.gather(*(self._submit_batch([msg]) for msg, _ in read))
            return
        announce: list[BatchedPod] = []
        settled: list[Msg] = []
        at = 0
        for msg, subs in read:
            first, at = at, at + len(subs)
            try:
                for sub, record, new in zip(subs, records[first:at], stored[first:at], strict=True):
                    try:
                        if new:
                            if (accepted := await self._accepted(record, sub.pod, sub.manifest)) is not None:
                                announce.append(accepted)
                        else:
                            redelivered = deliveries(msg) > 1
                            await self._accept_stored(sub.pod, sub.manifest, redelivered=redelivered)
                    except Rejected as exc:  # this pod alone: a PodList's others go on
                        await self._reject(msg, exc)
            except Exception as exc:  # the message again later: the pods done meanwhile are found stored
                await self._failed_message(msg, exc)
                continue
            settled.append(msg)
        await self._announce(announce)
        for msg in settled:
            await settle(self.log, msg.ack())

    async def _read(self, msg: Msg) -> list[Submission]:
        """The pods of a submit message (`read_submissions`); each one refused is rejected (a
        PodList's alone, any other message whole), and a message with none left is acked."""
        read = read_submissions(msg.data, source=PODS_SUBMIT, max_manifest_bytes=self.options.max_manifest_bytes)
        subs = [sub for sub in read if isinstance(sub, Submission)]
        for refused in read:
            if isinstance(refused, Rejected):
                await self._reject(msg, refused)
        if not subs:
            await settle(self.log, msg.ack())
        return subs

    async def _admit(self, read: list[tuple[Msg, list[Submission]]]) -> list[tuple[Msg, list[Submission]]]:
        """kube's Priority admission of the messages' pods (`admit_priority`), against the
        PriorityClasses as the store has them now: one GET while they do not change, so a class
        stored before its pods were published is always seen. A pod refused (no such class, a
        priority or preemptionPolicy not its class's) is rejected, as bad input, and its
        message's other pods go on (a message with none left is acked); when the classes cannot
        be read, every message is retried. Returns the admitted messages. Never raises."""
        if not read:
            return []
        try:
            classes = await self.store.priority_classes()
        except Exception as exc:
            for msg, _ in read:
                await self._failed_message(msg, exc)
            return []
        admitted: list[tuple[Msg, list[Submission]]] = []
        for msg, subs in read:
            kept: list[Submission] = []
            for sub in subs:
                try:
                    kept.append(admit_priority(sub, classes, source=PODS_SUBMIT))
                except Rejected as exc:
                    await self._reject(msg, exc)
            if kept:
                admitted.append((msg, kept))
            else:
                await settle(self.log, msg.ack())
        return admitted

    def _pending_record(self, pod: Pod, manifest: bytes, now: float) -> PodRecord:
        reason, message = ("", "") if pod.spec.node_name else self._pending_reason(pod)
        record = PodRecord.of(pod, manifest, now=now)
        return replace(record, reason=reason, message=message) if reason or message else record

    async def _announce(self, accepted: list[BatchedPod]) -> None:
        """Announce the pods accepted together: one ``pods.accepted`` event (a few for
        thousands). An announcement only: failures are logged."""
        if not accepted:
            return
        publications = announcements.pod_batch(EventKind.PODS_ACCEPTED, accepted, at=time.time())
        try:
            results = await publish_durable_many(self.js, publications, return_exceptions=True)
        except Exception as exc:
            self.log.warning("could not announce accepted pods", pods=len(accepted), error=repr(exc))
            return
        for publication, result in zip(publications, results, strict=True):
            if isinstance(result, Exception):
                self.log.warning("could not announce accepted pods", event=publication.msg_id, error=repr(result))

    async def _accept_stored(self, pod: Pod, manifest: bytes, *, redelivered: bool) -> None:
        """A submitted pod whose uid Redis has already: a redelivery (queued again if pending),
        a resubmit with changes (`_update`), or a pod that is over (refused)."""
        uid, key = pod.metadata.uid, pod.key
        queue = self.queues.get(pod.spec.scheduler_name)
        existing = await self.store.get_pod(uid)
        if existing is None:
            raise Retry(f"pod {key}: stored and gone at once")
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
        elif pod.spec.node_name:  # a redelivery: go on with its placement where it stopped
            await self.placement.place(existing, pod, announce_bound=redelivered)
        elif existing.phase is PodPhase.PENDING and queue is not None:
            queue.add(pod, manifest, attempts=existing.attempts)  # a redelivery: make sure it is queued

    async def _accepted(self, record: PodRecord, pod: Pod, manifest: bytes) -> BatchedPod | None:
        """A pod stored just now: queue it, or place it on the node it names (`_place_on_node`).
        Returns it as the caller's ``pods.accepted`` is to announce it (None for a pod of no
        profile, announced here as unschedulable)."""
        uid, key, profile = pod.metadata.uid, pod.key, pod.spec.scheduler_name
        for line in pod.spec.unhonoured:  # never silent: the user hears what kubus does not check
            self.log.warning("pod field not honoured", pod=key, uid=uid, field=line)
            await record_event(self.store, uid, EventType.WARNING, "FieldNotHonoured", line, "queue")
        if pod.spec.node_name:
            self.log.debug("pod accepted for its node", pod=key, uid=uid, node=pod.spec.node_name)
            await self.placement.place(record, pod)
            return _accepted(record)
        queue = self.queues.get(profile)
        if queue is None:
            self.log.warning("pod accepted for no profile", pod=key, uid=uid, profile=profile)
            await record_event(self.store, uid, EventType.WARNING, "FailedScheduling", record.message, "queue")
            await publish(
                self.js,
                pod_announcement(EventKind.POD_UNSCHEDULABLE, record, reason=record.reason, message=record.message),
            )
            return None
        where = queue.add(pod, manifest)
        # One line per pod: debug, as kube-scheduler logs each pod only at -v=3 and above.
        self.log.debug("pod accepted", pod=key, uid=uid, profile=profile, queue=where)
        return _accepted(record)

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
            raise Retry(f"pod {key}: being scheduled; the update waits for the attempt's outcome")
        reason, message = ("", "") if pod.spec.node_name else self._pending_reason(pod)
        w = await self.store.transition(
            uid,
            PodPhase.PENDING,
            expected_version=existing.version,
            expected_phases={PodPhase.PENDING},
            manifest=manifest,
            reason=reason,
            message=message,
        )
        if not w.ok:
            raise Retry(f"pod {key}: changed while being updated ({w.code})")
        if pod.spec.node_name:  # it names its node now: placed there, never scheduled
            if queue is not None:
                queue.delete(uid)
            await self.placement.place(replace(existing, phase=PodPhase.PENDING, manifest=manifest), pod)
            return
        where = None
        if queue is not None:
            where = queue.update(pod, manifest) or queue.add(pod, manifest, attempts=existing.attempts)
        self.log.info("pod updated", pod=key, uid=uid, queue=str(where) if where else "-")

    async def _on_delete(self, msg: Msg, records: Mapping[str, PodRecord | None]) -> None:
        deletion = decode(PodDeletion, msg.data)
        key = f"{deletion.namespace}/{deletion.name}"
        if deletion.uid:
            if deletion.uid in records:
                record = records[deletion.uid]
            else:
                record = await self.store.get_pod(deletion.uid)
            if record is not None and record.key != key:
                raise Rejected(f"{PODS_DELETE}: Pod {key}: uid {deletion.uid} is pod {record.key}", key=key)
        else:
            record = await self.store.find_pod(deletion.namespace, deletion.name)
        if record is None:
            raise Rejected(f"{PODS_DELETE}: Pod {key}: not found", reason="NotFound", key=key)
        if record.phase is PodPhase.DELETED and record.reason == PREEMPTED:
            # Evicted by a preemption, whose step gave its room back and announced it: the
            # apiserver's deletion that follows (the watcher's) has nothing to add.
            await self._forget(record)
            self.log.debug("preempted pod deleted", pod=key, uid=record.uid)
            return
        w = await self.store.transition(record.uid, PodPhase.DELETED)
        if w.code not in (StoreCode.OK, StoreCode.ALREADY, StoreCode.GONE):
            raise Retry(f"pod {key}: delete refused ({w.code})")
        after = await self.store.get_pod(record.uid)
        node = after.node if after is not None else record.node
        if node:
            await self.store.release(node, record.uid)
        await self._forget(record)
        if w.ok:
            await record_event(self.store, record.uid, EventType.NORMAL, "Deleted", f"deleted (was {w.phase})", "queue")
        self.log.info("pod deleted", pod=key, uid=record.uid, node=node or "-", was=str(w.phase or "-"))
        await publish(
            self.js,
            announcements.pod_event(
                EventKind.POD_DELETED, key, record.uid, at=time.time(), node=node, profile=record.profile
            ),
        )

    async def _forget(self, record: PodRecord) -> None:
        """A deleted pod out of its group and out of every queue."""
        if (group := self._group_of(record)) is not None:
            await self.store.remove_group_member(group, record.uid)
        for queue in self.queues.values():
            queue.delete(record.uid)

    def _group_of(self, record: PodRecord) -> str | None:
        """The group (`namespace/name`) a stored pod is labeled into, or None; None too for a
        manifest that no longer parses (nothing to remove then: the queue never indexed it).
        A manifest without the label's name is not parsed (a preemption's every victim is
        deleted through here): stored manifests are orjson's JSON (`kubus.api.submission`),
        which writes a key as it is, never escaped."""
        manifest = record.manifest
        if manifest is not None and _GROUP_LABEL_NAME not in manifest:
            return None
        try:
            return pod_group_key(record.pod())
        except (ManifestError, DecodeError):
            self.log.warning("stored pod manifest unreadable", pod=record.key, uid=record.uid)
            return None

    async def _on_requeue(self, msg: Msg) -> None:
        outcomes = decode(Outcomes, msg.data)
        for outcome in outcomes.outcomes:
            await self.hand_back(outcome)

    async def hand_back(self, outcome: Outcome) -> None:
        """A pod handed back after its reservation was given up (a failed Permit or bind): back
        to Pending (compare-and-set on the attempt when given), its reason recorded, requeued."""
        uid = outcome.uid
        if outcome.kind is OutcomeKind.RESERVED:
            return  # nothing to hand back
        record = await self.store.get_pod(uid)
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
                held = await self.store.reservation(record.node, uid)
                if held is not None:  # without the attempt we cannot tell whose it is: the janitor decides
                    self.log.info(
                        "hand-back without attempt while a reservation is held; left to the janitor",
                        pod=record.key,
                        uid=uid,
                        node=record.node,
                        state=str(held.state),
                    )
                    return
            attempt = outcome.attempt or record.version
            given = await self.store.give_back(uid, record.node, attempt, reason=reason, message=message)
            if not given.ok:
                self.log.info("stale hand-back ignored", pod=record.key, uid=uid, code=str(given.code))
                return
            if given.released:  # the binder could not give the room back itself
                await publish(self.js, pod_announcement(EventKind.POD_UNRESERVED, record, attempt, reason=reason))
        elif record.phase is PodPhase.PENDING:
            w = await self.store.transition(
                uid, PodPhase.PENDING, expected_phases={PodPhase.PENDING}, reason=reason, message=message
            )
            if not w.ok:
                return
        else:
            self.log.info(
                "hand-back of a pod no longer reserved ignored", pod=record.key, uid=uid, phase=str(record.phase)
            )
            return
        await record_event(self.store, uid, EventType.WARNING, "FailedScheduling", message, record.profile)
        queue = self.queues.get(record.profile)
        pod = parse_stored(record, self.log)
        if queue is None or pod is None:
            return
        plugins = outcome.plugins if unschedulable else ()
        where = queue.add_unschedulable(
            uid, plugins, pod=pod, manifest=record.manifest, attempts=max(record.attempts, 1)
        )
        self.log.info(
            "pod handed back", pod=record.key, uid=uid, kind=str(outcome.kind), queue=str(where or "-"), message=message
        )
        self.queues.changed()


def _accepted(record: PodRecord) -> BatchedPod:
    """A pod accepted, as ``pods.accepted`` announces it."""
    return BatchedPod(record.key, record.uid, node=record.node, profile=record.profile)
