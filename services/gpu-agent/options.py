"""How an agent works: `AgentOptions`, the settings of its loops (defaults are a real node's)."""

from __future__ import annotations

from dataclasses import dataclass

from kubus.bus import ACK_WAIT

__all__ = ["AgentOptions"]


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """How an agent works; the defaults are a real node's."""

    heartbeat_interval: float = 10.0
    """Seconds between heartbeats. Kubelet renews its node lease every 10 s (a quarter of the
    40 s lease) and the node lifecycle marks a node unreachable after ``node_grace`` (40 s)
    without one: four beats per grace, as kube. Simulated nodes cost a Lua call each per beat."""
    pod_duration: float = 0.0
    """Seconds a pod runs before it succeeds; 0 = until it is deleted."""
    pod_duration_jitter: float = 0.0
    """Each pod runs pod_duration × a factor in [1 - jitter, 1 + jitter], drawn from its uid."""
    batch: int = 256
    """Assignments fetched and admitted together at most (a few pipelined round trips per batch)."""
    batch_wait: float = 0.05
    """After a batch smaller than ``batch``, seconds (from the start of its fetch) to let more
    assignments gather before the next fetch: fewer, larger batches under light load, at the
    cost of at most this much added start latency. 0 = fetch again at once."""
    ack_wait: float = ACK_WAIT
    """Seconds JetStream waits for an ack before delivering an assignment again
    (`kubus.bus.ACK_WAIT`); a batch still being admitted reports progress every third of it."""
    max_failures: int = 5
    """Failed tries of one assignment at most; after the last, the pod is left Bound for the
    resync to adopt. A try that failed because NATS or Redis was away is not counted."""
    fetch_timeout: float = 1.0
    """Seconds one fetch waits for assignments (how quickly an idle agent notices stop)."""
    resync_interval: float = 30.0
    """Seconds between checks that the pods this agent runs are still Running in Redis."""
    inventory_interval: float = 30.0
    """Seconds between re-reads of a real node's inventory (NVML); simulations never change."""
    concurrency: int = 64
    """Redis/NATS calls in flight at once when registering or finishing many pods."""

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "ack_wait", "fetch_timeout", "resync_interval", "inventory_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if self.batch_wait < 0:
            raise ValueError(f"batch_wait: must be 0 or more seconds, got {self.batch_wait}")
        if self.pod_duration < 0:
            raise ValueError(f"pod_duration: must be 0 (forever) or more seconds, got {self.pod_duration}")
        if not 0.0 <= self.pod_duration_jitter <= 1.0:
            raise ValueError(f"pod_duration_jitter: must be a fraction in [0, 1], got {self.pod_duration_jitter}")
        for name in ("batch", "max_failures", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
