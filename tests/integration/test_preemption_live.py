"""Preemption through the services, over real NATS and Redis: high-priority pods evict the
lowest-priority pods they need and run; two profiles preempting on the same nodes at once never
evict a pod twice nor overcommit a node."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from live_cluster import LiveCluster, live_cluster, pod
from nats.js import JetStreamContext
from support import eventually

from kubus.core.settings import ConnectionSettings
from kubus.plugins import in_tree_registry
from kubus.store import ClusterState, PodPhase, check_invariants

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: alpha
- schedulerName: beta
"""


def prioritized(name: str, cpu: str, priority: int, profile: str = "alpha") -> dict[str, Any]:
    manifest = pod(name, cpu, labels={"tier": "high" if priority else "low"})
    manifest["spec"]["priority"] = priority
    manifest["spec"]["schedulerName"] = profile
    return manifest


@pytest.fixture
async def live(settings: ConnectionSettings, state: ClusterState, js: JetStreamContext) -> AsyncIterator[LiveCluster]:
    async with live_cluster(settings, state, js, CONFIG, in_tree_registry(), nodes=2, node_cpu="4") as cluster:
        yield cluster


async def _records(state: ClusterState, uids: list[str]) -> list[Any]:
    records = [await state.get_pod(uid) for uid in uids]
    assert all(r is not None for r in records)
    return records


async def _all_bound(state: ClusterState, uids: list[str]) -> None:
    for r in await _records(state, uids):
        assert r.phase is PodPhase.BOUND, (r.key, r.phase, r.message)


async def test_high_priority_pods_evict_the_low_priority_pods_they_need(live: LiveCluster) -> None:
    low = await live.submit(*[prioritized(f"low-{i}", "1", 0) for i in range(8)])
    await eventually(lambda: _all_bound(live.state, low), timeout=20, interval=0.05)
    high = await live.submit(*[prioritized(f"high-{i}", "2", 1000) for i in range(2)])
    await eventually(lambda: _all_bound(live.state, high), timeout=30, interval=0.1)
    records = await _records(live.state, low)
    evicted = [r for r in records if r.phase is PodPhase.DELETED]
    assert len(evicted) == 4, [(r.key, r.phase) for r in records]
    for r in evicted:
        assert r.reason == "Preempted" and r.message.startswith("Preempted by live/high-"), (r.reason, r.message)
    assert all(r.phase is PodPhase.BOUND for r in records if r not in evicted)
    for uid in high:  # `kubus describe` tells why: the preemptor's event names its victims
        events = await live.state.events(uid)
        assert any(e.reason == "Preempting" and "on node n" in e.message for e in events), events
    for r in evicted:
        assert any(e.reason == "Preempted" for e in await live.state.events(r.uid))
    assert await check_invariants(live.state) == []


async def test_two_profiles_preempting_on_the_same_nodes_evict_each_pod_once(live: LiveCluster) -> None:
    low = await live.submit(*[prioritized(f"low-{i}", "1", 0) for i in range(8)])
    await eventually(lambda: _all_bound(live.state, low), timeout=20, interval=0.05)
    # each profile's first batch sees the same full nodes and picks victims from the same view
    high = await live.submit(
        *[prioritized(f"high-{p}-{i}", "2", 1000, profile=p) for i in range(2) for p in ("alpha", "beta")]
    )
    await eventually(lambda: _all_bound(live.state, high), timeout=40, interval=0.1)
    records = await _records(live.state, low)
    assert Counter(r.phase for r in records) == Counter({PodPhase.DELETED: 8}), [(r.key, r.phase) for r in records]
    assert await check_invariants(live.state) == []
