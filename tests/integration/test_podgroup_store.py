"""kubus.store's PodGroups against a real Redis: groups put and read back, member indexes,
and the counts Coscheduling reads."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from kubus.api.manifests import parse_pod
from kubus.api.podgroups import POD_GROUP_LABEL, PodGroup
from kubus.core import codec
from kubus.store import ClusterState, PodPhase, PodRecord

TRAIN = PodGroup(
    namespace="ml",
    name="train",
    min_member=4,
    min_resources={"cpu": 2000, "nvidia.com/gpu": 4},
    schedule_timeout_seconds=30,
    creation_timestamp=1714564800.5,
)


async def _stored_pod(state: ClusterState, name: str, group: str | None = "train") -> str:
    labels: dict[str, Any] = {POD_GROUP_LABEL: group} if group else {}
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels},
        "spec": {"containers": [{"name": "c"}]},
    }
    pod = parse_pod(manifest)
    assert await state.put_pod(PodRecord.of(pod, codec.dumps(manifest), now=1.0))
    return pod.metadata.uid


async def _move(state: ClusterState, uid: str, *phases: PodPhase) -> None:
    for phase in phases:
        node = "n1" if phase in (PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING) else None
        if phase is PodPhase.BOUND:
            w = await state.bind_pod(uid, "n1")
        else:
            w = await state.transition(uid, phase, node=node)
        assert w.ok, (uid, phase, w)


async def test_a_group_is_put_read_back_and_replaced(state: ClusterState, redis: aioredis.Redis) -> None:
    assert await state.get_pod_group("ml/train") is None
    assert await state.put_pod_group(TRAIN, b'{"kind": "PodGroup"}')
    assert await state.get_pod_group("ml/train") == TRAIN
    assert not await state.put_pod_group(TRAIN, b'{"kind": "PodGroup"}')  # the same again: unchanged
    assert await state.put_pod_group(TRAIN, b'{"kind": "PodGroup", "x": 1}')  # another manifest

    bigger = PodGroup("ml", "train", 8, {"cpu": 4000}, None, 1714564800.5)
    assert await state.put_pod_group(bigger)
    assert await state.get_pod_group("ml/train") == bigger
    record = await redis.hgetall(state.keys.pod_group_record("ml/train"))
    assert record[b"manifest"] == b""
    assert await redis.smembers(state.keys.pod_groups_index()) == {b"ml/train"}


async def test_pod_groups_lists_every_group_or_the_ones_asked_for(state: ClusterState) -> None:
    assert await state.pod_groups() == []
    other = PodGroup("default", "b", 2)
    third = PodGroup("default", "a/b c", 1)  # names are escaped in keys
    for group in (TRAIN, other, third):
        assert await state.put_pod_group(group)
    assert await state.pod_groups() == [third, other, TRAIN]  # sorted by key
    assert await state.pod_groups(["ml/train", "nope/x", "default/b"]) == [TRAIN, other]
    assert await state.pod_groups([]) == []


async def test_members_are_added_idempotently_and_removed(state: ClusterState) -> None:
    await state.add_group_members([])  # nothing to do: no round trip, no error
    await state.add_group_members([("ml/train", "u1"), ("ml/train", "u2"), ("ml/other", "u3"), ("ml/train", "u1")])
    await state.add_group_members([("ml/train", "u1")])
    assert await state.group_members("ml/train") == {"u1", "u2"}
    assert await state.group_members("ml/other") == {"u3"}
    await state.remove_group_member("ml/train", "u1")
    await state.remove_group_member("ml/train", "u1")
    await state.remove_group_member("ml/none", "u1")
    assert await state.group_members("ml/train") == {"u2"}


async def test_group_counts_count_live_members_and_assigned_ones(state: ClusterState) -> None:
    uids = {name: await _stored_pod(state, name) for name in ("p", "r", "b", "run", "ok", "fail", "gone")}
    await _move(state, uids["r"], PodPhase.RESERVED)
    await _move(state, uids["b"], PodPhase.RESERVED, PodPhase.BOUND)
    await _move(state, uids["run"], PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING)
    await _move(state, uids["ok"], PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED)
    await _move(state, uids["fail"], PodPhase.FAILED)
    await _move(state, uids["gone"], PodPhase.DELETED)
    await state.add_group_members([("ml/train", uid) for uid in uids.values()])
    await state.add_group_members([("ml/train", "uid-never-stored"), ("ml/solo", uids["p"])])

    counts = await state.group_counts(["ml/train", "ml/solo", "ml/empty", "ml/train"])
    assert counts == {"ml/train": (4, 2), "ml/solo": (1, 0), "ml/empty": (0, 0)}
    assert await state.group_counts([]) == {}

    await _move(state, uids["p"], PodPhase.DELETED)
    assert (await state.group_counts(["ml/train"]))["ml/train"] == (3, 2)
