"""No single point of failure (`kubus up --ha`): under a steady flow of pods, kill -9 the NATS
node that leads the streams, or the Valkey primary. Every acknowledged pod is bound exactly
once, the invariants hold, and the pause (the longest time no pod was bound) is measured.

The flow is ``KUBUS_HA_PODS`` pods (default 300, a CI-sized run; the issue's figure is 4,000,
run by hand: ``KUBUS_HA_PODS=4000 pytest tests/e2e/test_ha.py -s``) submitted at
``KUBUS_HA_RATE`` pods/s (default 150); the kill comes a third of the way in."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from cluster_support import service_logs
from nats.aio.msg import Msg
from support import eventually

from kubus.bus import connect_bus
from kubus.bus.messages import ClusterEvent, decode, expand
from kubus.bus.subjects import POD_BATCH_EVENTS, POD_EVENTS, PODS_STREAM
from kubus.cli.bench import check_invariants_settled
from kubus.cli.cluster import SubmitManifest, pod_manifests, submit
from kubus.cli.embedded import ReplicatedServers
from kubus.cli.up import Cluster, start_cluster, supervise, wait_ready
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config
from kubus.core.settings import redis_client
from kubus.store import ClusterState, PodPhase

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PODS = int(os.environ.get("KUBUS_HA_PODS", "300"))
RATE = float(os.environ.get("KUBUS_HA_RATE", "150"))
PLACED = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED)


def _pods(count: int) -> list[SubmitManifest]:
    return pod_manifests(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"ha-{i}", "namespace": "ha"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]},
            }
            for i in range(count)
        ]
    )


async def _cluster(directory: Path, nodes: int) -> Cluster:
    config = directory / "scheduler-config.yaml"
    config.write_text(gpu_scheduler_config(("default-scheduler",)))
    template = directory / "node-template.yaml"
    template.write_text(NODE_TEMPLATE)
    since = time.time()
    cluster = await start_cluster(
        directory, config=str(config), profiles=("default-scheduler",), nodes=nodes, node_template=str(template),
        pod_duration=0, log_level="warning", ha=True,
    )  # fmt: skip
    client = redis_client(cluster.settings)
    try:
        failed = await wait_ready(cluster, ClusterState(client), timeout=120, since=since)
    finally:
        await client.aclose()
    assert not failed, service_logs(cluster)
    return cluster


async def _stream_leader(cluster: Cluster) -> str:
    """The nats-server process that leads KUBUS_PODS (``nats-server-<n>`` runs ``kubus-<n>``)."""
    nc, js = await connect_bus(cluster.settings, "ha-test")
    try:
        info = await js.stream_info(PODS_STREAM.name)
        assert info.cluster is not None and info.cluster.leader, info
        return "nats-server-" + info.cluster.leader.rsplit("-", 1)[1]
    finally:
        await nc.close()


async def _flow_with_kill(
    tmp_path: Path, victim: Callable[[Cluster], Awaitable[str]], sig: signal.Signals = signal.SIGKILL
) -> tuple[dict[str, float], str]:
    """Start `kubus up --ha` (in process, supervised as kubus up does), submit PODS pods at RATE,
    send ``sig`` (kill -9 by default) to ``victim``'s server a third of the way in; return the
    measurements, and the services' logs (what a failed bound on the pause shows)."""
    nodes = max(20, PODS // 40)
    cluster = await _cluster(tmp_path, nodes)
    servers = cluster.servers
    assert isinstance(servers, ReplicatedServers)
    stop = asyncio.Event()
    supervisor = asyncio.create_task(supervise(cluster, stop))
    nc, js = await connect_bus(cluster.settings, "ha-flow")
    bound_at: list[float] = []

    async def on_event(msg: Msg) -> None:
        if ".pod.bound." in msg.subject or ".pods.bound." in msg.subject:  # one pod, or several at once
            bound_at.extend([time.monotonic()] * len(expand(decode(ClusterEvent, msg.data))))

    await nc.subscribe(POD_EVENTS, cb=on_event)
    await nc.subscribe(POD_BATCH_EVENTS, cb=on_event)
    pods = _pods(PODS)
    killed_at = 0.0
    killed = ""
    try:
        chunk = max(1, int(RATE / 10))
        start = time.monotonic()
        for i in range(0, len(pods), chunk):
            if not killed and i >= len(pods) // 3:
                killed = await victim(cluster)
                os.kill(servers.pid(killed), sig)
                killed_at = time.monotonic()
            retry_until = time.monotonic() + 60
            while True:  # a publish that fails while the bus fails over is sent again (msg ids dedup)
                try:
                    await submit(js, pods[i : i + chunk])
                    break
                except Exception as exc:  # any bus error: retry the chunk, for a minute at most
                    if time.monotonic() > retry_until:
                        raise AssertionError(f"submitting pods {i}..: still failing after 60 s: {exc!r}") from exc
                    await asyncio.sleep(0.2)
            delay = start + (i + chunk) / RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        submitted = time.monotonic()
        client = redis_client(cluster.settings)
        state = ClusterState(client)
        try:

            async def all_placed() -> None:
                placed = 0
                for phase in PLACED:
                    placed += len(await state.pod_uids_in_phase(phase))
                assert placed == PODS, f"{placed}/{PODS} placed"

            await eventually(all_placed, timeout=120 + PODS / 50, interval=0.5)
            # By uid: a pod that moves Bound -> Running between two reads is listed twice.
            records = {r.uid: r for phase in PLACED for r in await state.pods_in_phase(phase)}
            assert len(records) == PODS
            assert {r.bindings for r in records.values()} == {1}, "a pod bound twice"
            assert await check_invariants_settled(state) == []
        finally:
            await client.aclose()
        gaps = [b - a for a, b in zip([killed_at, *bound_at], bound_at, strict=False) if b > killed_at]
        after_kill = [t for t in bound_at if t > killed_at]
        return {
            "killed": float(servers.names().index(killed)),
            "pause_s": max([after_kill[0] - killed_at, *gaps]) if after_kill else float("inf"),
            "submit_s": submitted - start,
            "bound_events": float(len(bound_at)),
        }, service_logs(cluster)
    finally:
        await nc.close()
        stop.set()
        await supervisor
        await cluster.stop()


async def test_valkey_primary_killed_under_a_flow_every_pod_bound_once(tmp_path: Path) -> None:
    async def primary(cluster: Cluster) -> str:
        assert isinstance(cluster.servers, ReplicatedServers)
        return await cluster.servers.primary()

    result, logs = await _flow_with_kill(tmp_path, primary)
    print(f"\nvalkey primary killed under {PODS} pods at {RATE:g}/s: pause {result['pause_s']:.2f}s")
    assert result["pause_s"] < 15.0, f"{result}\n{logs}"  # the goal is 5 s; CI machines are shared


async def test_nats_stream_leader_killed_under_a_flow_every_pod_bound_once(tmp_path: Path) -> None:
    result, logs = await _flow_with_kill(tmp_path, _stream_leader)
    print(f"\nNATS stream leader killed under {PODS} pods at {RATE:g}/s: pause {result['pause_s']:.2f}s")
    assert result["pause_s"] < 10.0, f"{result}\n{logs}"  # the goal is 2 s; CI machines are shared


async def test_nats_stream_leader_in_lame_duck_mode_under_a_flow_hands_its_streams_over(tmp_path: Path) -> None:
    """A planned restart, as NATS does one (SIGUSR2: lame duck mode, what `nats-server --signal
    ldm` and the NATS chart's preStop send): the server moves the leadership of its streams to
    the others at once, then closes its clients over its lame-duck duration. A crash (kill -9)
    instead waits out nats-server's election timeout."""
    result, logs = await _flow_with_kill(tmp_path, _stream_leader, signal.SIGUSR2)
    print(f"\nNATS stream leader in lame duck mode under {PODS} pods at {RATE:g}/s: pause {result['pause_s']:.2f}s")
    assert result["pause_s"] < 10.0, f"{result}\n{logs}"  # the goal is 2 s; CI machines are shared
