"""Races on the shared state: many schedulers reserving on a few nearly full nodes at once.

Workers (asyncio tasks, and separate OS processes with their own event loops and clients) play
the cycle and the binder for the same pods at the same time, as duplicate deliveries and
competing profiles would: each reads a stale view of a node, picks devices (often wrongly, on
purpose), reserves, claims the pod by compare-and-set, and then binds, finishes or gives the
pod back. Redis must refuse every overcommit, and afterwards the invariants must hold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import random
from collections import Counter
from typing import Any

import pytest
import redis.asyncio as aioredis

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node, Pod
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, StoreCode, check_invariants, node_info_of
from kubus_reference.gpu_fit import pick_gpu_devices

GI = 1024**3

_ATTEMPT_IDS = random.SystemRandom()
"""Attempt ids no version reaches, different in every process (reserve-then-claim workers)."""


def _nodes() -> list[Node]:
    def gpus(n: int, unhealthy: tuple[int, ...] = ()) -> str:
        return codec.dumps(
            [{"index": i, "model": "H100", "memory": "80Gi", "healthy": i not in unhealthy} for i in range(n)]
        ).decode()

    specs = [
        ("cpu-0", "4", "8Gi", 8, None),
        ("gpu-0", "6", "16Gi", 8, gpus(2)),
        ("gpu-1", "6", "16Gi", 10, gpus(4, unhealthy=(3,))),
    ]
    out = []
    for name, cpu, memory, pods, annotation in specs:
        meta: dict[str, Any] = {"name": name}
        if annotation:
            meta["annotations"] = {"kubus.io/gpus": annotation}
        out.append(parse_node({"metadata": meta, "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": pods}}}))
    return out


def _pods(n: int, seed: int) -> list[tuple[Pod, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        requests: dict[str, Any] = {"cpu": f"{rng.randrange(200, 1500, 100)}m", "memory": f"{rng.randrange(1, 9)}00Mi"}
        annotations = {}
        kind = rng.random()
        if kind < 0.25:
            requests["nvidia.com/gpu"] = rng.choice((1, 1, 2))
        elif kind < 0.6:
            annotations["kubus.io/gpu-memory"] = f"{rng.randrange(10, 61, 10)}Gi"
            if rng.random() < 0.3:
                annotations["kubus.io/gpu-count"] = "2"
        container: dict[str, Any] = {"name": "c", "resources": {"requests": requests}}
        if rng.random() < 0.1:
            container["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        manifest = {
            "metadata": {"name": f"p{i:03d}", "uid": f"uid-{i:03d}", "annotations": annotations},
            "spec": {"containers": [container]},
        }
        out.append((parse_pod(manifest), codec.dumps(manifest)))
    return out


async def _setup(state: ClusterState) -> None:
    for node in _nodes():
        await state.put_node(node)


async def _claim_then_reserve(
    state: ClusterState, record: PodRecord, node: str, info: PodInfo, stats: Counter[str]
) -> tuple[Reservation, int] | None:
    """docs/services.md's order: claim the pod (its new version is the attempt id), then reserve.
    Returns the reservation and the claimed version, or None when this attempt is over."""
    uid = record.uid
    claim = await state.transition(
        uid, PodPhase.RESERVED, node=node, expected_version=record.version, count_attempt=True
    )
    if not claim.ok:  # a duplicate claimed it first
        stats["lost the claim"] += 1
        return None
    reservation = Reservation.of(info, node, attempt=claim.version)
    result = await state.reserve(node, reservation)
    stats[f"reserve {result.code}"] += 1
    if not result.ok:
        back = await state.transition(uid, PodPhase.PENDING, expected_version=claim.version, reason=result.reason)
        assert back.ok, back  # nobody else may touch a pod this attempt holds
        return None
    return reservation, claim.version


async def _reserve_then_claim(
    state: ClusterState, record: PodRecord, node: str, info: PodInfo, stats: Counter[str]
) -> tuple[Reservation, int] | None:
    """The other order: reserve (a random attempt id), then claim; a lost claim gives back."""
    uid = record.uid
    # Its own attempt: with NO_ATTEMPT, a duplicate's reserve of the pod on the same node found
    # "already reserved" and went on with this attempt's reservation (and released it).
    reservation = Reservation.of(info, node, attempt=_ATTEMPT_IDS.randrange(10**12, 10**13))
    result = await state.reserve(node, reservation)
    stats[f"reserve {result.code}"] += 1
    if not result.ok:
        await state.transition(uid, PodPhase.PENDING, expected_version=record.version, reason=result.reason)
        return None
    claim = await state.transition(uid, PodPhase.RESERVED, node=node, expected_version=record.version)
    if not claim.ok:  # a duplicate won the pod: give back what this attempt took
        assert await state.unreserve(node, uid, reservation.attempt) is StoreCode.OK
        stats["lost the claim"] += 1
        return None
    return reservation, claim.version


async def _schedule(
    state: ClusterState, pod: Pod, manifest: bytes, rng: random.Random, stats: Counter[str], *, claim_first: bool
) -> None:
    """One worker's go at one pod: the cycle's steps, then the binder's and the agent's."""
    uid = pod.metadata.uid
    nodes = {n.name: n for n in _nodes()}
    await state.put_pod(PodRecord.of(pod, manifest))
    info = PodInfo.of(pod)
    for _ in range(4):
        record = await state.get_pod(uid)
        assert record is not None
        if record.phase is not PodPhase.PENDING:
            stats["someone else has it"] += 1
            return
        node = rng.choice(sorted(nodes))
        devices: tuple[int, ...] = ()
        if info.gpu is not None:
            view = node_info_of(nodes[node], await state.reservations(node))  # stale by the time we reserve
            devices = pick_gpu_devices(info.gpu, view)
            if len(devices) < info.gpu.count or rng.random() < 0.3:  # and often a wrong guess
                devices = tuple(sorted(rng.sample(range(5), info.gpu.count)))
        steps = _claim_then_reserve if claim_first else _reserve_then_claim
        held = await steps(state, record, node, info.placed_on(devices), stats)
        if held is None:
            continue
        reservation, version = held
        fate = rng.random()
        if fate < 0.2:  # Permit said no: back to the queue
            assert await state.unreserve(node, uid, reservation.attempt) is StoreCode.OK
            back = await state.transition(uid, PodPhase.PENDING, expected_version=version, reason="Rejected")
            assert back.ok, back
            stats["rejected"] += 1
            continue
        assert await state.mark_bound(node, uid, reservation.attempt) is StoreCode.OK
        bound = await state.bind_pod(uid, node, devices, expected_version=version)
        assert bound.ok, bound
        assert (await state.bind_pod(uid, node, devices)).code is StoreCode.ALREADY  # a redelivery
        stats["bound"] += 1
        if fate < 0.6:
            assert (await state.transition(uid, PodPhase.RUNNING)).ok
            done = rng.choice((PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.DELETED))
            assert (await state.transition(uid, done)).ok
            assert await state.release(node, uid) is StoreCode.OK
            stats["finished"] += 1
        return


async def _worker(state: ClusterState, pods: list[tuple[Pod, bytes]], seed: int, stats: Counter[str]) -> None:
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)  # every worker sees every pod: duplicate deliveries race
    for pod, manifest in order:  # half the workers claim first, as docs/services.md says
        await _schedule(state, pod, manifest, rng, stats, claim_first=seed % 2 == 0)


async def _watch_overcommit(state: ClusterState, stop: asyncio.Event, seen: list[str]) -> int:
    """While the workers run: every node's usage, read atomically with its allocatable, fits."""
    reads = 0
    while not stop.is_set():
        for node in _nodes():
            pipe = state.redis.pipeline(transaction=True)
            pipe.hgetall(state.keys.node_info(node.name))
            pipe.hgetall(state.keys.node_usage(node.name))
            info, usage = await pipe.execute()
            alloc = {k.decode(): v for k, v in info.items()}
            for field, value in usage.items():
                f, used = field.decode(), int(value)
                if f.startswith("r:") and used > int(alloc.get(f"a:{f[2:]}", 0)):
                    seen.append(f"{node.name}: {f} = {used}")
                elif f == "pods" and used > int(alloc["a:pods"]):
                    seen.append(f"{node.name}: {used} pods")
                elif f.endswith(":used") and used > int(alloc[f.replace(":used", ":mem")]):
                    seen.append(f"{node.name}: {f} = {used}")
            reads += 1
        await asyncio.sleep(0)
    return reads


async def _assert_final_state(state: ClusterState) -> None:
    assert await check_invariants(state) == []
    for node in _nodes():
        usage = await state.node_usage(node.name)
        assert usage is not None
        for resource, used in usage.requested.items():
            assert used <= node.status.allocatable.get(resource, 0), (node.name, resource)
        assert usage.pods <= node.status.allocatable["pods"]
        assert all(0 <= g.used <= g.memory for g in usage.gpus)
    pods = [p for p in await state.get_pods(f"uid-{i:03d}" for i in range(80)) if p is not None]
    assert all(p.bindings <= 1 for p in pods)


async def test_many_tasks_race_on_nearly_full_nodes(redis: aioredis.Redis) -> None:
    state = ClusterState(redis)
    await _setup(state)
    pods = _pods(80, seed=7)
    stats: Counter[str] = Counter()
    stop = asyncio.Event()
    seen: list[str] = []
    watcher = asyncio.create_task(_watch_overcommit(state, stop, seen))
    # six schedulers, each with its own client, all on the same pods
    clients = [aioredis.Redis(connection_pool=redis.connection_pool) for _ in range(6)]
    await asyncio.gather(*(_worker(ClusterState(c), pods, seed, stats) for seed, c in enumerate(clients)))
    stop.set()
    assert await watcher > 0
    assert seen == []
    # the race really happened: conflicts, lost claims and bindings all occurred
    assert stats["reserve CONFLICT"] > 0 and stats["lost the claim"] + stats["someone else has it"] > 0
    assert stats["bound"] > 0 and stats["finished"] > 0
    await _assert_final_state(state)


def _process_main(redis_url: str, seed: int) -> dict[str, int]:
    """A scheduler in its own process: its own event loop, client and ClusterState."""

    async def run() -> dict[str, int]:
        client = aioredis.Redis.from_url(redis_url)
        try:
            stats: Counter[str] = Counter()
            state = ClusterState(client)
            await asyncio.gather(*(_worker(state, _pods(80, seed=7), seed * 10 + k, stats) for k in range(3)))
            return dict(stats)
        finally:
            await client.aclose()

    return asyncio.run(run())


@pytest.mark.slow
async def test_separate_processes_race_on_nearly_full_nodes(redis: aioredis.Redis, redis_url: str) -> None:
    state = ClusterState(redis)
    await _setup(state)
    stop = asyncio.Event()
    seen: list[str] = []
    watcher = asyncio.create_task(_watch_overcommit(state, stop, seen))
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=3, mp_context=context) as pool:
        results = await asyncio.gather(*(loop.run_in_executor(pool, _process_main, redis_url, s) for s in (1, 2, 3)))
    stop.set()
    await watcher
    assert seen == []
    total: Counter[str] = Counter()
    for r in results:
        total.update(r)
    assert total["bound"] > 0 and total["reserve CONFLICT"] > 0
    await _assert_final_state(state)


async def test_one_lease_one_holder(redis: aioredis.Redis) -> None:
    states = [ClusterState(aioredis.Redis(connection_pool=redis.connection_pool)) for _ in range(8)]
    tokens = await asyncio.gather(*(s.acquire_lease("cycle/x", f"replica-{i}", 5000) for i, s in enumerate(states)))
    assert sorted(t for t in tokens if t is not None) == [1]
    assert sum(t is None for t in tokens) == 7
