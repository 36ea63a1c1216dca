"""Prometheus metrics, with kube-scheduler's names where one exists, and the HTTP port that serves them.

Each service builds its own `Metrics` (its own registry, so tests stay isolated) and serves it
with `serve_metrics` on `/metrics`, together with the service's `/healthz` and `/readyz` (what
Kubernetes' probes and compose healthchecks ask). Only the metrics below exist; a service that
needs another adds it here, so names and labels stay consistent across services.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from threading import Thread
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, generate_latest

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
"""Permit waits last from nothing (gangs complete at once) to kube's 15-minute maximum."""
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass
class Metrics:
    """The metrics of one service, registered in its own registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
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

    def exposition(self) -> bytes:
        """The text exposition format of every metric (what /metrics serves)."""
        return generate_latest(self.registry)


class Health(Protocol):
    """What `serve_metrics` asks for /healthz and /readyz (`kubus.service.Service` is one)."""

    def liveness(self) -> str | None:
        """Why the process should be restarted, or None while it is alive. Called from another thread."""
        ...

    async def readiness(self, timeout: float) -> str | None:
        """Why it cannot do its work now, or None when it can; answers within about ``timeout`` seconds."""
        ...


class _QuietHandler(WSGIRequestHandler):
    # Probes hit these endpoints every few seconds; one log line per request would drown the service's own.
    def log_message(self, format: str, *args: Any) -> None:
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
    answer within ``ready_timeout`` + 1 s reads as not ready. Raises OSError when the port is taken.
    """
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

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        probe = probes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        reason = probe()
        status = "200 OK" if reason is None else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{reason or 'ok'}\n".encode()]

    class Server(ThreadingWSGIServer):
        # An IPv6 `addr` needs an IPv6 socket; WSGIServer's default is IPv4 only.
        address_family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    server = make_server(addr, port, app, Server, handler_class=_QuietHandler)
    thread = Thread(target=server.serve_forever, name=f"metrics :{server.server_port}", daemon=True)
    thread.start()
    return server, thread
