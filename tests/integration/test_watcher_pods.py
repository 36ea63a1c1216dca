"""The watcher's pod mirror against real NATS and Redis: what it does with pods kubus's binder is
binding (settling), when events arrive while it records one; bound pods whose deletion began."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nats.js import JetStreamContext

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.submission import pod_from_api, read_submission
from kubus.bus import MAX_MSG_SIZE, MSG_ID_HEADER, PODS_STREAM, PODS_SUBMIT, Publication, msgids
from kubus.bus.connection import ensure_streams
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo
from kubus.runtime.service import logger
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation
from kubus.watcher.pods import SETTLE, PodMirror, submit_lists


def api_pod(uid: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kubus",
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "default", "uid": uid, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def placements_recorded(mirror: PodMirror) -> list[str]:
    """The uids the mirror records placed in the store from now on (`PodMirror._placed`), in order."""
    recorded: list[str] = []
    placed = mirror._placed

    async def placing(pod: Any, obj: Mapping[str, Any]) -> bool:
        recorded.append(pod.uid)
        return await placed(pod, obj)

    mirror._placed = placing  # type: ignore[method-assign]
    return recorded


async def test_settling_records_only_the_bindings_the_store_lacks(state: ClusterState, js: JetStreamContext) -> None:
    """Three pods kubus submitted and its binder bound in the apiserver: one it recorded in the
    store too, one not (killed in between), one recorded and deleted in kubus since (preempted:
    the apiserver's deletion follows). Not before `SETTLE` seconds, then once: the mirror
    records the second alone; the first is left to its binder's record, the third to its end."""
    await ensure_streams(js)
    await state.put_node(parse_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "10"}}}))
    now = [1000.0]
    mirror = PodMirror(store=state, js=js, profiles=["kubus"], log=logger("test"), clock=lambda: now[0])
    for uid in ("u1", "u2", "u3"):
        await mirror.changed(api_pod(uid))  # submitted
    for uid in ("u2", "u3"):
        record = PodRecord.of(parse_pod(api_pod(uid, node="n1")), b"{}", now=now[0])
        reservation = Reservation.of(PodInfo.of(parse_pod(api_pod(uid, node="n1"))), "n1", profile="kubus")
        code, phase, _ = await state.observe_placed(record, reservation, running=False)  # its binder recorded it
        assert (str(code), phase) == ("OK", PodPhase.BOUND)
    deleted = await state.transition("u3", PodPhase.DELETED, expected_phases=[PodPhase.BOUND])
    assert deleted.ok
    for uid in ("u1", "u2", "u3"):
        await mirror.changed(api_pod(uid, node="n1"))  # bound by kubus's binder: settling
    recorded = placements_recorded(mirror)
    await mirror.settle()
    assert recorded == [], "not before SETTLE seconds"
    now[0] += SETTLE + 1
    await mirror.settle()
    assert recorded == ["u1"]
    u1 = await state.get_pod("u1")
    assert u1 is not None and (u1.phase, u1.node) == (PodPhase.BOUND, "n1")
    u3 = await state.get_pod("u3")
    assert u3 is not None and u3.phase is PodPhase.DELETED
    await mirror.settle()
    assert recorded == ["u1"], "nothing is left settling"


async def test_a_bound_pod_being_deleted_is_recorded_terminating(state: ClusterState, js: JetStreamContext) -> None:
    """A pod bound outside kubus whose graceful deletion began (deletionTimestamp set; it runs
    out its grace period on the node) keeps its room there, now marked terminating, its
    reservation otherwise unchanged; the final deletion deletes it as before. The same for a
    pod kubus's binder bound (its reservation is stamped, not replaced)."""
    await ensure_streams(js)
    await state.put_node(parse_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "10"}}}))
    mirror = PodMirror(store=state, js=js, profiles=["kubus"], log=logger("test"), clock=lambda: 1000.0)
    outside = api_pod("u1", node="n1")
    outside["spec"]["schedulerName"] = "other"
    await mirror.changed(outside)
    before = await state.reservation("n1", "u1")
    assert before is not None and before.deletion_timestamp is None
    deleting = {**outside, "metadata": {**outside["metadata"], "deletionTimestamp": "2024-05-01T12:00:00Z"}}
    await mirror.changed(deleting)
    after = await state.reservation("n1", "u1")
    assert after is not None and after.deletion_timestamp == 1714564800.0
    assert dataclasses.replace(after, deletion_timestamp=None) == before
    assert after.pod_info().pod.terminating
    record = await state.get_pod("u1")
    assert record is not None and record.phase is PodPhase.BOUND and record.node == "n1"
    await mirror.changed(deleting)  # seen: nothing more
    assert await state.reservation("n1", "u1") == after

    await mirror.changed(api_pod("u2"))  # submitted, then bound by kubus's binder (its room)
    held = Reservation.of(PodInfo.of(parse_pod(api_pod("u2", node="n1"))), "n1", attempt=11, now=5.0)
    await state.observe_placed(PodRecord.of(parse_pod(api_pod("u2")), b"{}"), held, running=False)
    await mirror.changed(api_pod("u2", node="n1"))
    bound = api_pod("u2", node="n1")
    await mirror.changed({**bound, "metadata": {**bound["metadata"], "deletionTimestamp": "2024-05-01T12:00:01Z"}})
    stamped = await state.reservation("n1", "u2")
    assert stamped is not None and stamped.attempt == 11 and stamped.deletion_timestamp == 1714564801.0


async def test_a_victim_kubus_evicted_is_not_recorded_terminating(state: ClusterState, js: JetStreamContext) -> None:
    """A preemption victim kubus evicted gave its room back in that step; the status writer
    tells the mirror before it deletes it (`PodMirror.evicting`), so the deletion beginning
    records nothing (a pod not evicted by kubus is stamped, as the test above shows)."""
    await ensure_streams(js)
    await state.put_node(parse_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "10"}}}))
    mirror = PodMirror(store=state, js=js, profiles=["kubus"], log=logger("test"), clock=lambda: 1000.0)
    victim = api_pod("u1", node="n1")
    victim["spec"]["schedulerName"] = "other"
    await mirror.changed(victim)  # recorded bound there
    recorded = placements_recorded(mirror)
    mirror.evicting("u1")
    await mirror.changed({**victim, "metadata": {**victim["metadata"], "deletionTimestamp": "2024-05-01T12:00:00Z"}})
    assert recorded == []
    held = await state.reservation("n1", "u1")
    assert held is not None and held.deletion_timestamp is None


async def test_a_list_of_pods_is_submitted_as_pod_lists_in_order(state: ClusterState, js: JetStreamContext) -> None:
    """The pods of a list (the first, or a relist) go to the queue as PodLists of up to
    ``submit_batch`` pods, in the list's order, each with the id of its pods' submits; listed
    again unchanged, nothing is submitted again."""
    await ensure_streams(js)
    mirror = PodMirror(store=state, js=js, profiles=["kubus"], log=logger("test"), submit_batch=4)
    pods = [api_pod(f"u{i}") for i in range(10)]
    await mirror.replace(pods)
    sub = await js.pull_subscribe(PODS_SUBMIT, "test-lists", stream=PODS_STREAM.name)
    msgs = await sub.fetch(10, timeout=2)
    assert len(msgs) == 3
    read = [read_submission(m.data, source="t", max_manifest_bytes=1 << 20) for m in msgs]
    assert [[s.pod.metadata.uid for s in subs] for subs in read] == [
        ["u0", "u1", "u2", "u3"], ["u4", "u5", "u6", "u7"], ["u8", "u9"]
    ]  # fmt: skip
    for m, subs in zip(msgs, read, strict=True):
        ids = [msgids.submit("default", s.pod.metadata.name, pod_from_api(pods[int(s.pod.metadata.uid[1:])]))
               for s in subs]  # fmt: skip
        assert m.headers is not None and m.headers[MSG_ID_HEADER] == msgids.submit_list(ids)
    await mirror.replace(pods)
    assert (await js.stream_info(PODS_STREAM.name)).state.messages == 3


def test_pod_lists_hold_up_to_their_size_and_bytes_and_a_pod_alone_goes_as_itself() -> None:
    def payload(size: int) -> bytes:
        return b'{"a":"' + b"x" * (size - 8) + b'"}'

    small = [Publication(PODS_SUBMIT, payload(20), f"submit/default/p{i}/x") for i in range(5)]
    lists = submit_lists(small, 2)
    assert [codec.loads(p.payload)["kind"] for p in lists[:2]] == ["PodList", "PodList"]
    assert lists[2] is small[4]  # alone: itself
    assert [len(codec.loads(p.payload)["items"]) for p in lists[:2]] == [2, 2]
    big = Publication(PODS_SUBMIT, payload(MAX_MSG_SIZE // 4 - 10), "submit/default/big/x")
    lists = submit_lists([small[0], big, big, small[1]], 256)  # the bytes cut them: two of these a list
    assert [len(codec.loads(p.payload)["items"]) for p in lists] == [2, 2]
    assert all(len(p.payload) <= MAX_MSG_SIZE // 2 + 64 for p in lists)
    assert len({p.msg_id for p in lists}) == 2 and all(msgids.is_submit_list(p.msg_id) for p in lists)
