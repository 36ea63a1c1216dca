"""This replica's term as the serving queue (`Term`): the lease ``queue``, and whether the queues
were rebuilt for the term it holds. Every part asks `Term.serves` before it does anything."""

from __future__ import annotations

import asyncio
import contextlib

from kubus.runtime.leasing import Leadership

__all__ = ["Term"]


class Term:
    """Whether this replica serves: it holds the lease ``queue`` (`leadership`) and its queues
    were rebuilt for this term (`begin`)."""

    def __init__(self, *, leadership: Leadership) -> None:
        self.leadership = leadership
        """The lease ``queue``: only its holder takes pods in, serves the cycles and repairs."""
        self.serving = asyncio.Event()
        """Set while this replica serves (it leads, and its queues were rebuilt for this term)."""
        self.served_term = 0
        """The leadership term the queues were last rebuilt for (0: never)."""

    def serves(self) -> bool:
        """Whether this replica serves now: it holds the lease ``queue`` (not run out) and its
        queues were rebuilt for this term. Pops, outcomes, intake, events and the periodic
        repairs are all refused otherwise."""
        leadership = self.leadership
        return self.serving.is_set() and leadership.leading and leadership.term == self.served_term

    async def until_serving(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds) for this replica to serve."""
        if self.serving.is_set():  # the lease ran out, the step-down is under way
            await asyncio.sleep(0.05)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.serving.wait(), timeout)

    def begin(self, term: int) -> None:
        """The queues were rebuilt for ``term``: serve."""
        self.served_term = term
        self.serving.set()

    def end(self) -> bool:
        """Serve no more (pops, outcomes, intake, repairs); whether it was serving."""
        was = self.serving.is_set()
        self.serving.clear()
        return was
