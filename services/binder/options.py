"""How a binder replica works: `BinderOptions`, from the command line (`kubus.binder.__main__`)."""

from __future__ import annotations

from dataclasses import dataclass

from kubus.bus import ACK_WAIT
from kubus.framework.runtime import MAX_PERMIT_TIMEOUT

__all__ = ["BinderOptions"]


@dataclass(frozen=True, slots=True)
class BinderOptions:
    """How a binder replica works. Every replica of a deployment should use the same values."""

    permit_timeout: float = MAX_PERMIT_TIMEOUT
    """Seconds WaitOnPermit waits at most, whatever the Permit plugins' own timeouts (kube caps
    them at 15 minutes)."""
    permit_poll: float = 0.05
    """Seconds between two reads of the waits on Permit (one pipelined read for all of them)."""
    max_failures: int = 5
    """Failed tries of one BindRequest at most; the last hands the pod back. A try that failed
    because NATS or Redis was away is not counted: the request waits out the outage."""
    ack_wait: float = ACK_WAIT
    """Seconds JetStream waits for an ack before redelivering (`kubus.bus.ACK_WAIT`); a request
    still being handled (a long permit wait) reports progress every third of it."""
    batch: int = 64
    """BindRequests fetched and handled concurrently at a time."""
    batches_in_flight: int = 8
    """Fetched batches handled at once at most (a batch waiting on Permit keeps its slot)."""
    fetch_timeout: float = 1.0
    """Seconds one fetch waits for requests (how quickly an idle binder notices stop)."""
    fetch_pace: float = 0.01
    """Seconds between a fetch that came back short and the next (`kubus.runtime.service.Service.fetch`):
    requests trickling in are bound, stored and announced as one batch."""
    durable: str = "kubus-binder"
    """Name of the durable consumer every replica shares."""

    def __post_init__(self) -> None:
        for name in ("permit_timeout", "ack_wait", "fetch_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if not 0 <= self.fetch_pace <= 1:
            raise ValueError(f"fetch_pace: must be 0 to 1 second, got {self.fetch_pace!r}")
        if self.max_failures < 1:
            raise ValueError(f"max_failures: must be at least 1, got {self.max_failures}")
        if self.batch < 1 or self.batches_in_flight < 1:
            raise ValueError(
                f"batch, batches_in_flight: must be at least 1, got {self.batch}, {self.batches_in_flight}"
            )
