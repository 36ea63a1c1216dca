"""`kubus up`'s restart policy: a process that keeps exiting is started again after a growing
wait, capped, for as long as it takes; one that ran a while starts over from the first wait."""

from __future__ import annotations

from kubus.cli.up import RestartBackoff


def test_waits_double_while_a_process_exits_soon_after_each_start_up_to_the_cap() -> None:
    backoff = RestartBackoff(first=0.5, cap=30.0, steady=60.0)
    waits = [backoff.delay(ran_for=1.0) for _ in range(10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_a_process_that_ran_steadily_starts_over_from_the_first_wait() -> None:
    backoff = RestartBackoff(first=0.5, cap=30.0, steady=60.0)
    for _ in range(5):
        backoff.delay(ran_for=0.1)
    assert backoff.delay(ran_for=61.0) == 0.5
    assert backoff.delay(ran_for=0.1) == 1.0
