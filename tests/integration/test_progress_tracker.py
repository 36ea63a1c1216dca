"""The bench's and the demo's PodTracker against a real Redis: polls during a run read a bounded
share of the records, taking turns, and a full poll reads them all."""

from __future__ import annotations

import time

import pytest
from nats.aio.client import Client as NATS
from support import eventually

from kubus.api.manifests import parse_pod
from kubus.bus import announcements
from kubus.bus.messages import BatchedPod
from kubus.bus.subjects import EventKind, event_filter
from kubus.cli import progress
from kubus.cli.progress import PodTracker
from kubus.core import codec
from kubus.store import ClusterState, PodPhase, PodRecord


async def stored(state: ClusterState, count: int) -> list[tuple[str, str]]:
    pods = []
    for i in range(count):
        doc = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"uid-{i}"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        pod = parse_pod(doc)
        assert await state.put_pod(PodRecord.of(pod, codec.dumps(doc), now=state.clock()))
        pods.append((pod.key, pod.metadata.uid))
    return pods


async def test_limited_polls_take_turns_and_a_full_poll_reads_every_record(
    state: ClusterState, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "_POLL_LIMIT", 4)
    pods = await stored(state, 10)
    tracker = PodTracker(state, [*pods, ("default/never", "uid-never")])
    skip = frozenset({PodPhase.RUNNING})
    seen: list[int] = []
    for _ in range(3):
        counts = await tracker.poll(skip=skip)
        seen.append(counts[PodPhase.PENDING])
    assert seen == [4, 8, 10]  # 4 more each turn, 11 pods in turn (one never stored)
    assert all(p.accepted > 0 for p in tracker.pods.values() if p.phase is PodPhase.PENDING)
    assert tracker.pods["default/never"].phase is None
    # a pod in a phase of skip is not read again: the next turns read the others only
    running = tracker.pods["default/p0"]
    running.phase = PodPhase.RUNNING
    await tracker.poll(skip=skip)
    assert running.phase is PodPhase.RUNNING
    # a full poll reads every record, as it is now
    counts = await tracker.poll()
    assert counts[PodPhase.PENDING] == 10 and counts[None] == 1


async def test_bound_and_running_events_mark_the_tracked_pod_and_garbage_is_ignored(
    state: ClusterState, nats: NATS
) -> None:
    [(key, uid)] = await stored(state, 1)
    tracker = PodTracker(state, [(key, uid)])
    await tracker.follow_events(nats)
    try:
        for data in (b"not json", b"[1]", b'{"kind": "pod.bound"}', b'{"kind": "pod.bound", "name": 7}'):
            await nats.publish(event_filter(EventKind.POD_BOUND).replace(">", "x"), data)
        bad_batches = (b'{"kind": "pods.bound", "name": "b"}', b'{"kind":"pods.bound","name":"b","data":{"pods":7}}')
        for data in bad_batches:
            await nats.publish(event_filter(EventKind.PODS_BOUND).replace(">", "x"), data)
        # bound among others (a binder's pods.bound), then running (an agent's pod.running)
        together = [BatchedPod("default/untracked", "u", "n1"), BatchedPod(key, uid, "n1")]
        [p] = announcements.pod_batch(EventKind.PODS_BOUND, together, at=time.time())
        await nats.publish(p.subject, p.payload)
        p = announcements.pod_event(EventKind.POD_RUNNING, key, uid, at=time.time(), node="n1")
        await nats.publish(p.subject, p.payload)
        other = announcements.pod_event(EventKind.POD_BOUND, "default/untracked", "u", at=time.time(), node="n1")
        await nats.publish(other.subject, other.payload)
        pod = tracker.pods[key]

        def both_seen() -> None:
            assert pod.bound > 0 and pod.running >= pod.bound

        await eventually(both_seen)
        assert pod.phase is PodPhase.RUNNING and list(tracker.pods) == [key]
    finally:
        await tracker.close()
