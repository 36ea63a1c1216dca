"""NodeUnschedulable (Filter): nodes with spec.unschedulable, unless the pod tolerates the
node.kubernetes.io/unschedulable:NoSchedule taint.

After kube's pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubus.api.objects import Pod, Taint, TaintEffect
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._selectors import tolerations_tolerate_taint

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_UNSCHEDULABLE_TAINT = Taint(key=TAINT_NODE_UNSCHEDULABLE, effect=TaintEffect.NO_SCHEDULE)


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if not node_info.node.spec.unschedulable:
            return Status.success()
        if tolerations_tolerate_taint(pod.spec.tolerations, _UNSCHEDULABLE_TAINT):
            return Status.success()
        return Status.unschedulable(ERR_REASON_UNSCHEDULABLE, resolvable=False)
