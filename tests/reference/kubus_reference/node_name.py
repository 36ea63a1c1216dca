"""NodeName (Filter): a pod with spec.nodeName fits only the node of that name.

After kube's pkg/scheduler/framework/plugins/nodename/node_name.go.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo

ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: Pod, node_info: NodeInfo) -> bool:
    return not pod.spec.node_name or pod.spec.node_name == node_info.name


class NodeName:
    name: ClassVar[str] = "NodeName"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if not fits(pod, node_info):
            return Status.unschedulable(ERR_REASON, resolvable=False)
        return Status.success()
