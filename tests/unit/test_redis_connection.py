"""hiredis packs a command into the very bytes redis-py's packer makes, or redis-py packs it;
replies time out on each wait on the socket."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kubus.core.redis_connection import fast_connection

ARGS = st.one_of(
    st.text(),
    st.binary(),
    st.integers(-(2**70), 2**70),
    st.floats(),
)


@given(st.text(min_size=1), st.lists(ARGS, max_size=12))
def test_the_same_bytes_as_redis_py(command: str, args: list[object]) -> None:
    plain, fast = Connection(), fast_connection(Connection)()
    for name in (command, command.encode()):  # (redis-py splits the two kinds of name differently)
        assert b"".join(fast.pack_command(name, *args)) == b"".join(plain.pack_command(name, *args))


def test_what_hiredis_does_not_pack_goes_the_redis_py_way() -> None:
    plain, fast = Connection(), fast_connection(Connection)()
    for args in (("CLIENT SETINFO", "LIB-NAME", "x"), (b"CONFIG GET", b"maxmemory")):
        assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args))
    for bad in (True, None, object()):
        with pytest.raises(DataError):
            fast.pack_command("SET", "k", bad)


def test_every_connection_kind_keeps_its_class() -> None:
    for kind in (Connection, SSLConnection, UnixDomainSocketConnection):
        fast = fast_connection(kind)
        assert issubclass(fast, kind) and fast_connection(kind) is fast


async def _server(reply: bytes) -> asyncio.Server:
    """A server that says OK to the connection's handshake (CLIENT SETINFO), answers the next
    command with ``reply`` (maybe half a reply), then says nothing more."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        while chunk := await reader.read(65536):
            commands = chunk.split(b"*")[1:]  # RESP arrays; no argument here holds a '*'
            out = b""
            for command in commands:
                if b"SETINFO" in command:
                    out += b"+OK\r\n"
                elif not answered:
                    out, answered = out + reply, True
            writer.write(out)
            await writer.drain()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def _connection(server: asyncio.Server, socket_timeout: float) -> Connection:
    port = server.sockets[0].getsockname()[1]
    conn = fast_connection(Connection)(host="127.0.0.1", port=port, socket_timeout=socket_timeout, protocol=2)
    await conn.connect()
    return conn


@pytest.mark.parametrize("reply", [b"", b"$10\r\nhalf"], ids=["no reply", "half a reply"])
async def test_a_reply_that_stops_coming_is_a_timeout_and_the_connection_dropped(reply: bytes) -> None:
    """The timer runs on each wait on the socket: also one in the middle of a reply."""
    server = await _server(reply)
    conn = await _connection(server, 0.3)
    try:
        await conn.send_command("GET", "k")
        with pytest.raises(RedisTimeoutError):
            async with asyncio.timeout(10):  # the test's own guard: without the parser's timer this hangs
                await conn.read_response()
        assert not conn.is_connected
    finally:
        await conn.disconnect()
        server.close()


async def test_a_reply_already_read_costs_no_timer_and_a_read_with_its_own_timeout_keeps_redis_py_s_meaning() -> None:
    server = await _server(b"+one\r\n+two\r\n")
    conn = await _connection(server, 0.3)
    try:
        await conn.send_command("PING")
        assert await conn.read_response() == b"one"
        assert await conn.read_response() == b"two"  # in the buffer already
        assert await conn.read_response(timeout=0.05) is None  # redis-py: a timeout of one's own gives None
        assert conn.is_connected
    finally:
        await conn.disconnect()
        server.close()
