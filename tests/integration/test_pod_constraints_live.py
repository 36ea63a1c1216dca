"""InterPodAffinity and PodTopologySpread through the services, over real NATS and Redis: two
profiles racing pods that a required anti-affinity on the hostname keeps apart never share a
node (RESERVE checks it), and a profile's own placements keep every constraint."""

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

NODES = 6


def web(name: str, profile: str, *, anti: bool = True) -> dict[str, Any]:
    manifest = pod(name, labels={"app": "web"})
    manifest["spec"]["schedulerName"] = profile
    if anti:
        manifest["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return manifest


@pytest.fixture
async def live(settings: ConnectionSettings, state: ClusterState, js: JetStreamContext) -> AsyncIterator[LiveCluster]:
    async with live_cluster(settings, state, js, CONFIG, in_tree_registry(), nodes=NODES) as cluster:
        yield cluster


async def _phases(state: ClusterState, uids: list[str]) -> dict[str, tuple[PodPhase, str]]:
    out = {}
    for uid in uids:
        record = await state.get_pod(uid)
        assert record is not None
        out[uid] = (record.phase, record.node)
    return out


async def test_two_profiles_racing_anti_affine_pods_never_share_a_node(live: LiveCluster) -> None:
    # Both profiles get every pod at once: each cycle places its first batch from a view that
    # does not hold the other's placements yet, so they pick the same empty nodes.
    specs = [web(f"{p}-{i}", p) for i in range(NODES) for p in ("alpha", "beta")]
    uids = await live.submit(*specs)

    async def settled() -> None:
        phases = await _phases(live.state, uids)
        bound = [node for phase, node in phases.values() if phase is PodPhase.BOUND]
        assert len(bound) == NODES, phases
        pending = [uid for uid, (phase, _) in phases.items() if phase is PodPhase.PENDING]
        assert len(pending) == len(uids) - NODES, phases
        for uid in pending:
            record = await live.state.get_pod(uid)
            assert record is not None and "anti-affinity" in record.message, record.message

    await eventually(settled, timeout=30, interval=0.1)
    phases = await _phases(live.state, uids)
    per_node = Counter(node for phase, node in phases.values() if phase is PodPhase.BOUND)
    assert sorted(per_node.values()) == [1] * NODES, per_node
    assert await check_invariants(live.state) == []


async def test_a_plain_pod_is_kept_off_a_node_whose_pod_excludes_it(live: LiveCluster) -> None:
    """Symmetry: the plain pod has no terms of its own; the existing pods' anti-affinity keeps
    it out, whichever profile placed them."""
    guards = await live.submit(*[web(f"guard-{i}", "alpha") for i in range(NODES - 1)])
    for uid in guards:
        await eventually(lambda uid=uid: _is_bound(live.state, uid), timeout=20, interval=0.05)
    [plain] = await live.submit(web("plain", "beta", anti=False))
    await eventually(lambda: _is_bound(live.state, plain), timeout=20, interval=0.05)
    phases = await _phases(live.state, [*guards, plain])
    guarded = {node for uid, (_, node) in phases.items() if uid != plain}
    assert phases[plain][1] not in guarded
    assert await check_invariants(live.state) == []


async def _is_bound(state: ClusterState, uid: str) -> None:
    record = await state.get_pod(uid)
    assert record is not None and record.phase is PodPhase.BOUND, record
