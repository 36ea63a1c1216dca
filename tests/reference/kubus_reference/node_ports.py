"""NodePorts (PreFilter, Filter): the pod's host ports must be free on the node.

After kube's pkg/scheduler/framework/plugins/nodeports/node_ports.go; the ports a pod wants and
the conflict rule (0.0.0.0 conflicts with every IP on the same protocol and port) are
`kubus.kernels.nodeinfo`'s, which follow kube's GetHostPorts and HostPortInfo.CheckConflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo, host_port_conflicts, pod_host_ports

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
PRE_FILTER_STATE_KEY = "PreFilterNodePorts"


class NodePorts:
    name: ClassVar[str] = "NodePorts"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        """Skip for a pod without host ports; otherwise remember the wanted ports."""
        ports = pod_host_ports(pod)
        if not ports:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, ports)
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        ports = state.get(PRE_FILTER_STATE_KEY)
        if ports is None:
            ports = pod_host_ports(pod)
        for ip, protocol, port in ports:
            if host_port_conflicts(node_info.used_ports, ip, protocol, port):
                return Status.unschedulable(ERR_REASON)
        return Status.success()
