"""WaitOnPermit: whether a reserved pod may be bound now. `AllowAll` for a profile without Permit
plugins; `PermitWatcher` over the waits the cycle's Permit plugins left in Redis
(`kubus.store.permits`), one task reading every waiting pod's state in one round trip a poll."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from kubus.bus.messages import BindRequest
from kubus.core.metrics import Metrics
from kubus.framework.status import Code, Status
from kubus.runtime.service import TRANSIENT_ERRORS
from kubus.store import ClusterState, PermitState

__all__ = ["NO_WAIT", "AllowAll", "PermitGate", "PermitWatcher"]

_log = logging.getLogger("kubus.binder")


class PermitGate(Protocol):
    """WaitOnPermit: decides whether a reserved pod may be bound (gangs wait here for their
    members). Returns Success to go on, anything else (with reasons) to hand the pod back.
    The binder bounds the wait with its ``permit_timeout``."""

    async def wait_on_permit(self, request: BindRequest) -> Status: ...


class AllowAll:
    """The WaitOnPermit of a profile without Permit plugins: every pod may be bound at once."""

    async def wait_on_permit(self, request: BindRequest) -> Status:
        return Status.success()


NO_WAIT = Status(Code.SUCCESS, ("no wait on Permit",))
"""What `PermitWatcher` settles a request with that Permit did not make wait (or whose wait ended)."""


class PermitWatcher:
    """WaitOnPermit over the waits in Redis: a pod the cycle made wait is let go when no plugin
    holds it any more, failed when one rejected it or its deadline passed. One task reads every
    waiting pod's state in one pipelined round trip every ``poll`` seconds. Whoever ends a wait
    clears it. Records `scheduler_permit_wait_duration_seconds`."""

    def __init__(self, *, store: ClusterState, metrics: Metrics, poll: float, clock: Callable[[], float]) -> None:
        self.store = store
        self.metrics = metrics
        self.poll = poll
        self.clock = clock
        self._waiters: dict[tuple[str, int], asyncio.Future[Status]] = {}
        self._wake = asyncio.Event()

    async def wait_on_permit(self, request: BindRequest) -> Status:
        key = (request.uid, request.attempt)
        future = self._waiters.get(key)
        if future is None:
            future = self._waiters[key] = asyncio.get_running_loop().create_future()
            self._wake.set()
        started = time.perf_counter()
        status = await asyncio.shield(future)
        if status is NO_WAIT:
            return Status.success()
        result = "allowed" if status.is_success else "rejected"
        self.metrics.permit_wait_duration.labels(result=result).observe(time.perf_counter() - started)
        await self.store.clear_permit(request.uid, request.profile, request.attempt)
        return status

    def waits(self, request: BindRequest, state: PermitState | None) -> bool:
        """Whether ``state`` (read for ``request``'s pod) is a wait of the request's attempt."""
        return state is not None and state.attempt == request.attempt

    async def run(self) -> None:
        """The watcher loop (a root task of the binder)."""
        while True:
            if not self._waiters:
                self._wake.clear()
                await self._wake.wait()
            waiting = [(key, f) for key, f in self._waiters.items() if not f.done()]
            try:
                states = await self.store.permit_states(uid for (uid, _), _ in waiting)
            except TRANSIENT_ERRORS as exc:  # Redis away: the waits go on; read again later
                _log.warning("event=%r error=%r", "permit states unreadable; retrying", exc)
                await asyncio.sleep(max(self.poll, 0.5))
                continue
            now = self.clock()
            for (uid, attempt), future in waiting:
                state = states.get(uid)
                if state is None or state.attempt != attempt:
                    future.set_result(NO_WAIT)  # Permit did not make it wait (or it ended)
                elif state.rejected:
                    future.set_result(Status.unschedulable(state.rejected))
                elif state.allowed:
                    future.set_result(Status.success())
                elif state.timed_out(now):
                    plugins = ", ".join(sorted(state.pending))
                    future.set_result(Status.unschedulable(f"rejected due to timeout waiting on {plugins}"))
            for key in [k for k, f in self._waiters.items() if f.done()]:
                del self._waiters[key]
            await asyncio.sleep(self.poll)
