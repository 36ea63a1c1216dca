"""Reserving a batch's placed pods in Redis (`Reserver`, docs/services.md 4a and 4b): one
pipelined round trip for the batch, each pod's room and attempt in one atomic step."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Sequence

from kubus.api.attempts import NO_ATTEMPT
from kubus.core.metrics import Metrics
from kubus.cycle.batch import Attempted, Batch, Refused, Reserved, lost_lease_message, uid
from kubus.cycle.preempting import Preemptions
from kubus.cycle.reservation import ReservationMaker
from kubus.cycle.snapshot import NodeSnapshot
from kubus.cycle.undo import Undo
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY
from kubus.framework.scheduling import ScheduleResult
from kubus.kernels import NodeTable, PodInfo
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState, Reservation, StoreCode

RESERVE_EXTENSION_POINT = "Reserve"
"""`extension_point` label of the batch's reservations in Redis (RESERVE_PODS, or a preemptor's
TRANSITION and PREEMPT)."""


class Reserver:
    """Reserves placed pods in Redis; what Redis refuses or fails is undone (`Undo`)."""

    def __init__(
        self,
        *,
        store: ClusterState,
        profile: str,
        leadership: Leadership,
        reservation: ReservationMaker,
        preemptions: Preemptions,
        undo: Undo,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.profile = profile
        self.leadership = leadership
        self.reservation = reservation
        self.preemptions = preemptions
        self.undo = undo
        self.metrics = metrics
        self.log = log

    async def reserve(
        self, batch: Batch, placed: list[ScheduleResult], snapshot: NodeSnapshot
    ) -> tuple[list[Reserved], list[Refused]]:
        """docs/services.md 4a and 4b for the placed pods, one pipelined round trip for the
        batch: most pods' attempt and room in one step each (`ClusterState.reserve_attempts`),
        a preemptor's attempt then its victims' eviction and its room (`Preemptions`).

        Returns (the pods Redis reserved, assumed reserved in the table; the pods it refused,
        CONFLICT / NODE_GONE, Pending in Redis and undone here). Every other pod is undone and
        decided; FENCED makes this replica step down."""
        if not placed:
            return [], []
        started = time.perf_counter()
        table = snapshot.table
        wanted: list[tuple[ScheduleResult, PodInfo]] = []
        for result in placed:
            pod_info = result.pod_info or PodInfo.of(result.pod, result.gpu_devices)
            if pod_info.gpu is not None and len(result.gpu_devices) != pod_info.gpu.count:
                self.undo(result.pod, result.node or "", result.state)
                batch.error(
                    uid(result.pod),
                    f"pod {result.pod.key} asks for {pod_info.gpu.count} GPU(s) but profile {self.profile!r} "
                    f"picked {len(result.gpu_devices)} device(s) on node {result.node}: enable the GPUFit plugin "
                    "to schedule GPU pods",
                )
                continue
            wanted.append((result, pod_info))
        preemptors = [w for w in wanted if uid(w[0].pod) in batch.victims]
        attempts = await self._attempt(batch, [w for w in wanted if uid(w[0].pod) not in batch.victims], table)
        attempts += await self.preemptions.attempt(batch, preemptors, table)
        reserved: list[Reserved] = []
        refused: list[Refused] = []
        undo: list[Awaitable[None]] = []
        for result, attempt, reservation, answer, in_store in attempts:
            pod, node, pod_uid = result.pod, result.node or "", uid(result.pod)
            if answer.ok:
                devices = tuple(result.gpu_devices)
                if answer.gpu_devices is not None and answer.gpu_devices != devices:
                    reservation = self._moved_devices(result, reservation, answer.gpu_devices, table)
                    devices = answer.gpu_devices
                reserved.append(Reserved(result, node, attempt, reservation, devices))
                snapshot.reserved(pod.key, node, attempt)
                continue
            step = self.undo(pod, node, result.state, attempt=attempt if in_store else None)
            if in_store:  # Reserved in Redis: the attempt is given back there too
                undo.append(step)
            if answer.code is StoreCode.FENCED:
                self.leadership.step_down(f"reservation fenced on node {node}: {answer.reason}")
                batch.error(pod_uid, lost_lease_message(self.profile))
                continue
            if answer.code is StoreCode.CONFLICT:
                batch.conflicts += 1
                self.metrics.reserve_conflicts.labels(profile=self.profile).inc()
            self.log.info(
                "reservation refused", pod=pod.key, uid=pod_uid, node=node, code=str(answer.code), reason=answer.reason
            )
            refused.append(Refused(result, node, answer.code, answer.reason))
        await asyncio.gather(*undo)
        self.metrics.extension_point_duration.labels(
            extension_point=RESERVE_EXTENSION_POINT, status="Success", profile=self.profile
        ).observe(time.perf_counter() - started)
        return reserved, refused

    async def _attempt(
        self, batch: Batch, wanted: Sequence[tuple[ScheduleResult, PodInfo]], table: NodeTable
    ) -> list[Attempted]:
        """4a and 4b in one store step per pod (RESERVE_PODS): the room, then Pending -> Reserved.
        A refused room leaves the pod Pending in Redis (in_store False: only Unreserve and the
        table to undo)."""
        holds: list[tuple[ScheduleResult, Reservation]] = []
        for result, pod_info in wanted:
            try:
                holds.append((result, self.reservation(batch, result, pod_info, NO_ATTEMPT, table)))
            except ValueError as exc:
                self.undo.failed(batch, result, exc)
        try:
            answers = await self.store.reserve_attempts(self.profile, [r for _, r in holds])
        except TRANSIENT_ERRORS as exc:
            for result, _ in holds:  # each step was atomic: any that ran is the janitor's
                self.undo.failed(batch, result, exc)
            return []
        out: list[Attempted] = []
        for (result, reservation), answer in zip(holds, answers, strict=True):
            if answer.room is None:
                self.undo.not_pending(batch, result, answer.write)
                continue
            attempt = answer.write.version  # OK: the attempt made; NOOP: the pod's version, unchanged
            out.append((result, attempt, dataclasses.replace(reservation, attempt=attempt), answer.room, False))
        return out

    def _moved_devices(
        self, result: ScheduleResult, reservation: Reservation, devices: tuple[int, ...], table: NodeTable
    ) -> Reservation:
        """RESERVE gave the pod other devices than the Scheduler picked (another profile took
        those): the table, the pod's CycleState (what Unreserve and Permit see) and the
        reservation announced follow. Returns that reservation."""
        pod, node = result.pod, result.node or ""
        if node in table and pod.key in table.node_info(node).pods:
            pod_info = table.forget(pod.key, node)
            table.assume(pod_info.placed_on(devices), node)
        if result.state is not None:
            result.state.write(GPU_DEVICES_STATE_KEY, devices)
        self.metrics.reserve_device_repicks.labels(profile=self.profile).inc()
        self.log.debug("devices picked again by the store", pod=pod.key, node=node, devices=list(devices))
        return dataclasses.replace(reservation, gpu_devices=devices)
