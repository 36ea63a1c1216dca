"""How a cycle replica works: `CycleOptions`, the same for every replica of a profile."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CycleOptions"]


@dataclass(frozen=True, slots=True)
class CycleOptions:
    """How a cycle replica works. Every replica of a profile should use the same values."""

    batch_size: int = 256
    """Pods popped and scheduled at a time (PopRequest.max_pods)."""
    pop_wait_ms: int = 200
    """How long the queue may hold a pop when it has no pod (PopRequest.wait_ms)."""
    pop_pace: float = 0.02
    """Seconds a pop waits after one that came back short (fewer than batch_size: the queue had
    no more), so pods trickling in come as one batch: at 200 pods/s, four a batch instead of
    one, each batch's round trips (pop, reserve, hand-over, report) shared; 0: pop at once."""
    request_timeout: float = 2.0
    """Seconds a pop (beyond ``pop_wait_ms``) or an outcome report may take before it is retried."""
    done_attempts: int = 5
    """Tries of one outcome report; then the queue's in-flight deadline takes over."""
    lease_ttl: float = 5.0
    """Seconds the lease lasts without renewal: how long a standby waits after a crash."""
    renew_interval: float = 1.0
    """Seconds between lease renewals (a standby's attempts to take it)."""
    resync_interval: float = 30.0
    """Seconds between the starts of full re-reads of the node table from Redis (heals missed events)."""
    resync_slice: int = 500
    """Nodes re-read before one batch: a full re-read is spread over several batches, so the
    pods of one batch wait for a slice, not for the whole (5,000 nodes read at once took about
    a second on a busy 2-core machine: the p99 of creation-to-binding at a steady 200 pods/s
    went from 0.72-1.03 s to 0.17-0.32 s with slices of 500 in three alternating pairs,
    bench/head_to_head.py)."""
    resync_budget: float = 0.1
    """At most this share of the cycle's time goes to full re-reads, while pods wait: a slice
    goes before a batch only once the last one's cost is this share of the time since it began
    (an idle cycle reads the next slice at once), and a re-read that took longer than budget ×
    resync_interval puts the next one off (at 50,000 nodes a re-read takes seconds)."""
    reserve_concurrency: int = 64
    """Redis calls in flight at once while reserving a batch."""
    presence_interval: float = 2.0
    """Seconds between a leading cycle's presence notices (an empty `ReservedPods`). A cycle
    announces its reservations only while another profile's cycle is there to take them in:
    one heard within 3 intervals, or in its own first 3 intervals of leading (before it could
    have heard any). Alone, it sends nothing more."""
    warm_standby: bool = True
    """A standby keeps its node table current while it waits for the lease: loaded at start,
    the rows events name read again every ``renew_interval``, full re-reads as the leader's
    (within ``resync_budget``). A takeover then reads only the rows changed since, instead of
    every node (at 50,000 nodes: 7.5 s). False: the table is loaded on taking the lease."""
    backend: str = "auto"
    """Array backend of the node table: auto (numpy), numpy or cupy (`kubus.kernels.select_backend`)."""
    seed: int = 0
    """Tie-break seed: equal seeds give equal placements."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {self.batch_size}")
        if self.pop_wait_ms < 0:
            raise ValueError(f"pop_wait_ms: must not be negative, got {self.pop_wait_ms}")
        if not 0 <= self.pop_pace <= 1:
            raise ValueError(f"pop_pace: must be 0 to 1 second, got {self.pop_pace!r}")
        if self.done_attempts < 1:
            raise ValueError(f"done_attempts: must be at least 1, got {self.done_attempts}")
        if self.reserve_concurrency < 1:
            raise ValueError(f"reserve_concurrency: must be at least 1, got {self.reserve_concurrency}")
        if self.resync_slice < 1:
            raise ValueError(f"resync_slice: must be at least 1, got {self.resync_slice}")
        if not 0 < self.resync_budget <= 1:
            raise ValueError(f"resync_budget: must be in (0, 1], got {self.resync_budget!r}")
        for name in ("request_timeout", "lease_ttl", "renew_interval", "resync_interval", "presence_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if self.renew_interval >= self.lease_ttl:
            raise ValueError(f"renew_interval ({self.renew_interval}s) must be below lease_ttl ({self.lease_ttl}s)")
