"""The scheduling cycle against real NATS and Redis: popped pods reserved and handed to the
binders, kube's messages for unschedulable pods, two profiles racing for the same nodes without
overcommit, leadership (takeover, no publish after losing the lease), and a node table kept fresh
by cluster events and resyncs.

The queue's side of pop/done is answered here by `FakeQueue`, a small responder on the real
subjects (the queue service is another service; this is a real NATS exchange, not a mock).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_node, parse_pod
from kubus.bus import (
    BIND_STREAM,
    RESERVED_ALL,
    EventKind,
    announcements,
    bind,
    event_subject,
    queue_done,
    queue_pop,
    queue_serving,
    settle,
)
from kubus.bus.messages import (
    ERROR_HEADER,
    BatchedPod,
    BindRequest,
    ClusterEvent,
    NodeChange,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodChange,
    PopReply,
    PopRequest,
    QueuedPod,
    ReservedPods,
    decode,
    encode,
)
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.cycle import CycleOptions, CycleService
from kubus.cycle.nodes import Loaded, NodeTableKeeper, ResyncPace
from kubus.cycle.permits import Permits
from kubus.framework.config import load_config
from kubus.framework.runtime import Framework
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import in_tree_registry
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, check_invariants, cycle_lease

PROFILE = "default-scheduler"
CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GPUFit}]
- schedulerName: alpha
- schedulerName: beta
- schedulerName: no-pod-affinity
  plugins:
    multiPoint:
      disabled: [{name: InterPodAffinity}]
"""
# The tests hand a lease over at once (stolen, released), never by lapsing, so its ttl is long: a
# test process that stalls past a 1 s ttl (a busy CI machine) would depose its leader mid-test.
FAST = CycleOptions(
    lease_ttl=30.0, renew_interval=0.1, pop_wait_ms=50, request_timeout=1.0, done_attempts=3, backend="numpy"
)
_ids = itertools.count()


# ---- building blocks ---------------------------------------------------------------------------


def framework(profile: str = PROFILE) -> Framework:
    registry = in_tree_registry()
    return Framework.from_profile(load_config(CONFIG, registry=registry).profile(profile), registry)


def cycle(
    settings: ConnectionSettings, profile: str = PROFILE, *, holder: str | None = None, **options: Any
) -> CycleService:
    return CycleService(settings, framework(profile), dataclasses.replace(FAST, **options), holder=holder)


class FakeQueue:
    """The queue's answers to one profile's pops and outcome reports, over real NATS.

    Hands out what was `offer`ed (waiting up to the pop's wait_ms for some), refuses pops from a
    fencing token older than the newest it saw (as the real queue does, unless ``fence=False``),
    and records every pop and outcome.
    """

    def __init__(self, nc: NATS, profile: str = PROFILE, *, fence: bool = True, refuse: str = "") -> None:
        self.nc = nc
        self.profile = profile
        self.fence = fence
        self.refuse = refuse
        """When set, every outcome report is refused with this reason (`ERROR_HEADER`)."""
        self.offered: list[QueuedPod] = []
        self.pops: list[PopRequest] = []
        self.handed: list[tuple[str, int, tuple[str, ...]]] = []
        """(holder, token, uids) of every pop that got pods."""
        self.reports: list[tuple[Outcome, ...]] = []
        self.outcomes: dict[str, Outcome] = {}
        """Uid -> its latest outcome."""
        self.newest_token = 0
        self.on_pop: Callable[[PopRequest], Awaitable[None]] | None = None
        """Runs before pods are handed out (a test's hook)."""
        self._offered = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> FakeQueue:
        await self.nc.subscribe(queue_pop(self.profile), cb=self._pop_concurrently)
        await self.nc.subscribe(queue_done(self.profile), cb=self._done)
        await settle(self.nc)
        return self

    def offer(self, *pods: QueuedPod) -> None:
        self.offered.extend(pods)
        self._offered.set()

    async def _pop_concurrently(self, msg: Msg) -> None:
        # Pops of two replicas must not queue behind each other's wait, as in the real queue.
        request = decode(PopRequest, msg.data)
        self.pops.append(request)
        self.newest_token = max(self.newest_token, request.fencing_token)
        task = asyncio.create_task(self._pop(msg, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pop(self, msg: Msg, request: PopRequest) -> None:
        if not self.offered:
            self._offered.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._offered.wait(), request.wait_ms / 1000)
        pods: list[QueuedPod] = []
        if self.offered and not (self.fence and request.fencing_token < self.newest_token):
            if self.on_pop is not None:
                await self.on_pop(request)
            pods, self.offered = self.offered[: request.max_pods], self.offered[request.max_pods :]
            self.handed.append((request.holder, request.fencing_token, tuple(p.uid for p in pods)))
        await msg.respond(encode(PopReply(tuple(pods))))

    async def _done(self, msg: Msg) -> None:
        outcomes = decode(Outcomes, msg.data).outcomes
        self.reports.append(outcomes)
        for outcome in outcomes:
            self.outcomes[outcome.uid] = outcome
        if self.refuse:
            await self.nc.publish(msg.reply, b"", headers={ERROR_HEADER: self.refuse})
            return
        await msg.respond(b"")

    async def decided(self, *pods: QueuedPod, timeout: float = 10.0) -> list[Outcome]:
        """Wait for the outcomes of ``pods``; return them in that order."""

        def check() -> list[Outcome]:
            missing = [p.key for p in pods if p.uid not in self.outcomes]
            assert not missing, f"no outcome yet for {missing}"
            return [self.outcomes[p.uid] for p in pods]

        return await eventually(check, timeout)


class Presence:
    """Every `ReservedPods` on kubus.reserved.*, by profile: presence notices (empty) and
    announcements."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.notices: dict[str, list[ReservedPods]] = {}

    async def start(self) -> Presence:
        await self.nc.subscribe(RESERVED_ALL, cb=self._note)
        await self.nc.flush()
        return self

    async def _note(self, msg: Msg) -> None:
        notice = decode(ReservedPods, msg.data)
        self.notices.setdefault(notice.profile, []).append(notice)

    async def past_first_intervals(self, *profiles: str) -> None:
        """Until each profile's cycle has said it is present 5 times: more than 3 presence
        intervals into leading, where it announces only if it hears another profile."""

        async def check() -> None:
            for profile in profiles:
                assert len([n for n in self.notices.get(profile, []) if not n.reservations]) >= 5, profile

        await eventually(check)


@contextlib.asynccontextmanager
async def running(*services: CycleService) -> AsyncIterator[None]:
    try:
        for service in services:
            await service.start()
        yield
    finally:
        for service in services:
            await service.stop()


async def add_node(state: ClusterState, name: str, cpu: str = "4", *, gpus: int = 0) -> None:
    meta: dict[str, Any] = {"name": name}
    if gpus:
        devices = [{"index": i, "model": "H100", "memory": "80Gi"} for i in range(gpus)]
        meta["annotations"] = {"kubus.io/gpus": codec.dumps(devices).decode()}
    doc = {"kind": "Node", "metadata": meta, "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}
    await state.put_node(parse_node(doc))


async def submit(state: ClusterState, name: str, cpu: str = "1", *, profile: str = PROFILE, gpus: int = 0) -> QueuedPod:
    """What the queue does when it accepts a pod: the record in Redis (Pending), a QueuedPod."""
    requests: dict[str, Any] = {"cpu": cpu, "memory": "256Mi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}-{next(_ids)}"},
        "spec": {
            "schedulerName": profile,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}],
        },
    }
    pod, manifest = parse_pod(doc), codec.dumps(doc)
    assert await state.put_pod(PodRecord.of(pod, manifest, now=state.clock()))
    return QueuedPod(uid=pod.metadata.uid, key=pod.key, manifest=manifest)


async def reserve_directly(state: ClusterState, queued: QueuedPod, node: str, profile: str) -> None:
    """A reservation some other scheduler made (the cycle's own steps, by hand)."""
    pod = parse_pod(codec.loads(queued.manifest))
    write = await state.transition(
        queued.uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING}, count_attempt=True
    )
    assert write.ok
    reservation = Reservation.of(PodInfo.of(pod), node, profile=profile, attempt=write.version)
    assert (await state.reserve(node, reservation)).ok


async def bind_requests(js: JetStreamContext, profile: str = PROFILE) -> list[BindRequest]:
    """Every BindRequest in KUBUS_BIND for ``profile`` (read by sequence; nothing is consumed)."""
    info = await js.stream_info(BIND_STREAM.name)
    out = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        with contextlib.suppress(Exception):  # a gap: nothing stored under that sequence
            msg = await js.get_msg(BIND_STREAM.name, seq)
            if msg.subject == bind(profile):
                out.append(decode(BindRequest, msg.data))
    return out


async def publish_event(js: JetStreamContext, kind: EventKind, name: str, *, node: str = "", uid: str = "") -> None:
    data = PodChange(uid) if kind.value.startswith("pod.") else NodeChange(1)
    event = ClusterEvent(kind=kind.value, name=name, node=node, data=data)
    await js.publish(event_subject(kind, name), encode(event))


async def loaded(service: CycleService, nodes: int) -> None:
    async def check() -> None:
        assert service.leading, "not leading yet"
        assert service.table is not None and len(service.table) == nodes

    await eventually(check)


def sample(service: CycleService, name: str, **labels: str) -> float:
    return service.metrics.registry.get_sample_value(name, labels) or 0.0


# ---- scheduling --------------------------------------------------------------------------------


async def test_popped_pods_are_reserved_handed_to_the_binders_and_reported(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "cpu-1", "4")
    await add_node(state, "gpu-1", "8", gpus=2)
    queue = await FakeQueue(nats).start()
    pods = [await submit(state, f"web-{i}") for i in range(3)] + [await submit(state, "train", gpus=1)]
    service = cycle(settings)
    async with running(service):
        await loaded(service, 2)
        token = service.fencing_token
        queue.offer(*pods)
        outcomes = await queue.decided(*pods)

        assert [o.kind for o in outcomes] == [OutcomeKind.RESERVED] * 4, outcomes
        assert outcomes[3].node == "gpu-1" and len(outcomes[3].gpu_devices) == 1
        requests = {r.uid: r for r in await bind_requests(js)}
        assert set(requests) == {p.uid for p in pods}
        for queued, outcome in zip(pods, outcomes, strict=True):
            record = await state.get_pod(queued.uid)
            assert record is not None and record.phase is PodPhase.RESERVED and record.node == outcome.node
            reservation = await state.reservation(outcome.node, queued.uid)
            assert reservation is not None
            assert (reservation.attempt, reservation.token, reservation.profile) == (
                record.version,
                token,
                PROFILE,
            )
            assert reservation.gpu_devices == outcome.gpu_devices
            request = requests[queued.uid]
            assert (request.node, request.attempt, request.fencing_token) == (outcome.node, record.version, token)
            assert outcome.attempt == record.version
            assert (request.key, request.manifest, request.gpu_devices) == (
                queued.key,
                queued.manifest,
                outcome.gpu_devices,
            )
        usage = [await state.node_usage(n) for n in ("cpu-1", "gpu-1")]
        assert sum(u.requested.get("cpu", 0) for u in usage if u) == 4000
        assert await check_invariants(state) == []
        assert all(p.holder == service.holder and p.fencing_token == token for p in queue.pops)
        assert sample(service, "scheduler_schedule_attempts_total", result="scheduled", profile=PROFILE) == 4
        e2e = "scheduler_e2e_scheduling_duration_seconds_count"
        assert sample(service, e2e, result="scheduled", profile=PROFILE) == 4
        service.metrics.refresh()  # the cache size is sampled at scrape time
        assert sample(service, "scheduler_cache_size", type="nodes") == 2
        assert sample(service, "scheduler_cache_size", type="pods") == 4
        assert sample(service, "scheduler_cache_size", type="assumed_pods") == 4  # reserved, none bound yet


async def test_the_next_pop_goes_out_before_the_batch_in_hand_is_reported(
    settings: ConnectionSettings, state: ClusterState, nats: NATS
) -> None:
    await add_node(state, "cpu-1", "8")
    queue = await FakeQueue(nats).start()
    order: list[str] = []

    async def note(msg: Msg) -> None:
        order.append("pop" if msg.subject == queue_pop(PROFILE) else "done")

    await nats.subscribe(queue_pop(PROFILE), cb=note)
    await nats.subscribe(queue_done(PROFILE), cb=note)
    await settle(nats)
    pods = [await submit(state, f"web-{i}") for i in range(4)]
    service = cycle(settings, batch_size=2)
    async with running(service):
        await loaded(service, 1)
        queue.offer(*pods)
        outcomes = await queue.decided(*pods)
    assert [o.kind for o in outcomes] == [OutcomeKind.RESERVED] * 4
    assert [p for _, _, p in queue.handed] == [tuple(p.uid for p in pods[:2]), tuple(p.uid for p in pods[2:])]
    # the second batch was asked for while the first was being decided: the queue's answer is off the path
    assert order.index("done") > [i for i, what in enumerate(order) if what == "pop"][1], order


async def test_a_stopping_cycle_schedules_the_pods_it_popped_ahead(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "cpu-1", "8")
    queue = await FakeQueue(nats).start()
    pods = [await submit(state, f"web-{i}") for i in range(4)]
    service = cycle(settings, batch_size=2)
    stopping: list[asyncio.Task[None]] = []

    async def stop_while_the_first_batch_is_decided(request: PopRequest) -> None:
        if len(queue.pops) == 2:  # the pop ahead: the service is told to stop, then it gets pods
            stopping.append(asyncio.create_task(service.stop()))
            await asyncio.sleep(0.3)

    def told_to_stop() -> None:
        assert stopping, "no pop ahead yet"

    queue.on_pop = stop_while_the_first_batch_is_decided
    await service.start()
    try:
        await loaded(service, 1)
        queue.offer(*pods)
        await eventually(told_to_stop)
        await asyncio.wait_for(stopping[0], 10)
    finally:
        await service.stop()
    assert len(queue.handed) == 2
    outcomes = [queue.outcomes.get(p.uid) for p in pods]
    assert [o.kind if o else None for o in outcomes] == [OutcomeKind.RESERVED] * 4, "left in flight at the queue"
    assert {r.uid for r in await bind_requests(js)} == {p.uid for p in pods}
    assert await check_invariants(state) == []


async def test_a_batch_failing_after_its_pods_were_reserved_still_hands_them_over(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add_node(state, "cpu-1", "8")
    queue = await FakeQueue(nats).start()
    pods = [await submit(state, f"web-{i}") for i in range(2)]
    service = cycle(settings)

    async def fail(permits: Permits) -> None:
        raise RuntimeError("the last step of the batch failed")

    # the batch's last step (writing Permit decisions) fails after both pods were reserved
    monkeypatch.setattr(Permits, "sees_waiting_pods", property(lambda self: True))
    monkeypatch.setattr(Permits, "apply_decisions", fail)
    async with running(service):
        await loaded(service, 1)
        queue.offer(*pods)
        outcomes = await queue.decided(*pods)
    assert [o.kind for o in outcomes] == [OutcomeKind.RESERVED] * 2, outcomes
    assert {r.uid for r in await bind_requests(js)} == {p.uid for p in pods}
    assert await check_invariants(state) == []


async def test_unschedulable_pods_get_kubes_message_and_bad_ones_an_error(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "small-1", "2")
    await add_node(state, "small-2", "2")
    queue = await FakeQueue(nats).start()
    huge = await submit(state, "huge", "16")
    fits = await submit(state, "fits", "1")
    gone = await submit(state, "gone", "1")
    assert (await state.transition(gone.uid, PodPhase.DELETED)).ok  # deleted while queued
    broken = QueuedPod(uid="uid-broken", key="default/broken", manifest=b'{"kind": "Pod", "metadata": {}}')
    service = cycle(settings)
    async with running(service):
        await loaded(service, 2)
        queue.offer(huge, broken, gone, fits)
        unschedulable, error, skipped, reserved = await queue.decided(huge, broken, gone, fits)

        assert unschedulable.kind is OutcomeKind.UNSCHEDULABLE
        assert unschedulable.message == (  # kube's FitError, with DefaultPreemption's PostFilter message
            "0/2 nodes are available: 2 Insufficient cpu. "
            "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.."
        )
        assert unschedulable.plugins == ("NodeResourcesFit",)
        assert error.kind is OutcomeKind.ERROR and "metadata.name" in error.message and "\n" not in error.message
        assert reserved.kind is OutcomeKind.RESERVED
        # The deleted pod is not this cycle's to schedule: no reservation, no request.
        assert skipped.kind is OutcomeKind.ERROR and "Deleted" in skipped.message, skipped
        assert len(queue.reports) == 1
        assert [await state.reservation(n, gone.uid) for n in ("small-1", "small-2")] == [None, None]
        assert {r.uid for r in await bind_requests(js)} == {fits.uid}
        record = await state.get_pod(huge.uid)
        assert record is not None and record.phase is PodPhase.PENDING and record.attempts == 0
        assert await check_invariants(state) == []
        assert sample(service, "scheduler_schedule_attempts_total", result="unschedulable", profile=PROFILE) == 1
        assert sample(service, "scheduler_schedule_attempts_total", result="error", profile=PROFILE) == 1


async def test_a_pod_redis_refuses_twice_is_reported_refused_with_the_node_and_why(
    settings: ConnectionSettings, state: ClusterState, nats: NATS
) -> None:
    """Redis keeps an existing pod's required hostname anti-affinity whatever the profile: one
    without InterPodAffinity places the pod there, and reading the node again does not change
    its mind. Refused in both rounds of the batch, the pod is REFUSED, not UNSCHEDULABLE (the
    queue retries it at once, a few times: `SchedulingQueue.retry_refused`)."""
    profile = "no-pod-affinity"
    await add_node(state, "n1", "4")
    guard_doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "guard", "namespace": "default", "uid": "uid-guard"},
        "spec": {
            "schedulerName": PROFILE,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]
                }
            },
        },
    }
    guard = parse_pod(guard_doc)
    assert await state.put_pod(PodRecord.of(guard, codec.dumps(guard_doc), now=state.clock()))
    await reserve_directly(
        state, QueuedPod(uid="uid-guard", key=guard.key, manifest=codec.dumps(guard_doc)), "n1", PROFILE
    )
    web_doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "labels": {"app": "web"}},
        "spec": {
            "schedulerName": profile,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    web = parse_pod(web_doc)
    assert await state.put_pod(PodRecord.of(web, codec.dumps(web_doc), now=state.clock()))
    queue = await FakeQueue(nats, profile).start()
    service = cycle(settings, profile)
    async with running(service):
        await loaded(service, 1)
        queue.offer(QueuedPod(uid="uid-web", key=web.key, manifest=codec.dumps(web_doc)))
        [outcome] = await queue.decided(QueuedPod(uid="uid-web", key=web.key, manifest=b""))

        assert (outcome.kind, outcome.node) == (OutcomeKind.REFUSED, "n1")
        assert outcome.message.startswith("reservation on node n1 refused by Redis: ")
        assert "anti-affinity" in outcome.message
        assert sample(service, "kubus_reserve_conflicts_total", profile=profile) == 2
        record = await state.get_pod("uid-web")
        assert record is not None and (record.phase, record.attempts) == (PodPhase.PENDING, 0)
        assert await state.reservation("n1", "uid-web") is None
        assert await check_invariants(state) == []


async def test_outcomes_the_queue_refuses_are_said_once_not_retried(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue that cannot read the report (an older queue, an outcome kind it does not know)
    answers with ERROR_HEADER: the cycle says so, once, and leaves the pods to the queue's
    in-flight deadline; resending the same report would be refused again."""
    await add_node(state, "n1", "4")
    queue = await FakeQueue(nats, refuse="bad outcomes: kind: 'refused' is not one of ...").start()
    pod = await submit(state, "web")
    caplog.set_level(logging.WARNING, logger="kubus.cycle")
    async with running(cycle(settings)):
        queue.offer(pod)
        await queue.decided(pod)

        async def said() -> None:
            refused = [r for r in caplog.records if "outcomes refused by the queue" in r.getMessage()]
            assert len(refused) == 1 and "is not one of" in refused[0].getMessage()

        await eventually(said)
        await asyncio.sleep(0.3)  # what a retry would have taken
        assert len(queue.reports) == 1
        assert not [r for r in caplog.records if "outcome report failed" in r.getMessage()]


async def test_two_profiles_racing_for_nearly_full_nodes_never_overcommit(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    for i in range(4):
        await add_node(state, f"node-{i}", "4")
        await reserve_directly(state, await submit(state, f"resident-{i}", "2"), f"node-{i}", PROFILE)
    alpha, beta = cycle(settings, "alpha"), cycle(settings, "beta")
    queues = {"alpha": await FakeQueue(nats, "alpha").start(), "beta": await FakeQueue(nats, "beta").start()}
    # 8 free CPUs, 12 pods asking for one each: each cycle's table says its 6 fit.
    pods = {p: [await submit(state, f"{p}-{i}", profile=p) for i in range(6)] for p in queues}
    async with running(alpha, beta):
        await loaded(alpha, 4)
        await loaded(beta, 4)
        queues["alpha"].offer(*pods["alpha"])
        queues["beta"].offer(*pods["beta"])
        outcomes = [o for p, q in queues.items() for o in await q.decided(*pods[p])]

        assert await check_invariants(state) == []
        reserved = [o for o in outcomes if o.kind is OutcomeKind.RESERVED]
        usage = [await state.node_usage(f"node-{i}") for i in range(4)]
        assert all(u is not None and u.requested.get("cpu", 0) <= 4000 for u in usage)
        assert len(reserved) == sum(u.pods for u in usage if u) - 4 <= 8
        # Refused twice in the batch (REFUSED): the queue retries it; no node left (UNSCHEDULABLE).
        assert {o.kind for o in outcomes} <= {OutcomeKind.RESERVED, OutcomeKind.UNSCHEDULABLE, OutcomeKind.REFUSED}
        assert all(o.node and "refused by Redis" in o.message for o in outcomes if o.kind is OutcomeKind.REFUSED)
        conflicts = sum(sample(c, "kubus_reserve_conflicts_total", profile=c.profile) for c in (alpha, beta))
        assert conflicts >= 1
        for profile, service in (("alpha", alpha), ("beta", beta)):
            requests = await bind_requests(js, profile)
            assert sorted(r.uid for r in requests) == sorted(
                o.uid for o in outcomes if o.kind is OutcomeKind.RESERVED and o.uid.startswith(f"uid-{profile}")
            )
            assert {r.fencing_token for r in requests} <= {service.fencing_token}


async def test_a_cycle_takes_in_another_profiles_reservations_before_they_are_bound(
    settings: ConnectionSettings, state: ClusterState, nats: NATS
) -> None:
    """No binder runs here, so no pod.bound event ever comes: only alpha's announcement can
    tell beta that the node is full. Beta then finds no room itself, instead of having Redis
    refuse its reservation. Past their first presence intervals, alpha announces because it
    hears beta's presence."""
    await add_node(state, "only", "2")
    presence = await Presence(nats).start()
    # A cycle says it is present between two pops (here up to 50 ms of wait, 20 ms of pace):
    # alpha hears beta for 3 intervals, which must outlast a loop of beta's even on a busy
    # machine (at 0.05 s, a 150 ms stall of beta's loop left alpha announcing to nobody in CI).
    alpha, beta = cycle(settings, "alpha", presence_interval=0.2), cycle(settings, "beta", presence_interval=0.2)
    queues = {"alpha": await FakeQueue(nats, "alpha").start(), "beta": await FakeQueue(nats, "beta").start()}
    first, second = (
        await submit(state, "first", "2", profile="alpha"),
        await submit(state, "second", "2", profile="beta"),
    )
    async with running(alpha, beta):
        await loaded(alpha, 1)
        await loaded(beta, 1)
        await presence.past_first_intervals("alpha", "beta")
        queues["alpha"].offer(first)
        [outcome] = await queues["alpha"].decided(first)
        assert outcome.kind is OutcomeKind.RESERVED

        async def known() -> None:
            assert beta.table is not None and first.key in beta.table.node_info("only").pods

        await eventually(known)
        assert beta.table is not None and beta.table.node_info("only").requested["cpu"] == 2000
        queues["beta"].offer(second)
        [outcome] = await queues["beta"].decided(second)
        assert outcome.kind is OutcomeKind.UNSCHEDULABLE
        assert outcome.message.startswith("0/1 nodes are available: 1 Insufficient cpu."), outcome.message
        assert sample(beta, "kubus_reserve_conflicts_total", profile="beta") == 0
    assert await check_invariants(state) == []


async def test_a_cycle_alone_stops_announcing_after_its_first_presence_intervals(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "only", "4")
    presence = await Presence(nats).start()
    queue = await FakeQueue(nats).start()
    service = cycle(settings, presence_interval=0.05)
    async with running(service):
        await loaded(service, 1)
        await presence.past_first_intervals(PROFILE)
        pod = await submit(state, "alone")
        queue.offer(pod)
        [outcome] = await queue.decided(pod)
        assert outcome.kind is OutcomeKind.RESERVED
        assert [r.uid for r in await bind_requests(js)] == [pod.uid]
        await nats.flush()  # an announcement would have been sent before the BindRequest
        assert presence.notices[PROFILE] and not any(n.reservations for n in presence.notices[PROFILE])


async def test_redis_gives_other_free_devices_when_the_picked_ones_were_taken(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    """Another scheduler takes GPU 0 behind the cycle's back (no event, no announcement): the
    cycle picks GPU 0, and RESERVE gives it GPU 1 instead of refusing; the BindRequest, the
    outcome and the table all say GPU 1."""
    await add_node(state, "gpu-1", "8", gpus=2)
    queue = await FakeQueue(nats).start()
    service = cycle(settings)
    async with running(service):
        await loaded(service, 1)
        other = await submit(state, "other", gpus=1, profile="alpha")
        write = await state.transition(
            other.uid, PodPhase.RESERVED, node="gpu-1", expected_phases={PodPhase.PENDING}, count_attempt=True
        )
        taken = PodInfo.of(parse_pod(codec.loads(other.manifest))).placed_on((0,))
        assert (await state.reserve("gpu-1", Reservation.of(taken, "gpu-1", attempt=write.version))).ok
        train = await submit(state, "train", gpus=1)
        queue.offer(train)
        [outcome] = await queue.decided(train)
        assert outcome.kind is OutcomeKind.RESERVED and outcome.gpu_devices == (1,)
        [request] = await bind_requests(js)
        assert request.gpu_devices == (1,)
        held = await state.reservation("gpu-1", train.uid)
        assert held is not None and held.gpu_devices == (1,)
        assert service.table is not None
        assert service.table.node_info("gpu-1").pods[train.key].gpu_devices == (1,)
        assert sample(service, "kubus_reserve_device_repicks_total", profile=PROFILE) == 1
        assert sample(service, "kubus_reserve_conflicts_total", profile=PROFILE) == 0


# ---- leadership --------------------------------------------------------------------------------


async def steal_lease(state: ClusterState, profile: str, thief: str = "thief") -> int:
    """Take the profile's lease away from its holder at once, as a lapse followed by a new holder
    does: one transaction, so the holder cannot renew in between."""
    name = cycle_lease(profile)
    keys = [state.keys.lease_holder(name), state.keys.lease_fence(name)]
    pipe = state.redis.pipeline(transaction=True)
    pipe.delete(keys[0])
    await state.scripts.acquire_lease(keys=keys, args=[thief, 1000], client=pipe)
    _, token = await pipe.execute()
    assert token is not None
    return int(token)


async def test_a_standby_takes_over_and_the_old_leader_stops_popping(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "node-a", "8")
    queue = await FakeQueue(nats).start()
    first, second = cycle(settings, holder="first"), cycle(settings, holder="second")
    async with running(first):
        await loaded(first, 1)
        async with running(second):
            assert not second.leading
            early = await submit(state, "early")
            queue.offer(early)
            [outcome] = await queue.decided(early)
            assert outcome.kind is OutcomeKind.RESERVED
            old_token = first.fencing_token
            assert old_token is not None

            # The leader loses its lease (a lapse): the standby takes it, the old one notices.
            await steal_lease(state, PROFILE, thief="second")
            await loaded(second, 1)

            async def deposed() -> None:
                assert not first.leading

            await eventually(deposed)
            new_token = second.fencing_token
            assert new_token is not None and new_token > old_token

            async def second_pops() -> None:
                assert any(p.holder == "second" for p in queue.pops)

            await eventually(second_pops)
            handed_to_first = len([h for h in queue.handed if h[0] == "first"])
            late = [await submit(state, f"late-{i}") for i in range(3)]
            queue.offer(*late)
            assert {o.kind for o in await queue.decided(*late)} == {OutcomeKind.RESERVED}
            assert len([h for h in queue.handed if h[0] == "first"]) == handed_to_first
            tokens = {r.uid: r.fencing_token for r in await bind_requests(js)}
            assert tokens == {early.uid: old_token, **{p.uid: new_token for p in late}}
            assert not first.leading

        # The leader stops cleanly and gives the lease up: the standby takes over at once.
        await loaded(first, 1)
        assert first.fencing_token is not None and first.fencing_token > new_token
        last = await submit(state, "last")
        queue.offer(last)
        [outcome] = await queue.decided(last)
        assert outcome.kind is OutcomeKind.RESERVED
        assert {r.uid: r.fencing_token for r in await bind_requests(js)}[last.uid] == first.fencing_token
    assert await check_invariants(state) == []


async def test_a_warm_standby_follows_the_nodes_and_takes_over_without_loading_its_table(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standby loads its table at start and follows node changes while it waits; on taking
    the lease it reads only the rows changed since (no full load), and schedules at once. A
    cold standby (warm_standby=False) loads its table on taking the lease instead."""
    await add_node(state, "node-a", "2")
    queue = await FakeQueue(nats).start()
    first, second = cycle(settings, holder="first"), cycle(settings, holder="second")
    cold = cycle(settings, holder="cold", warm_standby=False)
    loads: dict[str, int] = {}  # full loads of the node table, by the replica's holder
    load = NodeTableKeeper.load

    async def counted(nodes: NodeTableKeeper) -> Loaded:
        holder = nodes.leadership.holder
        loads[holder] = loads.get(holder, 0) + 1
        return await load(nodes)

    monkeypatch.setattr(NodeTableKeeper, "load", counted)
    async with running(first, second, cold):
        await loaded(first, 1)

        async def standby_has(nodes: set[str]) -> None:
            assert not second.leading and second.table is not None
            assert set(second.table.row_of) == nodes

        await eventually(lambda: standby_has({"node-a"}))
        assert cold.table is None  # waits without a table
        # A node added while it waits: its event makes the standby read its row.
        await add_node(state, "node-b", "8")
        await publish_event(js, EventKind.NODE_ADDED, "node-b")
        await eventually(lambda: standby_has({"node-a", "node-b"}))
        # A pod the leader placed: its bind, announced as a binder does (pods.bound, with another
        # pod's of a node it does not have), makes the standby read that row again.
        placed = await submit(state, "placed", "2")
        queue.offer(placed)
        [outcome] = await queue.decided(placed)
        assert outcome.kind is OutcomeKind.RESERVED
        await state.mark_bound(outcome.node, placed.uid, outcome.attempt)  # as a binder does
        assert (await state.bind_pod(placed.uid, outcome.node, (), expected_version=outcome.attempt)).ok
        bound = [BatchedPod("default/elsewhere", "uid-elsewhere", "node-z", 1, PROFILE),
                 BatchedPod(placed.key, placed.uid, outcome.node, outcome.attempt, PROFILE)]  # fmt: skip
        for publication in announcements.pod_batch(EventKind.PODS_BOUND, bound, at=time.time()):
            await js.publish(publication.subject, publication.payload)

        async def standby_sees_the_placement() -> None:
            assert second.table is not None
            assert placed.key in second.table.node_info(outcome.node).pods

        await eventually(standby_sees_the_placement)
        assert loads == {"first": 1, "second": 1}

        await steal_lease(state, PROFILE, thief="second")
        await loaded(second, 2)

        async def deposed() -> None:
            # Until the old leader notices, it may still pop (this fake queue fences nothing; the
            # real one refuses its token) and report the pod as failed for its lost lease.
            assert not first.leading

        await eventually(deposed)

        async def fenced() -> None:
            # The old leader's pop made before it stepped down may still wait at the queue: once
            # the new leader has popped with its newer token, the queue answers that one empty.
            token = second.fencing_token
            assert token is not None and queue.newest_token >= token

        await eventually(fenced)
        late = await submit(state, "late", "2")
        queue.offer(late)
        [outcome] = await queue.decided(late)
        assert outcome.kind is OutcomeKind.RESERVED
        assert loads["second"] == 1, "the warm standby loaded its table again on taking over"

        await steal_lease(state, PROFILE, thief="cold")
        await loaded(cold, 2)
        assert loads["cold"] == 1
    assert await check_invariants(state) == []


async def test_a_pop_held_by_a_queue_that_died_is_asked_again_once_a_new_queue_serves(
    settings: ConnectionSettings, state: ClusterState, nats: NATS
) -> None:
    """A queue killed while it holds a pop never answers it; the standby that takes over says it
    serves (`queue_serving`), and the cycle asks it at once instead of waiting out its timeout."""
    await add_node(state, "node-a", "2")
    pops: list[float] = []

    async def dead_queue(msg: Msg) -> None:
        pops.append(time.monotonic())  # held, never answered: the queue died holding it

    await nats.subscribe(queue_pop(PROFILE), cb=dead_queue)
    await settle(nats)
    service = cycle(settings, request_timeout=4.0)
    async with running(service):

        async def popped(count: int) -> None:
            assert len(pops) >= count

        await eventually(lambda: popped(1))
        held = len(pops)
        said_at = time.monotonic()
        await nats.publish(queue_serving(PROFILE), b"")
        await eventually(lambda: popped(held + 1), timeout=5.0)
        assert pops[held] - said_at < 2.0, "the cycle waited on the dead queue's pop"


async def test_a_pop_given_up_for_a_new_queue_that_then_answers_it_brings_its_pods(
    settings: ConnectionSettings, state: ClusterState, nats: NATS
) -> None:
    """The pop given up when a queue says it serves may have reached that very queue, which
    holds it until pods come and answers it with pods now in flight to this cycle: they are
    scheduled, not left until the queue's in-flight deadline (30 s) hands them out again."""
    await add_node(state, "node-a", "2")
    pod = await submit(state, "answered-late")
    queue = FakeQueue(nats)  # its outcome reports only: the pops are answered here
    held: list[Msg] = []
    later: list[Msg] = []

    async def pops(msg: Msg) -> None:
        if not held:
            held.append(msg)  # held until the test answers it
            return
        later.append(msg)
        await msg.respond(encode(PopReply(())))

    await nats.subscribe(queue_pop(PROFILE), cb=pops)
    await nats.subscribe(queue_done(PROFILE), cb=queue._done)
    await settle(nats)
    service = cycle(settings, request_timeout=4.0)
    def popped(messages: list[Msg]) -> None:
        assert messages

    async with running(service):
        await eventually(lambda: popped(held))
        await nats.publish(queue_serving(PROFILE), b"")
        await eventually(lambda: popped(later))  # the cycle gave the held pop up and popped again
        await held[0].respond(encode(PopReply((pod,))))
        [outcome] = await queue.decided(pod, timeout=5.0)
        assert outcome.kind is OutcomeKind.RESERVED and outcome.node == "node-a"


async def test_a_leader_that_lost_its_lease_after_reserving_gives_the_room_back_and_publishes_nothing(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "node-a", "8")
    queue = await FakeQueue(nats).start()
    service = cycle(settings)
    async with running(service):
        await loaded(service, 1)
        assert service.running is not None
        store = service.running.store
        reserve_attempts = store.reserve_attempts
        stolen = asyncio.Event()

        async def reserve_then_lose_the_lease(profile: str, reservations: list[Reservation]) -> Any:
            answer = await reserve_attempts(profile, reservations)
            if not stolen.is_set():
                stolen.set()
                await steal_lease(state, PROFILE)

                async def deposed() -> None:
                    assert not service.leading

                await eventually(deposed)
            return answer

        store.reserve_attempts = reserve_then_lose_the_lease  # type: ignore[method-assign]
        pods = [await submit(state, f"web-{i}") for i in range(2)]
        queue.offer(*pods)
        outcomes = await queue.decided(*pods)

        assert {o.kind for o in outcomes} == {OutcomeKind.ERROR}
        assert all("lost its lease" in o.message for o in outcomes)
        assert await bind_requests(js) == []
        for queued in pods:
            record = await state.get_pod(queued.uid)
            assert record is not None and record.phase is PodPhase.PENDING
            assert await state.reservation("node-a", queued.uid) is None
        assert await check_invariants(state) == []


async def test_a_deposed_leader_does_not_schedule_what_it_popped(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "node-a", "8")
    queue = await FakeQueue(nats, fence=False).start()
    service = cycle(settings)

    async def lose_the_lease_first(request: PopRequest) -> None:
        queue.on_pop = None
        await steal_lease(state, PROFILE)

        async def deposed() -> None:
            assert not service.leading

        await eventually(deposed)

    async with running(service):
        await loaded(service, 1)
        queue.on_pop = lose_the_lease_first
        pods = [await submit(state, f"web-{i}") for i in range(2)]
        queue.offer(*pods)
        outcomes = await queue.decided(*pods)

        assert {o.kind for o in outcomes} == {OutcomeKind.ERROR}
        assert await bind_requests(js) == []
        records = await state.get_pods(p.uid for p in pods)
        assert all(r is not None and r.phase is PodPhase.PENDING and r.attempts == 0 for r in records)


# ---- the node table ----------------------------------------------------------------------------


async def test_one_event_of_several_nodes_changes_reads_each_node_again(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    """A watcher's ``nodes.changed``: every node it names is read again before the next batch,
    as its own node event would have it (added ones join the table)."""
    await add_node(state, "first", "1")
    service = cycle(settings)
    async with running(service):
        await loaded(service, 1)
        for name in ("second", "third"):
            await add_node(state, name, "2")
        changes = [(EventKind.NODE_ADDED, "second", 1), (EventKind.NODE_ADDED, "third", 1)]
        [event] = announcements.node_changes(changes, at=time.time())
        await js.publish(event.subject, event.payload)
        await loaded(service, 3)
        queue = await FakeQueue(nats).start()
        big = await submit(state, "big", "2")
        queue.offer(big)
        await eventually(lambda: _assert_kind(queue, big, OutcomeKind.RESERVED))
        assert queue.outcomes[big.uid].node in ("second", "third")


async def test_node_and_pod_events_keep_the_table_fresh(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, js: JetStreamContext
) -> None:
    await add_node(state, "small", "1")
    queue = await FakeQueue(nats).start()
    service = cycle(settings)
    async with running(service):
        await loaded(service, 1)
        big = await submit(state, "big", "2")
        queue.offer(big)
        [outcome] = await queue.decided(big)
        assert outcome.message.startswith("0/1 nodes are available: 1 Insufficient cpu. preemption: ")

        # A node added after start gets pods once its node.added event arrives.
        await add_node(state, "roomy", "2")
        await publish_event(js, EventKind.NODE_ADDED, "roomy")
        await loaded(service, 2)
        queue.offer(big)
        await eventually(lambda: _assert_kind(queue, big, OutcomeKind.RESERVED))
        assert queue.outcomes[big.uid].node == "roomy"

        # Full again; a pod finishing there (event without a node: looked up by uid) frees it.
        big2 = await submit(state, "big-2", "2")
        queue.offer(big2)
        [outcome] = await queue.decided(big2)
        assert outcome.kind is OutcomeKind.UNSCHEDULABLE
        assert (await state.transition(big.uid, PodPhase.DELETED)).ok
        await state.release("roomy", big.uid)
        await publish_event(js, EventKind.POD_FINISHED, big.key, uid=big.uid)

        async def freed() -> None:
            assert service.table is not None
            assert service.table.node_info("roomy").requested["cpu"] == 0

        await eventually(freed)
        queue.offer(big2)
        await eventually(lambda: _assert_kind(queue, big2, OutcomeKind.RESERVED))

        # A node lost: cycles treat it as tainted unreachable.
        await state.release("roomy", big2.uid)
        assert (await state.transition(big2.uid, PodPhase.DELETED)).ok
        assert await state.mark_unreachable("roomy")
        await publish_event(js, EventKind.NODE_LOST, "roomy")

        async def tainted() -> None:
            assert service.table is not None
            taints = service.table.node_info("roomy").node.spec.taints
            assert any(t.key == "node.kubernetes.io/unreachable" for t in taints)
            assert service.table.node_info("roomy").requested["cpu"] == 0

        await eventually(tainted)
        big3 = await submit(state, "big-3", "2")
        queue.offer(big3)
        [outcome] = await queue.decided(big3)
        assert outcome.kind is OutcomeKind.UNSCHEDULABLE
        assert "untolerated taint {node.kubernetes.io/unreachable: }" in outcome.message
        assert "TaintToleration" in outcome.plugins
    assert await check_invariants(state) == []


@pytest.mark.parametrize("resync_slice", [5000, 1], ids=["whole", "a node a batch"])
async def test_a_resync_heals_a_missed_event(
    settings: ConnectionSettings, state: ClusterState, nats: NATS, resync_slice: int
) -> None:
    """Also when the re-read is spread over batches (a large cluster's, here one node a batch):
    a node added or removed behind a missed event is found, one changed is read again."""
    await add_node(state, "first", "1")
    await add_node(state, "second", "1")
    await FakeQueue(nats).start()  # an idle queue: the loop comes round every pop_wait_ms
    service = cycle(settings, resync_interval=0.2, resync_slice=resync_slice)
    async with running(service):
        await loaded(service, 2)
        await add_node(state, "silent", "1")  # no node.added event
        await loaded(service, 3)
        await state.delete_node("first")
        await loaded(service, 2)
        await add_node(state, "second", "3")  # changed, no event

        async def reread() -> None:
            assert service.table is not None and service.table.node_info("second").allocatable["cpu"] == 3000

        await eventually(reread)
        assert service.table is not None and "silent" in service.table


async def test_a_resync_slice_keeps_to_its_budget_only_while_pods_wait(settings: ConnectionSettings) -> None:
    """At 50,000 nodes a slice of a re-read takes about half a second: read before every batch,
    the slices of one re-read cut the throughput to a quarter for seconds. While pods wait, the
    next slice goes once the last one's cost is resync_budget of the time since it began; while
    the cycle is idle, at once."""
    pace = ResyncPace(options=cycle(settings, resync_budget=0.25).options)  # as the node table keeper holds it
    now = asyncio.get_running_loop().time()
    pace.left = ["n1", "n2"]  # a re-read under way
    pace.next_slice = now + 60
    pace.idle = False
    assert not pace.due()
    pace.idle = True
    assert pace.due()
    pace.idle, pace.next_slice = False, now - 1
    assert pace.due()
    pace.left, pace.next_resync = [], now + 60  # none under way: the next starts when due
    assert not pace.due()


def _assert_kind(queue: FakeQueue, pod: QueuedPod, kind: OutcomeKind) -> None:
    outcome = queue.outcomes.get(pod.uid)
    assert outcome is not None and outcome.kind is kind, outcome
