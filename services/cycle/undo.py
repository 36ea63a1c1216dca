"""The one way back from a placement or a reservation (`Undo`): every failure after the Scheduler
placed a pod (and ran the Reserve plugins) goes through it, whatever step failed (reserving in
Redis, Permit, the lease lost, the hand-over to the binders)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from kubus.api.objects import Pod
from kubus.cycle.batch import Batch, uid
from kubus.cycle.nodes import NodeTableKeeper
from kubus.framework.cycle_state import CycleState
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import ScheduleResult
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState, PodWrite


class Undo:
    """Undoes one pod's placement: ``undo(pod, node, state, attempt=...)``.

    Every pod the Scheduler placed had its Reserve plugins run, so whatever failed after (as kube's
    schedulingCycle and bindingCycle do on every failure past Reserve):

    - Unreserve, in reverse order, with the pod's CycleState, on the node as the table has it now;
    - the pod taken off the node in the table (the one loaded now, if any);
    - the pod is Reserved in Redis at ``attempt``: the store step, returned to await (the rest
      is done at once), gives that attempt's room back and makes the pod Pending again, in one
      step conditional on the attempt (`ClusterState.give_back`), so a newer attempt is never
      touched. A store that does not answer is logged: the janitor gives it back later.
    """

    def __init__(
        self, *, store: ClusterState, framework: Framework, nodes: NodeTableKeeper, log: StructuredLogger
    ) -> None:
        self.store = store
        self.framework = framework
        self.nodes = nodes
        self.log = log

    def __call__(
        self, pod: Pod, node: str, state: CycleState | None = None, *, attempt: int | None = None
    ) -> Awaitable[None]:
        """Undo the placement of ``pod`` on ``node`` now; return the store step (done at once
        when there is none: ``attempt`` None). Never raises for Redis being away."""
        loaded = self.nodes.loaded
        if self.framework.reserve and loaded is not None and node in loaded.snapshot.table.row_of:
            table = loaded.snapshot.table
            self.framework.run_unreserve(state or CycleState(), pod, table.node_info(table.row_of[node]))
        if loaded is not None and node:
            loaded.snapshot.forget(pod.key, node)
        if attempt is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._give_back(pod, node, attempt)

    def failed(
        self, batch: Batch, result: ScheduleResult, exc: Exception, *, attempt: int | None = None
    ) -> Awaitable[None]:
        """Reserving ``result`` failed with ``exc``: undone (given back in the store too when
        Reserved there at ``attempt``), the error its outcome. Returns the store step."""
        step = self(result.pod, result.node or "", result.state, attempt=attempt)
        batch.error(uid(result.pod), f"reserving on node {result.node} failed: {exc!r}")
        return step

    def not_pending(self, batch: Batch, result: ScheduleResult, write: PodWrite) -> None:
        """Someone else moved the pod (deleted, or reserved by another attempt): not ours. Taken
        off the table (Unreserve run), skipped: not an attempt."""
        pod, node, pod_uid = result.pod, result.node or "", uid(result.pod)
        self(pod, node, result.state)
        batch.skipped.add(pod_uid)
        batch.error(pod_uid, f"not scheduled: the pod is {write.phase or 'gone'} now, no longer Pending")
        self.log.info(
            "pod skipped: no longer Pending",
            pod=pod.key,
            uid=pod_uid,
            code=str(write.code),
            phase=str(write.phase or "-"),
        )

    async def _give_back(self, pod: Pod, node: str, attempt: int) -> None:
        try:
            await self.store.give_back(uid(pod), node, attempt)
        except TRANSIENT_ERRORS as exc:
            self.log.warning("give back failed; the janitor will", pod=pod.key, node=node, error=repr(exc))
