"""Small writes to the apiserver, pipelined over a few kept-alive HTTP/1.1 connections.

A scheduler writes two small objects per pod (a binding, an event). Through aiohttp each costs
the client about 180 µs of CPU (bench/kube_requests.py): a request object, a task, a write and a
read syscall per request, TLS records per request. `Lanes` writes every request that is ready in
one turn of the event loop as one buffer on one connection (HTTP/1.1 pipelining, which the
apiserver's Go server answers in order), and reads the answers as they come, parsing only what a
write's caller needs: the status, Content-Length or chunked framing, Retry-After, and the body.

Each lane is one connection, opened when first needed; a request goes to an open lane with no
answer outstanding, else to a new one, else to the lane with the fewest answers outstanding (at
most ``depth``; past that it waits for room). A lane whose connection fails or closes fails the
requests still unanswered with `KubeUnreachable` (they may or may not have been applied:
callers treat that as any unanswered request, and the writes kubus pipelines are safe to repeat:
a binding meets 409 "already bound here", a status patch is idempotent, an event may be written
twice); the next request opens it again. A lane idle for `IDLE_REOPEN` seconds is reopened
before use, so no request is written into a connection the server is closing for idleness. A
request with no answer within ``timeout`` fails its lane (its answers come in order, so the lane
cannot skip one).

Only writes go here (POST, PUT, PATCH, DELETE): reads and watches stay on aiohttp, whose
streaming and redirects they need.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlencode, urlsplit

from kubus.kubeapi.errors import KubeUnreachable, describe_failure

__all__ = ["IDLE_REOPEN", "Answer", "Lanes"]

IDLE_REOPEN = 10.0
"""Seconds a lane may sit idle before it is reopened rather than reused."""

_MAX_HEAD = 64 * 1024
"""Bytes a response's head (status line and headers) may take before the lane gives up on it."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One response: its status, the headers a writer reads, and its body."""

    status: int
    reason: str
    retry_after: str | None
    body: bytes


class _Lane(asyncio.Protocol):
    """One connection: requests written in order, answers matched in order."""

    def __init__(self, on_lost: Callable[[_Lane], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[tuple[asyncio.Future[Answer], float]] = deque()
        self.buffer = bytearray()
        self.outgoing: list[bytes] = []
        self.flush_scheduled = False
        self.closed = False
        self.last_used = time.monotonic()
        self._on_lost = on_lost

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        try:
            self._parse()
        except ValueError as exc:  # not HTTP we understand: the lane is done
            self.fail(f"unreadable answer: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"connection closed: {exc}" if exc else "connection closed by the server")

    # -- writing ---------------------------------------------------------------------------------

    def send(self, request: bytes, deadline: float) -> asyncio.Future[Answer]:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.waiting.append((future, deadline))
        self.outgoing.append(request)
        self.last_used = time.monotonic()
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return future

    def _flush(self) -> None:
        # Every request of this turn of the loop in one write (one TLS record run, one syscall).
        self.flush_scheduled = False
        if self.outgoing and self.transport is not None and not self.closed:
            self.transport.write(b"".join(self.outgoing))
        self.outgoing.clear()

    # -- reading ---------------------------------------------------------------------------------

    def _parse(self) -> None:
        buffer = self.buffer
        start = 0
        while self.waiting:
            head_end = buffer.find(b"\r\n\r\n", start)
            if head_end < 0:
                if len(buffer) - start > _MAX_HEAD:
                    raise ValueError("a response head over 64 KiB")
                break
            head = bytes(buffer[start:head_end])
            if not head.startswith(b"HTTP/1."):
                raise ValueError(f"status line {head[:60]!r}")
            line_end = head.find(b"\r\n")
            status_line = head if line_end < 0 else head[:line_end]
            _, _, rest = status_line.partition(b" ")
            code, _, reason = rest.partition(b" ")
            # Only the headers a writer needs, found in the lowered head (no per-line split).
            fields = head[len(status_line) :].lower() + b"\r\n"
            length = _header(fields, b"content-length")
            chunked = b"\r\ntransfer-encoding: chunked\r\n" in fields
            close = b"\r\nconnection: close\r\n" in fields
            retry_after = _header(fields, b"retry-after")
            body_start = head_end + 4
            if chunked:
                parsed = _dechunk(buffer, body_start)
                if parsed is None:
                    break
                body, end = parsed
            else:
                end = body_start + int(length or 0)
                if end > len(buffer):
                    break
                body = bytes(buffer[body_start:end])
            start = end
            future, _ = self.waiting.popleft()
            if not future.done():
                wait = retry_after.decode(errors="replace") if retry_after else None
                future.set_result(Answer(int(code), reason.decode(errors="replace"), wait, body))
            if close:
                del buffer[:start]
                self.fail("the server closed the connection")
                return
        if start:
            del buffer[:start]

    # -- ending ----------------------------------------------------------------------------------

    def fail(self, why: str) -> None:
        """Close the connection; every request still unanswered fails with ``why``."""
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(ConnectionError(why))
        self._on_lost(self)


def _header(fields: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` in lowered ``fields`` (each line "\\r\\nname: value",
    ending in "\\r\\n"), or None."""
    at = fields.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    at += len(name) + 3
    return fields[at : fields.index(b"\r\n", at)].strip()


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked body from ``start``: (the body, where it ends), or None when not all in yet."""
    parts: list[bytes] = []
    at = start
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buffer[at:line_end]).split(b";", 1)[0], 16)
        at = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", at - 2)
            if trailer_end < 0:
                return None
            return b"".join(parts), trailer_end + 4
        if at + size + 2 > len(buffer):
            return None
        parts.append(bytes(buffer[at : at + size]))
        at += size + 2


class Lanes:
    """``lanes`` pipelined connections to ``server`` (see the module docstring).

    ``request`` raises `KubeUnreachable` when no answer comes (refused, TLS, closed, timed out);
    an answer of any status is returned as it is (the caller maps errors). ``close()`` is
    idempotent.
    """

    def __init__(
        self,
        server: str,
        ssl_context: ssl.SSLContext | None,
        *,
        server_hostname: str | None = None,
        lanes: int = 64,
        depth: int = 1,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {server}")
        self.server = server
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl = ssl_context if parts.scheme == "https" else None
        self.server_hostname = server_hostname
        self.timeout = timeout
        self.depth = depth
        host_header = parts.netloc.rpartition("@")[2]
        fixed = {"Host": host_header, **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode()
        self._lanes: list[_Lane | None] = [None] * lanes
        self._opening: list[asyncio.Future[_Lane] | None] = [None] * lanes
        self._slots = asyncio.Semaphore(lanes * depth)
        self._next = 0
        """Where `_lane` starts to look."""
        self._closed = False
        self._watchdog: asyncio.TimerHandle | None = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        if self._closed:
            raise RuntimeError("the lanes are closed")
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        request = b"".join(
            (
                f"{method} {target} HTTP/1.1\r\n".encode(),
                self._fixed,
                extra.encode(),
                b"Content-Length: %d\r\n\r\n" % len(body),
                body,
            )
        )
        async with self._slots:
            lane = await self._lane()
            future = lane.send(request, time.monotonic() + self.timeout)
            self._arm_watchdog()
            try:
                return await future
            except ConnectionError as exc:
                raise KubeUnreachable(self.server, str(exc)) from None

    async def close(self) -> None:
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for lane in self._lanes:
            if lane is not None:
                lane.fail("the client closed")

    # -- lanes -----------------------------------------------------------------------------------

    async def _lane(self) -> _Lane:
        """The lane for the next request: an open lane with no answer outstanding, looked for
        round the lanes from the one after the last chosen (so the open ones take turns and stay
        warm); else a lane not open, opened; else one being opened; else the open lane with the
        fewest answers outstanding (the slots keep that under ``depth``). So only as many
        connections are opened as requests were ever out at once: each is a TLS handshake, for
        the client and the apiserver (a watcher writing a few statuses at a time opened all 64).
        A lane idle for `IDLE_REOPEN` seconds is closed first (the server may be closing it)."""
        now = time.monotonic()
        count = len(self._lanes)
        best: _Lane | None = None
        closed: int | None = None
        opening: int | None = None
        for step in range(count):
            index = (self._next + step) % count
            lane = self._lanes[index]
            if lane is not None and not lane.closed and not lane.waiting and now - lane.last_used > IDLE_REOPEN:
                lane.fail("idle")
            if lane is None or lane.closed:
                if self._opening[index] is not None:
                    opening = opening if opening is not None else index
                elif closed is None:
                    closed = index
                continue
            if not lane.waiting:
                self._next = index + 1
                return lane
            if best is None or len(lane.waiting) < len(best.waiting):
                best = lane
        chosen = closed if closed is not None else opening
        if chosen is not None:
            self._next = chosen + 1
            return await self._open(chosen)
        assert best is not None
        return best

    async def _open(self, index: int) -> _Lane:
        opening = self._opening[index]
        if opening is None:
            opening = self._opening[index] = asyncio.ensure_future(self._connect(index))
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done():
                self._opening[index] = None

    async def _connect(self, index: int) -> _Lane:
        loop = asyncio.get_running_loop()

        def lost(lane: _Lane) -> None:
            if self._lanes[index] is lane:
                self._lanes[index] = None

        try:
            _, lane = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Lane(lost),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=(self.server_hostname or self.host) if self.ssl else None,
                ),
                self.timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise KubeUnreachable(self.server, describe_failure(exc, self.timeout)) from None
        self._lanes[index] = lane
        return lane

    def _arm_watchdog(self) -> None:
        if self._watchdog is None and not self._closed:
            self._watchdog = asyncio.get_running_loop().call_later(1.0, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """Once a second while requests are out: a lane whose oldest request is past its
        deadline fails (its later answers cannot come before that one's)."""
        self._watchdog = None
        now = time.monotonic()
        busy = False
        for lane in self._lanes:
            if lane is None or not lane.waiting:
                continue
            if lane.waiting[0][1] < now:
                lane.fail(f"no answer within {self.timeout:g} s")
            else:
                busy = True
        if busy:
            self._arm_watchdog()
