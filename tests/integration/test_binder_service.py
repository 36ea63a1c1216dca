"""The binder against real NATS and Redis: exactly-once binding under duplicates and racing
replicas, stale attempts, deleted pods, Permit rejections, retries, and garbage on the subject."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from nats.js import JetStreamContext
from nats.js.api import PubAck
from support import eventually

from kubus.api.manifests import parse_node, parse_pod
from kubus.binder import BinderOptions, BinderService, BindResult
from kubus.bus import (
    BIND_ALL,
    BIND_STREAM,
    EVENTS_STREAM,
    NODES_STREAM,
    PODS_REQUEUE,
    PODS_STREAM,
    Publication,
    bind,
    ensure_streams,
    event_subject,
    node_pods,
)
from kubus.bus.messages import (
    BindRequest,
    ClusterEvent,
    NodeAssignment,
    OutcomeKind,
    Outcomes,
    PodChange,
    decode,
    encode,
    expand,
)
from kubus.core import codec
from kubus.core.redis_connection import DiskError
from kubus.core.settings import ConnectionSettings
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import PodInfo
from kubus.runtime.service import ServiceState
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, ReservationState, check_invariants

PROFILE = "default-scheduler"
_ids = itertools.count()


# ---- building blocks ---------------------------------------------------------------------------


def options(**kw: Any) -> BinderOptions:
    return BinderOptions(**{"fetch_timeout": 0.2, **kw})


async def add_node(state: ClusterState, name: str = "node-a", *, gpus: int = 0, cpu: str = "4") -> None:
    meta: dict[str, Any] = {"name": name}
    if gpus:
        devices = [{"index": i, "model": "H100", "memory": "80Gi"} for i in range(gpus)]
        meta["annotations"] = {"kubus.io/gpus": codec.dumps(devices).decode()}
    node = parse_node({"kind": "Node", "metadata": meta, "status": {"capacity": {"cpu": cpu, "memory": "64Gi"}}})
    await state.put_node(node)


async def reserve_pod(
    state: ClusterState, name: str, node: str = "node-a", *, whole_gpus: int = 0, devices: tuple[int, ...] = ()
) -> BindRequest:
    """What the queue and the cycle do before a BindRequest exists: accept, Reserved, reserve."""
    requests: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if whole_gpus:
        requests["nvidia.com/gpu"] = whole_gpus
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}]},
    }
    pod, manifest = parse_pod(doc), codec.dumps(doc)
    assert await state.put_pod(PodRecord.of(pod, manifest, now=state.clock()))
    return await new_attempt(state, pod, manifest, node, devices)


async def new_attempt(
    state: ClusterState, pod: Any, manifest: bytes, node: str, devices: tuple[int, ...] = ()
) -> BindRequest:
    uid = pod.metadata.uid
    write = await state.transition(
        uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING}, count_attempt=True
    )
    assert write.ok, write
    reservation = Reservation.of(PodInfo.of(pod).placed_on(devices), node, attempt=write.version)
    assert (await state.reserve(node, reservation)).ok
    return BindRequest(
        uid=uid, key=pod.key, profile=PROFILE, node=node, manifest=manifest, gpu_devices=devices, attempt=write.version
    )


async def send(js: JetStreamContext, request: BindRequest | bytes, *, times: int = 1) -> None:
    """Publish to the bind subject, each copy under its own msg id: JetStream stores them all."""
    data = request if isinstance(request, bytes) else encode(request)
    for _ in range(times):
        ack = await js.publish(bind(PROFILE), data, headers={"Nats-Msg-Id": f"test/{next(_ids)}"})
        assert not ack.duplicate


async def all_handled(js: JetStreamContext, durable: str = "kubus-binder") -> None:
    info = await js.consumer_info(BIND_STREAM.name, durable)
    assert info.num_pending == 0 and info.num_ack_pending == 0, info


async def messages(js: JetStreamContext, stream: str, subject: str | None = None) -> int:
    info = await js.stream_info(stream, subjects_filter=subject) if subject else await js.stream_info(stream)
    if subject:
        return sum((info.state.subjects or {}).values())
    return info.state.messages


async def announced_bound(js: JetStreamContext) -> list[str]:
    """The uids the events stream has announced bound, in order: each pod of every pods.bound
    event (and of any pod.bound)."""
    info = await js.stream_info(EVENTS_STREAM.name)
    uids: list[str] = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await js.get_msg(EVENTS_STREAM.name, seq)
        if raw.subject is not None and (".pods.bound." in raw.subject or ".pod.bound." in raw.subject):
            for event in expand(decode(ClusterEvent, raw.data)):
                assert isinstance(event.data, PodChange)
                uids.append(event.data.uid)
    return uids


async def handled(js: JetStreamContext, binder: BinderService, expected: dict[str, float]) -> None:
    """Every request acked or nak'ed, with these results."""
    await all_handled(js)
    assert results(binder) == expected


def results(binder: BinderService) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in binder.metrics.binding_duration.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                out[sample.labels["result"]] = sample.value
    return out


# ---- binding -----------------------------------------------------------------------------------


async def test_binds_a_reserved_pod_once_under_duplicate_deliveries(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state, gpus=2)
    request = await reserve_pod(state, "web", whole_gpus=1, devices=(1,))
    async with BinderService(settings, options()) as binder:
        await send(js, request, times=3)

        async def bound() -> None:
            pod = await state.get_pod(request.uid)
            assert pod is not None and pod.phase is PodPhase.BOUND
            await all_handled(js)

        await eventually(bound)
        await eventually(lambda: _assert(results(binder).get("bound") == 3))

    pod = await state.get_pod(request.uid)
    assert pod is not None and pod.bindings == 1 and pod.node == "node-a" and pod.gpu_devices == (1,)
    reservation = await state.reservation("node-a", request.uid)
    assert reservation is not None and reservation.state is ReservationState.BOUND
    assert await check_invariants(state) == []

    # One assignment for the node's agent (the msg id dedupes the repeats), with the devices.
    assert await messages(js, NODES_STREAM.name) == 1
    raw = await js.get_last_msg(NODES_STREAM.name, node_pods("node-a"))
    assignment = decode(NodeAssignment, raw.data)
    assert (assignment.uid, assignment.node, assignment.gpu_devices, assignment.attempt) == (
        request.uid,
        "node-a",
        (1,),
        request.attempt,
    )
    assert raw.headers is not None and raw.headers["Nats-Msg-Id"] == f"assign/{request.uid}/{request.attempt}"
    # Announced bound (a repeat that came in another group of requests may be announced again:
    # pod.bound is read idempotently), one Scheduled pod event, the SLI observed once.
    assert set(await announced_bound(js)) == {request.uid}
    scheduled = [e for e in await state.events(request.uid) if e.reason == "Scheduled"]
    assert [e.message for e in scheduled] == ["Successfully assigned default/web to node-a"]
    sli = binder.metrics.pod_scheduling_sli_duration.collect()[0]
    assert [s.value for s in sli.samples if s.name.endswith("_count")] == [1.0]


async def test_two_binders_racing_bind_each_pod_exactly_once(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    requests = [await reserve_pod(state, f"p{i}") for i in range(3)]
    async with BinderService(settings, options(batch=4)) as one, BinderService(settings, options(batch=4)) as two:
        for request in requests:
            await send(js, request, times=6)

        async def bound() -> None:
            for pod in await state.get_pods(r.uid for r in requests):
                assert pod is not None and pod.phase is PodPhase.BOUND
            await all_handled(js)

        await eventually(bound)
        await eventually(lambda: _assert(sum(results(one).values()) + sum(results(two).values()) == 18))
    assert [p.bindings for p in await state.get_pods(r.uid for r in requests) if p] == [1, 1, 1]
    assert await messages(js, NODES_STREAM.name) == 3
    assert await check_invariants(state) == []


async def test_a_stale_attempt_is_dropped_and_the_new_one_binds(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    stale = await reserve_pod(state, "web")
    # The janitor gave the first attempt up; a cycle reserved the pod again (a new attempt).
    assert str(await state.unreserve("node-a", stale.uid, stale.attempt)) == "OK"
    assert (await state.transition(stale.uid, PodPhase.PENDING, expected_version=stale.attempt)).ok
    record = await state.get_pod(stale.uid)
    assert record is not None
    fresh = await new_attempt(state, record.pod(), record.manifest, "node-a")
    assert fresh.attempt != stale.attempt

    async with BinderService(settings, options()) as binder:
        await send(js, stale)
        await eventually(lambda: handled(js, binder, {"abandoned": 1.0}))
        pod = await state.get_pod(stale.uid)
        assert pod is not None and pod.phase is PodPhase.RESERVED and pod.version == fresh.attempt
        reservation = await state.reservation("node-a", stale.uid)
        assert reservation is not None and reservation.state is ReservationState.RESERVED
        assert await messages(js, NODES_STREAM.name) == 0
        assert await messages(js, PODS_STREAM.name, PODS_REQUEUE) == 0  # nothing to hand back: a newer attempt has it

        await send(js, fresh)

        async def bound() -> None:
            pod = await state.get_pod(stale.uid)
            assert pod is not None and pod.phase is PodPhase.BOUND and pod.bindings == 1

        await eventually(bound)
    assert await check_invariants(state) == []


async def test_a_request_whose_room_is_gone_completes_the_hand_back(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    """A hand-back cut short after the unreserve (a crash): the redelivery finds no reservation
    and the pod still Reserved at its attempt, and tells the queue."""
    await add_node(state)
    request = await reserve_pod(state, "web")
    assert str(await state.unreserve("node-a", request.uid, request.attempt)) == "OK"
    async with BinderService(settings, options()) as binder:
        await send(js, request)
        await eventually(lambda: handled(js, binder, {"abandoned": 1.0}))
    (outcome,) = (await requeued(js)).outcomes
    assert (outcome.kind, outcome.attempt) == (OutcomeKind.BIND_FAILED, request.attempt)
    assert "reservation lost" in outcome.message


async def test_a_pod_deleted_before_binding_gets_its_room_released(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    request = await reserve_pod(state, "web")
    assert (await state.transition(request.uid, PodPhase.DELETED)).ok  # the queue's delete, before its release
    async with BinderService(settings, options()) as binder:
        await send(js, request)
        await eventually(lambda: handled(js, binder, {"deleted": 1.0}))
    assert await state.reservation("node-a", request.uid) is None
    usage = await state.node_usage("node-a")
    assert usage is not None and usage.pods == 0 and usage.requested == {}
    pod = await state.get_pod(request.uid)
    assert pod is not None and pod.phase is PodPhase.DELETED and pod.bindings == 0
    assert await messages(js, NODES_STREAM.name) == 0
    assert await check_invariants(state) == []


# ---- handing pods back -------------------------------------------------------------------------


class Gate:
    """A WaitOnPermit that answers with `status`, or hangs, or raises the next of `errors`."""

    def __init__(self, status: Status | None = None, *, errors: list[Exception] | None = None) -> None:
        self.status = status
        self.errors = list(errors or [])
        self.calls = 0

    async def wait_on_permit(self, request: BindRequest) -> Status:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        if self.status is None:
            await asyncio.Event().wait()
        assert self.status is not None
        return self.status


async def requeued(js: JetStreamContext) -> Outcomes:
    raw = await js.get_last_msg(PODS_STREAM.name, PODS_REQUEUE)
    return decode(Outcomes, raw.data)


async def assert_handed_back(state: ClusterState, js: JetStreamContext, request: BindRequest, text: str) -> None:
    """Room given back, the queue told (with the attempt: it moves the pod back to Pending)."""
    assert await state.reservation(request.node, request.uid) is None
    usage = await state.node_usage(request.node)
    assert usage is not None and usage.pods == 0
    pod = await state.get_pod(request.uid)
    assert pod is not None and pod.phase is PodPhase.RESERVED and pod.version == request.attempt and pod.bindings == 0
    (outcome,) = (await requeued(js)).outcomes
    assert (outcome.uid, outcome.kind, outcome.node, outcome.attempt) == (
        request.uid,
        OutcomeKind.BIND_FAILED,
        request.node,
        request.attempt,
    )
    assert text in outcome.message
    assert await messages(js, EVENTS_STREAM.name, event_subject("pod.unreserved", request.key)) == 1
    assert await messages(js, NODES_STREAM.name, node_pods(request.node)) == 0
    # What the queue does with it: Pending again, on the attempt. The invariants hold.
    assert (await state.transition(request.uid, PodPhase.PENDING, expected_version=outcome.attempt)).ok
    assert await check_invariants(state) == []


async def test_a_permit_rejection_hands_the_pod_back(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    request = await reserve_pod(state, "web")
    gate = Gate(Status.unschedulable("gang incomplete"))
    async with BinderService(settings, options(), permit=gate) as binder:
        await send(js, request)
        await eventually(lambda: handled(js, binder, {"handed_back": 1.0}))
    await assert_handed_back(state, js, request, "gang incomplete")


async def test_a_permit_wait_times_out(settings: ConnectionSettings, state: ClusterState, js: JetStreamContext) -> None:
    await add_node(state)
    request = await reserve_pod(state, "web")
    async with BinderService(settings, options(permit_timeout=0.2), permit=Gate()):
        await send(js, request)
        await eventually(lambda: all_handled(js))
    await assert_handed_back(state, js, request, "timeout after waiting 0.2s")


async def test_a_server_outage_is_waited_out_and_only_other_failures_hand_the_pod_back(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    """Failures because Redis or NATS is away (down, a full disk) never use up a request's
    tries, however many; failures of the request's own (a bug) do, and the last hands it back."""
    await add_node(state)
    await add_node(state, "node-b")
    lucky = await reserve_pod(state, "lucky")
    unlucky = await reserve_pod(state, "unlucky", "node-b")
    async with BinderService(settings, options(max_failures=2), permit=Gate(Status.success())) as binder:
        assert isinstance(binder.permit, Gate)
        binder.permit.errors = [
            ConnectionError("redis went away"),
            DiskError("Errors writing to the AOF file: No space left on device"),
            ConnectionError("still down"),
        ]
        await send(js, lucky)  # more outages than max_failures: still bound once they end

        async def bound() -> None:
            pod = await state.get_pod(lucky.uid)
            assert pod is not None and pod.phase is PodPhase.BOUND

        await eventually(bound, timeout=30)
        assert binder.outage.reason is None
        binder.permit.errors = [RuntimeError("a bug"), RuntimeError("the same bug")]
        await send(js, unlucky)  # fails on both tries: handed back on the last
        await eventually(lambda: handled(js, binder, {"retry": 4.0, "bound": 1.0, "handed_back": 1.0}), timeout=30)
    await assert_handed_back(state, js, unlucky, "the same bug")


class NodeUnreachableBinder(BinderService):
    """A binder whose announcement to the node always fails after bind_pod, and not because
    NATS is away (that would be waited out): the stream refuses it."""

    async def _publish(self, publications: Sequence[Publication]) -> list[PubAck | Exception]:
        raise RuntimeError("the stream refuses the announcement")


async def test_a_bound_pod_stays_bound_when_its_node_cannot_be_told(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    request = await reserve_pod(state, "web")
    async with NodeUnreachableBinder(settings, options(max_failures=1)) as binder:
        await send(js, request)
        await eventually(lambda: handled(js, binder, {"bound": 1.0}))
    pod = await state.get_pod(request.uid)
    assert pod is not None and pod.phase is PodPhase.BOUND and pod.bindings == 1
    reservation = await state.reservation("node-a", request.uid)
    assert reservation is not None and reservation.state is ReservationState.BOUND  # room kept: bound is for life
    assert await messages(js, PODS_STREAM.name, PODS_REQUEUE) == 0
    assert await check_invariants(state) == []


# ---- garbage -----------------------------------------------------------------------------------


async def test_garbage_is_terminated_and_the_binder_keeps_working(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state)
    request = await reserve_pod(state, "web")
    async with BinderService(settings, options()) as binder:
        await send(js, b"\x00 not json")
        await send(js, b'{"uid": 42}')
        await send(js, encode(BindRequest(uid="u", key="no-slash", profile=PROFILE, node="n", manifest=b"{}")))
        await send(js, request)

        async def bound() -> None:
            pod = await state.get_pod(request.uid)
            assert pod is not None and pod.phase is PodPhase.BOUND
            await all_handled(js)

        await eventually(bound)
        rejected = binder.metrics.rejected_messages.labels(subject=BIND_ALL)._value.get()  # the stream's filter
        assert rejected == 3
        assert binder.state is ServiceState.RUNNING
    assert await check_invariants(state) == []


def test_bind_results_are_the_metric_labels() -> None:
    assert {str(r) for r in BindResult} == {"bound", "abandoned", "deleted", "conflict", "handed_back", "retry"}


def test_options_and_command_line() -> None:
    from kubus.binder.__main__ import parse_args

    args = parse_args(["--permit-timeout", "5", "--max-failures", "3", "--nats", "nats://x:4222"])
    assert (args.permit_timeout, args.max_failures, args.batch, args.nats) == (5.0, 3, 64, "nats://x:4222")
    with pytest.raises(ValueError, match="permit_timeout"):
        BinderOptions(permit_timeout=0)
    with pytest.raises(ValueError, match="max_failures"):
        BinderOptions(max_failures=0)


def _assert(condition: bool) -> None:
    assert condition


# ---- batches -----------------------------------------------------------------------------------


class PickyGate:
    """WaitOnPermit per pod name: rejects those in `reject`, holds those in `hold` until
    `release` is set, lets the rest through at once."""

    def __init__(self, reject: set[str], hold: set[str]) -> None:
        self.reject, self.hold = reject, hold
        self.release = asyncio.Event()

    async def wait_on_permit(self, request: BindRequest) -> Status:
        name = request.key.split("/", 1)[1]
        if name in self.hold:
            await self.release.wait()
        if name in self.reject:
            return Status.unschedulable("gang incomplete")
        return Status.success()


async def test_a_batch_binds_the_good_ones_and_gives_back_the_bad_ones(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state, cpu="16")
    good = [await reserve_pod(state, f"good{i}") for i in range(4)]
    rejected = await reserve_pod(state, "rejected")  # Permit says no: unreserved and handed back
    slow = await reserve_pod(state, "slow")  # Permit waits: the rest must not wait for it
    deleted = await reserve_pod(state, "deleted")
    assert (await state.transition(deleted.uid, PodPhase.DELETED)).ok
    moved = await reserve_pod(state, "moved")  # the pod moved on: this attempt's room released
    assert (await state.transition(moved.uid, PodPhase.RESERVED, node="node-a", expected_version=moved.attempt)).ok
    stale = await reserve_pod(state, "stale")  # the janitor gave this attempt up
    assert str(await state.unreserve("node-a", stale.uid, stale.attempt)) == "OK"
    assert (await state.transition(stale.uid, PodPhase.PENDING, expected_version=stale.attempt)).ok
    batch = [good[0], rejected, good[1], slow, deleted, good[2], moved, stale, good[3]]
    await ensure_streams(js)
    for request in batch:  # all in the stream before the binder starts: one fetch takes them all
        await send(js, request)

    gate = PickyGate(reject={"rejected"}, hold={"slow"})
    async with BinderService(settings, options(), permit=gate) as binder:

        async def others_done() -> None:
            assert results(binder) == {
                "bound": 4.0,
                "handed_back": 1.0,
                "deleted": 1.0,
                "conflict": 1.0,
                "abandoned": 1.0,
            }

        await eventually(others_done)
        pods = {p.uid: p for p in await state.get_pods(r.uid for r in batch) if p}
        assert all(pods[r.uid].phase is PodPhase.BOUND and pods[r.uid].bindings == 1 for r in good)
        assert pods[slow.uid].phase is PodPhase.RESERVED  # still waiting on Permit
        gate.release.set()
        await eventually(lambda: handled(js, binder, {
            "bound": 5.0, "handed_back": 1.0, "deleted": 1.0, "conflict": 1.0, "abandoned": 1.0
        }))  # fmt: skip

    pods = {p.uid: p for p in await state.get_pods(r.uid for r in batch) if p}
    for request in [*good, slow]:
        assert pods[request.uid].phase is PodPhase.BOUND and pods[request.uid].bindings == 1
        r = await state.reservation("node-a", request.uid)
        assert r is not None and r.state is ReservationState.BOUND
        assert [e.reason for e in await state.events(request.uid)] == ["Scheduled"]
    for request in (rejected, deleted, moved, stale):
        assert pods[request.uid].bindings == 0
        assert await state.reservation("node-a", request.uid) is None
    assert pods[deleted.uid].phase is PodPhase.DELETED
    assert (pods[moved.uid].phase, pods[moved.uid].version) == (PodPhase.RESERVED, moved.attempt + 1)
    usage = await state.node_usage("node-a")
    assert usage is not None and usage.pods == 5
    assert await messages(js, NODES_STREAM.name) == 5
    assert sorted(await announced_bound(js)) == sorted(r.uid for r in [*good, slow])
    assert await messages(js, EVENTS_STREAM.name, "kubus.events.pod.unreserved.>") == 3  # rejected, deleted, moved
    (outcome,) = (await requeued(js)).outcomes  # only the rejected one goes back to the queue
    assert (outcome.uid, outcome.kind, outcome.attempt) == (rejected.uid, OutcomeKind.BIND_FAILED, rejected.attempt)
    assert await messages(js, PODS_STREAM.name, PODS_REQUEUE) == 1
    assert (await state.transition(rejected.uid, PodPhase.PENDING, expected_version=rejected.attempt)).ok
    # (the newer attempt of `moved` never reserved: what the janitor would do)
    assert (await state.transition(moved.uid, PodPhase.PENDING, expected_version=moved.attempt + 1)).ok
    assert await check_invariants(state) == []


async def test_a_redelivered_batch_binds_nothing_twice(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    from kubus.store.cluster_state import Binding

    await add_node(state, cpu="16")
    requests = [await reserve_pod(state, f"p{i}") for i in range(6)]
    # A binder died after its Bind step for the first three, before telling anyone or acking.
    done = await state.bind_many([Binding(r.uid, r.node, r.attempt, r.gpu_devices, r.profile) for r in requests[:3]])
    assert [r.write and r.write.code for r in done] == ["OK"] * 3
    await ensure_streams(js)
    for request in requests:  # the redelivery, in one batch, each twice
        await send(js, request, times=2)
    async with BinderService(settings, options()) as binder:
        await eventually(lambda: handled(js, binder, {"bound": 12.0}))
        for request in requests:  # and the whole batch once more
            await send(js, request)
        await eventually(lambda: handled(js, binder, {"bound": 18.0}))
    for pod in await state.get_pods(r.uid for r in requests):
        assert pod is not None and pod.phase is PodPhase.BOUND and pod.bindings == 1
    usage = await state.node_usage("node-a")
    assert usage is not None and usage.pods == 6
    assert await messages(js, NODES_STREAM.name) == 6  # every node told, once
    assert set(await announced_bound(js)) == {r.uid for r in requests}
    for request in requests[3:]:
        assert [e.reason for e in await state.events(request.uid)] == ["Scheduled"]
    sli = binder.metrics.pod_scheduling_sli_duration.collect()[0]
    assert [s.value for s in sli.samples if s.name.endswith("_count")] == [3.0]  # bound now: 3 of 6
    assert await check_invariants(state) == []


class OneUnluckyBinder(BinderService):
    """Telling anyone about pod `p1` fails once (its node's stream briefly away); the rest of
    its batch goes out."""

    failed = False

    async def _publish(self, publications: Sequence[Publication]) -> list[PubAck | Exception]:
        ok = [p for p in publications if self.failed or "/uid-p1/" not in p.msg_id]
        acks = iter(await super()._publish(ok))
        out: list[PubAck | Exception] = []
        for p in publications:
            if p in ok:
                out.append(next(acks))
            else:
                self.failed = True
                out.append(ConnectionError("stream away"))
        return out


async def test_a_failed_announcement_retries_that_pod_alone(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    await add_node(state, cpu="16")
    requests = [await reserve_pod(state, f"p{i}") for i in range(4)]
    await ensure_streams(js)
    for request in requests:
        await send(js, request)
    async with OneUnluckyBinder(settings, options()) as binder:
        await eventually(lambda: handled(js, binder, {"bound": 4.0, "retry": 1.0}))
    for pod in await state.get_pods(r.uid for r in requests):
        assert pod is not None and pod.phase is PodPhase.BOUND and pod.bindings == 1
    assert await messages(js, NODES_STREAM.name) == 4
    assert await check_invariants(state) == []
