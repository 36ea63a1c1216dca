"""hiredis packs a command into the very bytes redis-py's packer makes, or redis-py packs it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from kubus.redis_packing import fast_packing

ARGS = st.one_of(
    st.text(),
    st.binary(),
    st.integers(-(2**70), 2**70),
    st.floats(),
)


@given(st.text(min_size=1), st.lists(ARGS, max_size=12))
def test_the_same_bytes_as_redis_py(command: str, args: list[object]) -> None:
    plain, fast = Connection(), fast_packing(Connection)()
    for name in (command, command.encode()):  # (redis-py splits the two kinds of name differently)
        assert b"".join(fast.pack_command(name, *args)) == b"".join(plain.pack_command(name, *args))


def test_what_hiredis_does_not_pack_goes_the_redis_py_way() -> None:
    plain, fast = Connection(), fast_packing(Connection)()
    for args in (("CLIENT SETINFO", "LIB-NAME", "x"), (b"CONFIG GET", b"maxmemory")):
        assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args))
    for bad in (True, None, object()):
        with pytest.raises(DataError):
            fast.pack_command("SET", "k", bad)


def test_every_connection_kind_keeps_its_class() -> None:
    for kind in (Connection, SSLConnection, UnixDomainSocketConnection):
        fast = fast_packing(kind)
        assert issubclass(fast, kind) and fast_packing(kind) is fast
