"""Feeding gang scheduling against real NATS and Redis: `kubus apply` stores PodGroups, the
queue indexes the labeled pods it stores as their group's members and drops deleted ones."""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from builders import pod_manifest
from nats.js import JetStreamContext
from support import eventually

from kubus.api.podgroups import POD_GROUP_LABEL, PodGroup
from kubus.bus import PODS_DELETE, PODS_SUBMIT, publish_durable
from kubus.bus.messages import PodDeletion, encode
from kubus.cli.cluster import apply
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import load_config
from kubus.plugins import in_tree_registry
from kubus.queue import QueueOptions, QueueService
from kubus.store import ClusterState, PodPhase

CONFIG = load_config(
    {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"}],
    },
    registry=in_tree_registry(),
)
FAST = QueueOptions(flush_interval=0.05, in_flight_interval=0.05, janitor_interval=0.1, node_interval=0.1)


def _pod(name: str, group: str | None) -> dict[str, Any]:
    labels = {POD_GROUP_LABEL: group} if group else {}
    return pod_manifest(name, namespace="ml", uid=f"uid-{name}", labels=labels, requests={"cpu": "100m"})


async def _submit(js: JetStreamContext, obj: dict[str, Any], *, escaped: bool = False) -> None:
    data = codec.dumps(obj)
    if escaped:  # the label's key as JSON may also spell it; the queue stores the manifest as sent
        data = data.replace(b"pod-group", b"pod\\u002dgroup")
    await publish_durable(js, PODS_SUBMIT, data, f"submit/{hashlib.sha256(data).hexdigest()}")


@pytest.fixture
async def queue(settings: ConnectionSettings) -> AsyncIterator[QueueService]:
    service = QueueService(settings, CONFIG, FAST)
    await service.start()
    yield service
    await service.stop()


async def test_submitted_labeled_pods_are_their_groups_members_until_deleted(
    queue: QueueService, js: JetStreamContext, redis: aioredis.Redis
) -> None:
    state = ClusterState(redis)
    for name, group in (("w0", "train"), ("w1", "train"), ("e0", "eval"), ("solo", None)):
        await _submit(js, _pod(name, group))
    await _submit(js, _pod("w2", "train"), escaped=True)

    async def indexed() -> None:
        assert await state.group_members("ml/train") == {"uid-w0", "uid-w1", "uid-w2"}
        assert await state.group_members("ml/eval") == {"uid-e0"}

    await eventually(indexed)
    assert (await state.get_pod("uid-solo")) is not None
    assert await state.group_counts(["ml/train"]) == {"ml/train": (3, 0)}

    for name in ("w0", "w2", "solo"):
        await publish_durable(js, PODS_DELETE, encode(PodDeletion("ml", name)), f"delete/{name}")

    async def removed() -> None:
        for uid in ("uid-w0", "uid-w2", "uid-solo"):
            record = await state.get_pod(uid)
            assert record is not None and record.phase is PodPhase.DELETED
        assert await state.group_members("ml/train") == {"uid-w1"}

    await eventually(removed)
    assert await state.group_counts(["ml/train"]) == {"ml/train": (1, 0)}


async def test_apply_stores_the_groups_then_submits_the_pods(
    queue: QueueService, settings: ConnectionSettings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 2, "minResources": {"cpu": "200m"}, "scheduleTimeoutSeconds": 5},
    }
    path = tmp_path / "gang.yaml"
    path.write_bytes(b"\n---\n".join(codec.dumps(o) for o in (group, _pod("w0", "train"), _pod("w1", "train"))))
    out = io.StringIO()
    assert await apply(settings, [str(path)], out) == 0
    assert out.getvalue().splitlines() == [
        "podgroup/train created",
        "pod/w0 created",
        "pod/w1 created",
    ]
    state = ClusterState(redis)
    assert await state.get_pod_group("ml/train") == PodGroup("ml", "train", 2, {"cpu": 200}, 5)

    async def indexed() -> None:
        assert await state.group_members("ml/train") == {"uid-w0", "uid-w1"}

    await eventually(indexed)

    groups_only = tmp_path / "group.yaml"
    groups_only.write_bytes(codec.dumps(group))
    out = io.StringIO()
    assert await apply(settings, [str(groups_only)], out) == 0
    assert out.getvalue() == "podgroup/train unchanged\n"
