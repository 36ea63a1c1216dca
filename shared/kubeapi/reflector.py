"""A Reflector: the current state of one resource and every change to it, kept through watch
timeouts, 410 Gone, apiserver restarts and outages (client-go's Reflector, our own code).

It lists, then watches from the list's resourceVersion, and hands its consumer one stream of
events, in the apiserver's order:

- `Replaced`: every object there is now, after a list. The first one is the initial state
  (``initial=True``); a later one follows a relist, when the watch could not resume (410 Gone:
  the resourceVersion it held was compacted away, or the apiserver restarted with a fresh watch
  cache). The consumer replaces its state with it: an object it holds that is not in
  ``objects`` was deleted while no watch was looking.
- `WatchEvent` ADDED / MODIFIED / DELETED: one change, as the apiserver sent it.
- `WatchEvent` BOOKMARK: no change, the resourceVersion moved on (``resource_version``).

Consume it as an async iterator, inside ``async with`` (which ends the stream and its watch)::

    async with Reflector(client, PODS) as pods:
        async for event in pods:
            match event:
                case Replaced(objects=objects): ...
                case WatchEvent(type=EventType.ADDED, object=pod): ...

The first list is served from the apiserver's watch cache (resourceVersion 0, as client-go's
informers list: no etcd read, however many objects, at most a moment behind etcd); a relist, after
410 Gone or a failure, is a consistent read of etcd, in pages.

Guarantees: events come one at a time and only when the consumer asks for the next (no
buffering: a slow consumer slows the watch, never grows memory); `resource_version` is the
newest the consumer has been given (bookmarks included), and a new watch starts from it.
Transient failures (the apiserver unreachable, 5xx, 429, and 401/403/404, which an operator can
mend) never leave the iteration: the reflector backs off (capped exponential with jitter, at least
a 429's Retry-After), logs once when it starts failing and once when it recovers, and carries on.
`synced()` waits until the consumer has taken the first `Replaced` and come back for more.
Cancelling the consuming task, or leaving the ``async with``, closes the watch.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from kubus.kubeapi.client import KubeClient
from kubus.kubeapi.errors import KubeAPIError, KubeUnreachable
from kubus.kubeapi.resources import KubeObject, Resource
from kubus.kubeapi.watch import WatchEvent
from kubus.runtime.service import logger

__all__ = ["Backoff", "Reflector", "ReflectorEvent", "Replaced"]

_log = logger("kubus.kubeapi.reflector")

_SHORT_WATCH = 1.0
"""A watch that ends within this many seconds having delivered nothing counts as a failure
(something answers and hangs up at once: no loop at full speed against it)."""


@dataclass(frozen=True, slots=True)
class Replaced:
    """Every object of the resource (within the reflector's namespace and selectors) at
    ``resource_version``, after a list; ``initial``: the first list, else a relist."""

    objects: list[KubeObject] = field(repr=False)
    resource_version: str
    initial: bool


ReflectorEvent = Replaced | WatchEvent
"""What a Reflector yields."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds to wait after failures in a row: ``initial`` doubling up to ``cap``, each with up
    to ``jitter`` of itself added at random (client-go: 0.8 s doubling to 30 s)."""

    initial: float = 0.8
    cap: float = 30.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1-based)."""
        base = min(self.cap, self.initial * 2 ** max(0, failures - 1))
        return float(base * (1 + self.jitter * random.random()))


class Reflector:
    """List and watch ``resource`` through ``client``, as an async iterator of `ReflectorEvent`s
    (see the module docstring). One consumer; iterating a second time raises RuntimeError.

    ``watch_timeout``: the apiserver ends each watch after a random time between it and twice it
    (seconds; client-go: 5-10 min), and the reflector watches again from where it was.
    ``page_size``: objects per page of a list (None: unpaged).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = 500,
        watch_timeout: float = 300.0,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.resource_version = ""
        """The newest resourceVersion delivered (a list's, an event's or a bookmark's)."""
        self.relists = 0
        """How many times the reflector listed again after its first list."""
        self._synced = asyncio.Event()
        self._stream: AsyncGenerator[ReflectorEvent, None] | None = None
        self._failures = 0
        self._failing_since = 0.0
        self._last_error: KubeAPIError | KubeUnreachable | None = None
        self._what = f"{resource}" + (f" in namespace {namespace}" if namespace else "")

    # -- consuming -------------------------------------------------------------------------------

    async def synced(self) -> None:
        """Return once the consumer has taken the initial `Replaced` and asked for more."""
        await self._synced.wait()

    @property
    def has_synced(self) -> bool:
        """Whether `synced()` would return at once."""
        return self._synced.is_set()

    def __aiter__(self) -> AsyncGenerator[ReflectorEvent, None]:
        if self._stream is not None:
            raise RuntimeError(f"a Reflector of {self._what} is iterated once")
        self._stream = self._run()
        return self._stream

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the stream and close its watch; idempotent."""
        if self._stream is not None:
            await self._stream.aclose()

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> AsyncGenerator[ReflectorEvent, None]:
        while True:
            listed = await self._list()
            if listed is None:
                await self._wait()
                continue
            self.resource_version = listed.resource_version
            if not listed.initial:
                self.relists += 1
            yield listed
            self._synced.set()
            # Watch from the newest resourceVersion, again and again, until it is gone (410).
            first_watch = True
            while True:
                started, delivered = time.monotonic(), 0
                timeout = int(self.watch_timeout * (1 + random.random()))
                try:
                    async with self.client.watch(
                        self.resource,
                        namespace=self.namespace,
                        resource_version=self.resource_version,
                        timeout_seconds=max(1, timeout),
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        allow_bookmarks=True,
                    ) as watch:
                        async for event in watch:
                            if not delivered:
                                self._recovered()
                            delivered += 1
                            self.resource_version = event.resource_version or self.resource_version
                            yield event
                except KubeAPIError as error:
                    if error.gone:
                        _log.info(
                            "kube reflector relisting",
                            resource=self._what,
                            reason=error.message,
                            resource_version=self.resource_version,
                        )
                        if first_watch and not delivered:  # gone straight after a list: no loop at full speed
                            self._failed(error, "watch")
                            await self._wait()
                        break
                    self._failed(error, "watch")
                    await self._wait()
                    continue
                except KubeUnreachable as error:
                    self._failed(error, "watch")
                    await self._wait()
                    continue
                finally:
                    first_watch = False
                if delivered:
                    continue
                if time.monotonic() - started < _SHORT_WATCH:
                    # Answered, then hung up at once (an apiserver shutting down): a failure.
                    self._failed(KubeUnreachable(self.client.server, "a watch ended at once with no event"), "watch")
                    await self._wait()
                else:
                    self._recovered()  # a quiet watch that ran its time

    async def _list(self) -> Replaced | None:
        """Every object now, or None after a failure (logged and counted)."""
        for attempt in range(2):
            try:
                listed = await self.client.list(
                    self.resource,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    # A continue token expired mid-list (410): the second go lists unpaged.
                    limit=self.page_size if attempt == 0 else None,
                    # The first list from the apiserver's watch cache, as client-go's informers
                    # list (no read of etcd, however many objects); a relist reads etcd.
                    resource_version="0" if not self._synced.is_set() and attempt == 0 else None,
                )
            except KubeAPIError as error:
                if error.gone and attempt == 0:
                    continue
                self._failed(error, "list")
                return None
            except KubeUnreachable as error:
                self._failed(error, "list")
                return None
            self._recovered()
            return Replaced(listed.items, listed.resource_version, initial=not self._synced.is_set())
        return None  # pragma: no cover (the loop returns)

    async def _wait(self) -> None:
        error = self._last_error
        delay = self.backoff.delay(self._failures)
        if isinstance(error, KubeAPIError) and error.retry_after is not None:
            delay = max(delay, error.retry_after)
        await asyncio.sleep(delay)

    def _failed(self, error: KubeAPIError | KubeUnreachable, step: str) -> None:
        self._last_error = error
        self._failures += 1
        if self._failures == 1:
            self._failing_since = time.monotonic()
            _log.warning(
                "kube reflector failing",
                resource=self._what,
                step=step,
                error=str(error),
                resource_version=self.resource_version,
            )
        else:
            _log.debug("kube reflector still failing", resource=self._what, step=step, error=str(error))

    def _recovered(self) -> None:
        if self._failures:
            _log.info(
                "kube reflector recovered",
                resource=self._what,
                failures=self._failures,
                seconds=round(time.monotonic() - self._failing_since, 1),
                resource_version=self.resource_version,
            )
        self._failures = 0
        self._last_error = None
