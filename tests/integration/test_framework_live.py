"""The whole framework, live in the services (queue, cycle and binder in this process, over real
NATS and Redis): Permit that rejects, waits, is allowed or times out; PreBind, Bind and PostBind
plugins; Unreserve on every failure after Reserve; PostFilter on failure. Invariants hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from live_cluster import LiveCluster, live_cluster, pod, until_phase
from nats.js import JetStreamContext
from support import eventually

from kubus.api.objects import Pod
from kubus.core.settings import ConnectionSettings
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterDiagnosis, PostFilterResult
from kubus.framework.registry import Registry
from kubus.framework.status import Status
from kubus.framework.waiting import WaitingPods
from kubus.kernels.nodeinfo import NodeInfo
from kubus.plugins import in_tree_registry
from kubus.store import ClusterState, PodPhase, check_invariants

PROFILE = "default-scheduler"
NS = "live"


@dataclass
class Journal:
    """What the test plugins saw, across the services of this process."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    """(extension point, pod name) in the order they ran."""

    def of(self, point: str) -> list[str]:
        return [pod for p, pod in self.calls if p == point]


JOURNAL = Journal()


class Recorder:
    """Reserve (records Reserve and Unreserve), PreBind (fails pods named fail-prebind-*), Bind
    (binds pods named custom-bind-*, skips the others), PostBind (records)."""

    name: ClassVar[str] = "Recorder"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        JOURNAL.calls.append(("reserve", pod.metadata.name))
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        JOURNAL.calls.append(("unreserve", pod.metadata.name))

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        JOURNAL.calls.append(("prebind", pod.metadata.name))
        if pod.metadata.name.startswith("fail-prebind"):
            return Status.error("the volume would not attach")
        return Status.success()

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        if not pod.metadata.name.startswith("custom-bind"):
            return Status.skip()
        JOURNAL.calls.append(("bind", pod.metadata.name))
        return Status.success()

    def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        JOURNAL.calls.append(("postbind", pod.metadata.name))


class Gate:
    """Permit: rejects pods named deny-*, makes pods named wait-* wait (1 s for wait-brief-*,
    60 s for the others) until allowed; PostFilter: records and nominates nothing."""

    name: ClassVar[str] = "Gate"

    def __init__(self, args: object = None, handle: WaitingPods | None = None) -> None:
        self.handle = handle

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        name = pod.metadata.name
        if name.startswith("deny"):
            return Status.unschedulable("denied by the test"), 0.0
        if name.startswith("wait"):
            return Status.wait(), 1.0 if name.startswith("wait-brief") else 60.0
        return Status.success(), 0.0

    def post_filter(self, state: CycleState, pod: Pod, diagnosis: FilterDiagnosis) -> PostFilterResult:
        JOURNAL.calls.append(("postfilter", pod.metadata.name))
        return PostFilterResult(Status.unschedulable("nothing to preempt here"))


CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {PROFILE}
  plugins:
    reserve: {{enabled: [{{name: Recorder}}]}}
    preBind: {{enabled: [{{name: Recorder}}]}}
    bind:  # before DefaultBinder, as kube orders them: disable the default, enable both
      disabled: [{{name: DefaultBinder}}]
      enabled: [{{name: Recorder}}, {{name: DefaultBinder}}]
    postBind: {{enabled: [{{name: Recorder}}]}}
    permit: {{enabled: [{{name: Gate}}]}}
    postFilter: {{enabled: [{{name: Gate}}]}}
"""


@pytest.fixture
async def live(settings: ConnectionSettings, state: ClusterState, js: JetStreamContext) -> AsyncIterator[LiveCluster]:
    JOURNAL.calls.clear()
    registry: Registry = in_tree_registry()
    registry.register(Recorder)
    registry.register(Gate)
    async with live_cluster(settings, state, js, CONFIG, registry) as cluster:
        yield cluster


async def phase_of(state: ClusterState, uid: str) -> PodPhase | None:
    record = await state.get_pod(uid)
    return None if record is None else record.phase


async def test_every_extension_point_runs_in_order_for_a_plain_pod(live: LiveCluster) -> None:
    [uid] = await live.submit(pod("plain"))
    await until_phase(live.state, uid, PodPhase.BOUND)

    async def post_bound() -> None:
        # PostBind runs after the store's bind: Bound in Redis may come a moment before it.
        assert [p for p, name in JOURNAL.calls if name == "plain"] == ["reserve", "prebind", "postbind"]

    await eventually(post_bound, timeout=10)
    assert await check_invariants(live.state) == []
    cycle, binder = live.services[1].metrics.exposition().decode(), live.services[-1].metrics.exposition().decode()
    for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit"):
        assert f'scheduler_framework_extension_point_duration_seconds_count{{extension_point="{point}"' in cycle
    assert (
        'scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="NodeResourcesFit"' in cycle
    )
    assert 'scheduler_plugin_execution_duration_seconds_count{extension_point="PreBind",plugin="Recorder"' in binder
    assert "scheduler_pod_scheduling_attempts_count 1.0" in binder


async def test_a_bind_plugin_that_does_not_skip_binds_and_post_bind_follows(live: LiveCluster) -> None:
    [uid] = await live.submit(pod("custom-bind-1"))
    await until_phase(live.state, uid, PodPhase.BOUND)

    async def post_bound() -> None:
        # PostBind runs after the store's bind: Bound in Redis may come a moment before it.
        assert [p for p, name in JOURNAL.calls if name == "custom-bind-1"] == ["reserve", "prebind", "bind", "postbind"]

    await eventually(post_bound, timeout=10)


async def test_permit_rejects_and_unreserve_runs(live: LiveCluster) -> None:
    [denied, fine] = await live.submit(pod("deny-1"), pod("fine-1"))
    await until_phase(live.state, fine, PodPhase.BOUND)

    async def rejected() -> None:
        record = await live.state.get_pod(denied)
        assert record is not None and record.phase is PodPhase.PENDING
        assert 'rejected pod "deny-1" by permit plugin "Gate": denied by the test' in record.message, record.message
        assert "unreserve" in [p for p, name in JOURNAL.calls if name == "deny-1"]

    await eventually(rejected, timeout=20, interval=0.05)
    for node in ("n0", "n1"):
        assert denied not in {r.pod_uid for r in await live.state.reservations(node)}
    assert await check_invariants(live.state) == []


async def test_a_waiting_pod_keeps_its_room_blocks_no_one_and_binds_once_allowed(live: LiveCluster) -> None:
    [waiter] = await live.submit(pod("wait-long-1"))

    async def waiting() -> None:
        states = await live.state.waiting_pods(PROFILE)
        assert [(s.uid, s.pending) for s in states] == [(waiter, frozenset({"Gate"}))]
        assert await phase_of(live.state, waiter) is PodPhase.RESERVED

    await eventually(waiting, timeout=20, interval=0.05)
    [other] = await live.submit(pod("fine-2"))
    await until_phase(live.state, other, PodPhase.BOUND)  # not held up by the waiting pod
    assert await phase_of(live.state, waiter) is PodPhase.RESERVED
    [state] = await live.state.waiting_pods(PROFILE)
    assert await live.state.allow_permit(waiter, state.attempt, "Gate")
    await until_phase(live.state, waiter, PodPhase.BOUND)
    assert await live.state.waiting_pods(PROFILE) == []  # the binder ended the wait
    assert await check_invariants(live.state) == []


async def test_a_permit_timeout_unreserves_and_hands_the_pod_back(live: LiveCluster) -> None:
    [waiter] = await live.submit(pod("wait-brief-1"))

    async def handed_back() -> None:
        record = await live.state.get_pod(waiter)
        assert record is not None and record.phase in (PodPhase.PENDING, PodPhase.RESERVED)
        assert "rejected due to timeout waiting on Gate" in record.message, record.message

    await eventually(handed_back, timeout=20, interval=0.05)
    assert "unreserve" in [p for p, name in JOURNAL.calls if name == "wait-brief-1"]
    assert await check_invariants(live.state) == []


async def test_a_failed_pre_bind_unreserves_and_hands_the_pod_back(live: LiveCluster) -> None:
    [uid] = await live.submit(pod("fail-prebind-1"))

    async def handed_back() -> None:
        record = await live.state.get_pod(uid)
        assert record is not None and "PreBind plugin Recorder: the volume would not attach" in record.message
        assert record.bindings == 0

    await eventually(handed_back, timeout=20, interval=0.05)
    assert "unreserve" in [p for p, name in JOURNAL.calls if name == "fail-prebind-1"]
    assert "bind" not in [p for p, name in JOURNAL.calls if name == "fail-prebind-1"]
    assert await check_invariants(live.state) == []


async def test_post_filter_runs_when_no_node_fits(live: LiveCluster) -> None:
    [uid] = await live.submit(pod("too-big", cpu="64"))

    async def unschedulable() -> None:
        record = await live.state.get_pod(uid)
        assert record is not None and record.reason == "Unschedulable"
        assert "nothing to preempt here." in record.message, record.message

    await eventually(unschedulable, timeout=20, interval=0.05)
    assert "too-big" in JOURNAL.of("postfilter")
    await asyncio.sleep(0)
