"""The whole system for end-to-end tests: the services as processes, started as `kubus up` starts them.

``services`` starts (once per call) a queue, one cycle per profile, binders and a gpu-agent
simulating nodes against the session's NATS and Redis, wiped first (the ``nats`` and ``redis``
fixtures), and stops them after the test. ``kubus`` runs the CLI as a subprocess pointed at the
same servers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from cluster_support import CliResult, StartServices, run_kubus, service_logs
from nats.aio.client import Client as NATS
from support import ServerEndpoints

from kubus.access import inbox_prefix
from kubus.cli.up import Cluster, start_cluster, wait_ready
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config
from kubus.store.cluster_state import ClusterState


@pytest.fixture
def cli_env(servers: ServerEndpoints, tmp_path: Path) -> dict[str, str]:
    """The environment that points the CLI at the test servers (and at no `kubus up`), logged in
    as the ``client`` role when the servers have users."""
    env = {"KUBUS_NATS_URL": servers.nats_url, "KUBUS_REDIS_URL": servers.redis_url}
    env["KUBUS_HOME"] = str(tmp_path / "no-kubus-up")
    if servers.credentials is not None:
        password = servers.credentials.password("client")
        env |= {"KUBUS_NATS_USER": "client", "KUBUS_NATS_PASSWORD": password, "KUBUS_REDIS_USERNAME": "client"}
        env |= {"KUBUS_REDIS_PASSWORD": password, "KUBUS_NATS_INBOX_PREFIX": inbox_prefix("client")}
    return env


@pytest.fixture
def kubus(cli_env: dict[str, str]) -> Callable[..., Awaitable[CliResult]]:
    """``await kubus("get", "pods")``: the CLI against the test servers."""

    async def call(*args: str, stdin: bytes | None = None, timeout: float = 120.0) -> CliResult:
        return await run_kubus(*args, env=cli_env, stdin=stdin, timeout=timeout)

    return call


@pytest.fixture
async def services(
    nats: NATS, redis: aioredis.Redis, servers: ServerEndpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[StartServices]:
    """``cluster = await services(nodes=20)``: every service, ready (nodes heartbeating, cycles
    leading), on wiped servers. Stopped (SIGTERM, then SIGKILL) after the test. ``config_text``
    replaces the scheduler configuration (KubeSchedulerConfiguration YAML) every service gets;
    ``env`` is added to the services' environment (they inherit this process's, see
    `kubus.cli.processes.ServiceGroup`), and taken back after the test. Each service logs in
    as its role when the servers have users (`kubus.access`). ``standby``: a standby queue and
    cycle (`kubus.cli.processes.cluster_services`), ``lease_ttl`` their leases' ttl."""
    started: list[Cluster] = []

    async def start(
        *,
        nodes: int = 20,
        profiles: Sequence[str] = ("default-scheduler",),
        binders: int = 1,
        pod_duration: float = 0.0,
        batch_size: int | None = None,
        ready_timeout: float = 90.0,
        config_text: str | None = None,
        env: Mapping[str, str] | None = None,
        standby: bool = False,
        lease_ttl: float | None = None,
    ) -> Cluster:
        directory = tmp_path / f"cluster-{len(started)}"
        directory.mkdir()
        config = directory / "scheduler-config.yaml"
        config.write_text(gpu_scheduler_config(profiles) if config_text is None else config_text)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        template = directory / "node-template.yaml"
        template.write_text(NODE_TEMPLATE)
        since = time.time()
        cluster = await start_cluster(
            directory,
            config=str(config),
            profiles=profiles,
            nodes=nodes,
            node_template=str(template),
            binders=binders,
            nats=servers.nats_url,
            redis=servers.redis_url,
            credentials=servers.credentials,
            pod_duration=pod_duration,
            batch_size=batch_size,
            standby=standby,
            lease_ttl=lease_ttl,
        )
        started.append(cluster)
        failed = await wait_ready(cluster, ClusterState(redis), timeout=ready_timeout, since=since)
        assert not failed, f"services exited while starting:\n{service_logs(cluster)}"
        return cluster

    try:
        yield start
    finally:
        for cluster in started:
            await cluster.stop(timeout=10)
