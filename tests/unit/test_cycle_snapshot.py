"""NodeSnapshot: the cycle's node table made equal to what Redis holds, by diffs."""

from __future__ import annotations

import dataclasses

from builders import make_node, make_pod

from kubus.api.objects import (
    CPU,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Node,
    Pod,
)
from kubus.cycle import NodeSnapshot, PlacedPod, SyncStats
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import NodeRecord, Reservation

GI = 1024**3


def node(name: str, cpu: int = 4000, *, gpus: int = 0, labels: dict[str, str] | None = None) -> Node:
    return make_node(name, allocatable={CPU: cpu, MEMORY: 8 * GI, PODS: 110}, gpus=gpus, labels=labels)


def pod(name: str, cpu: int = 1000, *, uid: str | None = None, gpus: int = 0) -> Pod:
    requests = {CPU: cpu}
    if gpus:
        requests[NVIDIA_GPU] = gpus
    return make_pod(name, uid=uid or f"uid-{name}", image="busybox", requests=requests)


def reservation(p: Pod, node_name: str, devices: tuple[int, ...] = ()) -> Reservation:
    return Reservation.of(PodInfo.of(p).placed_on(devices), node_name, attempt=1)


def cpu_requested(snapshot: NodeSnapshot, name: str) -> int:
    return snapshot.table.node_info(name).requested[CPU]


def test_load_builds_rows_and_the_pod_index() -> None:
    snapshot = NodeSnapshot()
    a, b = pod("a"), pod("b", 500)
    stats = snapshot.load([(node("n1"), [reservation(a, "n1"), reservation(b, "n1")]), (node("n2"), [])])
    assert (stats.nodes_added, stats.pods_assumed) == (2, 2)
    assert len(snapshot.table) == 2
    assert cpu_requested(snapshot, "n1") == 1500
    assert snapshot.placed == {"default/a": PlacedPod("n1", "uid-a"), "default/b": PlacedPod("n1", "uid-b")}
    again = snapshot.load([(node("n1"), [reservation(a, "n1"), reservation(b, "n1")]), (node("n2"), [])])
    assert not again.changed


def test_load_removes_nodes_redis_no_longer_has() -> None:
    snapshot = NodeSnapshot()
    snapshot.load([(node("n1"), [reservation(pod("a"), "n1")]), (node("n2"), [])])
    stats = snapshot.load([(node("n2"), [])])
    assert stats.nodes_removed == 1
    assert "n1" not in snapshot.table and snapshot.placed == {}


def test_sync_nodes_diffs_the_reservations() -> None:
    snapshot = NodeSnapshot()
    a, b, c = pod("a"), pod("b"), pod("c", 250)
    snapshot.load([(node("n1"), [reservation(a, "n1"), reservation(b, "n1")])])
    stats = snapshot.sync_nodes(["n1"], [(node("n1"), [reservation(b, "n1"), reservation(c, "n1")])])
    assert (stats.pods_forgotten, stats.pods_assumed, stats.nodes_updated) == (1, 1, 0)
    assert set(snapshot.table.node_info("n1").pods) == {"default/b", "default/c"}
    assert cpu_requested(snapshot, "n1") == 1250
    assert set(snapshot.placed) == {"default/b", "default/c"}


def test_a_new_incarnation_or_other_devices_replace_the_pod() -> None:
    snapshot = NodeSnapshot()
    g = pod("g", gpus=1)
    snapshot.load([(node("n1", gpus=2), [reservation(g, "n1", (0,))])])
    assert snapshot.table.node_info("n1").gpu_pod_count == [1, 0]
    snapshot.sync_nodes(["n1"], [(node("n1", gpus=2), [reservation(g, "n1", (1,))])])
    assert snapshot.table.node_info("n1").gpu_pod_count == [0, 1]
    reborn = pod("g", uid="uid-g2", gpus=1)
    stats = snapshot.sync_nodes(["n1"], [(node("n1", gpus=2), [reservation(reborn, "n1", (1,))])])
    assert (stats.pods_forgotten, stats.pods_assumed) == (1, 1)
    assert snapshot.placed["default/g"] == PlacedPod("n1", "uid-g2")


def test_a_pod_that_begins_terminating_is_taken_in_again() -> None:
    """Its reservation now carries the deletionTimestamp: the table's pod is replaced, so the
    pod index groups it with the terminating pods (PodTopologySpread stops counting it)."""
    snapshot = NodeSnapshot()
    a = pod("a")
    snapshot.load([(node("n1"), [reservation(a, "n1")])])
    terminating = dataclasses.replace(reservation(a, "n1"), deletion_timestamp=1_700_000_000.0)
    stats = snapshot.sync_nodes(["n1"], [(node("n1"), [terminating])])
    assert (stats.pods_forgotten, stats.pods_assumed) == (1, 1)
    assert snapshot.table.node_info("n1").pods["default/a"].pod.terminating
    table = snapshot.table
    assert list(table.pods.count(table.rows, lambda ns, labels: True, terminating=False)) == [0] * table.rows
    assert sum(table.pods.count(table.rows, lambda ns, labels: True)) == 1
    assert cpu_requested(snapshot, "n1") == 1000  # still holding its room
    assert snapshot.sync_nodes(["n1"], [(node("n1"), [terminating])]).changed is False


def test_a_changed_node_keeps_its_pods_and_a_missing_one_is_removed() -> None:
    snapshot = NodeSnapshot()
    a = pod("a")
    snapshot.load([(node("n1"), [reservation(a, "n1")]), (node("n2"), [])])
    stats = snapshot.sync_nodes(["n1", "n2"], [(node("n1", cpu=8000, labels={"zone": "b"}), [reservation(a, "n1")])])
    assert (stats.nodes_updated, stats.nodes_removed, stats.pods_assumed, stats.pods_forgotten) == (1, 1, 0, 0)
    assert snapshot.table.node_info("n1").allocatable[CPU] == 8000
    assert cpu_requested(snapshot, "n1") == 1000
    assert "n2" not in snapshot.table


def test_sync_nodes_adds_a_new_node() -> None:
    snapshot = NodeSnapshot()
    snapshot.load([])
    stats = snapshot.sync_nodes(["n9"], [(node("n9"), [])])
    assert stats.nodes_added == 1 and "n9" in snapshot.table


def test_own_placements_are_left_alone_by_a_refresh_that_agrees() -> None:
    snapshot = NodeSnapshot()
    snapshot.load([(node("n1"), [])])
    a = pod("a")
    snapshot.table.assume(PodInfo.of(a), "n1")  # what Scheduler.schedule does
    snapshot.placed_by_scheduler(a.key, a.metadata.uid, "n1")
    stats = snapshot.sync_nodes(["n1"], [(node("n1"), [reservation(a, "n1")])])
    assert not stats.changed
    assert snapshot.table.node_info("n1").pods[a.key].pod is a  # the real pod, not a stand-in


def test_forget_undoes_a_placement() -> None:
    snapshot = NodeSnapshot()
    snapshot.load([(node("n1"), [reservation(pod("a"), "n1")])])
    assert snapshot.forget("default/a", "n1")
    assert not snapshot.forget("default/a", "n1")
    assert not snapshot.forget("default/a", "nowhere")
    assert cpu_requested(snapshot, "n1") == 0 and snapshot.placed == {}


def test_a_pod_redis_moved_is_accounted_once() -> None:
    snapshot = NodeSnapshot()
    a = pod("a")
    snapshot.load([(node("n1"), [reservation(a, "n1")]), (node("n2"), [])])
    snapshot.sync_nodes(["n2"], [(node("n2"), [reservation(a, "n2")])])
    assert cpu_requested(snapshot, "n1") == 0 and cpu_requested(snapshot, "n2") == 1000
    assert snapshot.placed["default/a"] == PlacedPod("n2", "uid-a")


def test_unreachable_nodes_carry_the_taint_and_are_counted() -> None:
    snapshot = NodeSnapshot()
    lost = dataclasses.replace(NodeRecord.of(node("lost")), unreachable=True)
    snapshot.load([(lost.to_node(), []), (node("ok"), [])])
    assert snapshot.unreachable_nodes() == 1
    taints = snapshot.table.node_info("lost").node.spec.taints
    assert any(t.key == "node.kubernetes.io/unreachable" and t.effect.value == "NoSchedule" for t in taints)


def test_preemption_victims_carry_the_attempt_the_store_holds() -> None:
    """A victim must be named with its reservation's attempt (PREEMPT refuses any other): the
    attempt comes from Redis on a sync, and from the cycle's own reserve for its placements."""
    s = NodeSnapshot()
    a, b = pod("a"), pod("b")
    s.load([(node("n1"), [dataclasses.replace(reservation(a, "n1"), attempt=7)])])
    s.table.assume(PodInfo.of(b), "n1")
    s.placed_by_scheduler("default/b", "uid-b", "n1")
    s.reserved("default/b", "n1", 3)
    s.reserved("default/b", "n2", 9)  # not where it is: ignored
    assert s.placed["default/a"].attempt == 7 and s.placed["default/b"].attempt == 3
    s.table.forget("default/b", "n1")  # the Scheduler's preemption took it off
    gone = s.evicted("default/b", "n1")
    assert gone == PlacedPod("n1", "uid-b") and gone.attempt == 3
    assert "default/b" not in s.placed and s.evicted("default/b", "n1") is None


def test_announced_reservations_are_assumed_and_a_later_read_agrees() -> None:
    """Another profile's announced reservations are taken in before Redis is read; reading the
    node afterwards finds them there and changes nothing."""
    snapshot = NodeSnapshot()
    snapshot.load([(node("n1", gpus=2), []), (node("n2"), [])])
    a, b = pod("a", gpus=1), pod("b", 500)
    announced = [
        dataclasses.replace(reservation(a, "n1", (1,)), attempt=4),
        reservation(b, "n2"),
        reservation(pod("c"), "unknown"),  # a node the table lacks: its node event brings it
    ]
    stats = SyncStats()
    assert snapshot.noticed(announced, stats) == set()
    assert stats.pods_assumed == 2 and "unknown" not in snapshot.table
    assert snapshot.placed["default/a"] == PlacedPod("n1", "uid-a") and snapshot.placed["default/a"].attempt == 4
    assert snapshot.table.node_info("n1").pods["default/a"].gpu_devices == (1,)
    assert cpu_requested(snapshot, "n2") == 500

    assert snapshot.noticed(announced[:2]) == set()  # again: nothing more
    assert cpu_requested(snapshot, "n2") == 500
    reread = snapshot.sync_nodes(["n1", "n2"], [(node("n1", gpus=2), [announced[0]]), (node("n2"), [announced[1]])])
    assert not reread.changed


def test_an_announcement_that_disagrees_with_the_table_is_left_to_redis() -> None:
    snapshot = NodeSnapshot()
    a = pod("a")
    snapshot.load([(node("n1"), [reservation(a, "n1")]), (node("n2"), [])])
    elsewhere = reservation(a, "n2")
    incarnation = reservation(pod("a", uid="uid-a-2"), "n1")
    assert snapshot.noticed([elsewhere]) == {"n1", "n2"}
    assert snapshot.noticed([incarnation]) == {"n1"}
    assert snapshot.placed["default/a"] == PlacedPod("n1", "uid-a")
    assert cpu_requested(snapshot, "n1") == 1000 and cpu_requested(snapshot, "n2") == 0
