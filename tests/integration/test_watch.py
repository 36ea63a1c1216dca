"""`kubus get pods -w` across a lost connection: the changes announced while the watch was cut
off from NATS are shown once it is back (an ordered JetStream consumer resumes where it left)."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from dataclasses import replace
from urllib.parse import urlparse

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_pod
from kubus.bus import announcements
from kubus.bus.connection import ensure_streams
from kubus.bus.messages import BatchedPod, ClusterEvent, PodChange, encode
from kubus.bus.subjects import EventKind, event_subject
from kubus.cli.cluster import watch_pods
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.store import ClusterState, PodRecord


class CuttableProxy:
    """A TCP proxy to ``upstream`` whose connections can be cut, and kept from coming back, at will."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.open = True
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def cut(self) -> None:
        self.open = False
        for w in self.writers:
            w.close()
        self.writers.clear()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[CuttableProxy]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            self.cut()
            server.close()


def _pod(name: str) -> tuple[PodRecord, bytes]:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
    data = codec.dumps(manifest)
    return PodRecord.of(parse_pod(manifest), data, now=0.0), data


async def _announce(js: JetStreamContext, kind: EventKind, record: PodRecord, node: str) -> None:
    event = ClusterEvent(kind.value, f"default/{record.name}", node, 1.0, "Test", "",
                         PodChange(record.uid, 1, record.profile, ""))  # fmt: skip
    await js.publish(event_subject(kind, f"default/{record.name}"), encode(event))


async def test_a_watch_shows_what_happened_while_it_was_disconnected(
    settings: ConnectionSettings, nats: NATS, js: JetStreamContext, state: ClusterState
) -> None:
    await ensure_streams(js)
    url = urlparse(settings.nats_url)
    async with CuttableProxy((url.hostname or "127.0.0.1", url.port or 4222)).running() as proxy:
        login = f"{url.username}:{url.password}@" if url.username else ""
        through = replace(settings, nats_url=f"nats://{login}127.0.0.1:{proxy.port}")
        out, stop = io.StringIO(), asyncio.Event()
        before, during = _pod("before-cut"), _pod("during-cut")
        for record, _ in (before, during):
            assert await state.put_pod(record)
        watch = asyncio.create_task(watch_pods(through, out, namespace="default", output="wide", stop=stop))
        try:

            def shows(text: str) -> None:
                assert text in out.getvalue()

            await eventually(lambda: shows("during-cut"), timeout=10)  # the list
            await _announce(js, EventKind.POD_BOUND, before[0], "node-a")
            await eventually(lambda: shows("node-a"), timeout=10)
            proxy.cut()
            await asyncio.sleep(0.5)
            # The watch is not connected; a binder announces the pods it bound together (pods.bound).
            bound = BatchedPod(f"default/{during[0].name}", during[0].uid, "node-b", 1, during[0].profile)
            [publication] = announcements.pod_batch(EventKind.PODS_BOUND, [bound], at=1.0)
            await js.publish(publication.subject, publication.payload)
            await asyncio.sleep(0.5)
            assert "node-b" not in out.getvalue()
            proxy.open = True
            await eventually(lambda: shows("node-b"), timeout=30, interval=0.1)
        finally:
            stop.set()
            await asyncio.wait_for(watch, 30)
    lines = [line for line in out.getvalue().splitlines() if "during-cut" in line and "node-b" in line]
    assert len(lines) == 1, out.getvalue()
