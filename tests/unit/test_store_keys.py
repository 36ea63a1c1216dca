"""kubus.store without a server: key layout, escaping, hash slots, record encodings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.synthetic import make_nodes, make_pods
from kubus.core import codec
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.store import (
    EventType,
    Keys,
    NodeRecord,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
    node_from_record,
    node_info_of,
)
from kubus.store.keys import PHASES, escape, hash_slot_tag, unescape
from kubus.store.records import UNREACHABLE_TAINT_KEY, ordered_requests
from kubus_reference.gpu_fit import pick_gpu_devices

KEYS = Keys()


def _slot(key: str) -> int:
    return key_slot(key.encode())


@given(st.text(min_size=1, max_size=40))
def test_escape_round_trips_and_never_leaves_separators(name: str) -> None:
    text = escape(name)
    assert unescape(text) == name
    assert not set(text) & set("{}:*?[] \n")


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_distinct_names_give_distinct_keys(a: str, b: str) -> None:
    if a != b:
        assert KEYS.node_info(a) != KEYS.node_info(b)
        assert KEYS.pod_record(a) != KEYS.pod_record(b)


@pytest.mark.parametrize("name", ["n1", "gpu-node.example.com", "a{b}c", "}{", "x:y", "ünï", "with space", "%41"])
def test_every_node_key_is_in_one_slot(name: str) -> None:
    keys = KEYS.node_keys(name)
    assert len({hash_slot_tag(k) for k in keys}) == 1
    assert len({_slot(k) for k in keys}) == 1
    assert KEYS.node_of_info_key(KEYS.node_info(name)) == name


@pytest.mark.parametrize("uid", ["6f1c-uid", "a{b}", "u:1"])
def test_pod_and_lease_keys_share_their_slot(uid: str) -> None:
    assert _slot(KEYS.pod_record(uid)) == _slot(KEYS.pod_events(uid))
    assert KEYS.pod_of_record_key(KEYS.pod_record(uid)) == uid
    assert _slot(KEYS.lease_holder(uid)) == _slot(KEYS.lease_fence(uid))


def test_indexes_share_one_slot_apart_from_records() -> None:
    index_keys = [KEYS.nodes_index(), KEYS.pod_keys_index(), *KEYS.phase_indexes(), KEYS.pending_index("a{b}")]
    assert len({_slot(k) for k in index_keys}) == 1
    assert len(KEYS.phase_indexes()) == len(PHASES) == len(PodPhase)
    assert [str(p) for p in PodPhase] == list(PHASES)
    assert KEYS.profile_of_pending_index(KEYS.pending_index("my:profile")) == "my:profile"


def test_prefix_separates_and_is_validated() -> None:
    assert Keys("other").node_info("n") != KEYS.node_info("n")
    for bad in ("", "a{b", "x}", "k*", "a?"):
        with pytest.raises(ValueError):
            Keys(bad)


def test_node_record_round_trips_a_synthetic_gpu_cluster() -> None:
    for node in make_nodes(40, seed=5, gpu_fraction=0.5):
        record = NodeRecord.of(node)
        fields = {"record": record.encode_static(), "generation": b"3", "heartbeat": b"12.5"}
        back = NodeRecord.from_hash(fields)
        assert back.to_node() == node
        assert node_from_record(back) == node
        assert (back.generation, back.heartbeat, back.unreachable) == (3, 12.5, False)


def test_unreachable_node_gets_kube_taints() -> None:
    node = parse_node({"kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    record = NodeRecord.of(node)
    lost = NodeRecord(**{f: getattr(record, f) for f in record.__slots__ if f != "unreachable"}, unreachable=True)
    rebuilt = lost.to_node()
    assert {(t.key, str(t.effect)) for t in rebuilt.spec.taints} == {
        (UNREACHABLE_TAINT_KEY, "NoSchedule"),
        (UNREACHABLE_TAINT_KEY, "NoExecute"),
    }
    assert not rebuilt.status.ready
    assert NodeRecord.of(rebuilt).unreachable  # a node carrying the taint is recorded as lost


def test_pod_record_fields_round_trip() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "c", "image": "nginx"}]},
    }
    raw = codec.dumps(manifest)
    pod = parse_pod(manifest)
    record = PodRecord.of(pod, raw, now=10.0)
    assert (record.key, record.profile, record.phase, record.uid) == (
        "shop/web",
        "gpu-scheduler",
        PodPhase.PENDING,
        "u-1",
    )
    stored = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in record.to_fields().items()}
    assert PodRecord.from_hash(stored) == record
    assert PodRecord.from_hash(record.to_fields()) == record  # a decoding client gives str
    assert record.pod() == pod


def test_reservation_accounts_like_nodeinfo() -> None:
    nodes = make_nodes(8, seed=2, gpu_fraction=1.0)
    pods = make_pods(60, seed=3, gpu_fraction=0.6)
    for node in nodes:
        direct = NodeInfo(node)
        reservations = []
        for pod in pods:
            info = PodInfo.of(pod)
            devices: tuple[int, ...] = ()
            if info.gpu is not None:
                devices = pick_gpu_devices(info.gpu, direct)
                if len(devices) < info.gpu.count:
                    continue
            placed = info.placed_on(devices)
            direct.add_pod(placed)
            r = Reservation.of(placed, node.name, token=4, now=1.5)
            back = Reservation.decode(r.encode())
            assert back == r
            reservations.append(back)
        rebuilt = node_info_of(node, reservations)
        assert +rebuilt.requested == +direct.requested
        assert (rebuilt.non_zero_cpu, rebuilt.non_zero_memory) == (direct.non_zero_cpu, direct.non_zero_memory)
        assert rebuilt.gpu_free_memory == direct.gpu_free_memory
        assert rebuilt.gpu_pod_count == direct.gpu_pod_count
        assert rebuilt.used_ports == direct.used_ports
        assert set(rebuilt.pods) == set(direct.pods)


def test_reservation_validates_devices() -> None:
    pod = make_pods(200, seed=9, gpu_fraction=1.0)
    gpu_pod = next(p for p in pod if PodInfo.of(p).gpu is not None)
    info = PodInfo.of(gpu_pod)
    assert info.gpu is not None
    with pytest.raises(ValueError):
        Reservation.of(info, "n1")  # no devices picked
    cpu_pod = PodInfo.of(parse_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}))
    with pytest.raises(ValueError):
        Reservation.of(cpu_pod.placed_on((0,)), "n1")
    r = Reservation.of(cpu_pod, "n1")
    assert (r.profile, r.state, r.gpu_request) == ("default-scheduler", ReservationState.RESERVED, None)
    assert Reservation.decode(r.encode(), bound=True).state is ReservationState.BOUND


def test_a_terminating_pod_s_reservation_says_so() -> None:
    """A pod with a deletionTimestamp keeps its room, marked terminating: "deleted_at" in the
    JSON, the stand-in pod terminating; JSON without it (stored before) reads as not terminating."""
    manifest = {
        "metadata": {"name": "p", "deletionTimestamp": "2024-05-01T12:00:00Z"},
        "spec": {"containers": [{"name": "c"}]},
    }
    r = Reservation.of(PodInfo.of(parse_pod(manifest)), "n1", now=1.5)
    assert r.deletion_timestamp == 1714564800.0
    back = Reservation.decode(r.encode())
    assert back == r and back.pod_info().pod.terminating
    assert back.pod_info().label_key[2] is True
    older = r.to_json()
    del older["deleted_at"]
    plain = Reservation.from_json(older)
    assert plain.deletion_timestamp is None and not plain.pod_info().pod.terminating
    assert (
        "deleted_at"
        not in Reservation.of(PodInfo.of(parse_pod({**manifest, "metadata": {"name": "p"}})), "n1").to_json()
    )


def test_requests_are_checked_in_kube_order() -> None:
    got = ordered_requests({"nvidia.com/gpu": 1, "pods": 1, "memory": 2, "cpu": 3, "example.com/foo": 1})
    assert got == [("cpu", 3), ("memory", 2), ("example.com/foo", 1), ("nvidia.com/gpu", 1)]


def test_pod_event_round_trips() -> None:
    e = PodEvent(1.25, EventType.WARNING, "FailedScheduling", "0/3 nodes are available", "cycle-0")
    assert PodEvent.decode(e.encode()) == e
