"""The store's part for node agents against a real Redis: which pods stopped running."""

from __future__ import annotations

from kubus.api.manifests import parse_node, parse_pod
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, StoreCode


async def pod_in(state: ClusterState, name: str, node: str, phase: PodPhase) -> str:
    """A pod that ran on ``node`` (queue, cycle, binder and agent did their part), now in ``phase``."""
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    pod = parse_pod(doc)
    uid = pod.metadata.uid
    assert await state.put_pod(PodRecord.of(pod, codec.dumps(doc), now=state.clock()))
    attempt = (await state.transition(uid, PodPhase.RESERVED, node=node, count_attempt=True)).version
    assert (await state.reserve(node, Reservation.of(PodInfo.of(pod), node, attempt=attempt))).ok
    assert await state.mark_bound(node, uid, attempt) is StoreCode.OK
    assert (await state.bind_pod(uid, node, (), expected_version=attempt)).ok
    assert (await state.transition(uid, PodPhase.RUNNING, expected_phases={PodPhase.BOUND})).ok
    if phase is not PodPhase.RUNNING:
        assert (await state.transition(uid, phase)).ok
    return uid


async def test_not_running_here_names_the_pods_that_stopped_with_their_phase(state: ClusterState) -> None:
    for name in ("n1", "n2"):
        node = {"kind": "Node", "metadata": {"name": name}, "status": {"capacity": {"cpu": "4", "memory": "8Gi"}}}
        await state.put_node(parse_node(node))
    running = await pod_in(state, "running", "n1", PodPhase.RUNNING)
    done = await pod_in(state, "done", "n1", PodPhase.SUCCEEDED)
    deleted = await pod_in(state, "deleted", "n2", PodPhase.DELETED)
    assert await state.not_running_here([]) == {}
    stopped = await state.not_running_here(
        [("n1", running), ("n1", done), ("n2", deleted), ("n1", "uid-ghost"), ("n2", running)]
    )
    # A pod in the Running index is Running where it was (bound is for life): not read again.
    assert stopped == {done: PodPhase.SUCCEEDED, deleted: PodPhase.DELETED, "uid-ghost": None}
