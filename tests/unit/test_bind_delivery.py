"""A message of several bind requests is settled once each of them is (`Delivery`, `Part`)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from nats.aio.msg import Msg

from kubus.binder.work import Delivery


class FakeMsg:
    """What a JetStream message was told, in order (a pure test of our own logic)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    @property
    def is_acked(self) -> bool:
        return bool(self.told)

    async def ack(self) -> None:
        self.told.append(("ack", None))

    async def nak(self, delay: float | None = None) -> None:
        self.told.append(("nak", delay))

    async def term(self) -> None:
        self.told.append(("term", None))


async def settle(verbs: list[tuple[str, float | None]]) -> list[tuple[str, Any]]:
    """Settle a message of ``len(verbs)`` requests, each with its verb, in order; what the
    message was told after each."""
    msg = FakeMsg()
    delivery = Delivery(cast(Msg, msg), len(verbs))
    parts = [delivery.part(i) for i in range(len(verbs))]
    for part, (verb, delay) in zip(parts, verbs, strict=True):
        if verb == "nak":
            await part.nak(delay)
        else:
            await getattr(part, verb)()
    return msg.told


@pytest.mark.parametrize(
    ("verbs", "told"),
    [
        ([("ack", None)] * 3, [("ack", None)]),
        ([("ack", None), ("term", None)], [("ack", None)]),  # one given up on, one bound: done
        ([("term", None), ("term", None)], [("term", None)]),
        ([("nak", 0.5), ("ack", None), ("nak", 2.0)], [("nak", 2.0)]),  # the longest delay asked
        ([("nak", None), ("term", None)], [("nak", None)]),
    ],
)
async def test_the_message_is_told_once_every_request_is_settled(
    verbs: list[tuple[str, float | None]], told: list[tuple[str, Any]]
) -> None:
    assert await settle(verbs) == told


async def test_a_request_settled_twice_counts_once_and_the_message_waits_for_the_others() -> None:
    msg = FakeMsg()
    delivery = Delivery(cast(Msg, msg), 2)
    first, second = delivery.part(0), delivery.part(1)
    await first.nak(1.0)
    await first.ack()  # already settled: changes nothing
    assert msg.told == []  # the second is still being bound
    await second.ack()
    assert msg.told == [("nak", 1.0)]
    assert (first.index, second.index, first.msg) == (0, 1, msg)
