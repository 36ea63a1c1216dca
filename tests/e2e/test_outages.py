"""What the cluster does when its servers fail under it for a while: Redis killed and left down,
Redis's disk full, NATS and then Redis killed under a flow of pods. Nothing acknowledged is
lost, no service stops, and everything goes on by itself once the servers are back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from cluster_support import KubusUp, run_kubus, service_logs
from support import eventually

from kubus.access import ACCESS_DIR, inbox_prefix, read_credentials
from kubus.bus import connect_bus
from kubus.cli.bench import check_invariants_settled
from kubus.cli.cluster import SubmitManifest, pod_manifests, submit
from kubus.cli.endpoints import read_endpoints
from kubus.cli.up import Cluster, start_cluster, wait_ready
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config
from kubus.core import codec
from kubus.core.redis_connection import DiskError
from kubus.core.settings import ConnectionSettings, redis_client
from kubus.store import ClusterState, PodPhase

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLACED = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED)


def _pods(prefix: str, count: int) -> list[SubmitManifest]:
    return pod_manifests(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{prefix}-{i}", "namespace": "outage"},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]},
            }
            for i in range(count)
        ]
    )


async def _cluster(directory: Path, *, nodes: int = 20) -> Cluster:
    """Embedded servers in ``directory`` and every service, ready. Nobody restarts what dies:
    the test does, when it chooses."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "scheduler-config.yaml"
    config.write_text(gpu_scheduler_config(("default-scheduler",)))
    template = directory / "node-template.yaml"
    template.write_text(NODE_TEMPLATE)
    since = time.time()
    cluster = await start_cluster(
        directory, config=str(config), profiles=("default-scheduler",), nodes=nodes, node_template=str(template),
        pod_duration=0,
    )  # fmt: skip
    client = redis_client(cluster.settings)
    try:
        failed = await wait_ready(cluster, ClusterState(client), timeout=90, since=since)
    finally:
        await client.aclose()
    assert not failed, service_logs(cluster)
    return cluster


@contextlib.asynccontextmanager
async def running(directory: Path, *, nodes: int = 20) -> AsyncIterator[Cluster]:
    cluster = await _cluster(directory, nodes=nodes)
    try:
        yield cluster
    finally:
        await cluster.stop(timeout=10)


def _cli_env(cluster: Cluster, home: Path) -> dict[str, str]:
    """The CLI's environment for ``cluster``, logged in as the client role."""
    assert cluster.servers is not None and cluster.servers.credentials is not None
    password = cluster.servers.credentials.password("client")
    return {
        "KUBUS_HOME": str(home / "no-kubus-up"),
        "KUBUS_NATS_URL": cluster.servers.nats_url,
        "KUBUS_REDIS_URL": cluster.servers.redis_url,
        "KUBUS_NATS_USER": "client",
        "KUBUS_NATS_PASSWORD": password,
        "KUBUS_NATS_INBOX_PREFIX": inbox_prefix("client"),
        "KUBUS_REDIS_USERNAME": "client",
        "KUBUS_REDIS_PASSWORD": password,
    }


def alive(cluster: Cluster) -> None:
    """No service exited: an outage degrades the cluster, it never stops a service."""
    dead = [f"{s.name} (exit {s.returncode()})" for s in cluster.group if not s.running]
    assert not dead, f"services exited: {dead}\n{service_logs(cluster)}"


async def all_placed(state: ClusterState, pods: Sequence[SubmitManifest], timeout: float) -> None:
    """Every pod stored (none lost) and placed, each bound once."""
    uids = [p.uid for p in pods]

    async def check() -> None:
        records = await state.get_pods(uids)
        missing = [p.key for p, r in zip(pods, records, strict=True) if r is None]
        assert not missing, f"{len(missing)} acknowledged pods not stored, e.g. {missing[:3]}"
        waiting = [f"{r.key}: {r.phase} {r.reason}" for r in records if r is not None and r.phase not in PLACED]
        assert not waiting, f"{len(waiting)} pods not placed, e.g. {waiting[:3]}"
        assert all(r is not None and r.bindings == 1 for r in records)

    await eventually(check, timeout=timeout, interval=1.0)


async def test_redis_down_for_30s_loses_no_acknowledged_pod(tmp_path: Path) -> None:
    """Redis is killed and left down for 30 s while pods keep coming (JetStream acknowledges
    them): no service stops, `kubus apply` does not claim what it cannot confirm, and once
    Redis is back every acknowledged pod is stored and placed exactly once."""
    async with running(tmp_path / "cluster") as cluster:
        assert cluster.servers is not None
        nc, js = await connect_bus(cluster.settings, "kubus-test-outage")
        state = ClusterState(redis_client(cluster.settings))
        try:
            before, during = _pods("before", 100), _pods("during", 200)
            await submit(js, before)
            os.kill(cluster.servers.pids()["valkey-server"], signal.SIGKILL)
            await asyncio.sleep(0.5)
            await submit(js, during)  # acknowledged by JetStream: these must not be lost
            manifest = tmp_path / "late.yaml"
            manifest.write_text(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: late, namespace: outage}\n"
                "spec: {containers: [{name: c, image: x}]}\n"
            )
            applied = await run_kubus("apply", "-f", str(manifest), "--timeout", "3", env=_cli_env(cluster, tmp_path))
            assert applied.code != 0, applied  # it cannot know the pod is stored: it says so
            assert "late" in applied.err and "not stored" in applied.err, applied.err
            await asyncio.sleep(30)
            alive(cluster)
            await cluster.servers.restart("valkey-server")
            late = [m for m in pod_manifests([_late_pod()]) if m.name == "late"]
            await all_placed(state, [*before, *during, *late], timeout=180)
            assert await check_invariants_settled(state) == []
            alive(cluster)
        finally:
            await nc.close()
            await state.redis.aclose()


def _late_pod() -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "late", "namespace": "outage"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True, capture_output=True)


def _can_mount() -> str | None:
    """Why a tmpfs cannot be mounted here (not root, no CAP_SYS_ADMIN), or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    probe = Path(f"/tmp/kubus-tmpfs-probe-{os.getpid()}")
    try:
        _mount_tmpfs(probe, "64k")
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"mount -t tmpfs failed: {exc}"
    subprocess.run(["umount", str(probe)], check=False)
    probe.rmdir()
    return None


async def test_a_full_disk_under_redis_degrades_the_cluster_and_it_recovers_by_itself(tmp_path: Path) -> None:
    """Valkey's data directory is a tiny tmpfs, filled while pods flow: Valkey refuses every
    write (MISCONF), the services keep running and take no new work, and once space is back
    every acknowledged pod is stored and placed, and applying them again is 'unchanged'."""
    why = _can_mount()
    if why is not None:
        pytest.fail(f"the full-disk test needs a tmpfs: {why}") if os.environ.get("CI") else pytest.skip(why)
    directory = tmp_path / "cluster"
    redis_dir = directory / "redis"
    _mount_tmpfs(redis_dir, "64m")
    try:
        async with running(directory) as cluster:
            nc, js = await connect_bus(cluster.settings, "kubus-test-disk")
            state = ClusterState(redis_client(cluster.settings))
            filler = redis_dir / "filler"
            try:
                first, second = _pods("first", 150), _pods("second", 150)
                await submit(js, first)
                await all_placed(state, first, timeout=60)  # every service at work
                with open(filler, "wb") as f, contextlib.suppress(OSError):  # until ENOSPC
                    while True:
                        f.write(b"\0" * (1 << 20))
                        f.flush()
                await submit(js, second)  # acknowledged by JetStream while Redis cannot write

                async def refusing() -> None:
                    # Large: Valkey gives back what a failed write took, and a small write may fit
                    # in that slack; this one never does.
                    try:
                        await state.redis.set("kubus-test-probe", b"x" * (1 << 18))
                    except DiskError:
                        return
                    raise AssertionError("Valkey still takes writes")

                await eventually(refusing, timeout=30)
                await asyncio.sleep(10)
                alive(cluster)
                filler.unlink()
                await all_placed(state, [*first, *second], timeout=180)
                assert await check_invariants_settled(state) == []
                alive(cluster)
                # Duplicates are told by the store, after all this: nothing new, nothing sent.
                manifests = tmp_path / "again.json"
                manifests.write_bytes(b"\n---\n".join(p.data for p in [*first, *second]))
                again = await run_kubus("apply", "-f", str(manifests), "-q", env=_cli_env(cluster, tmp_path))
                assert (again.code, again.out.strip()) == (0, "300 pods: 300 unchanged"), again
            finally:
                with contextlib.suppress(FileNotFoundError):
                    filler.unlink()
                await nc.close()
                await state.redis.aclose()
    finally:
        subprocess.run(["umount", "-l", str(redis_dir)], check=False)


def _wave(prefix: str, count: int) -> str:
    """``count`` pods as YAML, one in four asking for one GPU."""
    docs = []
    for i in range(count):
        gpu = ", limits: {nvidia.com/gpu: 1}" if i % 4 == 0 else ""
        docs.append(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {prefix}-{i}, namespace: wave}}\n"
            f"spec: {{containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}{gpu}}}}}]}}\n"
        )
    return "---\n".join(docs)


async def test_nats_then_valkey_killed_under_8000_pods_every_pod_runs(tmp_path: Path) -> None:
    """The issue's two waves: `kubus up` with 300 nodes; 4,000 pods applied and nats-server
    killed a second later; 4,000 more and valkey-server killed a second later (kubus up starts
    each again). Every service reconnects, and all 8,000 pods end Running, each bound once."""
    up = KubusUp(tmp_path, "--pod-duration", "0", nodes=300)
    env = {"KUBUS_HOME": str(tmp_path)}
    try:
        await up.ready()
        for prefix, server in (("a", "nats-server"), ("b", "valkey-server")):
            manifest = tmp_path / f"{prefix}.yaml"
            manifest.write_text(_wave(prefix, 4000))
            applying = asyncio.create_task(
                run_kubus("apply", "-f", str(manifest), "-q", "--timeout", "120", env=env, timeout=300)
            )
            await asyncio.sleep(1.0)
            os.kill(up.child(server), signal.SIGKILL)
            applied = await applying
            if applied.code != 0:  # the bus was away while it published: applying again is safe
                applied = await run_kubus("apply", "-f", str(manifest), "-q", "--timeout", "120", env=env, timeout=300)
            assert applied.code == 0, (applied, up.text())

        async def all_running() -> None:
            listed = await run_kubus("get", "pods", "-n", "wave", "-o", "json", env=env)
            assert listed.code == 0, listed.err
            phases = Counter(p["status"]["phase"] for p in codec.loads(listed.out)["items"])
            assert phases == {"Running": 8000}, phases

        await eventually(all_running, timeout=240, interval=2.0)
        assert up.proc.poll() is None, up.text()
        recorded, access = read_endpoints(tmp_path), read_credentials(tmp_path / ACCESS_DIR)
        assert recorded is not None and access is not None
        state = ClusterState(redis_client(ConnectionSettings(redis_url=access.url(recorded.redis_url))))
        try:
            assert await check_invariants_settled(state) == []
            assert {r.bindings for r in await state.pods_in_phase(PodPhase.RUNNING)} == {1}
        finally:
            await state.redis.aclose()
    finally:
        up.kill()
