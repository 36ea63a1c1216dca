"""Prometheus metrics, with kube-scheduler's names where one exists, and the HTTP port that serves them.

Each service builds its own `Metrics` (its own registry, so tests stay isolated) and serves it
with `serve_metrics` on `/metrics`, together with the service's `/healthz` and `/readyz` (what
Kubernetes' probes and compose healthchecks ask). Only the metrics below exist; a service that
needs another adds it here, so names and labels stay consistent across services.

Each service exports only the families it updates (`SERVICE_FAMILIES`, by role), plus
`COMMON_FAMILIES` and the ``process_*`` families of the Prometheus client's process collector
(CPU seconds, resident memory, open fds, start time; read from /proc). Gauges that describe
state rather than count events (the goroutines of kube, the cycle's cache size, the queue's
in-flight events) are sampled at scrape time, in the service's event loop (`Metrics.sample`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import errno
import functools
import importlib.metadata
import logging
import platform
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from threading import Thread
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, generate_latest
from prometheus_client.metrics import MetricWrapperBase

_log = logging.getLogger("kubus.core.metrics")

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
"""Permit waits last from nothing (gangs complete at once) to kube's 15-minute maximum."""
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_E2E_BUCKETS = tuple(0.001 * 2**i for i in range(15))
"""kube's buckets for scheduler_e2e_scheduling_duration_seconds: ExponentialBuckets(0.001, 2, 15)."""

COMMON_FAMILIES = frozenset({"scheduler_goroutines", "kubus_build_info"})
"""What every service exports, besides the ``process_*`` families."""

SERVICE_FAMILIES: Mapping[str, frozenset[str]] = {
    "queue": frozenset({
        "scheduler_pending_pods",
        "scheduler_queue_incoming_pods_total",
        "scheduler_queueing_hint_execution_duration_seconds",
        "scheduler_unschedulable_pods",
        "scheduler_inflight_events",
        "kubus_nodes",
        "kubus_rejected_messages_total",
    }),
    "cycle": frozenset({
        "scheduler_schedule_attempts_total",
        "scheduler_scheduling_attempt_duration_seconds",
        "scheduler_e2e_scheduling_duration_seconds",
        "scheduler_framework_extension_point_duration_seconds",
        "scheduler_plugin_execution_duration_seconds",
        "scheduler_preemption_attempts_total",
        "scheduler_preemption_victims",
        "scheduler_cache_size",
        "kubus_reserve_conflicts_total",
        "kubus_reserve_device_repicks_total",
        "kubus_nodes",
        "kubus_rejected_messages_total",
    }),
    "binder": frozenset({
        "scheduler_binding_duration_seconds",
        "scheduler_pod_scheduling_sli_duration_seconds",
        "scheduler_pod_scheduling_attempts",
        "scheduler_permit_wait_duration_seconds",
        "scheduler_plugin_execution_duration_seconds",
        "kubus_rejected_messages_total",
    }),
    "gpu-agent": frozenset({
        "kubus_nodes",
        "kubus_pods_running",
        "kubus_pod_admissions_total",
        "kubus_rejected_messages_total",
    }),
    "watcher": frozenset(),
}  # fmt: skip
"""The families each service (by role) updates, and so exports, by their exposed names (a
counter's with ``_total``). tests/unit/test_metrics.py checks them against the services' code."""


@dataclass
class Metrics:
    """The metrics of one service, registered in its own registry: the families of its role
    (`SERVICE_FAMILIES`), `COMMON_FAMILIES` and the process collector's. Every attribute below
    exists whatever the role; one the role does not export is updated and never shown.

    Raises ValueError for a ``service`` that is not a role of `SERVICE_FAMILIES`.
    """

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    service: str | None = None
    """The role whose families are exported (queue, cycle, binder, gpu-agent, watcher); None
    exports every family (tests, tools)."""
    _samplers: list[Callable[[], None]] = field(default_factory=list, init=False, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _task_operations: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.service is not None and self.service not in SERVICE_FAMILIES:
            raise ValueError(f"no metrics for service {self.service!r}: one of {', '.join(SERVICE_FAMILIES)}")
        r = None  # every family is made unregistered; __post_init__'s end registers the service's
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result (scheduled, unschedulable, error).",
            ("result", "profile"),
            registry=r,
        )
        self.scheduling_attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + reserve).",
            ("result", "profile"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point (per batch).",
            ("extension_point", "status", "profile"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type: active, backoff, unschedulable, gated.",
            ("queue",),
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods_total",
            "Number of pods added to scheduling queues by event and queue type.",
            ("queue", "event"),
            registry=r,
        )
        self.binding_duration = Histogram(
            "scheduler_binding_duration_seconds",
            "Binding latency in seconds.",
            ("result",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pod_scheduling_sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from submission to bound.",
            ("attempts",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.reserve_conflicts = Counter(
            "kubus_reserve_conflicts_total",
            "Reservations refused by Redis because another profile got there first.",
            ("profile",),
            registry=r,
        )
        self.reserve_device_repicks = Counter(
            "kubus_reserve_device_repicks_total",
            "Reservations Redis granted on other GPUs than the cycle picked (another profile took those).",
            ("profile",),
            registry=r,
        )
        self.rejected_messages = Counter(
            "kubus_rejected_messages_total",
            "Messages that could not be read (malformed, unknown kind, too large), by subject.",
            ("subject",),
            registry=r,
        )
        self.permit_wait_duration = Histogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ("result",),
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.queueing_hint_execution_duration = Histogram(
            "scheduler_queueing_hint_execution_duration_seconds",
            "Duration for running a queueing hint function of a plugin.",
            ("plugin", "event", "hint"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.plugin_execution_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ("plugin", "extension_point", "status"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.unschedulable_pods = Gauge(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name.",
            ("plugin", "profile"),
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=(1, 2, 4, 8, 16),
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now.",
            ("profile",),
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims.",
            ("profile",),
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.nodes = Gauge("kubus_nodes", "Nodes known, by state (ready, unreachable).", ("state",), registry=r)
        self.pods_running = Gauge("kubus_pods_running", "Pods running on the nodes of this agent.", registry=r)
        self.pod_admissions = Counter(
            "kubus_pod_admissions_total",
            "Pods a node agent was assigned, by the result (admitted, rejected, dropped).",
            ("result",),
            registry=r,
        )
        self.e2e_scheduling_duration = Histogram(
            "scheduler_e2e_scheduling_duration_seconds",
            "E2e scheduling latency in seconds (scheduling algorithm + binding). In kubus the cycle "
            "observes it when its batch is handed to the binders and its outcomes to the queue: the "
            "scheduling algorithm, the reservation and the hand-over; the bind itself is the binder's "
            "(scheduler_binding_duration_seconds). Deprecated in kube in favour of "
            "scheduler_scheduling_attempt_duration_seconds; kept for the dashboards that read it.",
            ("result", "profile"),
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.cache_size = Gauge(
            "scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache: the cycle's node "
            "table; assumed_pods are the pods it holds whose reservation was not yet bound, as of its "
            "last read of their node. Sampled at scrape time.",
            ("type",),
            registry=r,
        )
        self.inflight_events = Gauge(
            "scheduler_inflight_events",
            "Number of events currently tracked in the scheduling queue: the cluster events the queue "
            "keeps because they arrived while pods were in flight (popped by a cycle, outcome not yet "
            "back), to requeue those pods if one of the events may help them. Sampled at scrape time.",
            ("event",),
            registry=r,
        )
        self.goroutines = Gauge(
            "scheduler_goroutines",
            "Number of running goroutines split by the work they do such as binding: in kubus the "
            "asyncio tasks of the service's event loop, by task name without the service prefix and "
            "without a trailing number ('unnamed' for tasks given no name, as libraries' are). "
            "Sampled at scrape time.",
            ("operation",),
            registry=r,
        )
        self.build_info = Gauge(
            "kubus_build_info",
            "1, labelled with the kubus version, the Python version and the service (role).",
            ("version", "python", "service"),
            registry=r,
        )
        self.families: dict[str, MetricWrapperBase] = {
            _exposed_name(m): m for m in vars(self).values() if isinstance(m, MetricWrapperBase)
        }
        """Every family by its exposed name, registered or not."""
        wanted = set(self.families) if self.service is None else SERVICE_FAMILIES[self.service] | COMMON_FAMILIES
        for name in sorted(wanted):
            self.registry.register(self.families[name])
        ProcessCollector(registry=self.registry)
        self.build_info.labels(version=_version(), python=platform.python_version(), service=self.service or "").set(1)
        self.sample(self._count_tasks)

    def exported(self) -> frozenset[str]:
        """The exposed names of the families this registry serves, ``process_*`` included."""
        return frozenset(f.name + "_total" if f.type == "counter" else f.name for f in self.registry.collect())

    def sample(self, refresh: Callable[[], None]) -> None:
        """Call ``refresh`` before each scrape (to set gauges of state, not events), in the event
        loop `serve_metrics` was started from when there is one, else in the scraping thread. A
        refresh that raises is logged and the others still run."""
        self._samplers.append(refresh)

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the samplers in ``loop`` (the service's), where what they read is safe to read."""
        self._loop = loop

    def refresh(self, timeout: float = 1.0) -> None:
        """Run the samplers (see `sample`); waits up to ``timeout`` seconds for a busy loop, whose
        gauges then keep their last values. Never raises."""
        loop = self._loop
        if loop is None or _running_loop() is loop:
            self._run_samplers()
            return
        if loop.is_closed() or not loop.is_running():
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            try:
                self._run_samplers()
            finally:
                done.set_result(None)

        try:
            loop.call_soon_threadsafe(run)
            done.result(timeout)
        except (RuntimeError, TimeoutError):  # closed meanwhile, or busy: the last values stand
            pass

    def exposition(self) -> bytes:
        """The text exposition format of every metric (what /metrics serves), samplers run first."""
        self.refresh()
        return generate_latest(self.registry)

    def _run_samplers(self) -> None:
        for refresh in self._samplers:
            try:
                refresh()
            except Exception:
                _log.exception("metrics sampler failed: %r", refresh)

    def _count_tasks(self) -> None:
        loop = self._loop or _running_loop()
        if loop is None:
            return
        counts = collections.Counter(_operation(t.get_name()) for t in asyncio.all_tasks(loop))
        for gone in self._task_operations - counts.keys():
            self.goroutines.remove(gone)
        for operation, n in counts.items():
            self.goroutines.labels(operation=operation).set(n)
        self._task_operations = set(counts)


class MetricsPortError(OSError):
    """The metrics port cannot be listened on (taken, not allowed); the message names it."""


_UNNAMED_TASK = re.compile(r"Task-\d+")
_TRAILING_NUMBER = re.compile(r"\s*\d+$")


def _operation(task_name: str) -> str:
    """scheduler_goroutines' operation of an asyncio task: ``queue: flush backoffQ`` → ``flush
    backoffQ``, ``watcher: status writer 3`` → ``status writer``, ``Task-12`` → ``unnamed``."""
    if _UNNAMED_TASK.fullmatch(task_name):
        return "unnamed"
    _, colon, rest = task_name.partition(": ")
    return _TRAILING_NUMBER.sub("", rest if colon else task_name) or "unnamed"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _exposed_name(metric: MetricWrapperBase) -> str:
    family = next(iter(metric.describe()))
    name = str(family.name)
    return name + "_total" if family.type == "counter" else name


@functools.cache
def _version() -> str:
    try:
        return importlib.metadata.version("kubus")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Health(Protocol):
    """What `serve_metrics` asks for /healthz and /readyz (`kubus.runtime.service.Service` is one)."""

    def liveness(self) -> str | None:
        """Why the process should be restarted, or None while it is alive. Called from another thread."""
        ...

    async def readiness(self, timeout: float) -> str | None:
        """Why it cannot do its work now, or None when it can; answers within about ``timeout`` seconds."""
        ...


class _QuietHandler(WSGIRequestHandler):
    # Probes hit these endpoints every few seconds; one log line per request would drown the service's own.
    def log_message(self, format: str, *args: Any) -> None:  # Any: BaseHTTPRequestHandler's signature
        pass


def serve_metrics(
    metrics: Metrics,
    port: int,
    addr: str = "0.0.0.0",
    *,
    health: Health | None = None,
    ready_timeout: float = 1.0,
) -> tuple[WSGIServer, Thread]:
    """Serve /metrics on `port` in a daemon thread; port 0 picks a free one (server.server_port).

    With ``health`` it also serves ``/healthz`` (``health.liveness()``) and ``/readyz``
    (``health.readiness(ready_timeout)``, run in the event loop that called this function, so call
    it from inside that loop): 200 ``ok``, or 503 with the one-line reason. A loop too busy to
    answer within ``ready_timeout`` + 1 s reads as not ready. Called from inside an event loop,
    the metrics' samplers run in that loop (`Metrics.bind_loop`). Raises MetricsPortError (an
    OSError naming the port) when the port is taken or not allowed.
    """
    if (running := _running_loop()) is not None:
        metrics.bind_loop(running)
    probes: dict[str, Callable[[], str | None]] = {}
    if health is not None:
        loop = asyncio.get_running_loop()
        wait = ready_timeout + 1.0

        def ready() -> str | None:
            try:
                future = asyncio.run_coroutine_threadsafe(health.readiness(ready_timeout), loop)
            except RuntimeError:  # the loop is closed: the service is gone
                return "event loop closed"
            try:
                return future.result(wait)
            except concurrent.futures.TimeoutError:
                future.cancel()
                return f"event loop busy: no answer within {wait:g}s"

        probes = {"/healthz": health.liveness, "/readyz": ready}
    metrics_app = make_wsgi_app(metrics.registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        probe = probes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            metrics.refresh()
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        reason = probe()
        status = "200 OK" if reason is None else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{reason or 'ok'}\n".encode()]

    class Server(ThreadingWSGIServer):
        # An IPv6 `addr` needs an IPv6 socket; WSGIServer's default is IPv4 only.
        address_family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    try:
        server = make_server(addr, port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        why = (
            "already in use (another process listens there; pick another --metrics-port, or 0 for none)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise MetricsPortError(f"metrics port {port} on {addr}: {why}") from None
    thread = Thread(target=server.serve_forever, name=f"metrics :{server.server_port}", daemon=True)
    thread.start()
    return server, thread
