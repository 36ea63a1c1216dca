"""Pods that name their node (`spec.nodeName`) are placed there, never queued (`NodePlacement`)."""

from __future__ import annotations

import time

from nats.js import JetStreamContext

from kubus.api.gpus import pod_gpu_devices, pod_gpu_request
from kubus.api.objects import Pod
from kubus.bus import Publication, announcements, publish_durable_many
from kubus.bus.messages import NodeAssignment
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins.gpu_fit import pick_devices
from kubus.queue._pods import record_event
from kubus.runtime.service import StructuredLogger
from kubus.store import (
    ClusterState,
    EventType,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReserveResult,
    StoreCode,
)
from kubus.store.cluster_state import Binding

__all__ = ["NodePlacement", "bound_publications"]


def _refusal(node: str, result: ReserveResult) -> tuple[str, str]:
    """kubelet-like (reason, message) for a reservation on a pod's own node that Redis refused:
    ``OutOfcpu``/``OutOfmemory``/``OutOfpods`` for room, ``NodePorts`` for a host port,
    ``NodeNotFound``/``NodeUnreachable`` for the node, ``UnexpectedAdmissionError`` else."""
    if result.code is StoreCode.NODE_GONE:
        if "unreachable" in result.reason:
            return "NodeUnreachable", f"node {node} is unreachable"
        return "NodeNotFound", f"node {node} not found"
    first = result.reasons[0] if result.reasons else ""
    if first == "Too many pods":
        reason = "OutOfpods"
    elif first.startswith("Insufficient "):
        reason = "OutOf" + first.removeprefix("Insufficient ")
    elif first.startswith("host port"):
        reason = "NodePorts"
    else:
        reason = "UnexpectedAdmissionError"
    return reason, f"node {node} didn't have room for the pod: {result.reason or result.code}"


class NodePlacement:
    """Pods that name their node (`spec.nodeName`): kube never schedules them, so neither do we.
    They are placed on that node with the protocol's own steps (docs/services.md, step 2): the
    attempt (`transition` Pending -> Reserved), `reserve`, `bind_many`, `announcements.bound`;
    the node's agent then admits them. A node that does not exist or has no room fails the pod
    (kubelet's reasons), with a Warning pod event: never queued, never lost."""

    def __init__(self, *, store: ClusterState, js: JetStreamContext, log: StructuredLogger) -> None:
        self.store = store
        self.js = js
        self.log = log

    async def place(self, record: PodRecord, pod: Pod, *, announce_bound: bool = False) -> None:
        """Place ``pod`` (stored as ``record``) on ``pod.spec.nodeName``, going on from wherever
        an earlier try stopped: Pending -> a new attempt; Reserved there -> that attempt (its
        record version; `reserve` and `bind_many` are idempotent on it); Bound there -> its
        bind announced again when ``announce_bound`` (message ids make that harmless). Any other
        phase: nothing. Every step after the attempt is conditional on it, so a pod that moved
        on (deleted, given back by the janitor) is left alone. Raises on Redis or NATS errors
        (the caller retries; what a crash leaves, the janitor repairs)."""
        node, uid, key = pod.spec.node_name, record.uid, record.key
        log = self.log.bind(pod=key, uid=uid, node=node)
        if record.phase is PodPhase.BOUND and record.node == node:
            held = await self.store.reservation(node, uid)
            if announce_bound and held is not None and held.attempt:
                await self._announce_bound(record, node, held.attempt, held.gpu_devices)
            return
        if record.phase is PodPhase.RESERVED and record.node == node:
            attempt, devices, refusal = record.version, record.gpu_devices, None
        elif record.phase is PodPhase.PENDING:
            devices, refusal = await self._gpu_devices_on(pod, node)
            w = await self.store.transition(
                uid, PodPhase.RESERVED, node=node, gpu_devices=devices, expected_phases={PodPhase.PENDING},
                count_attempt=True,
            )  # fmt: skip
            if not w.ok:
                log.info("node placement skipped: the pod moved on", code=str(w.code), phase=str(w.phase or "-"))
                return
            attempt = w.version
        else:
            return
        if refusal is None:
            try:
                reservation = Reservation.of(PodInfo.of(pod, devices), node, attempt=attempt)
            except ValueError as exc:
                refusal = "UnexpectedAdmissionError", f"node {node}: {exc}"
            else:
                reserved = await self.store.reserve(node, reservation)
                if not reserved.ok:
                    refusal = _refusal(node, reserved)
        if refusal is not None:
            await self._fail_placement(record, node, attempt, *refusal)
            return
        message = f"Assigned {key} to {node} (spec.nodeName: not scheduled)"
        event = PodEvent(time.time(), EventType.NORMAL, "Assigned", message, "queue")
        [bound] = await self.store.bind_many([Binding(uid, node, attempt, devices, record.profile, event)])
        if not bound.bound:  # deleted, or given back meanwhile: bind_many gave this attempt's room back
            log.info("node placement dropped: the pod moved on", marked=str(bound.marked))
            return
        await self._announce_bound(record, node, attempt, devices)
        log.info("pod placed on its node", attempt=attempt)

    async def _announce_bound(self, record: PodRecord, node: str, attempt: int, devices: tuple[int, ...]) -> None:
        await publish_durable_many(self.js, bound_publications(record, node, attempt, devices))

    async def _gpu_devices_on(self, pod: Pod, node: str) -> tuple[tuple[int, ...], tuple[str, str] | None]:
        """The GPU devices the pod gets on ``node``: () when it asks for none; those it pins
        (`kubus.io/gpu-devices`, which the manifest reader checked against its request); else
        GPUFit's pick (`pick_devices`) among the node's devices free now. Or why not: the node
        is missing, or has too few devices free (the reserve re-checks them atomically)."""
        request = pod_gpu_request(pod)
        if request is None:
            return (), None
        pinned = pod_gpu_devices(pod)
        if pinned:
            return pinned, None
        node_info = await self.store.node_info(node)
        if node_info is None:
            return (), ("NodeNotFound", f"node {node} not found")
        devices = pick_devices(request, node_info)
        if len(devices) < request.count:
            return (), (
                "UnexpectedAdmissionError",
                f"node {node}: requested number of GPU devices unavailable: requested {request.count}, "
                f"available {len(devices)}",
            )
        return devices, None

    async def _fail_placement(self, record: PodRecord, node: str, attempt: int, reason: str, message: str) -> None:
        """The attempt's end when the node refused the pod: Failed (conditional on the attempt;
        no room is held), a Warning pod event with kubelet's reason."""
        w = await self.store.transition(
            record.uid,
            PodPhase.FAILED,
            expected_version=attempt,
            expected_phases={PodPhase.RESERVED},
            reason=reason,
            message=message,
        )
        if not w.ok:
            return
        await record_event(self.store, record.uid, EventType.WARNING, reason, message, "queue")
        self.log.warning("pod refused by its node", pod=record.key, uid=record.uid, node=node, reason=reason,
                         message=message)  # fmt: skip


def bound_publications(record: PodRecord, node: str, attempt: int, devices: tuple[int, ...]) -> list[Publication]:
    """The bind announcement of a stored pod (its assignment and ``pod.bound``)."""
    assignment = NodeAssignment(
        uid=record.uid, key=record.key, node=node, manifest=record.manifest, gpu_devices=devices, attempt=attempt
    )
    return announcements.bound(assignment, record.profile, at=time.time())
