"""The queue service against real NATS and Redis: intake, pop/done, bad input, restarts, repairs."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from builders import node_manifest
from nats import errors as nats_errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_node
from kubus.api.requests import pod_requests
from kubus.api.submission import Rejected, Submission, identify, pod_list, read_submission, read_submissions
from kubus.bus import (
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    EventKind,
    Publication,
    announcements,
    ensure_streams,
    event_subject,
    msgids,
    node_pods,
    publish_durable,
    queue_done,
    queue_pop,
)
from kubus.bus.messages import (
    ERROR_HEADER,
    FENCED,
    BatchedPod,
    ClusterEvent,
    NodeAssignment,
    NodeChange,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodChange,
    PodDeletion,
    PopReply,
    PopRequest,
    QueuedPod,
    decode,
    encode,
    expand,
)
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import SchedulerConfiguration, load_config
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import in_tree_registry
from kubus.queue import QueueName, QueueOptions, QueueService
from kubus.queue.__main__ import main as queue_main
from kubus.queue.queueing import REFUSED_RETRIES
from kubus.queue.service import QueueParts
from kubus.runtime.service import ServiceState
from kubus.store import (
    ClusterState,
    EventType,
    PodPhase,
    PodRecord,
    Reservation,
    StoreCode,
    check_invariants,
    cycle_lease,
    queue_lease,
)

DEFAULT = "default-scheduler"
GPU = "gpu-scheduler"

CONFIG: SchedulerConfiguration = load_config(
    {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 2,
        "profiles": [{"schedulerName": DEFAULT}, {"schedulerName": GPU}],
    },
    registry=in_tree_registry(),
)

FAST = QueueOptions(flush_interval=0.05, in_flight_interval=0.05, janitor_interval=0.1, node_interval=0.1)


def pod_manifest(
    name: str,
    *,
    scheduler: str = DEFAULT,
    priority: int = 0,
    gates: tuple[str, ...] = (),
    annotations: dict[str, str] | None = None,
    cpu: str = "100m",
    labels: dict[str, str] | None = None,
) -> bytes:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return codec.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
            "spec": spec,
        }
    )


def uid_of(data: bytes) -> str:
    [sub] = read_submission(data, source="test", max_manifest_bytes=1 << 20)
    return sub.pod.metadata.uid


async def submit(js: JetStreamContext, data: bytes) -> None:
    await publish_durable(js, PODS_SUBMIT, data, f"submit/{hashlib.sha256(data).hexdigest()}")


async def pop(nats: NATS, profile: str = DEFAULT, *, max_pods: int = 50, wait_ms: int = 0, token: int = 0) -> PopReply:
    request = PopRequest(max_pods=max_pods, wait_ms=wait_ms, holder="test", fencing_token=token)
    reply = await nats.request(queue_pop(profile), encode(request), timeout=wait_ms / 1000 + 5)
    return decode(PopReply, reply.data)


async def done(nats: NATS, profile: str, *outcomes: Outcome) -> None:
    reply = await nats.request(queue_done(profile), encode(Outcomes(outcomes)), timeout=5)
    assert reply.data == b"" and not (reply.headers or {}).get(ERROR_HEADER)


async def pop_names(nats: NATS, profile: str = DEFAULT, **kw: Any) -> list[str]:
    return [p.key.split("/")[1] for p in (await pop(nats, profile, **kw)).pods]


class EventLog:
    """Every cluster event published while the test runs (core NATS sees JetStream publishes)."""

    def __init__(self) -> None:
        self.events: list[ClusterEvent] = []
        """Each event, and each pod's of a pods.* event as its own."""
        self.messages: list[ClusterEvent] = []
        """Each event as published."""

    async def on_msg(self, msg: Any) -> None:
        event = decode(ClusterEvent, msg.data)
        self.messages.append(event)
        self.events += expand(event)

    def of(self, kind: str) -> list[ClusterEvent]:
        return [e for e in self.events if e.kind == kind]


@pytest.fixture
async def events(nats: NATS) -> AsyncIterator[EventLog]:
    log = EventLog()
    sub = await nats.subscribe("kubus.events.>", cb=log.on_msg)
    yield log
    await sub.unsubscribe()


QueueFactory = Callable[..., Awaitable[QueueService]]


@pytest.fixture
async def start_queue(nats_url: str, redis_url: str, nats: NATS, redis: aioredis.Redis) -> AsyncIterator[QueueFactory]:
    """Starts queue services on the test servers (after the fixtures emptied them); stops them after."""
    started: list[QueueService] = []

    async def start(options: QueueOptions = FAST, config: SchedulerConfiguration = CONFIG) -> QueueService:
        service = QueueService(ConnectionSettings(nats_url=nats_url, redis_url=redis_url), config, options)
        await service.start()
        started.append(service)
        return service

    yield start
    for service in started:
        await service.stop()


async def stored(state: ClusterState, uid: str, phase: PodPhase = PodPhase.PENDING) -> PodRecord:
    async def check() -> PodRecord:
        record = await state.get_pod(uid)
        assert record is not None and record.phase is phase, record
        return record

    return await eventually(check)


# -- the happy path ------------------------------------------------------------------------------------


async def test_a_submitted_pod_is_stored_pending_and_popped(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    data = pod_manifest("web-1", priority=10)
    uid = uid_of(data)
    waiting = await pop(nats, wait_ms=1)  # nothing yet: an empty reply after the wait
    assert waiting.pods == ()

    await submit(js, data)
    reply = await pop(nats, wait_ms=3000)  # answered as soon as the pod arrives
    [queued] = reply.pods
    assert (queued.uid, queued.key, queued.attempts) == (uid, "default/web-1", 0)
    assert codec.loads(queued.manifest)["metadata"]["uid"] == uid
    record = await stored(state, uid)
    assert record.profile == DEFAULT and record.manifest == queued.manifest and record.reason == ""
    assert queue.queues[DEFAULT].where(uid) is QueueName.IN_FLIGHT
    assert (await pop(nats, GPU)).pods == ()  # another profile's queue

    await eventually(
        lambda: _assert(events.of("pod.accepted") and events.of("pod.accepted")[0].name == "default/web-1")
    )
    exposition = queue.metrics.exposition().decode()
    assert 'scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 1.0' in exposition

    await done(nats, DEFAULT, Outcome(uid=uid, kind=OutcomeKind.RESERVED, node="n1"))
    assert queue.queues[DEFAULT].where(uid) is None


def _assert(condition: Any) -> None:
    assert condition


def parts(queue: QueueService) -> QueueParts:
    """The parts of a started queue."""
    assert queue.parts is not None
    return queue.parts


def serves(queue: QueueService) -> bool:
    return parts(queue).term.serves()


async def test_the_events_of_a_pod_the_queue_saw_reserved_use_its_parsed_pod_not_redis(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    data = pod_manifest("web-1", cpu="250m")
    uid = uid_of(data)
    await submit(js, data)
    [popped] = (await pop(nats, wait_ms=3000)).pods
    assert popped.uid == uid
    await done(nats, DEFAULT, Outcome(uid=uid, kind=OutcomeKind.RESERVED, node="n1"))
    await redis.delete(ClusterState(redis).keys.pod_record(uid))  # not read again: the kept parse is used

    def event(kind: str) -> ClusterEvent:
        return ClusterEvent(kind=kind, name="default/web-1", node="n1", at=time.time(), data=PodChange(uid))

    old, new = await parts(queue).events._pod_change(event("pod.bound"))
    assert old is None and new is not None
    assert (new.metadata.uid, new.spec.node_name, pod_requests(new)["cpu"]) == (uid, "n1", 250)
    old, new = await parts(queue).events._pod_change(event("pod.finished"))
    assert old is not None and old.spec.node_name == "n1" and new is None
    # its last event: forgotten, so the next one reads Redis (where the record is gone: no objects)
    assert await parts(queue).events._pod_change(event("pod.running")) == (None, None)


async def test_a_field_kubus_does_not_honour_is_a_warning_event_and_the_pod_still_queues(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    await start_queue()
    state = ClusterState(redis)
    manifest = codec.loads(pod_manifest("db-1"))
    manifest["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    data = codec.dumps(manifest)
    uid = uid_of(data)
    await submit(js, data)
    [queued] = (await pop(nats, wait_ms=3000)).pods
    assert queued.uid == uid
    events = await state.events(uid)
    assert [(e.type, e.reason, e.message.split(":", 1)[0]) for e in events] == [
        (EventType.WARNING, "FieldNotHonoured", "spec.volumes[0].persistentVolumeClaim"),
        (EventType.WARNING, "FieldNotHonoured", "spec.resourceClaims"),
    ]


async def test_pods_pop_in_priority_order_across_many_submits(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    for i, priority in enumerate([1, 50, 7, 50, 0]):
        await submit(js, pod_manifest(f"p{i}", priority=priority))
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 5))
    assert await pop_names(nats, max_pods=3) == ["p1", "p3", "p2"]
    assert await pop_names(nats) == ["p0", "p4"]
    assert 'scheduler_pending_pods{queue="active"} 0.0' in queue.metrics.exposition().decode()


# -- bad input ---------------------------------------------------------------------------------------


async def test_bad_input_of_every_kind_never_stops_the_service(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    bad = [
        b"\x00\xff\xfe garbage \x89PNG",
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n",
        pod_manifest("huge", annotations={"blob": "x" * 700_000}),
        pod_manifest("bad-cpu", cpu="lots"),
        b"kind: Pod\nmetadata: {name: bad-op}\nspec: {containers: [{name: c}], tolerations: [{operator: Maybe}]}\n",
    ]
    for data in bad:
        await submit(js, data)
    await publish_durable(js, PODS_DELETE, b'{"namespace": "default", "name": "x", "force": true}', "delete/bad")
    await publish_durable(js, PODS_REQUEUE, b"[1, 2, 3]", "requeue/bad")
    await publish_durable(js, "kubus.pods.unknown", b"?", "unknown/bad")
    nowhere = pod_manifest("lost", scheduler="no-such-scheduler")
    await submit(js, nowhere)
    good = pod_manifest("fine")
    await submit(js, good)

    assert await pop_names(nats, wait_ms=5000) == ["fine"]
    rejected = await eventually(lambda: _at_least(events.of("pod.rejected"), 8))
    by_name = {e.name: e for e in rejected}
    assert by_name["default/huge"].reason == "TooLarge"
    assert "spec.containers[0].resources.requests.cpu" in by_name["default/bad-cpu"].message
    assert "spec.tolerations[0].operator" in by_name["default/bad-op"].message
    messages = " | ".join(e.message for e in rejected)
    assert "not UTF-8" in messages and '"Deployment" is not supported' in messages
    assert "unknown field 'force'" in messages and "expected an object" in messages
    assert "not a subject the queue reads" in messages
    assert all("\n" not in e.message for e in rejected)

    # The pod of an unknown profile is stored Pending with the reason, and not queued.
    lost = await stored(state, uid_of(nowhere))
    assert lost.reason == "NoSchedulerProfile" and lost.message.startswith('no scheduler profile "no-such-scheduler"')
    assert all(uid_of(nowhere) not in q for q in queue.queues.values())
    assert events.of("pod.unschedulable")[0].name == "default/lost"
    # A readable pod name gets a Warning event under its uid.
    [warning] = await state.events(identify(pod_manifest("bad-cpu", cpu="lots"))[1])
    assert (warning.type, warning.reason) == (EventType.WARNING, "Rejected")

    exposition = queue.metrics.exposition().decode()
    assert 'kubus_rejected_messages_total{subject="kubus.pods.submit"} 5.0' in exposition
    assert queue.state is ServiceState.RUNNING

    # Garbage on the pop and done subjects gets an error reply, and nothing else.
    for subject in (queue_pop(DEFAULT), queue_done(DEFAULT)):
        reply = await nats.request(subject, b"not json", timeout=5)
        assert reply.headers is not None and "not JSON" in reply.headers[ERROR_HEADER]
    await submit(js, pod_manifest("still-fine"))
    assert await pop_names(nats, wait_ms=5000) == ["still-fine"]
    assert queue.state is ServiceState.RUNNING


def _at_least(items: list[Any], n: int) -> list[Any]:
    assert len(items) >= n, items
    return items


# -- outcomes ----------------------------------------------------------------------------------------


async def test_unschedulable_outcome_records_the_reason_backs_off_and_waits_for_an_event(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    data = pod_manifest("big", cpu="64")
    uid = uid_of(data)
    await submit(js, data)
    [popped] = (await pop(nats, wait_ms=5000)).pods
    message = "0/3 nodes are available: 3 Insufficient cpu."
    report = Outcome(uid, OutcomeKind.UNSCHEDULABLE, message=message, plugins=("NodeResourcesFit",))
    await done(nats, DEFAULT, report)
    await done(nats, DEFAULT, report)  # the cycle retried its report: one attempt still

    record = await state.get_pod(uid)
    assert record is not None and record.phase is PodPhase.PENDING
    assert (record.reason, record.message, record.attempts) == ("Unschedulable", message, 1)
    [event] = await state.events(uid)
    assert (event.type, event.reason, event.message, event.source) == (
        EventType.WARNING,
        "FailedScheduling",
        message,
        DEFAULT,
    )
    assert queue.queues[DEFAULT].where(uid) is QueueName.UNSCHEDULABLE
    assert 'scheduler_pending_pods{queue="unschedulable"} 1.0' in queue.metrics.exposition().decode()

    # An event no rejecting plugin cares about leaves it; a node added may help it.
    bound = ClusterEvent(kind="pod.bound", name="default/other", at=time.time(), data=PodChange("uid-other"))
    await publish_durable(js, event_subject("pod.bound", "default/other"), encode(bound), "bound/other")
    added = ClusterEvent(kind="node.added", name="n9", at=time.time(), data=NodeChange(1))
    await publish_durable(js, event_subject("node.added", "n9"), encode(added), "added/n9")
    again = await pop(nats, wait_ms=5000)  # after its 1 s backoff
    assert [(p.uid, p.attempts) for p in again.pods] == [(popped.uid, 1)]

    # An error (no rejecting plugin) goes to the backoffQ at once: 2 s for a second attempt.
    await done(nats, DEFAULT, Outcome(uid, OutcomeKind.ERROR, message="plugin X failed"))
    record = await state.get_pod(uid)
    assert record is not None and (record.reason, record.attempts) == ("SchedulerError", 2)
    assert queue.queues[DEFAULT].where(uid) is QueueName.BACKOFF


async def test_a_reserved_gang_member_brings_its_unschedulable_sibling_back_at_once(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext
) -> None:
    """scheduler-plugins' ActivateSiblings: the sibling is tried while the reserved member waits on
    Permit, not after a cluster event or its backoff (by then the member's wait may be over)."""
    queue = await start_queue()
    gang = {"scheduling.x-k8s.io/pod-group": "g"}
    first, second = pod_manifest("g-0", labels=gang), pod_manifest("g-1", labels=gang)
    for data in (first, second):
        await submit(js, data)
    popped: list[str] = []

    async def both_popped() -> None:
        popped.extend(p.uid for p in (await pop(nats, wait_ms=200)).pods)
        assert sorted(popped) == sorted((uid_of(first), uid_of(second)))

    await eventually(both_popped)
    no_room = Outcome(uid_of(second), OutcomeKind.UNSCHEDULABLE, message="no room", plugins=("NodeResourcesFit",))
    await done(nats, DEFAULT, no_room)
    assert queue.queues[DEFAULT].where(uid_of(second)) is QueueName.UNSCHEDULABLE

    await done(nats, DEFAULT, Outcome(uid_of(first), OutcomeKind.RESERVED, node="n1"))
    assert queue.queues[DEFAULT].where(uid_of(second)) is QueueName.ACTIVE
    [again] = (await pop(nats, wait_ms=3000)).pods
    assert (again.uid, again.attempts) == (uid_of(second), 1)


async def test_a_refused_reservation_is_popped_again_at_once_until_refused_too_often(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    data = pod_manifest("raced")
    uid = uid_of(data)
    await submit(js, data)
    [popped] = (await pop(nats, wait_ms=5000)).pods
    lost = Outcome(uid, OutcomeKind.REFUSED, node="n1", message="reservation on node n1 refused by Redis: gpu 0 busy")
    await done(nats, DEFAULT, lost)
    await done(nats, DEFAULT, lost)  # the cycle retried its report: still one retry
    for attempts in range(1, REFUSED_RETRIES + 1):
        # No backoff, no record written, no event: the pod found a node, the cycle's table was stale.
        [again] = (await pop(nats)).pods
        assert (again.uid, again.attempts) == (popped.uid, attempts)
        if attempts < REFUSED_RETRIES:
            await done(nats, DEFAULT, lost)
    record = await state.get_pod(uid)
    assert record is not None and (record.phase, record.reason, record.attempts) == (PodPhase.PENDING, "", 0)
    assert await state.events(uid) == []

    await done(nats, DEFAULT, lost)  # refused once too often: a failed attempt, with backoff
    record = await state.get_pod(uid)
    assert record is not None and (record.reason, record.message, record.attempts) == ("Unschedulable", lost.message, 1)
    assert [e.reason for e in await state.events(uid)] == ["FailedScheduling"]
    assert queue.queues[DEFAULT].where(uid) is QueueName.BACKOFF
    assert (await pop(nats)).pods == ()


async def test_a_failed_bind_hands_the_pod_back_to_pending(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    data = pod_manifest("w")
    uid = uid_of(data)
    await submit(js, data)
    [queued] = (await pop(nats, wait_ms=5000)).pods
    # The cycle reserves it, as docs/services.md step 4 says, and reports it.
    attempt = await _reserve(state, queued.manifest, "n1")
    await done(nats, DEFAULT, Outcome(uid, OutcomeKind.RESERVED, node="n1", attempt=attempt))
    assert queue.queues[DEFAULT].where(uid) is None
    # A stale hand-back from an older attempt changes nothing.
    stale = Outcome(uid, OutcomeKind.BIND_FAILED, node="n1", message="old", attempt=attempt - 1)
    await publish_durable(js, PODS_REQUEUE, encode(Outcomes((stale,))), "requeue/stale")
    # The binder fails: gives the room back, hands the pod back.
    assert (await state.unreserve("n1", uid, attempt)).value == "OK"
    failed = Outcome(uid, OutcomeKind.BIND_FAILED, node="n1", message="node refused", attempt=attempt)
    await publish_durable(js, PODS_REQUEUE, encode(Outcomes((failed,))), "requeue/1")

    record = await stored(state, uid, PodPhase.PENDING)
    assert (record.reason, record.message) == ("SchedulerError", "binding rejected: node refused")
    assert await pop_names(nats, wait_ms=5000) == ["w"]  # after its backoff
    assert await check_invariants(state) == []


# -- delete ------------------------------------------------------------------------------------------


async def test_delete_takes_a_pod_out_of_the_queue_and_off_its_node(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    queued_data, reserved_data = pod_manifest("queued"), pod_manifest("reserved")
    await submit(js, queued_data)
    await submit(js, reserved_data)
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 2))
    [reserved] = [p for p in (await pop(nats)).pods if p.key == "default/reserved"] or [None]
    assert reserved is not None
    attempt = await _reserve(state, reserved.manifest, "n1")
    await done(nats, DEFAULT, Outcome(reserved.uid, OutcomeKind.RESERVED, node="n1", attempt=attempt))

    for name in ("queued", "reserved", "never-was"):
        await publish_durable(js, PODS_DELETE, encode(PodDeletion("default", name)), f"delete/{name}")
    await stored(state, uid_of(queued_data), PodPhase.DELETED)
    await stored(state, uid_of(reserved_data), PodPhase.DELETED)

    async def released() -> None:  # released right after the transition to Deleted
        assert await state.reservations("n1") == []

    await eventually(released)
    assert all(not q.uids() for q in queue.queues.values())
    deleted = await eventually(lambda: _at_least(events.of("pod.deleted"), 2))
    assert {(e.name, e.node) for e in deleted} == {("default/queued", ""), ("default/reserved", "n1")}
    assert await check_invariants(state) == []

    # Its name (and so its derived uid) belongs to a deleted pod now: a new one needs its own uid.
    await submit(js, pod_manifest("queued", priority=1))
    rejected = await eventually(lambda: _at_least(events.of("pod.rejected"), 2))
    messages = [e.message for e in rejected]
    assert "kubus.pods.delete: Pod default/never-was: not found" in messages
    assert any("belongs to a pod already Deleted" in m for m in messages)


async def test_deleting_a_pod_a_preemption_evicted_changes_and_announces_nothing_again(
    start_queue: QueueFactory, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    """A preemption evicts a pod in one step (its room given back, Deleted with reason
    Preempted, ``pod.deleted`` announced): the apiserver's deletion that follows (the watcher's,
    by uid) takes it out of the queues and changes and announces nothing more; another pod's
    deletion, handled with it, is announced as ever."""
    queue = await start_queue()
    state = ClusterState(redis)
    victim, other = pod_manifest("victim"), pod_manifest("other")
    await submit(js, victim)
    await submit(js, other)
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 2))
    evicted = await state.transition(
        uid_of(victim), PodPhase.DELETED, reason="Preempted", message="Preempted by default/urgent on node n1"
    )
    assert evicted.ok
    before = await state.get_pod(uid_of(victim))
    for name, data in (("victim", victim), ("other", other)):
        deletion = encode(PodDeletion("default", name, uid_of(data)))
        await publish_durable(js, PODS_DELETE, deletion, f"delete/{name}")

    async def both_handled() -> None:
        assert (await js.stream_info(PODS_STREAM.name)).state.messages == 0
        assert [e.name for e in events.of("pod.deleted")] == ["default/other"]

    await eventually(both_handled)
    assert all(not q.uids() for q in queue.queues.values())
    assert await state.get_pod(uid_of(victim)) == before
    assert [e.name for e in events.of("pod.deleted")] == ["default/other"]


async def test_deletions_fetched_together_read_their_pods_in_one_round_trip(
    start_queue: QueueFactory, js: JetStreamContext, redis: aioredis.Redis, events: EventLog,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A preemption's victims are deleted several at once: deletions fetched in one batch read
    their pods' records with one `get_pods`, not a `get_pod` each, and each ends as it would
    alone: the evicted ones forgotten silently, the others deleted and announced, a uid that
    is another pod's rejected, garbage rejected."""
    await ensure_streams(js)
    state = ClusterState(redis)
    victims = [pod_manifest(f"victim{i}") for i in range(3)]
    others = [pod_manifest(f"other{i}") for i in range(2)]
    for data in (*victims, *others):
        await submit(js, data)
    queue = await start_queue()
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 5))
    for data in victims:
        assert (await state.transition(uid_of(data), PodPhase.DELETED, reason="Preempted", message="by urgent")).ok
    await queue.stop()

    # Published while no queue runs: the next one fetches them as one batch, one round.
    for data in (*victims, *others):
        name = codec.loads(data)["metadata"]["name"]
        await publish_durable(js, PODS_DELETE, encode(PodDeletion("default", name, uid_of(data))), f"delete/{name}")
    await publish_durable(js, PODS_DELETE, encode(PodDeletion("default", "impostor", uid_of(others[0]))), "delete/x")
    await publish_durable(js, PODS_DELETE, b"{not json", "delete/garbage")
    singles: list[str] = []
    store_get_pod = ClusterState.get_pod

    async def get_pod(self: ClusterState, uid: str) -> PodRecord | None:
        singles.append(uid)
        return await store_get_pod(self, uid)

    monkeypatch.setattr(ClusterState, "get_pod", get_pod)
    await start_queue()

    async def all_handled() -> None:
        assert (await js.stream_info(PODS_STREAM.name)).state.messages == 0
        assert sorted(e.name for e in events.of("pod.deleted")) == ["default/other0", "default/other1"]

    await eventually(all_handled)
    # The deletions' own reads: none (the transitions of the two others read theirs after).
    assert sorted(singles) == sorted(uid_of(d) for d in others)
    for data in victims:
        record = await state.get_pod(uid_of(data))
        assert record is not None and (record.phase, record.reason) == (PodPhase.DELETED, "Preempted")
    rejected = {e.name: e.message for e in await eventually(lambda: _at_least(events.of("pod.rejected"), 2))}
    assert "is pod default/other0" in rejected["default/impostor"]
    assert len(rejected) == 2
    assert await check_invariants(state) == []


async def test_messages_about_one_pod_keep_their_order_within_a_batch(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    await ensure_streams(js)
    state = ClusterState(redis)
    for i in range(20):  # published before the queue starts: fetched as one batch
        data = pod_manifest(f"p{i}")
        await publish_durable(js, PODS_SUBMIT, data, f"submit/default/p{i}/{hashlib.sha256(data).hexdigest()}")
        if i % 2:
            await publish_durable(js, PODS_DELETE, encode(PodDeletion("default", f"p{i}")), f"delete/p{i}")
    queue = await start_queue()
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 10))
    for i in range(20):
        record = await state.find_pod("default", f"p{i}")
        assert record is not None and record.phase is (PodPhase.DELETED if i % 2 else PodPhase.PENDING)
    assert sorted(await pop_names(nats)) == sorted(f"p{i}" for i in range(0, 20, 2))


async def test_one_batch_of_good_bad_repeated_and_deleted_submits_is_handled_like_one_by_one(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    await ensure_streams(js)
    state = ClusterState(redis)

    async def send(subject: str, data: bytes, msg_id: str) -> None:
        await publish_durable(js, subject, data, msg_id)

    def sub_id(ns_name: str, data: bytes, extra: str = "") -> str:
        return f"submit/{ns_name}/{hashlib.sha256(data).hexdigest()}{extra}"

    # Published before the queue starts: fetched as one batch.
    for i in range(5):
        await send(PODS_SUBMIT, pod_manifest(f"good{i}"), sub_id(f"default/good{i}", pod_manifest(f"good{i}")))
    bad = pod_manifest("bad", cpu="lots")
    await send(PODS_SUBMIT, bad, sub_id("default/bad", bad))
    await send(PODS_SUBMIT, b"\x00 not a pod", "submit/garbage")
    twice = pod_manifest("twice")
    await send(PODS_SUBMIT, twice, sub_id("default/twice", twice))
    await send(PODS_SUBMIT, twice, sub_id("default/twice", twice, "-again"))  # the same pod again
    gated, lifted = pod_manifest("gated", gates=("example.com/a",)), pod_manifest("gated")
    await send(PODS_SUBMIT, gated, sub_id("default/gated", gated))
    await send(PODS_SUBMIT, lifted, sub_id("default/gated", lifted))  # resubmitted without its gate
    gone = pod_manifest("gone")
    await send(PODS_SUBMIT, gone, sub_id("default/gone", gone))
    await send(PODS_DELETE, encode(PodDeletion("default", "gone")), "delete/gone")
    pod_list = codec.dumps(
        {"apiVersion": "v1", "kind": "PodList", "items": [codec.loads(pod_manifest(f"listed{i}")) for i in range(2)]}
    )
    await send(PODS_SUBMIT, pod_list, "submit/a-list")
    yaml_pod = b"apiVersion: v1\nkind: Pod\nmetadata: {name: yaml-pod}\nspec: {containers: [{name: c}]}\n"
    await send(PODS_SUBMIT, yaml_pod, sub_id("default/yaml-pod", yaml_pod))

    queue = await start_queue()
    want = {*(f"good{i}" for i in range(5)), "twice", "gated", "listed0", "listed1", "yaml-pod"}

    async def all_acked() -> None:
        info = await js.consumer_info("KUBUS_PODS", "kubus-queue")
        assert (info.num_pending, info.num_ack_pending) == (0, 0), info

    await eventually(all_acked)
    assert len(queue.queues[DEFAULT]) == len(want)
    assert sorted(await pop_names(nats)) == sorted(want)
    for name in want:
        record = await state.find_pod("default", name)
        assert record is not None and record.phase is PodPhase.PENDING and record.reason == "", name
    assert "schedulingGates" not in codec.loads((await state.find_pod("default", "gated")).manifest)["spec"]  # type: ignore[union-attr]
    assert (await state.find_pod("default", "gone")).phase is PodPhase.DELETED  # type: ignore[union-attr]
    assert await state.find_pod("default", "bad") is None

    rejected = await eventually(lambda: _at_least(events.of("pod.rejected"), 2))
    assert {e.name for e in rejected} >= {"default/bad"} and len(rejected) == 2
    accepted = await eventually(lambda: _at_least(events.of("pod.accepted"), len(want) + 1))
    assert sorted(e.name for e in accepted) == sorted({f"default/{n}" for n in want} | {"default/gone"})
    # announced together: a pods.accepted event for the pods a round of the batch accepted
    announcements = [m for m in events.messages if m.kind.startswith("pod") and m.kind.endswith("accepted")]
    assert {m.kind for m in announcements} == {"pods.accepted"} and len(announcements) < len(accepted)
    assert await check_invariants(state) == []


async def test_a_batch_whose_store_fails_is_handled_one_message_at_a_time(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    await ensure_streams(js)
    for i in range(4):  # published before the queue starts: fetched as one batch
        data = pod_manifest(f"p{i}")
        await publish_durable(js, PODS_SUBMIT, data, f"submit/default/p{i}/{hashlib.sha256(data).hexdigest()}")
    failures: list[int] = []
    real = ClusterState.put_pods

    async def fail_once(self: ClusterState, records: Any) -> list[bool]:
        if not failures:
            failures.append(len(records))
            raise RuntimeError("boom")
        return await real(self, records)

    ClusterState.put_pods = fail_once  # type: ignore[method-assign]
    try:
        queue = await start_queue()
        await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 4))
    finally:
        ClusterState.put_pods = real  # type: ignore[method-assign]
    assert failures == [4]  # the batch failed, then each message was stored alone (put_pod)
    assert sorted(await pop_names(nats)) == ["p0", "p1", "p2", "p3"]

    async def all_acked() -> None:
        info = await js.consumer_info("KUBUS_PODS", "kubus-queue")
        assert (info.num_pending, info.num_ack_pending) == (0, 0), info

    await eventually(all_acked)


def test_a_json_pod_is_read_once_and_gives_what_the_general_path_gives() -> None:
    data = pod_manifest("fast", priority=3, annotations={"a": "b"}, gates=("x/y",))
    [fast] = read_submission(data, source="t", max_manifest_bytes=1 << 20)
    # Leading blanks: not the fast path.
    [general] = read_submission(b"  " + data, source="t", max_manifest_bytes=1 << 20)
    assert fast == general
    assert codec.loads(fast.manifest)["metadata"]["uid"] == fast.pod.metadata.uid
    with pytest.raises(Rejected) as err:
        read_submission(pod_manifest("bad", cpu="lots"), source="t", max_manifest_bytes=1 << 20)
    assert err.value.key == "default/bad" and "resources.requests.cpu" in str(err.value)


def test_a_json_pod_list_is_read_pod_by_pod_each_pod_refused_alone() -> None:
    items = [pod_manifest("a", priority=3), pod_manifest("bad", cpu="lots"), pod_manifest("b", gates=("x/y",))]
    data = pod_list(items)
    fast = read_submissions(data, source="t", max_manifest_bytes=1 << 20)
    assert [type(r) for r in fast] == [Submission, Rejected, Submission]
    refused = fast[1]
    assert isinstance(refused, Rejected) and refused.key == "default/bad" and refused.uid == uid_of(
        pod_manifest("bad")
    )
    assert "resources.requests.cpu" in str(refused)
    # The good ones are exactly what the general path reads (leading blanks: not the fast path).
    good = pod_list([items[0], items[2]])
    assert [r for r in fast if isinstance(r, Submission)] == read_submission(b"  " + good, source="t",
                                                                             max_manifest_bytes=1 << 20)  # fmt: skip
    with pytest.raises(Rejected) as err:  # read whole, the first pod refused is raised
        read_submission(data, source="t", max_manifest_bytes=1 << 20)
    assert err.value.key == "default/bad"
    # Any other message is read whole: a YAML list with a bad pod is one refusal.
    [whole] = read_submissions(b"  " + data, source="t", max_manifest_bytes=1 << 20)
    assert isinstance(whole, Rejected) and whole.key == "default/a"
    too_big = read_submissions(data, source="t", max_manifest_bytes=len(items[0]) - 10)
    assert [getattr(r, "reason", "") for r in too_big] == ["TooLarge", "Invalid", "TooLarge"]


async def test_the_watchers_pod_lists_are_taken_pod_by_pod_in_order_with_the_messages_around_them(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    await ensure_streams(js)
    state = ClusterState(redis)

    def submit_id(name: str, data: bytes) -> str:
        return msgids.submit("default", name, data)

    # Published before the queue starts: fetched as one batch. "moved" is submitted gated in a
    # list, then without its gate and with a label alone after the list: that one wins, though
    # the list comes second in the lane of its first pod (l0, submitted alone before it).
    gated, labeled = pod_manifest("moved", gates=("x/y",)), pod_manifest("moved", labels={"v": "3"})
    await publish_durable(js, PODS_SUBMIT, pod_manifest("l0"), submit_id("l0", pod_manifest("l0")))
    items = [
        pod_manifest("l0"), pod_manifest("bad", cpu="lots"), gated,
        pod_manifest("no-class").replace(b'"priority":0', b'"priorityClassName":"nope"'), pod_manifest("l1"),
    ]  # fmt: skip
    ids = [submit_id(f"i{i}", item) for i, item in enumerate(items)]
    await publish_durable(js, PODS_SUBMIT, pod_list(items), msgids.submit_list(ids))
    await publish_durable(js, PODS_SUBMIT, labeled, submit_id("moved", labeled))
    second = [pod_manifest("l2"), pod_manifest("l3")]
    await publish_durable(js, PODS_SUBMIT, pod_list(second), msgids.submit_list(submit_id("x", d) for d in second))

    queue = await start_queue()

    async def all_acked() -> None:
        info = await js.consumer_info("KUBUS_PODS", "kubus-queue")
        assert (info.num_pending, info.num_ack_pending) == (0, 0), info

    await eventually(all_acked)
    want = ["l0", "l1", "l2", "l3", "moved"]
    assert len(queue.queues[DEFAULT]) == len(want)
    assert sorted(await pop_names(nats)) == want
    moved = await state.find_pod("default", "moved")
    assert moved is not None and codec.loads(moved.manifest)["metadata"]["labels"] == {"v": "3"}  # type: ignore[arg-type]
    assert "schedulingGates" not in codec.loads(moved.manifest)["spec"]  # type: ignore[arg-type]
    for name in ("bad", "no-class"):
        assert await state.find_pod("default", name) is None, name
    rejected = await eventually(lambda: _at_least(events.of("pod.rejected"), 2))
    assert sorted(e.name for e in rejected) == ["default/bad", "default/no-class"]
    assert "priorityClassName" in repr(next(e for e in rejected if e.name == "default/no-class"))
    assert await check_invariants(state) == []


# -- gates -------------------------------------------------------------------------------------------


async def test_a_gated_pod_waits_until_it_is_resubmitted_without_gates(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    gated = pod_manifest("g", gates=("example.com/approval",))
    uid = uid_of(gated)
    await submit(js, gated)
    record = await stored(state, uid)
    assert (record.reason, record.message) == (
        "SchedulingGated",
        "waiting for scheduling gates: [example.com/approval]",
    )
    await eventually(lambda: _assert(queue.queues[DEFAULT].where(uid) is QueueName.GATED))
    assert (await pop(nats)).pods == ()

    await submit(js, pod_manifest("g"))  # the gate lifted
    [popped] = (await pop(nats, wait_ms=5000)).pods
    assert popped.uid == uid and "schedulingGates" not in codec.loads(popped.manifest)["spec"]
    record = await stored(state, uid)
    assert record.manifest == popped.manifest and record.reason == ""


# -- restart -----------------------------------------------------------------------------------------


async def test_a_restarted_queue_rebuilds_from_redis_and_loses_nothing(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    first = await start_queue()
    state = ClusterState(redis)
    names = ["a", "b", "c"]
    for i, name in enumerate(names):
        await submit(js, pod_manifest(name, priority=i))
    await submit(js, pod_manifest("gpu-pod", scheduler=GPU))
    await eventually(lambda: _assert(sum(len(q) for q in first.queues.values()) == 4))
    assert await pop_names(nats, max_pods=1) == ["c"]  # in flight when the queue dies
    await first.stop()

    await submit(js, pod_manifest("while-down"))  # JetStream keeps it
    second = await start_queue()
    assert await pop_names(nats, max_pods=10, wait_ms=5000) in (["c", "b", "a"], ["c", "b", "a", "while-down"])
    assert await pop_names(nats, GPU) == ["gpu-pod"]
    await eventually(lambda: _assert(second.queues[DEFAULT].where(uid_of(pod_manifest("while-down"))) is not None))
    pending = await state.pods_in_phase(PodPhase.PENDING)
    assert len(pending) == 5


# -- in flight ---------------------------------------------------------------------------------------


async def test_an_in_flight_pod_is_handed_out_again_after_its_deadline_unless_it_moved_on(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    await start_queue(QueueOptions(in_flight_timeout=0.3, in_flight_interval=0.05))
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    for name in ("forgotten", "reserved-then-crashed"):
        await submit(js, pod_manifest(name))
    popped = (await pop(nats, max_pods=2, wait_ms=5000)).pods
    if len(popped) < 2:
        popped += (await pop(nats, wait_ms=5000)).pods
    by_name = {p.key.split("/")[1]: p for p in popped}
    # The cycle reserved one and died before reporting it (docs: crash between 4c and 4d).
    await _reserve(state, by_name["reserved-then-crashed"].manifest, "n1")

    again = await pop(nats, wait_ms=5000)
    assert [(p.key, p.attempts) for p in again.pods] == [("default/forgotten", 1)]
    await done(nats, DEFAULT, Outcome(again.pods[0].uid, OutcomeKind.UNSCHEDULABLE, plugins=("NodeAffinity",)))
    assert (await pop(nats, wait_ms=600)).pods == ()  # the reserved one was dropped, not handed out


async def refused_pop(nats: NATS, token: int) -> str:
    """The queue's refusal of a pop with ``token`` (its error header); fails if it was answered."""
    request = PopRequest(max_pods=50, wait_ms=0, holder="test", fencing_token=token)
    reply = await nats.request(queue_pop(DEFAULT), encode(request), timeout=5)
    refusal = (reply.headers or {}).get(ERROR_HEADER, "")
    assert reply.data == b"" and refusal.startswith(FENCED), (reply.data, refusal)
    return refusal


async def test_pops_are_fenced_by_the_lease_in_redis_not_by_the_tokens_seen(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, state: ClusterState
) -> None:
    queue = await start_queue()
    for name in ("a", "b"):
        await submit(js, pod_manifest(name))
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 2))
    lease = cycle_lease(DEFAULT)
    first = await state.acquire_lease(lease, "cycle-1", 60_000)
    assert first is not None
    assert await pop_names(nats, max_pods=1, token=first) == ["a"]
    assert await state.release_lease(lease, "cycle-1")  # a new cycle takes over
    second = await state.acquire_lease(lease, "cycle-2", 60_000)
    assert second is not None and second > first
    assert await pop_names(nats, max_pods=5, token=second) == ["a", "b"]  # the new leader gets a back at once
    assert "cycle-2 holds" in await refused_pop(nats, first)  # the deposed cycle gets nothing
    assert "cycle-2 holds" in await refused_pop(nats, 0)  # nor a pop without a token while a cycle leads


async def test_a_forged_token_is_refused_alone_and_the_leader_still_pops(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, state: ClusterState
) -> None:
    """A pop with a token far above the lease's (sent with the cycle role's rights) is refused,
    and refused every time, without blocking the real leader's pops; nor do tokens count with no
    lease at all (the cycle is gone)."""
    queue = await start_queue()
    await submit(js, pod_manifest("a"))
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 1))
    assert "no cycle holds the lease" in await refused_pop(nats, 7)
    token = await state.acquire_lease(cycle_lease(DEFAULT), "cycle-1", 60_000)
    assert token is not None
    for _ in range(3):
        assert "cycle-1 holds" in await refused_pop(nats, 2**62)
    assert await pop_names(nats, token=token) == ["a"]
    await submit(js, pod_manifest("b"))
    await eventually(lambda: _assert(queue.queues[DEFAULT].where(uid_of(pod_manifest("b"))) is QueueName.ACTIVE))
    assert "cycle-1 holds" in await refused_pop(nats, 2**62)
    assert await pop_names(nats, token=token) == ["b"]


# -- the janitor -------------------------------------------------------------------------------------


async def test_the_janitor_gives_back_a_reservation_whose_cycle_vanished(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    old = ClusterState(redis, clock=lambda: time.time() - 600)  # its writes look ten minutes old
    await old.put_node(_node("n1"))
    data = pod_manifest("stuck")
    [sub] = read_submission(data, source="test", max_manifest_bytes=1 << 20)
    await old.put_pod(PodRecord.of(sub.pod, sub.manifest, now=old.clock()))
    attempt = await _reserve(old, sub.manifest, "n1")

    await start_queue(QueueOptions(reserve_timeout=60, janitor_interval=0.1))
    state = ClusterState(redis)
    record = await stored(state, sub.pod.metadata.uid, PodPhase.PENDING)
    assert record.reason == "ReservationTimeout" and "n1" in record.message
    assert await state.reservations("n1") == []
    assert await pop_names(nats, wait_ms=5000) == ["stuck"]
    unreserved = await eventually(lambda: _at_least(events.of("pod.unreserved"), 1))
    assert unreserved[0].node == "n1" and record.version > attempt
    assert await check_invariants(state) == []


async def test_the_janitor_finishes_a_bind_a_binder_left_half_done(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    old = ClusterState(redis, clock=lambda: time.time() - 600)
    await old.put_node(_node("n1"))
    data = pod_manifest("half-bound")
    [sub] = read_submission(data, source="test", max_manifest_bytes=1 << 20)
    uid = sub.pod.metadata.uid
    await old.put_pod(PodRecord.of(sub.pod, sub.manifest, now=old.clock()))
    attempt = await _reserve(old, sub.manifest, "n1")
    assert (await old.mark_bound("n1", uid, attempt)).value == "OK"  # and then the binder died
    assignments = await nats.subscribe(node_pods("n1"))

    await start_queue(QueueOptions(janitor_interval=0.1))
    state = ClusterState(redis)
    record = await stored(state, uid, PodPhase.BOUND)
    assert record.node == "n1" and record.bindings == 1
    msg = await assignments.next_msg(timeout=5)
    assignment = decode(NodeAssignment, msg.data)
    assert (assignment.uid, assignment.node, assignment.attempt) == (uid, "n1", attempt)
    assert await check_invariants(state) == []


async def test_the_janitor_fails_a_running_pod_whose_room_was_taken_and_holds_it_again_where_it_is_free(
    start_queue: QueueFactory, redis: aioredis.Redis, events: EventLog
) -> None:
    """Running pods whose reservations were released behind their backs (a deletion acted on
    that the store did not back): one gets its room again, the other, whose room another pod
    took, is failed (Evicted) and announced finished, so no node is overcommitted."""
    state = ClusterState(redis)
    await state.put_node(_node("n1"))  # 8 cpu
    uids = {}
    for name, cpu in (("keeps", "2"), ("evicted", "6"), ("thief", "6")):
        [sub] = read_submission(pod_manifest(name, cpu=cpu), source="test", max_manifest_bytes=1 << 20)
        uids[name] = sub.pod.metadata.uid
        assert await state.put_pod(PodRecord.of(sub.pod, sub.manifest, now=state.clock()))
        if name == "thief":
            continue
        attempt = await _reserve(state, sub.manifest, "n1")
        assert await state.mark_bound("n1", uids[name], attempt) is StoreCode.OK
        assert (await state.bind_pod(uids[name], "n1", (), expected_version=attempt)).ok
        assert (await state.transition(uids[name], PodPhase.RUNNING)).ok
        assert await state.release("n1", uids[name]) is StoreCode.OK
    await _reserve(state, pod_manifest("thief", cpu="6"), "n1")

    await start_queue(replace(FAST, resync=0.2))
    record = await stored(state, uids["evicted"], PodPhase.FAILED)
    assert record.reason == "Evicted" and "Insufficient cpu" in record.message, record
    assert [e.reason for e in await state.events(uids["evicted"])][-1] == "Evicted"
    assert (await state.get_pod(uids["keeps"])) is not None
    assert await state.reservation("n1", uids["keeps"]) is not None
    finished = await eventually(lambda: _at_least(events.of("pod.finished"), 1))
    assert [e.name for e in finished] == ["default/evicted"]
    assert await check_invariants(state) == []


# -- nodes -------------------------------------------------------------------------------------------


async def test_a_silent_node_is_marked_lost_and_found_again(
    start_queue: QueueFactory, redis: aioredis.Redis, events: EventLog
) -> None:
    state = ClusterState(redis)
    for name in ("quiet", "alive", "never-heartbeated"):
        await state.put_node(_node(name))
    await state.heartbeat("quiet", at=time.time() - 120)
    await state.heartbeat("alive")
    queue = await start_queue(QueueOptions(node_grace=40, node_interval=0.05))

    lost = await eventually(lambda: _at_least(events.of("node.lost"), 1))
    assert [e.name for e in lost] == ["quiet"]
    node = await state.get_node("quiet")
    assert node is not None and node.unreachable
    assert not (await state.get_node("never-heartbeated")).unreachable  # type: ignore[union-attr]
    assert 'kubus_nodes{state="unreachable"} 1.0' in queue.metrics.exposition().decode()

    assert (await state.heartbeat("quiet")).revived
    updated = await eventually(lambda: _at_least(events.of("node.updated"), 1))
    assert updated[0].name == "quiet"
    assert len(events.of("node.lost")) == 1


# -- the command line --------------------------------------------------------------------------------


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "sched.yaml"
    bad.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles: 3\n")
    assert queue_main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kubus.queue: ") and str(bad) in err and "\n" not in err
    assert queue_main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert queue_main(["--metrics-port", "-1"]) == 2


# -- QueueingHints: events move only the pods their rejecting plugins' hints say ------------------------


async def _picky_unschedulable(
    queue: QueueService, state: ClusterState, nats: NATS, js: JetStreamContext
) -> tuple[str, QueuedPod]:
    """Nodes n1 (zone b) and n2 (zone c), and a pod for zone a that NodeAffinity rejected:
    unschedulable. Its uid and the pod as popped."""
    for name, zone in (("n1", "b"), ("n2", "c")):
        await state.put_node(_node(name, {"zone": zone}))
    data = _pod_with_spec("picky", {"nodeSelector": {"zone": "a"}})
    uid = uid_of(data)
    await submit(js, data)
    [popped] = (await pop(nats, wait_ms=5000)).pods
    await done(nats, DEFAULT, Outcome(uid, OutcomeKind.UNSCHEDULABLE, message="0/2 nodes", plugins=("NodeAffinity",)))
    assert queue.queues[DEFAULT].where(uid) is QueueName.UNSCHEDULABLE
    return uid, popped


async def test_a_pod_rejected_by_node_affinity_moves_only_when_a_node_comes_to_match(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    uid, popped = await _picky_unschedulable(queue, state, nats, js)

    # Unrelated node changes (another label on n2, then n1 as it was): the hint skips them.
    await _update_node(js, state, "n2", {"zone": "c", "rack": "r1"})
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "QueueSkip", 1)
    await _update_node(js, state, "n1", {"zone": "b"}, announce_only=True)
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "QueueSkip", 2)
    assert queue.queues[DEFAULT].where(uid) is QueueName.UNSCHEDULABLE

    # n1's labels change to match (old: the copy the last event cached): the pod moves.
    await _update_node(js, state, "n1", {"zone": "a"})
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "Queue", 1)
    assert queue.queues[DEFAULT].where(uid) in (QueueName.BACKOFF, QueueName.ACTIVE)
    again = await pop(nats, wait_ms=5000)
    assert [p.uid for p in again.pods] == [popped.uid]


async def test_several_nodes_changes_in_one_event_move_pods_as_their_own_events_would(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    """A watcher's ``nodes.changed``: each change read as its own node event (hints, the cached
    copies as ``old``), in order; a change of no node kind is refused and said, the rest read."""
    queue = await start_queue()
    state = ClusterState(redis)
    uid, popped = await _picky_unschedulable(queue, state, nats, js)

    # n2 gets an unrelated label: skipped by the hint; the pod stays.
    await state.put_node(_node("n2", {"zone": "c", "rack": "r1"}))
    n2 = await state.get_node("n2")
    assert n2 is not None
    [only] = announcements.node_changes([(EventKind.NODE_UPDATED, "n2", n2.generation)], at=time.time())
    await _publish(js, only)
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "QueueSkip", 1)
    assert queue.queues[DEFAULT].where(uid) is QueueName.UNSCHEDULABLE

    # One event: n2 again unchanged (skipped), a change of no node kind, n1 now matching (moves).
    await state.put_node(_node("n1", {"zone": "a"}))
    n1 = await state.get_node("n1")
    assert n1 is not None
    changes = [(EventKind.NODE_UPDATED, "n2", n2.generation), (EventKind.POD_BOUND, "n9", 1),
               (EventKind.NODE_UPDATED, "n1", n1.generation)]  # fmt: skip
    [batch] = announcements.node_changes(changes, at=time.time())
    await _publish(js, batch)
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "Queue", 1)
    await _hinted(queue, "NodeAffinity", "NodeUpdate", "QueueSkip", 2)
    assert queue.queues[DEFAULT].where(uid) in (QueueName.BACKOFF, QueueName.ACTIVE)
    assert 'kubus_rejected_messages_total{subject="kubus.events.>"} 1.0' in queue.metrics.exposition().decode()
    again = await pop(nats, wait_ms=5000)
    assert [p.uid for p in again.pods] == [popped.uid]


async def test_a_pod_rejected_for_resources_moves_when_a_pod_on_a_node_finishes(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    queue = await start_queue()
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    hog, big, idle = pod_manifest("hog", cpu="6"), pod_manifest("big", cpu="4"), pod_manifest("idle")
    for data in (hog, big):
        await submit(js, data)
    await eventually(lambda: _assert(len(queue.queues[DEFAULT]) == 2))
    assert sorted(await pop_names(nats)) == ["big", "hog"]
    attempt = await _reserve(state, hog, "n1")
    await done(nats, DEFAULT, Outcome(uid_of(hog), OutcomeKind.RESERVED, node="n1", attempt=attempt))
    report = Outcome(uid_of(big), OutcomeKind.UNSCHEDULABLE, message="Insufficient cpu", plugins=("NodeResourcesFit",))
    await done(nats, DEFAULT, report)
    assert queue.queues[DEFAULT].where(uid_of(big)) is QueueName.UNSCHEDULABLE

    # A pending pod deleted held no room: the hint skips it.
    await submit(js, idle)
    await stored(state, uid_of(idle))
    await _publish(js, announcements.pod_event(EventKind.POD_DELETED, "default/idle", uid_of(idle), at=time.time()))
    await _hinted(queue, "NodeResourcesFit", "AssignedPodDelete", "QueueSkip", 1)
    assert queue.queues[DEFAULT].where(uid_of(big)) is QueueName.UNSCHEDULABLE

    # The pod on n1 finishes: its room is free, the pod moves.
    await _publish(
        js, announcements.pod_event(EventKind.POD_FINISHED, "default/hog", uid_of(hog), at=time.time(), node="n1")
    )
    await _hinted(queue, "NodeResourcesFit", "AssignedPodUpdate", "Queue", 1)
    assert queue.queues[DEFAULT].where(uid_of(big)) in (QueueName.BACKOFF, QueueName.ACTIVE)


async def test_a_pods_bound_event_moves_pods_as_each_pods_own_pod_bound_would(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    """A binder announces the pods it bound together (pods.bound): the queue reads each as its
    own pod.bound, the hints asked for each, in order."""
    queue = await start_queue()
    state = ClusterState(redis)
    await state.put_node(_node("n1", {"zone": "a"}))
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    needy = _pod_with_spec("needy", {"affinity": affinity})
    web, db = pod_manifest("web", labels={"app": "web"}), pod_manifest("db", labels={"app": "db"})
    for data in (needy, web, db):
        await submit(js, data)
    popped: list[str] = []
    while len(popped) < 3:
        popped += [p.uid for p in (await pop(nats, max_pods=3, wait_ms=5000)).pods]
    needy_uid = uid_of(needy)
    rejected = Outcome(needy_uid, OutcomeKind.UNSCHEDULABLE, message="0/1 nodes", plugins=("InterPodAffinity",))
    await done(nats, DEFAULT, rejected)
    assert queue.queues[DEFAULT].where(needy_uid) is QueueName.UNSCHEDULABLE

    bound = [BatchedPod(f"default/{n}", uid_of(d), "n1", 1, DEFAULT) for n, d in (("web", web), ("db", db))]
    [event] = announcements.pod_batch(EventKind.PODS_BOUND, bound, at=time.time())
    await _publish(js, event)
    # web's bind cannot help it (no app=db), db's can: one hint call each, and the pod moves
    await _hinted(queue, "InterPodAffinity", "AssignedPodAdd", "QueueSkip", 1)
    await _hinted(queue, "InterPodAffinity", "AssignedPodAdd", "Queue", 1)
    assert queue.queues[DEFAULT].where(needy_uid) is not QueueName.UNSCHEDULABLE


def _pod_with_spec(name: str, extra: dict[str, Any], *, annotations: dict[str, str] | None = None) -> bytes:
    manifest = codec.loads(pod_manifest(name, annotations=annotations))
    manifest["spec"].update(extra)
    return codec.dumps(manifest)


async def _publish(js: JetStreamContext, p: Publication) -> None:
    await publish_durable(js, p.subject, p.payload, p.msg_id)


async def _update_node(
    js: JetStreamContext, state: ClusterState, name: str, labels: dict[str, str], *, announce_only: bool = False
) -> None:
    """Store node ``name`` with ``labels`` (unless ``announce_only``) and announce node.updated."""
    if not announce_only:
        await state.put_node(_node(name, labels))
    record = await state.get_node(name)
    assert record is not None
    await _publish(
        js,
        announcements.node_event(
            EventKind.NODE_UPDATED, name, record.generation, at=time.time(), nonce=f"{time.time_ns()}"
        ),
    )


async def _hinted(queue: QueueService, plugin: str, event: str, hint: str, count: int) -> None:
    """Wait until ``plugin``'s hint answered ``hint`` ``count`` times for ``event``."""
    line = (
        "scheduler_queueing_hint_execution_duration_seconds_count"
        f'{{event="{event}",hint="{hint}",plugin="{plugin}"}} {float(count)}'
    )
    await eventually(lambda: _assert(line in queue.metrics.exposition().decode()))


# -- helpers -----------------------------------------------------------------------------------------


def _node(name: str, labels: dict[str, str] | None = None, *, annotations: dict[str, str] | None = None) -> Any:
    capacity = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    return parse_node(node_manifest(name, labels=labels or {}, annotations=annotations or {}, capacity=capacity))


async def _reserve(state: ClusterState, manifest: bytes, node: str) -> int:
    """What the cycle does (docs/services.md 4a-4b): Pending -> Reserved, then reserve. Returns the attempt."""
    [sub] = read_submission(manifest, source="test", max_manifest_bytes=1 << 20)
    w = await state.transition(
        sub.pod.metadata.uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING}, count_attempt=True
    )
    assert w.ok, w
    reservation = Reservation.of(PodInfo.of(sub.pod), node, attempt=w.version, now=state.clock())
    assert (await state.reserve(node, reservation)).ok
    return w.version


# -- pods that name their node -----------------------------------------------------------------------


async def test_a_pod_naming_its_node_is_bound_there_without_any_cycle(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, events: EventLog
) -> None:
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    assignments = await nats.subscribe(node_pods("n1"))
    queue = await start_queue()
    data = _pod_with_spec("pinned", {"nodeName": "n1"})
    uid = uid_of(data)
    await submit(js, data)

    record = await stored(state, uid, PodPhase.BOUND)
    assert (record.node, record.bindings, record.attempts) == ("n1", 1, 1)
    assignment = decode(NodeAssignment, (await assignments.next_msg(timeout=5)).data)
    assert (assignment.uid, assignment.node, assignment.attempt) == (uid, "n1", record.version - 1)
    [held] = await state.reservations("n1")
    assert held.pod_uid == uid and str(held.state) == "bound"
    assert [e.reason for e in await state.events(uid)] == ["Assigned"]
    await eventually(lambda: _assert([e.node for e in events.of("pod.bound")] == ["n1"]))
    assert (await pop(nats)).pods == () and len(queue.queues[DEFAULT]) == 0  # never queued
    assert await check_invariants(state) == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"nodeName": "nowhere"}, "NodeNotFound"),
        ({"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "9"}}}]}, "OutOfcpu"),
        (
            {"nodeName": "n1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "UnexpectedAdmissionError",
        ),
    ],
    ids=["missing-node", "full-node", "no-gpu-there"],
)
async def test_a_pod_its_node_cannot_take_ends_failed_with_kubelets_reason(
    start_queue: QueueFactory,
    nats: NATS,
    js: JetStreamContext,
    redis: aioredis.Redis,
    spec: dict[str, Any],
    reason: str,
) -> None:
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    await start_queue()
    data = _pod_with_spec("refused", spec)
    uid = uid_of(data)
    await submit(js, data)

    record = await stored(state, uid, PodPhase.FAILED)
    assert record.reason == reason and spec["nodeName"] in record.message, record
    [event] = await state.events(uid)
    assert (event.type, event.reason, event.message) == (EventType.WARNING, reason, record.message)
    assert await state.reservations("n1") == []
    assert (await pop(nats)).pods == ()
    assert await check_invariants(state) == []


async def test_a_pod_naming_its_node_gets_free_gpu_devices_there(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    state = ClusterState(redis)
    gpus = codec.dumps([{"index": i, "model": "H100", "memory": "80Gi"} for i in range(2)]).decode()
    await state.put_node(_node("g1", annotations={"kubus.io/gpus": gpus}))
    await start_queue()
    one_gpu = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    pinned = _pod_with_spec(
        "pinned", {"nodeName": "g1", "containers": one_gpu}, annotations={"kubus.io/gpu-devices": "1"}
    )
    picked = _pod_with_spec("picked", {"nodeName": "g1", "containers": one_gpu})
    await submit(js, pinned)
    assert (await stored(state, uid_of(pinned), PodPhase.BOUND)).gpu_devices == (1,)
    await submit(js, picked)
    assert (await stored(state, uid_of(picked), PodPhase.BOUND)).gpu_devices == (0,)
    assert await check_invariants(state) == []


async def test_the_janitor_places_again_a_pod_naming_its_node_that_a_crash_left_reserved(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    old = ClusterState(redis, clock=lambda: time.time() - 600)  # a queue that crashed after reserving
    await old.put_node(_node("n1"))
    data = _pod_with_spec("half-placed", {"nodeName": "n1"})
    [sub] = read_submission(data, source="test", max_manifest_bytes=1 << 20)
    uid = sub.pod.metadata.uid
    await old.put_pod(PodRecord.of(sub.pod, sub.manifest, now=old.clock()))
    attempt = await _reserve(old, sub.manifest, "n1")
    assignments = await nats.subscribe(node_pods("n1"))

    queue = await start_queue(QueueOptions(reserve_timeout=60, janitor_interval=0.1))
    state = ClusterState(redis)
    record = await stored(state, uid, PodPhase.BOUND)
    assert record.node == "n1" and record.attempts == 2 and record.reason == "ReservationTimeout"
    assignment = decode(NodeAssignment, (await assignments.next_msg(timeout=5)).data)
    assert assignment.uid == uid and assignment.attempt > attempt  # a new attempt, on the same node
    assert [e.reason for e in await state.events(uid)] == ["ReservationTimeout", "Assigned"]
    assert (await pop(nats)).pods == () and len(queue.queues[DEFAULT]) == 0
    assert await check_invariants(state) == []


async def test_a_restarted_queue_places_a_stored_pod_naming_its_node_instead_of_queueing_it(
    start_queue: QueueFactory, nats: NATS, redis: aioredis.Redis
) -> None:
    state = ClusterState(redis)
    await state.put_node(_node("n1"))
    data = _pod_with_spec("stored-only", {"nodeName": "n1"})  # stored, then the queue died
    [sub] = read_submission(data, source="test", max_manifest_bytes=1 << 20)
    await state.put_pod(PodRecord.of(sub.pod, sub.manifest, now=time.time()))

    queue = await start_queue()
    assert (await stored(state, sub.pod.metadata.uid, PodPhase.BOUND)).node == "n1"
    assert len(queue.queues[DEFAULT]) == 0
    assert await check_invariants(state) == []


# -- a standby queue -------------------------------------------------------------------------------

# The lease changes hands at once here (a stolen lease, a released one), never by lapsing, so its
# ttl is long: with a ttl of 1 s, a test process that stalls for a second (a busy CI machine)
# deposes the new leader, which takes the lease again as a new term, and a pop sent meanwhile
# meets no responder or a queue that no longer serves.
LEASED = replace(FAST, lease_ttl=30.0, renew_interval=0.1)


async def steal_queue_lease(state: ClusterState, thief: str) -> int:
    """Give the lease ``queue`` to ``thief`` at once, as a lapse followed by a new holder does:
    one transaction, so the holder cannot renew in between."""
    name = queue_lease()
    keys = [state.keys.lease_holder(name), state.keys.lease_fence(name)]
    pipe = state.redis.pipeline(transaction=True)
    pipe.delete(keys[0])
    await state.scripts.acquire_lease(keys=keys, args=[thief, 30_000], client=pipe)
    _, token = await pipe.execute()
    assert token is not None
    return int(token)


def held_pods(queue: QueueService) -> int:
    return sum(len(q) for q in queue.queues.values())


async def test_a_standby_queue_takes_over_with_its_queues_rebuilt_and_the_deposed_one_stops_serving(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    state = ClusterState(redis)
    first = await start_queue(LEASED)
    second = await start_queue(LEASED)
    assert serves(first) and not serves(second)
    data = [pod_manifest(f"web-{i}") for i in range(3)]
    for d in data:
        await submit(js, d)
    for d in data:
        await stored(state, uid_of(d))
    [in_flight] = (await pop(nats, max_pods=1, wait_ms=3000)).pods  # popped from the first
    assert first.queues[DEFAULT].where(in_flight.uid) is QueueName.IN_FLIGHT
    assert held_pods(second) == 0  # a standby takes nothing in

    # The first's lease lapses and the standby takes it: it rebuilds from Redis and serves;
    # the first stops serving at once and forgets its queues.
    await steal_queue_lease(state, second.holder)

    async def taken_over() -> None:
        assert serves(second) and not serves(first)

    await eventually(taken_over)
    assert held_pods(first) == 0
    # Every pending pod, the one in flight at the deposed queue too, is handed out by the new one.
    assert sorted(await pop_names(nats, max_pods=10, wait_ms=3000)) == ["web-0", "web-1", "web-2"]
    # It takes new pods in.
    await submit(js, pod_manifest("web-3"))
    assert await pop_names(nats, wait_ms=3000) == ["web-3"]

    # A clean stop gives the lease up: the other takes over at once, its queues rebuilt.
    await second.stop()
    await eventually(lambda: _assert(serves(first)), timeout=2)
    assert sorted(await pop_names(nats, max_pods=10, wait_ms=3000)) == ["web-0", "web-1", "web-2", "web-3"]


async def test_a_queue_whose_lease_redis_gives_to_another_answers_no_pop_and_stops_serving(
    start_queue: QueueFactory, nats: NATS, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    """The pop is fenced by the queue's own lease as Redis has it, not as the queue remembers it:
    a queue that has not yet noticed it lost the lease (its next renewal 10 s away) answers
    nothing and steps down at the first pop."""
    state = ClusterState(redis)
    queue = await start_queue(replace(FAST, lease_ttl=30.0, renew_interval=10.0))
    data = pod_manifest("web-0")
    await submit(js, data)
    await stored(state, uid_of(data))
    assert serves(queue)
    await steal_queue_lease(state, "thief")
    request = encode(PopRequest(max_pods=5, wait_ms=0, holder="test", fencing_token=0))
    with pytest.raises(nats_errors.TimeoutError):  # subscribed still, and silent
        await nats.request(queue_pop(DEFAULT), request, timeout=1)
    assert not serves(queue) and held_pods(queue) == 0

    async def unsubscribed() -> None:
        with pytest.raises(nats_errors.NoRespondersError):
            await nats.request(queue_pop(DEFAULT), request, timeout=1)

    await eventually(unsubscribed)
    assert (await stored(state, uid_of(data))).phase is PodPhase.PENDING  # the next leader's
