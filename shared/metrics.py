"""Prometheus metrics, with kube-scheduler's names where one exists.

Each service builds its own `Metrics` (its own registry, so tests stay isolated) and serves it
with `serve_metrics` on `/metrics`. Only the metrics below exist; a service that needs another
adds it here, so names and labels stay consistent across services.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Thread

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.exposition import generate_latest

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
        self.rejected_messages = Counter(
            "kubus_rejected_messages_total",
            "Messages that could not be read (malformed, unknown kind, too large), by subject.",
            ("subject",),
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


def serve_metrics(metrics: Metrics, port: int, addr: str = "0.0.0.0") -> tuple[object, Thread]:
    """Serve /metrics on `port` in a daemon thread; port 0 picks a free one (server.server_port)."""
    return start_http_server(port, addr=addr, registry=metrics.registry)
