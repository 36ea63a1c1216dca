"""Opening the cluster's NATS and Redis for a CLI command, with the errors the CLI reports.

`UsageError` is a user mistake (exit 2), `Unreachable` a server that does not answer (exit 1);
both carry one line. URLs in messages never show a password.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import nats.errors
import redis.exceptions
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from kubus.bus.connection import connect_bus, ensure_streams
from kubus.core.errors import KubusError, UsageError
from kubus.core.settings import ConnectionSettings, redis_client
from kubus.store.cluster_state import ClusterState

__all__ = ["Unreachable", "UsageError", "open_bus", "open_store", "safe_url"]


class Unreachable(KubusError):
    """NATS or Redis did not answer; str() is one line naming the URL (exit 1)."""


def safe_url(url: str) -> str:
    """``url`` (or a comma-separated list of them) without any password."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.password is not None:
            host = parts.hostname or ""
            if parts.port is not None:
                host = f"{host}:{parts.port}"
            user = parts.username or ""
            parts = parts._replace(netloc=f"{user}:***@{host}")
        out.append(urlunsplit(parts))
    return ",".join(out)


@contextlib.asynccontextmanager
async def open_store(settings: ConnectionSettings, *, check: bool = True) -> AsyncIterator[ClusterState]:
    """A ClusterState on the settings' Redis, checked with PING unless ``check`` is False (a
    caller that copes with a Redis that is away). Raises Unreachable."""
    client = redis_client(settings)
    try:
        if check:
            try:
                await client.ping()
            except (OSError, redis.exceptions.RedisError) as exc:
                raise Unreachable(f"cannot reach Redis at {safe_url(settings.redis_url)}: {_short(exc)}") from None
        yield ClusterState(client)
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


@contextlib.asynccontextmanager
async def open_bus(
    settings: ConnectionSettings, name: str = "kubus-cli"
) -> AsyncIterator[tuple[NATS, JetStreamContext]]:
    """A NATS client and its JetStream, kubus' streams ensured (so what is published now waits
    durably for services that have not started yet). Drained on exit. Raises Unreachable."""
    try:
        nc, js = await connect_bus(settings, name)
    except ConnectionError as exc:
        if settings.nats_url in str(exc):  # connect_bus's own message names the URL and the last error
            raise Unreachable(str(exc).replace(settings.nats_url, safe_url(settings.nats_url))) from None
        raise Unreachable(f"cannot reach NATS at {safe_url(settings.nats_url)}: {_short(exc)}") from None
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        raise Unreachable(f"cannot reach NATS at {safe_url(settings.nats_url)}: {_short(exc)}") from None
    try:
        try:
            await ensure_streams(js, replicas=settings.stream_replicas)
        except (TimeoutError, nats.errors.Error) as exc:
            raise Unreachable(
                f"NATS at {safe_url(settings.nats_url)} has no working JetStream: {_short(exc)}"
            ) from None
        yield nc, js
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()
        with contextlib.suppress(Exception):
            await nc.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
