"""kubus.store against a real Redis-compatible server: every script, its return codes, its
idempotency under retries, leases, snapshots and the invariant checker."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
import redis.asyncio as aioredis
from support import eventually

from kubus.api.attempts import NO_ATTEMPT, Attempt
from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node, Pod
from kubus.cli.kube_objects import node_object
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import (
    ClusterState,
    DecodedRecords,
    EventType,
    ExpiryKind,
    HeartbeatResult,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
    StoreCode,
    check_invariants,
    node_info_of,
)
from kubus.store._core import _BATCH

GI = 1024**3


# ---- building blocks ---------------------------------------------------------------------------


def make_node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 10,
    gpus: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> Node:
    meta: dict[str, Any] = {"name": name, "labels": {"zone": "a"}}
    if gpus is not None:
        meta["annotations"] = {"kubus.io/gpus": codec.dumps(gpus).decode()}
    return parse_node(
        {
            "kind": "Node",
            "metadata": meta,
            "spec": {"taints": taints or []},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}},
        }
    )


def h100s(n: int, *, unhealthy: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    return [
        {"index": i, "model": "H100", "memory": "80Gi", "uuid": f"GPU-{i}", "healthy": i not in unhealthy}
        for i in range(n)
    ]


def make_pod(
    name: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    whole_gpus: int = 0,
    gpu_memory: str | None = None,
    gpu_count: int | None = None,
    host_port: int | None = None,
    host_ip: str | None = None,
    extra: dict[str, Any] | None = None,
    profile: str = "default-scheduler",
) -> tuple[Pod, bytes]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory, **(extra or {})}
    if whole_gpus:
        requests["nvidia.com/gpu"] = whole_gpus
    annotations = {}
    if gpu_memory:
        annotations["kubus.io/gpu-memory"] = gpu_memory
    if gpu_count:
        annotations["kubus.io/gpu-count"] = str(gpu_count)
    container: dict[str, Any] = {"name": "c", "image": "busybox", "resources": {"requests": requests}}
    if host_port:
        port: dict[str, Any] = {"containerPort": 8080, "hostPort": host_port}
        if host_ip:
            port["hostIP"] = host_ip
        container["ports"] = [port]
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"schedulerName": profile, "containers": [container]},
    }
    return parse_pod(manifest), codec.dumps(manifest)


def reservation(pod: Pod, node: str, devices: tuple[int, ...] = (), **kw: Any) -> Reservation:
    return Reservation.of(PodInfo.of(pod).placed_on(devices), node, **kw)


async def submit(state: ClusterState, pod: Pod, manifest: bytes) -> PodRecord:
    record = PodRecord.of(pod, manifest, now=state.clock())
    assert await state.put_pod(record)
    return record


async def place(state: ClusterState, pod: Pod, node: str, devices: tuple[int, ...] = ()) -> None:
    """The cycle's and the binder's steps for one pod, asserting each succeeds."""
    uid = pod.metadata.uid
    result = await state.reserve(node, reservation(pod, node, devices))
    assert result.ok, result
    assert (await state.transition(uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING})).ok
    assert await state.mark_bound(node, uid) is StoreCode.OK
    assert (await state.bind_pod(uid, node, devices)).ok


async def usage(state: ClusterState, node: str) -> dict[str, int]:
    raw = await state.redis.hgetall(state.keys.node_usage(node))
    return {k.decode(): int(v) for k, v in raw.items()}


# ---- nodes -------------------------------------------------------------------------------------


async def test_nodes_put_get_list_delete(state: ClusterState) -> None:
    n1, n2 = make_node("n1"), make_node("n2", gpus=h100s(2))
    first = await state.put_node(n1, b'{"kind": "Node"}')
    assert (first.changed, first.generation) == (True, 1)
    assert (await state.put_node(n1, b'{"kind": "Node"}')) == first.__class__(False, 1)  # unchanged: NOOP
    await state.put_node(n2)
    got = await state.get_node("n1")
    assert got is not None and got.to_node() == n1 and got.manifest == b'{"kind": "Node"}'
    assert [r.to_node() for r in await state.list_nodes()] == [n1, n2]
    assert await state.node_names() == ["n1", "n2"]
    assert await state.get_node("nope") is None

    assert await state.heartbeat("n1", 100.5) == HeartbeatResult(found=True, revived=False, generation=1)
    assert not (await state.heartbeat("ghost", 1.0)).found  # never creates a node
    assert await state.get_node("ghost") is None
    bigger = make_node("n1", cpu="8")
    assert (await state.put_node(bigger)).generation == 2
    got = await state.get_node("n1")
    assert got is not None and got.heartbeat == 100.5 and got.to_node() == bigger and got.manifest is None

    assert await state.delete_node("n1") == []
    assert await state.delete_node("n1") == []  # idempotent
    assert await state.node_names() == ["n2"]
    assert await check_invariants(state) == []


async def test_nodes_put_in_a_batch_as_one_by_one(state: ClusterState) -> None:
    """put_nodes (a watcher's first list): the results and records of put_node, in order,
    across pipeline chunks."""
    nodes = [make_node(f"b{i:04d}", cpu=str(2 + i % 3)) for i in range(1203)]
    results = await state.put_nodes(nodes)
    assert [(r.changed, r.generation) for r in results] == [(True, 1)] * len(nodes)
    again = await state.put_nodes([*nodes[:2], make_node("b0002", cpu="64")])
    assert [(r.changed, r.generation) for r in again] == [(False, 1), (False, 1), (True, 2)]
    got = await state.get_node("b0002")
    assert got is not None and got.to_node() == make_node("b0002", cpu="64")
    assert len(await state.node_names()) == len(nodes)
    assert await check_invariants(state) == []


async def test_a_node_is_as_old_as_its_first_registration(redis: aioredis.Redis) -> None:
    """A node without a creationTimestamp of its own (a simulated one) is as old as its first
    put_node; every later put (an agent restarting, the node changed, a batch) keeps that
    time; a node the apiserver dated keeps its date; a node deleted and put again is new."""
    clock = [1000.0]
    state = ClusterState(redis, clock=lambda: clock[0])
    n1 = make_node("n1")
    await state.put_node(n1)
    clock[0] = 5000.0
    assert not (await state.put_node(n1)).changed  # re-registered as is
    assert (await state.put_node(make_node("n1", cpu="8"))).changed  # re-registered changed
    await state.put_nodes([make_node("n1")])
    got = await state.get_node("n1")
    assert got is not None and (got.registered, got.created_at, got.creation_timestamp) == (1000.0, 1000.0, 0.0)
    assert got.to_node() == make_node("n1")  # the Node scheduling reads is the one put
    assert [r.registered for r in await state.list_nodes()] == [1000.0]
    assert node_object(got)["metadata"]["creationTimestamp"] == "1970-01-01T00:16:40Z"

    dated = parse_node({"kind": "Node", "metadata": {"name": "real", "creationTimestamp": "2024-05-01T12:00:00Z"}})
    await state.put_node(dated)
    real = await state.get_node("real")
    assert real is not None and real.registered == 5000.0 and real.created_at == dated.metadata.creation_timestamp
    assert node_object(real)["metadata"]["creationTimestamp"] == "2024-05-01T12:00:00Z"

    # a node stored before nodes were dated gets one at its next registration, changed or not
    await redis.hdel(state.keys.node_info("n1"), "registered")
    assert (await state.get_node("n1")).created_at == 0.0  # type: ignore[union-attr]
    await state.put_node(make_node("n1"))
    assert (await state.get_node("n1")).registered == 5000.0  # type: ignore[union-attr]

    await state.delete_node("n1")
    clock[0] = 9000.0
    await state.put_node(n1)
    assert (await state.get_node("n1")).registered == 9000.0  # type: ignore[union-attr]
    assert await check_invariants(state) == []


async def test_odd_names_work_end_to_end(state: ClusterState) -> None:
    # Kubernetes would reject these names; the store must still keep them apart.
    node = make_node("n1")
    odd = Node(metadata=node.metadata.__class__(name="a}{b:c*", namespace=""), spec=node.spec, status=node.status)
    await state.put_node(odd)
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    assert (await state.reserve("a}{b:c*", reservation(pod, "a}{b:c*"))).ok
    assert await state.node_names() == ["a}{b:c*"]
    assert (await state.reservations("a}{b:c*"))[0].pod_uid == "uid-p"


# ---- reserve and friends -----------------------------------------------------------------------


async def test_reserve_checks_every_resource_and_changes_nothing_on_conflict(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="2", memory="4Gi", pods=3, extra={"example.com/fpga": 1}))
    a, _ = make_pod("a", cpu="1500m", memory="1Gi", extra={"example.com/fpga": 1})
    r = await state.reserve("n1", reservation(a, "n1"))
    assert (r.code, r.already) == (StoreCode.OK, False)
    before = await usage(state, "n1")
    assert before == {"r:cpu": 1500, "r:memory": GI, "r:example.com/fpga": 1, "pods": 1}

    b, _ = make_pod("b", cpu="1", memory="4Gi", extra={"example.com/fpga": 1})
    r = await state.reserve("n1", reservation(b, "n1"))
    assert r.code is StoreCode.CONFLICT
    assert r.reasons == ("Insufficient cpu", "Insufficient memory", "Insufficient example.com/fpga")
    assert r.reason == "Insufficient cpu, Insufficient memory, Insufficient example.com/fpga"
    assert await usage(state, "n1") == before

    c, _ = make_pod("c", cpu="100m", memory="1Mi", extra={"example.com/other": 1})
    r = await state.reserve("n1", reservation(c, "n1"))
    assert r.reasons == ("Insufficient example.com/other",)  # a resource the node lacks entirely
    r = await state.reserve("n1", reservation(c, "n1", ignored=["example.com/other"]))
    assert r.ok  # NodeResourcesFit's ignoredResources: not checked, still counted
    assert (await usage(state, "n1"))["r:example.com/other"] == 1

    d, _ = make_pod("d", cpu="0", memory="0")
    assert (await state.reserve("n1", reservation(d, "n1"))).ok  # third pod
    e, _ = make_pod("e", cpu="0", memory="0")
    assert (await state.reserve("n1", reservation(e, "n1"))).reasons == ("Too many pods",)


async def test_reserve_is_idempotent_and_node_gone(state: ClusterState) -> None:
    pod, _ = make_pod("p", cpu="3")
    res = reservation(pod, "n1")
    assert (await state.reserve("n1", res)).code is StoreCode.NODE_GONE
    assert (await state.reserve("n1", res)).reasons == ("node not found",)
    await state.put_node(make_node("n1", cpu="4"))
    assert (await state.reserve("n1", res)).ok
    again = await state.reserve("n1", res)  # a retry after a lost reply
    assert again.ok and again.already
    assert (await usage(state, "n1"))["r:cpu"] == 3000  # counted once

    assert await state.mark_unreachable("n1")
    other, _ = make_pod("q", cpu="100m")
    r = await state.reserve("n1", reservation(other, "n1"))
    assert (r.code, r.reasons) == (StoreCode.NODE_GONE, ("node unreachable",))
    assert (await state.reserve("n1", res)).already  # what it holds it still holds
    node = await state.get_node("n1")
    assert node is not None and node.unreachable and node.generation == 2
    assert any(t.key == "node.kubernetes.io/unreachable" for t in node.to_node().spec.taints)
    assert await state.mark_unreachable("n1", False)
    assert (await state.reserve("n1", reservation(other, "n1"))).ok
    assert await state.mark_unreachable("n1")
    assert await state.heartbeat("n1") == HeartbeatResult(found=True, revived=True, generation=5)
    assert await state.heartbeat("n1") == HeartbeatResult(found=True, revived=False, generation=5)
    node = await state.get_node("n1")
    assert node is not None and not node.unreachable
    assert not await state.mark_unreachable("ghost")
    with pytest.raises(ValueError):
        await state.reserve("n2", res)


async def test_unreserve_mark_bound_release(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, _ = make_pod("p", cpu="2")
    uid = pod.metadata.uid
    assert await state.unreserve("n1", uid) is StoreCode.NOOP
    assert await state.mark_bound("n1", uid) is StoreCode.NOT_FOUND
    assert await state.release("n1", uid) is StoreCode.NOOP

    assert (await state.reserve("n1", reservation(pod, "n1"))).ok
    assert await state.unreserve("n1", uid) is StoreCode.OK
    assert await state.unreserve("n1", uid) is StoreCode.NOOP  # retry
    assert await usage(state, "n1") == {}

    assert (await state.reserve("n1", reservation(pod, "n1"))).ok
    assert await state.mark_bound("n1", uid) is StoreCode.OK
    assert await state.mark_bound("n1", uid) is StoreCode.ALREADY
    [held] = await state.reservations("n1")
    assert held.state is ReservationState.BOUND
    assert await state.unreserve("n1", uid) is StoreCode.BOUND  # a bound pod keeps its room
    assert (await usage(state, "n1"))["r:cpu"] == 2000
    assert await state.release("n1", uid) is StoreCode.OK
    assert await state.release("n1", uid) is StoreCode.NOOP
    assert await usage(state, "n1") == {}
    assert await state.reservations("n1") == []
    # released and reserved again: the bound mark does not linger
    assert (await state.reserve("n1", reservation(pod, "n1"))).ok
    assert (await state.reservations("n1"))[0].state is ReservationState.RESERVED


async def test_whole_and_shared_gpus(state: ClusterState) -> None:
    await state.put_node(make_node("g1", gpus=h100s(3, unhealthy=(2,)), memory="64Gi", cpu="16"))
    whole, _ = make_pod("whole", whole_gpus=1)
    shared1, _ = make_pod("shared1", gpu_memory="50Gi")
    shared2, _ = make_pod("shared2", gpu_memory="30Gi")
    shared3, _ = make_pod("shared3", gpu_memory="1Gi")

    assert (await state.reserve("g1", reservation(whole, "g1", (0,)))).ok
    assert (await state.reserve("g1", reservation(shared1, "g1", (0,)))).reasons == (
        f"gpu 0 busy (0 bytes free, {50 * GI} wanted)",
    )
    assert (await state.reserve("g1", reservation(shared1, "g1", (1,)))).ok
    assert (await state.reserve("g1", reservation(shared2, "g1", (1,)))).ok  # 80Gi exactly
    assert (await state.reserve("g1", reservation(shared3, "g1", (1,)))).code is StoreCode.CONFLICT
    whole2, _ = make_pod("whole2", whole_gpus=1)
    assert (await state.reserve("g1", reservation(whole2, "g1", (1,)))).reasons == ("gpu 1 busy",)
    assert (await state.reserve("g1", reservation(whole2, "g1", (2,)))).reasons == ("gpu 2 unhealthy",)
    assert (await state.reserve("g1", reservation(whole2, "g1", (7,)))).reasons == ("gpu 7 does not exist",)

    u = await state.node_usage("g1")
    assert u is not None
    assert [(g.used, g.holders, g.exclusive) for g in u.gpus] == [
        (80 * GI, ("uid-whole",), True),
        (80 * GI, ("uid-shared1", "uid-shared2"), False),
        (0, (), False),
    ]
    assert u.requested["nvidia.com/gpu"] == 1 and u.pods == 3

    # the snapshot rebuilds a NodeInfo that agrees with what Redis enforces
    [(node, reservations)] = await state.load_snapshot()
    info = node_info_of(node, reservations)
    assert info.gpu_free_memory == [g.free for g in u.gpus]
    assert info.gpu_pod_count == [len(g.holders) for g in u.gpus]
    assert {k: v for k, v in info.requested.items() if v} == u.requested

    # the node's GPUs change: usage follows (a whole GPU takes all of its new memory)
    smaller = [{**g, "memory": "40Gi"} for g in h100s(2)]
    await state.put_node(make_node("g1", gpus=smaller, memory="64Gi", cpu="16"))
    u = await state.node_usage("g1")
    assert u is not None and [g.used for g in u.gpus] == [40 * GI, 80 * GI]
    assert "node g1: gpu 1 overcommitted" in " ".join(await _node_violations(state))
    assert await state.release("g1", "uid-shared2") is StoreCode.OK
    assert await state.release("g1", "uid-whole") is StoreCode.OK
    u = await state.node_usage("g1")
    assert u is not None and [g.used for g in u.gpus] == [0, 50 * GI]


async def _node_violations(state: ClusterState) -> list[str]:
    return [v for v in await check_invariants(state) if v.startswith("node ")]


async def test_a_snapshot_of_more_nodes_than_one_call_reads_has_every_node_in_order(state: ClusterState) -> None:
    """`load_snapshot` reads `_BATCH` nodes a round trip: past one's end, each node still comes
    with its own reservations and their state, in the order asked, unknown names left out."""
    names = [f"n{i:03d}" for i in range(_BATCH + 10)]
    await state.put_nodes([make_node(n) for n in names])
    held = {names[0], names[_BATCH - 1], names[_BATCH], names[-1]}
    for n in held:
        pod, _ = make_pod(f"p-{n}", cpu="1")
        assert (await state.reserve(n, reservation(pod, n))).ok
    assert await state.mark_bound(names[-1], "uid-p-" + names[-1]) is StoreCode.OK
    asked = [*reversed(names), "gone"]
    snapshot = await state.load_snapshot(asked)
    assert [node.name for node, _ in snapshot] == asked[:-1]
    assert {node.name: [r.pod_uid for r in rs] for node, rs in snapshot if rs} == {n: [f"uid-p-{n}"] for n in held}
    states = {r.node: r.state for _, rs in snapshot for r in rs}
    assert states == {n: ReservationState.BOUND if n == names[-1] else ReservationState.RESERVED for n in held}
    assert [node.name for node, _ in await state.load_snapshot()] == names


async def test_a_snapshot_read_again_reuses_what_it_decoded_and_follows_every_change(state: ClusterState) -> None:
    """`load_snapshot(decoded=...)`, the cycle's resync: an unchanged node comes back as the very
    objects decoded before (no parse), and every change (node spec, a reservation added, bound,
    released, the node deleted) is read as a read without the cache reads it."""
    await state.put_node(make_node("n1"))
    await state.put_node(make_node("n2"))
    a, _ = make_pod("a", cpu="1")
    b, _ = make_pod("b", cpu="2")
    assert (await state.reserve("n1", reservation(a, "n1"))).ok
    decoded = DecodedRecords()

    async def both() -> list[tuple[Node, list[Reservation]]]:
        cached = await state.load_snapshot(["n1", "n2", "gone"], decoded=decoded)
        assert cached == await state.load_snapshot(["n1", "n2", "gone"])  # the same as a fresh parse
        return cached

    first = await both()
    again = await both()
    assert all(x is y for (x, _), (y, _) in zip(again, first, strict=True))  # the Nodes: not decoded again
    assert again[0][1][0] is first[0][1][0]  # a's reservation: not decoded again

    assert (await state.reserve("n1", reservation(b, "n1"))).ok
    assert await state.mark_bound("n1", a.metadata.uid) is StoreCode.OK
    await state.put_node(make_node("n2", cpu="64"))
    changed = await both()
    assert [(r.pod_key, r.state) for r in changed[0][1]] == [
        (a.key, ReservationState.BOUND),
        (b.key, ReservationState.RESERVED),
    ]
    assert changed[1][0] is not first[1][0] and changed[1][0].status.allocatable["cpu"] == 64000

    assert await state.release("n1", a.metadata.uid) is StoreCode.OK
    await state.delete_node("n2")
    assert [(n.name, [r.pod_key for r in rs]) for n, rs in await both()] == [("n1", [b.key])]


async def test_reserve_picks_other_devices_the_way_gpufit_does_when_the_chosen_ones_were_taken(
    state: ClusterState,
) -> None:
    """Two profiles' cycles picked the same free devices of a node with room for both: the
    second reservation (`gpu_pick`) gets the devices GPUFit would pick against Redis's usage,
    and says which; without `gpu_pick` (preemption, named devices) the devices stand."""
    gpus = h100s(4, unhealthy=(3,))
    gpus[2]["model"] = "A100"
    await state.put_node(make_node("g1", gpus=gpus, memory="64Gi", cpu="16"))
    first, _ = make_pod("first", whole_gpus=1)
    second, _ = make_pod("second", whole_gpus=1)
    third, _ = make_pod("third", whole_gpus=1)
    assert (await state.reserve("g1", reservation(first, "g1", (0,), gpu_pick="binpack"))).gpu_devices is None
    assert (await state.reserve("g1", reservation(second, "g1", (0,)))).reasons == ("gpu 0 busy",)
    got = await state.reserve("g1", reservation(second, "g1", (0,), gpu_pick="binpack", attempt=1))
    assert got.ok and got.gpu_devices == (1,)
    held = await state.reservation("g1", "uid-second")
    assert held is not None and held.gpu_devices == (1,) and held.gpu_pick == "binpack"
    again = await state.reserve("g1", reservation(second, "g1", (0,), gpu_pick="binpack", attempt=1))
    assert again.ok and again.already and again.gpu_devices == (1,)  # a retry learns what it holds
    # H100 only: device 2 is an A100 and device 3 unhealthy, so none is left.
    only_h100 = replace(reservation(third, "g1", (0,), gpu_pick="binpack"), gpu_models=("H100",))
    assert (await state.reserve("g1", only_h100)).reasons == ("gpu 0 busy",)
    any_model = await state.reserve("g1", reservation(third, "g1", (1,), gpu_pick="binpack"))
    assert any_model.ok and any_model.gpu_devices == (2,)

    # Shared slices: binpack takes the fullest device that still fits, spread the emptiest.
    await state.put_node(make_node("g2", gpus=h100s(3), memory="64Gi", cpu="16"))
    big, _ = make_pod("big", gpu_memory="60Gi")
    small, _ = make_pod("small", gpu_memory="30Gi")
    assert (await state.reserve("g2", reservation(big, "g2", (0,)))).ok
    assert (await state.reserve("g2", reservation(small, "g2", (1,)))).ok
    packed, _ = make_pod("packed", gpu_memory="20Gi")
    spread, _ = make_pod("spread", gpu_memory="20Gi")
    tight, _ = make_pod("tight", gpu_memory="50Gi")
    # device 0 has 20Gi free, 1 has 50Gi, 2 has 80Gi: a 50Gi slice asked on 0 goes to 1
    got = await state.reserve("g2", reservation(tight, "g2", (0,), gpu_pick="binpack"))
    assert got.gpu_devices == (1,)
    assert (await state.reserve("g2", reservation(packed, "g2", (0,), gpu_pick="binpack"))).gpu_devices is None
    # now 0 and 1 are full: a 20Gi slice asked on 1 goes to 2 under either mode
    got = await state.reserve("g2", reservation(spread, "g2", (1,), gpu_pick="spread"))
    assert got.gpu_devices == (2,)
    # the usage follows the devices held, not the ones asked for
    u1, u2 = await state.node_usage("g1"), await state.node_usage("g2")
    assert u1 is not None and u2 is not None
    assert [g.holders for g in u1.gpus] == [("uid-first",), ("uid-second",), ("uid-third",), ()]
    assert [(g.used // GI, g.holders) for g in u2.gpus] == [
        (80, ("uid-big", "uid-packed")),
        (80, ("uid-small", "uid-tight")),
        (20, ("uid-spread",)),
    ]


async def test_whole_gpu_with_a_minimum_memory(state: ClusterState) -> None:
    await state.put_node(make_node("g1", gpus=h100s(1), cpu="16", memory="64Gi"))
    big, _ = make_pod("big", whole_gpus=1, gpu_memory="100Gi")  # a whole GPU of at least 100Gi
    assert (await state.reserve("g1", reservation(big, "g1", (0,)))).reasons == ("gpu 0 too small",)
    fits, _ = make_pod("fits", whole_gpus=1, gpu_memory="80Gi")
    assert (await state.reserve("g1", reservation(fits, "g1", (0,)))).ok
    assert (await usage(state, "g1"))["g:0:used"] == 80 * GI  # all of it, not the 80Gi asked


async def test_attempts_keep_racing_duplicates_apart(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, _ = make_pod("p")
    first = reservation(pod, "n1", attempt=1)
    second = reservation(pod, "n1", attempt=2)
    assert (await state.reserve("n1", first)).ok
    r = await state.reserve("n1", second)
    assert (r.code, r.reasons) == (StoreCode.CONFLICT, ("pod already reserved here by another attempt",))
    assert (await state.reserve("n1", first)).already
    assert await state.unreserve("n1", "uid-p", 2) is StoreCode.CONFLICT  # not yours
    assert await state.mark_bound("n1", "uid-p", 2) is StoreCode.CONFLICT
    assert len(await state.reservations("n1")) == 1
    assert await state.mark_bound("n1", "uid-p", 1) is StoreCode.OK
    assert await state.unreserve("n1", "uid-p", 1) is StoreCode.BOUND
    assert await state.release("n1", "uid-p", 2) is StoreCode.CONFLICT
    assert await state.release("n1", "uid-p", 1) is StoreCode.OK  # the binder backs out
    assert await state.release("n1", "uid-p", 1) is StoreCode.NOOP
    assert await state.reservations("n1") == []


async def test_reconcile_cleans_up_after_crashes(redis: aioredis.Redis) -> None:
    now = [900.0]
    state = ClusterState(redis, clock=lambda: now[0])
    await state.put_node(make_node("n1"))
    pods = {name: make_pod(name) for name in ("orphan", "young", "done", "lost", "fine")}
    for pod, manifest in pods.values():
        await submit(state, pod, manifest)
    # crashed between reserve and the Reserved transition
    assert (await state.reserve("n1", reservation(pods["orphan"][0], "n1", now=900.0))).ok
    # still in flight: too young to touch
    assert (await state.reserve("n1", reservation(pods["young"][0], "n1", now=995.0))).ok
    # finished, but the agent crashed before releasing
    await place(state, pods["done"][0], "n1")
    assert (await state.transition("uid-done", PodPhase.SUCCEEDED)).ok
    # Reserved, but its reservation vanished (binder released, then crashed)
    assert (await state.transition("uid-lost", PodPhase.RESERVED, node="n1")).ok
    await place(state, pods["fine"][0], "n1")

    now[0] = 1000.0
    fixes = await state.reconcile(grace_s=30)
    assert fixes == [
        "node n1: gave back the reservation of default/done (uid-done): pod Succeeded on n1",
        "node n1: gave back the reservation of default/orphan (uid-orphan): pod Pending on no node",
    ]
    [lost_fix] = await state.expire_reserved(timeout_s=60, lost_after_s=30)
    assert (lost_fix.pod.uid, lost_fix.kind, lost_fix.reason, lost_fix.released) == (
        "uid-lost",
        ExpiryKind.GIVEN_BACK,
        "ReservationLost",
        False,
    )
    assert [r.pod_uid for r in await state.reservations("n1")] == ["uid-fine", "uid-young"]
    assert await state.reconcile(grace_s=30) == []
    assert await state.expire_reserved(timeout_s=60, lost_after_s=30) == []
    lost = await state.get_pod("uid-lost")
    assert lost is not None and (lost.phase, lost.reason) == (PodPhase.PENDING, "ReservationLost")
    now[0] = 2000.0
    assert len(await state.reconcile(grace_s=30)) == 1  # the young one grew old
    assert await check_invariants(state) == []

    # the cycle reserved, then died before sending the BindRequest
    stuck, stuck_manifest = make_pod("stuck")
    await submit(state, stuck, stuck_manifest)
    claim = await state.transition("uid-stuck", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(stuck, "n1", attempt=claim.version))).ok
    assert await state.expire_reserved(timeout_s=60, lost_after_s=30) == []
    now[0] = 2100.0
    assert await state.reconcile(grace_s=30) == []  # its pod holds it: not reconcile's to touch
    [timed_out] = await state.expire_reserved(timeout_s=60, lost_after_s=30)
    assert (timed_out.kind, timed_out.reason, timed_out.released, timed_out.attempt) == (
        ExpiryKind.GIVEN_BACK,
        "ReservationTimeout",
        True,
        claim.version,
    )
    assert "uid-stuck" not in {r.pod_uid for r in await state.reservations("n1")}
    # once a binder marked it bound, the reservation is the binder's: the janitor finishes the bind
    claim = await state.transition("uid-stuck", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(stuck, "n1", attempt=claim.version))).ok
    assert await state.mark_bound("n1", "uid-stuck", claim.version) is StoreCode.OK
    now[0] = 3000.0
    [finished] = await state.expire_reserved(timeout_s=60, lost_after_s=30, source="queue")
    assert (finished.kind, finished.attempt) == (ExpiryKind.BOUND, claim.version)
    bound = await state.get_pod("uid-stuck")
    assert bound is not None and (bound.phase, bound.node) == (PodPhase.BOUND, "n1")
    assert [e.reason for e in await state.events("uid-stuck")][-1] == "Scheduled"
    assert await check_invariants(state) == []


async def test_repair_placements_holds_lost_room_again_or_names_the_pods_that_lost_it(state: ClusterState) -> None:
    """A Bound or Running pod whose room was released behind its back gets it again when the
    node still has room, and is named when another pod took it; reservations not marked bound
    and bound marks without a reservation are mended. Each finding is what check_invariants
    reports before, and nothing is left to report after."""
    await state.put_node(make_node("n1", cpu="4"))
    await state.put_node(make_node("n2", cpu="4"))
    pods = {name: make_pod(name, cpu="2", whole_gpus=0) for name in ("running", "bound", "crowded", "thief", "fine")}
    for pod, manifest in pods.values():
        await submit(state, pod, manifest)
    for name, node in (("running", "n1"), ("bound", "n1"), ("crowded", "n2"), ("fine", "n2")):
        await place(state, pods[name][0], node)
    assert (await state.transition("uid-running", PodPhase.RUNNING)).ok
    # Released behind their pods' backs (a forged deletion acted on)...
    for uid, node in (("uid-running", "n1"), ("uid-bound", "n1"), ("uid-crowded", "n2")):
        assert await state.release(node, uid) is StoreCode.OK
    # ... and on n2 another pod took the room meanwhile.
    await place(state, pods["thief"][0], "n2")
    # A reservation of a Bound pod not marked bound, and a bound mark with no reservation.
    await state.redis.srem(state.keys.node_bound("n2"), "uid-fine")
    await state.redis.sadd(state.keys.node_bound("n1"), "uid-nobody")
    assert await check_invariants(state) == [
        "node n1: pod uid-nobody marked bound without a reservation",
        "node n2: pod default/fine is Bound but its reservation is not marked bound",
        "pod default/bound (uid-bound): Bound on node n1 without a reservation there",
        "pod default/crowded (uid-crowded): Bound on node n2 without a reservation there",
        "pod default/running (uid-running): Running on node n1 without a reservation there",
    ]

    fixes, lost = await state.repair_placements()
    assert sorted(fixes) == [
        "node n1: dropped the bound mark of pod uid-nobody, which holds no reservation",
        "node n1: held again the room of default/bound (uid-bound), Bound",
        "node n1: held again the room of default/running (uid-running), Running",
        "node n2: marked bound the reservation of default/fine (uid-fine), Bound",
    ]
    assert [(room.pod.uid, room.reasons) for room in lost] == [("uid-crowded", ("Insufficient cpu",))]
    assert await state.repair_placements() == ([], lost)  # the same one, again: it has no room
    assert (await state.transition("uid-crowded", PodPhase.FAILED)).ok  # what the janitor does with it
    assert await state.repair_placements() == ([], [])
    assert await check_invariants(state) == []


async def test_give_back_is_one_step_conditional_on_the_attempt(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    claim = await state.transition("uid-p", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(pod, "n1", attempt=claim.version))).ok
    assert (await state.give_back("uid-p", "n2", claim.version)).code is StoreCode.CONFLICT  # another node
    assert (await state.give_back("uid-p", "n1", claim.version + 1)).code is StoreCode.CONFLICT  # another attempt
    assert len(await state.reservations("n1")) == 1
    result = await state.give_back("uid-p", "n1", claim.version, reason="Unschedulable", message="why")
    assert (result.code, result.released) == (StoreCode.OK, True)
    record = await state.get_pod("uid-p")
    assert record is not None and (record.phase, record.node, record.reason) == (PodPhase.PENDING, "", "Unschedulable")
    assert await state.reservations("n1") == []
    assert await state.pod_uids_in_phase(PodPhase.PENDING) == {"uid-p"}
    assert (await state.give_back("uid-p", "n1", claim.version)).code is StoreCode.CONFLICT  # a retry: moved on
    # a bound reservation is never given back: a binder has the pod
    claim = await state.transition("uid-p", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(pod, "n1", attempt=claim.version))).ok
    assert await state.mark_bound("n1", "uid-p", claim.version) is StoreCode.OK
    assert (await state.give_back("uid-p", "n1", claim.version)).code is StoreCode.BOUND
    record = await state.get_pod("uid-p")
    assert record is not None and record.phase is PodPhase.RESERVED
    assert await check_invariants(state) == []


async def test_shared_slices_on_several_devices(state: ClusterState) -> None:
    await state.put_node(make_node("g1", gpus=h100s(4), cpu="16", memory="64Gi"))
    pod, _ = make_pod("multi", gpu_memory="10Gi", gpu_count=3)
    assert (await state.reserve("g1", reservation(pod, "g1", (0, 2, 3)))).ok
    u = await state.node_usage("g1")
    assert u is not None and [g.used for g in u.gpus] == [10 * GI, 0, 10 * GI, 10 * GI]
    assert await state.release("g1", pod.metadata.uid) is StoreCode.OK
    assert await usage(state, "g1") == {}


async def test_host_ports_follow_kube_rules(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="8"))
    a, _ = make_pod("a", host_port=80, host_ip="10.0.0.1")
    b, _ = make_pod("b", host_port=80, host_ip="10.0.0.2")
    c, _ = make_pod("c", host_port=80)  # 0.0.0.0 conflicts with every IP
    d, _ = make_pod("d", host_port=81)
    assert (await state.reserve("n1", reservation(a, "n1"))).ok
    assert (await state.reserve("n1", reservation(b, "n1"))).ok
    assert (await state.reserve("n1", reservation(c, "n1"))).reasons == ("host port TCP/80 in use",)
    assert (await state.reserve("n1", reservation(d, "n1"))).ok
    e, _ = make_pod("e", host_port=81, host_ip="10.0.0.9")
    assert (await state.reserve("n1", reservation(e, "n1"))).reasons == ("host port TCP/81 in use",)
    u = await state.node_usage("n1")
    assert u is not None and u.host_ports[("TCP", 80, "10.0.0.1")] == 1
    for uid in ("uid-a", "uid-b", "uid-d"):
        assert await state.unreserve("n1", uid) is StoreCode.OK
    assert await usage(state, "n1") == {}


async def test_fencing_tokens_stop_a_deposed_leader(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="8"))
    new, _ = make_pod("new")
    old, _ = make_pod("old")
    assert (await state.reserve("n1", reservation(new, "n1", token=5))).ok
    r = await state.reserve("n1", reservation(old, "n1", token=3))
    assert r.code is StoreCode.FENCED and "older than 5" in r.reason
    assert (await state.reserve("n1", reservation(old, "n1", token=0))).ok  # unfenced writers pass
    other, _ = make_pod("other", profile="gpu-scheduler")
    assert (await state.reserve("n1", reservation(other, "n1", token=1))).ok  # per profile


async def test_delete_node_hands_back_its_reservations(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    await place(state, pod, "n1")
    [dropped] = await state.delete_node("n1")
    assert dropped.pod_uid == "uid-p"
    assert any("without a reservation" in v for v in await check_invariants(state))
    assert (await state.transition("uid-p", PodPhase.FAILED, reason="NodeLost")).ok
    assert await check_invariants(state) == []


# ---- pods --------------------------------------------------------------------------------------


async def test_put_pod_is_insert_if_absent(state: ClusterState) -> None:
    pod, manifest = make_pod("web", profile="gpu-scheduler")
    record = PodRecord.of(pod, manifest, now=5.0)
    assert await state.put_pod(record)
    assert not await state.put_pod(record)  # at-least-once submission
    got = await state.get_pod("uid-web")
    assert got is not None and got.version == 1 and got.phase is PodPhase.PENDING and got.pod() == pod
    assert await state.find_pod("default", "web") == got
    assert await state.find_pod("default", "nope") is None
    assert [p.uid for p in await state.pods_in_phase(PodPhase.PENDING)] == ["uid-web"]
    assert [p.uid for p in await state.pods_in_phase(PodPhase.PENDING, profile="gpu-scheduler")] == ["uid-web"]
    assert await state.pods_in_phase(PodPhase.PENDING, profile="default-scheduler") == []
    assert await state.get_pods(["uid-web", "nope"]) == [got, None]


async def test_transition_is_compare_and_set(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    uid = "uid-p"
    w = await state.transition(
        uid, PodPhase.PENDING, reason="Unschedulable", message="0/1 nodes are available", count_attempt=True
    )
    assert (w.code, w.version, w.phase) == (StoreCode.OK, 2, PodPhase.PENDING)
    stale = await state.transition(uid, PodPhase.RESERVED, node="n1", expected_version=1)
    assert (stale.code, stale.version, stale.phase) == (StoreCode.CONFLICT, 2, PodPhase.PENDING)
    assert (await state.transition(uid, PodPhase.RESERVED, node="n1", expected_phases=[PodPhase.RESERVED])).code is (
        StoreCode.CONFLICT
    )
    assert (await state.transition(uid, PodPhase.RESERVED, node="n1", expected_version=2)).ok
    got = await state.get_pod(uid)
    assert got is not None
    assert (got.phase, got.node, got.attempts, got.reason, got.version) == (
        PodPhase.RESERVED,
        "n1",
        1,
        "Unschedulable",
        3,
    )
    assert (await state.transition(uid, PodPhase.RUNNING)).code is StoreCode.CONFLICT  # not bound yet
    back = await state.transition(uid, PodPhase.PENDING, reason="Conflict", count_attempt=True)
    assert back.ok and back.phase is PodPhase.RESERVED
    got = await state.get_pod(uid)
    assert got is not None and (got.node, got.attempts, got.reason) == ("", 2, "Conflict")
    with pytest.raises(ValueError):
        await state.transition(uid, PodPhase.BOUND, node="n1")
    with pytest.raises(ValueError):
        await state.transition(uid, PodPhase.RESERVED)
    assert (await state.transition("ghost", PodPhase.PENDING)).code is StoreCode.NOT_FOUND


async def test_bound_is_for_life_and_exactly_once(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    await state.put_node(make_node("n2"))
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    uid = "uid-p"
    assert (await state.transition(uid, PodPhase.RESERVED, node="n1")).ok
    assert (await state.bind_pod(uid, "n2")).code is StoreCode.CONFLICT  # reserved elsewhere
    assert (await state.bind_pod(uid, "n1", expected_version=1)).code is StoreCode.CONFLICT
    w = await state.bind_pod(uid, "n1", expected_version=2)
    assert (w.code, w.version, w.phase) == (StoreCode.OK, 3, PodPhase.RESERVED)
    assert (await state.bind_pod(uid, "n1")).code is StoreCode.ALREADY
    assert (await state.bind_pod(uid, "n2")).code is StoreCode.CONFLICT
    for phase in (PodPhase.PENDING, PodPhase.RESERVED):
        assert (await state.transition(uid, phase, node="n2")).code is StoreCode.CONFLICT
    assert (await state.transition(uid, PodPhase.RUNNING)).ok
    assert (await state.transition(uid, PodPhase.RUNNING)).code is StoreCode.ALREADY
    assert (await state.bind_pod(uid, "n1")).code is StoreCode.ALREADY
    assert (await state.transition(uid, PodPhase.SUCCEEDED)).ok
    assert (await state.transition(uid, PodPhase.SUCCEEDED)).code is StoreCode.ALREADY
    assert (await state.transition(uid, PodPhase.FAILED)).code is StoreCode.CONFLICT
    assert (await state.transition(uid, PodPhase.DELETED)).ok
    assert (await state.transition(uid, PodPhase.DELETED)).code is StoreCode.ALREADY
    assert (await state.transition(uid, PodPhase.PENDING)).code is StoreCode.GONE
    assert (await state.bind_pod(uid, "n1")).code is StoreCode.GONE
    assert (await state.bind_pod("ghost", "n1")).code is StoreCode.NOT_FOUND
    got = await state.get_pod(uid)
    assert got is not None and got.bindings == 1

    # a pending pod binds directly (the binder found no cycle reservation step to wait for)
    q, qm = make_pod("q")
    await submit(state, q, qm)
    assert (await state.bind_pod("uid-q", "n2", (1, 0))).ok
    got = await state.get_pod("uid-q")
    assert got is not None and got.gpu_devices == (0, 1) and got.phase is PodPhase.BOUND


async def test_pod_placements_read_phase_and_node_in_order_none_for_no_record(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    bound, bound_manifest = make_pod("bound")
    pending, pending_manifest = make_pod("pending")
    await submit(state, bound, bound_manifest)
    await submit(state, pending, pending_manifest)
    await place(state, bound, "n1")
    uids = ["uid-pending", "ghost", "uid-bound"] * 700  # more than one call's worth
    placements = await state.pod_placements(uids)
    assert placements[:3] == [(PodPhase.PENDING, ""), None, (PodPhase.BOUND, "n1")]
    assert placements == placements[:3] * 700
    assert await state.pod_placements([]) == []


async def test_full_lifecycle_keeps_the_invariants(state: ClusterState) -> None:
    await state.put_node(make_node("n1", gpus=h100s(2), cpu="8", memory="32Gi"))
    pods = [make_pod(f"p{i}", gpu_memory="30Gi") for i in range(4)]
    for pod, manifest in pods:
        await submit(state, pod, manifest)
    for i, (pod, _) in enumerate(pods):
        await place(state, pod, "n1", (i // 2,))
        assert await check_invariants(state) == []
    assert (await state.transition("uid-p0", PodPhase.RUNNING)).ok
    assert (await state.transition("uid-p0", PodPhase.SUCCEEDED)).ok
    # finished but not yet released: a leaked reservation
    assert any("which is Succeeded" in v for v in await check_invariants(state))
    assert await state.release("n1", "uid-p0") is StoreCode.OK
    assert await check_invariants(state) == []
    assert [p.uid for p in await state.pods_in_phase(PodPhase.BOUND)] == ["uid-p1", "uid-p2", "uid-p3"]


async def test_events_are_capped_newest_last(redis: aioredis.Redis) -> None:
    state = ClusterState(redis, event_cap=3)
    for i in range(5):
        await state.append_event("u1", PodEvent(float(i), EventType.NORMAL, "Scheduled", f"m{i}", "cycle"))
    assert [e.message for e in await state.events("u1")] == ["m2", "m3", "m4"]
    assert await state.events("nobody") == []
    # Many pods' events in one call: each pod's in order, each capped.
    await state.append_events(
        [(uid, PodEvent(float(i), EventType.NORMAL, "Preempting", f"{uid}-{i}", "cycle")) for i in range(4)
         for uid in ("u1", "u2")]
    )  # fmt: skip
    assert [e.message for e in await state.events("u1")] == ["u1-1", "u1-2", "u1-3"]
    assert [e.message for e in await state.events("u2")] == ["u2-1", "u2-2", "u2-3"]
    await state.append_events([])


# ---- leases ------------------------------------------------------------------------------------


async def test_lease_fencing_and_hand_over(state: ClusterState) -> None:
    t1 = await state.acquire_lease("cycle/default", "replica-a", 200)
    assert t1 == 1
    assert await state.acquire_lease("cycle/default", "replica-b", 200) is None
    assert await state.acquire_lease("cycle/default", "replica-a", 200) == t1  # renewal keeps the token
    lease = await state.get_lease("cycle/default")
    assert lease is not None and (lease.holder, lease.token) == ("replica-a", 1) and 0 < lease.ttl_ms <= 200
    assert not await state.release_lease("cycle/default", "replica-b")

    async def b_takes_over() -> int:
        token = await state.acquire_lease("cycle/default", "replica-b", 5000)
        assert token is not None
        return token

    t2 = await eventually(b_takes_over, timeout=3)  # a stops renewing: the lease lapses
    assert t2 > t1
    assert await state.acquire_lease("cycle/default", "replica-a", 200) is None
    assert await state.release_lease("cycle/default", "replica-b")
    assert await state.get_lease("cycle/default") is None
    t3 = await state.acquire_lease("cycle/default", "replica-a", 200)
    assert t3 is not None and t3 > t2
    assert await state.acquire_lease("other", "replica-a", 200) == 1  # counters are per lease
    with pytest.raises(ValueError):
        await state.acquire_lease("x", "a", 0)


# ---- snapshots, invariants, index repair -------------------------------------------------------


async def test_snapshot_after_restart_matches_redis(redis: aioredis.Redis, redis_url: str) -> None:
    state = ClusterState(redis)
    await state.put_node(make_node("n1", gpus=h100s(2), cpu="8", memory="32Gi"))
    await state.put_node(make_node("n2", cpu="2"))
    specs = [("a", "n1", (0,), "10Gi"), ("b", "n1", (0,), "20Gi"), ("c", "n1", (1,), "5Gi"), ("d", "n2", (), None)]
    for name, node, devices, mem in specs:
        pod, manifest = make_pod(name, gpu_memory=mem, host_port=9000 if name == "d" else None)
        await submit(state, pod, manifest)
        await place(state, pod, node, devices)

    fresh = aioredis.Redis.from_url(redis_url, decode_responses=True)  # another process, decoding
    try:
        restarted = ClusterState(fresh)
        snapshot = await restarted.load_snapshot()
        assert [n.name for n, _ in snapshot] == ["n1", "n2"]
        for node, reservations in snapshot:
            info = node_info_of(node, reservations)
            u = await restarted.node_usage(node.name)
            assert u is not None
            assert {k: v for k, v in info.requested.items() if v} == u.requested
            assert len(info.pods) == u.pods
            assert info.gpu_free_memory == [g.free for g in u.gpus]
            assert all(r.state is ReservationState.BOUND for r in reservations)
        assert await check_invariants(restarted) == []
        got = await restarted.get_node("n1")
        assert got is not None and got.to_node() == make_node("n1", gpus=h100s(2), cpu="8", memory="32Gi")
    finally:
        await fresh.aclose()


async def test_invariants_catch_corruption(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="2"))
    pod, manifest = make_pod("p", cpu="1")
    await submit(state, pod, manifest)
    await place(state, pod, "n1")
    assert await check_invariants(state) == []
    k = state.keys

    await state.redis.hincrby(k.node_usage("n1"), "r:cpu", 5)
    assert await check_invariants(state) == ["node n1: usage r:cpu is 1005, reservations add up to 1000"]
    await state.redis.hincrby(k.node_usage("n1"), "r:cpu", -5)

    # a reservation written behind the script's back, overcommitting, for a pod that does not exist
    ghost, _ = make_pod("ghost", cpu="1500m")
    await state.redis.hset(k.node_reservations("n1"), "uid-ghost", reservation(ghost, "n1").encode())
    found = await check_invariants(state)
    assert "node n1: overcommitted cpu: reservations request 2500, allocatable 2000" in found
    assert "node n1: reservation of pod default/ghost (uid-ghost) whose pod does not exist" in found
    assert "node n1: usage r:cpu is 1000, reservations add up to 2500" in found
    await state.redis.hdel(k.node_reservations("n1"), "uid-ghost")

    await state.redis.hset(k.pod_record("uid-p"), "bindings", "2")
    await state.redis.sadd(k.phase_index("Pending"), "uid-p")
    found = await check_invariants(state)
    assert "pod default/p (uid-p): bound 2 times" in found
    assert "pod default/p (uid-p): phase Bound, but in phase index(es) ['Pending', 'Bound']" in found

    await state.redis.hset(k.pod_record("uid-p"), "bindings", "1")
    await state.redis.srem(k.phase_index("Pending"), "uid-p")
    assert await check_invariants(state) == []
    await state.redis.srem(k.nodes_index(), "n1")
    assert await check_invariants(state) == ["nodes index: node n1 missing"]
    assert await state.repair_indexes() == ["nodes index: added n1"]
    assert await state.repair_indexes() == []


async def test_repair_indexes_rebuilds_lost_index_entries(redis: aioredis.Redis) -> None:
    state = ClusterState(redis)
    await state.put_node(make_node("n1"))
    pods = [make_pod(f"p{i}", profile="batch") for i in range(3)]
    for pod, manifest in pods:
        await submit(state, pod, manifest)
    await place(state, pods[0][0], "n1")
    assert (await state.transition("uid-p1", PodPhase.RESERVED, node="n1")).ok
    assert (await state.reserve("n1", reservation(pods[1][0], "n1"))).ok
    assert await check_invariants(state) == []
    assert await state.pod_uids_in_phase(PodPhase.PENDING, profile="batch") == {"uid-p2"}
    assert await state.node_names() == ["n1"]

    # index entries lost (edited by hand, a restore from an older backup), then the repair
    await state.redis.delete(state.keys.pending_index("batch"), state.keys.nodes_index())
    await state.redis.hdel(state.keys.pod_keys_index(), "default/p2")
    assert len(await check_invariants(state)) == 3
    assert sorted(await state.repair_indexes()) == [
        "nodes index: added n1",
        "pending index batch: added uid-p2",
        "pod-keys index: default/p2 -> uid-p2",
    ]
    assert await check_invariants(state) == []


async def test_concurrent_retries_of_one_bind_bind_once(state: ClusterState) -> None:
    await state.put_node(make_node("n1"))
    pod, manifest = make_pod("p")
    await submit(state, pod, manifest)
    assert (await state.reserve("n1", reservation(pod, "n1"))).ok
    assert (await state.transition("uid-p", PodPhase.RESERVED, node="n1")).ok
    results = await asyncio.gather(*(state.bind_pod("uid-p", "n1") for _ in range(20)))
    assert sorted(r.code for r in results).count(StoreCode.OK) == 1
    assert {r.code for r in results} == {StoreCode.OK, StoreCode.ALREADY}
    marks = await asyncio.gather(*(state.mark_bound("n1", "uid-p") for _ in range(20)))
    assert marks.count(StoreCode.OK) == 1
    assert await check_invariants(state) == []


async def test_bind_many_is_mark_bound_bind_pod_release_per_pod(redis: aioredis.Redis) -> None:
    from kubus.store.cluster_state import Binding

    state = ClusterState(redis)
    await state.put_node(make_node("n1", cpu="16", memory="64Gi", gpus=h100s(2)))
    await state.put_node(make_node("n2"))

    async def reserved(name: str, node: str = "n1", *, profile: str = "default-scheduler") -> int:
        pod, manifest = make_pod(name, profile=profile)
        await submit(state, pod, manifest)
        w = await state.transition(pod.metadata.uid, PodPhase.RESERVED, node=node, count_attempt=True)
        assert w.ok
        assert (await state.reserve(node, reservation(pod, node, attempt=w.version))).ok
        return w.version

    good = await reserved("good")
    gpu_pod, gpu_manifest = make_pod("gpu", whole_gpus=1)
    await submit(state, gpu_pod, gpu_manifest)
    w = await state.transition("uid-gpu", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(gpu_pod, "n1", (1,), attempt=w.version))).ok
    gpu = w.version
    deleted = await reserved("deleted")
    assert (await state.transition("uid-deleted", PodPhase.DELETED)).ok
    moved = await reserved("moved")  # a newer attempt began, its reservation not yet made
    assert (await state.transition("uid-moved", PodPhase.RESERVED, node="n1", expected_version=moved)).ok
    lost = await reserved("lost")  # a hand-back cut short: room given back, pod still Reserved
    assert await state.unreserve("n1", "uid-lost", lost) is StoreCode.OK
    other = await reserved("other", "n2")  # the reservation is another attempt's
    batch = await reserved("batch", "n2", profile="batch")  # the profile given is wrong
    pod, manifest = make_pod("pending", profile="batch")  # Pending, reserved by a retry of any attempt
    await submit(state, pod, manifest)
    assert (await state.reserve("n2", reservation(pod, "n2", attempt=99))).ok

    event = PodEvent(1.0, EventType.NORMAL, "Scheduled", "bound", "test")
    bindings = [
        Binding("uid-good", "n1", good, (), "default-scheduler", event),
        Binding("uid-gpu", "n1", gpu, (1,), "default-scheduler", event),
        Binding("uid-deleted", "n1", deleted, (), "default-scheduler", event),
        Binding("uid-moved", "n1", moved, (), "default-scheduler", event),
        Binding("uid-lost", "n1", lost, (), "default-scheduler", event),
        Binding("uid-other", "n2", other + 100, (), "default-scheduler", event),
        Binding("uid-batch", "n2", batch, (), "default-scheduler", event),
        Binding("uid-pending", "n2", 0, (), "batch", event),
        Binding("uid-ghost", "n2", 7, (), "default-scheduler", event),
    ]
    results = await state.bind_many(bindings)
    summary = [(r.marked, r.write and r.write.code, r.released, r.bound) for r in results]
    assert summary == [
        (StoreCode.OK, StoreCode.OK, None, True),
        (StoreCode.OK, StoreCode.OK, None, True),
        (StoreCode.OK, StoreCode.GONE, StoreCode.OK, False),
        (StoreCode.OK, StoreCode.CONFLICT, StoreCode.OK, False),
        (StoreCode.NOT_FOUND, None, None, False),
        (StoreCode.CONFLICT, None, None, False),
        (StoreCode.OK, StoreCode.OK, None, True),
        (StoreCode.OK, StoreCode.OK, None, True),
        (StoreCode.NOT_FOUND, None, None, False),
    ]
    assert (results[0].write.version, results[0].write.phase) == (good + 1, PodPhase.RESERVED)  # type: ignore[union-attr]
    assert results[0].attempts == 1 and results[0].created_at > 0
    assert (results[3].write.phase, results[3].write.version) == (PodPhase.RESERVED, moved + 1)  # type: ignore[union-attr]
    assert (results[4].phase, results[4].version) == (PodPhase.RESERVED, lost)
    assert (results[8].phase, results[8].version) == (None, 0)
    for uid, node in (("uid-good", "n1"), ("uid-gpu", "n1"), ("uid-batch", "n2"), ("uid-pending", "n2")):
        record = await state.get_pod(uid)
        assert record is not None and record.phase is PodPhase.BOUND and record.node == node and record.bindings == 1
        assert [e.reason for e in await state.events(uid)] == ["Scheduled"]
        r = await state.reservation(node, uid)
        assert r is not None and r.state is ReservationState.BOUND
    gpu_record = await state.get_pod("uid-gpu")
    assert gpu_record is not None and gpu_record.gpu_devices == (1,)
    for uid in ("uid-deleted", "uid-moved", "uid-lost"):
        assert await state.reservation("n1", uid) is None
        assert await state.events(uid) == []
    assert await state.pod_uids_in_phase(PodPhase.BOUND) == {"uid-good", "uid-gpu", "uid-batch", "uid-pending"}
    assert await state.pod_uids_in_phase(PodPhase.PENDING, profile="batch") == set()
    assert "uid-moved" in await state.pod_uids_in_phase(PodPhase.RESERVED)
    before = await usage(state, "n1")
    assert before["pods"] == 2 and before["g:1:pods"] == 1

    # Redelivered: nothing bound twice, no event twice, no room given back twice.
    again = await state.bind_many(bindings)
    assert [(r.marked, r.write and r.write.code, r.released) for r in again] == [
        (StoreCode.ALREADY, StoreCode.ALREADY, None),
        (StoreCode.ALREADY, StoreCode.ALREADY, None),
        (StoreCode.NOT_FOUND, None, None),
        (StoreCode.NOT_FOUND, None, None),
        (StoreCode.NOT_FOUND, None, None),
        (StoreCode.CONFLICT, None, None),
        (StoreCode.ALREADY, StoreCode.ALREADY, None),
        (StoreCode.ALREADY, StoreCode.ALREADY, None),
        (StoreCode.NOT_FOUND, None, None),
    ]
    assert again[0].attempts == 1 and again[0].created_at == results[0].created_at
    assert (again[2].phase, again[3].phase) == (PodPhase.DELETED, PodPhase.RESERVED)
    assert await usage(state, "n1") == before
    for uid in ("uid-good", "uid-gpu", "uid-batch", "uid-pending"):
        record = await state.get_pod(uid)
        assert record is not None and record.bindings == 1
        assert len(await state.events(uid)) == 1
    assert await state.bind_many([]) == []


async def test_transition_many_equals_one_call_per_pod(redis: aioredis.Redis) -> None:
    from kubus.store import Move

    state = ClusterState(redis)
    await state.put_node(make_node("n1", cpu="2", pods=10))
    pods = [make_pod(f"p{i}", cpu="1") for i in range(3)]
    for pod, manifest in pods:
        await submit(state, pod, manifest)
    fresh = ClusterState(redis)  # knows no profile yet: reads them first
    moves = [
        Move(
            f"uid-p{i}", PodPhase.RESERVED, expected_phases=frozenset({PodPhase.PENDING}), node="n1", count_attempt=True
        )
        for i in range(3)
    ]
    moves.append(Move("ghost", PodPhase.PENDING))
    moves.append(Move("uid-p0", PodPhase.PENDING, expected_phases=frozenset()))  # nothing acceptable
    writes = await fresh.transition_many(moves)
    assert [w.code for w in writes] == [StoreCode.OK] * 3 + [StoreCode.NOT_FOUND, StoreCode.CONFLICT]
    assert [w.phase for w in writes[:3]] == [PodPhase.PENDING] * 3
    again = await fresh.transition_many(moves[:1])  # no longer Pending
    assert (again[0].code, again[0].phase) == (StoreCode.CONFLICT, PodPhase.RESERVED)
    for i in range(3):
        record = await state.get_pod(f"uid-p{i}")
        assert record is not None and (record.phase, record.node, record.attempts) == (PodPhase.RESERVED, "n1", 1)
    assert await state.pod_uids_in_phase(PodPhase.RESERVED) == {"uid-p0", "uid-p1", "uid-p2"}

    # Two fit on 2 CPUs; the third sees the first two and is refused, and changes nothing.
    holds = [reservation(pod, "n1", attempt=w.version) for (pod, _), w in zip(pods, writes, strict=False)]
    answers = [await fresh.reserve("n1", hold) for hold in holds]
    assert [a.code for a in answers] == [StoreCode.OK, StoreCode.OK, StoreCode.CONFLICT]
    assert answers[2].reasons == ("Insufficient cpu",)
    assert (await fresh.reserve("n1", holds[0])).already
    assert {k: v for k, v in (await usage(state, "n1")).items() if k != "r:memory"} == {"r:cpu": 2000, "pods": 2}


async def test_reserve_attempts_over_several_script_calls_answer_each_pod_in_order(state: ClusterState) -> None:
    """More pods than one RESERVE_PODS call takes: every chunk runs, the answers in the pods' order."""
    await state.put_node(make_node("big", cpu="1000", memory="1000Gi", pods=250))
    pods = [make_pod(f"many-{i}", cpu="1", memory="1Gi") for i in range(300)]  # 2 calls and a half
    for pod, manifest in pods:
        await submit(state, pod, manifest)
    results = await state.reserve_attempts("default-scheduler", [reservation(pod, "big") for pod, _ in pods])
    assert [r.write.code for r in results] == [StoreCode.OK] * 250 + [StoreCode.NOOP] * 50  # 250 pods a node
    reserved = {r.uid for r in await state.pods_in_phase(PodPhase.RESERVED)}
    assert reserved == {f"uid-many-{i}" for i in range(250)}


async def test_reserve_attempts_reserve_the_room_and_make_the_attempt_in_one_step(redis: aioredis.Redis) -> None:
    state = ClusterState(redis)
    await state.put_node(make_node("n1", cpu="2", pods=10, gpus=h100s(2)))
    pods = [make_pod(f"p{i}", cpu="1") for i in range(3)]
    for pod, manifest in pods:
        await submit(state, pod, manifest)
    results = await state.reserve_attempts("default-scheduler", [reservation(pod, "n1") for pod, _ in pods])
    # Two fit on 2 CPUs: Reserved at their new version, which their reservation carries.
    assert [r.write.code for r in results] == [StoreCode.OK, StoreCode.OK, StoreCode.NOOP]
    for i in range(2):
        record = await state.get_pod(f"uid-p{i}")
        assert record is not None
        assert (record.phase, record.node, record.attempts) == (PodPhase.RESERVED, "n1", 1)
        assert record.version == results[i].write.version == 2 and results[i].write.phase is PodPhase.PENDING
        held = await state.reservation("n1", f"uid-p{i}")
        assert held is not None and held.attempt == 2
    # The third's room was refused: the pod is Pending as it was, with no reservation.
    refused = results[2]
    assert refused.room is not None and refused.room.reasons == ("Insufficient cpu",)
    record = await state.get_pod("uid-p2")
    assert record is not None and (record.phase, record.version, record.attempts) == (PodPhase.PENDING, 1, 0)
    assert await state.reservation("n1", "uid-p2") is None
    assert await state.pod_uids_in_phase(PodPhase.RESERVED) == {"uid-p0", "uid-p1"}
    assert await state.pod_uids_in_phase(PodPhase.PENDING, profile="default-scheduler") == {"uid-p2"}
    assert await check_invariants(state) == []

    # Nothing is tried for a pod that is not Pending, not there, or another profile's.
    other, other_manifest = make_pod("q", profile="gpu")
    await submit(state, other, other_manifest)
    again = await state.reserve_attempts(
        "default-scheduler", [reservation(p, "n1") for p in (pods[0][0], make_pod("ghost")[0], other)]
    )
    assert [(r.write.code, r.room) for r in again] == [
        (StoreCode.CONFLICT, None),
        (StoreCode.NOT_FOUND, None),
        (StoreCode.CONFLICT, None),
    ]
    assert again[0].write.phase is PodPhase.RESERVED

    # A GPU pod whose devices were taken gets others, and its record names the ones it holds.
    whole, whole_manifest = make_pod("g", cpu="0", whole_gpus=1)
    await submit(state, whole, whole_manifest)
    taker, taker_manifest = make_pod("t", cpu="0", whole_gpus=1)
    await submit(state, taker, taker_manifest)
    [took] = await state.reserve_attempts("default-scheduler", [reservation(taker, "n1", (0,), attempt=NO_ATTEMPT)])
    assert took.ok
    [moved] = await state.reserve_attempts(
        "default-scheduler", [reservation(whole, "n1", (0,), attempt=NO_ATTEMPT, gpu_pick="binpack")]
    )
    assert moved.ok and moved.room is not None and moved.room.gpu_devices == (1,)
    record = await state.get_pod("uid-g")
    assert record is not None and record.gpu_devices == (1,)
    assert await check_invariants(state) == []

    assert await state.reserve_attempts("default-scheduler", []) == []
    with pytest.raises(ValueError):
        await state.reserve_attempts("default-scheduler", [reservation(pods[2][0], "n1", attempt=5)])
    with pytest.raises(ValueError):
        await state.reserve_attempts("default-scheduler", [reservation(pods[2][0], "", attempt=NO_ATTEMPT)])


async def test_the_attempt_checked_is_the_reservations_own_not_a_label_named_attempt(redis: aioredis.Redis) -> None:
    """The scripts read a stored reservation's attempt without decoding its JSON (the first
    "attempt" key): a pod labelled attempt=<another attempt> must not pass for that attempt."""
    from kubus.store import PodStart
    from kubus.store.cluster_state import Binding

    state = ClusterState(redis)
    await state.put_node(make_node("n1"))
    pod, manifest = make_pod("labelled")
    pod = replace(pod, metadata=replace(pod.metadata, labels={"attempt": "99", "app": "x"}))
    await submit(state, pod, manifest)
    [attempt] = await state.reserve_attempts("default-scheduler", [reservation(pod, "n1", attempt=NO_ATTEMPT)])
    assert attempt.ok
    own = attempt.write.version
    held = await state.reservation("n1", "uid-labelled")
    assert held is not None and held.attempt == own and held.labels["attempt"] == "99"

    assert await state.mark_bound("n1", "uid-labelled", 99) is StoreCode.CONFLICT
    event = PodEvent(1.0, EventType.NORMAL, "Scheduled", "bound", "test")
    [wrong] = await state.bind_many([Binding("uid-labelled", "n1", 99, (), "default-scheduler", event)])
    assert (wrong.marked, wrong.bound) == (StoreCode.CONFLICT, False)
    [right] = await state.bind_many([Binding("uid-labelled", "n1", own, (), "default-scheduler", event)])
    assert (right.marked, right.bound) == (StoreCode.OK, True)

    [refused] = await state.start_pods([PodStart("uid-labelled", "n1", 99)])
    assert (refused.code, refused.reason) == (StoreCode.CONFLICT, "the reservation is another attempt's")
    [started] = await state.start_pods([PodStart("uid-labelled", "n1", str(own))])
    assert started.code is StoreCode.OK and started.version == own + 2  # bound, then running
    record = await state.get_pod("uid-labelled")
    assert record is not None and (record.phase, record.version, record.attempts) == (PodPhase.RUNNING, own + 2, 1)
    assert await check_invariants(state) == []


async def test_admission_views_and_start_pods(redis: aioredis.Redis) -> None:
    from kubus.store import PodStart

    state = ClusterState(redis)
    await state.put_node(make_node("n1", cpu="16", memory="64Gi", gpus=h100s(2)))
    await state.put_node(make_node("n2"))

    async def bound(name: str, node: str = "n1", devices: tuple[int, ...] = ()) -> Attempt:
        pod, manifest = make_pod(name, whole_gpus=len(devices))
        uid = pod.metadata.uid
        await submit(state, pod, manifest)
        attempt = (await state.transition(uid, PodPhase.RESERVED, node=node, count_attempt=True)).version
        assert (await state.reserve(node, reservation(pod, node, devices, attempt=attempt))).ok
        assert await state.mark_bound(node, uid, attempt) is StoreCode.OK
        assert (await state.bind_pod(uid, node, devices, expected_version=attempt)).ok
        return attempt

    a0, a1, a2 = await bound("p0", devices=(1,)), await bound("p1"), await bound("p2")
    pod, manifest = make_pod("reserved-only")
    await submit(state, pod, manifest)
    w = await state.transition("uid-reserved-only", PodPhase.RESERVED, node="n1", count_attempt=True)
    assert (await state.reserve("n1", reservation(pod, "n1", attempt=w.version))).ok

    fresh = ClusterState(redis)  # knows no profile yet: the views tell it
    views = await fresh.admission_views(
        [("n1", "uid-p0"), ("n2", "uid-p1"), ("n1", "ghost"), ("n1", "uid-reserved-only")]
    )
    p0, elsewhere, ghost, unbound = views
    assert (p0.phase, p0.pod_node, p0.profile) == (PodPhase.BOUND, "n1", "default-scheduler")
    assert p0.updated_at > 0
    assert p0.reservation is not None and p0.reservation.state is ReservationState.BOUND
    assert p0.reservation.gpu_devices == (1,) and p0.reservation.attempt == a0
    assert (elsewhere.phase, elsewhere.pod_node, elsewhere.reservation) == (PodPhase.BOUND, "n1", None)
    assert (ghost.phase, ghost.reservation) == (None, None)
    assert unbound.reservation is not None and unbound.reservation.state is ReservationState.RESERVED
    assert await fresh.admission_views([]) == []

    def start(
        uid: str, node: str = "n1", attempt: Attempt = NO_ATTEMPT, event: str = "Started", ends: float = 0.0
    ) -> PodStart:
        return PodStart(uid, node, attempt, PodEvent(1.0, EventType.NORMAL, event), ends_at=ends)

    results = await fresh.start_pods(
        [
            start("uid-p0", attempt=a0, ends=1234.5),  # its agent will finish it then
            start("uid-p1", attempt=a1 + 5),  # another attempt's reservation
            start("uid-p2", node="n2"),  # not on that node
            start("ghost"),
            start("uid-reserved-only"),  # not bound
        ]
    )
    assert [r.code for r in results] == [StoreCode.OK] + [StoreCode.CONFLICT] * 2 + [
        StoreCode.NOT_FOUND,
        StoreCode.CONFLICT,
    ]
    assert results[0].started and results[0].phase is PodPhase.BOUND
    assert results[1].phase is PodPhase.BOUND and not results[1].started
    assert "attempt" in results[1].reason and "another node" in results[2].reason
    assert "not bound" in results[4].reason
    assert [(await state.get_pod(u)).phase for u in ("uid-p0", "uid-p1", "uid-p2")] == [  # type: ignore[union-attr]
        PodPhase.RUNNING,
        PodPhase.BOUND,
        PodPhase.BOUND,
    ]
    assert await state.pod_uids_in_phase(PodPhase.RUNNING) == {"uid-p0"}
    assert [(await state.get_pod(u)).ends_at for u in ("uid-p0", "uid-p1")] == [1234.5, 0.0]  # type: ignore[union-attr]
    assert [e.reason for e in await state.events("uid-p0")] == ["Started"]
    assert await state.events("uid-p1") == []

    # A retry is ALREADY and appends nothing; a reservation released behind the agent's back
    # (or one never marked bound) starts nothing; a deleted pod is GONE.
    again = await fresh.start_pods([start("uid-p0", attempt=a0, event="Again")])
    assert again[0].code is StoreCode.ALREADY and again[0].started
    assert [e.reason for e in await state.events("uid-p0")] == ["Started"]
    assert await state.release("n1", "uid-p1") is StoreCode.OK
    assert (await fresh.start_pods([start("uid-p1", attempt=a1)]))[0].reason == "no reservation"
    assert (await state.transition("uid-p2", PodPhase.DELETED)).ok
    assert (await fresh.start_pods([start("uid-p2", attempt=a2)]))[0].code is StoreCode.GONE
    assert await fresh.start_pods([]) == []
    assert await state.release("n1", "uid-p2") is StoreCode.OK
    assert (await state.transition("uid-p1", PodPhase.FAILED)).ok
    assert await check_invariants(state) == []


# ---- batched intake and the heartbeats index (the queue) -----------------------------------------


async def test_put_pods_is_put_pod_for_many_in_one_round_trip(state: ClusterState) -> None:
    pods = [make_pod(f"p{i}", profile="gpu" if i % 2 else "default-scheduler") for i in range(3)]
    records = [PodRecord.of(pod, manifest, now=10.0) for pod, manifest in pods]
    assert await state.put_pod(records[1])  # stored before: not stored again
    again = PodRecord.of(pods[0][0], b'{"changed": true}', now=11.0)  # the same uid twice: first wins
    assert await state.put_pods([records[0], records[1], records[2], again]) == [True, False, True, False]
    assert await state.put_pods([]) == []
    for record in records:
        got = await state.get_pod(record.uid)
        assert got is not None and got.manifest == record.manifest and got.version == 1
        assert got.phase is PodPhase.PENDING
    assert await state.pod_uids_in_phase(PodPhase.PENDING, profile="gpu") == {records[1].uid}
    assert await state.pod_uids_in_phase(PodPhase.PENDING) == {r.uid for r in records}
    assert await state.find_pod("default", "p2") is not None
    assert await check_invariants(state) == []

    # Stored field by field exactly as put_pod stores them, odd text included.
    pod, _ = make_pod("odd")
    manifest = codec.dumps({"metadata": {"annotations": {"a": 'ü "q" \\ \u0000 \n 😀'}}})
    odd = PodRecord.of(pod, manifest, now=12.5)
    assert await state.put_pods([odd]) == [True]

    def text(raw: dict[Any, Any]) -> dict[str, str]:
        return {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }

    raw = await state.redis.hgetall(state.keys.pod_record(odd.uid))
    assert text(raw) == text({**odd.to_fields(), "version": "1"})

    # A manifest that is not UTF-8 text goes in the batch as it is, byte for byte.
    binary, _ = make_pod("binary")
    raw_record = PodRecord.of(binary, b'\xff\xfe{"x": 1}', now=13.0)
    assert await state.put_pods([raw_record]) == [True]
    stored = await state.get_pod(raw_record.uid)
    assert stored is not None and stored.manifest == b'\xff\xfe{"x": 1}' and stored.version == 1


async def test_heartbeats_index_follows_heartbeats_and_deletes(state: ClusterState) -> None:
    for name in ("n1", "n2", "n3"):
        await state.put_node(make_node(name))
    assert await state.silent_nodes(1e12) == []  # never heartbeated: not in the index
    await state.heartbeat("n1", 100.0)
    assert await state.heartbeat_many(["n2", "ghost"], 200.0) == [
        HeartbeatResult(found=True, revived=False, generation=1),
        HeartbeatResult(found=False),
    ]
    assert await state.silent_nodes(150.0) == ["n1"]
    assert await state.silent_nodes(200.0) == ["n1", "n2"]  # oldest first; a ghost is never indexed
    await state.heartbeat("n1", 300.0)
    assert await state.silent_nodes(250.0) == ["n2"]
    assert await state.node_count() == 3

    # Healing: a node missing from the index is added; one there keeps its (newer) time.
    assert await state.index_heartbeats({"n3": 50.0, "n1": 10.0}) == 1
    assert await state.silent_nodes(250.0) == ["n3", "n2"]
    assert await state.index_heartbeats({}) == 0

    await state.delete_node("n2")
    assert await state.silent_nodes(1e12) == ["n3", "n1"]
    await state.forget_heartbeats(["n3", "never-there"])
    await state.forget_heartbeats([])
    assert await state.silent_nodes(1e12) == ["n1"]
    assert await state.node_count() == 2


async def test_heartbeat_many_beats_every_node_of_a_batch_past_one_script_call(state: ClusterState) -> None:
    """More nodes than one HEARTBEAT call takes (500): each answered in order, the lost one
    revived (its generation one more), the unknown ones left out of Redis and the index."""
    names = [f"n{i:03d}" for i in range(501)]
    for name in names:
        await state.put_node(make_node(name))
    assert await state.mark_unreachable("n499")  # generation 2
    batch = ["ghost-a", *names, "ghost-b"]
    results = await state.heartbeat_many(batch, 100.0)
    assert [r.found for r in results] == [False, *[True] * 501, False]
    assert results[500] == HeartbeatResult(found=True, revived=True, generation=3)  # n499
    assert {r.generation for i, r in enumerate(results[1:-1]) if i != 499} == {1}
    assert not any(r.revived for i, r in enumerate(results[1:-1]) if i != 499)
    node = await state.get_node("n499")
    assert node is not None and not node.unreachable and node.heartbeat == 100.0
    assert await state.silent_nodes(100.0) == sorted(names)
    assert await state.get_node("ghost-a") is None
    again = await state.heartbeat_many(names, 200.0)
    assert again[499] == HeartbeatResult(found=True, revived=False, generation=3)
    assert await state.silent_nodes(150.0) == []


# ---- pod anti-affinity between the pods of one node ----------------------------------------------


def _anti_pod(
    name: str, labels: dict[str, str], avoid: dict[str, str] | None, key: str = "kubernetes.io/hostname"
) -> Pod:
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    }
    if avoid is not None:
        manifest["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": avoid}, "topologyKey": key}
                ]
            }
        }
    return parse_pod(manifest)


async def test_reserve_refuses_breaking_required_anti_affinity_on_the_hostname(state: ClusterState) -> None:
    """Two profiles that do not see each other's placements yet: RESERVE is where a pod with
    required anti-affinity on the hostname and the pods it excludes meet, both ways."""
    await state.put_node(make_node("n1", cpu="8"))
    await state.put_node(make_node("n2", cpu="8"))
    web1 = _anti_pod("web1", {"app": "web"}, {"app": "web"})
    web2 = _anti_pod("web2", {"app": "web"}, {"app": "web"})
    plain = _anti_pod("plain", {"app": "web"}, None)  # no terms, but web1's term selects it
    other = _anti_pod("other", {"app": "db"}, None)
    zonal = _anti_pod("zonal", {"app": "batch"}, {"app": "db"}, key="topology.kubernetes.io/zone")

    assert (await state.reserve("n1", reservation(web1, "n1"))).ok
    refused = await state.reserve("n1", reservation(web2, "n1"))
    assert refused.reasons == ("node(s) didn't match pod anti-affinity rules (pod default/web1)",)
    refused = await state.reserve("n1", reservation(plain, "n1"))
    assert refused.reasons == ("node(s) didn't satisfy existing pods anti-affinity rules (pod default/web1)",)
    assert (await state.reserve("n1", reservation(other, "n1"))).ok
    assert (await state.reserve("n2", reservation(web2, "n2"))).ok
    assert (await state.reserve("n1", reservation(zonal, "n1"))).ok  # wider domains: the cycle's check
    assert await usage(state, "n1") == {"anti": 1, "pods": 3, "r:cpu": 300}
    assert not [v for v in await check_invariants(state) if "anti" in v]  # (the pods are not submitted)
    # the holder leaves: the node takes the pod it excluded
    assert await state.unreserve("n1", "uid-web1") is StoreCode.OK
    assert (await state.reserve("n1", reservation(plain, "n1"))).ok
    assert "anti" not in await usage(state, "n1")
    assert not [v for v in await check_invariants(state) if "anti" in v]


async def test_anti_affinity_namespace_selector_reads_the_namespace_labels(state: ClusterState) -> None:
    await state.put_node(make_node("n1", cpu="8"))
    guard = parse_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "guard", "uid": "uid-guard", "namespace": "ops"},
            "spec": {
                "containers": [{"name": "c"}],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {},
                                "namespaceSelector": {"matchLabels": {"team": "ml"}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
            },
        }
    )
    assert (await state.reserve("n1", reservation(guard, "n1"))).ok
    ml = _anti_pod("trainer", {}, None)
    web = _anti_pod("web", {}, None)
    refused = await state.reserve("n1", reservation(ml, "n1", namespace_labels={"team": "ml"}))
    assert refused.reasons == ("node(s) didn't satisfy existing pods anti-affinity rules (pod ops/guard)",)
    assert (await state.reserve("n1", reservation(web, "n1", namespace_labels={"team": "web"}))).ok
