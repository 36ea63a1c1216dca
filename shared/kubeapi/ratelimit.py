"""The client's own limit on its request rate: a token bucket, as client-go's
(``flowcontrol.NewTokenBucketRateLimiter(qps, burst)``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """At most ``burst`` requests at once, refilled at ``qps`` a second. ``qps <= 0``: no limit.

    Waiters are served in the order they asked (each takes a reservation, possibly in the
    future, and sleeps until then), so a steady caller is never starved by a burst of others.
    """

    __slots__ = ("_clock", "_last", "_tokens", "burst", "qps")

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 and qps > 0:
            raise ValueError(f"burst must be at least 1, not {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token; return the seconds to wait before using it (0.0: now)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        """Wait for a token. Cancelling the wait does not give the token back (as client-go)."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
