"""Pods that name their node (`spec.nodeName`), end to end: never scheduled, placed by the queue
on that node, admitted and started by its agent; refused ones end Failed with kubelet's reason."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from cluster_support import StartServices, service_logs
from support import eventually

from kubus.cli.bench import check_invariants_settled
from kubus.store import ClusterState, PodPhase, PodRecord


def _pods(node: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: pinned}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: "1"}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: too-big}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: "500"}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: lost}}
spec:
  nodeName: no-such-node
  containers: [{{name: c, image: i}}]
"""


async def test_a_pod_naming_its_node_runs_there_and_one_its_node_cannot_take_fails(
    services: StartServices, kubus: Any, redis: aioredis.Redis
) -> None:
    cluster = await services(nodes=2)
    state = ClusterState(redis)
    node = (await state.node_names())[-1]
    applied = await kubus("apply", "-f", "-", stdin=_pods(node).encode())
    assert applied.code == 0, applied.err

    async def settled() -> dict[str, PodRecord]:
        pods = {name: await state.find_pod("default", name) for name in ("pinned", "too-big", "lost")}
        assert all(p is not None for p in pods.values()), pods
        out = {name: p for name, p in pods.items() if p is not None}
        assert out["pinned"].phase is PodPhase.RUNNING and out["pinned"].node == node, out["pinned"]
        assert (out["too-big"].phase, out["too-big"].reason) == (PodPhase.FAILED, "OutOfcpu"), out["too-big"]
        assert (out["lost"].phase, out["lost"].reason) == (PodPhase.FAILED, "NodeNotFound"), out["lost"]
        return out

    try:
        await eventually(settled, timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{service_logs(cluster, 30)}") from exc
    assert await check_invariants_settled(state) == []
