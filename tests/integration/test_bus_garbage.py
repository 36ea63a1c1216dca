"""Garbage on every subject a service reads, against real NATS and Redis: each service keeps
running, counts every bad message as rejected (or reports it its own documented way), leaves
Redis as it was, and still does its work with the valid message that comes after.

Per service, the subjects it reads: the queue (``kubus.pods.submit``/``.delete``/``.requeue``,
``kubus.queue.<p>.pop``/``.done``, the cluster events its hints read), the binder
(``kubus.bind.<p>``), the gpu-agent (``kubus.node.<n>.pods``, ``pod.deleted`` events) and the
cycle (the replies to its pops, the node and pod events that keep its node table fresh, the
other profiles' announcements of their reservations).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from support import eventually

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.submission import identify
from kubus.binder import BinderOptions, BinderService
from kubus.bus import (
    BIND_ALL,
    BIND_STREAM,
    EVENTS,
    NODE_PODS_ALL,
    NODES_STREAM,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    RESERVED_ALL,
    bind,
    ensure_streams,
    event_subject,
    node_pods,
    publish_durable,
    queue_done,
    queue_pop,
)
from kubus.bus import reserved as reserved_subject
from kubus.bus.messages import (
    ERROR_HEADER,
    BindRequest,
    ClusterEvent,
    NodeAssignment,
    Outcome,
    OutcomeKind,
    Outcomes,
    PopReply,
    PopRequest,
    QueuedPod,
    decode,
    encode,
)
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.cycle import CycleOptions, CycleService
from kubus.framework.config import load_config
from kubus.framework.runtime import Framework
from kubus.gpu_agent import AgentOptions, AgentService
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import in_tree_registry
from kubus.queue import QueueOptions, QueueService
from kubus.runtime.service import Service, ServiceState
from kubus.store import ClusterState, EventType, PodPhase, PodRecord, Reservation, StoreCode, check_invariants

PROFILE = "default-scheduler"
REJECTED = "kubus_rejected_messages_total"
_ids = itertools.count()


# ---- what Redis holds --------------------------------------------------------------------------

Snapshot = dict[bytes, tuple[str, Any]]


async def snapshot(redis: aioredis.Redis) -> Snapshot:
    """Every key with its type and value, but what services rewrite with time alone: a node's
    ``heartbeat`` field and the heartbeat index's scores (its members are compared)."""
    out: Snapshot = {}
    for key in sorted(await redis.keys("*")):
        kind = codec.text(await redis.type(key))
        value: Any
        if kind == "string":
            value = await redis.get(key)
        elif kind == "hash":
            value = {f: v for f, v in (await redis.hgetall(key)).items() if f != b"heartbeat"}
        elif kind == "list":
            value = await redis.lrange(key, 0, -1)
        elif kind == "set":
            value = frozenset(await redis.smembers(key))
        elif kind == "zset":
            heartbeats = key.endswith(b":heartbeats")
            value = [m if heartbeats else (m, s) for m, s in await redis.zrange(key, 0, -1, withscores=True)]
        elif kind == "none":  # gone since KEYS: only a key that expires can be
            continue
        else:
            value = await redis.dump(key)
        out[key] = (kind, value)
    return out


def changes(before: Snapshot, after: Snapshot) -> dict[bytes, str]:
    """The keys that differ: added, removed or changed."""
    out = {k: "added" for k in after.keys() - before.keys()}
    out |= {k: "removed" for k in before.keys() - after.keys()}
    out |= {k: "changed" for k in before.keys() & after.keys() if before[k] != after[k]}
    return out


# ---- helpers -----------------------------------------------------------------------------------


def rejected(service: Service, subject: str) -> float:
    return service.metrics.registry.get_sample_value(REJECTED, {"subject": subject}) or 0.0


def all_rejected(service: Service) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in service.metrics.rejected_messages.collect():
        for sample in metric.samples:
            if sample.name == REJECTED:
                out[sample.labels["subject"]] = sample.value
    return out


async def consumed(js: JetStreamContext, stream: str, durable: str) -> None:
    """Every message of the durable consumer settled (acked or terminated)."""
    info = await js.consumer_info(stream, durable)
    assert info.num_pending == 0 and info.num_ack_pending == 0, (info.num_pending, info.num_ack_pending)


def pod_doc(name: str, *, uid: str | None = None, cpu: Any = "100m") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": PROFILE,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def node_doc(name: str, cpu: str = "4") -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name}, "status": {"capacity": {"cpu": cpu, "memory": "16Gi"}}}


async def stored_pod(state: ClusterState, name: str) -> tuple[Any, bytes]:
    """A Pending pod in Redis, as the queue leaves an accepted one: (pod, manifest)."""
    doc = pod_doc(name, uid=f"uid-{name}")
    pod, manifest = parse_pod(doc), codec.dumps(doc)
    assert await state.put_pod(PodRecord.of(pod, manifest, now=state.clock()))
    return pod, manifest


async def reserved_pod(state: ClusterState, name: str, node: str) -> BindRequest:
    """A pod as the queue and the cycle leave it for the binders: Reserved on ``node``."""
    pod, manifest = await stored_pod(state, name)
    write = await state.transition(
        pod.metadata.uid, PodPhase.RESERVED, node=node, expected_phases={PodPhase.PENDING}, count_attempt=True
    )
    assert write.ok, write
    assert (await state.reserve(node, Reservation.of(PodInfo.of(pod), node, attempt=write.version))).ok
    return BindRequest(pod.metadata.uid, pod.key, PROFILE, node, manifest, attempt=write.version)


async def bound_pod(state: ClusterState, name: str, node: str) -> NodeAssignment:
    """A pod as the binder leaves it for the node's agent: Bound on ``node``."""
    request = await reserved_pod(state, name, node)
    uid, attempt = request.uid, request.attempt
    assert await state.mark_bound(node, uid, attempt) is StoreCode.OK
    assert (await state.bind_pod(uid, node, (), expected_version=attempt)).ok
    return NodeAssignment(uid, request.key, node, request.manifest, attempt=attempt)


def wrong(message: Any, **fields: Any) -> bytes:
    """The JSON of a valid ``message`` with ``fields`` replaced (values of the wrong type)."""
    return codec.dumps({**codec.loads(encode(message)), **fields})


async def js_publish(js: JetStreamContext, subject: str, data: bytes) -> None:
    await publish_durable(js, subject, data, f"garbage/{next(_ids)}/{hashlib.sha256(data).hexdigest()[:16]}")


@contextlib.asynccontextmanager
async def pod_rejections(nats: NATS) -> AsyncIterator[list[ClusterEvent]]:
    """The ``pod.rejected`` events published while the block runs."""
    seen: list[ClusterEvent] = []

    async def on_msg(msg: Msg) -> None:
        seen.append(decode(ClusterEvent, msg.data))

    sub = await nats.subscribe("kubus.events.pod.rejected.>", cb=on_msg)
    try:
        yield seen
    finally:
        await sub.unsubscribe()


# ---- the queue ---------------------------------------------------------------------------------

QUEUE_CONFIG = load_config(
    {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": PROFILE}],
    },
    registry=in_tree_registry(),
)
QUEUE_OPTIONS = QueueOptions(flush_interval=0.05, in_flight_interval=0.05, janitor_interval=0.1, node_interval=0.1)

NAMED_BAD_POD = codec.dumps(pod_doc("bad-type", cpu=["1"]))
"""A Pod of a readable name with a field of the wrong type: rejected, with a Warning PodEvent under
the uid the API would give it (docs/services.md, step 2)."""

QUEUE_GARBAGE: dict[str, list[bytes]] = {
    PODS_SUBMIT: [
        b"\x00\xff\xfe garbage \x89PNG",
        b"[1, 2, 3]",
        b'{"kind": "List", "items": 5}',  # crashed the queue once: identify() read the items of any type
        b'{"kind": ["Pod"], "metadata": {"name": "odd"}}',  # once a TypeError: a kind that is no string
        b"kind: Pod\nmetadata: {name: [x]}\nspec: {containers: [{name: c}]}\n",
        NAMED_BAD_POD,
    ],
    PODS_DELETE: [
        b"\xff\xfe",
        b'["default", "x"]',
        b'{"namespace": "default", "name": 7}',
        b'{"namespace": "default", "name": "x", "force": true}',
    ],
    PODS_REQUEUE: [
        b"not json",
        b'{"outcomes": {}}',
        b'{"outcomes": [{"uid": 5, "kind": "error"}]}',
        b'{"outcomes": [{"uid": "u", "kind": "lost"}]}',
    ],
    "kubus.pods.unknown": [b"?"],
}
POP_GARBAGE = [b"", b"\x00", b'{"max_pods": "many"}', b'{"max_pods": 1e3}', b'{"wait_ms": 1, "zz": 0}']
DONE_GARBAGE = [
    b"[]",
    b'{"outcomes": [{"uid": "u"}]}',
    wrong(Outcomes((Outcome("u", OutcomeKind.RESERVED, "n1"),)), outcomes=[{"uid": "u", "kind": 1}]),
]
EVENT_GARBAGE = [
    (event_subject("node.added", "n1"), b"\xff"),
    (event_subject("node.added", "n1"), b'{"kind": "node.added", "name": "n1"}'),
    (event_subject("node.added", "n1"), b'{"kind": "node.added", "name": "n1", "data": {"generation": "3"}}'),
    (event_subject("pod.deleted", "default/p"), b'{"kind": "pod.deleted", "name": "default/p", "data": {"uid": 5}}'),
    (event_subject("pod.deleted", "default/p"), b'{"kind": "pod.eaten", "name": "default/p", "data": {}}'),
]


async def pop(nats: NATS, data: bytes) -> Msg:
    return await nats.request(queue_pop(PROFILE), data, timeout=5)


async def test_the_queue_rejects_garbage_on_every_subject_and_keeps_working(
    settings: ConnectionSettings, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, state: ClusterState
) -> None:
    async with pod_rejections(nats) as rejections, QueueService(settings, QUEUE_CONFIG, QUEUE_OPTIONS) as queue:
        # A pod in flight: the queue then reads the node and pod events its hints look at.
        first = codec.dumps(pod_doc("first"))
        await js_publish(js, PODS_SUBMIT, first)

        async def popped_first() -> None:
            reply = decode(PopReply, (await pop(nats, encode(PopRequest(wait_ms=100)))).data)
            assert [p.key for p in reply.pods] == ["default/first"]

        await eventually(popped_first)
        assert {"node.added", "pod.deleted"} <= queue.queues[PROFILE].hinted_kinds
        await eventually(lambda: consumed(js, PODS_STREAM.name, queue.options.durable))
        before = await snapshot(redis)

        for subject, payloads in QUEUE_GARBAGE.items():
            for data in payloads:
                await js_publish(js, subject, data)
        for data in POP_GARBAGE:
            reply = await pop(nats, data)
            assert reply.data == b"" and reply.headers and "PopRequest" in reply.headers[ERROR_HEADER]
        await nats.publish(queue_pop(PROFILE), encode(PopRequest()))  # no reply subject: nobody to hand pods to
        for data in DONE_GARBAGE:
            reply = await nats.request(queue_done(PROFILE), data, timeout=5)
            assert reply.data == b"" and reply.headers and "Outcomes" in reply.headers[ERROR_HEADER]
        for subject, data in EVENT_GARBAGE:
            await js.publish(subject, data)

        expected = {
            PODS_SUBMIT: len(QUEUE_GARBAGE[PODS_SUBMIT]),
            PODS_DELETE: len(QUEUE_GARBAGE[PODS_DELETE]),
            PODS_REQUEUE: len(QUEUE_GARBAGE[PODS_REQUEUE]),
            PODS_STREAM.subjects[0]: 1,  # kubus.pods.unknown, under its stream's filter
            queue_pop(PROFILE): len(POP_GARBAGE) + 1,
            queue_done(PROFILE): len(DONE_GARBAGE),
            EVENTS: len(EVENT_GARBAGE),
        }

        async def all_rejected_and_settled() -> None:
            assert all_rejected(queue) == expected
            await consumed(js, PODS_STREAM.name, queue.options.durable)
            assert len(rejections) == sum(len(p) for p in QUEUE_GARBAGE.values())

        await eventually(all_rejected_and_settled)
        assert queue.state is ServiceState.RUNNING
        assert all("\n" not in e.message and e.reason for e in rejections)

        # Redis as it was, but for the one documented write: a Warning PodEvent under the uid of
        # the bad pod whose name could be read (no pod record: it was never stored).
        after = await snapshot(redis)
        _, bad_uid = identify(NAMED_BAD_POD)
        events_key = state.keys.pod_events(bad_uid).encode()
        assert changes(before, after) == {events_key: "added"}
        [warning] = await state.events(bad_uid)
        assert (warning.type, warning.reason) == (EventType.WARNING, "Rejected")
        assert "spec.containers[0].resources.requests.cpu" in warning.message
        assert await state.get_pod(bad_uid) is None

        # Still at work: a valid pod after the garbage is stored and handed out.
        await js_publish(js, PODS_SUBMIT, codec.dumps(pod_doc("second")))

        async def popped_second() -> None:
            reply = decode(PopReply, (await pop(nats, encode(PopRequest(wait_ms=100)))).data)
            assert [p.key for p in reply.pods] == ["default/second"]

        await eventually(popped_second)
        second = await state.find_pod("default", "second")
        assert second is not None and second.phase is PodPhase.PENDING
        assert queue.state is ServiceState.RUNNING
    assert await check_invariants(state) == []


# ---- the binder --------------------------------------------------------------------------------


def binder_garbage(valid: BindRequest) -> list[bytes]:
    return [
        b"\x00 not json",
        b"[]",
        b'{"uid": 42}',
        wrong(valid, attempt=str(valid.attempt)),
        wrong(valid, gpu_devices="0"),
        wrong(valid, manifest={"kind": "Pod"}),
        wrong(valid, uid=""),
        wrong(valid, key="no-slash"),
        wrong(valid, attempt=-1),
        wrong(valid, gpu_devices=[-1]),
        wrong(valid, unknown=True),
    ]


async def test_the_binder_rejects_garbage_and_keeps_binding(
    settings: ConnectionSettings, js: JetStreamContext, redis: aioredis.Redis, state: ClusterState
) -> None:
    await state.put_node(parse_node(node_doc("node-a")))
    request = await reserved_pod(state, "web", "node-a")
    garbage = binder_garbage(request)
    async with BinderService(settings, BinderOptions(fetch_timeout=0.2)) as binder:
        await ensure_streams(js)
        before = await snapshot(redis)
        for data in garbage:
            await js.publish(bind(PROFILE), data, headers={"Nats-Msg-Id": f"garbage/{next(_ids)}"})

        async def all_rejected_and_settled() -> None:
            assert all_rejected(binder) == {BIND_ALL: len(garbage)}
            await consumed(js, BIND_STREAM.name, binder.options.durable)

        await eventually(all_rejected_and_settled)
        assert binder.state is ServiceState.RUNNING
        assert changes(before, await snapshot(redis)) == {}

        # Still at work: the valid request after the garbage is bound.
        await js.publish(bind(PROFILE), encode(request), headers={"Nats-Msg-Id": f"bind/{next(_ids)}"})

        async def bound() -> None:
            record = await state.get_pod(request.uid)
            assert record is not None and record.phase is PodPhase.BOUND and record.node == "node-a"
            await consumed(js, BIND_STREAM.name, binder.options.durable)

        await eventually(bound)
        assert rejected(binder, BIND_ALL) == len(garbage)
        assert binder.state is ServiceState.RUNNING
    assert await check_invariants(state) == []


# ---- the gpu-agent -----------------------------------------------------------------------------

AGENT_NODE = "sim-00000"


def agent_garbage(valid: NodeAssignment) -> list[tuple[str, bytes]]:
    mine = node_pods(AGENT_NODE)
    return [
        (mine, b"garbage"),
        (mine, b'{"uid": "u"}'),
        (mine, wrong(valid, gpu_devices="0")),
        (mine, wrong(valid, attempt=1.5)),
        (mine, wrong(valid, uid="")),
        (mine, wrong(valid, key="no-slash")),
        (mine, wrong(valid, attempt=-3)),
        (node_pods("nobody"), encode(NodeAssignment("u", "default/u", "nobody", b"{}"))),  # not its node
    ]


DELETED_GARBAGE = [
    b"\xff",
    b'{"kind": "pod.deleted", "name": "default/x"}',
    b'{"kind": "pod.deleted", "name": "default/x", "data": {"uid": 5}}',
]


async def test_the_agent_rejects_garbage_and_keeps_running_pods(
    settings: ConnectionSettings,
    js: JetStreamContext,
    nats: NATS,
    redis: aioredis.Redis,
    state: ClusterState,
    caplog: pytest.LogCaptureFixture,
) -> None:
    template = parse_node(node_doc("template"))
    options = AgentOptions(heartbeat_interval=0.1, fetch_timeout=0.2, pod_duration=0.1)
    async with AgentService.simulating(settings, template, 1, options) as agent:
        assert list(agent.nodes) == [AGENT_NODE]
        valid = NodeAssignment("uid-x", "default/x", AGENT_NODE, b"{}", attempt=1)
        garbage = agent_garbage(valid)
        before = await snapshot(redis)
        caplog.set_level(logging.WARNING)
        for subject, data in garbage:
            await js.publish(subject, data, headers={"Nats-Msg-Id": f"garbage/{next(_ids)}"})
        for data in DELETED_GARBAGE:
            await nats.publish(event_subject("pod.deleted", "default/x"), data)

        # Counted by the subscriptions' filters: garbage on many subjects is not many series.
        expected = {NODE_PODS_ALL: float(len(garbage)), "kubus.events.pod.deleted.>": float(len(DELETED_GARBAGE))}

        async def all_rejected_and_settled() -> None:
            assert all_rejected(agent) == expected
            await consumed(js, NODES_STREAM.name, "kubus-agent-simulated")
            unreadable = [r for r in caplog.records if "pod.deleted event unreadable" in r.getMessage()]
            assert len(unreadable) == len(DELETED_GARBAGE)

        await eventually(all_rejected_and_settled)
        assert agent.state is ServiceState.RUNNING
        assert changes(before, await snapshot(redis)) == {}

        # Still at work: the valid assignment after the garbage runs (and finishes).
        good = await bound_pod(state, "web", AGENT_NODE)
        await js.publish(node_pods(AGENT_NODE), encode(good), headers={"Nats-Msg-Id": f"assign/{next(_ids)}"})

        async def succeeded() -> None:
            record = await state.get_pod(good.uid)
            assert record is not None and record.phase is PodPhase.SUCCEEDED

        await eventually(succeeded)
        assert all_rejected(agent) == expected
        assert agent.state is ServiceState.RUNNING
    assert await check_invariants(state) == []


# ---- the cycle ---------------------------------------------------------------------------------

CYCLE_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
"""
CYCLE_OPTIONS = CycleOptions(
    lease_ttl=1.0, renew_interval=0.1, pop_wait_ms=50, request_timeout=1.0, done_attempts=3, backend="numpy"
)
POP_REPLY_GARBAGE = [
    b"",
    b"\xff",
    b"[]",
    b'{"pods": {}}',
    b'{"pods": [{"uid": "u", "key": "default/u"}]}',
    wrong(PopReply((QueuedPod("u", "default/u", b"{}"),)), pods=[{"uid": "u", "key": "default/u", "manifest": {}}]),
]
CYCLE_EVENT_GARBAGE = [
    (event_subject("node.added", "n1"), b"\x00"),
    (event_subject("node.updated", "n1"), b'{"kind": "node.updated", "name": "n1", "data": {"uid": "u"}}'),
    (event_subject("pod.bound", "default/p"), b'{"kind": "pod.bound", "name": "default/p"}'),
    (event_subject("pod.deleted", "default/p"), b'{"kind": "pod.deleted", "name": 1, "data": {"uid": "u"}}'),
]
NOTICE_GARBAGE = [
    b"\xff",
    b'{"reservations": []}',
    b'{"profile": "other", "reservations": [{"pod_uid": "u"}]}',
    b'{"profile": "other", "reservations": [{"pod_uid": "u", "pod_key": "default/u", "node": "n1", '
    b'"profile": "other", "requests": 5}]}',
]
"""Another profile's announcements of its reservations, malformed (`ReservedPods`)."""


class ScriptedQueue:
    """Answers the cycle's pops over real NATS: empty until `arm`, then each scripted garbage
    reply once, then the offered pods; records the outcomes reported on ``.done``."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.script: list[bytes] = []
        self.offered: list[QueuedPod] = []
        self.outcomes: dict[str, Outcome] = {}

    async def start(self) -> None:
        await self.nc.subscribe(queue_pop(PROFILE), cb=self._pop)
        await self.nc.subscribe(queue_done(PROFILE), cb=self._done)
        await self.nc.flush()

    def arm(self, replies: list[bytes]) -> None:
        self.script = list(replies)

    async def _pop(self, msg: Msg) -> None:
        if self.script:
            await msg.respond(self.script.pop(0))
            return
        pods, self.offered = tuple(self.offered), []
        if not pods:
            await asyncio.sleep(decode(PopRequest, msg.data).wait_ms / 1000)
        await msg.respond(encode(PopReply(pods)))

    async def _done(self, msg: Msg) -> None:
        for outcome in decode(Outcomes, msg.data).outcomes:
            self.outcomes[outcome.uid] = outcome
        await msg.respond(b"")


async def test_the_cycle_rejects_garbage_replies_and_events_and_keeps_scheduling(
    settings: ConnectionSettings, nats: NATS, js: JetStreamContext, redis: aioredis.Redis, state: ClusterState
) -> None:
    await state.put_node(parse_node(node_doc("n1")))
    await ensure_streams(js)
    queue = ScriptedQueue(nats)
    await queue.start()
    registry = in_tree_registry()
    framework = Framework.from_profile(load_config(CYCLE_CONFIG, registry=registry).profile(PROFILE), registry)
    async with CycleService(settings, framework, CYCLE_OPTIONS) as cycle:

        async def leading() -> None:
            assert cycle.leading and cycle.table is not None and len(cycle.table) == 1

        await eventually(leading)
        before = await snapshot(redis)
        queue.arm(POP_REPLY_GARBAGE)
        for subject, data in CYCLE_EVENT_GARBAGE:
            await nats.publish(subject, data)
        for data in NOTICE_GARBAGE:
            await nats.publish(reserved_subject("other"), data)

        # A bad event is counted under the subscriptions' filter, not its subject.
        expected = {
            queue_pop(PROFILE): float(len(POP_REPLY_GARBAGE)),
            EVENTS: float(len(CYCLE_EVENT_GARBAGE)),
            RESERVED_ALL: float(len(NOTICE_GARBAGE)),
        }

        async def all_rejected_now() -> None:
            assert all_rejected(cycle) == expected
            assert not queue.script

        await eventually(all_rejected_now)
        assert cycle.state is ServiceState.RUNNING and cycle.leading
        assert changes(before, await snapshot(redis)) == {}

        # Still at work: a pod popped after the garbage is reserved and handed to the binders.
        pod, manifest = await stored_pod(state, "web")
        queue.offered.append(QueuedPod(pod.metadata.uid, pod.key, manifest))

        async def reserved() -> None:
            outcome = queue.outcomes.get(pod.metadata.uid)
            assert outcome is not None and outcome.kind is OutcomeKind.RESERVED and outcome.node == "n1"
            record = await state.get_pod(pod.metadata.uid)
            assert record is not None and record.phase is PodPhase.RESERVED
            assert (await js.stream_info(BIND_STREAM.name)).state.messages == 1

        await eventually(reserved)
        assert all_rejected(cycle) == expected
        assert cycle.state is ServiceState.RUNNING
    assert await check_invariants(state) == []
