"""The gpu-agent against real NATS and Redis: registration and heartbeats of simulated nodes,
admission, running and finishing pods, rejections, deletion, restart, and one real node."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node
from kubus.bus import EVENTS_STREAM, NODES_STREAM, ConsumerConflictError, ensure_streams, event_subject, node_pods
from kubus.bus.messages import ClusterEvent, NodeAssignment, PodChange, encode
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.gpu_agent import AgentOptions, AgentService, NodeInventory
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, StoreCode, check_invariants

_ids = itertools.count()


# ---- building blocks ---------------------------------------------------------------------------


def template(*, cpu: str = "4", gpus: int = 2) -> Node:
    meta: dict[str, Any] = {"name": "template", "labels": {"pool": "sim", "kubernetes.io/hostname": "template"}}
    if gpus:
        devices = [{"index": i, "model": "H100", "memory": "80Gi"} for i in range(gpus)]
        meta["annotations"] = {"kubus.io/gpus": codec.dumps(devices).decode()}
    return parse_node({"kind": "Node", "metadata": meta, "status": {"capacity": {"cpu": cpu, "memory": "16Gi"}}})


def options(**kw: Any) -> AgentOptions:
    return AgentOptions(**{"heartbeat_interval": 0.1, "fetch_timeout": 0.2, **kw})


async def bound_pod(
    state: ClusterState, name: str, node: str, *, cpu: str = "1", gpus: int = 0, devices: tuple[int, ...] = ()
) -> NodeAssignment:
    """A pod as the queue, the cycle and the binder leave it: Bound on `node`, reservation bound."""
    requests: dict[str, Any] = {"cpu": cpu, "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}]},
    }
    pod, manifest = parse_pod(doc), codec.dumps(doc)
    uid = pod.metadata.uid
    assert await state.put_pod(PodRecord.of(pod, manifest, now=state.clock()))
    attempt = (await state.transition(uid, PodPhase.RESERVED, node=node, count_attempt=True)).version
    assert (
        await state.reserve(node, Reservation.of(PodInfo.of(pod).placed_on(devices), node, attempt=attempt))
    ).ok
    assert await state.mark_bound(node, uid, attempt) is StoreCode.OK
    assert (await state.bind_pod(uid, node, devices, expected_version=attempt)).ok
    return NodeAssignment(uid=uid, key=pod.key, node=node, manifest=manifest, gpu_devices=devices, attempt=attempt)


async def put_nodes(state: ClusterState, js: JetStreamContext, like: Node, count: int) -> None:
    """The nodes of a simulation in Redis, and the streams, before its agent starts (assignments
    waiting for it)."""
    for node in AgentService.simulating(None, like, count).nodes.values():
        await state.put_node(node)
    await ensure_streams(js)


async def assign(js: JetStreamContext, assignment: NodeAssignment | bytes, node: str | None = None) -> None:
    data = assignment if isinstance(assignment, bytes) else encode(assignment)
    subject = node_pods(node or (assignment.node if isinstance(assignment, NodeAssignment) else "sim-00000"))
    await js.publish(subject, data, headers={"Nats-Msg-Id": f"test/{next(_ids)}"})


async def phase(state: ClusterState, uid: str) -> PodPhase:
    pod = await state.get_pod(uid)
    assert pod is not None
    return pod.phase


async def events(js: JetStreamContext, subject: str) -> int:
    info = await js.stream_info(EVENTS_STREAM.name, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def stream_drained(js: JetStreamContext) -> None:
    info = await js.stream_info(NODES_STREAM.name)
    assert info.state.messages == 0, info.state


def admissions(agent: AgentService) -> dict[str, float]:
    out = {}
    for metric in agent.metrics.pod_admissions.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                out[sample.labels["result"]] = sample.value
    return out


async def _assert_running(state: ClusterState, uid: str) -> None:
    assert await phase(state, uid) is PodPhase.RUNNING


async def assert_released(state: ClusterState, node: str, uid: str) -> None:
    assert await state.reservation(node, uid) is None
    usage = await state.node_usage(node)
    assert usage is not None and usage.pods == 0 and usage.requested == {}
    assert all(g.used == 0 for g in usage.gpus)


# ---- registration and heartbeats ---------------------------------------------------------------


async def test_registers_simulated_nodes_and_heartbeats(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    agent = AgentService.simulating(settings, template(), 5, options(), prefix="gpu-")
    async with agent:
        assert await state.node_names() == [f"gpu-{i:05d}" for i in range(5)]
        nodes = await state.list_nodes()
        assert all(n.heartbeat is not None for n in nodes)
        assert {n.labels["kubernetes.io/hostname"] for n in nodes} == {n.name for n in nodes}
        assert all(n.labels["pool"] == "sim" and len(n.gpus) == 2 for n in nodes)
        assert len({n.uid for n in nodes}) == 5
        born = {n.name: n.created_at for n in nodes if n.name != "gpu-00002"}
        assert all(born.values())  # simulated nodes carry no creationTimestamp: first registered
        assert await events(js, "kubus.events.node.added.>") == 5
        assert agent.metrics.nodes.labels(state="ready")._value.get() == 5

        first = {n.name: n.heartbeat for n in nodes}

        async def beating() -> None:
            for n in await state.list_nodes():
                assert n.heartbeat is not None and n.heartbeat > (first[n.name] or 0)

        await eventually(beating)

        # Lost and found: a node marked unreachable is revived by the next heartbeat; a node
        # deleted from Redis is registered again.
        assert await state.mark_unreachable("gpu-00001")
        await state.delete_node("gpu-00002")

        async def healed() -> None:
            one, two = await state.get_node("gpu-00001"), await state.get_node("gpu-00002")
            assert one is not None and not one.unreachable
            assert two is not None and two.heartbeat is not None
            assert await events(js, event_subject("node.updated", "gpu-00001")) == 1
            assert await events(js, event_subject("node.added", "gpu-00002")) == 2

        await eventually(healed)

    # A restart registers the same nodes again: nothing changed, nothing announced.
    async with AgentService.simulating(settings, template(), 5, options(), prefix="gpu-"):
        assert await events(js, "kubus.events.node.added.>") == 6
        assert {n.name: n.created_at for n in await state.list_nodes() if n.name in born} == born  # as old as before
    assert await check_invariants(state) == []


@pytest.mark.slow
async def test_five_thousand_simulated_nodes_in_one_process(settings: ConnectionSettings, state: ClusterState) -> None:
    started = time.perf_counter()
    async with AgentService.simulating(settings, template(), 5000, options(heartbeat_interval=2.0)) as agent:
        took = time.perf_counter() - started
        assert len(await state.node_names()) == 5000
        beats = []
        for _ in range(2):  # the quicker of two pipelined heartbeats of every node (noise aside)
            beat = time.perf_counter()
            assert agent.parts is not None
            await agent.parts.registration.beat()
            beats.append(time.perf_counter() - beat)
        beat = min(beats)
    assert took < 30, f"registering 5000 nodes took {took:.1f}s"
    assert beat < 2.0, f"one heartbeat of 5000 nodes took {beat:.2f}s, longer than the heartbeat interval"


# ---- running pods ------------------------------------------------------------------------------


async def test_runs_an_assigned_pod_then_it_succeeds_and_releases(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 2, options(pod_duration=0.3)) as agent:
        assignment = await bound_pod(state, "train", "sim-00001", gpus=1, devices=(1,))
        usage = await state.node_usage("sim-00001")
        assert usage is not None and usage.gpus[1].used > 0
        await assign(js, assignment)

        async def running() -> None:
            assert any(e.reason == "Started" for e in await state.events(assignment.uid))
            assert await events(js, "kubus.events.pod.running.>") == 1

        await eventually(running)

        async def succeeded() -> None:
            assert await phase(state, assignment.uid) is PodPhase.SUCCEEDED
            await assert_released(state, "sim-00001", assignment.uid)
            assert await events(js, "kubus.events.pod.finished.>") == 1
            assert agent.running == {}

        await eventually(succeeded)
        assert [e.reason for e in await state.events(assignment.uid)] == ["Started", "Completed"]
        assert admissions(agent) == {"admitted": 1.0}
        assert agent.metrics.pods_running._value.get() == 0
        await stream_drained(js)
    assert await check_invariants(state) == []


async def test_rejects_an_assignment_without_a_bound_reservation(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0.1)) as agent:
        assignment = await bound_pod(state, "web", "sim-00000")
        # The room went back behind the binder's back: no reservation to run it on.
        assert await state.release("sim-00000", assignment.uid) is StoreCode.OK
        await assign(js, assignment)
        # An assignment from another attempt than the reservation's.
        other = await bound_pod(state, "api", "sim-00000")
        await assign(js, NodeAssignment(**{**_fields(other), "attempt": other.attempt + 7}))
        # An assignment for a pod that does not exist.
        await assign(js, NodeAssignment(uid="ghost", key="default/ghost", node="sim-00000", manifest=b"{}"))

        async def dropped() -> None:
            assert admissions(agent) == {"dropped": 3.0}
            await stream_drained(js)

        await eventually(dropped)
        assert await phase(state, assignment.uid) is PodPhase.BOUND
        assert await phase(state, other.uid) is PodPhase.BOUND
        assert agent.running == {}
        assert await events(js, "kubus.events.pod.running.>") == 0


async def test_a_pod_that_does_not_fit_the_real_node_fails(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(cpu="4"), 1, options()) as agent:
        # Redis believes the node is bigger than it is (a stale record): both pods got room.
        bigger = AgentService.simulating(None, template(cpu="8"), 1).nodes["sim-00000"]
        await state.put_node(bigger)
        first = await bound_pod(state, "first", "sim-00000", cpu="3")
        second = await bound_pod(state, "second", "sim-00000", cpu="3")
        await assign(js, first)

        async def first_running() -> None:
            assert await phase(state, first.uid) is PodPhase.RUNNING

        await eventually(first_running)
        await assign(js, second)

        async def second_failed() -> None:
            pod = await state.get_pod(second.uid)
            assert pod is not None and pod.phase is PodPhase.FAILED and pod.reason == "OutOfcpu"
            assert await state.reservation("sim-00000", second.uid) is None
            assert [e.reason for e in await state.events(second.uid)] == ["OutOfcpu"]
            assert await events(js, event_subject("pod.finished", second.key)) == 1
            assert admissions(agent) == {"admitted": 1.0, "rejected": 1.0}

        await eventually(second_failed)
        assert set(agent.running) == {first.uid}
    assert await check_invariants(state) == []


async def test_a_pod_gone_from_the_store_does_not_block_the_one_taking_its_room(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    """A preemption evicts in the store and reserves the room in one step; the victim's
    pod.deleted event may reach the agent after the preemptor's assignment. The agent asks the
    store before it fails a pod for lack of room: the victim is stopped, the preemptor runs."""
    async with AgentService.simulating(settings, template(cpu="4"), 1, options(pod_duration=0)) as agent:
        victim = await bound_pod(state, "victim", "sim-00000", cpu="3")
        await assign(js, victim)

        async def victim_running() -> None:
            assert await phase(state, victim.uid) is PodPhase.RUNNING and victim.uid in agent.running

        await eventually(victim_running)
        # evicted in the store, its event not (yet) announced
        assert (await state.transition(victim.uid, PodPhase.DELETED, reason="Preempted")).ok
        assert await state.release("sim-00000", victim.uid) is StoreCode.OK
        preemptor = await bound_pod(state, "preemptor", "sim-00000", cpu="3")
        await assign(js, preemptor)

        async def preemptor_running() -> None:
            assert await phase(state, preemptor.uid) is PodPhase.RUNNING
            assert set(agent.running) == {preemptor.uid}
            assert admissions(agent) == {"admitted": 2.0}

        await eventually(preemptor_running)
        assert await phase(state, victim.uid) is PodPhase.DELETED
    assert await check_invariants(state) == []


async def test_a_batch_admits_what_fits_and_handles_the_rest_as_one_by_one(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    # Redis believes the nodes have 8 CPUs (a stale record): they have 4, as the agent knows.
    await put_nodes(state, js, template(cpu="8"), 2)
    first = await bound_pod(state, "first", "sim-00000", cpu="3")
    second = await bound_pod(state, "second", "sim-00000", cpu="3")  # does not fit next to first
    gone = await bound_pod(state, "gone", "sim-00000", cpu="1")
    assert await state.release("sim-00000", gone.uid) is StoreCode.OK  # its room went back meanwhile
    gpu = await bound_pod(state, "gpu", "sim-00001", gpus=1, devices=(1,))
    for assignment in (first, second, gone, gpu, first):  # first twice: delivered again in the batch
        await assign(js, assignment)

    agent = AgentService.simulating(settings, template(cpu="4"), 2, options(pod_duration=0))
    sizes: list[int] = []
    handle_batch = agent.handle_batch

    async def spy(messages: Any) -> Any:
        sizes.append(len(messages))
        return await handle_batch(messages)

    agent.handle_batch = spy  # type: ignore[method-assign]
    async with agent:

        async def settled() -> None:
            assert admissions(agent) == {"admitted": 3.0, "rejected": 1.0, "dropped": 1.0}
            await stream_drained(js)

        await eventually(settled)
        assert sizes[0] == 5  # one batch
        assert set(agent.running) == {first.uid, gpu.uid}
        assert await phase(state, first.uid) is PodPhase.RUNNING
        assert await phase(state, gpu.uid) is PodPhase.RUNNING
        failed = await state.get_pod(second.uid)
        assert failed is not None and failed.phase is PodPhase.FAILED and failed.reason == "OutOfcpu"
        assert await state.reservation("sim-00000", second.uid) is None
        assert await phase(state, gone.uid) is PodPhase.BOUND  # not ours to run: left alone
        assert [e.reason for e in await state.events(first.uid)] == ["Started"]
        assert [e.reason for e in await state.events(gpu.uid)] == ["Started"]
        assert await events(js, "kubus.events.pod.running.>") == 2
        assert await events(js, event_subject("pod.finished", second.key)) == 1
    assert [v for v in await check_invariants(state) if gone.uid not in v] == []


async def test_a_redelivered_batch_admits_nothing_twice(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nats.aio.msg import Msg

    await put_nodes(state, js, template(), 2)
    pods = [await bound_pod(state, f"p{i}", f"sim-0000{i % 2}") for i in range(4)]
    for assignment in pods:
        await assign(js, assignment)

    async def lost(self: Msg) -> None:  # the agent dies before its acks leave
        return None

    with monkeypatch.context() as patch:
        patch.setattr(Msg, "ack", lost)
        async with AgentService.simulating(settings, template(), 2, options(pod_duration=0, ack_wait=1.0)) as agent:
            await eventually(lambda: _assert(len(agent.running) == 4))
    versions = {}
    for a in pods:
        record = await state.get_pod(a.uid)
        assert record is not None and record.phase is PodPhase.RUNNING
        versions[a.uid] = record.version

    async with AgentService.simulating(settings, template(), 2, options(pod_duration=0, ack_wait=1.0)) as agent:

        async def redelivered() -> None:
            assert admissions(agent) == {"admitted": 4.0}
            await stream_drained(js)

        await eventually(redelivered)
        assert set(agent.running) == {a.uid for a in pods}
    for a in pods:
        record = await state.get_pod(a.uid)
        assert record is not None and record.phase is PodPhase.RUNNING and record.version == versions[a.uid]
        assert [e.reason for e in await state.events(a.uid)] == ["Started"]
    assert await events(js, "kubus.events.pod.running.>") == 4
    assert await check_invariants(state) == []


@pytest.mark.parametrize("outage", [False, True], ids=["a bug", "a server away"])
async def test_a_batch_that_fails_halfway_is_admitted_again(
    settings: ConnectionSettings,
    state: ClusterState,
    js: JetStreamContext,
    monkeypatch: pytest.MonkeyPatch,
    outage: bool,
) -> None:
    """A batch that fails after its pods started in Redis is admitted again: one by one when
    the failure may be one pod's (a bug), whole after a pause when a server was away (every
    pod would meet it: none is tried alone, none counts a failure)."""
    import kubus.gpu_agent.assignments as assignments

    await put_nodes(state, js, template(), 1)
    pods = [await bound_pod(state, f"p{i}", "sim-00000") for i in range(3)]
    for assignment in pods:
        await assign(js, assignment)

    publish = assignments.publish_durable_many
    calls: list[int] = []

    async def fails_once(*args: Any, **kw: Any) -> Any:  # after the pods started in Redis
        calls.append(len(args[1]))
        if len(calls) == 1:
            raise TimeoutError("JetStream did not answer") if outage else RuntimeError("a bug")
        return await publish(*args, **kw)

    monkeypatch.setattr(assignments, "publish_durable_many", fails_once)
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0)) as agent:

        async def settled() -> None:
            assert admissions(agent) == ({"admitted": 3.0, "retry": 3.0} if outage else {"admitted": 3.0})
            await stream_drained(js)

        await eventually(settled)
        assert set(agent.running) == {a.uid for a in pods}
    if outage:
        assert calls[0] == 3 and sum(calls[1:]) == 3, calls  # redelivered, not split up
    else:
        assert calls == [3, 1, 1, 1]  # the batch, then each pod alone through the same code
    for a in pods:
        assert await phase(state, a.uid) is PodPhase.RUNNING
        assert [e.reason for e in await state.events(a.uid)] == ["Started"]
    assert await events(js, "kubus.events.pod.running.>") == 3
    assert await check_invariants(state) == []


async def test_a_restarted_agent_finishes_the_pods_that_were_running(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 2, options(pod_duration=3600)) as agent:
        assignments = [await bound_pod(state, f"p{i}", f"sim-0000{i}") for i in range(2)]
        for assignment in assignments:
            await assign(js, assignment)

        async def running() -> None:
            assert len(agent.running) == 2
            for a in assignments:
                assert await phase(state, a.uid) is PodPhase.RUNNING

        await eventually(running)

    async with AgentService.simulating(settings, template(), 2, options(pod_duration=0.2)) as agent:

        async def finished() -> None:
            for a in assignments:
                assert await phase(state, a.uid) is PodPhase.SUCCEEDED
                await assert_released(state, a.node, a.uid)
            assert agent.running == {}

        await eventually(finished)
    assert await check_invariants(state) == []


async def test_a_deleted_pod_stops(settings: ConnectionSettings, state: ClusterState, js: JetStreamContext) -> None:
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0)) as agent:
        assignment = await bound_pod(state, "web", "sim-00000")
        await assign(js, assignment)
        await eventually(lambda: _assert(assignment.uid in agent.running))
        # What the queue does on a delete: Deleted, release, then the event.
        assert (await state.transition(assignment.uid, PodPhase.DELETED)).ok
        assert await state.release("sim-00000", assignment.uid) is StoreCode.OK
        event = ClusterEvent(kind="pod.deleted", name=assignment.key, data=PodChange(assignment.uid))
        await js.publish(event_subject("pod.deleted", assignment.key), encode(event))

        await eventually(lambda: _assert(agent.running == {} and agent.metrics.pods_running._value.get() == 0))
    await assert_released(state, "sim-00000", assignment.uid)
    assert await check_invariants(state) == []


@pytest.mark.parametrize("by_uid", [True, False], ids=["by uid", "by name"])
async def test_a_pod_deleted_event_the_store_does_not_back_stops_nothing(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext, by_uid: bool
) -> None:
    """A pod.deleted event for a pod Redis still has Running here (forged, or stale) is a claim
    the store does not back: the pod keeps running and holding its room."""
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0)) as agent:
        assignment = await bound_pod(state, "web", "sim-00000")
        await assign(js, assignment)
        await eventually(lambda: _assert(assignment.uid in agent.running))
        await eventually(lambda: _assert_running(state, assignment.uid))
        event = ClusterEvent(kind="pod.deleted", name=assignment.key, data=PodChange(assignment.uid if by_uid else ""))
        for _ in range(3):
            await js.publish(event_subject("pod.deleted", assignment.key), encode(event))
        # A later, real deletion of another pod is acted on: the forged ones were read before it.
        other = await bound_pod(state, "other", "sim-00000")
        await assign(js, other)
        await eventually(lambda: _assert(other.uid in agent.running))
        assert (await state.transition(other.uid, PodPhase.DELETED)).ok
        deleted = ClusterEvent(kind="pod.deleted", name=other.key, data=PodChange(other.uid))
        await js.publish(event_subject("pod.deleted", other.key), encode(deleted))
        await eventually(lambda: _assert(set(agent.running) == {assignment.uid}))
    assert await phase(state, assignment.uid) is PodPhase.RUNNING
    held = await state.reservation("sim-00000", assignment.uid)
    assert held is not None
    assert await check_invariants(state) == []


async def test_a_running_pod_the_agent_does_not_run_is_taken_over_by_the_resync(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    """Redis has a pod Running on the agent's node with its room held, and the agent does not run
    it (it stopped it on a claim, or the janitor held its room again): the resync takes it over."""
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0, resync_interval=0.2)) as agent:
        assignment = await bound_pod(state, "web", "sim-00000")
        await assign(js, assignment)
        await eventually(lambda: _assert(assignment.uid in agent.running))
        agent.running.untrack(assignment.uid)  # as the old agent did on a forged pod.deleted
        await eventually(lambda: _assert(assignment.uid in agent.running))
    assert await phase(state, assignment.uid) is PodPhase.RUNNING
    assert await check_invariants(state) == []


async def test_a_pod_deleted_while_the_event_was_missed_is_forgotten_by_the_resync(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0, resync_interval=0.2)) as agent:
        assignment = await bound_pod(state, "web", "sim-00000")
        await assign(js, assignment)
        await eventually(lambda: _assert(assignment.uid in agent.running))
        assert (await state.transition(assignment.uid, PodPhase.DELETED)).ok  # and no pod.deleted event
        await eventually(lambda: _assert(agent.running == {}))
    await assert_released(state, "sim-00000", assignment.uid)
    assert await check_invariants(state) == []


async def test_a_bound_pod_whose_assignment_never_came_is_adopted(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 2, options(pod_duration=0, resync_interval=0.2)) as agent:
        orphan = await bound_pod(state, "orphan", "sim-00001")  # bound, but no NodeAssignment published

        async def adopted() -> None:
            assert await phase(state, orphan.uid) is PodPhase.RUNNING
            assert set(agent.running) == {orphan.uid}
            assert admissions(agent) == {"admitted": 1.0}

        await eventually(adopted)
        await assign(js, orphan)  # the assignment after all: nothing changes
        await eventually(lambda: stream_drained(js))
        assert set(agent.running) == {orphan.uid}
    assert await check_invariants(state) == []


async def test_garbage_assignments_are_terminated(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    async with AgentService.simulating(settings, template(), 1, options(pod_duration=0.1)) as agent:
        await assign(js, b"garbage", "sim-00000")
        await assign(js, encode(NodeAssignment(uid="u", key="default/u", node="nobody", manifest=b"{}")), "nobody")
        good = await bound_pod(state, "web", "sim-00000")
        await assign(js, good)

        async def done() -> None:
            assert await phase(state, good.uid) is PodPhase.SUCCEEDED
            await stream_drained(js)

        await eventually(done)
        rejected = sum(
            s.value for m in agent.metrics.rejected_messages.collect() for s in m.samples if s.name.endswith("_total")
        )
        assert rejected == 2
    assert await check_invariants(state) == []


# ---- one real node -----------------------------------------------------------------------------


async def test_a_real_node_agent_runs_its_pods_and_excludes_a_simulation(
    settings: ConnectionSettings, state: ClusterState, js: JetStreamContext
) -> None:
    inventory = NodeInventory("worker-1.example", template(gpus=1))
    assert inventory.nvml is None and inventory.device_healthy is None
    async with AgentService.for_node(settings, inventory, options(pod_duration=0.1)) as agent:
        record = await state.get_node("worker-1.example")
        assert record is not None and record.labels["kubernetes.io/hostname"] == "worker-1.example"
        assignment = await bound_pod(state, "web", "worker-1.example", gpus=1, devices=(0,))
        await assign(js, assignment)

        async def succeeded() -> None:
            assert await phase(state, assignment.uid) is PodPhase.SUCCEEDED
            await assert_released(state, "worker-1.example", assignment.uid)

        await eventually(succeeded)
        assert admissions(agent) == {"admitted": 1.0}

        # KUBUS_NODES is a work queue: a simulation's kubus.node.*.pods overlaps this agent's filter.
        with pytest.raises(ConsumerConflictError, match="overlaps"):
            await AgentService.simulating(settings, template(), 1, options()).start()
    assert await check_invariants(state) == []


def _fields(a: NodeAssignment) -> dict[str, Any]:
    return {name: getattr(a, name) for name in NodeAssignment.__dataclass_fields__}


def _assert(condition: bool) -> None:
    assert condition
