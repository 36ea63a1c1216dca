"""Gangs through the services (queue, cycle and binder in this process, real NATS and Redis):
Coscheduling places a PodGroup's members all together or not at all, and a gang that cannot
run holds no room for long."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from live_cluster import LiveCluster, live_cluster, pod
from nats.js import JetStreamContext
from support import eventually

from kubus.api.podgroups import POD_GROUP_LABEL, PodGroup
from kubus.core.settings import ConnectionSettings
from kubus.plugins import in_tree_registry
from kubus.store import ClusterState, PodPhase, check_invariants

PROFILE = "default-scheduler"
NS = "gang"
PLACED = (PodPhase.BOUND, PodPhase.RUNNING)

# Backoff no longer than the groups' 2 s scheduleTimeoutSeconds: members that failed apart come
# back within one wait of each other (with kube's 10 s cap a gang of short waits takes rounds).
CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podMaxBackoffSeconds: 2
profiles:
- schedulerName: {PROFILE}
  plugins:
    queueSort: {{enabled: [{{name: Coscheduling}}], disabled: [{{name: "*"}}]}}
    preFilter: {{enabled: [{{name: Coscheduling}}]}}
    postFilter: {{enabled: [{{name: Coscheduling}}]}}
    permit: {{enabled: [{{name: Coscheduling}}]}}
    reserve: {{enabled: [{{name: Coscheduling}}]}}
"""


def member(group: str, i: int) -> dict[str, object]:
    return pod(f"{group}-{i}", cpu="1", namespace=NS, labels={POD_GROUP_LABEL: group})


@pytest.fixture
async def gang_cluster(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> AsyncIterator[LiveCluster]:
    # 4 cpu in all: room for 4 one-cpu members
    async with live_cluster(settings, state, js, CONFIG, in_tree_registry(), node_cpu="2") as cluster:
        yield cluster


async def group(state: ClusterState, name: str, min_member: int, timeout: int = 2) -> None:
    await state.put_pod_group(
        PodGroup(NS, name, min_member, schedule_timeout_seconds=timeout, creation_timestamp=time.time())
    )


async def placed_by_group(state: ClusterState, uids: dict[str, list[str]]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for name, members in uids.items():
        for record in await state.get_pods(members):
            if record is not None and record.phase in PLACED:
                out[name] += 1
    return {name: out[name] for name in uids}


async def test_a_gang_that_fits_is_placed_whole(gang_cluster: LiveCluster) -> None:
    state = gang_cluster.state
    await group(state, "a", 3)
    uids = await gang_cluster.submit(*(member("a", i) for i in range(3)))

    async def all_placed() -> None:
        assert (await placed_by_group(state, {"a": uids}))["a"] == 3

    await eventually(all_placed, timeout=30, interval=0.1)
    assert await check_invariants(state) == []


async def test_two_gangs_that_fit_alone_not_together_never_run_partly(gang_cluster: LiveCluster) -> None:
    state = gang_cluster.state
    await group(state, "a", 3)
    await group(state, "b", 3)
    a_uids, b_uids = [], []
    for i in range(3):  # interleaved
        a_uids += await gang_cluster.submit(member("a", i))
        b_uids += await gang_cluster.submit(member("b", i))
    uids = {"a": a_uids, "b": b_uids}

    async def one_whole() -> None:
        counts = await placed_by_group(state, uids)
        assert sorted(counts.values()) == [0, 3], counts

    await eventually(one_whole, timeout=60, interval=0.1)
    # Never partial, while the other keeps trying (its waits time out and it backs off).
    for _ in range(20):
        counts = await placed_by_group(state, uids)
        assert sorted(counts.values()) == [0, 3], counts
        await asyncio.sleep(0.1)
    assert await check_invariants(state) == []


async def test_a_gang_larger_than_the_cluster_stays_pending_and_holds_no_room(gang_cluster: LiveCluster) -> None:
    state = gang_cluster.state
    await group(state, "big", 5)
    uids = await gang_cluster.submit(*(member("big", i) for i in range(5)))

    async def pending_with_reason_and_no_room() -> None:
        records = await state.get_pods(uids)
        assert all(r is not None and r.phase is PodPhase.PENDING for r in records), [r and r.phase for r in records]
        assert any(r is not None and r.message for r in records)
        for node in ("n0", "n1"):
            assert await state.reservations(node) == []

    await eventually(pending_with_reason_and_no_room, timeout=30, interval=0.2)
    # A plain pod still fits: nothing of the gang holds the nodes.
    [plain] = await gang_cluster.submit(pod("plain", cpu="1", namespace=NS))

    async def plain_placed() -> None:
        record = await state.get_pod(plain)
        assert record is not None and record.phase in PLACED

    await eventually(plain_placed, timeout=30, interval=0.1)
    assert await check_invariants(state) == []
