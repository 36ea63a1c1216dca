"""Wire messages round-trip, and garbage is a MessageError, never anything else."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubus.bus.messages import (
    BindRequest,
    ClusterEvent,
    MessageError,
    NodeAssignment,
    NodeChange,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodChange,
    PodDeletion,
    PopReply,
    PopRequest,
    QueuedPod,
    Rejection,
    ReservedPods,
    decode,
    encode,
)

SAMPLES = [
    PopRequest(64, 100, "cycle-a", 7),
    PopReply((QueuedPod("u1", "ns/p", b'{"kind": "Pod"}', 2), QueuedPod("u2", "ns/q", b"{}"))),
    Outcomes(
        (
            Outcome("u1", OutcomeKind.RESERVED, "n1", gpu_devices=(0, 3)),
            Outcome("u2", OutcomeKind.UNSCHEDULABLE, message="0/3 nodes are available", plugins=("NodeResourcesFit",)),
        )
    ),
    BindRequest(
        "u1", "ns/p", "default-scheduler", "n1", b'{"a": 1}', (1,), fencing_token=9, attempt=4, reserved_at=1.5e9
    ),
    NodeAssignment("u1", "ns/p", "n1", b"{}", ()),
    PodDeletion("ns", "p"),
    ReservedPods("profile-1", ({"pod_uid": "u1", "gpu_devices": [0, 3]}, {"pod_uid": "u2"})),
    ClusterEvent("node.added", "n1", "n1", 1.0, "Registered", "", NodeChange(3)),
    ClusterEvent("pod.finished", "ns/p", "n1", 2.0, data=PodChange("u1", 4, "default-scheduler", "Succeeded")),
    ClusterEvent("pod.rejected", "invalid/7", data=Rejection("kubus.pods.submit", 7)),
]


def test_the_wire_form_is_plain_json() -> None:
    """Fields in order, bytes as their UTF-8 text, tuples as lists, enums as their values,
    nested messages as objects."""
    wire = encode(BindRequest("u1", "ns/p", "default-scheduler", "n1", '{"é": 1}'.encode(), (1, 2), 9, 4, 1.5))
    assert wire == (
        b'{"uid":"u1","key":"ns/p","profile":"default-scheduler","node":"n1","manifest":"{\\"\xc3\xa9\\": 1}",'
        b'"gpu_devices":[1,2],"fencing_token":9,"attempt":4,"reserved_at":1.5,"victims":[]}'
    )
    outcome = encode(Outcomes((Outcome("u1", OutcomeKind.RESERVED, "n1", plugins=("A",)),)))
    assert outcome == (
        b'{"outcomes":[{"uid":"u1","kind":"reserved","node":"n1","message":"","plugins":["A"],'
        b'"gpu_devices":[],"attempt":0}]}'
    )
    with pytest.raises(TypeError):
        encode(PodDeletion("ns", object()))  # type: ignore[arg-type]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: object) -> None:
    assert decode(type(message), encode(message)) == message


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\xff\xfe", "PopRequest: not JSON"),
        (b"[1, 2]", "PopRequest: expected an object, got list"),
        (b'{"max_pods": "many"}', "PopRequest.max_pods: expected int"),
        (b'{"max_pods": true}', "PopRequest.max_pods: expected int"),
        (b'{"bogus": 1}', "PopRequest: unknown field 'bogus'"),
    ],
)
def test_malformed_messages_say_what_is_wrong(data: bytes, error: str) -> None:
    with pytest.raises(MessageError, match="^" + error.replace("(", r"\(").replace(")", r"\)")):
        decode(PopRequest, data)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'{"kind": "pod.bound", "name": "ns/p"}', r"ClusterEvent.data: expected an object \(PodChange\)"),
        (b'{"kind": "pod.bound", "name": "ns/p", "data": {}}', "ClusterEvent.data: missing field 'uid'"),
        (b'{"kind": "node.lost", "name": "n", "data": {"uid": "u"}}', "ClusterEvent.data: unknown field 'uid'"),
        (b'{"kind": "pod.eaten", "name": "ns/p", "data": {}}', "ClusterEvent.kind: unknown kind 'pod.eaten'"),
        (b'{"kind": 3, "name": "ns/p", "data": {}}', "ClusterEvent.kind: expected str"),
    ],
)
def test_an_event_carries_the_payload_of_its_kind(data: bytes, error: str) -> None:
    with pytest.raises(MessageError, match="^" + error):
        decode(ClusterEvent, data)


def test_missing_required_field_and_bad_enum() -> None:
    with pytest.raises(MessageError, match="Outcome: missing field 'kind'"):
        decode(Outcome, b'{"uid": "u"}')
    with pytest.raises(MessageError, match=r"Outcomes.outcomes\[0\].kind: unknown value 'lost'"):
        decode(Outcomes, b'{"outcomes": [{"uid": "u", "kind": "lost"}]}')


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_garbage_is_only_ever_a_message_error(data: bytes) -> None:
    for cls in (PopRequest, PopReply, Outcomes, BindRequest, NodeAssignment, PodDeletion, ClusterEvent):
        with contextlib.suppress(MessageError):
            decode(cls, data)


def test_many_nodes_changes_are_announced_in_a_few_events_in_order() -> None:
    """`announcements.node_changes`: a list of nodes' changes in events of at most
    NODE_CHANGES_PER_EVENT, each its own announcement (subject and id), read back in order."""
    from kubus.bus import EventKind, announcements
    from kubus.bus.messages import NodeChanged, NodeChanges

    per = announcements.NODE_CHANGES_PER_EVENT
    changes = [(EventKind.NODE_ADDED, f"n{i}", 1) for i in range(2 * per + 1)]
    changes[per] = (EventKind.NODE_DELETED, f"n{per}", 0)
    events = announcements.node_changes(changes, at=5.0)
    assert [len(decode(ClusterEvent, e.payload).data.changes) for e in events] == [per, per, 1]  # type: ignore[union-attr]
    assert len({e.subject for e in events}) == len({e.msg_id for e in events}) == 3
    read: list[NodeChanged] = []
    for e in events:
        event = decode(ClusterEvent, e.payload)
        assert e.subject.startswith("kubus.events.nodes.changed.") and event.kind == "nodes.changed"
        assert isinstance(event.data, NodeChanges) and event.at == 5.0
        read += event.data.changes
    assert read == [NodeChanged(k.value, name, generation) for k, name, generation in changes]
    assert announcements.node_changes([], at=5.0) == []


def test_many_pods_events_are_announced_in_a_few_events_read_back_as_each_pods_own() -> None:
    """`announcements.pod_batch`: pods' events of one kind in ``pods.*`` events of at most
    POD_BATCH_SIZE pods, each read back (`expand`) as the ``pod.*`` events they stand for, in
    order. The id is the pods' digest: the same pods at the same attempts, the same id."""
    from kubus.bus import EventKind, announcements, with_batches
    from kubus.bus.messages import BatchedPod, expand

    per = announcements.POD_BATCH_SIZE
    pods = [BatchedPod(f"default/p{i}", f"u{i}", f"n{i % 3}", i % 4, "default-scheduler") for i in range(per + 2)]
    events = announcements.pod_batch(EventKind.PODS_BOUND, pods, at=7.0)
    assert len(events) == 2 and len({e.subject for e in events}) == len({e.msg_id for e in events}) == 2
    read: list[ClusterEvent] = []
    for e in events:
        assert e.subject.startswith("kubus.events.pods.bound.") and e.msg_id.startswith("pods.bound/")
        read += expand(decode(ClusterEvent, e.payload))
    assert read == [ClusterEvent("pod.bound", p.name, p.node, 7.0, data=PodChange(p.uid, p.attempt, p.profile))
                    for p in pods]  # fmt: skip
    # announced again (a redelivered group): the same ids, stored once; other pods or attempts: others
    assert [e.msg_id for e in announcements.pod_batch(EventKind.PODS_BOUND, pods, at=9.0)] == [e.msg_id for e in events]
    [one] = announcements.pod_batch(EventKind.PODS_BOUND, pods[:1], at=7.0)
    [retried] = announcements.pod_batch(EventKind.PODS_BOUND, [BatchedPod("default/p0", "u0", attempt=1)], at=7.0)
    [accepted] = announcements.pod_batch(EventKind.PODS_ACCEPTED, pods[:1], at=7.0)
    assert len({one.msg_id, retried.msg_id, accepted.msg_id}) == 3
    assert [e.kind for e in expand(decode(ClusterEvent, accepted.payload))] == ["pod.accepted"]
    assert announcements.pod_batch(EventKind.PODS_BOUND, [], at=7.0) == []
    # any other event stands for itself; a consumer of pod.bound subscribes to pods.bound too
    node = ClusterEvent("node.added", "n1", "n1", 1.0, data=NodeChange(1))
    assert expand(node) == [node]
    assert with_batches({"pod.bound", "node.added"}) == {"pod.bound", "pods.bound", "node.added"}
    assert with_batches({"pod.deleted"}) == {"pod.deleted"}
