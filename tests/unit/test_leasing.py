"""`kubus.runtime.leasing.Leadership` against a lease store in memory: taking, losing and waiting."""

from __future__ import annotations

import asyncio

from kubus.runtime.leasing import Leadership
from kubus.runtime.service import logger


class Leases:
    """acquire_lease / release_lease as the store's scripts answer them (no ttl: tests expire it)."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.token = 0

    async def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> int | None:
        if self.holder not in (None, holder):
            return None
        if self.holder != holder:
            self.holder, self.token = holder, self.token + 1
        return self.token

    async def release_lease(self, name: str, holder: str) -> bool:
        if self.holder != holder:
            return False
        self.holder = None
        return True


def leadership(leases: Leases, holder: str = "a", ttl: float = 0.2) -> Leadership:
    return Leadership(leases, "queue", holder, ttl=ttl, renew_interval=ttl / 4, log=logger("test"))  # type: ignore[arg-type]


async def test_wait_lost_returns_once_the_lease_runs_out_unrenewed() -> None:
    lead = leadership(Leases())
    assert await lead.try_acquire()
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(lead.wait_lost(asyncio.Event(), lead.term), 2)
    assert not lead.leading
    assert loop.time() - began >= 0.15  # held until its ttl ran out, not longer than the wait's bound


async def test_wait_lost_returns_on_a_step_down_and_on_a_new_term() -> None:
    leases = Leases()
    lead = leadership(leases, ttl=5.0)
    assert await lead.try_acquire()
    first = lead.term
    waiting = asyncio.create_task(lead.wait_lost(asyncio.Event(), first))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    lead.step_down("a newer leader exists")
    await asyncio.wait_for(waiting, 1)
    assert await lead.try_acquire() and lead.term == first + 1  # the same holder again: a new term
    await asyncio.wait_for(lead.wait_lost(asyncio.Event(), first), 1)  # the old term is over
    assert lead.leading


async def test_wait_gives_up_after_its_timeout_while_another_holds_the_lease() -> None:
    leases = Leases()
    other, lead = leadership(leases, "b", ttl=5.0), leadership(leases, "a", ttl=5.0)
    assert await other.try_acquire()
    assert not await lead.try_acquire()
    assert await lead.wait(asyncio.Event(), timeout=0.05) is False
    await other.release()
    assert await lead.try_acquire()
    assert await lead.wait(asyncio.Event(), timeout=0.05) is True
