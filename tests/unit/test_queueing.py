"""The scheduling queue's rules (kube's PriorityQueue) and the reading of submitted manifests, with a fake clock."""

from __future__ import annotations

from typing import ClassVar

import builders
import pytest

from kubus.api.objects import ObjectMeta, Pod, PodSpec
from kubus.api.submission import Rejected, read_submission
from kubus.core import codec
from kubus.queue import (
    CLUSTER_EVENTS,
    QueueName,
    SchedulingQueue,
    backoff_duration,
)
from kubus.queue.queueing import REFUSED_RETRIES, ClusterChange, QueueEntry


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_pod(name: str, *, priority: int = 0, gates: tuple[str, ...] = ()) -> Pod:
    return builders.make_pod(name, uid=f"uid-{name}", priority=priority, gates=gates)


def make_queue(clock: FakeClock, **kwargs: object) -> SchedulingQueue:
    return SchedulingQueue("default-scheduler", clock=clock, **kwargs)  # type: ignore[arg-type]


def add(queue: SchedulingQueue, name: str, **kwargs: object) -> QueueName:
    pod = make_pod(name, **kwargs)  # type: ignore[arg-type]
    return queue.add(pod, codec.dumps({"name": name}))


def fail(queue: SchedulingQueue, name: str, *plugins: str) -> QueueName | None:
    """Pop `name` (it must be at the head) and report it rejected by `plugins` (none: an error)."""
    [entry] = queue.pop(1)
    assert entry.key == f"default/{name}"
    return queue.add_unschedulable(entry.uid, plugins)


# -- backoff ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "expected"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (6, 10.0), (10_000, 10.0)]
)
def test_backoff_doubles_from_the_initial_value_up_to_the_cap(attempts: int, expected: float) -> None:
    assert backoff_duration(attempts, 1.0, 10.0) == expected


def test_backoff_with_other_settings() -> None:
    assert [backoff_duration(n, 3.0, 10.0) for n in range(1, 5)] == [3.0, 6.0, 10.0, 10.0]
    assert backoff_duration(1, 5.0, 5.0) == 5.0
    with pytest.raises(ValueError, match="backoff"):
        SchedulingQueue(initial_backoff=5, max_backoff=1)


def test_a_failed_pod_backs_off_from_the_time_its_attempt_came_back() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    add(queue, "a")
    clock.advance(7)
    assert fail(queue, "a") is QueueName.BACKOFF  # an error: no rejecting plugin
    entry = queue.get("uid-a")
    assert entry is not None and entry.attempts == 1 and entry.backoff_expiry == clock.now + 1.0
    clock.advance(0.99)
    assert queue.flush_backoff() == 0
    clock.advance(0.01)
    assert queue.flush_backoff() == 1
    assert queue.where("uid-a") is QueueName.ACTIVE

    assert fail(queue, "a") is QueueName.BACKOFF  # second attempt: 2 s
    assert queue.get("uid-a").backoff_expiry == clock.now + 2.0  # type: ignore[union-attr]


def test_a_refused_reservation_is_retried_at_once_in_its_place_then_backs_off_if_refused_too_often() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    add(queue, "a")
    clock.advance(1)
    add(queue, "b")
    [a] = queue.pop(1)
    assert queue.retry_refused(a.uid) is QueueName.ACTIVE  # no backoff
    assert [e.key for e in queue.pop(2)] == ["default/a", "default/b"]  # ahead of b, as before
    for _ in range(REFUSED_RETRIES - 1):
        assert queue.retry_refused(a.uid) is QueueName.ACTIVE
        assert queue.pop(1) == [a]
    assert a.attempts == REFUSED_RETRIES + 1

    assert queue.retry_refused(a.uid) is None  # refused too often in a row: the caller fails the attempt
    assert queue.where(a.uid) is QueueName.IN_FLIGHT
    assert queue.add_unschedulable(a.uid) is QueueName.BACKOFF
    assert queue.get(a.uid).backoff_expiry == clock.now + queue.backoff_duration(a.attempts)  # type: ignore[union-attr]

    clock.advance(10)
    queue.flush_backoff()
    [again] = queue.pop(1)
    assert again is a and queue.retry_refused(a.uid) is QueueName.ACTIVE  # a failed attempt in between
    assert queue.retry_refused("uid-unknown") is None
    assert queue.retry_refused(a.uid) is None  # not in flight: a repeated report changes nothing
    assert queue.where(a.uid) is QueueName.ACTIVE


def test_a_gang_member_leaving_backoff_brings_its_siblings() -> None:
    """Members of a PodGroup back off apart (they came back at different times); when the first one's backoff
    ends the others come along, so the gang is tried together. Pods of no group wait theirs."""
    clock = FakeClock()
    queue = make_queue(clock)
    for name, group in (("g-1", "gang"), ("g-2", "gang"), ("lone", None), ("o-1", "other")):
        labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
        pod = Pod(ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels=labels), PodSpec())
        queue.add(pod, codec.dumps({"name": name}))
    popped = {e.key: e for e in queue.pop(4)}
    queue.add_unschedulable(popped["default/g-1"].uid, ())  # back off 1 s from now
    clock.advance(0.6)
    for name in ("g-2", "lone", "o-1"):  # these came back later: their 1 s ends later
        queue.add_unschedulable(popped[f"default/{name}"].uid, ())
    clock.advance(0.4)
    queue.flush_backoff()  # g-1 leaves backoff: its sibling too; the others keep waiting
    assert queue.where("uid-g-1") is queue.where("uid-g-2") is QueueName.ACTIVE
    assert queue.where("uid-lone") is queue.where("uid-o-1") is QueueName.BACKOFF


def test_a_reserved_gang_member_activates_its_siblings() -> None:
    """A member of a PodGroup was reserved (it waits on Permit): its siblings in the backoffQ or the
    unschedulable set go to the activeQ at once, so the gang is tried within the member's wait. Gated
    siblings, pods of other groups and of none stay where they are."""
    clock = FakeClock()
    queue = make_queue(clock)
    members = {"g-0": "gang", "g-1": "gang", "g-2": "gang", "g-3": "gang", "o-1": "other", "lone": None}
    for name, group in members.items():
        labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
        gates = ("wait",) if name == "g-3" else ()
        pod = Pod(
            ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels=labels),
            PodSpec(scheduling_gates=gates),
        )
        queue.add(pod, codec.dumps({"name": name}))
    popped = {e.key: e for e in queue.pop(5)}
    queue.add_unschedulable(popped["default/g-1"].uid, ())  # backoffQ
    queue.add_unschedulable(popped["default/g-2"].uid, ("NodeResourcesFit",))  # unschedulable
    queue.add_unschedulable(popped["default/o-1"].uid, ("NodeResourcesFit",))
    queue.add_unschedulable(popped["default/lone"].uid, ())
    assert queue.where("uid-g-1") is QueueName.BACKOFF and queue.where("uid-g-2") is QueueName.UNSCHEDULABLE
    assert queue.done(popped["default/g-0"].uid) is not None

    assert queue.activate_siblings(["default/gang"]) == 2
    assert queue.where("uid-g-1") is queue.where("uid-g-2") is QueueName.ACTIVE
    assert queue.where("uid-g-3") is QueueName.GATED
    assert queue.where("uid-o-1") is QueueName.UNSCHEDULABLE
    assert queue.where("uid-lone") is QueueName.BACKOFF
    assert {e.key for e in queue.pop(5)} == {"default/g-1", "default/g-2"}
    assert queue.activate_siblings([]) == 0
    clock.advance(60)
    assert queue.flush_backoff() == 1  # lone; g-1's backoff heap item is stale and skipped


def test_backoff_queue_releases_pods_in_expiry_order() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for name in ("a", "b"):
        add(queue, name)
    [a, b] = queue.pop(2)
    a.attempts = 3  # a has failed before: 4 s
    queue.add_unschedulable(a.uid)
    queue.add_unschedulable(b.uid)  # first failure: 1 s
    clock.advance(1)
    queue.flush_backoff()
    assert [e.key for e in queue.active()] == ["default/b"]
    clock.advance(3)
    queue.flush_backoff()
    assert queue.counts()[QueueName.BACKOFF] == 0


# -- activeQ order and pop -------------------------------------------------------------------------


def test_active_queue_pops_by_priority_then_by_time_queued() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    add(queue, "low-early", priority=1)
    clock.advance(1)
    add(queue, "high", priority=100)
    clock.advance(1)
    add(queue, "low-late", priority=1)
    add(queue, "low-late-too", priority=1)  # same time: queued order
    clock.advance(1)
    add(queue, "negative", priority=-5)
    popped = queue.pop(10)
    assert [e.pod.name for e in popped] == ["high", "low-early", "low-late", "low-late-too", "negative"]


def test_pop_hands_out_at_most_max_and_marks_in_flight() -> None:
    clock = FakeClock()
    queue = make_queue(clock, in_flight_timeout=30.0)
    for name in "abc":
        add(queue, name)
    first = queue.pop(2, holder="cycle-1", token=3)
    assert [e.pod.name for e in first] == ["a", "b"]
    assert all(e.attempts == 1 for e in first)
    flight = queue.in_flight("uid-a")
    assert flight is not None and flight.deadline == clock.now + 30.0 and flight.holder == "cycle-1"
    assert flight.token == 3
    assert queue.counts() == {
        QueueName.ACTIVE: 1,
        QueueName.BACKOFF: 0,
        QueueName.UNSCHEDULABLE: 0,
        QueueName.GATED: 0,
        QueueName.IN_FLIGHT: 2,
    }
    assert [e.pod.name for e in queue.pop(5)] == ["c"]
    assert queue.pop(5) == []
    assert queue.pop(0) == []


def test_pop_respects_a_byte_budget_but_always_hands_out_one_pod() -> None:
    queue = make_queue(FakeClock())
    for name in "abcd":
        queue.add(make_pod(name), b"x" * 100)
    assert [e.pod.name for e in queue.pop(10, max_bytes=250)] == ["a", "b"]
    assert [e.pod.name for e in queue.pop(10, max_bytes=10)] == ["c"]
    assert [e.pod.name for e in queue.pop(10, max_bytes=None)] == ["d"]


def test_add_is_idempotent_and_delete_forgets_a_pod_anywhere() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    assert add(queue, "a") is QueueName.ACTIVE
    assert add(queue, "a") is QueueName.ACTIVE
    assert len(queue) == 1
    add(queue, "b")
    add(queue, "gated", gates=("wait",))
    [a] = queue.pop(1)
    assert add(queue, "a") is QueueName.IN_FLIGHT  # known: left where it is
    assert queue.delete("uid-a") is QueueName.IN_FLIGHT
    assert queue.delete("uid-b") is QueueName.ACTIVE
    assert queue.delete("uid-gated") is QueueName.GATED
    assert queue.delete("uid-nothing") is None
    assert queue.uids() == set()
    assert queue.pop(10) == []  # stale heap items are skipped
    assert queue.add_unschedulable(a.uid) is None  # its outcome after the delete: nothing to do


def test_a_queue_sort_plugin_with_only_less_orders_the_active_queue() -> None:
    class ByName:
        name: ClassVar[str] = "ByName"

        def less(self, a: object, b: object) -> bool:
            return a.pod.name < b.pod.name  # type: ignore[attr-defined]

    queue = make_queue(FakeClock(), queue_sort=ByName())
    for name in ("c", "a", "b"):
        add(queue, name, priority=ord(name))
    assert [e.pod.name for e in queue.pop(3)] == ["a", "b", "c"]


def test_done_takes_a_reserved_pod_out_of_the_queue() -> None:
    queue = make_queue(FakeClock())
    add(queue, "a")
    [entry] = queue.pop(1)
    assert queue.done(entry.uid) is entry
    assert queue.where(entry.uid) is None
    assert queue.done(entry.uid) is None


# -- gates (PreEnqueue) ----------------------------------------------------------------------------


def test_gated_pods_wait_in_the_gated_set_until_an_update_removes_the_gates() -> None:
    clock = FakeClock()
    incoming: list[tuple[str, str]] = []
    queue = make_queue(clock, on_incoming=lambda q, e: incoming.append((str(q), e)))
    assert add(queue, "g", gates=("example.com/wait",)) is QueueName.GATED
    entry = queue.get("uid-g")
    assert entry is not None and entry.gated_by == "SchedulingGates"
    assert entry.gate_message == "waiting for scheduling gates: [example.com/wait]"
    assert queue.gate_message(make_pod("g", gates=("x", "y"))) == "waiting for scheduling gates: [x y]"
    assert queue.gate_message(make_pod("g")) == ""
    assert queue.pop(10) == []
    for kind in CLUSTER_EVENTS:
        queue.move_for_event(kind)
    clock.advance(10_000)
    queue.flush_unschedulable_leftover()
    assert queue.where("uid-g") is QueueName.GATED  # only an update lets it out
    assert incoming == []  # gated pods are not counted as incoming

    assert queue.update(make_pod("g", gates=("example.com/wait", "other")), b"{}") is QueueName.GATED
    assert queue.update(make_pod("g"), b'{"v":2}') is QueueName.ACTIVE
    [popped] = queue.pop(1)
    assert popped.manifest == b'{"v":2}'
    assert incoming == [("active", "PodUpdate")]


def test_no_pre_enqueue_plugins_means_no_gates() -> None:
    queue = make_queue(FakeClock(), pre_enqueue=())
    assert add(queue, "g", gates=("wait",)) is QueueName.ACTIVE


def test_update_resorts_requeues_and_reaches_pods_in_flight() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    add(queue, "a", priority=1)
    add(queue, "b", priority=2)
    assert queue.update(make_pod("a", priority=3), b"a3") is QueueName.ACTIVE
    assert [e.pod.name for e in queue.active()] == ["a", "b"]
    [a] = queue.pop(1)
    assert queue.update(make_pod("a", priority=4), b"a4") is QueueName.IN_FLIGHT
    assert a.manifest == b"a4"
    queue.add_unschedulable(a.uid, ["NodeAffinity"])
    assert queue.where(a.uid) is QueueName.UNSCHEDULABLE
    clock.advance(60)  # backoff over: an update may help it, straight to the activeQ
    assert queue.update(make_pod("a", priority=4), b"a5") is QueueName.ACTIVE
    assert queue.update(make_pod("unknown"), b"") is None
    assert queue.update(make_pod("a", gates=("g",)), b"a6") is QueueName.GATED


# -- failed attempts, events and QueueingHints -----------------------------------------------------


def event_may_help(kind: str, plugins: list[str]) -> bool:
    """Whether an event of ``kind`` whose objects are unknown (hints answer Queue) moves a pod
    ``plugins`` rejected, with the in-tree plugins' events."""
    entry = QueueEntry(pod=make_pod("p"), manifest=b"", timestamp=0.0, unschedulable_plugins=frozenset(plugins))
    return kind in CLUSTER_EVENTS and make_queue(FakeClock()).worth_requeuing(entry, ClusterChange(kind))


def test_which_events_help_which_plugins() -> None:
    assert event_may_help("node.added", ["NodeResourcesFit"])
    assert event_may_help("pod.finished", ["NodeResourcesFit"])
    assert event_may_help("pod.unreserved", ["GPUFit"])
    assert event_may_help("pod.deleted", ["NodePorts"])
    assert not event_may_help("pod.deleted", ["TaintToleration"])
    assert not event_may_help("pod.bound", ["NodeResourcesFit"])
    assert event_may_help("node.updated", ["NodeUnschedulable", "TaintToleration"])
    assert event_may_help("pod.deleted", ["TaintToleration", "GPUFit"])  # one plugin is enough
    assert event_may_help("pod.bound", ["SomeOutOfTreePlugin"])  # unknown plugin: every cluster event
    assert event_may_help("node.lost", [])  # no plugin: every cluster event
    assert not event_may_help("pod.accepted", [])  # bookkeeping, not a cluster change
    assert not event_may_help("pod.unschedulable", ["SomeOutOfTreePlugin"])


def test_an_unschedulable_pod_waits_for_an_event_that_may_help_it() -> None:
    clock = FakeClock()
    incoming: list[tuple[str, str]] = []
    queue = make_queue(clock, on_incoming=lambda q, e: incoming.append((str(q), e)))
    add(queue, "fit")
    add(queue, "taint")
    assert fail(queue, "fit", "NodeResourcesFit") is QueueName.UNSCHEDULABLE
    assert fail(queue, "taint", "TaintToleration") is QueueName.UNSCHEDULABLE
    assert queue.get("uid-fit").unschedulable_plugins == {"NodeResourcesFit"}  # type: ignore[union-attr]

    assert queue.move_for_event("pod.bound") == 0
    assert queue.move_for_event("pod.accepted") == 0
    # Within its backoff (1 s after the first attempt): the backoffQ.
    assert queue.move_for_event("pod.finished") == 1
    assert queue.where("uid-fit") is QueueName.BACKOFF
    assert queue.where("uid-taint") is QueueName.UNSCHEDULABLE
    # Backoff over: an event sends it straight to the activeQ.
    clock.advance(5)
    assert queue.move_for_event("node.updated") == 1
    assert queue.where("uid-taint") is QueueName.ACTIVE
    assert ("backoff", "AssignedPodUpdate") in incoming
    assert ("active", "NodeUpdate") in incoming
    assert incoming.count(("unschedulable", "ScheduleAttemptFailure")) == 2


def test_an_event_during_the_attempt_sends_the_failed_pod_to_backoff_not_unschedulable() -> None:
    """kube's moveRequestCycle / in-flight events: a pod whose attempt failed while a helpful
    event arrived is retried, since its attempt may not have seen the change."""
    clock = FakeClock()
    queue = make_queue(clock)
    for name in ("helped", "not-helped", "no-event"):
        add(queue, name)
    helped, not_helped = queue.pop(2)
    queue.move_for_event("node.added")
    [no_event] = queue.pop(1)  # popped after the event
    assert queue.add_unschedulable(helped.uid, ["NodeResourcesFit"]) is QueueName.BACKOFF
    assert queue.add_unschedulable(not_helped.uid, ["SchedulingGatesLikeButUnknown"]) is QueueName.BACKOFF
    assert queue.add_unschedulable(no_event.uid, ["NodeResourcesFit"]) is QueueName.UNSCHEDULABLE

    add(queue, "bound-only")
    [bound_only] = queue.pop(1)
    queue.move_for_event("pod.bound")  # helps no in-tree rejection
    assert queue.add_unschedulable(bound_only.uid, ["NodeAffinity"]) is QueueName.UNSCHEDULABLE


def test_leftover_unschedulable_pods_are_retried_after_the_max_duration() -> None:
    clock = FakeClock()
    queue = make_queue(clock, max_in_unschedulable=300.0)
    add(queue, "a")
    add(queue, "b")
    fail(queue, "a", "NodeAffinity")
    clock.advance(100)
    fail(queue, "b", "NodeAffinity")
    clock.advance(200)
    assert queue.flush_unschedulable_leftover() == 0  # a: exactly 300 s, not more
    clock.advance(0.5)
    assert queue.flush_unschedulable_leftover() == 1
    assert queue.where("uid-a") is QueueName.ACTIVE  # backoff long over
    assert queue.where("uid-b") is QueueName.UNSCHEDULABLE


def test_leftover_flush_respects_a_backoff_still_running() -> None:
    clock = FakeClock()
    queue = make_queue(clock, initial_backoff=10.0, max_backoff=100.0, max_in_unschedulable=5.0)
    add(queue, "a")
    fail(queue, "a", "NodeAffinity")
    clock.advance(6)
    assert queue.flush_unschedulable_leftover() == 1
    assert queue.where("uid-a") is QueueName.BACKOFF
    clock.advance(4)
    assert queue.flush_backoff() == 1


def test_an_outcome_for_a_pod_not_in_flight() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    # Popped before a restart, or handed back by the binder: the queue never saw its attempt, nor the
    # events during it; added as failed with its attempts, and retried after its backoff.
    where = queue.add_unschedulable("uid-x", ["NodeResourcesFit"], pod=make_pod("x"), manifest=b"{}", attempts=3)
    assert where is QueueName.BACKOFF
    entry = queue.get("uid-x")
    assert entry is not None and entry.attempts == 3 and entry.backoff_expiry == clock.now + 4.0
    # Already queued: nothing changes (kube's "already present" error).
    assert queue.add_unschedulable("uid-x", [], pod=make_pod("x"), manifest=b"{}") is None
    assert queue.where("uid-x") is QueueName.BACKOFF
    clock.advance(4)
    assert queue.flush_backoff() == 1
    # Unknown, and no pod to add.
    assert queue.add_unschedulable("uid-y", []) is None
    # A failed pod that got gated meanwhile stays gated.
    assert queue.add_unschedulable("uid-z", [], pod=make_pod("z", gates=("g",)), manifest=b"{}") is QueueName.GATED


# -- in flight -------------------------------------------------------------------------------------


def test_an_in_flight_pod_past_its_deadline_returns_to_the_active_queue() -> None:
    clock = FakeClock()
    queue = make_queue(clock, in_flight_timeout=30.0)
    add(queue, "a")
    add(queue, "b")
    [a] = queue.pop(1)
    clock.advance(10)
    [b] = queue.pop(1)
    clock.advance(19.9)
    assert queue.expire_in_flight() == []
    clock.advance(0.1)
    assert queue.expire_in_flight() == [a]
    assert queue.where("uid-a") is QueueName.ACTIVE and a.attempts == 1  # its attempt counted
    assert queue.where("uid-b") is QueueName.IN_FLIGHT
    [again] = queue.pop(1)
    assert again is a and a.attempts == 2

    clock.advance(100)
    expired = queue.take_expired_in_flight()
    assert {e.pod.name for e in expired} == {"a", "b"}
    assert queue.uids() == set()  # the caller decides: restore, or drop a pod no longer pending
    assert queue.restore(b) is QueueName.ACTIVE
    assert queue.restore(b) is None  # known by now: stays where it is
    assert queue.done(a.uid) is None  # a late outcome of a dropped pod


def test_a_new_cycle_takes_over_the_pods_its_predecessor_held() -> None:
    queue = make_queue(FakeClock())
    for name in "abc":
        add(queue, name)
    queue.pop(1, token=1)
    queue.pop(1, token=0)  # unfenced (tests, tools): never revoked
    queue.pop(1, token=2)
    assert [e.pod.name for e in queue.fence(2)] == ["a"]
    assert queue.where("uid-a") is QueueName.ACTIVE
    assert queue.where("uid-b") is QueueName.IN_FLIGHT
    assert queue.where("uid-c") is QueueName.IN_FLIGHT
    assert queue.fence(2) == []


# -- reading submissions ---------------------------------------------------------------------------

POD_YAML = b"""\
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  labels: {day: 2024-01-02}
spec:
  priority: 5
  containers:
  - name: c
    resources: {requests: {cpu: 500m}}
"""


def test_a_yaml_pod_becomes_its_json_with_uid_and_namespace() -> None:
    [sub] = read_submission(POD_YAML, source="kubus.pods.submit", max_manifest_bytes=65536)
    assert sub.pod.key == "default/web-1" and sub.pod.spec.priority == 5
    doc = codec.loads(sub.manifest)
    assert doc["metadata"]["namespace"] == "default"
    assert doc["metadata"]["uid"] == sub.pod.metadata.uid != ""
    assert doc["metadata"]["labels"] == {"day": "2024-01-02"}  # a date-looking value stays a string
    assert doc["kind"] == "Pod" and doc["apiVersion"] == "v1"
    [again] = read_submission(sub.manifest, source="x", max_manifest_bytes=65536)
    assert again == sub  # JSON in, the same pod out


def test_a_pod_list_gives_every_pod() -> None:
    data = codec.dumps(
        {
            "kind": "PodList",
            "items": [
                {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}},
                {"metadata": {"name": "b", "uid": "given"}, "spec": {"containers": [{"name": "c"}]}},
            ],
        }
    )
    subs = read_submission(data, source="s", max_manifest_bytes=65536)
    assert [s.pod.key for s in subs] == ["ns/a", "default/b"]
    assert subs[1].pod.metadata.uid == "given"


@pytest.mark.parametrize(
    ("data", "reason", "key", "fragment"),
    [
        (b"\xff\xfe\x00\x01garbage", "Invalid", "", "not UTF-8"),
        (b"{{{ not: [yaml", "Invalid", "", "invalid YAML"),
        (b"- 1\n- 2\n", "Invalid", "", "expected a Kubernetes object"),
        (
            b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            "WrongKind",
            "",
            'kind: "Deployment" is not supported',
        ),
        (
            b"kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
            "Invalid",
            "default/p",
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            b"kind: Pod\nmetadata: {name: p, namespace: n}\nspec: {containers: [{name: c}], "
            b"tolerations: [{key: k, operator: Maybe}]}\n",
            "Invalid",
            "n/p",
            "spec.tolerations[0].operator",
        ),
        (b"kind: Node\nmetadata: {name: n1}\n", "WrongKind", "", "a node is not submitted"),
        (b"", "Invalid", "", "no Pod"),
    ],
)
def test_bad_input_is_rejected_with_one_line(data: bytes, reason: str, key: str, fragment: str) -> None:
    with pytest.raises(Rejected) as caught:
        read_submission(data, source="kubus.pods.submit", max_manifest_bytes=65536)
    err = caught.value
    assert "\n" not in str(err) and fragment in str(err), str(err)
    assert (err.reason, err.key) == (reason, key)
    assert bool(err.uid) == bool(key)


def test_a_manifest_over_the_limit_is_rejected_as_too_large() -> None:
    big = POD_YAML.replace(b"  labels:", b"  annotations: {note: '" + b"x" * 5000 + b"'}\n  labels:")
    with pytest.raises(Rejected, match="more than the 4096 the queue accepts") as caught:
        read_submission(big, source="kubus.pods.submit", max_manifest_bytes=4096)
    assert caught.value.reason == "TooLarge" and caught.value.key == "default/web-1"


def test_several_bad_pods_are_reported_on_one_line() -> None:
    data = (
        b"kind: Pod\nmetadata: {name: a}\nspec: {}\n---\n"
        b"kind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c}], priority: high}\n"
    )
    with pytest.raises(Rejected) as caught:
        read_submission(data, source="s", max_manifest_bytes=65536)
    line = str(caught.value)
    assert "\n" not in line and "default/a" in line and "default/b" in line
    assert caught.value.key == "default/a"


def test_events_in_flight_are_counted_per_pod_in_constant_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    for name in "ab":
        add(queue, name)
    [a] = queue.pop(1)
    queue.move_for_event("pod.finished")  # while a is in flight, before b is popped
    queue.move_for_event("pod.accepted")  # not a cluster event: never counted
    [b] = queue.pop(1)
    queue.move_for_event("node.lost")
    seen_by_a = queue.events_in_flight(queue.in_flight(a.uid))  # type: ignore[arg-type]
    assert [c.kind for c in seen_by_a] == ["pod.finished", "node.lost"]
    assert [c.kind for c in queue.events_in_flight(queue.in_flight(b.uid))] == ["node.lost"]  # type: ignore[arg-type]
    # NodeResourcesFit is helped by pod.finished (seen by a), not by node.lost (all b saw).
    assert queue.add_unschedulable(a.uid, ["NodeResourcesFit"]) is QueueName.BACKOFF
    assert queue.add_unschedulable(b.uid, ["NodeResourcesFit"]) is QueueName.UNSCHEDULABLE
    assert queue.unschedulable_count == 1
    assert queue.move_for_event("pod.deleted") == 1
    assert queue.unschedulable_count == 0


def test_unschedulable_pods_are_counted_by_rejecting_plugin() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    add(queue, "a")
    add(queue, "b")
    assert fail(queue, "a", "NodeResourcesFit", "TaintToleration") is QueueName.UNSCHEDULABLE
    assert fail(queue, "b", "NodeResourcesFit") is QueueName.UNSCHEDULABLE
    assert queue.unschedulable_by_plugin() == {"NodeResourcesFit": 2, "TaintToleration": 1}
    b = next(uid for uid in queue.uids() if (entry := queue.get(uid)) is not None and entry.key == "default/b")
    queue.delete(b)
    assert queue.unschedulable_by_plugin() == {"NodeResourcesFit": 1, "TaintToleration": 1}


# -- the events the queue listens to ------------------------------------------------------------------


class _NoEnqueueExtensions:
    """A Filter plugin that says nothing of the events that may help it (no events_to_register)."""

    name = "Opaque"
    placement_sensitive = False

    def filter(self, state: object, pod: object, view: object, rows: object) -> object:
        raise NotImplementedError


def test_the_queue_listens_for_the_events_its_plugins_registered_and_every_node_event() -> None:
    from kubus.framework.config import default_config
    from kubus.plugins import in_tree_registry
    from kubus.queue.service import QueueService

    service = QueueService(None, default_config(in_tree_registry()))
    kinds = service.queues.event_kinds()
    assert "pod.running" not in kinds, "no kube plugin reads a pod's phase change"
    assert {"pod.bound", "pod.finished", "pod.deleted", "pod.unreserved"} <= set(kinds)
    assert {k for k in CLUSTER_EVENTS if k.startswith("node.")} <= set(kinds)
    # several nodes' changes in one event (the watcher's): read as the node events they carry;
    # so are several pods' binds (a binder's), but not several pods' acceptances (bookkeeping)
    assert {"nodes.changed", "pods.bound"} <= set(kinds)
    assert set(kinds) <= CLUSTER_EVENTS | {"nodes.changed", "pods.bound"}


def test_a_plugin_without_registered_events_makes_the_queue_listen_to_every_event() -> None:
    queue = make_queue(FakeClock(), plugins={"Opaque": _NoEnqueueExtensions()})
    assert queue.registered_kinds == {"*"}
    # kube's plugins: the score-only ones (no EnqueueExtensions) cannot reject a pod, so do not count
    assert make_queue(FakeClock()).registered_kinds < CLUSTER_EVENTS
