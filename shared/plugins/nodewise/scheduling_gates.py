"""SchedulingGates (PreEnqueue): a pod with spec.schedulingGates waits outside the activeQ.

After kube's pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubus.api.objects import Pod
from kubus.framework.status import Status


class SchedulingGates:
    name: ClassVar[str] = "SchedulingGates"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def pre_enqueue(self, pod: Pod) -> Status:
        """Success without gates; otherwise UnschedulableAndUnresolvable
        "waiting for scheduling gates: [a b]" (Go's %v of the gate names)."""
        gates = pod.spec.scheduling_gates
        if not gates:
            return Status.success()
        return Status.unschedulable(f"waiting for scheduling gates: [{' '.join(gates)}]", resolvable=False)
