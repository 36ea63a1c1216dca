"""Connecting to NATS, making sure kubus' streams exist, and publishing durably."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import PubAck, RetentionPolicy, StorageType, StreamConfig

from kubus.bus.subjects import STREAMS, Retention, StreamSpec
from kubus.core.errors import KubusError
from kubus.core.settings import ConnectionSettings, nats_connect_options

__all__ = [
    "MSG_ID_HEADER",
    "Publication",
    "StreamConfigError",
    "connect_bus",
    "ensure_streams",
    "publish_durable",
    "publish_durable_many",
    "settle",
    "stream_config",
]

MSG_ID_HEADER = "Nats-Msg-Id"
"""JetStream stores a message once per stream duplicate window for each value of this header."""

_STREAM_NAME_IN_USE = 10058  # JetStream API err_code: a stream of that name exists with another config
_STREAM_STORE_FAILED = 10049  # JetStream API err_code: "error creating store for stream"
_STORE_TRIES = 3
"""Tries of a stream whose store the server failed to create. nats-server 2.15 fails so now and
then when a stream is created right after the account's streams were deleted (its folders still
being removed): once in about 50 back-to-back delete-and-create rounds here; the next try works."""

_log = logging.getLogger("kubus.bus")


class StreamConfigError(KubusError, RuntimeError):
    """A stream exists with a configuration that cannot be changed to kubus' (e.g. its retention)."""


async def connect_bus(
    settings: ConnectionSettings, name: str, *, wait: float | None = None, js_timeout: float = 5.0
) -> tuple[NATS, JetStreamContext]:
    """Connect to NATS as client ``name`` and return the client and its JetStream context.

    The first connection is retried (every half second, each failure logged) for ``wait``
    seconds (default: ``settings.connect_timeout``), then ConnectionError names the URL and the
    last error. Once connected, the client reconnects forever after a lost connection
    (publishes are buffered meanwhile) and logs disconnects, reconnects and asynchronous errors.
    """

    async def on_error(exc: Exception) -> None:
        _log.warning("event=%r client=%s error=%r", "nats error", name, exc)

    async def on_disconnected() -> None:
        if nc.is_closed:  # our own close() or drain(), not a lost connection
            _log.debug("event=%r client=%s", "nats closed", name)
        else:
            _log.warning("event=%r client=%s", "nats disconnected", name)

    async def on_reconnected() -> None:
        url = nc.connected_url.geturl() if nc.connected_url else ""
        _log.info("event=%r client=%s url=%s", "nats reconnected", name, url)

    wait = settings.connect_timeout if wait is None else wait
    nc = NATS()
    try:
        async with asyncio.timeout(wait):
            await nc.connect(
                **nats_connect_options(settings),
                name=name,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,  # type: ignore[arg-type]  # seconds; nats-py annotates int
                error_cb=on_error,
                disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected,
            )
    except TimeoutError as exc:
        last = nc.last_error
        await nc.close()
        raise ConnectionError(f"NATS at {settings.nats_url} did not answer within {wait:g}s: {last!r}") from exc
    except BaseException:
        # Cancelled (a stop during start) or refused (bad credentials): no client left reconnecting.
        with contextlib.suppress(Exception):
            await nc.close()
        raise
    return nc, nc.jetstream(timeout=js_timeout)


async def settle(nc: NATS, timeout: float = 10.0) -> None:
    """Return once the server has processed every command this client sent before the call, its
    subscriptions above all: then a publish from any client reaches them.

    `nc.flush()` does not promise that: nats-py writes its PING straight to the socket, ahead of
    commands (a SUB) still in the client's pending buffer, so its PONG can come back before the
    server has seen the SUB. A message this client publishes to an inbox of its own comes back only
    after everything queued before it. Raises nats' TimeoutError after `timeout` seconds.
    """
    inbox = nc.new_inbox()
    probe = await nc.subscribe(inbox, max_msgs=1)
    try:
        await nc.publish(inbox, b"")
        await probe.next_msg(timeout=timeout)
    finally:
        with contextlib.suppress(Exception):
            await probe.unsubscribe()


def stream_config(spec: StreamSpec, *, replicas: int = 1) -> StreamConfig:
    """The JetStream configuration of ``spec``: file storage, ``replicas`` copies."""
    return StreamConfig(
        name=spec.name,
        description=spec.description,
        subjects=list(spec.subjects),
        retention=RetentionPolicy.WORK_QUEUE if spec.retention is Retention.WORK_QUEUE else RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msg_size=spec.max_msg_size,
        max_age=spec.max_age,
        duplicate_window=spec.duplicate_window,
    )


async def ensure_streams(js: JetStreamContext, specs: Iterable[StreamSpec] = STREAMS, *, replicas: int = 1) -> None:
    """Create every stream of ``specs``, or update it to the spec if it exists with another config.

    Idempotent and safe to run from several services at once (creating an identical stream is a
    no-op for JetStream). ``replicas`` is a floor, never a ceiling: a stream that keeps more
    copies keeps them (a client that does not know the cluster is replicated, `kubus apply`
    with the defaults, must not scale its streams down). Raises StreamConfigError when an
    existing stream cannot be changed to the spec (retention or storage differ); JetStream
    errors otherwise.
    """
    for spec in specs:
        config = stream_config(spec, replicas=replicas)
        try:
            await _add_stream(js, config)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
            existing = (await js.stream_info(spec.name)).config
            if (existing.num_replicas or 1) > replicas:
                config = stream_config(spec, replicas=existing.num_replicas or 1)
                if _same_stream(existing, config):
                    continue
            try:
                await js.update_stream(config)
            except nats.js.errors.APIError as update_exc:
                raise StreamConfigError(
                    f"stream {spec.name}: exists with a configuration that cannot be updated to kubus' "
                    f"({update_exc.description}); delete it or fix it by hand"
                ) from update_exc
            _log.info("event=%r stream=%s", "stream updated", spec.name)


async def _add_stream(js: JetStreamContext, config: StreamConfig) -> None:
    for attempt in range(1, _STORE_TRIES + 1):
        try:
            await js.add_stream(config)
            return
        except nats.js.errors.ServerError as exc:
            if exc.err_code != _STREAM_STORE_FAILED or attempt == _STORE_TRIES:
                raise
            _log.warning("event=%r stream=%s attempt=%d", "stream store not created; again", config.name, attempt)
            await asyncio.sleep(0.1 * attempt)


def _same_stream(existing: StreamConfig, wanted: StreamConfig) -> bool:
    """Whether ``existing`` (as the server reports it) already is ``wanted`` in every field kubus sets."""
    return all(
        getattr(existing, name) == getattr(wanted, name)
        for name in (
            "subjects",
            "retention",
            "storage",
            "num_replicas",
            "max_msg_size",
            "max_age",
            "duplicate_window",
            "description",
        )
    )


_RETRIED = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)
"""Errors of a JetStream publish (or its ack) after which the message is published again: a
timeout, JetStream briefly unavailable."""


async def publish_durable(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    msg_id: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 2.0,
    attempts: int = 5,
    backoff: float = 0.1,
) -> PubAck:
    """Publish to JetStream and wait until the message is stored; return the ack.

    ``msg_id`` goes in the ``Nats-Msg-Id`` header, so retrying (here, on a timeout or while
    JetStream is briefly unavailable, up to ``attempts`` tries with doubling ``backoff``) or
    publishing the same logical message again within the stream's duplicate window stores it
    once: ``ack.duplicate`` is then True. Raises the last error when every attempt failed,
    nats.js.errors.APIError at once for a rejected message (e.g. too large).
    """
    all_headers = {**(headers or {}), MSG_ID_HEADER: msg_id}
    delay = backoff
    for attempt in range(1, attempts + 1):
        try:
            return await js.publish(subject, payload, timeout=timeout, headers=dict(all_headers))
        except _RETRIED as exc:
            if attempt == attempts:
                raise
            _log.warning(
                "event=%r subject=%s msg_id=%s attempt=%d error=%r", "publish retry", subject, msg_id, attempt, exc
            )
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class Publication:
    """One message for `publish_durable_many`."""

    subject: str
    payload: bytes
    msg_id: str
    """Deduplication id (``Nats-Msg-Id``), as for `publish_durable`."""
    headers: Mapping[str, str] | None = None


class _StreamAcks:
    """Where the streams' acks of one connection's asynchronous durable publishes come back:
    one subscription on a wildcard inbox, one future per message, keyed by a counter. What
    nats-py's ``publish_async`` does, without its semaphore, random token, second done-callback
    and PubAck parsing per message (about a third of its CPU per message); and a refusal (a
    message too large) fails its future at once, where nats-py's raises in its callback and
    leaves the future to time out."""

    __slots__ = ("_counter", "_futures", "_prefix", "_sub", "_subscribed")

    def __init__(self, nc: NATS) -> None:
        self._prefix = nc.new_inbox() + "."
        self._futures: dict[str, asyncio.Future[PubAck]] = {}
        self._counter = itertools.count()
        self._sub: object = None
        self._subscribed = asyncio.Event()

    async def subscribe(self, nc: NATS) -> None:
        try:
            self._sub = await nc.subscribe(self._prefix + "*", cb=self._on_ack)
        finally:
            self._subscribed.set()

    async def ready(self) -> None:
        """Once the subscription is made (by the first publisher on the connection)."""
        await self._subscribed.wait()
        if self._sub is None:
            raise nats.errors.ConnectionClosedError

    def expect(self) -> tuple[str, asyncio.Future[PubAck]]:
        """A reply subject for one message, and the future its ack will complete."""
        token = str(next(self._counter))
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        return self._prefix + token, future

    def forget(self, reply: str) -> None:
        """No ack is awaited on ``reply`` any more (its message was not sent, or timed out)."""
        self._futures.pop(reply[len(self._prefix) :], None)

    async def _on_ack(self, msg: Msg) -> None:
        future = self._futures.pop(msg.subject[len(self._prefix) :], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":  # no responders: no stream (yet)
            future.set_exception(nats.js.errors.NoStreamResponseError())
            return
        try:
            reply = orjson.loads(msg.data)
            if "error" in reply:
                nats.js.errors.APIError.from_error(reply["error"])  # raises the error's class
            future.set_result(PubAck(stream=reply["stream"], seq=reply["seq"], duplicate=reply.get("duplicate")))
        except (nats.js.errors.APIError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            future.set_exception(exc if isinstance(exc, nats.js.errors.APIError) else nats.js.errors.APIError())


_ACKS: weakref.WeakKeyDictionary[NATS, _StreamAcks] = weakref.WeakKeyDictionary()


async def _stream_acks(js: JetStreamContext) -> tuple[NATS, _StreamAcks]:
    # nats-py's JetStreamContext keeps its connection private; kubus' contexts all come from
    # `NATS.jetstream()`, whose ``_nc`` is that connection.
    nc: NATS = js._nc
    acks = _ACKS.get(nc)
    if acks is None:
        acks = _ACKS[nc] = _StreamAcks(nc)
        try:
            await acks.subscribe(nc)
        except BaseException:
            del _ACKS[nc]
            raise
    else:
        await acks.ready()
    return nc, acks


async def publish_durable_many(
    js: JetStreamContext, messages: Sequence[Publication], *, timeout: float = 2.0, return_exceptions: bool = False
) -> list[PubAck | Exception]:
    """`publish_durable` for many messages at the cost of about one round trip: all are sent at
    once (each with a reply subject its stream's ack comes back on), then every ack is awaited.
    A message whose ack does not come (timeout, JetStream briefly unavailable) is published
    again alone with `publish_durable`, which its msg id makes store it once. Acks in the order
    of ``messages``; raises like `publish_durable` when a message cannot be stored, or, with
    ``return_exceptions``, puts that error in the message's place and goes on."""
    nc, stream_acks = await _stream_acks(js)
    pending: list[asyncio.Future[PubAck] | None] = []
    replies: list[str] = []
    for m in messages:
        reply, awaited = stream_acks.expect()
        try:
            headers = {**m.headers, MSG_ID_HEADER: m.msg_id} if m.headers else {MSG_ID_HEADER: m.msg_id}
            await nc.publish(m.subject, m.payload, reply=reply, headers=headers)
        except nats.errors.Error:
            stream_acks.forget(reply)
            awaited.cancel()
            pending.append(None)  # published again below
            continue
        pending.append(awaited)
        replies.append(reply)
    # One wait for every ack (not a wait_for per message: a timer each, which showed in profiles).
    futures = [f for f in pending if f is not None]
    if futures:
        try:
            await asyncio.wait(futures, timeout=timeout)
        finally:  # the acks that did not come (or are no longer awaited) are not kept for
            for reply, awaited in zip(replies, futures, strict=True):
                if not awaited.done():
                    stream_acks.forget(reply)
    acks: list[PubAck | Exception] = []
    for m, future in zip(messages, pending, strict=True):
        if future is not None:
            if future.done() and not future.cancelled():
                error = future.exception()
                if error is None:
                    acks.append(future.result())
                    continue
                if not isinstance(error, _RETRIED):
                    if not (return_exceptions and isinstance(error, nats.errors.Error | nats.js.errors.Error)):
                        raise error
                    acks.append(error)  # rejected (e.g. too large): publishing again cannot help
                    continue
            else:
                future.cancel()
        try:
            acks.append(await publish_durable(js, m.subject, m.payload, m.msg_id, headers=m.headers, timeout=timeout))
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            if not return_exceptions:
                raise
            acks.append(exc)
    return acks
