"""`kubus up --kubeconfig`: the embedded NATS and Redis and every service, as processes, scheduling
a real kube-apiserver's pods; what a crash of any part leaves is repaired, and no pod is lost or
bound twice."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from cluster_support import KubusUp, run_kubus
from kube_support import KubeApiServer, KubeTest, pod_manifest
from support import eventually

from kubus.access import ACCESS_DIR, read_credentials
from kubus.cli.endpoints import read_endpoints
from kubus.core.settings import ConnectionSettings, redis_client
from kubus.kubeapi import PODS
from kubus.store import ClusterState, check_invariants

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.slow]


def config(path: Path, profile: str) -> str:
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"profiles:\n- schedulerName: {profile}\n"
    )
    return str(path)


async def api_pods(kube: KubeTest) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in (await kube.client.list(PODS, namespace=kube.namespace)).items}


async def test_a_bad_kubeconfig_and_an_unreachable_apiserver_are_one_line_at_start(tmp_path: Path) -> None:
    missing = await run_kubus("up", "--kubeconfig", str(tmp_path / "nope"), "--data-dir", str(tmp_path), env={})
    assert missing.code == 2 and missing.err.count("\n") == 1, missing
    assert "no such file" in missing.err
    unreachable = tmp_path / "unreachable.kubeconfig"
    unreachable.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    down = await run_kubus("up", "--kubeconfig", str(unreachable), "--data-dir", str(tmp_path), env={})
    assert down.code == 1 and down.err.count("\n") == 1, down
    assert "cannot reach the Kubernetes API at https://127.0.0.1:1" in down.err


async def test_every_part_killed_under_a_flow_of_pods_and_the_apiserver_restarted_lose_nothing(
    tmp_path: Path, kube: KubeTest, kube_apiserver: KubeApiServer
) -> None:
    """`kubus up --kubeconfig` over 20 nodes while 300 pods come through the API: the watcher,
    the binder, the cycle, nats-server and valkey-server are each SIGKILLed (kubus up starts
    them again), and the kube-apiserver is restarted. Every pod ends bound, to one node, once;
    the store agrees with the apiserver, and its invariants hold."""
    profile = f"kubus-{kube.namespace}"
    await kube.make_nodes(20, cpu="8")
    home = tmp_path / "up"
    home.mkdir()
    up = KubusUp(home, "--kubeconfig", str(kube_apiserver.kubeconfig), "--config", config(tmp_path / "s.yaml", profile),
                 nodes=0)  # fmt: skip
    created: list[str] = []

    async def flow() -> None:
        for start in range(0, 300, 20):
            for i in range(start, start + 20):
                name = f"p{i}"
                while True:  # the apiserver may be restarting: a client tries again
                    try:
                        await kube.client.create(PODS, pod_manifest(name, cpu="100m", scheduler=profile),
                                                 namespace=kube.namespace)  # fmt: skip
                        break
                    except Exception as exc:  # 409: created before it went away
                        if "AlreadyExists" in str(exc):
                            break
                        await asyncio.sleep(0.5)
                created.append(name)
            await asyncio.sleep(0.3)

    try:
        await up.ready()
        submitting = asyncio.create_task(flow())
        for needle in ("kubus.watcher", "kubus.binder", "kubus.cycle", "nats-server", "valkey-server", "apiserver"):
            bound_before = sum(1 for p in (await api_pods(kube)).values() if p["spec"].get("nodeName"))

            async def progressed(before: int = bound_before) -> None:
                now = sum(1 for p in (await api_pods(kube)).values() if p["spec"].get("nodeName"))
                assert now >= min(before + 10, 300), (now, up.text()[-2000:])

            await eventually(progressed, timeout=120, interval=0.5)
            if needle == "apiserver":
                await asyncio.to_thread(kube_apiserver.restart_apiserver)
            else:
                os.kill(up.child(needle), signal.SIGKILL)
            await asyncio.sleep(1.0)
        await submitting

        async def all_bound() -> dict[str, dict[str, Any]]:
            pods = await api_pods(kube)
            unbound = sorted(n for n in created if not pods[n]["spec"].get("nodeName"))
            assert len(pods) == 300 and not unbound, (len(pods), unbound[:5])
            return pods

        pods = await eventually(all_bound, timeout=240, interval=1.0)
        assert up.proc.poll() is None, up.text()
        recorded, access = read_endpoints(home), read_credentials(home / ACCESS_DIR)
        assert recorded is not None and access is not None
        state = ClusterState(redis_client(ConnectionSettings(redis_url=access.url(recorded.redis_url))))
        try:

            async def agrees() -> None:
                records = await state.get_pods(p["metadata"]["uid"] for p in pods.values())
                for pod, record in zip(pods.values(), records, strict=True):
                    assert record is not None, pod["metadata"]["name"]
                    assert (record.node, record.bindings) == (pod["spec"]["nodeName"], 1), (record, pod["spec"])
                assert await check_invariants(state) == []

            await eventually(agrees, timeout=60, interval=1.0)
        finally:
            await state.redis.aclose()
    finally:
        up.kill()
