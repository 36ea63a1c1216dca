"""The pipelined write lanes (`kubus.kubeapi.lanes`) against a scripted HTTP/1.1 server on
loopback: answers in order, chunked bodies split anywhere, a server that closes, one that never
answers, one that answers garbage. (The same lanes against a real kube-apiserver:
tests/integration/test_kubeapi.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from kubus.kubeapi import KubeUnreachable
from kubus.kubeapi.lanes import Lanes

Reply = Callable[[bytes], list[bytes]]
"""What the server writes for one request (its path): chunks written one by one."""


class Server:
    """Reads requests (each ended by a blank line and Content-Length bytes) and writes what
    ``reply`` says for each, in order; counts connections and requests."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                path = head.split(b" ")[1]
                self.requests.append(path)
                for chunk in self.reply(path):
                    if chunk == b"CLOSE":
                        writer.close()
                        return
                    writer.write(chunk)
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Reply], Server]]:
    servers: list[Server] = []

    def start(reply: Reply) -> Server:
        server = Server(reply)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.server is not None:
            server.server.close()


async def started(server: Server) -> Server:
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    return server


def plain(status: int, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def chunked(status: int, body: bytes, pieces: int) -> list[bytes]:
    """``body`` chunked in ``pieces`` chunks, the bytes then split one byte at a time at the
    seams, so the parser meets every boundary incomplete."""
    step = max(1, len(body) // pieces)
    wire = f"HTTP/1.1 {status} OK\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    for i in range(0, len(body), step):
        part = body[i : i + step]
        wire += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    wire += b"0\r\n\r\n"
    return [wire[i : i + 7] for i in range(0, len(wire), 7)]


async def test_answers_come_back_to_their_requests_in_order(serve: Callable[[Reply], Server]) -> None:
    server = await started(serve(lambda path: [plain(201, b'{"path": "%s"}' % path)]))
    lanes = Lanes(server.url, None, lanes=2, depth=8)
    answers = await asyncio.gather(*(lanes.request("POST", f"/p/{i}", body=b"{}") for i in range(50)))
    assert [a.body for a in answers] == [b'{"path": "/p/%d"}' % i for i in range(50)]
    assert {a.status for a in answers} == {201}
    assert server.connections == 2, "two lanes, each kept"
    await lanes.close()
    await lanes.close()


async def test_only_as_many_connections_are_opened_as_requests_were_out_at_once(
    serve: Callable[[Reply], Server],
) -> None:
    server = await started(serve(lambda path: [plain(200, b"{}")]))
    lanes = Lanes(server.url, None, lanes=8)
    for i in range(20):  # one at a time: the one connection is enough
        assert (await lanes.request("PATCH", f"/one/{i}")).status == 200
    assert server.connections == 1
    for i in range(10):  # three at a time: three connections, taking turns
        await asyncio.gather(*(lanes.request("PATCH", f"/three/{i}/{j}") for j in range(3)))
    assert server.connections == 3
    answers = await asyncio.gather(*(lanes.request("POST", f"/many/{i}") for i in range(30)))
    assert {a.status for a in answers} == {200}
    assert server.connections == 8, "as many as there are lanes, no more"
    await lanes.close()


async def test_chunked_bodies_split_anywhere(serve: Callable[[Reply], Server]) -> None:
    body = b'{"items": "' + b"y" * 5000 + b'"}'
    server = await started(serve(lambda path: chunked(200, body, 7)))
    lanes = Lanes(server.url, None, lanes=1, depth=4)
    answers = await asyncio.gather(*(lanes.request("PATCH", "/x", body=b"{}") for _ in range(3)))
    assert [a.body for a in answers] == [body] * 3
    await lanes.close()


async def test_an_error_answer_carries_its_status_and_retry_after(serve: Callable[[Reply], Server]) -> None:
    server = await started(serve(lambda path: [plain(429, b'{"kind": "Status"}', "Retry-After: 3")]))
    lanes = Lanes(server.url, None)
    answer = await lanes.request("POST", "/busy")
    assert (answer.status, answer.retry_after, answer.body) == (429, "3", b'{"kind": "Status"}')
    await lanes.close()


async def test_a_closed_connection_fails_what_is_unanswered_and_the_next_write_reconnects(
    serve: Callable[[Reply], Server],
) -> None:
    def reply(path: bytes) -> list[bytes]:
        return [b"CLOSE"] if path == b"/drop" else [plain(200, b"{}")]

    server = await started(serve(reply))
    lanes = Lanes(server.url, None, lanes=1)
    with pytest.raises(KubeUnreachable, match="connection closed"):
        await lanes.request("POST", "/drop")
    assert (await lanes.request("POST", "/fine")).status == 200
    assert server.connections == 2
    # "Connection: close" on an answer: that answer is given, the lane is not reused.
    closing = await started(serve(lambda path: [plain(200, b"{}", "Connection: close")]))
    lanes2 = Lanes(closing.url, None, lanes=1)
    assert (await lanes2.request("POST", "/a")).status == 200
    assert (await lanes2.request("POST", "/b")).status == 200
    assert closing.connections == 2
    await lanes.close()
    await lanes2.close()


async def test_no_answer_within_the_timeout_fails_the_lane(serve: Callable[[Reply], Server]) -> None:
    server = await started(serve(lambda path: []))  # reads, never answers
    lanes = Lanes(server.url, None, timeout=0.3)
    with pytest.raises(KubeUnreachable, match=r"no answer within 0\.3 s"):
        await asyncio.wait_for(lanes.request("POST", "/slow"), 5)
    await lanes.close()


async def test_garbage_is_no_answer(serve: Callable[[Reply], Server]) -> None:
    server = await started(serve(lambda path: [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"]))
    lanes = Lanes(server.url, None)
    with pytest.raises(KubeUnreachable, match="unreadable answer"):
        await lanes.request("POST", "/x")
    await lanes.close()


async def test_a_server_that_refuses_is_unreachable() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    lanes = Lanes(f"http://127.0.0.1:{port}", None)
    with pytest.raises(KubeUnreachable, match="Connection refused"):
        await lanes.request("POST", "/x")
    await lanes.close()
