"""The replicated embedded servers (`kubus.cli.embedded.ReplicatedServers`) as the services use them:
streams in three copies on a 3-node NATS cluster survive a kill -9 of their leader, and the
store client follows a Valkey failover through Sentinel, WAITs for a replica, and runs its
scripts on the new primary."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import nats.errors
import nats.js.errors
import pytest
from support import eventually

from kubus.access import ensure_credentials
from kubus.bus import PODS_STREAM, PODS_SUBMIT, connect_bus, ensure_streams, publish_durable
from kubus.cli.embedded import ReplicatedServers
from kubus.core.redis_connection import KubusRedis
from kubus.core.settings import ConnectionSettings, load_settings, redis_client
from kubus.runtime.service import is_transient
from kubus.store import ClusterState, PodPhase, PodRecord, StoreCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")


async def _while_electing(op: Callable[[], Awaitable[T]], what: str, timeout: float = 30.0) -> T:
    """``op()`` retried while the cluster elects leaders (a stream's, the JetStream API's): a NATS
    error then means "not yet"; still failing after ``timeout`` seconds fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await op()
        except (nats.errors.Error, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing {timeout:g}s after the kill: {exc!r}") from exc
            await asyncio.sleep(0.1)


@pytest.fixture
async def servers(tmp_path: Path) -> AsyncIterator[ReplicatedServers]:
    credentials = ensure_credentials(tmp_path / "access")
    replicated = ReplicatedServers(tmp_path, credentials=credentials)
    await replicated.start()
    try:
        yield replicated
    finally:
        await replicated.stop()


def _settings(servers: ReplicatedServers, user: str) -> ConnectionSettings:
    assert servers.credentials is not None
    return load_settings(file=servers.credentials.settings_file(user), overrides=servers.settings())


async def test_streams_in_three_copies_survive_a_kill_of_their_leader(servers: ReplicatedServers) -> None:
    settings = _settings(servers, "admin")
    nc, js = await connect_bus(settings, "ha-test")
    try:
        await ensure_streams(js, [PODS_STREAM], replicas=3)
        await ensure_streams(js, [PODS_STREAM])  # a client with the defaults does not scale it down
        info = await js.stream_info(PODS_STREAM.name)
        assert info.config.num_replicas == 3 and info.cluster is not None
        for i in range(50):
            await publish_durable(js, PODS_SUBMIT, b"%d" % i, f"m{i}")
        leader = "nats-server-" + str(info.cluster.leader).rsplit("-", 1)[1]
        os.kill(servers.pid(leader), signal.SIGKILL)
        killed = time.monotonic()
        for i in range(50, 100):  # retried until a new leader takes them; msg ids store each once
            await _while_electing(
                lambda i=i: publish_durable(js, PODS_SUBMIT, b"%d" % i, f"m{i}", timeout=1.0), f"publish m{i}"
            )
        print(f"\nstream writable again {time.monotonic() - killed:.2f}s after its leader was killed")
        # The killed node may have led the JetStream API too: consumer calls wait for the meta
        # leader's election, which can end after the stream's.
        sub = await _while_electing(
            lambda: js.pull_subscribe(PODS_SUBMIT, "ha-reader", stream=PODS_STREAM.name), "pull_subscribe"
        )
        seen: set[bytes] = set()

        async def all_there() -> None:
            # A fetch meets no responder (503) while the new consumer's own leader is elected.
            with contextlib.suppress(nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                for m in await sub.fetch(100, timeout=2):
                    seen.add(m.data)
                    await m.ack()
            assert len(seen) == 100

        await eventually(all_there, timeout=30)
        await servers.restart(leader)  # it rejoins and catches up
    finally:
        await nc.close()


async def test_the_store_follows_a_failover_and_loses_no_confirmed_write(servers: ReplicatedServers) -> None:
    client = redis_client(_settings(servers, "queue"))
    assert isinstance(client, KubusRedis) and client.wait_replicas == 1
    state = ClusterState(client)
    try:
        records = [PodRecord(uid=f"u{i}", namespace="ha", name=f"p{i}", profile="p", manifest=b"{}") for i in range(20)]
        assert await state.put_pods(records[:10]) == [True] * 10  # WAITed: on a replica too
        primary = await servers.primary()
        os.kill(servers.pid(primary), signal.SIGKILL)
        killed = time.monotonic()

        async def stored() -> None:  # transient errors (no primary yet, READONLY) until a replica is promoted
            try:
                assert await state.put_pods(records[10:]) == [True] * 10
            except Exception as exc:
                assert is_transient(exc), repr(exc)
                raise AssertionError(repr(exc)) from exc

        await eventually(stored, timeout=30, interval=0.1)
        print(f"\nstore writable again {time.monotonic() - killed:.2f}s after the primary was killed")
        assert await servers.primary() != primary
        pending = await state.pod_uids_in_phase(PodPhase.PENDING)
        assert pending == {r.uid for r in records}, "a write confirmed before the failover was lost"
        # The scripts run on the new primary (loaded again there: NOSCRIPT, then SCRIPT LOAD).
        write = await state.transition("u0", PodPhase.DELETED)
        assert write.code is StoreCode.OK
        after = await state.get_pod("u0")
        assert after is not None and after.phase is PodPhase.DELETED
    finally:
        await client.aclose()
