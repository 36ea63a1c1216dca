"""QueueingHints: each in-tree plugin's events and hint functions (kube's test tables where they
exist), and the queue moving unschedulable pods only on what their rejecting plugins' hints say."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from builders import make_node, make_pod

from kubus.api.objects import (
    Affinity,
    GPUDevice,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
)
from kubus.api.objects import NodeAffinity as NodeAffinitySpec
from kubus.bus import POD_BATCHES, EventKind
from kubus.core import codec
from kubus.framework import ClusterEventWithHint, EnqueueExtensions, QueueingHint
from kubus.framework.queueing_hints import ALL_EVENTS, WILDCARD, EventObject, QueueingHintFn
from kubus.plugins import (
    IN_TREE,
    GPUFit,
    NodeAffinity,
    NodeName,
    NodePorts,
    NodeResourcesFit,
    NodeUnschedulable,
    SchedulingGates,
    TaintToleration,
)
from kubus.queue import QueueName, SchedulingQueue
from kubus.queue.queueing import ClusterChange

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
GI = 1 << 30


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    allocatable: dict[str, int] | None = None,
    gpus: tuple[GPUDevice, ...] = (),
) -> Node:
    return make_node(
        name,
        labels=labels,
        unschedulable=unschedulable,
        taints=taints,
        allocatable=allocatable if allocatable is not None else {"cpu": 4000, "pods": 110},
        capacity={},
        gpu_devices=gpus,
    )


def pod(
    name: str = "p",
    *,
    node_selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    node_name: str = "",
    requests: dict[str, int] | None = None,
    host_ports: tuple[int, ...] = (),
    annotations: dict[str, str] | None = None,
) -> Pod:
    return make_pod(
        name,
        uid=f"uid-{name}",
        annotations=annotations,
        requests=requests or {},
        host_ports=host_ports,
        node_selector=node_selector,
        tolerations=tolerations,
        node_name=node_name,
    )


# -- what every plugin registers -----------------------------------------------------------------


def test_the_event_kinds_are_the_bus_event_kinds() -> None:
    # Bookkeeping events move no pod; nodes.changed carries node events, and pods.* pod events
    # (POD_BATCHES), each read as its own.
    batches = {"nodes.changed", *POD_BATCHES}
    kinds = {k.value for k in EventKind} - {"pod.accepted", "pod.rejected", "pod.unschedulable"} - batches
    assert kinds == ALL_EVENTS


EXPECTED = {
    "Coscheduling": {
        "node.added": False,
        "node.updated": False,
        "pod.finished": False,
        "pod.deleted": False,
        "pod.unreserved": False,
    },
    "NodeAffinity": {"node.added": True, "node.updated": True},
    "TaintToleration": {"node.added": True, "node.updated": True},
    "NodeUnschedulable": {"node.added": True, "node.updated": True},
    "NodeName": {"node.added": True},
    "NodePorts": {"node.added": False, "pod.finished": True, "pod.deleted": True, "pod.unreserved": True},
    "NodeResourcesFit": {
        "node.added": True,
        "node.updated": True,
        "pod.finished": True,
        "pod.deleted": True,
        "pod.unreserved": True,
    },
    "GPUFit": {
        "node.added": True,
        "node.updated": True,
        "pod.finished": True,
        "pod.deleted": True,
        "pod.unreserved": True,
    },
    "SchedulingGates": {},
    "InterPodAffinity": {
        "pod.bound": True,
        "pod.finished": True,
        "pod.deleted": True,
        "pod.unreserved": True,
        "node.added": True,
        "node.updated": True,
    },
    "PodTopologySpread": {
        "pod.bound": True,
        "pod.finished": True,
        "pod.deleted": True,
        "pod.unreserved": True,
        "node.added": True,
        "node.updated": True,
        "node.deleted": True,
        "node.lost": True,
    },
}
"""Plugin -> event kind -> whether a hint function decides (False: always Queue)."""


def test_each_filtering_plugin_registers_its_events_and_hints() -> None:
    registered = {}
    for cls in IN_TREE:
        plugin = cls()
        if isinstance(plugin, EnqueueExtensions):
            events = plugin.events_to_register()
            registered[cls.name] = {e.kind: e.hint is not None for e in events}
            assert all(e.kind in ALL_EVENTS for e in events)
    assert registered == EXPECTED


# -- NodeAffinity (kube's TestIsSchedulableAfterNodeChange) --------------------------------------------

ENFORCED = SimpleNamespace(
    added_affinity=NodeAffinitySpec(
        required=NodeSelector(
            (NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("zone", SelectorOperator.IN, ("foo",)),)),)
        )
    )
)


@pytest.mark.parametrize(
    ("args", "old", "new", "expected"),
    [
        pytest.param(None, None, "not-a-node", Q, id="backoff-wrong-new-object"),
        pytest.param(None, "not-a-node", node(labels={"foo": "bar"}), Q, id="wrong-old-object-is-an-add"),
        pytest.param(None, None, node(labels={"foo": "fuz"}), SKIP, id="skip-queue-on-add"),
        pytest.param(None, None, node(labels={"foo": "bar"}), Q, id="queue-on-add"),
        pytest.param(
            None, node(labels={"foo": "bar"}), node(labels={"foo": "bar", "aaa": "bbb"}), SKIP,
            id="skip-unrelated-changes-on-labels",
        ),
        pytest.param(
            None, node(labels={"foo": "bar"}), node(labels={"foo": "fuz"}), SKIP,
            id="skip-labels-changes-on-node-from-suitable-to-unsuitable",
        ),
        pytest.param(
            None, node(labels={"foo": "fuz"}), node(labels={"foo": "bar"}), Q,
            id="queue-on-labels-change-makes-pod-schedulable",
        ),
        pytest.param(
            ENFORCED, None, node(labels={"foo": "bar"}), SKIP, id="skip-queue-on-add-scheduler-enforced-node-affinity"
        ),
        pytest.param(
            ENFORCED, None, node(labels={"foo": "bar", "zone": "foo"}), Q,
            id="queue-on-add-scheduler-enforced-node-affinity",
        ),
    ],
)  # fmt: skip
def test_node_affinity_hint(args: Any, old: Any, new: Any, expected: QueueingHint) -> None:
    hint = NodeAffinity(args).is_schedulable_after_node_change
    assert hint(pod(node_selector={"foo": "bar"}), old, new) is expected


def test_node_affinity_hint_checks_required_affinity_terms() -> None:
    term = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("gpu", SelectorOperator.EXISTS),))
    base = pod()
    affine = Pod(
        base.metadata,
        PodSpec(
            containers=base.spec.containers,
            affinity=Affinity(node_affinity=NodeAffinitySpec(required=NodeSelector((term,)))),
        ),
    )
    hint = NodeAffinity().is_schedulable_after_node_change
    assert hint(affine, node(), node(labels={"gpu": "a100"})) is Q
    assert hint(affine, node(), node(labels={"cpu": "x"})) is SKIP


# -- TaintToleration ---------------------------------------------------------------------------------

HARD = Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE)
SOFT = Taint("dedicated", "gpu", TaintEffect.PREFER_NO_SCHEDULE)
TOLERATES_HARD = (Toleration(key="dedicated", value="gpu", effect=TaintEffect.NO_SCHEDULE),)


@pytest.mark.parametrize(
    ("tolerations", "old", "new", "expected"),
    [
        pytest.param((), None, "not-a-node", Q, id="backoff-wrong-new-object"),
        pytest.param((), None, node(taints=(HARD,)), SKIP, id="added-node-untolerated"),
        pytest.param(TOLERATES_HARD, None, node(taints=(HARD,)), Q, id="added-node-tolerated"),
        pytest.param((), None, node(taints=(SOFT,)), Q, id="prefer-no-schedule-does-not-reject"),
        pytest.param((), node(taints=(HARD,)), node(), Q, id="untolerated-taint-removed"),
        pytest.param((), node(taints=(HARD,)), node(taints=(HARD, SOFT)), SKIP, id="still-untolerated"),
        pytest.param(TOLERATES_HARD, node(taints=(HARD,)), node(), SKIP, id="was-tolerated-already"),
        pytest.param(
            (), node(taints=(HARD,)), node(taints=(Taint("other", "", TaintEffect.NO_EXECUTE),)), SKIP,
            id="one-untolerated-taint-for-another",
        ),
    ],
)  # fmt: skip
def test_taint_toleration_hint(tolerations: tuple[Toleration, ...], old: Any, new: Any, expected: QueueingHint) -> None:
    hint = TaintToleration().is_schedulable_after_node_change
    assert hint(pod(tolerations=tolerations), old, new) is expected


# -- NodeUnschedulable (kube's TestIsSchedulableAfterNodeChange) -------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, "not-a-node", Q, id="backoff-wrong-new-object"),
        pytest.param(None, node(unschedulable=True), SKIP, id="skip-queue-on-unschedulable-node-added"),
        pytest.param(None, node(), Q, id="queue-on-schedulable-node-added"),
        pytest.param(node(), node(taints=(HARD,)), SKIP, id="skip-unrelated-change"),
        pytest.param(node(unschedulable=True), node(), Q, id="queue-on-unschedulable-field-change"),
        pytest.param(node(), node(unschedulable=True), SKIP, id="skip-cordoned"),
    ],
)
def test_node_unschedulable_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    assert NodeUnschedulable().is_schedulable_after_node_change(pod(), old, new) is expected


# -- NodeName (kube's TestIsSchedulableAfterNodeAdd) -----------------------------------------------------


@pytest.mark.parametrize(
    ("node_name", "new", "expected"),
    [
        pytest.param("foo", "not-a-node", Q, id="backoff-wrong-new-object"),
        pytest.param("foo", node("bar"), SKIP, id="skip-queue-on-unmatched-node"),
        pytest.param("foo", node("foo"), Q, id="queue-on-matched-node"),
        pytest.param("", node("bar"), Q, id="queue-when-the-pod-names-no-node"),
    ],
)
def test_node_name_hint(node_name: str, new: Any, expected: QueueingHint) -> None:
    assert NodeName().is_schedulable_after_node_add(pod(node_name=node_name), None, new) is expected


# -- NodePorts (kube's TestNodePortsIsSchedulableAfterPodDeleted) -------------------------------------------


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        pytest.param("not-a-pod", Q, id="backoff-wrong-old-object"),
        pytest.param(pod("d", host_ports=(8080,)), SKIP, id="skip-queue-on-unscheduled"),
        pytest.param(pod("d", node_name="n1"), SKIP, id="skip-queue-on-non-hostport"),
        pytest.param(pod("d", node_name="n1", host_ports=(8081,)), SKIP, id="skip-queue-on-unrelated-hostport"),
        pytest.param(pod("d", node_name="n1", host_ports=(8080,)), Q, id="queue-on-released-hostport"),
    ],
)
def test_node_ports_hint(deleted: Any, expected: QueueingHint) -> None:
    hint = NodePorts().is_schedulable_after_pod_deleted
    assert hint(pod(host_ports=(8080,)), deleted, None) is expected


# -- NodeResourcesFit (kube's TestIsSchedulableAfterNodeChange, TestIsSchedulableAfterPodEvent) -------------

CPU4 = {"cpu": 4000}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, "not-a-node", Q, id="backoff-wrong-new-object"),
        pytest.param(None, node(allocatable={"cpu": 6000, "pods": 110}), Q, id="queue-on-node-add"),
        pytest.param(
            None, node(allocatable={"cpu": 1000, "pods": 110}), SKIP, id="skip-queue-on-node-add-insufficient-cpu"
        ),
        pytest.param(None, node(allocatable={"cpu": 6000}), SKIP, id="skip-queue-on-node-add-no-pod-room"),
        pytest.param(
            node(allocatable={"cpu": 6000, "pods": 110}), node(allocatable={"cpu": 1000, "pods": 110}), SKIP,
            id="skip-queue-on-node-changes-from-suitable-to-unsuitable",
        ),
        pytest.param(
            node(allocatable={"cpu": 1000, "pods": 110}), node(allocatable={"cpu": 6000, "pods": 110}), Q,
            id="queue-on-node-changes-from-unsuitable-to-suitable",
        ),
        pytest.param(
            node(allocatable={"cpu": 6000, "pods": 110}),
            node(labels={"a": "b"}, allocatable={"cpu": 6000, "pods": 110}), SKIP,
            id="skip-queue-on-node-unrelated-changes",
        ),
        pytest.param(
            node(allocatable={"cpu": 6000, "memory": GI, "pods": 110}),
            node(allocatable={"cpu": 6000, "memory": 2 * GI, "pods": 110}), SKIP,
            id="skip-queue-on-unrequested-resource-increase",
        ),
        pytest.param(
            node(allocatable={"cpu": 6000, "pods": 10}), node(allocatable={"cpu": 6000, "pods": 11}), Q,
            id="queue-on-allowed-pod-number-increase",
        ),
    ],
)  # fmt: skip
def test_node_resources_fit_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    hint = NodeResourcesFit().is_schedulable_after_node_change
    assert hint(pod(requests=CPU4), old, new) is expected


def test_node_resources_fit_ignores_ignored_resources_when_fitting() -> None:
    args = SimpleNamespace(ignored_resources=["example.com/foo"], ignored_resource_groups=None, scoring_strategy=None)
    wants = pod(requests={"cpu": 1000, "example.com/foo": 1})
    assert NodeResourcesFit(args).is_schedulable_after_node_change(wants, None, node()) is Q
    assert NodeResourcesFit().is_schedulable_after_node_change(wants, None, node()) is SKIP


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        pytest.param("not-a-pod", Q, id="backoff-wrong-old-object"),
        pytest.param(None, Q, id="unknown-pod"),
        pytest.param(pod("d", node_name="n1", requests={"cpu": 1}), Q, id="queue-on-deleted"),
        pytest.param(pod("d", requests={"cpu": 1}), SKIP, id="skip-queue-on-unscheduled-pod-deleted"),
    ],
)
def test_node_resources_fit_pod_hint(deleted: Any, expected: QueueingHint) -> None:
    hint = NodeResourcesFit().is_schedulable_after_pod_event
    assert hint(pod(requests=CPU4), deleted, None) is expected


# -- GPUFit ------------------------------------------------------------------------------------------

A100 = GPUDevice(0, "u0", "A100", 80 * GI)
A100_SICK = GPUDevice(0, "u0", "A100", 80 * GI, healthy=False)
T4 = GPUDevice(1, "u1", "T4", 16 * GI)
WHOLE_A100 = {"kubus.io/gpu-model": "A100"}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, "not-a-node", Q, id="unknown-node"),
        pytest.param(None, node(gpus=(A100,)), Q, id="added-with-a-fitting-gpu"),
        pytest.param(None, node(gpus=(T4,)), SKIP, id="added-with-another-model"),
        pytest.param(None, node(), SKIP, id="added-without-gpus"),
        pytest.param(node(gpus=(A100_SICK,)), node(gpus=(A100,)), Q, id="gpu-healthy-again"),
        pytest.param(node(gpus=(A100,)), node(labels={"a": "b"}, gpus=(A100,)), SKIP, id="unrelated-change"),
        pytest.param(node(gpus=(A100,)), node(gpus=(A100_SICK,)), SKIP, id="gpu-unhealthy"),
        pytest.param(node(gpus=(T4,)), node(gpus=(T4, GPUDevice(2, "u2", "A100", 80 * GI))), Q, id="gpu-added"),
    ],
)
def test_gpu_fit_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    wants = pod(requests={"nvidia.com/gpu": 1}, annotations=WHOLE_A100)
    assert GPUFit().is_schedulable_after_node_change(wants, old, new) is expected


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        pytest.param(None, Q, id="unknown-pod"),
        pytest.param(pod("d", node_name="n1", requests={"nvidia.com/gpu": 1}), Q, id="gpu-pod-left"),
        pytest.param(pod("d", node_name="n1", requests={"cpu": 1}), SKIP, id="pod-without-gpus-left"),
        pytest.param(pod("d", requests={"nvidia.com/gpu": 1}), SKIP, id="unscheduled-pod-deleted"),
        pytest.param(
            pod("d", node_name="n1", annotations={"kubus.io/gpu-count": "x"}), Q, id="unreadable-gpu-annotations"
        ),
    ],
)
def test_gpu_fit_pod_hint(deleted: Any, expected: QueueingHint) -> None:
    wants = pod(requests={"nvidia.com/gpu": 1})
    assert GPUFit().is_schedulable_after_pod_event(wants, deleted, None) is expected


def test_scheduling_gates_registers_no_event() -> None:
    assert SchedulingGates().events_to_register() == ()


# -- the queue's move logic -------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Hinted:
    """A plugin whose hint answers what ``answers[kind]`` says, counting its calls."""

    name: ClassVar[str] = "Hinted"

    def __init__(self, answers: dict[str, QueueingHint | Exception], kinds: Sequence[str] = ()) -> None:
        self.answers = answers
        self.kinds = tuple(kinds) or tuple(answers)
        self.calls: list[tuple[str, EventObject, EventObject]] = []

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return tuple(ClusterEventWithHint(kind, self._hint_for(kind)) for kind in self.kinds)

    def _hint_for(self, kind: str) -> QueueingHintFn:
        def hint(pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
            self.calls.append((kind, old, new))
            answer = self.answers[kind]
            if isinstance(answer, Exception):
                raise answer
            return answer

        return hint


class Silent:
    """A plugin that is not an EnqueueExtensions: every event moves its pods."""

    name: ClassVar[str] = "Silent"


class Unhelpable:
    name: ClassVar[str] = "Unhelpable"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return ()


class Everything:
    name: ClassVar[str] = "Everything"

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        return (ClusterEventWithHint(WILDCARD),)


def queue_with(*plugins: Any, **kwargs: Any) -> tuple[SchedulingQueue, FakeClock]:
    clock = FakeClock()
    named = {p.name: p for p in plugins}
    return SchedulingQueue(clock=clock, plugins=named, **kwargs), clock


def reject(queue: SchedulingQueue, name: str, *plugins: str, the_pod: Pod | None = None) -> str:
    p = the_pod or pod(name)
    queue.add(p, codec.dumps({"name": name}))
    [entry] = queue.pop(1)
    assert queue.add_unschedulable(entry.uid, plugins) is QueueName.UNSCHEDULABLE
    return entry.uid


def test_a_hint_decides_whether_an_event_moves_the_pod() -> None:
    hinted = Hinted({"node.updated": SKIP, "node.added": Q})
    observed: list[tuple[str, str, str]] = []
    queue, clock = queue_with(hinted, on_hint=lambda p, e, h, s: observed.append((p, e, h)))
    uid = reject(queue, "a", "Hinted")
    old, new = node(labels={"x": "1"}), node(labels={"x": "2"})

    assert queue.move_for_event("node.updated", old, new) == 0  # QueueSkip: stays
    assert queue.where(uid) is QueueName.UNSCHEDULABLE
    assert hinted.calls == [("node.updated", old, new)]
    assert queue.move_for_event("pod.deleted") == 0  # not registered: no hint asked
    assert queue.move_for_event("pod.accepted") == 0  # bookkeeping
    assert len(hinted.calls) == 1

    clock.now += 60  # past its backoff: straight to the activeQ
    assert queue.move_for_event("node.added", None, new) == 1
    assert queue.where(uid) is QueueName.ACTIVE
    assert observed == [("Hinted", "NodeUpdate", "QueueSkip"), ("Hinted", "NodeAdd", "Queue")]


def test_a_hint_that_raises_counts_as_queue_and_is_labelled_error() -> None:
    observed: list[str] = []
    queue, _ = queue_with(Hinted({"node.added": RuntimeError("boom")}), on_hint=lambda p, e, h, s: observed.append(h))
    uid = reject(queue, "a", "Hinted")
    assert queue.move_for_event("node.added", None, node()) == 1
    assert queue.where(uid) is QueueName.BACKOFF  # still backing off
    assert observed == ["Error"]


def test_one_rejecting_plugin_saying_queue_is_enough() -> None:
    skip, yes = Hinted({"node.added": SKIP}), Hinted({"node.added": Q})
    yes.name = "Yes"  # type: ignore[misc]
    queue, _ = queue_with(skip, yes)
    queue._registered["Yes"] = tuple(yes.events_to_register())  # the same class under two names
    reject(queue, "a", "Hinted", "Yes")
    reject(queue, "b", "Hinted")
    assert queue.move_for_event("node.added", None, node()) == 1
    assert queue.where("uid-b") is QueueName.UNSCHEDULABLE


def test_plugins_without_events_unknown_plugins_and_no_plugin_move_on_every_event() -> None:
    queue, _ = queue_with(Silent(), Unhelpable(), Everything())
    reject(queue, "silent", "Silent")
    reject(queue, "unknown", "NotInThisProfile")
    reject(queue, "never", "Unhelpable")
    reject(queue, "every", "Everything")
    assert queue.move_for_event("pod.bound") == 4 - 1
    assert queue.where("uid-never") is QueueName.UNSCHEDULABLE  # registered for nothing
    assert queue.move_for_event("node.lost") == 0
    clock_far = queue.clock() + 10_000
    queue.clock = lambda: clock_far
    assert queue.flush_unschedulable_leftover() == 1  # only the timeout frees it


def test_in_flight_events_are_kept_with_their_objects_for_the_hints() -> None:
    """kube's in-flight events: a pod that fails after events arrived runs its plugins' hints on
    them, with their objects."""
    queue, _ = queue_with(NodeAffinity())
    picky = pod("picky", node_selector={"zone": "a"})
    for p in (picky, pod("other", node_selector={"zone": "b"})):
        queue.add(p, b"{}")
    a, b = queue.pop(2)
    queue.move_for_event("node.updated", node(labels={"zone": "x"}), node(labels={"zone": "a"}))
    assert queue.add_unschedulable(a.uid, ["NodeAffinity"]) is QueueName.BACKOFF  # the change helps it
    assert queue.add_unschedulable(b.uid, ["NodeAffinity"]) is QueueName.UNSCHEDULABLE  # not this one
    assert queue._recent == []  # nothing in flight: nothing kept


def test_in_flight_events_are_pruned_past_the_oldest_pod_in_flight() -> None:
    queue, _ = queue_with(Hinted({"node.added": SKIP}))
    queue.move_for_event("node.added")  # nothing in flight: not kept
    assert queue._recent == []
    for name in ("old", "young"):
        queue.add(pod(name), b"{}")
    [old] = queue.pop(1)
    for _ in range(10):
        queue.move_for_event("node.added")
    [young] = queue.pop(1)
    assert queue.done(old.uid) is not None
    for _ in range(200):
        queue.move_for_event("node.added")
    since = queue.in_flight(young.uid).since  # type: ignore[union-attr]
    assert all(number > since for number, _ in queue._recent)  # the 10 only `old` saw are gone
    assert len(queue.events_in_flight(queue.in_flight(young.uid))) == 200  # type: ignore[arg-type]


def test_hinted_kinds_name_the_events_worth_reading() -> None:
    queue = SchedulingQueue()  # the in-tree plugins
    assert queue.hinted_kinds == {
        "node.added",
        "node.updated",
        "node.deleted",
        "node.lost",
        "pod.bound",
        "pod.finished",
        "pod.deleted",
        "pod.unreserved",
    }
    assert SchedulingQueue(plugins={"Silent": Silent()}).hinted_kinds == frozenset()


def test_the_default_queue_uses_the_in_tree_hints() -> None:
    queue = SchedulingQueue(clock=FakeClock())
    uid = reject(queue, "picky", "NodeAffinity", the_pod=pod("picky", node_selector={"zone": "a"}))
    assert queue.move_for_event("node.updated", node(labels={"zone": "b"}), node(labels={"zone": "c"})) == 0
    assert queue.move_for_event("node.updated", node(labels={"zone": "b"}), node(labels={"zone": "a"})) == 1
    assert queue.where(uid) is QueueName.BACKOFF
    assert ClusterChange("node.added") == ClusterChange("node.added", None, None)  # objects unknown
