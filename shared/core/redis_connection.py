"""The services' Redis connections: redis-py's, with two costs per command taken off and one
leak closed.

**Packing.** redis-py's asyncio connections pack every argument in Python: with scripts of ten
arguments per pod that showed as a tenth of the cycle's CPU. hiredis, already there for parsing
replies, packs the same bytes about six times faster. Arguments of any type other than str,
bytes, int and float (and command names redis-py splits, "CLIENT SETINFO") go the redis-py way,
which also keeps its errors (DataError for a bool or None).

**The reply timeout.** With a ``socket_timeout``, redis-py starts and cancels a timer around the
read of every reply, even one already in the buffer: in a pipeline of 500 commands that doubled
the client's CPU per command (10.5 against 5.3 µs). Here the parser times each wait on the
socket instead, so a pipeline's replies cost about one timer per round trip, and a Redis that
stops answering still raises redis' TimeoutError after ``socket_timeout`` (the connection is
dropped, as redis-py does). A read given its own timeout (``timeout=``) is left to redis-py.

**The leak.** A redis-py pipeline that runs scripts checks them (SCRIPT EXISTS, SCRIPT LOAD)
before the ``try`` whose ``finally`` gives its connection back to the pool: when Redis goes
away at that moment, the connection is never given back ("Unclosed Pipeline client" when the
pipeline is collected). Every kill of Redis under load leaked a few, until the pool was empty and
every command failed with "No connection available" long after Redis was back. `KubusRedis`'s
pipelines give the connection back on that path too.

**High availability.** Behind Sentinel (`sentinel_client`) the client finds the primary through
the sentinels on every new connection (redis-py's ``master_for``), drops the connections of a
primary that was demoted (its READONLY turns into a ConnectionError) and, like the plain client,
blocks for a free connection instead of failing. Its scripts are loaded again on the new primary
by redis-py itself (EVALSHA, then SCRIPT LOAD on NOSCRIPT). `KubusRedis.confirm_replicated`
makes a write that must survive a failover wait until ``wait_replicas`` replicas have it (WAIT).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["DiskError", "KubusRedis", "ReplicationTimeout", "fast_connection", "sentinel_client"]

_PACKABLE = frozenset({str, bytes, int, float})
_CLASSES: dict[type, type] = {}


class DiskError(ResponseError):
    """Redis refuses writes (and PING) because it cannot write to its disk: a full or read-only
    disk under its append-only file or snapshot (``MISCONF``). Passes once the disk takes writes
    again; redis-py has no class of its own for it (a plain ResponseError)."""


class ReplicationTimeout(RedisTimeoutError):
    """Fewer replicas than required confirmed a write in time (WAIT): the write is on the primary
    but a failover could still lose it, so it is not taken as done. Transient, like any redis
    TimeoutError: the step is retried (idempotent), by which time the replica has caught up or
    a new one is there."""

    transient = True


class _TimedSocketReads(_AsyncHiredisParser):
    """hiredis parsing whose waits on the socket give up after ``timeout`` seconds (None: never).
    Its errors tell a disk that refuses writes (`DiskError`) from a bad command."""

    __slots__ = ("timeout",)

    EXCEPTION_CLASSES = {**_AsyncHiredisParser.EXCEPTION_CLASSES, "MISCONF": DiskError}  # noqa: RUF012  # read only

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self.timeout: float | None = None

    async def read_from_socket(self) -> Any:  # Any: a reply, as redis-py's parser returns it
        if self.timeout is None:
            return await super().read_from_socket()  # type: ignore[no-untyped-call]
        try:
            async with asyncio.timeout(self.timeout):
                return await super().read_from_socket()  # type: ignore[no-untyped-call]
        except TimeoutError as exc:
            raise RedisTimeoutError(f"no reply from Redis within {self.timeout:g}s") from exc


class _Pipeline(Pipeline):
    """redis-py's pipeline, whose connection goes back to the pool when checking its scripts fails."""

    async def load_scripts(self) -> None:
        try:
            await super().load_scripts()  # type: ignore[no-untyped-call]
        except BaseException:
            await self.reset()  # type: ignore[no-untyped-call]
            raise


class KubusRedis(aioredis.Redis):
    """The services' Redis client: redis-py's, with `_Pipeline` for pipelines, and the WAIT
    that makes a write survive a failover (`confirm_replicated`)."""

    wait_replicas: int = 0
    """Replicas a write that must survive a failover waits for (`confirm_replicated`); 0: none
    (a single Redis, or replication whose loss on failover is accepted)."""
    wait_timeout: float = 1.0
    """Seconds `confirm_replicated` waits for them before raising ReplicationTimeout."""
    sentinel_manager: Sentinel | None = None
    """The sentinels this client finds its primary through (closed with it), or None."""

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    async def confirm_replicated(self, fence_key: str) -> int:
        """Return once every write this process made before the call (on any of its
        connections) is on ``wait_replicas`` replicas; at once when ``wait_replicas`` is 0.

        WAIT counts the replicas that acknowledged the connection's own last write, so a write
        of another pooled connection, or none at all (a redelivered step whose script found the
        work done), would prove nothing: one round trip increments ``fence_key`` and WAITs on the
        same connection, and the replication stream is in order, so the replicas that have the
        fence have every earlier write too. Returns the replicas that acknowledged; raises
        ReplicationTimeout when fewer than ``wait_replicas`` did within ``wait_timeout`` seconds,
        redis errors as any command.
        """
        if self.wait_replicas <= 0:
            return 0
        pipe = self.pipeline(transaction=False)
        pipe.incr(fence_key)
        pipe.execute_command("WAIT", self.wait_replicas, max(1, round(self.wait_timeout * 1000)))
        _, acked = await pipe.execute()
        if int(acked) < self.wait_replicas:
            raise ReplicationTimeout(
                f"{acked} of {self.wait_replicas} replica(s) confirmed the write within {self.wait_timeout:g}s"
            )
        return int(acked)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            if self.sentinel_manager is not None:
                await self.sentinel_manager.aclose()


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's Sentinel pool (connections to the primary the sentinels name) that blocks for
    a free connection, as the plain client's pool does, instead of raising."""


def sentinel_client(
    sentinels: Sequence[tuple[str, int]],
    master: str,
    *,
    # Any: keyword arguments of redis-py's Sentinel and connections, passed on as they are.
    sentinel_options: dict[str, Any],
    **options: Any,
) -> KubusRedis:
    """A `KubusRedis` on the primary that ``sentinels`` name for ``master``: each new connection
    asks them where it is (the first that answers and sees it up), so after a failover the
    client follows; until the sentinels name a new one, commands fail with ConnectionError
    (MasterNotFoundError), a transient error. ``sentinel_options``: the connections to the
    sentinels (timeouts, their own login); ``options``: the connections to the primary."""
    options.setdefault("max_connections", 32)
    sentinel = Sentinel(list(sentinels), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    client = sentinel.master_for(master, redis_class=KubusRedis, connection_pool_class=_BlockingSentinelPool, **options)
    assert isinstance(client, KubusRedis)
    pool = client.connection_pool
    pool.connection_class = fast_connection(pool.connection_class)
    client.sentinel_manager = sentinel
    return client


def fast_connection(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (plain, TLS or Unix socket) with hiredis packing its commands and
    one reply timer per socket wait."""
    cls = _CLASSES.get(connection_class)
    if cls is None:

        # Any: methods of a class made at run time (``type()`` below) over whichever redis-py
        # connection class it extends, forwarding redis-py's own (untyped) arguments.
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("parser_class", _TimedSocketReads)
            connection_class.__init__(self, *args, **kwargs)

        def pack_command(self: Any, *args: Any) -> list[bytes]:
            if _packable(args):
                return [hiredis.pack_command(args)]
            return connection_class.pack_command(self, *args)

        async def read_response(
            self: Any,
            disable_decoding: bool = False,
            timeout: float | None = None,
            *,
            disconnect_on_error: bool = True,
            push_request: bool | None = False,
        ) -> Any:
            parser = self._parser
            if isinstance(parser, _TimedSocketReads):
                if timeout is None:  # the connection's socket_timeout, kept by the parser
                    parser.timeout, timeout = self.socket_timeout, math.inf
                else:
                    parser.timeout = None
            return await connection_class.read_response(
                self,
                disable_decoding,
                timeout,
                disconnect_on_error=disconnect_on_error,
                push_request=push_request,
            )

        cls = _CLASSES[connection_class] = type(
            f"Fast{connection_class.__name__}",
            (connection_class,),
            {"__init__": __init__, "pack_command": pack_command, "read_response": read_response},
        )
    return cls


def _packable(args: tuple[object, ...]) -> bool:
    """Whether hiredis makes the bytes redis-py would: redis-py splits a str command name at
    any ASCII whitespace, a bytes one when it holds a space."""
    first = args[0]
    if isinstance(first, str):
        name = first.encode()
        if name.split() != [name]:
            return False
    elif not isinstance(first, bytes) or b" " in first:
        return False
    return all(type(a) in _PACKABLE for a in args)
