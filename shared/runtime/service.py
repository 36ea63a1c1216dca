"""The one lifecycle of every kubus service, its signal handling, and its structured logs.

A service subclasses `Service`, spawns its root tasks in `Service.on_start` and finishes or hands
back in-flight work in `Service.on_stop`::

    class Binder(Service):
        async def on_start(self) -> None:
            # Binds reserved pods; the profile's work queue is shared by every binder replica.
            self.spawn("bind loop", self._bind_loop)

        async def on_stop(self) -> None:
            await self._nak_in_flight()

    async def main() -> None:
        binder = Binder("binder", load_settings())
        install_signal_handlers(binder)
        await binder.run()
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import math
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import ClassVar, Protocol, Self, TextIO, TypeVar

import nats.errors
import nats.js.errors
import redis.asyncio as aioredis
import redis.exceptions
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.bus.connection import connect_bus, ensure_streams, settle
from kubus.core.errors import KubusError
from kubus.core.metrics import Metrics
from kubus.core.redis_connection import DiskError
from kubus.core.settings import ConnectionSettings, redis_client

__all__ = [
    "RUNNING_EVENT",
    "TRANSIENT_ERRORS",
    "Outage",
    "Service",
    "ServiceError",
    "ServiceState",
    "StructuredLogger",
    "Throttle",
    "configure_logging",
    "install_signal_handlers",
    "is_transient",
    "logger",
]

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,  # a replica, during a failover
    redis.exceptions.OutOfMemoryError,  # maxmemory reached: room comes back as keys expire or go
    redis.exceptions.ClusterDownError,  # MASTERDOWN among them
    DiskError,  # MISCONF: a full or read-only disk; writes come back with the room
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.NoRespondersError,
    nats.errors.NoServersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    TimeoutError,
    OSError,  # ConnectionError among them
)
"""Errors of a server that is down, slow, restarting or out of room (memory, disk): a step that
meets one is retried (or left to the repair that retries it), never a reason to crash, and never
counted against a message's deliveries (`is_transient`)."""


_ANSWERING_BUT_REFUSING = (
    DiskError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
)
"""A Redis that answers but refuses writes (or PING) for now: a service starts anyway, paused."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` says a server is away for now (retry later), not that the work is wrong:
    one of `TRANSIENT_ERRORS`, or an error that says so itself (a ``transient`` attribute that
    is True: the Kubernetes API's 5xx and 429, an apiserver out of reach)."""
    return isinstance(exc, TRANSIENT_ERRORS) or getattr(exc, "transient", False) is True

class PullSource(Protocol):
    """What `Service.fetch` reads batches from: a `kubus.bus.pull.PullConsumer`, or nats-py's
    JetStream pull subscription."""

    async def fetch(self, batch: int = ..., timeout: float = ...) -> list[Msg]: ...


# -- structured logging --------------------------------------------------------------------------

ExcInfo = bool | BaseException | tuple[type[BaseException], BaseException, TracebackType | None] | None
"""What `logging.Logger.log` takes as ``exc_info``."""


def _logfmt_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and not any(c in text for c in ' ="\\\n\t') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


class StructuredLogger:
    """Logs one ``event="..." key=value ...`` line per event through a standard `logging.Logger`.

    The fields also travel as ``record.kubus_fields`` (a dict) for handlers that write JSON.
    """

    __slots__ = ("_context", "logger")

    def __init__(self, logger: logging.Logger, context: dict[str, object] | None = None) -> None:
        self.logger = logger
        self._context = context or {}

    def bind(self, **fields: object) -> StructuredLogger:
        """A logger that adds ``fields`` to every line (e.g. ``service="binder"``)."""
        return StructuredLogger(self.logger, {**self._context, **fields})

    def log(self, level: int, event: str, /, *, exc_info: ExcInfo = None, **fields: object) -> None:
        """Log ``event`` with ``fields`` at ``level``; nothing is formatted if the level is off."""
        self._emit(level, event, exc_info, fields)

    def debug(self, event: str, /, **fields: object) -> None:
        self._emit(logging.DEBUG, event, None, fields)

    def info(self, event: str, /, **fields: object) -> None:
        self._emit(logging.INFO, event, None, fields)

    def warning(self, event: str, /, **fields: object) -> None:
        self._emit(logging.WARNING, event, None, fields)

    def error(self, event: str, /, **fields: object) -> None:
        self._emit(logging.ERROR, event, None, fields)

    def exception(self, event: str, /, **fields: object) -> None:
        """An error with the traceback of the exception being handled."""
        self._emit(logging.ERROR, event, True, fields)

    def _emit(self, level: int, event: str, exc_info: ExcInfo, fields: dict[str, object]) -> None:
        if not self.logger.isEnabledFor(level):
            return
        fields = {**self._context, **fields}
        line = " ".join([f"event={_logfmt_value(event)}", *(f"{k}={_logfmt_value(v)}" for k, v in fields.items())])
        # stacklevel 3: the record names the caller of info()/log(), not this module.
        self.logger.log(
            level, line, exc_info=exc_info, extra={"kubus_fields": {"event": event, **fields}}, stacklevel=3
        )


class Throttle:
    """Lets one of a run of like log lines through every ``interval`` seconds and counts the
    others, so that a flood (a forged request repeated in a loop) costs one line per interval."""

    __slots__ = ("_clock", "_next", "_suppressed", "interval")

    def __init__(self, interval: float = 10.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._next = -math.inf
        self._suppressed = 0

    def allow(self) -> int | None:
        """None to drop this line; else how many lines were dropped since the last one let
        through (say it in the line)."""
        now = self._clock()
        if now < self._next:
            self._suppressed += 1
            return None
        self._next = now + self.interval
        dropped, self._suppressed = self._suppressed, 0
        return dropped


def logger(name: str) -> StructuredLogger:
    """The structured logger of ``name`` (a standard logger name such as ``"kubus.binder"``)."""
    return StructuredLogger(logging.getLogger(name))


def configure_logging(level: int | str = logging.INFO, *, stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) as one ``ts=... level=... logger=... event=...`` line.

    For a service's entry point; libraries and tests leave logging configuration alone.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter("ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)


# -- the service lifecycle ----------------------------------------------------------------------


RUNNING_EVENT = "service running"
"""The event a service logs once it runs (its root tasks spawned, its subscriptions made):
what a supervisor reading its log waits for (`kubus.cli.processes.ServiceProcess.started`), so it
is logged at the configured level where that is quieter than info."""

_CLOSE_GRACE = 2.0
"""Seconds a connection close may take after stop()'s deadline (a socket that died under it)."""


async def _bounded(task: asyncio.Task[object], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``task`` to end, without cancelling it or raising its
    error; True when it ended."""
    done, _ = await asyncio.wait((task,), timeout=timeout)
    return bool(done)


class Outage:
    """Pauses a service's intake while a server it needs is away (down, restarting, LOADING, a
    full disk, out of memory), so that the messages it would take meanwhile are not failed one by
    one, and says so once when it starts and once when it ends.

    A handler that meets a transient error (`is_transient`) calls `note`; every consumer loop
    calls `pause` before it takes work. An outage is one run of notes until the servers answer
    again, however many messages met it. `pause` waits ``first`` seconds (doubled for each
    outage that began within ``forget_after`` seconds of the end of the one before: a server
    that answers PING but refuses writes, out of memory say), then asks ``probe`` (None: the
    servers answer; else why not), again after a wait that doubles each time, at most ``cap``
    seconds, until they answer. The messages in hand were nak'd by their handlers and come back
    by redelivery; none is counted as failed.
    """

    __slots__ = ("_cap", "_clock", "_ended", "_first", "_forget_after", "_log", "_probe", "_resume_at", "_since",
                 "_streak", "_wait", "reason")  # fmt: skip

    def __init__(
        self,
        log: StructuredLogger,
        probe: Callable[[], Awaitable[str | None]],
        *,
        first: float = 0.5,
        cap: float = 5.0,
        forget_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._probe = probe
        self._first = first
        self._cap = cap
        self._forget_after = forget_after
        self._clock = clock
        self._streak = 0
        """Outages in a row, each begun soon after the one before ended."""
        self._ended = -math.inf
        self._wait = first
        """The wait before the next probe."""
        self._resume_at = 0.0
        self._since = 0.0
        self.reason: str | None = None
        """Why intake is paused (one line), or None while it is not."""

    def note(self, exc: BaseException) -> None:
        """A step failed because a server is away: pause intake (logged once per outage)."""
        self.reason, begins = _one_line(exc), self.reason is None
        if not begins:
            return
        now = self._clock()
        self._streak = self._streak + 1 if now - self._ended <= self._forget_after else 1
        self._wait = min(self._cap, self._first * 2 ** (self._streak - 1))
        self._resume_at = now + self._wait
        self._since = now
        self._log.warning("a server is unavailable: intake paused until it answers", error=self.reason)

    async def pause(self, stopping: asyncio.Event) -> None:
        """Return at once when no outage is noted; else once the servers answer after the
        waits, or ``stopping`` is set. Never raises (but for cancellation)."""
        while self.reason is not None and not stopping.is_set():
            delay = self._resume_at - self._clock()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
                continue
            why = await self._probe()
            now = self._clock()
            if why is None:
                self._log.info("servers answer again: intake resumed", paused=round(now - self._since, 1))
                self.reason, self._ended = None, now
                return
            self.reason = why
            self._wait = min(self._cap, self._wait * 2)
            self._resume_at = now + self._wait


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


class ServiceState(enum.Enum):
    """Where a service is in its one-way lifecycle."""

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ServiceError(KubusError, RuntimeError):
    """A root task of a service died with an exception (its ``__cause__``); the service stopped."""

    def __init__(self, service: str, task: str, error: BaseException) -> None:
        super().__init__(f"{service}: root task {task!r} failed: {error!r}")
        self.service = service
        self.task = task
        self.error = error


class _Unsubscribable(Protocol):
    async def unsubscribe(self) -> None: ...


_S = TypeVar("_S", bound=_Unsubscribable)


class Service:
    """One kubus service: connections, a TaskGroup of named root tasks, an orderly stop.

    ``start()`` connects (NATS + JetStream streams + Redis, when ``settings`` is given; with
    None, no connection is made, for tests and services that need none), then calls
    `on_start`, where the subclass spawns its root tasks with `spawn` (each with a one-line
    comment above it saying why it exists) and registers its work subscriptions with `intake`.

    ``stop()`` runs once, in this order: stop taking work (``stopping`` is set, `intake`
    subscriptions are unsubscribed) → `on_stop` (finish or hand back in-flight work) → cancel
    the root tasks → drain NATS → close Redis. When a root task dies with an exception the
    others are cancelled, the error is logged with its traceback, the service stops and
    ``run()`` raises ServiceError naming the task. A service runs once: after stop, start()
    raises RuntimeError.
    """

    metrics_role: ClassVar[str | None] = None
    """The role whose metric families `metrics` exports (`kubus.core.metrics.SERVICE_FAMILIES`); None: all."""

    def __init__(self, name: str, settings: ConnectionSettings | None = None, *, streams: bool = True) -> None:
        self.name = name
        """Service name: the NATS client name and the logger name ``kubus.<name>``."""
        self.settings = settings
        self.log = logger(f"kubus.{name}").bind(service=name)
        self.metrics = Metrics(service=self.metrics_role)
        """This service's metrics, in its own Prometheus registry (so tests stay isolated): its
        role's families only."""
        self.nc: NATS | None = None
        self.js: JetStreamContext | None = None
        self.redis: aioredis.Redis | None = None
        self.stopping = asyncio.Event()
        """Set when stop() begins: loops that take work check it and stop taking more."""
        self._ensure_streams = streams
        self._state = ServiceState.NEW
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._short_fetches: dict[int, float] = {}
        """Per pull subscription (its id), when its last fetch came back short (`fetch` pace)."""
        self._group: asyncio.TaskGroup | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._release_roots = asyncio.Event()
        self._start_task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._failure_stop: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._failure: tuple[str, BaseException] | None = None
        self._on_start_called = False
        self._intake: list[_Unsubscribable] = []
        self.abandoned: tuple[str, ...] = ()
        """What the last stop() could not do (empty after a clean stop): one phrase each."""
        self.outage = Outage(self.log, self._servers_problem)
        """Intake paused while a server is away: handlers `note` what they met, `fetch` waits."""

    # -- what subclasses implement ---------------------------------------------------------------

    async def on_start(self) -> None:
        """Spawn the root tasks and subscribe. Connections are open; the service is not yet running."""

    async def on_stop(self) -> None:
        """Finish or hand back in-flight work. Work intake has stopped; root tasks still run;
        connections are open. Bounded by stop()'s timeout. Runs once, if on_start ran, even partly."""

    # -- what subclasses call ----------------------------------------------------------------------

    def spawn(self, name: str, coro_fn: Callable[..., Awaitable[object]], *args: object) -> asyncio.Task[None]:
        """Run ``coro_fn(*args)`` as a root task named ``"<service>: <name>"``.

        A root task may return (it is done); if it raises, the service stops and run() raises
        ServiceError naming it. Raises RuntimeError outside start()/running, or for a name in use.
        """
        if self._group is None or self._state not in (ServiceState.STARTING, ServiceState.RUNNING):
            raise RuntimeError(f"{self.name}: spawn({name!r}) outside a starting or running service")
        if name in self._tasks and not self._tasks[name].done():
            raise RuntimeError(f"{self.name}: a root task named {name!r} is already running")
        task = self._group.create_task(self._root(name, coro_fn, args), name=f"{self.name}: {name}")
        self._tasks[name] = task
        return task

    async def fetch(
        self, subscription: PullSource, batch: int, timeout: float, *, pace: float = 0.0
    ) -> list[Msg]:
        """The next batch of up to ``batch`` messages from a JetStream pull ``subscription``;
        [] after ``timeout`` seconds with none, on a passing NATS error (logged, after a short
        pause) or as soon as the service stops. Waits first while an `outage` is noted.

        ``pace``: after a fetch that came back short (nothing more was waiting), the next one
        starts no sooner than ``pace`` seconds later, so what trickles in meanwhile comes as one
        batch rather than a message a fetch (at 200 pods/s, 10 ms make batches of two or three,
        and every cost per batch falls by as much); after a full batch it starts at once."""
        await self.outage.pause(self.stopping)
        if pace > 0 and (short := self._short_fetches.get(id(subscription))) is not None:
            wait = short + pace - asyncio.get_running_loop().time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), wait)
        if self.stopping.is_set():
            return []
        messages = await self._fetch(subscription, batch, timeout)
        if len(messages) < batch:
            self._short_fetches[id(subscription)] = asyncio.get_running_loop().time()
        else:
            self._short_fetches.pop(id(subscription), None)
        return messages

    async def _fetch(self, subscription: PullSource, batch: int, timeout: float) -> list[Msg]:
        fetch = asyncio.ensure_future(subscription.fetch(batch, timeout=timeout))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait((fetch, stop), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            fetch.cancel()  # and whatever it ends with is read, not reported as never retrieved
            fetch.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        finally:
            stop.cancel()
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(BaseException):
                await fetch
            return []
        try:
            messages: list[Msg] = fetch.result()
            return messages
        except TimeoutError:  # nats.errors.TimeoutError is one too: nothing to fetch
            return []
        except (nats.errors.ConnectionClosedError, nats.js.errors.APIError, OSError) as exc:
            if not self.stopping.is_set():
                self.log.warning("fetch failed, retrying", error=repr(exc))
                await asyncio.sleep(min(1.0, timeout))
            return []

    def jetstream(self) -> JetStreamContext:
        """The JetStream context; RuntimeError before start() connected it (or with no settings)."""
        if self.js is None:
            raise RuntimeError(f"{self.name}: not connected")
        return self.js

    def intake(self, subscription: _S) -> _S:
        """Register a NATS subscription that brings work in; stop() unsubscribes it first. Returns it."""
        self._intake.append(subscription)
        return subscription

    @property
    def state(self) -> ServiceState:
        return self._state

    # -- health (what /healthz and /readyz answer; see kubus.core.metrics.serve_metrics) ----------------

    def liveness(self) -> str | None:
        """Why this service is no longer alive (a root task died, it is stopping or stopped), or None.

        Reads two attributes and nothing else, so any thread may call it.
        """
        failure = self._failure
        if failure is not None:
            return f"root task {failure[0]!r} died: {failure[1]!r}"
        state = self._state
        if state in (ServiceState.STOPPING, ServiceState.STOPPED):
            return f"service {state.value}"
        return None

    async def readiness(self, timeout: float = 1.0) -> str | None:
        """Why this service cannot do its work now, or None: it is running, NATS is connected and
        Redis answers PING within ``timeout`` seconds. A service made without settings needs only
        to be running. Never raises; the reason is one line."""
        reason = self.liveness()
        if reason is not None:
            return reason
        if self._state is not ServiceState.RUNNING:
            return f"service {self._state.value}"
        if self.outage.reason is not None:
            return f"intake paused: {self.outage.reason}"
        return await self._servers_problem(timeout)

    async def _servers_problem(self, timeout: float = 1.0) -> str | None:
        """Why NATS or Redis cannot serve this service now (one line), or None: NATS is
        connected and Redis answers PING (which a Redis that cannot write to its disk refuses)
        within ``timeout`` seconds. None without settings. Never raises."""
        if self.settings is None:
            return None
        if self.nc is None or not self.nc.is_connected:
            return "nats: not connected"
        if self.redis is None:
            return "redis: no client"
        try:
            async with asyncio.timeout(timeout):
                await self.redis.ping()
        except TimeoutError:
            return f"redis: no answer to PING within {timeout:g}s"
        except Exception as exc:
            return "redis: " + " ".join(repr(exc).split())
        return None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, ensure the streams, call on_start; return once running. Idempotent while running.

        Returns without error if stop() interrupted it. Raises RuntimeError after stop, the
        connection error if NATS or Redis does not answer (everything opened is closed again),
        ServiceError if a root task died during start.
        """
        if self._state in (ServiceState.STOPPING, ServiceState.STOPPED):
            raise RuntimeError(f"{self.name}: stopped; a service runs once, make a new one")
        if self._state is ServiceState.NEW:
            self._state = ServiceState.STARTING
            self._start_task = asyncio.create_task(self._start(), name=f"{self.name}: start")
        assert self._start_task is not None
        try:
            await self._start_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._stop_task is None or (current is not None and current.cancelling()):
                raise  # our caller was cancelled, not the start
        except Exception:
            await self.stop()
            raise
        if self._failure is not None:
            await self.stop()
            raise ServiceError(self.name, *self._failure) from self._failure[1]

    async def _start(self) -> None:
        self.log.info("service starting")
        if self.settings is not None:
            self.nc, self.js = await connect_bus(self.settings, self.name)
            if self._ensure_streams:
                await ensure_streams(self.js, replicas=self.settings.stream_replicas)
            self.redis = redis_client(self.settings)
            try:
                await self.redis.ping()
            except _ANSWERING_BUT_REFUSING as exc:  # it is there: start, and wait out the outage
                self.outage.note(exc)
        group_ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._supervisor = asyncio.create_task(self._supervise(group_ready), name=f"{self.name}: supervisor")
        await group_ready
        self._on_start_called = True
        await self.on_start()
        if self.nc is not None:
            # The server has every subscription on_start made before start() returns.
            await settle(self.nc)
        if self._state is ServiceState.STARTING:
            self._state = ServiceState.RUNNING
            # Logged however quiet the log level: supervisors (kubus up, bench) wait for it.
            level = max(logging.INFO, self.log.logger.getEffectiveLevel())
            self.log.log(level, RUNNING_EVENT, root_tasks=",".join(self._tasks) or "-")

    async def run(self) -> None:
        """Start if needed and wait until the service has stopped.

        Raises ServiceError (naming the task) if a root task died, the start error if it did not
        start. Cancelling run() stops the service, then re-raises the cancellation.
        """
        try:
            await self.start()
            await self._stopped.wait()
        except asyncio.CancelledError:
            await asyncio.shield(self.stop())
            raise
        if self._failure is not None:
            raise ServiceError(self.name, *self._failure) from self._failure[1]

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop in order: intake → on_stop → cancel root tasks → drain NATS → close Redis.

        Idempotent; safe before start(), during start() (the start is cancelled) and from several
        tasks at once (all wait for the one stop; the first caller's ``timeout`` holds). Returns
        within ``timeout`` seconds plus a few for closing the connections, whatever state they are
        in (NATS reconnecting, Redis down, a publish pending): each step is bounded, and one that
        fails does not keep the next from running. Never raises: a root task's error is raised
        by run(); what a step could not do is logged in the one "service stopped" line and kept
        in `abandoned`.
        """
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self._shutdown(timeout), name=f"{self.name}: stop")
        await asyncio.shield(self._stop_task)

    async def _shutdown(self, timeout: float) -> None:
        if self._state is ServiceState.NEW:
            self._state = ServiceState.STOPPED
            self._stopped.set()
            return
        self._state = ServiceState.STOPPING
        self.log.info("service stopping", timeout=timeout)
        self.stopping.set()
        abandoned: list[str] = []
        try:
            await self._stop_steps(timeout, abandoned)
        finally:
            # Whatever happened above, the service is stopped: run() returns and the process exits.
            self.abandoned = tuple(abandoned)
            self._state = ServiceState.STOPPED
            self._stopped.set()
            fields = {"failed_task": self._failure[0] if self._failure else "-"}
            if abandoned:
                self.log.warning("service stopped, work abandoned", abandoned="; ".join(abandoned), **fields)
            else:
                self.log.info("service stopped", **fields)

    async def _stop_steps(self, timeout: float, abandoned: list[str]) -> None:
        """The steps of stop(), together bounded by ``timeout`` seconds (the closes by a short grace
        after it), none able to skip the next: what a step could not do is added to ``abandoned``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def left(minimum: float = 0.0) -> float:
            return max(deadline - loop.time(), minimum)

        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()
            await _bounded(self._start_task, left(_CLOSE_GRACE))

        # 1. Stop taking work.
        for subscription in self._intake:
            try:
                async with asyncio.timeout(left(_CLOSE_GRACE)):
                    await subscription.unsubscribe()
            except Exception as exc:
                self.log.warning("unsubscribe failed", error=repr(exc))

        # 2. Finish or hand back in-flight work.
        if self._on_start_called:
            try:
                async with asyncio.timeout_at(deadline):
                    await self.on_stop()
            except TimeoutError:
                abandoned.append(f"in-flight work not finished within {timeout:g}s (left for redelivery)")
            except Exception as exc:
                self.log.exception("on_stop failed")
                abandoned.append(f"in-flight work: on_stop failed ({exc!r})")

        # 3. Cancel the root tasks.
        if self._supervisor is not None:
            self._release_roots.set()
            if not await _bounded(self._supervisor, left(1.0)):
                stuck = [name for name, task in self._tasks.items() if not task.done()]
                abandoned.append(f"root tasks ignoring cancellation: {', '.join(stuck)}")

        # 4. Drain NATS: deliver what subscriptions hold, flush what was published. A client that
        # is reconnecting cannot drain; what it buffered is lost (JetStream publishes unacked by
        # the server are retried by whoever published them, after redelivery).
        nc = self.nc
        if nc is not None and not nc.is_closed:
            if nc.is_connected:
                try:
                    async with asyncio.timeout(left(1.0)):
                        await nc.drain()
                except Exception as exc:
                    abandoned.append(f"nats drain: {exc!r}")
            else:
                abandoned.append(f"nats not connected ({nc.pending_data_size} buffered bytes dropped)")
            if not nc.is_closed:
                try:
                    async with asyncio.timeout(_CLOSE_GRACE):
                        await nc.close()
                except Exception as exc:  # the socket died under it: nothing more to flush
                    self.log.debug("nats close failed", error=repr(exc))

        # 5. Close Redis.
        if self.redis is not None:
            try:
                async with asyncio.timeout(_CLOSE_GRACE):
                    await self.redis.aclose()
            except Exception as exc:
                self.log.debug("redis close failed", error=repr(exc))

    async def _supervise(self, ready: asyncio.Future[None]) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                ready.set_result(None)
                await self._release_roots.wait()
                for task in self._tasks.values():
                    task.cancel()
        except BaseExceptionGroup:
            pass  # each error was recorded and logged by _root
        finally:
            self._group = None
        if self._failure is not None and not self.stopping.is_set():
            self._failure_stop = asyncio.create_task(self.stop(), name=f"{self.name}: stop after failure")

    async def _root(self, name: str, coro_fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
        try:
            await coro_fn(*args)
        except Exception as exc:
            if self._failure is None and not self.stopping.is_set():
                self._failure = (name, exc)
                self.log.log(logging.CRITICAL, "root task died, stopping service", task=name, error=repr(exc),
                             exc_info=exc)  # fmt: skip
            else:
                self.log.exception("root task failed while stopping", task=name)
            raise

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def install_signal_handlers(
    service: Service,
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
    *,
    timeout: float = 10.0,
    on_repeat: Callable[[signal.Signals], None] | None = None,
) -> Callable[[], None]:
    """Make SIGTERM and SIGINT call ``service.stop(timeout)`` in the running loop; returns an
    uninstaller.

    Call from inside the loop (Unix only). A signal while the service is already stopping calls
    ``on_repeat(sig)`` (a process's entry point exits at once there, as a second Ctrl-C does);
    without one it is logged and otherwise ignored.
    """
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def handle(sig: signal.Signals) -> None:
        if service.stopping.is_set():
            service.log.warning("signal received while stopping", signal=sig.name)
            if on_repeat is not None:
                on_repeat(sig)
            return
        service.log.info("signal received, stopping", signal=sig.name)
        task = loop.create_task(service.stop(timeout), name=f"{service.name}: stop on {sig.name}")
        pending.add(task)
        task.add_done_callback(pending.discard)

    for sig in signals:
        loop.add_signal_handler(sig, handle, sig)

    def uninstall() -> None:
        for sig in signals:
            loop.remove_signal_handler(sig)

    return uninstall
