"""Gangs through the whole system (every service its own process): all or nothing under two
profiles racing for the same nodes, and after kill -9 of the cycle and of the binder mid-gang."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from cluster_support import StartServices, service_logs
from nats.js import JetStreamContext
from support import eventually

from kubus.api.podgroups import POD_GROUP_LABEL, PodGroup
from kubus.cli.bench import check_invariants_settled
from kubus.cli.cluster import pod_manifests, submit
from kubus.store import ClusterState, PodPhase

NS = "gangs"
PLACED = (PodPhase.BOUND, PodPhase.RUNNING)
CPU = "40"
"""A simulated node has 95.5 cpu: two members fit on one, four on the two nodes of these tests."""


def config(*profiles: str) -> str:
    lines = ["apiVersion: kubescheduler.config.k8s.io/v1", "kind: KubeSchedulerConfiguration", "profiles:"]
    for name in profiles:
        lines += [
            f"- schedulerName: {name}",
            "  plugins:",
            "    multiPoint: {enabled: [{name: Coscheduling}, {name: GPUFit}], disabled: [{name: PrioritySort}]}",
        ]
    return "\n".join(lines) + "\n"


def member(group: str, i: int, profile: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{i}", "namespace": NS, "labels": {POD_GROUP_LABEL: group}},
        "spec": {
            "schedulerName": profile,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": CPU}}}],
        },
    }


async def placed(state: ClusterState, uids: dict[str, list[str]]) -> dict[str, int]:
    out = {}
    for name, members in uids.items():
        out[name] = sum(1 for r in await state.get_pods(members) if r is not None and r.phase in PLACED)
    return out


async def watch_all_or_nothing(state: ClusterState, uids: dict[str, list[str]], stop: asyncio.Event) -> list[str]:
    """Sample the gangs until ``stop``: every sample where a gang was split, some members placed
    (bound or running) while others were back to Pending. Members bind one by one once Permit
    allowed them all, so "some bound, the rest reserved and allowed" is the gang binding."""
    split = []
    while not stop.is_set():
        for name, members in uids.items():
            phases = [r.phase for r in await state.get_pods(members) if r is not None]
            if any(p in PLACED for p in phases) and any(p is PodPhase.PENDING for p in phases):
                split.append(f"{name}: {[str(p) for p in phases]}")
        await asyncio.sleep(0.05)
    return split


@pytest.mark.slow
async def test_two_profiles_race_two_gangs_that_fit_alone_one_runs_whole(
    services: StartServices, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    cluster = await services(nodes=2, profiles=("alpha", "beta"), config_text=config("alpha", "beta"))
    state = ClusterState(redis)
    for name in ("a", "b"):
        await state.put_pod_group(PodGroup(NS, name, 3, schedule_timeout_seconds=2, creation_timestamp=time.time()))
    manifests = {
        "a": pod_manifests([member("a", i, "alpha") for i in range(3)]),
        "b": pod_manifests([member("b", i, "beta") for i in range(3)]),
    }
    uids = {name: [m.uid for m in ms] for name, ms in manifests.items()}
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_all_or_nothing(state, uids, stop))
    for i in range(3):  # interleaved
        await submit(js, [manifests["a"][i], manifests["b"][i]])

    async def one_whole() -> None:
        assert sorted((await placed(state, uids)).values()) == [0, 3]

    try:
        await eventually(one_whole, timeout=90, interval=0.2)
    finally:
        stop.set()
    assert await watcher == [], service_logs(cluster)
    # settled: the services still run (members starting, the losing gang retrying), and the check
    # reads Redis in several steps
    assert await check_invariants_settled(state) == []


@pytest.mark.slow
async def test_kill_9_of_the_cycle_and_the_binder_mid_gang_is_still_all_or_nothing(
    services: StartServices, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    cluster = await services(nodes=2, config_text=config("default-scheduler"))
    state = ClusterState(redis)
    await state.put_pod_group(PodGroup(NS, "g", 4, schedule_timeout_seconds=5, creation_timestamp=time.time()))
    manifests = pod_manifests([member("g", i, "default-scheduler") for i in range(4)])
    uids = {"g": [m.uid for m in manifests]}
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_all_or_nothing(state, uids, stop))
    try:
        await submit(js, manifests)

        async def under_way() -> None:  # some members reserved (waiting or binding), not all bound
            records = await state.get_pods(uids["g"])
            assert any(r is not None and r.phase is not PodPhase.PENDING for r in records)

        await eventually(under_way, timeout=60, interval=0.005)
        for name in ("cycle-default-scheduler", "binder"):
            cluster.group[name].kill()
        for name in ("cycle-default-scheduler", "binder"):
            await cluster.group[name].wait(10)
            cluster.group[name].start()

        async def whole() -> None:
            assert (await placed(state, uids))["g"] == 4

        await eventually(whole, timeout=90, interval=0.2)
    finally:
        stop.set()
    assert await watcher == [], service_logs(cluster)
    # settled: the services still run (members starting, the losing gang retrying), and the check
    # reads Redis in several steps
    assert await check_invariants_settled(state) == []
