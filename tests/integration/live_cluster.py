"""Queue, cycle and binder in this process, over the test's real NATS and Redis, with a
configuration and a registry of the test's own: for tests of plugins through the services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_manifests
from kubus.binder import BinderOptions, BinderService
from kubus.cli.cluster import pod_manifests, submit
from kubus.core.settings import ConnectionSettings
from kubus.cycle import CycleOptions, CycleService
from kubus.framework.config import load_config
from kubus.framework.registry import Registry
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.queue import QueueOptions, QueueService
from kubus.runtime.service import Service
from kubus.store import ClusterState, PodPhase

__all__ = ["LiveCluster", "live_cluster", "pod", "until_phase"]


def pod(
    name: str, cpu: str = "100m", *, namespace: str = "live", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod manifest (a dict, as a user writes it) requesting ``cpu``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
    }


@dataclass
class LiveCluster:
    state: ClusterState
    js: JetStreamContext
    services: Sequence[Service]

    async def submit(self, *specs: dict[str, Any]) -> list[str]:
        """Submit these pod manifests as `kubus apply` does; their uids, in order."""
        manifests = pod_manifests(list(specs), source="test")
        await submit(self.js, manifests)
        return [m.uid for m in manifests]


NODE = """
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status:
  allocatable: {{cpu: "{cpu}", memory: 8Gi, pods: "20"}}
"""


@contextlib.asynccontextmanager
async def live_cluster(
    settings: ConnectionSettings,
    state: ClusterState,
    js: JetStreamContext,
    config_text: str,
    registry: Registry,
    *,
    nodes: int = 2,
    node_cpu: str = "4",
) -> AsyncIterator[LiveCluster]:
    """``nodes`` nodes n0, n1, ... of ``node_cpu`` cpu each, and every profile of ``config_text``:
    one queue, one cycle per profile, one binder; stopped after."""
    config = load_config(config_text, registry=registry)
    for i in range(nodes):
        await state.put_node(parse_manifests(NODE.format(name=f"n{i}", cpu=node_cpu)).nodes[0])

    def framework(name: str) -> tuple[Framework, WaitingPods]:
        waiting = WaitingPods()
        return Framework.from_profile(config.profile(name), registry, handle=waiting), waiting

    services: list[Service] = [
        QueueService(settings, config, QueueOptions(flush_interval=0.05, in_flight_interval=0.05), registry=registry)
    ]
    for profile in config.profiles:
        fw, waiting = framework(profile.scheduler_name)
        options = CycleOptions(lease_ttl=1.0, renew_interval=0.1, pop_wait_ms=50, request_timeout=1.0, backend="numpy")
        services.append(CycleService(settings, fw, options, waiting=waiting, name=f"cycle-{profile.scheduler_name}"))
    services.append(
        BinderService(
            settings,
            BinderOptions(fetch_timeout=0.2, permit_poll=0.02),
            frameworks={p.scheduler_name: framework(p.scheduler_name)[0] for p in config.profiles},
        )
    )
    try:
        for service in services:
            await service.start()
        yield LiveCluster(state, js, services)
    finally:
        for service in reversed(services):
            with contextlib.suppress(Exception):
                await service.stop(timeout=5)


async def until_phase(state: ClusterState, uid: str, phase: PodPhase, timeout: float = 20) -> None:
    async def check() -> None:
        record = await state.get_pod(uid)
        assert record is not None and record.phase is phase, record

    await eventually(check, timeout=timeout, interval=0.05)
