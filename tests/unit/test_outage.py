"""`kubus.runtime.service.Outage`: intake pauses while a server is away, with a growing backoff, says so
once each way, and resumes by itself; `Throttle`: one line per interval of a flood."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kubus.runtime.service import Outage, Throttle, logger


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_intake_pauses_until_the_servers_answer_and_says_so_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = ["redis: MISCONF", "redis: MISCONF", None]
    probes: list[str | None] = []

    async def probe() -> str | None:
        probes.append(answers[0])
        return answers.pop(0)

    outage = Outage(logger("kubus.test"), probe, first=0.01, cap=0.02)
    stopping = asyncio.Event()
    await outage.pause(stopping)  # nothing noted: at once
    assert probes == []
    with caplog.at_level(logging.INFO):
        outage.note(ConnectionError("redis went away"))
        outage.note(ConnectionError("still away"))
        assert outage.reason is not None and "still away" in outage.reason
        await asyncio.wait_for(outage.pause(stopping), 5)
    assert probes == ["redis: MISCONF", "redis: MISCONF", None]
    assert outage.reason is None
    lines = [r.getMessage() for r in caplog.records]
    assert sum("intake paused" in line for line in lines) == 1
    assert sum("intake resumed" in line for line in lines) == 1


async def test_one_outage_waits_the_same_however_many_messages_met_it() -> None:
    clock = Clock()

    async def probe() -> str | None:
        return None

    outage = Outage(logger("kubus.test"), probe, first=0.5, cap=4.0, clock=clock)
    for _ in range(64):  # a batch of 64 messages, each failing on the same outage
        outage.note(OSError("down"))
    assert outage._resume_at - clock.now == 0.5


async def test_probes_back_off_within_an_outage_and_outages_in_a_row_start_longer() -> None:
    answers: list[str | None] = []
    waited: list[float] = []
    """The wait that came before each probe (a setting, not a measured time)."""

    async def probe() -> str | None:
        waited.append(outage._wait)
        return answers.pop(0)

    outage = Outage(logger("kubus.test"), probe, first=0.001, cap=0.008, forget_after=60.0)
    stopping = asyncio.Event()
    outage.note(OSError("down"))
    answers[:] = ["down", "down", "down", "down", None]
    await asyncio.wait_for(outage.pause(stopping), 5)
    assert waited == [0.001, 0.002, 0.004, 0.008, 0.008]  # each probe waits longer, capped
    outage.note(OSError("OOM"))  # PING answers, writes fail again at once
    answers[:], waited[:] = [None], []
    await asyncio.wait_for(outage.pause(stopping), 5)
    assert waited == [0.002]  # the second outage in a row starts longer
    outage._ended -= 61  # a quiet minute: forgotten
    outage.note(OSError("down again"))
    answers[:], waited[:] = [None], []
    await asyncio.wait_for(outage.pause(stopping), 5)
    assert waited == [0.001]


async def test_a_stopping_service_does_not_wait_out_the_outage() -> None:
    async def probe() -> str | None:
        return "nats: not connected"

    outage = Outage(logger("kubus.test"), probe, first=30.0)
    outage.note(OSError("down"))
    stopping = asyncio.Event()
    stopping.set()
    await asyncio.wait_for(outage.pause(stopping), 1)
    assert outage.reason is not None


def test_a_throttle_lets_one_line_through_per_interval_and_counts_the_rest() -> None:
    clock = Clock()
    throttle = Throttle(10.0, clock=clock)
    assert throttle.allow() == 0
    assert [throttle.allow() for _ in range(3)] == [None, None, None]
    clock.now += 10
    assert throttle.allow() == 3
    assert throttle.allow() is None
