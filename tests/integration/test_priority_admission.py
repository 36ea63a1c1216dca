"""The queue admits submitted pods as kube's Priority admission does, against real NATS and
Redis: `kubus apply` stores PriorityClasses before it submits the pods that name them, a pod
gets its class's priority (in its stored manifest too), and a pod naming no existing class is
refused with kube's message and a Warning event."""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from builders import pod_manifest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from support import eventually

from kubus.api.objects import Pod, PreemptionPolicy
from kubus.api.priority import PriorityClass
from kubus.api.submission import identify
from kubus.bus import PODS_SUBMIT, publish_durable, queue_pop
from kubus.bus.messages import ClusterEvent, PopReply, PopRequest, decode, encode
from kubus.cli.cluster import apply
from kubus.cli.connect import UsageError
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import load_config
from kubus.plugins import in_tree_registry
from kubus.queue import QueueOptions, QueueService
from kubus.store import ClusterState, EventType

CONFIG = load_config(
    {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"}],
    },
    registry=in_tree_registry(),
)
FAST = QueueOptions(flush_interval=0.05, in_flight_interval=0.05, janitor_interval=0.1, node_interval=0.1)


def _pod(name: str, priority_class: str = "", **spec: Any) -> dict[str, Any]:
    if priority_class:
        spec["priorityClassName"] = priority_class
    return pod_manifest(name, namespace="ml", uid=f"uid-{name}", requests={"cpu": "100m"}, **spec)


def _class(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
            **fields}  # fmt: skip


async def _submit(js: JetStreamContext, obj: dict[str, Any]) -> None:
    data = codec.dumps(obj)
    await publish_durable(js, PODS_SUBMIT, data, f"submit/{hashlib.sha256(data).hexdigest()}")


async def _pop(nats: NATS) -> list[str]:
    request = PopRequest(max_pods=50, wait_ms=5000, holder="test", fencing_token=0)
    reply = await nats.request(queue_pop("default-scheduler"), encode(request), timeout=10)
    return [p.key for p in decode(PopReply, reply.data).pods]


async def _stored(state: ClusterState, uid: str) -> Pod:
    record = await state.get_pod(uid)
    assert record is not None, uid
    return record.pod()


def _write(path: Path, *objects: dict[str, Any]) -> str:
    path.write_bytes(b"\n---\n".join(codec.dumps(o) for o in objects))
    return str(path)


@pytest.fixture
async def queue(settings: ConnectionSettings) -> AsyncIterator[QueueService]:
    service = QueueService(settings, CONFIG, FAST)
    await service.start()
    yield service
    await service.stop()


@pytest.fixture
async def rejections(nats: NATS) -> AsyncIterator[list[ClusterEvent]]:
    seen: list[ClusterEvent] = []

    async def on_msg(msg: Any) -> None:
        seen.append(decode(ClusterEvent, msg.data))

    sub = await nats.subscribe("kubus.events.pod.rejected.>", cb=on_msg)
    yield seen
    await sub.unsubscribe()


async def test_a_pod_naming_no_existing_class_is_refused(
    queue: QueueService, js: JetStreamContext, redis: aioredis.Redis, rejections: list[ClusterEvent]
) -> None:
    state = ClusterState(redis)
    bad = _pod("typo", "urgnet")
    await _submit(js, bad)
    await _submit(js, _pod("fine"))
    await eventually(lambda: _stored(state, "uid-fine"))

    async def refused() -> ClusterEvent:
        assert len(rejections) == 1
        return rejections[0]

    event = await eventually(refused)
    assert (event.name, event.reason) == ("ml/typo", "Forbidden")
    assert event.message == (
        "kubus.pods.submit: Pod ml/typo: spec.priorityClassName: no PriorityClass with name urgnet was found"
    )
    assert await state.get_pod("uid-typo") is None  # never stored, never queued
    [warning] = await state.events(identify(codec.dumps(bad))[1])
    assert (warning.type, warning.reason, warning.message) == (EventType.WARNING, "Rejected", event.message)


async def test_a_class_applied_with_its_pods_is_seen_by_the_queue(
    queue: QueueService, settings: ConnectionSettings, nats: NATS, redis: aioredis.Redis, tmp_path: Path
) -> None:
    state = ClusterState(redis)
    await _submit(queue.jetstream(), _pod("before"))  # the queue has read the classes (none) already
    await eventually(lambda: _stored(state, "uid-before"))

    path = _write(
        tmp_path / "batch.yaml",
        _class("urgent", 100000, preemptionPolicy="Never"),
        _class("batch", 10, globalDefault=True),
        _pod("late-urgent", "urgent"),
        _pod("plain"),
    )
    out = io.StringIO()
    assert await apply(settings, [path], out) == 0
    assert out.getvalue().splitlines() == [
        "priorityclass/urgent created",
        "priorityclass/batch created",
        "pod/late-urgent created",
        "pod/plain created",
    ]
    assert await state.priority_classes() == {
        "urgent": PriorityClass("urgent", 100000, preemption_policy=PreemptionPolicy.NEVER),
        "batch": PriorityClass("batch", 10, global_default=True),
    }

    urgent = await eventually(lambda: _stored(state, "uid-late-urgent"))
    plain = await eventually(lambda: _stored(state, "uid-plain"))
    assert (urgent.spec.priority, urgent.spec.preemption_policy) == (100000, PreemptionPolicy.NEVER)
    assert (plain.spec.priority_class_name, plain.spec.priority) == ("batch", 10)  # the default's
    assert await _pop(nats) == ["ml/late-urgent", "ml/plain", "ml/before"]  # by priority


async def test_apply_refuses_a_second_default_and_stores_nothing(
    queue: QueueService, settings: ConnectionSettings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    state = ClusterState(redis)
    assert await apply(settings, [_write(tmp_path / "a.yaml", _class("a", 1, globalDefault=True))], io.StringIO()) == 0
    path = _write(tmp_path / "b.yaml", _class("fresh", 5), _class("b", 2, globalDefault=True), _pod("p", "b"))
    with pytest.raises(
        UsageError, match="PriorityClass b: globalDefault: PriorityClass a is already marked as default"
    ):
        await apply(settings, [path], io.StringIO())
    assert set(await state.priority_classes()) == {"a"}  # not even the class before it
    assert await state.get_pod("uid-p") is None
