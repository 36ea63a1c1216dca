"""The live line of `kubus up --demo` and `kubus bench`: the recent binding rate, labelled as such,
and, when nothing was bound of late while pods wait and others run, why."""

from __future__ import annotations

from collections import Counter

from kubus.cli.progress import RATE_WINDOW, status_line
from kubus.store import PodPhase


def test_the_rate_is_the_recent_one_and_says_so() -> None:
    counts: Counter[PodPhase | None] = Counter({PodPhase.RUNNING: 10, PodPhase.SUCCEEDED: 5})
    line = status_line(counts, 15, 12.34, 7.0)
    assert line.endswith(f"|  bound 12.3/s (last {RATE_WINDOW:g}s)  7s"), line


def test_no_binding_while_pods_wait_for_running_ones_is_explained() -> None:
    counts: Counter[PodPhase | None] = Counter({PodPhase.PENDING: 40, PodPhase.RUNNING: 258})
    line = status_line(counts, 298, 0.0, 30.0)
    assert "bound 0.0/s" in line and "pending pods wait for running ones to finish" in line, line
