"""The bus against a real NATS: subjects, streams ensured idempotently, durable publish, services connecting."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError

from kubus.bus import (
    BIND_STREAM,
    EVENTS_STREAM,
    MAX_MSG_SIZE,
    NODES_STREAM,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    STREAMS,
    EventKind,
    Publication,
    StreamConfigError,
    bind,
    connect_bus,
    ensure_streams,
    event_filter,
    event_subject,
    node_pods,
    publish_durable,
    publish_durable_many,
    queue_done,
    queue_pop,
    settle,
    token,
    untoken,
)
from kubus.core.settings import ConnectionSettings
from kubus.runtime.service import Service, ServiceState

# -- subjects (no server needed) -------------------------------------------------------------------


def test_subject_names() -> None:
    assert PODS_SUBMIT == "kubus.pods.submit"
    assert PODS_DELETE == "kubus.pods.delete"
    assert queue_pop("default-scheduler") == "kubus.queue.default-scheduler.pop"
    assert queue_done("gpu") == "kubus.queue.gpu.done"
    assert bind("gpu") == "kubus.bind.gpu"
    assert node_pods("node-1") == "kubus.node.node-1.pods"
    assert event_subject(EventKind.NODE_ADDED, "n1") == "kubus.events.node.added.n1"
    assert event_subject("pod.bound", "ns/web-0") == "kubus.events.pod.bound.ns.web-0"
    assert event_filter() == "kubus.events.>"
    assert event_filter(EventKind.POD_BOUND) == "kubus.events.pod.bound.>"


@pytest.mark.parametrize("raw", ["a.b", "*", ">", "with space", "tab\there", "100%", "ünïcode", "a/b:c", "x\x7f"])
def test_tokens_are_safe_and_reversible(raw: str) -> None:
    escaped = token(raw)
    assert not any(c in escaped for c in ".*> \t\x7f")
    assert untoken(escaped) == raw


def test_bad_tokens_and_kinds() -> None:
    with pytest.raises(ValueError):
        token("")
    with pytest.raises(ValueError):
        event_subject("pod.exploded", "ns/p")
    assert node_pods("gpu.node-1") == "kubus.node.gpu%2Enode-1.pods"


def test_stream_subjects_do_not_overlap_and_cover_every_subject() -> None:
    captured = {spec.name: spec.subjects for spec in STREAMS}
    assert captured[PODS_STREAM.name] == ("kubus.pods.>",)
    for subject, stream in [
        (PODS_SUBMIT, PODS_STREAM),
        (PODS_DELETE, PODS_STREAM),
        (PODS_REQUEUE, PODS_STREAM),
        (bind("p"), BIND_STREAM),
        (node_pods("n"), NODES_STREAM),
        (event_subject("node.added", "n"), EVENTS_STREAM),
    ]:
        owners = [spec for spec in STREAMS if any(_matches(f, subject) for f in spec.subjects)]
        assert owners == [stream], subject
    assert not any(_matches(f, queue_pop("p")) for spec in STREAMS for f in spec.subjects)  # core request/reply


def _matches(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    for i, part in enumerate(p):
        if part == ">":
            return len(s) > i
        if i >= len(s) or (part != "*" and part != s[i]):
            return False
    return len(p) == len(s)


# -- against NATS ------------------------------------------------------------------------------------


async def test_connect_bus_and_ensure_streams_idempotently(nats_url: str, js: JetStreamContext) -> None:
    nc, bus_js = await connect_bus(ConnectionSettings(nats_url=nats_url), "kubus-test-bus")
    try:
        await ensure_streams(bus_js)
        await ensure_streams(bus_js)  # again: no error, no change
        await asyncio.gather(ensure_streams(bus_js), ensure_streams(js))  # concurrently from two clients
        names = sorted(info.config.name for info in await js.streams_info())
        assert names == sorted(spec.name for spec in STREAMS)
        for spec in STREAMS:
            config = (await js.stream_info(spec.name)).config
            assert config.subjects == list(spec.subjects)
            assert config.storage == StorageType.FILE
            assert config.max_msg_size == MAX_MSG_SIZE
            assert config.duplicate_window == spec.duplicate_window
        assert (await js.stream_info(PODS_STREAM.name)).config.retention == RetentionPolicy.WORK_QUEUE
        assert (await js.stream_info(BIND_STREAM.name)).config.retention == RetentionPolicy.WORK_QUEUE
        assert (await js.stream_info(EVENTS_STREAM.name)).config.retention == RetentionPolicy.LIMITS
        assert (await js.stream_info(EVENTS_STREAM.name)).config.max_age == 3600
    finally:
        await nc.close()


async def test_streams_deleted_and_made_again_at_once_are_made_every_time(js: JetStreamContext) -> None:
    """nats-server sometimes fails to create a stream's store right after the streams were
    deleted (about once in 50 rounds); `ensure_streams` tries again, so every round works."""
    for _ in range(150):
        await ensure_streams(js)
        for spec in STREAMS:
            await js.delete_stream(spec.name)
    await ensure_streams(js)
    assert sorted(s.config.name or "" for s in await js.streams_info()) == sorted(s.name for s in STREAMS)


async def test_ensure_streams_updates_a_drifted_stream_and_refuses_an_impossible_change(js: JetStreamContext) -> None:
    await js.add_stream(StreamConfig(name=EVENTS_STREAM.name, subjects=list(EVENTS_STREAM.subjects), max_age=60))
    await ensure_streams(js, [EVENTS_STREAM])
    assert (await js.stream_info(EVENTS_STREAM.name)).config.max_age == 3600

    await js.add_stream(StreamConfig(name=PODS_STREAM.name, subjects=list(PODS_STREAM.subjects)))  # limits retention
    with pytest.raises(StreamConfigError, match=PODS_STREAM.name):
        await ensure_streams(js, [PODS_STREAM])


async def test_publish_durable_stores_a_message_once_per_msg_id(js: JetStreamContext) -> None:
    await ensure_streams(js)
    first = await publish_durable(js, PODS_SUBMIT, b"pod-a", "uid-a/1")
    again = await publish_durable(js, PODS_SUBMIT, b"pod-a", "uid-a/1")
    other = await publish_durable(js, PODS_SUBMIT, b"pod-b", "uid-b/1", headers={"Kubus-Kind": "Pod"})
    assert (first.duplicate, again.duplicate, other.duplicate) in [(None, True, None), (False, True, False)]
    assert again.seq == first.seq
    assert (await js.stream_info(PODS_STREAM.name)).state.messages == 2
    stored = await js.get_msg(PODS_STREAM.name, other.seq)
    assert stored.data == b"pod-b"
    assert stored.headers is not None and stored.headers["Kubus-Kind"] == "Pod"
    assert stored.headers["Nats-Msg-Id"] == "uid-b/1"


async def test_publish_durable_many_stores_each_once_in_order(js: JetStreamContext) -> None:
    await ensure_streams(js)
    messages = [Publication(PODS_SUBMIT, f"pod-{i}".encode(), f"uid-{i % 50}/1") for i in range(60)]
    acks = await publish_durable_many(js, messages)
    assert len(acks) == 60
    assert [a.seq for a in acks[:50]] == sorted(a.seq for a in acks[:50])
    assert all(acks[i].duplicate and acks[i].seq == acks[i - 50].seq for i in range(50, 60))
    assert (await js.stream_info(PODS_STREAM.name)).state.messages == 50
    stored = await js.get_msg(PODS_STREAM.name, acks[7].seq)
    assert stored.data == b"pod-7"
    assert stored.headers is not None and stored.headers["Nats-Msg-Id"] == "uid-7/1"


async def test_publish_durable_many_raises_when_the_stream_is_missing(js: JetStreamContext) -> None:
    with pytest.raises(NoStreamResponseError):
        await publish_durable_many(js, [Publication(PODS_SUBMIT, b"x", "uid-x/1")], timeout=0.5)


async def test_publish_durable_many_puts_a_rejected_message_in_its_place_and_stores_the_rest(
    js: JetStreamContext,
) -> None:
    await ensure_streams(js, [dataclasses.replace(PODS_STREAM, max_msg_size=64)])
    messages = [Publication(PODS_SUBMIT, b"small-a", "a/1"), Publication(PODS_SUBMIT, b"x" * 100, "big/1")]
    messages.append(Publication(PODS_SUBMIT, b"small-b", "b/1"))
    acks = await publish_durable_many(js, messages, return_exceptions=True)
    assert isinstance(acks[1], APIError) and not isinstance(acks[0], Exception) and not isinstance(acks[2], Exception)
    assert (await js.stream_info(PODS_STREAM.name)).state.messages == 2
    with pytest.raises(APIError):  # without return_exceptions the rejection is raised
        await publish_durable_many(js, messages[1:2])


async def test_a_refused_message_fails_at_once_not_after_the_ack_timeout(js: JetStreamContext) -> None:
    await ensure_streams(js, [dataclasses.replace(PODS_STREAM, max_msg_size=64)])
    began = asyncio.get_running_loop().time()
    [refused] = await publish_durable_many(
        js, [Publication(PODS_SUBMIT, b"x" * 100, "big/1")], timeout=30, return_exceptions=True
    )
    assert isinstance(refused, APIError)
    assert asyncio.get_running_loop().time() - began < 15  # the stream's answer, not the 30 s wait


async def test_publishers_sharing_a_connection_from_its_first_publish_each_get_their_acks(
    nats_url: str, js: JetStreamContext
) -> None:
    await ensure_streams(js, [PODS_STREAM])
    fresh, fresh_js = await connect_bus(ConnectionSettings(nats_url=nats_url), "fresh")
    try:
        batches = [[Publication(PODS_SUBMIT, f"{t}-{i}".encode(), f"{t}/{i}") for i in range(40)] for t in range(4)]
        acks = await asyncio.gather(*(publish_durable_many(fresh_js, b) for b in batches))
        seqs = [a.seq for batch in acks for a in batch if not isinstance(a, Exception)]
        assert len(seqs) == 160 and len(set(seqs)) == 160
        assert (await js.stream_info(PODS_STREAM.name)).state.messages == 160
    finally:
        await fresh.close()


async def test_work_queue_removes_acked_messages(js: JetStreamContext) -> None:
    await ensure_streams(js)
    await publish_durable(js, bind("gpu"), b"reserved", "uid-1/1")
    sub = await js.pull_subscribe(bind("gpu"), durable="binder-gpu", stream=BIND_STREAM.name)
    [msg] = await sub.fetch(1, timeout=2)
    await msg.ack_sync()
    assert (await js.stream_info(BIND_STREAM.name)).state.messages == 0


async def test_publish_durable_retries_until_the_stream_exists(js: JetStreamContext) -> None:
    with pytest.raises(NoStreamResponseError):
        await publish_durable(js, PODS_SUBMIT, b"x", "uid-x/1", attempts=2, backoff=0.01)

    publishing = asyncio.create_task(publish_durable(js, PODS_SUBMIT, b"y", "uid-y/1", attempts=20, backoff=0.02))
    await asyncio.sleep(0.05)  # let the first attempts fail: no stream yet
    await ensure_streams(js, [PODS_STREAM])
    ack = await asyncio.wait_for(publishing, 10)
    assert ack.stream == PODS_STREAM.name


async def test_after_settle_another_client_reaches_a_subscription_at_once(nats_url: str, nats: NATS) -> None:
    # nats-py's flush() writes its PING ahead of a SUB still in the client's buffer, so a request
    # right after flush() can meet "no responders" (a service test flaked so in CI). Megabytes
    # queued ahead of the SUB make the window wide: flush() here fails this test.
    async def echo(msg) -> None:  # type: ignore[no-untyped-def]
        await msg.respond(msg.data)

    responder, _ = await connect_bus(ConnectionSettings(nats_url=nats_url), "responder")
    try:
        for i in range(20):
            for _ in range(8):
                await responder.publish("kubus.test.nobody", bytes(512 * 1024))
            sub = await responder.subscribe(f"kubus.test.settle.{i}", cb=echo)
            await settle(responder)
            reply = await nats.request(f"kubus.test.settle.{i}", b"%d" % i, timeout=2)
            assert reply.data == b"%d" % i
            await sub.unsubscribe()
    finally:
        await responder.close()


async def test_connect_bus_to_nothing_is_a_clear_error() -> None:
    with pytest.raises(ConnectionError, match=r"nats://127\.0\.0\.1:1"):
        await connect_bus(ConnectionSettings(nats_url="nats://127.0.0.1:1"), "nobody", wait=0.3)


async def test_a_service_connects_ensures_streams_and_closes(
    nats_url: str, redis_url: str, nats: NATS, redis: aioredis.Redis
) -> None:
    class Pinger(Service):
        async def on_start(self) -> None:
            assert self.nc is not None and self.redis is not None
            sub = self.intake(await self.nc.subscribe("kubus.test.ping", cb=self._pong))
            assert sub is not None

        async def _pong(self, msg) -> None:  # type: ignore[no-untyped-def]
            assert self.redis is not None
            await self.redis.incr(b"pings")
            await msg.respond(b"pong")

    service = Pinger("pinger", ConnectionSettings(nats_url=nats_url, redis_url=redis_url))
    async with service:
        reply = await nats.request("kubus.test.ping", b"", timeout=2)
        assert reply.data == b"pong"
        assert await redis.get(b"pings") == b"1"
        assert len(await nats.jetstream().streams_info()) == len(STREAMS)
    assert service.state is ServiceState.STOPPED
    assert service.nc is not None and service.nc.is_closed
