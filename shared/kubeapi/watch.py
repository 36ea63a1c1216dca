"""A watch of the Kubernetes API as a stream of events: `Watch` (what `KubeClient.watch`
returns), `WatchEvent` and `EventType`.

The apiserver sends one JSON document per line; a line is decoded (`kubus.core.codec`) only when the
consumer asks for the next event, so a slow consumer slows the stream rather than buffering it.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import aiohttp

from kubus.core import codec
from kubus.kubeapi.errors import KubeAPIError, KubeUnreachable, describe_failure
from kubus.kubeapi.resources import KubeObject, Resource

__all__ = ["EventType", "Watch", "WatchEvent"]


class EventType(enum.Enum):
    """The type of a watch event, as the apiserver names it."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    """No change: the object holds only the resourceVersion the watch has reached."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: its type and the object (for DELETED, its last state)."""

    type: EventType
    object: KubeObject

    @property
    def resource_version(self) -> str:
        """The object's metadata.resourceVersion: where a new watch resumes after this event."""
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


class Watch:
    """A watch stream, as `KubeClient.watch` opens it (``opener``: the request that opens it).
    ``async with`` opens it (raising KubeAPIError, KubeUnreachable) and closes it; ``async for``
    yields `WatchEvent`s until the apiserver ends it (timeoutSeconds).

    An ERROR event raises KubeAPIError from the iteration (410 ``gone``: the resourceVersion is
    too old, list again); a connection lost mid-stream raises KubeUnreachable. Iterating without
    ``async with`` opens it on the first event (close it with ``aclose()``).
    """

    def __init__(
        self,
        opener: Callable[[], Awaitable[aiohttp.ClientResponse]],
        *,
        server: str,
        resource: Resource,
        namespace: str | None = None,
    ) -> None:
        self._opener = opener
        self._server = server
        self._resource = resource
        self._namespace = namespace
        self._response: aiohttp.ClientResponse | None = None
        self._lines: deque[bytes] = deque()
        self._partial = b""
        self._ended = False

    async def open(self) -> None:
        """Open the stream (idempotent)."""
        if self._response is None and not self._ended:
            self._response = await self._opener()

    async def aclose(self) -> None:
        """Close the stream; idempotent."""
        self._ended = True
        if self._response is not None:
            self._response.close()
            self._response = None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._lines:
            if self._ended:
                raise StopAsyncIteration
            await self.open()
            assert self._response is not None
            try:
                chunk = await self._response.content.readany()
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                await self.aclose()
                raise KubeUnreachable(
                    self._server, f"watch of {self._resource} lost: {describe_failure(error, None)}"
                ) from None
            if not chunk:
                await self.aclose()
                if self._partial.strip():
                    self._lines.append(self._partial)
                self._partial = b""
                continue
            # One JSON document per line; a chunk holds many, or part of one.
            lines = (self._partial + chunk).split(b"\n") if self._partial else chunk.split(b"\n")
            self._partial = lines.pop()
            self._lines.extend(line for line in lines if line)
        return self._event(self._lines.popleft())

    def _event(self, line: bytes) -> WatchEvent:
        try:
            data = codec.loads(line)
            kind, obj = data["type"], data["object"]
        except (codec.DecodeError, KeyError, TypeError) as error:
            raise KubeAPIError(
                500, "BadWatchEvent", f"undecodable watch event: {error}", verb="watch", resource=str(self._resource)
            ) from None
        if kind == "ERROR":
            raise KubeAPIError(
                int(obj.get("code") or 500),
                str(obj.get("reason") or ""),
                str(obj.get("message") or ""),
                verb="watch",
                resource=str(self._resource),
                namespace=self._namespace,
                details=obj.get("details"),
            )
        return WatchEvent(EventType(kind), obj)
