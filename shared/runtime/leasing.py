"""Leadership of a service that must run once: the lease in Redis that names its one active
replica (``cycle/<profile>`` for a profile's scheduling cycle, ``queue`` for the queue).

One replica holds the lease at a time (`ClusterState.acquire_lease`, a fencing token that grows
with every new holder). `Leadership.keep` renews it every ``renew_interval``; a standby runs the
same loop and takes the lease once it lapses. A holder counts itself leader only until
``ttl`` after the start of its last successful renewal, so it stops before Redis lets anybody
else take over, even when Redis stops answering it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState

__all__ = ["Leadership"]


class Leadership:
    """Holds (or waits for) one lease. ``token`` is the fencing token while leading, else None.

    ``term`` counts the acquisitions this replica made: a changed term means the replica led
    with a gap in between, and what it knew of the cluster must be read again.
    """

    def __init__(
        self,
        store: ClusterState,
        name: str,
        holder: str,
        *,
        ttl: float,
        renew_interval: float,
        log: StructuredLogger,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not 0 < renew_interval < ttl:
            raise ValueError(f"lease renew interval ({renew_interval}s) must be positive and below its ttl ({ttl}s)")
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.renew_interval = renew_interval
        self.log = log.bind(lease=name, holder=holder)
        self._clock = clock or asyncio.get_running_loop().time
        self._token: int | None = None
        self._valid_until = 0.0
        self.term = 0
        self._changed = asyncio.Event()

    @property
    def token(self) -> int | None:
        """The fencing token while this replica leads (and its lease has not run out), else None."""
        if self._token is not None and self._clock() >= self._valid_until:
            self._lose("lease ran out before it could be renewed")
        return self._token

    @property
    def leading(self) -> bool:
        return self.token is not None

    async def keep(self) -> None:
        """Take or renew the lease every ``renew_interval``, forever (a root task). Redis being
        away is logged, and leadership ends when the lease runs out."""
        while True:
            await self.try_acquire()
            await asyncio.sleep(self.renew_interval)

    async def try_acquire(self) -> bool:
        """Take or renew the lease once; True while leading after it. Never raises for Redis
        being away (logged)."""
        started = self._clock()
        try:
            token = await self.store.acquire_lease(self.name, self.holder, max(1, int(self.ttl * 1000)))
        except TRANSIENT_ERRORS as exc:
            self.log.warning("lease renewal failed", error=repr(exc), leading=self.leading)
        else:
            if token is None:
                if self._token is not None:
                    self._lose("another replica holds the lease")
            else:
                self._hold(token, started + self.ttl)
        return self.leading

    async def wait(self, stopping: asyncio.Event, *, timeout: float | None = None) -> bool:
        """Return True once leading, False once ``stopping`` is set or ``timeout`` seconds
        passed (None: no limit) without leading."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not stopping.is_set():
            if self.leading:
                return True
            step = self.renew_interval if deadline is None else min(self.renew_interval, deadline - loop.time())
            if step <= 0:
                return False
            await self._changed_or(stopping, step)
        return False

    async def wait_lost(self, stopping: asyncio.Event, term: int) -> None:
        """Return once this replica no longer leads in ``term`` (it lost the lease, or lost and
        took it again: a new term), or ``stopping`` is set: woken by the lease loop, or when the
        lease runs out unrenewed."""
        while not stopping.is_set() and self.leading and self.term == term:
            left = self._valid_until - self._clock()
            await self._changed_or(stopping, max(0.001, min(left, self.renew_interval)))

    async def _changed_or(self, stopping: asyncio.Event, timeout: float) -> None:
        self._changed.clear()
        waits = [asyncio.ensure_future(self._changed.wait()), asyncio.ensure_future(stopping.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def step_down(self, why: str) -> None:
        """Stop leading now (a FENCED reservation said a newer leader exists). The lease loop may
        take the lease again later, as a new term."""
        if self._token is not None:
            self._lose(why)

    async def release(self) -> None:
        """Give the lease up (a clean stop), so a standby takes over at once. Idempotent."""
        self._token = None
        try:
            released = await self.store.release_lease(self.name, self.holder)
        except TRANSIENT_ERRORS as exc:
            self.log.warning("lease release failed; it lapses by itself", error=repr(exc))
            return
        if released:
            self.log.info("lease released")

    def _hold(self, token: int, valid_until: float) -> None:
        if token != self._token:
            self.term += 1
            self.log.info("became leader", token=token, term=self.term)
        self._token = token
        self._valid_until = valid_until
        self._changed.set()

    def _lose(self, why: str) -> None:
        self.log.warning("leadership lost", token=self._token, reason=why)
        self._token = None
        self._changed.set()
