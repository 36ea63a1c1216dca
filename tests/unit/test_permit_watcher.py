"""The binder's WaitOnPermit watcher over a store of our own making (pure logic): it lets a pod
go when no plugin holds it, fails it when rejected or past its deadline, and rides out a store
that is briefly unreachable instead of dying."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kubus.binder.service import PermitWatcher
from kubus.bus.messages import BindRequest
from kubus.core.metrics import Metrics
from kubus.store import PermitState


class FlakyStore:
    """Answers permit_states from ``states``; the first ``failures`` reads raise ConnectionError."""

    def __init__(self, states: dict[str, PermitState], failures: int = 0) -> None:
        self.states = states
        self.failures = failures
        self.cleared: list[str] = []

    async def permit_states(self, uids: Iterable[str]) -> dict[str, PermitState | None]:
        uids = list(uids)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("redis away")
        return {uid: self.states.get(uid) for uid in uids}

    async def clear_permit(self, uid: str, profile: str, attempt: int | None = None) -> None:
        self.cleared.append(uid)


def request(uid: str, attempt: int = 2) -> BindRequest:
    return BindRequest(uid=uid, key=f"ns/{uid}", profile="p", node="n1", manifest=b"{}", attempt=attempt)


def state(uid: str, pending: frozenset[str], *, rejected: str = "", deadline: float = 1e12) -> PermitState:
    return PermitState(uid, f"ns/{uid}", 2, "n1", "p", deadline, pending, rejected)


async def test_the_watcher_decides_each_wait_and_rides_out_a_store_outage() -> None:
    store = FlakyStore(
        {
            "allowed": state("allowed", frozenset()),
            "rejected": state("rejected", frozenset({"Gang"}), rejected="Gang: no"),
            "late": state("late", frozenset({"Gang"}), deadline=0.0),
            "older": PermitState("older", "ns/older", 1, "n1", "p", 1e12, frozenset({"Gang"})),
        },
        failures=2,
    )
    watcher = PermitWatcher(store=store, metrics=Metrics(), poll=0.01, clock=lambda: 100.0)  # type: ignore[arg-type]
    runner = asyncio.create_task(watcher.run())
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(watcher.wait_on_permit(request(uid)) for uid in ("allowed", "rejected", "late", "older"))),
            10,
        )
    finally:
        runner.cancel()
    allowed, rejected, late, older = results
    assert allowed.is_success and older.is_success  # older: a wait of another attempt is not this one's
    assert rejected.message() == "Gang: no"
    assert late.message() == "rejected due to timeout waiting on Gang"
    assert sorted(store.cleared) == ["allowed", "late", "rejected"]
    assert not runner.done() or runner.cancelled()
