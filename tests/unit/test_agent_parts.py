"""The agent's parts that need no server: whether an assignment is still the agent's to run
(`AdmissionView.refusal`), its table of running pods and their timer, and NVML's errors."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from kubus.api.attempts import NO_ATTEMPT, Attempt
from kubus.gpu_agent.inventory import NVML
from kubus.gpu_agent.running import RunningPods
from kubus.store import AdmissionView, PodPhase, Reservation
from kubus.store.records import ReservationState

BOUND = Reservation("u1", "default/web", "n1", "default", {"cpu": 1000}, attempt=7, state=ReservationState.BOUND)


def view(phase: PodPhase | None = PodPhase.BOUND, pod_node: str = "n1", reservation: Any = BOUND) -> AdmissionView:
    return AdmissionView("u1", "n1", phase, pod_node, "default", 0.0, reservation)


# ---- AdmissionView.refusal: the checks START_POD makes ------------------------------------------


def test_a_bound_or_running_pod_with_its_bound_reservation_is_the_agents_to_run() -> None:
    assert view().refusal(7) is None
    assert view().refusal(NO_ATTEMPT) is None  # any attempt
    assert view(PodPhase.RUNNING).refusal(7) is None


@pytest.mark.parametrize(
    ("the_view", "attempt", "why"),
    [
        (view(None, "", None), 7, "no such pod"),
        (view(PodPhase.SUCCEEDED), 7, "pod already finished (Succeeded)"),
        (view(PodPhase.DELETED, ""), 7, "pod already finished (Deleted)"),
        (view(pod_node="n2"), 7, "the pod is on another node (n2)"),
        (view(reservation=None), 7, "no bound reservation on this node (no reservation)"),
        (
            view(reservation=replace(BOUND, state=ReservationState.RESERVED)),
            7,
            "no bound reservation on this node (its reservation is not bound)",
        ),
        (view(), 8, "the reservation is another attempt's (7)"),
        (view(PodPhase.RESERVED), 7, "the pod is not bound (Reserved)"),
        (view(PodPhase.RUNNING, reservation=None), NO_ATTEMPT, "no bound reservation on this node (no reservation)"),
    ],
)
def test_refusals_say_why(the_view: AdmissionView, attempt: Attempt, why: str) -> None:
    assert the_view.refusal(attempt) == why


# ---- RunningPods: the table and its timer ---------------------------------------------------------


def test_running_pods_are_tracked_by_uid_node_and_key_and_counted() -> None:
    counts: list[int] = []
    pods = RunningPods(["n1", "n2"], lambda uid: 0.0, counts.append)
    pod = pods.track("u1", "default/web", "n1", BOUND, started_at=100.0, confirmed=True)
    pods.track("u2", "default/db", "n2", None, started_at=100.0, confirmed=True)
    assert dict(pods) == {"u1": pod, "u2": pods["u2"]} and len(pods) == 2 and "u1" in pods
    assert pods.reservations_on("n1") == [BOUND] and pods.reservations_on("n2") == []  # none: left out
    assert pods.uid_of("default/web") == "u1" and pods.uid_of("default/other") is None
    assert pod.deadline == 0.0 and pods.next_deadline() is None  # runs until deleted: no timer
    assert pods.untrack("u1") is pod and pods.untrack("u1") is None
    assert pods.uid_of("default/web") is None and pods.reservations_on("n1") == []
    assert counts == [1, 2, 1]


def test_the_timer_starts_when_redis_confirms_and_skips_stale_entries() -> None:
    pods = RunningPods(["n1"], lambda uid: {"a": 10.0, "b": 20.0}.get(uid, 0.0))
    a = pods.track("a", "default/a", "n1", None, started_at=100.0, confirmed=False)
    assert a.deadline == 110.0 and not a.confirmed and pods.next_deadline() is None and not pods.wake.is_set()
    pods.confirm(a)
    pods.confirm(a)  # idempotent: one timer entry
    assert pods.next_deadline() == 110.0 and pods.wake.is_set()
    b = pods.track("b", "default/b", "n1", None, started_at=100.0, confirmed=True)
    assert pods.due(109.0) == [] and pods.due(110.0) == [a]
    pods.schedule(b, 130.0)  # rescheduled: the entry at 120 is stale
    assert pods.due(125.0) == [] and pods.due(130.0) == [b]
    pods.schedule(b, 140.0)
    pods.untrack("b")  # gone: its entry is stale
    assert pods.due(200.0) == [] and pods.next_deadline() is None


# ---- NVML errors ----------------------------------------------------------------------------------


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


class StrictNVML:
    """A pynvml stand-in that fails as pynvml does: NVMLError for what the driver refuses."""

    NVMLError = NVMLError

    def __init__(self, *, bug: bool = False) -> None:
        self.bug = bug

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= 2:
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        if handle == 1:
            raise (ValueError("a bug") if self.bug else NVMLError("GPU is lost"))
        return SimpleNamespace(total=80 * 1024**3)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        raise NVMLError("Not Supported")

    def nvmlShutdown(self) -> None:
        raise NVMLError("Uninitialized")


def test_nvml_errors_mean_an_unhealthy_gpu_and_other_errors_propagate() -> None:
    nvml = NVML.open(StrictNVML())  # type: ignore[arg-type]
    assert nvml is not None
    assert [(g.index, g.healthy) for g in nvml.devices()] == [(0, True), (1, False)]
    assert nvml.healthy(0) and not nvml.healthy(1) and not nvml.healthy(5)
    nvml.close()  # an NVML error at shutdown is logged, not raised

    buggy = NVML.open(StrictNVML(bug=True))  # type: ignore[arg-type]
    assert buggy is not None
    with pytest.raises(ValueError, match="a bug"):
        buggy.devices()
