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
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["DiskError", "KubusRedis", "fast_connection"]

_PACKABLE = frozenset({str, bytes, int, float})
_CLASSES: dict[type, type] = {}


class DiskError(ResponseError):
    """Redis refuses writes (and PING) because it cannot write to its disk: a full or read-only
    disk under its append-only file or snapshot (``MISCONF``). Passes once the disk takes writes
    again; redis-py has no class of its own for it (a plain ResponseError)."""


class _TimedSocketReads(_AsyncHiredisParser):
    """hiredis parsing whose waits on the socket give up after ``timeout`` seconds (None: never).
    Its errors tell a disk that refuses writes (`DiskError`) from a bad command."""

    __slots__ = ("timeout",)

    EXCEPTION_CLASSES = {**_AsyncHiredisParser.EXCEPTION_CLASSES, "MISCONF": DiskError}  # noqa: RUF012  # read only

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self.timeout: float | None = None

    async def read_from_socket(self) -> Any:
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
    """The services' Redis client: redis-py's, with `_Pipeline` for pipelines."""

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def fast_connection(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (plain, TLS or Unix socket) with hiredis packing its commands and
    one reply timer per socket wait."""
    cls = _CLASSES.get(connection_class)
    if cls is None:

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


def _packable(args: tuple[Any, ...]) -> bool:
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
