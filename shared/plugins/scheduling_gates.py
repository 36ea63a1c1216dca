"""SchedulingGates (PreEnqueue): a pod with spec.schedulingGates waits until they are removed."""

from __future__ import annotations

from typing import ClassVar

from kubus.api.objects import Pod
from kubus.framework.queueing_hints import ClusterEventWithHint
from kubus.framework.status import Code, Status


class SchedulingGates:
    name: ClassVar[str] = "SchedulingGates"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def pre_enqueue(self, pod: Pod) -> Status:
        gates = pod.spec.scheduling_gates
        if not gates:
            return Status.success()
        # kube formats the gate names as Go's %v of a []string
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"waiting for scheduling gates: [{' '.join(gates)}]",))

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """None: no cluster event lifts a gate. A gated pod leaves the gated set only when it is
        updated without gates (kube's UpdatePodSchedulingGatesEliminated, on the pod itself)."""
        return ()
