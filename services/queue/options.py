"""QueueOptions: how the queue service runs."""

from __future__ import annotations

from dataclasses import dataclass

from kubus.bus import ACK_WAIT, MAX_MANIFEST_SIZE

__all__ = ["QueueOptions"]


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """How the queue service runs. Seconds unless said otherwise."""

    in_flight_timeout: float = 30.0
    """A popped pod whose outcome has not come back after this is handed out again (if it is
    still Pending in Redis; otherwise it is dropped)."""
    reserve_timeout: float = 60.0
    """A pod Reserved this long whose reservation no binder marked bound is given back and
    requeued by the janitor; one whose reservation is bound has its bind finished."""
    reconcile_grace: float = 30.0
    """Grace the full reconcile gives a step in flight (ClusterState.reconcile's grace_s)."""
    node_grace: float = 40.0
    """A node whose last heartbeat is older than this is marked unreachable (node.lost)."""
    resync: float = 30.0
    """How often Pending pods in Redis are compared with the queues (missing ones added,
    vanished ones dropped)."""
    flush_interval: float = 1.0
    """How often the backoffQ is flushed (kube: every second)."""
    leftover_interval: float = 30.0
    """How often unschedulable leftovers are looked for (kube: every 30 s)."""
    max_in_unschedulable: float = 300.0
    """podMaxInUnschedulablePodsDuration: an unschedulable pod is retried after this anyway."""
    in_flight_interval: float = 1.0
    """How often in-flight deadlines are checked."""
    janitor_interval: float = 10.0
    """How often Reserved pods past reserve_timeout are looked for (cheap: reads the Reserved
    pods only)."""
    reconcile_interval: float = 300.0
    """How often the full ClusterState.reconcile runs (reads every node's reservations)."""
    node_interval: float = 5.0
    """How often node heartbeats are checked."""
    fetch_batch: int = 256
    """Messages fetched from KUBUS_PODS at a time (the submits among them are stored with one
    Redis round trip and announced with one JetStream round trip)."""
    fetch_pace: float = 0.01
    """Seconds between a fetch from KUBUS_PODS that came back short and the next, so pods
    submitted one at a time (a watcher following the apiserver) are stored as a batch."""
    max_failures: int = 5
    """Failed tries of one KUBUS_PODS message at most; the last rejects it. A try that failed
    because NATS or Redis was away (`kubus.runtime.service.is_transient`) is not counted: an
    acknowledged submission waits out any outage (`kubus.bus.MessageFaults`)."""
    ack_wait: float = ACK_WAIT
    """Seconds JetStream waits for an ack before redelivering (`kubus.bus.ACK_WAIT`); a batch
    still being handled reports progress every third of it."""
    durable: str = "kubus-queue"
    """Name of the durable consumer on KUBUS_PODS."""
    max_manifest_bytes: int = MAX_MANIFEST_SIZE
    """Largest pod manifest (as JSON) accepted; bigger ones are rejected (TooLarge). Default:
    `kubus.bus.MAX_MANIFEST_SIZE`, the limit `kubus apply` checks too."""
    max_pop: int = 10_000
    """Most pods one pop hands out, whatever it asks."""
    max_pop_wait: float = 5.0
    """Longest a pop waits for a first pod, whatever it asks."""
    lease_ttl: float = 5.0
    """Seconds the queue's lease (``queue``) lasts without renewal: how long a standby queue
    waits after the active one died (a clean stop gives it up at once)."""
    renew_interval: float = 1.0
    """Seconds between lease renewals (a standby's attempts to take it); below lease_ttl."""

    def __post_init__(self) -> None:
        for name in (
            "in_flight_timeout",
            "reserve_timeout",
            "node_grace",
            "resync",
            "flush_interval",
            "leftover_interval",
            "in_flight_interval",
            "janitor_interval",
            "reconcile_interval",
            "node_interval",
            "ack_wait",
            "lease_ttl",
            "renew_interval",
        ):
            if not getattr(self, name) > 0:
                value = getattr(self, name)
                raise ValueError(f"queue option {name}: must be a positive number of seconds, got {value!r}")
        if self.renew_interval >= self.lease_ttl:
            raise ValueError(
                f"queue option renew_interval ({self.renew_interval}s) must be below lease_ttl ({self.lease_ttl}s)"
            )
        if not 0 <= self.fetch_pace <= 1:
            raise ValueError(f"queue option fetch_pace: must be 0 to 1 second, got {self.fetch_pace!r}")
        if self.fetch_batch < 1 or self.max_failures < 1 or self.max_pop < 1 or self.max_manifest_bytes < 1024:
            raise ValueError(
                "queue options fetch_batch, max_failures, max_pop must be >= 1, max_manifest_bytes >= 1024"
            )
