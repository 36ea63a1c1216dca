"""/healthz and /readyz against real NATS and Redis: what readiness says when either goes away, and
every service's entry point answering its probes (as Kubernetes and compose ask them)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from support import eventually, http_get

from kubus.cli.embedded import EmbeddedServers
from kubus.core.metrics import serve_metrics
from kubus.core.settings import ConnectionSettings
from kubus.runtime.service import Service

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


async def test_readiness_needs_nats_connected_and_redis_answering(
    nats_url: str, redis_url: str, redis: aioredis.Redis
) -> None:
    service = Service("probed", ConnectionSettings(nats_url=nats_url, redis_url=redis_url), streams=False)
    server, thread = serve_metrics(service.metrics, 0, "127.0.0.1", health=service, ready_timeout=0.2)
    readyz = f"http://127.0.0.1:{server.server_port}/readyz"
    try:
        await service.start()
        assert await asyncio.to_thread(http_get, readyz) == (200, "ok")

        # Redis holds every client's commands (as a failover or an overloaded server does).
        await redis.execute_command("CLIENT", "PAUSE", "1500", "ALL")
        assert await asyncio.to_thread(http_get, readyz) == (503, "redis: no answer to PING within 0.2s")

        async def ready_again() -> None:
            assert await asyncio.to_thread(http_get, readyz) == (200, "ok")

        await eventually(ready_again, timeout=10)

        assert service.nc is not None
        await service.nc.close()
        assert await asyncio.to_thread(http_get, readyz) == (503, "nats: not connected")
        assert await asyncio.to_thread(http_get, readyz.replace("readyz", "healthz")) == (200, "ok")
    finally:
        await service.stop()
        server.shutdown()
        thread.join(5)


async def test_a_service_starts_against_a_redis_that_refuses_writes_and_says_it_is_not_ready(
    tmp_path: Path, nats_url: str
) -> None:
    """Valkey whose last snapshot failed refuses writes and PING (MISCONF, as on a full disk):
    a service starts anyway, paused and not ready; once Valkey writes again it resumes."""
    servers = EmbeddedServers(tmp_path)
    await servers.start()
    admin = aioredis.Redis.from_url(servers.redis_url)
    service = Service("paused", ConnectionSettings(nats_url=nats_url, redis_url=servers.redis_url), streams=False)
    try:
        # A directory where the snapshot goes: its rename fails, and Valkey stops taking writes.
        (tmp_path / "redis" / "dump.rdb").mkdir()
        await admin.config_set("save", "3600 1")  # refused writes need a save point configured
        await admin.execute_command("BGSAVE")

        async def refusing() -> None:
            assert (await admin.info("persistence"))["rdb_last_bgsave_status"] == "err"

        await eventually(refusing, timeout=10)
        await service.start()
        why = await service.readiness()
        assert why is not None and why.startswith("intake paused: DiskError: "), why
        (tmp_path / "redis" / "dump.rdb").rmdir()
        await admin.execute_command("BGSAVE")

        async def resumed() -> None:
            await service.outage.pause(service.stopping)
            assert await service.readiness() is None

        await eventually(resumed, timeout=20)
    finally:
        await service.stop()
        await admin.aclose()
        await servers.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_every_entry_point_answers_its_probes(
    nats: NATS, redis: aioredis.Redis, nats_url: str, redis_url: str
) -> None:
    """``python -m kubus.<service> --metrics-port N``, as the chart and compose start them, becomes
    ready and stops cleanly on SIGTERM (the ``nats`` and ``redis`` fixtures wipe the servers first)."""
    config = str(EXAMPLES / "scheduler-config.yaml")
    commands = {
        "queue": ["kubus.queue", "--config", config],
        "cycle": ["kubus.cycle", "--profile", "default-scheduler", "--config", config, "--backend", "numpy"],
        "binder": ["kubus.binder"],
        "gpu_agent": ["kubus.gpu_agent", "--simulate", "2", "--template", str(EXAMPLES / "node-template.yaml")],
    }
    env = {**os.environ, "KUBUS_NATS_URL": nats_url, "KUBUS_REDIS_URL": redis_url}
    ports = {name: _free_port() for name in commands}
    procs = {
        name: await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            *argv,
            "--metrics-port",
            str(ports[name]),
            "--log-level",
            "warning",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        for name, argv in commands.items()
    }
    try:

        async def all_ready() -> None:
            for name, port in ports.items():
                assert procs[name].returncode is None, f"{name} exited {procs[name].returncode}"
                assert await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/readyz") == (200, "ok"), name
                assert await asyncio.to_thread(http_get, f"http://127.0.0.1:{port}/healthz") == (200, "ok"), name

        await eventually(all_ready, timeout=60, interval=0.2)
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        codes = {name: await asyncio.wait_for(proc.wait(), 30) for name, proc in procs.items()}
    logs = {name: (await proc.communicate())[1].decode()[-2000:] for name, proc in procs.items() if codes[name]}
    assert codes == dict.fromkeys(procs, 0), logs
