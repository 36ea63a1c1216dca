"""Out-of-tree plugins through the services, end to end: the test package `kubus_test_plugins`
(installed next to kubus, found by its entry points) enabled by its KubeSchedulerConfiguration in
every service, the real processes against real NATS and Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from cluster_support import StartServices, service_logs
from kubus_test_plugins import (
    BIND_LOG_ENV,
    BIND_RECORDER_ANNOTATION,
    DENY_PERMIT_ANNOTATION,
    DENY_PERMIT_REASON,
    SCHEDULER_CONFIG,
)
from support import eventually

from kubus.cli.bench import check_invariants_settled
from kubus.store import ClusterState, PodPhase, PodRecord

PODS = f"""
apiVersion: v1
kind: Pod
metadata: {{name: denied, annotations: {{{DENY_PERMIT_ANNOTATION}: "yes"}}}}
spec:
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: recorded, annotations: {{{BIND_RECORDER_ANNOTATION}: "yes"}}}}
spec:
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: plain}}
spec:
  containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
"""

_PLACED = (PodPhase.BOUND, PodPhase.RUNNING)

CONFIG = (
    SCHEDULER_CONFIG
    # multiPoint appends RecordingBinder after kube's DefaultBinder, which never Skips: as in kube,
    # the Bind extension point's own list puts it first (DefaultBinder binds what it skips).
    + "    bind:\n      enabled: [{name: RecordingBinder}, {name: DefaultBinder}]\n"
)


async def test_out_of_tree_permit_and_bind_plugins_run_in_the_services(
    services: StartServices, kubus: Any, redis: aioredis.Redis, tmp_path: Path
) -> None:
    bind_log = tmp_path / "binds.log"
    cluster = await services(nodes=2, config_text=CONFIG, env={BIND_LOG_ENV: str(bind_log)})
    applied = await kubus("apply", "-f", "-", stdin=PODS.encode())
    assert applied.code == 0, applied.err
    state = ClusterState(redis)

    async def pod(name: str) -> PodRecord:
        record = await state.find_pod("default", name)
        assert record is not None, name
        return record

    async def settled() -> dict[str, PodRecord]:
        pods = {name: await pod(name) for name in ("denied", "recorded", "plain")}
        assert pods["recorded"].phase in _PLACED and pods["plain"].phase in _PLACED, pods
        denied = pods["denied"]
        assert denied.phase is PodPhase.PENDING and DENY_PERMIT_REASON in denied.message, denied
        assert bind_log.exists() and bind_log.read_text().strip(), "nothing in the bind log yet"
        return pods

    try:
        pods = await eventually(settled, timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{service_logs(cluster, 30)}") from exc
    # RecordingBinder bound the annotated pod (the binder process got its log file from the
    # environment) and skipped the plain one, which DefaultBinder bound.
    assert bind_log.read_text().splitlines() == [f"default/recorded {pods['recorded'].node}"]
    assert pods["plain"].node and pods["denied"].node == ""
    assert await check_invariants_settled(state) == []
