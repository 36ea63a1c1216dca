"""Embedded NATS and Valkey servers: they start, answer, keep state across a restart, stop cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions
from nats import connect as nats_connect
from nats.aio.client import Client as NATS
from nats.js.api import StorageType, StreamConfig
from support import eventually

from kubus.bus import PODS_STREAM, PODS_SUBMIT, connect_bus, ensure_streams, publish_durable
from kubus.cli.embedded import EmbeddedServers, ServerStartError, nats_server_binary, valkey_server_binary
from kubus.cli.embedded.host import NATS_MAX_PROCS
from kubus.core.settings import ConnectionSettings, redis_client

pytestmark = pytest.mark.integration


def test_binaries_come_from_the_python_packages() -> None:
    assert nats_server_binary().is_file()
    assert valkey_server_binary().is_file()


def _environment(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().partition("=")[::2] for e in entries if e)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")
@pytest.mark.parametrize("given", [None, "3"])
async def test_nats_runs_on_one_go_proc_unless_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    if given is None:
        monkeypatch.delenv("GOMAXPROCS", raising=False)
    else:
        monkeypatch.setenv("GOMAXPROCS", given)
    async with EmbeddedServers(tmp_path) as servers:
        nats_env = _environment(servers.pids()["nats-server"])
    assert nats_env["GOMAXPROCS"] == (given or str(NATS_MAX_PROCS))
    assert nats_env["PATH"] == os.environ["PATH"]  # the rest of the environment is ours
    assert "GOMAXPROCS" not in os.environ or given is not None  # set for the child alone


async def test_fixture_servers_answer(nats: NATS, redis: aioredis.Redis) -> None:
    assert await redis.ping()
    await redis.set(b"k", b"v")
    assert await redis.get(b"k") == b"v"
    info = await nats.jetstream().account_info()
    assert info.streams == 0  # the fixture deleted every stream
    sub = await nats.subscribe("kubus.test.ping")
    await nats.publish("kubus.test.ping", b"pong")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"pong"


async def test_fixture_isolates_tests(nats: NATS, redis: aioredis.Redis) -> None:
    # Runs after test_fixture_servers_answer: its key is gone.
    assert await redis.dbsize() == 0
    js = nats.jetstream()
    await js.add_stream(StreamConfig(name="LEFTOVER", subjects=["kubus.test.leftover"]))


async def test_fixture_deleted_the_previous_tests_streams(nats: NATS) -> None:
    assert (await nats.jetstream().account_info()).streams == 0


async def test_restart_keeps_redis_data_and_jetstream_messages(tmp_path: Path) -> None:
    servers = EmbeddedServers(tmp_path)
    await servers.stop()  # safe before start
    with pytest.raises(RuntimeError):
        _ = servers.nats_url
    async with servers:
        nats_url, redis_url = servers.nats_url, servers.redis_url
        assert nats_url.startswith("nats://127.0.0.1:") and redis_url.startswith("redis://127.0.0.1:")
        r = aioredis.Redis.from_url(redis_url)
        await r.hset(b"node:n1", mapping={b"cpu": b"4000"})
        await r.aclose()
        nc = await nats_connect(nats_url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="KEEP", subjects=["kubus.keep.>"], storage=StorageType.FILE))
        for i in range(3):
            await js.publish("kubus.keep.x", f"m{i}".encode(), headers={"Nats-Msg-Id": f"id-{i}"})
        await nc.close()
    assert not servers.running
    await servers.stop()  # idempotent
    assert (tmp_path / "nats.log").stat().st_size > 0 and (tmp_path / "redis.log").exists()

    await servers.start()
    try:
        assert (servers.nats_url, servers.redis_url) == (nats_url, redis_url)  # same ports
        r = aioredis.Redis.from_url(redis_url)
        assert await r.hgetall(b"node:n1") == {b"cpu": b"4000"}
        await r.aclose()
        nc = await nats_connect(nats_url)
        js = nc.jetstream()
        info = await js.stream_info("KEEP")
        assert info.state.messages == 3
        assert (await js.get_msg("KEEP", 3)).data == b"m2"
        await nc.close()
    finally:
        await servers.stop()
        await servers.stop()


def test_sync_start_and_stop_for_session_fixtures(tmp_path: Path) -> None:
    servers = EmbeddedServers(tmp_path)
    servers.start_sync()
    try:
        with socket.create_connection(("127.0.0.1", int(servers.redis_url.rsplit(":", 1)[1].split("/")[0])), 2):
            pass
    finally:
        servers.stop_sync()
    servers.stop_sync()


async def test_a_server_that_cannot_start_raises_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        servers = EmbeddedServers(tmp_path, redis_port=port)
        with pytest.raises(ServerStartError) as caught:
            await servers.start(timeout=10)
    message = str(caught.value)
    assert "valkey-server" in message and "redis.log" in message
    assert "in use" in message.lower()
    assert not servers.running
    await servers.stop()


async def test_a_bus_client_reconnects_after_a_restart(tmp_path: Path) -> None:
    servers = EmbeddedServers(tmp_path)
    await servers.start()
    nc, js = await connect_bus(ConnectionSettings(nats_url=servers.nats_url), "kubus-test-restart")
    try:
        await ensure_streams(js, [PODS_STREAM])
        await publish_durable(js, PODS_SUBMIT, b"before", "uid-1/1")
        await servers.stop()
        await servers.start()

        def reconnected() -> None:
            assert nc.is_connected

        await eventually(reconnected)
        ack = await publish_durable(js, PODS_SUBMIT, b"after", "uid-2/1")
        assert ack.seq == 2  # the stream and its first message survived
        assert (await publish_durable(js, PODS_SUBMIT, b"before", "uid-1/1")).duplicate  # so did the dedup window
    finally:
        await nc.close()
        await servers.stop()


async def test_a_redis_client_gets_every_connection_back_after_redis_is_killed_under_scripts(
    tmp_path: Path,
) -> None:
    """Pipelines of scripts running while Redis dies leave no connection out of the pool: with
    redis-py's own pipeline each one leaked a connection (SCRIPT EXISTS fails before the try that
    releases it), and once the pool was empty Redis was out of reach for good."""
    servers = EmbeddedServers(tmp_path)
    await servers.start()
    client = redis_client(ConnectionSettings(redis_url=servers.redis_url), max_connections=2, timeout=1)
    script = client.register_script("return redis.call('INCR', KEYS[1])")

    async def incr() -> Any:
        pipe = client.pipeline(transaction=False)
        await script(keys=["n"], args=[], client=pipe)
        return (await pipe.execute())[0]

    try:
        assert await incr() == 1
        os.kill(servers.pids()["valkey-server"], signal.SIGKILL)
        for _ in range(6):  # three times the pool: each would leak one
            with pytest.raises(redis.exceptions.ConnectionError):
                await incr()
        await servers.restart("valkey-server")
        assert await incr() >= 1  # the script is loaded again on the new server
        assert len(client.connection_pool._in_use_connections) == 0  # type: ignore[attr-defined]
    finally:
        await client.aclose()
        await servers.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
async def test_servers_die_with_a_killed_parent(tmp_path: Path) -> None:
    # A parent that starts the servers, prints their pids, then hangs until it is SIGKILLed.
    script = (
        "import json, sys, time\n"
        "from kubus.cli.embedded import EmbeddedServers\n"
        f"servers = EmbeddedServers({str(tmp_path)!r})\n"
        "servers.start_sync()\n"
        "print(json.dumps(servers.pids()), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE)
    assert parent.stdout is not None
    pids = json.loads(await asyncio.wait_for(parent.stdout.readline(), 60))
    assert set(pids) == {"nats-server", "valkey-server"}
    parent.kill()
    await parent.wait()

    def gone() -> None:
        for pid in pids.values():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert status == "Z", f"server {pid} still running"  # a zombie has exited

    await eventually(gone, timeout=15)
