"""Crash safety and robustness of the running system: `kill -9` of each service while pods flow,
and garbage on every subject. Afterwards no pod is lost or bound twice, no node is overcommitted,
and every service still runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import pytest
import redis.asyncio as aioredis
from cluster_support import StartServices, service_logs
from nats import connect as nats_connect
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from support import ServerEndpoints, eventually

from kubus.access import inbox_prefix
from kubus.bus.connection import publish_durable
from kubus.bus.messages import (
    ERROR_HEADER,
    BindRequest,
    ClusterEvent,
    NodeAssignment,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodChange,
    PodDeletion,
    PopRequest,
    encode,
)
from kubus.bus.subjects import (
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_SUBMIT,
    bind,
    event_subject,
    node_pods,
    queue_done,
    queue_pop,
)
from kubus.cli.bench import check_invariants_settled
from kubus.cli.cluster import pod_manifests, submit
from kubus.cli.up import Cluster
from kubus.cli.workload import mixed_workload
from kubus.core import codec
from kubus.store import ClusterState, PodPhase

PLACED = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED)


async def phases(state: ClusterState, uids: list[str]) -> dict[str, Any]:
    return {uid: pod for uid, pod in zip(uids, await state.get_pods(uids), strict=True)}


def alive(cluster: Cluster) -> None:
    dead = [s.name for s in cluster.group if not s.running]
    assert not dead, f"services not running: {dead}\n{service_logs(cluster)}"


@pytest.mark.slow
async def test_kill_9_each_service_while_pods_flow(
    services: StartServices, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    """queue, cycle, binder and gpu-agent are each SIGKILLed in turn while pods are submitted and
    scheduled, and started again. Every pod ends bound (or pending with its reason), none is
    lost, none bound twice, no node overcommitted."""
    cluster = await services(nodes=50)
    state = ClusterState(redis)
    manifests = pod_manifests(mixed_workload(600, seed=11, namespace="crash"))
    uids = [m.uid for m in manifests]

    async def flow() -> None:
        # A steady stream, so every kill lands while work is in flight.
        for start in range(0, len(manifests), 40):
            await submit(js, manifests[start : start + 40])
            await asyncio.sleep(0.4)

    submitting = asyncio.create_task(flow())
    kills = []
    try:
        for name in ("queue", "cycle-default-scheduler", "binder", "gpu-agent"):
            before = sum(1 for p in (await phases(state, uids)).values() if p is not None and p.phase in PLACED)

            async def progressed(before: int = before) -> None:
                placed = sum(1 for p in (await phases(state, uids)).values() if p is not None and p.phase in PLACED)
                assert placed >= min(before + 20, len(uids)), placed

            # After the cycle's kill, the pods it had Reserved without handing them to a binder wait
            # for the queue's janitor (reserve_timeout, 60 s): when they are most of what is left,
            # the next step's progress comes only then.
            await eventually(progressed, timeout=120, interval=0.2)
            service = cluster.group[name]
            service.kill()
            assert await service.wait(10) is not None, f"{name} survived SIGKILL"
            kills.append((name, time.monotonic()))
            await asyncio.sleep(0.5)  # the cluster runs without it for a moment
            service.start()
        await submitting
    finally:
        if not submitting.done():
            submitting.cancel()

    async def settled() -> None:
        pods = await phases(state, uids)
        missing = [uid for uid, p in pods.items() if p is None]
        assert not missing, f"{len(missing)} pods lost, e.g. {missing[:3]}"
        # Pending with a reason is settled when the reason waits for the cluster to change
        # (Unschedulable); a SchedulerError (an attempt that failed, e.g. a batch whose cycle lost
        # its lease while it was killed) is retried after its backoff, as kube retries errors.
        unsettled = [
            f"{p.key}: {p.phase} {p.reason}"
            for p in pods.values()
            if not (p.phase in PLACED or (p.phase is PodPhase.PENDING and p.reason and p.reason != "SchedulerError"))
        ]
        assert not unsettled, f"{len(unsettled)} pods not settled, e.g. {unsettled[:5]}"

    try:
        # A pod Reserved by the killed cycle waits for the queue's janitor (reserve_timeout, 60 s).
        await eventually(settled, timeout=180, interval=1.0)
    except AssertionError as exc:
        pytest.fail(f"{exc}\n{service_logs(cluster)}")
    pods = await phases(state, uids)
    assert all(p.bindings <= 1 for p in pods.values())
    placed = sum(1 for p in pods.values() if p.phase in PLACED)
    reasons = Counter(f"{p.phase} {p.reason}" for p in pods.values() if p.phase not in PLACED)
    if placed < len(uids) * 0.9:
        pytest.fail(f"only {placed}/{len(uids)} placed; the others: {reasons.most_common(5)}\n{service_logs(cluster)}")
    assert await check_invariants_settled(state) == []
    alive(cluster)
    assert cluster.group.failed() == []


async def test_bad_input_on_the_bus_never_stops_a_service(
    services: StartServices, redis: aioredis.Redis, nats: NATS, js: JetStreamContext
) -> None:
    cluster = await services(nodes=5)
    state = ClusterState(redis)
    profile = "default-scheduler"

    def pod(name: str, **spec: Any) -> bytes:
        body = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}], **spec}
        return codec.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})

    big_pod = codec.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "big", "annotations": {"junk": "x" * (900 * 1024)}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )
    garbage = [b"", b"\x00\xff\xfe not a manifest", b"{}", b"[1, 2, 3]", b"null", b"{not json", b"- a\n- : b: ["]
    to_streams: list[tuple[str, bytes]] = [(PODS_SUBMIT, g) for g in garbage]
    to_streams += [
        (PODS_SUBMIT, b"apiVersion: v1\nkind: Deployment\nmetadata: {name: d}\n"),  # wrong kind
        (PODS_SUBMIT, b"apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"),  # a Node, not a Pod
        (PODS_SUBMIT, pod("bad-quantity", containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}])),
        (PODS_SUBMIT, big_pod),  # under the bus limit, over the queue's manifest limit
        (PODS_SUBMIT, pod("nobody-schedules-me", schedulerName="nobody")),  # unknown profile
        (PODS_DELETE, b"garbage"),
        (PODS_DELETE, b'{"namespace": 1, "name": []}'),
        (PODS_DELETE, encode(PodDeletion(namespace="default", name="never-existed"))),
        (PODS_REQUEUE, b"garbage"),
        (PODS_REQUEUE, encode(Outcomes((Outcome(uid="no-such-uid", kind=OutcomeKind.BIND_FAILED, attempt=3),)))),
        (bind(profile), b"garbage"),
        (bind(profile), b'{"uid": 5}'),
        (bind("nobody"), b"garbage"),
        (
            bind(profile),
            encode(
                BindRequest(
                    uid="ghost",
                    key="default/ghost",
                    profile=profile,
                    node="sim-00000",
                    manifest=pod("ghost"),
                    attempt=7,
                )
            ),
        ),
        (
            bind(profile),
            encode(
                BindRequest(
                    uid="ghost2",
                    key="default/ghost2",
                    profile=profile,
                    node="no-node",
                    manifest=b"not a manifest",
                    attempt=1,
                )
            ),
        ),
        (node_pods("sim-00000"), b"garbage"),
        (
            node_pods("sim-00000"),
            encode(
                NodeAssignment(uid="ghost", key="default/ghost", node="sim-00000", manifest=pod("ghost"), attempt=1)
            ),
        ),
        (
            node_pods("no-such-node"),
            encode(NodeAssignment(uid="g", key="default/g", node="no-such-node", manifest=b"{}")),
        ),
        (event_subject("pod.bound", "default/ghost"), b"garbage"),
        (event_subject("node.added", "sim-00001"), b'{"kind": "node.added"}'),
    ]
    for i, (subject, data) in enumerate(to_streams):
        await publish_durable(js, subject, data, f"garbage/{i}")
    # Core request subjects: garbage requests, and a pop for a profile that does not exist.
    for subject in (queue_pop(profile), queue_done(profile), queue_pop("nobody"), queue_done("nobody")):
        for data in (b"garbage", b"{}", b'{"max_pods": -5}', b'{"max_pods": "all"}'):
            # No reply, or an error reply: both are fine; not stopping is what counts.
            with contextlib.suppress(Exception):
                await nats.request(subject, data, timeout=1)
    # Too big for the bus: refused before any service sees it.
    with pytest.raises(Exception):  # noqa: B017 - nats-py raises its own MaxPayloadError
        await js.publish(PODS_SUBMIT, b"x" * (2 * 1024 * 1024))

    # Then a good pod still goes all the way, and the unknown profile's pod says why it waits.
    await publish_durable(js, PODS_SUBMIT, pod("after-garbage"), "good/after-garbage")

    async def good_one_bound() -> None:
        record = await state.find_pod("default", "after-garbage")
        assert record is not None and record.phase in PLACED, record

    try:
        await eventually(good_one_bound, timeout=60, interval=0.2)
    except AssertionError:
        pytest.fail(f"a good pod was not bound after the garbage:\n{service_logs(cluster)}")
    stray = await state.find_pod("default", "nobody-schedules-me")
    assert stray is not None and stray.phase is PodPhase.PENDING
    assert 'no scheduler profile "nobody"' in stray.message
    assert await state.find_pod("default", "big") is None
    assert await state.find_pod("default", "bad-quantity") is None

    async def drained() -> None:
        # Every message was read and settled (acked, or terminated as poison), none is stuck.
        for stream in ("KUBUS_PODS", "KUBUS_BIND"):
            assert (await js.stream_info(stream)).state.messages == 0, stream

    await eventually(drained, timeout=30, interval=0.2)
    alive(cluster)
    assert cluster.group.failed() == []
    assert await check_invariants_settled(state) == []


def _cpu_pod(name: str, cpu: str, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "preempt"},
        "spec": {"priority": priority, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


@pytest.mark.slow
async def test_kill_9_of_the_cycle_during_preemption(
    services: StartServices, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    """Nodes full of low-priority pods; high-priority pods arrive and preempt; the cycle is
    SIGKILLed while they do, and started again. Every high-priority pod ends bound, each victim
    is evicted once (one Preempted event), none of the others is touched, no node overcommitted."""
    cluster = await services(nodes=10)  # 95.5 cpu each
    state = ClusterState(redis)
    low = pod_manifests([_cpu_pod(f"low-{i}", "30", 0) for i in range(30)])
    await submit(js, low)
    low_uids = [m.uid for m in low]

    async def low_placed() -> None:
        pods = await phases(state, low_uids)
        assert all(p is not None and p.phase in PLACED for p in pods.values())

    await eventually(low_placed, timeout=60, interval=0.2)
    high = pod_manifests([_cpu_pod(f"high-{i}", "30", 100) for i in range(20)])
    high_uids = [m.uid for m in high]
    await submit(js, high[:10])

    async def some_preempted() -> None:
        pods = await phases(state, low_uids)
        assert sum(1 for p in pods.values() if p is not None and p.phase is PodPhase.DELETED) >= 3

    await eventually(some_preempted, timeout=60, interval=0.05)
    cycle = cluster.group["cycle-default-scheduler"]
    cycle.kill()
    assert await cycle.wait(10) is not None
    await submit(js, high[10:])
    cycle.start()

    async def settled() -> None:
        pods = await phases(state, high_uids)
        assert all(p is not None and p.phase in PLACED for p in pods.values()), [
            (p.key, p.phase, p.reason) for p in pods.values() if p is not None and p.phase not in PLACED
        ]

    try:
        # A preemptor Reserved by the killed cycle waits for the queue's janitor (reserve_timeout).
        await eventually(settled, timeout=180, interval=1.0)
    except AssertionError as exc:
        pytest.fail(f"{exc}\n{service_logs(cluster)}")
    lows = await phases(state, low_uids)
    evicted = [p for p in lows.values() if p.phase is PodPhase.DELETED]
    assert all(p.reason == "Preempted" for p in evicted)
    assert all(p.phase in PLACED for p in lows.values() if p.phase is not PodPhase.DELETED)
    assert 20 <= len(evicted) <= 30  # two 30-cpu pods fit a node once two of its three are gone
    for p in evicted:
        assert sum(1 for e in await state.events(p.uid) if e.reason == "Preempted") == 1, p.key
    pods = await phases(state, high_uids)
    assert all(p.bindings == 1 for p in pods.values())
    assert await check_invariants_settled(state) == []
    alive(cluster)


async def test_a_forged_pop_and_a_forged_deletion_sent_with_the_roles_allowed_to_send_them_change_nothing(
    services: StartServices, servers: ServerEndpoints, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    """A PopRequest with fencing token 2^62, sent as the cycle role, and a pod.deleted event for a
    Running pod, by name and by uid, sent as the cycle role too (it may publish pod.deleted for its
    preemption victims): the real cycle keeps popping, new pods are scheduled, the Running pod
    keeps running and holding its room, and every invariant holds."""
    cluster = await services(nodes=5, pod_duration=0)
    state = ClusterState(redis)
    first = pod_manifests(mixed_workload(10, seed=3, namespace="forged"))
    await submit(js, first)

    async def placed(pods: list[Any], phases: tuple[PodPhase, ...] = (PodPhase.RUNNING,)) -> None:
        records = await state.get_pods(p.uid for p in pods)
        assert all(r is not None and r.phase in phases for r in records), [r and r.phase for r in records]

    await eventually(lambda: placed(first), timeout=60)
    victim = first[0]
    as_cycle = await nats_connect(servers.login(servers.nats_url, "cycle"), inbox_prefix=inbox_prefix("cycle"))
    try:
        forged_pop = PopRequest(max_pods=64, wait_ms=0, holder="forger", fencing_token=2**62)
        reply = await as_cycle.request(queue_pop("default-scheduler"), encode(forged_pop), timeout=5)
        assert (reply.headers or {}).get(ERROR_HEADER, "").startswith("fenced:"), reply
        for data in (PodChange(victim.uid), PodChange("")):
            event = ClusterEvent(kind="pod.deleted", name=victim.key, data=data)
            await as_cycle.publish(event_subject("pod.deleted", victim.key), encode(event))
        await as_cycle.flush()
    finally:
        await as_cycle.close()
    later = pod_manifests(mixed_workload(20, seed=4, namespace="forged-later"))
    await submit(js, later)
    await eventually(lambda: placed(later), timeout=60)
    record = await state.get_pod(victim.uid)
    assert record is not None and record.phase is PodPhase.RUNNING
    assert await state.reservation(record.node, victim.uid) is not None
    assert await check_invariants_settled(state) == []
    alive(cluster)
