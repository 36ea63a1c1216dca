"""ClusterState.preempt against a real Redis-compatible server: the eviction of lower-priority
pods and the preemptor's reservation as one atomic step (PREEMPT), refused whole whenever the
cycle's view was stale, and safe when two preemptors race for the same victims."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis
from test_store import h100s, make_node, reservation, submit, usage

from kubus.api.manifests import parse_pod
from kubus.api.objects import Pod
from kubus.bus import announcements, msgids
from kubus.bus.messages import ClusterEvent, PodChange, decode
from kubus.bus.subjects import EventKind
from kubus.core import codec
from kubus.store import (
    ClusterState,
    EventType,
    PodPhase,
    Reservation,
    ReservationState,
    StoreCode,
    check_invariants,
)
from kubus.store.pods import Binding

# ---- building blocks ---------------------------------------------------------------------------


def pod(
    name: str,
    *,
    priority: int = 0,
    cpu: str = "1",
    gpus: int = 0,
    host_port: int | None = None,
    labels: dict[str, str] | None = None,
    avoid: dict[str, str] | None = None,
) -> tuple[Pod, bytes]:
    """A pod of ``priority`` asking for ``cpu`` (and whole GPUs, a host port); ``avoid``: a
    required anti-affinity on the hostname against pods with those labels."""
    requests: dict[str, Any] = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    container: dict[str, Any] = {"name": "c", "image": "busybox", "resources": {"requests": requests}}
    if host_port:
        container["ports"] = [{"containerPort": 8080, "hostPort": host_port}]
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "priority": priority, "containers": [container]}
    if avoid is not None:
        term = {"labelSelector": {"matchLabels": avoid}, "topologyKey": "kubernetes.io/hostname"}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
        "spec": spec,
    }
    return parse_pod(manifest), codec.dumps(manifest)


async def reserved(
    state: ClusterState, made: tuple[Pod, bytes], node: str, devices: tuple[int, ...] = (), *, token: int = 0
) -> Reservation:
    """The cycle's steps up to Reserve's input: the pod stored, Pending -> Reserved on ``node``
    (the attempt), and its reservation of that attempt, not yet made."""
    p, manifest = made
    await submit(state, p, manifest)
    w = await state.transition(
        p.metadata.uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING}, count_attempt=True
    )
    assert w.ok, w
    return reservation(p, node, devices, attempt=w.version, token=token)


async def running(
    state: ClusterState, made: tuple[Pod, bytes], node: str, devices: tuple[int, ...] = (), *, bind: bool = True
) -> Reservation:
    """A pod placed by the whole protocol: reserved, and (``bind``) bound and Running."""
    r = await reserved(state, made, node, devices)
    assert (await state.reserve(node, r)).ok
    if bind:
        [b] = await state.bind_many([Binding(r.pod_uid, node, r.attempt, devices, r.profile)])
        assert b.bound, b
        assert (await state.transition(r.pod_uid, PodPhase.RUNNING, expected_phases={PodPhase.BOUND})).ok
    return r


def victims(*rs: Reservation) -> list[tuple[str, str]]:
    return [(r.pod_uid, r.attempt) for r in rs]


async def snapshot(redis: aioredis.Redis) -> dict[bytes, Any]:
    """Everything Redis holds, to compare before and after a refused step."""
    out: dict[bytes, Any] = {}
    for key in sorted(await redis.keys("*")):
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            out[key] = await redis.hgetall(key)
        elif kind == "set":
            out[key] = await redis.smembers(key)
        elif kind == "list":
            out[key] = await redis.lrange(key, 0, -1)
        elif kind == "zset":
            out[key] = await redis.zrange(key, 0, -1, withscores=True)
        else:
            out[key] = await redis.get(key)
    return out


async def node_pods(state: ClusterState, node: str) -> list[str]:
    return [r.pod_key for r in await state.reservations(node)]


# ---- eviction ------------------------------------------------------------------------------------


async def test_preempt_evicts_exactly_the_victims_and_reserves_their_room(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="4", gpus=h100s(1)))
    low_gpu = await running(state, pod("low-gpu", gpus=1, host_port=80), "n1", (0,))
    low_cpu = await running(state, pod("low-cpu"), "n1", bind=False)  # Reserved: a binder may have it
    low_kept = await running(state, pod("low-kept"), "n1")
    await running(state, pod("high", priority=100), "n1")
    boss = await reserved(state, pod("boss", priority=50, cpu="2", gpus=1, host_port=80), "n1", (0,))
    refused = await state.reserve("n1", boss)
    assert set(refused.reasons) == {
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
        "gpu 0 busy",
        "host port TCP/80 in use",
    }

    result = await state.preempt("n1", boss, victims(low_gpu, low_cpu), source="cycle/default-scheduler")
    assert result.ok and not result.already, result
    assert [(e.key, e.phase) for e in result.evicted] == [
        ("default/low-gpu", PodPhase.RUNNING),
        ("default/low-cpu", PodPhase.RESERVED),
    ]
    assert result.message == "Preempted by default/boss on node n1"
    assert await node_pods(state, "n1") == ["default/boss", "default/high", "default/low-kept"]
    assert await usage(state, "n1") == {
        "pods": 3,
        "r:cpu": 4000,
        "r:memory": 3 * 1024**3,
        "r:nvidia.com/gpu": 1,
        "g:0:used": 80 * 1024**3,
        "g:0:pods": 1,
        "p:TCP:80:0.0.0.0": 1,
        "p:TCP:80": 1,
    }
    assert await check_invariants(state) == []
    for victim, evicted in zip((low_gpu, low_cpu), result.evicted, strict=True):
        record = await state.get_pod(victim.pod_uid)
        assert record is not None and record.phase is PodPhase.DELETED
        assert (record.reason, record.message) == ("Preempted", "Preempted by default/boss on node n1")
        assert record.version == evicted.version and evicted.uid == victim.pod_uid
        last = (await state.events(victim.pod_uid))[-1]
        assert (last.type, last.reason, last.message) == (EventType.WARNING, "Preempted", record.message)
        assert last.source == "cycle/default-scheduler"
    assert await state.pod_uids_in_phase(PodPhase.DELETED) == {low_gpu.pod_uid, low_cpu.pod_uid}
    assert await state.pod_uids_in_phase(PodPhase.RUNNING) == {low_kept.pod_uid, "uid-high"}
    assert await state.pod_uids_in_phase(PodPhase.RESERVED) == {boss.pod_uid}
    kept = await state.reservation("n1", low_kept.pod_uid)
    assert kept is not None and kept.state is ReservationState.BOUND

    # a victim's binder and agent find it gone; the preemptor binds as any reserved pod
    assert await state.mark_bound("n1", low_cpu.pod_uid, low_cpu.attempt) is StoreCode.NOT_FOUND
    [b] = await state.bind_many([Binding(boss.pod_uid, "n1", boss.attempt, (0,), boss.profile)])
    assert b.bound
    assert await check_invariants(state) == []

    # what the cycle announces: a deletion's pod.deleted per victim, reason Preempted
    pubs = announcements.preempted(result.evicted, node="n1", message=result.message, at=1.0)
    assert [p.msg_id for p in pubs] == [msgids.event(EventKind.POD_DELETED, v.pod_uid) for v in (low_gpu, low_cpu)]
    first = decode(ClusterEvent, pubs[0].payload)
    assert (first.kind, first.name, first.node, first.reason) == ("pod.deleted", "default/low-gpu", "n1", "Preempted")
    assert first.data == PodChange(uid=low_gpu.pod_uid, profile="default-scheduler")


# ---- refused: nothing changes ----------------------------------------------------------------------


async def test_a_stale_view_of_a_victim_changes_nothing(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="2"))
    await state.put_node(make_node("n2", cpu="2"))
    low1 = await running(state, pod("low-1"), "n1")
    low2 = await running(state, pod("low-2"), "n1")
    elsewhere = await running(state, pod("elsewhere"), "n2")
    boss = await reserved(state, pod("boss", priority=10, cpu="2"), "n1")
    before = await snapshot(state.redis)
    gone = "victim {} changed or gone since the cycle looked"

    for listed, stale in [
        ([(low1.pod_uid, 7), (low2.pod_uid, low2.attempt)], "default/low-1"),  # another attempt
        ([(low1.pod_uid, low1.attempt), (elsewhere.pod_uid, elsewhere.attempt)], "default/elsewhere"),  # on n2
        ([(low1.pod_uid, low1.attempt), ("uid-nobody", 3)], "uid-nobody"),  # never existed
    ]:
        refused = await state.preempt("n1", boss, listed)
        assert (refused.code, refused.reasons) == (StoreCode.CONFLICT, (gone.format(stale),))
        assert await snapshot(state.redis) == before

    # low-2 is deleted meanwhile (the queue's two steps): Deleted with its room still held, then
    # its room released
    assert (await state.transition(low2.pod_uid, PodPhase.DELETED)).ok
    for step in ("transitioned", "released"):
        if step == "released":
            assert await state.release("n1", low2.pod_uid) is StoreCode.OK
        before = await snapshot(state.redis)
        refused = await state.preempt("n1", boss, victims(low1, low2))
        assert (refused.code, refused.reasons) == (StoreCode.CONFLICT, (gone.format("default/low-2"),)), step
        assert await snapshot(state.redis) == before
    assert await check_invariants(state) == [
        f"pod default/boss ({boss.pod_uid}): Reserved on node n1 without a reservation there"
    ]


async def test_victims_of_equal_or_higher_priority_are_never_evicted(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="2"))
    low = await running(state, pod("low", priority=5), "n1")
    peer = await running(state, pod("peer", priority=10), "n1")
    boss = await reserved(state, pod("boss", priority=10, cpu="2"), "n1")
    before = await snapshot(state.redis)
    refused = await state.preempt("n1", boss, victims(low, peer))
    assert (refused.code, refused.reasons) == (
        StoreCode.CONFLICT,
        ("victim default/peer has priority 10, not lower than 10",),
    )
    assert await snapshot(state.redis) == before


async def test_a_preemptor_that_still_would_not_fit_changes_nothing(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="3"))
    low = await running(state, pod("low"), "n1")
    boss = await reserved(state, pod("boss", priority=10, cpu="3"), "n1")
    # the cycle looked: 2 cpu free + low's 1 = 3. Another profile reserves 1 of them first.
    await running(state, pod("sneaky", priority=100), "n1")
    before = await snapshot(state.redis)
    refused = await state.preempt("n1", boss, victims(low))
    assert (refused.code, refused.reasons) == (StoreCode.CONFLICT, ("Insufficient cpu",))
    assert await snapshot(state.redis) == before

    # the gate RESERVE keeps: a lost node, a deposed leader's token
    fenced = await reserved(state, pod("fenced", priority=10), "n1", token=1)
    assert (await state.reserve("n1", await reserved(state, pod("newer"), "n1", token=2))).ok
    before = await snapshot(state.redis)
    assert (await state.preempt("n1", fenced, victims(low))).code is StoreCode.FENCED
    await state.mark_unreachable("n1")
    assert (await state.preempt("n1", boss, victims(low))).reasons == ("node unreachable",)
    assert (await state.preempt("n9", replace(boss, node="n9"), victims(low))).reasons == ("node not found",)
    await state.mark_unreachable("n1", False)
    after = await snapshot(state.redis)
    before.pop(state.keys.node_info("n1").encode())
    after.pop(state.keys.node_info("n1").encode())  # (its generation moved with mark_unreachable)
    assert after == before


# ---- races and retries ---------------------------------------------------------------------------


async def test_two_preemptors_racing_for_the_same_victims_evict_them_once(state: ClusterState, redis_url: str) -> None:
    other = ClusterState(aioredis.from_url(redis_url))
    try:
        for round_ in range(5):
            node = f"n{round_}"
            await state.put_node(make_node(node, cpu="4"))
            lows = [await running(state, pod(f"low-{round_}-{i}"), node) for i in range(3)]
            await running(state, pod(f"high-{round_}", priority=100), node)
            a = await reserved(state, pod(f"a-{round_}", priority=10, cpu="2"), node)
            b = await reserved(state, pod(f"b-{round_}", priority=20, cpu="2"), node)
            results = await asyncio.gather(
                state.preempt(node, a, victims(lows[0], lows[1])),
                other.preempt(node, b, victims(lows[1], lows[0])),
            )
            assert sorted(r.code for r in results) == [StoreCode.CONFLICT, StoreCode.OK], results
            won = next(r for r in results if r.ok)
            lost = next(r for r in results if not r.ok)
            assert sorted(e.key for e in won.evicted) == [f"default/low-{round_}-0", f"default/low-{round_}-1"]
            assert all(reason.endswith("changed or gone since the cycle looked") for reason in lost.reasons)
            for low in lows[:2]:
                events = [e for e in await state.events(low.pod_uid) if e.reason == "Preempted"]
                assert len(events) == 1
            loser = a if results[1].ok else b
            assert (await state.give_back(loser.pod_uid, node, loser.attempt)).ok  # the cycle's undo
            assert len(await state.reservations(node)) == 3
        assert await check_invariants(state) == []
    finally:
        await other.redis.aclose()


async def test_preempt_many_is_preempt_after_preempt_in_one_round_trip(state: ClusterState) -> None:
    """Two preemptions of one batch on two nodes and a third that names a victim the first took:
    in order, each atomic, the third refused whole, as three `preempt` calls would do."""
    for node in ("n1", "n2"):
        await state.put_node(make_node(node, cpu="2"))
    low1, low2 = await running(state, pod("low-1"), "n1"), await running(state, pod("low-2"), "n2")
    await running(state, pod("low-3", cpu="1"), "n2")
    a = await reserved(state, pod("a", priority=10, cpu="1"), "n1")
    b = await reserved(state, pod("b", priority=10, cpu="1"), "n2")
    c = await reserved(state, pod("c", priority=10, cpu="1"), "n1")
    results = await state.preempt_many(
        [("n1", a, victims(low1)), ("n2", b, victims(low2)), ("n1", c, victims(low1))], source="cycle/test"
    )
    assert [r.code for r in results] == [StoreCode.OK, StoreCode.OK, StoreCode.CONFLICT], results
    assert [e.key for e in results[0].evicted] == ["default/low-1"] and results[1].evicted[0].key == "default/low-2"
    assert results[0].message == "Preempted by default/a on node n1"
    assert (await state.get_pod(c.pod_uid)).phase is PodPhase.RESERVED  # not placed: the cycle undoes it
    assert sorted(r.pod_uid for r in await state.reservations("n1")) == [a.pod_uid]
    assert await state.preempt_many([]) == []
    assert (await state.give_back(c.pod_uid, "n1", c.attempt)).ok  # the cycle's undo
    assert await check_invariants(state) == []


async def test_preempt_is_idempotent_for_the_same_attempt(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="2"))
    low = await running(state, pod("low"), "n1")
    await running(state, pod("low-2"), "n1")
    boss = await reserved(state, pod("boss", priority=10), "n1")
    first = await state.preempt("n1", boss, victims(low, low))  # listed twice: evicted once
    assert [e.key for e in first.evicted] == ["default/low"]
    before = await snapshot(state.redis)
    again = await state.preempt("n1", boss, victims(low))
    assert again.ok and again.already and again.evicted == ()
    assert await snapshot(state.redis) == before
    other_attempt = Reservation.decode(boss.encode().replace(b'"attempt":"', b'"attempt":"9'))
    refused = await state.preempt("n1", other_attempt, victims(low))
    assert refused.reasons == ("pod already reserved here by another attempt",)
    assert await snapshot(state.redis) == before
    assert await check_invariants(state) == []
    # what check_invariants holds a preempted victim to: a Deleted pod holds no reservation
    await state.redis.hset(state.keys.node_reservations("n1"), low.pod_uid, low.encode())
    assert f"node n1: reservation of pod default/low ({low.pod_uid}) which is Deleted" in await check_invariants(state)


# ---- anti-affinity -----------------------------------------------------------------------------


async def test_anti_affinity_against_a_victim_that_leaves_is_no_conflict(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="8"))
    web = await running(state, pod("web", labels={"app": "web"}), "n1")
    guard = await running(state, pod("guard", avoid={"app": "api"}), "n1")  # excludes pods labeled app=api
    boss = await reserved(state, pod("boss", priority=10, labels={"app": "api"}, avoid={"app": "web"}), "n1")
    assert (await state.reserve("n1", boss)).reasons[0] in (
        "node(s) didn't match pod anti-affinity rules (pod default/web)",
        "node(s) didn't satisfy existing pods anti-affinity rules (pod default/guard)",
    )
    # guard stays: its own term still excludes the preemptor
    refused = await state.preempt("n1", boss, victims(web))
    assert refused.reasons == ("node(s) didn't satisfy existing pods anti-affinity rules (pod default/guard)",)
    result = await state.preempt("n1", boss, victims(web, guard))
    assert result.ok, result
    assert await usage(state, "n1") == {"pods": 1, "r:cpu": 1000, "r:memory": 1024**3, "anti": 1}
    assert await check_invariants(state) == []
