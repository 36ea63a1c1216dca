"""`kubus.bus.pull.PullConsumer` against a real NATS server: batches as nats-py's fetch gives them
(what is at hand at once, else the first message to come), each message once, acks and naks
working on what it returns."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError

from kubus.bus import (
    BIND_STREAM,
    Publication,
    PullConsumer,
    bind,
    ensure_pull_consumer,
    ensure_streams,
    in_progress_while,
    publish_durable_many,
)
from kubus.bus.pull import _status_error
from kubus.runtime.service import Service

DURABLE = "test-binder"


async def _consumer(nats: NATS, js: JetStreamContext) -> PullConsumer:
    await ensure_streams(js, [BIND_STREAM])
    return await ensure_pull_consumer(nats, js, BIND_STREAM.name, DURABLE, BIND_STREAM.subjects[0], ack_wait=5)


async def _publish(js: JetStreamContext, *names: str) -> None:
    await publish_durable_many(js, [Publication(bind("p"), name.encode(), f"id/{name}") for name in names])


async def test_a_fetch_takes_what_is_at_hand_at_once_and_each_message_once(nats: NATS, js: JetStreamContext) -> None:
    consumer = await _consumer(nats, js)
    await _publish(js, *(f"m{i}" for i in range(5)))
    began = time.monotonic()
    first = await consumer.fetch(3, timeout=5)
    rest = await consumer.fetch(10, timeout=5)  # 2 at hand: not a wait for 10
    assert time.monotonic() - began < 2.5
    assert [m.data for m in first + rest] == [f"m{i}".encode() for i in range(5)]
    for msg in first + rest:
        assert msg.metadata.num_delivered == 1
        await msg.ack()
    with pytest.raises(TimeoutError):
        await consumer.fetch(10, timeout=0.3)
    await nats.flush()
    assert (await js.stream_info(BIND_STREAM.name)).state.messages == 0  # a work queue: acked is gone
    await consumer.unsubscribe()


async def test_a_fetch_waits_for_the_first_message_to_come(nats: NATS, js: JetStreamContext) -> None:
    consumer = await _consumer(nats, js)

    async def later() -> None:
        await asyncio.sleep(0.3)
        await _publish(js, "late")

    publishing = asyncio.create_task(later())
    began = time.monotonic()
    [msg] = await consumer.fetch(8, timeout=5)
    waited = time.monotonic() - began
    await publishing
    assert msg.data == b"late" and 0.25 < waited < 2.5
    await msg.ack()
    await consumer.unsubscribe()


async def test_work_past_ack_wait_in_progress_is_not_redelivered_and_a_lost_delivery_comes_back(
    nats: NATS, js: JetStreamContext
) -> None:
    """`in_progress_while` keeps a batch being worked on from coming back (a short ack_wait),
    acks nothing itself, and sends nothing once the batch is settled; a delivery dropped unacked
    (lost on its way) comes back after ack_wait, not later."""
    await ensure_streams(js, [BIND_STREAM])
    consumer = await ensure_pull_consumer(nats, js, BIND_STREAM.name, DURABLE, BIND_STREAM.subjects[0], ack_wait=1)
    await _publish(js, "worked", "lost")
    worked, lost = await consumer.fetch(2, timeout=5)
    delivered_at = time.monotonic()
    async with in_progress_while([worked, lost][:1], every=1 / 3):
        again = await consumer.fetch(5, timeout=2.5)  # the lost one only, after about ack_wait
        assert [m.data for m in again] == [b"lost"]
        assert 0.8 < time.monotonic() - delivered_at < 2.0
        assert again[0].metadata.num_delivered == 2
        await again[0].ack()
        with pytest.raises(TimeoutError):  # worked on for 2.5 s more: not redelivered
            await consumer.fetch(5, timeout=1.5)
    assert not worked.is_acked
    await worked.ack()
    async with in_progress_while([worked], every=0.05):  # settled: nothing sent, nothing raised
        await asyncio.sleep(0.2)
    with pytest.raises(TimeoutError):
        await consumer.fetch(5, timeout=1.5)
    await nats.flush()
    assert (await js.stream_info(BIND_STREAM.name)).state.messages == 0
    await consumer.unsubscribe()


async def test_a_nak_brings_the_message_back_with_its_deliveries_counted(nats: NATS, js: JetStreamContext) -> None:
    consumer = await _consumer(nats, js)
    await _publish(js, "again")
    [msg] = await consumer.fetch(4, timeout=5)
    await msg.nak()
    [again] = await consumer.fetch(4, timeout=5)
    assert again.data == b"again" and again.metadata.num_delivered == 2
    await again.ack()
    await consumer.unsubscribe()


async def test_after_unsubscribe_a_fetch_times_out_and_nothing_is_taken(nats: NATS, js: JetStreamContext) -> None:
    consumer = await _consumer(nats, js)
    await consumer.unsubscribe()
    await consumer.unsubscribe()  # idempotent
    await _publish(js, "kept")
    with pytest.raises(TimeoutError):
        await consumer.fetch(4, timeout=0.2)
    other = await PullConsumer(nats, BIND_STREAM.name, DURABLE).subscribe()
    [msg] = await other.fetch(4, timeout=5)  # still there for another replica
    assert msg.data == b"kept"
    await msg.ack()
    await other.unsubscribe()


async def test_a_fetch_from_a_consumer_that_does_not_exist_is_an_error(nats: NATS, js: JetStreamContext) -> None:
    await ensure_streams(js, [BIND_STREAM])
    consumer = await PullConsumer(nats, BIND_STREAM.name, "nobody").subscribe()
    with pytest.raises(ServiceUnavailableError):  # no responders
        await consumer.fetch(4, timeout=2)
    await consumer.unsubscribe()


async def test_bad_arguments_are_refused(nats: NATS) -> None:
    consumer = PullConsumer(nats, BIND_STREAM.name, DURABLE)
    with pytest.raises(RuntimeError, match="before subscribe"):
        await consumer.fetch(1, timeout=1)
    await consumer.subscribe()
    with pytest.raises(ValueError, match="batch"):
        await consumer.fetch(0, timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        await consumer.fetch(1, timeout=0)
    await consumer.unsubscribe()
    with pytest.raises(RuntimeError, match="after unsubscribe"):
        await consumer.subscribe()


@pytest.mark.parametrize(
    ("headers", "kind", "code"),
    [
        ({"Status": "400", "Description": "Bad Request"}, APIError, 400),
        ({"Status": "400"}, APIError, 400),  # no description: nats-py's from_msg fails with KeyError
        ({"Status": "503"}, ServiceUnavailableError, 503),
        ({"Status": "odd"}, APIError, None),
    ],
)
def test_a_status_reply_becomes_an_api_error(headers: dict[str, str], kind: type[APIError], code: int | None) -> None:
    error = _status_error(Msg(None, subject="_INBOX.x", headers=headers))  # type: ignore[arg-type]
    assert type(error) is kind and error.code == code


async def test_a_paced_fetch_after_a_short_one_takes_what_trickled_in_as_one_batch(
    nats: NATS, js: JetStreamContext
) -> None:
    """Service.fetch's pace: after a fetch that came back short, the next waits out the pace,
    so messages published one at a time meanwhile come as one batch; after a full one it does
    not wait."""
    consumer = await _consumer(nats, js)
    service = Service("pacer")
    await _publish(js, "first")
    assert [m.data for m in await service.fetch(consumer, 8, timeout=5, pace=1.0)] == [b"first"]

    async def trickle() -> None:
        for i in range(4):
            await _publish(js, f"t{i}")
            await asyncio.sleep(0.05)

    publishing = asyncio.create_task(trickle())
    batch = await service.fetch(consumer, 8, timeout=5, pace=1.0)
    await publishing
    assert [m.data for m in batch] == [f"t{i}".encode() for i in range(4)], "one batch, not one message"
    await _publish(js, *(f"f{i}" for i in range(3)))
    full = await service.fetch(consumer, 2, timeout=5, pace=1.0)
    began = time.monotonic()
    rest = await service.fetch(consumer, 2, timeout=5, pace=1.0)
    assert len(full) == 2 and [m.data for m in rest] == [b"f2"]
    assert time.monotonic() - began < 0.9, "after a full batch the next fetch does not wait"
    for msg in [*batch, *full, *rest]:
        await msg.ack()
    await consumer.unsubscribe()
