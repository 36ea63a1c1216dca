"""Stopping, whatever state the servers are in: every service exits within its stop timeout on
SIGTERM even after NATS or Redis was killed under load, and nothing `kubus up` started outlives
it (a normal stop after its servers died, kill -9 of `kubus up` after it restarted a service).
And `kubus up` starts its embedded servers again when they die, losing no acknowledged submit.

These tests own their servers (they kill them), so they start embedded ones of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from cluster_support import KubusUp, descendants, process_stat, run_kubus, service_logs, still_alive
from support import eventually

from kubus.bus.connection import connect_bus
from kubus.cli.cluster import pod_manifests, submit
from kubus.cli.processes import GROUP_STOP_WAIT, SERVICE_STOP_WAIT
from kubus.cli.up import start_cluster, wait_ready
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config, mixed_workload
from kubus.core import codec
from kubus.core.settings import redis_client
from kubus.runtime.entrypoint import DEFAULT_STOP_TIMEOUT, EXIT_GRACE
from kubus.store import ClusterState, PodPhase

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

STOP_BOUND = DEFAULT_STOP_TIMEOUT + EXIT_GRACE
"""What `kubus.runtime.entrypoint` promises: a service is gone this many seconds after SIGTERM."""


# -- services, when a server dies under load --------------------------------------------------------


@pytest.mark.parametrize("server", ["nats-server", "valkey-server"])
async def test_every_service_stops_in_time_after_a_server_is_killed_under_load(tmp_path: Path, server: str) -> None:
    config = tmp_path / "scheduler-config.yaml"
    config.write_text(gpu_scheduler_config())
    template = tmp_path / "node-template.yaml"
    template.write_text(NODE_TEMPLATE)
    since = time.time()
    cluster = await start_cluster(
        tmp_path, config=str(config), profiles=("default-scheduler",), nodes=50, node_template=str(template),
        pod_duration=0.0,
    )  # fmt: skip
    assert cluster.servers is not None
    redis = redis_client(cluster.settings)
    nc, js = await connect_bus(cluster.settings, "test")
    try:
        state = ClusterState(redis)
        assert not await wait_ready(cluster, state, timeout=90, since=since), service_logs(cluster)
        manifests = pod_manifests(mixed_workload(3000, seed=5, namespace="stop"))
        flow = asyncio.create_task(submit(js, manifests))

        async def placing() -> None:
            bound = await state.pods_in_phase(PodPhase.RUNNING)
            assert len(bound) >= 100, len(bound)

        await eventually(placing, timeout=60, interval=0.2)  # pods are flowing through every service
        os.kill(cluster.servers.pids()[server], signal.SIGKILL)
        flow.cancel()
        await asyncio.sleep(1.0)  # every service meets the dead server mid-work

        started = time.monotonic()
        for service in cluster.group:
            assert service.running, service_logs(cluster)
            service.expected_exit = True
            service.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        codes = {s.name: await s.wait(STOP_BOUND + 5) for s in cluster.group}
        took = time.monotonic() - started
        assert all(code is not None for code in codes.values()), f"still running: {codes}\n{service_logs(cluster)}"
        assert took <= STOP_BOUND + 2, f"stopping took {took:.1f}s\n{service_logs(cluster)}"
        # Each ended itself: exit 0 (clean) or 1 (it says what it abandoned), not a signal.
        assert set(codes.values()) <= {0, 1}, f"{codes}\n{service_logs(cluster)}"
        for service in cluster.group:
            # The whole run's log: the client library may print a late traceback after the line.
            log = service.log_tail(100_000)
            assert 'event="service stopped' in log, service.log_tail(20)
            if service.returncode() == 1:
                assert "stopped, abandoning: " in log, service.log_tail(20)
        if server == "nats-server":
            # With the bus gone, whatever they had buffered for it is reported as abandoned.
            assert any(code == 1 for code in codes.values()), codes
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
        await redis.aclose()
        await cluster.stop(timeout=2)


# -- kubus up leaves nothing behind -----------------------------------------------------------------


@pytest.mark.parametrize("impatient", [False, True], ids=["waited-for", "kill-9-while-stopping"])
async def test_kubus_up_stopped_after_its_servers_died_leaves_no_process(tmp_path: Path, impatient: bool) -> None:
    """SIGTERM to `kubus up` once its NATS and Redis are dead; then either wait for it, or (an
    impatient user, a supervisor's kill timeout) SIGKILL it two seconds into its stop."""
    up = KubusUp(tmp_path)
    children: dict[int, tuple[int, str]] = {}
    try:
        await up.ready()
        children = descendants(up.proc.pid)
        # two servers, the fork server, queue, cycle, binder, gpu-agent
        assert len(children) == 7, children
        os.kill(up.child("nats-server"), signal.SIGKILL)
        os.kill(up.child("valkey-server"), signal.SIGKILL)
        await asyncio.sleep(1.0)
        up.proc.send_signal(signal.SIGTERM)
        if impatient:
            await asyncio.sleep(2.0)
            up.kill()
            await eventually(lambda: _none_alive(children), timeout=SERVICE_STOP_WAIT + 5, interval=0.2)
        else:
            await up.exited(GROUP_STOP_WAIT + 15)
            assert "kubus up: stopped" in up.text(), up.text()
            await eventually(lambda: _none_alive(children), timeout=5, interval=0.1)
    finally:
        up.kill()
        _kill(children)


async def test_kill_9_of_kubus_up_after_a_restart_leaves_no_process(tmp_path: Path) -> None:
    up = KubusUp(tmp_path)
    children: dict[int, tuple[int, str]] = {}
    try:
        await up.ready()
        first_queue = up.child("kubus.queue")
        os.kill(first_queue, signal.SIGKILL)

        def restarted() -> int:
            pid = up.child("kubus.queue")
            assert pid != first_queue
            return pid

        await eventually(restarted, timeout=20, interval=0.1)
        assert "starting it again" in up.text(), up.text()
        children = descendants(up.proc.pid)
        assert len(children) == 7, children
        up.kill()  # SIGKILL: no chance to stop anything itself
        # Each child learns of it from the kernel (PR_SET_PDEATHSIG) and stops within its timeout.
        await eventually(lambda: _none_alive(children), timeout=SERVICE_STOP_WAIT + 5, interval=0.2)
    finally:
        up.kill()
        _kill(children)


def _none_alive(children: dict[int, tuple[int, str]]) -> None:
    left = still_alive(children)
    assert not left, "outlived kubus up:\n" + "\n".join(left)


def _kill(children: dict[int, tuple[int, str]]) -> None:
    """Clean up after a failed test (nothing to do after a passing one)."""
    for pid in children:
        if process_stat(pid) is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _pods_yaml(prefix: str, count: int) -> str:
    return "".join(
        f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {prefix}-{i}, namespace: up}}\n"
        "spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]}\n"
        for i in range(count)
    )


async def test_kubus_up_restarts_a_dead_server_and_loses_no_acknowledged_pod(tmp_path: Path) -> None:
    up = KubusUp(tmp_path)
    env = {"KUBUS_HOME": str(tmp_path)}
    children: dict[int, tuple[int, str]] = {}
    try:
        await up.ready()
        children = descendants(up.proc.pid)
        before = tmp_path / "before.yaml"
        before.write_text(_pods_yaml("before", 40))
        applied = await run_kubus("apply", "-f", str(before), env=env)
        assert applied.code == 0, applied.err  # acknowledged by JetStream
        for server in ("nats-server", "valkey-server"):
            os.kill(up.child(server), signal.SIGKILL)

            def back(server: str = server) -> None:
                assert f"kubus up: {server} is back" in up.text(), up.text()

            await eventually(back, timeout=60, interval=0.2)
        after = tmp_path / "after.yaml"
        after.write_text(_pods_yaml("after", 20))
        applied = await run_kubus("apply", "-f", str(after), env=env, timeout=120)
        assert applied.code == 0, applied.err

        async def all_placed() -> None:
            listed = await run_kubus("get", "pods", "-n", "up", "-o", "json", env=env)
            assert listed.code == 0, listed.err
            phases = {
                p["metadata"]["name"]: next(
                    c["reason"] for c in p["status"]["conditions"] if c["type"] == "kubus.io/Phase"
                )
                for p in codec.loads(listed.out)["items"]
            }
            assert len(phases) == 60, sorted(phases)
            stuck = {n: ph for n, ph in phases.items() if ph not in ("Bound", "Running", "Succeeded")}
            assert not stuck, stuck

        await eventually(all_placed, timeout=120, interval=1.0)
        assert up.proc.poll() is None, up.text()
        children = descendants(up.proc.pid)  # the restarted servers included
        assert len(children) == 7, children
        up.proc.send_signal(signal.SIGTERM)
        await up.exited(GROUP_STOP_WAIT + 15)
        await eventually(lambda: _none_alive(children), timeout=10, interval=0.2)
    finally:
        up.kill()
        _kill(children)
