"""NodePorts (PreFilter, Filter): a pod's host ports must be free on the node."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import numpy as np

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    POD_FREED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    removed_pod,
)
from kubus.framework.status import Status
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import host_port_conflicts, pod_host_ports

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
_STATE_KEY = "PreFilterNodePorts"


class NodePorts:
    name: ClassVar[str] = "NodePorts"
    placement_sensitive: ClassVar[bool] = True
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[None, Status]:
        ports = pod_host_ports(pod)
        if not ports:
            return None, Status.skip()
        state.write(_STATE_KEY, ports)
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        table = view.table
        conflict = np.zeros(table.rows, dtype=bool)
        for ip, proto, port in state.read(_STATE_KEY):
            for row in table.port_rows.get((proto, port), ()):
                info = table.infos[row]
                if info is not None and host_port_conflicts(info.used_ports, ip, proto, port):
                    conflict[row] = True
        return FilterResult.single(view.xp.asarray(~conflict)[rows], ERR_REASON)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube (with QueueingHints): Pod Delete, hinted by `is_schedulable_after_pod_deleted`;
        Node Add, unhinted (a new node always has every port free)."""
        return (
            *events_on(POD_FREED, self.is_schedulable_after_pod_deleted),
            ClusterEventWithHint(NODE_ADDED),
        )

    def is_schedulable_after_pod_deleted(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterPodDeleted: QUEUE when the pod that left a node held a host
        port this pod wants."""
        deleted = removed_pod(old)
        if deleted is None:
            return QueueingHint.QUEUE
        if not deleted.spec.node_name:
            return QueueingHint.QUEUE_SKIP  # it held no node
        freed = pod_host_ports(deleted)
        if not freed:
            return QueueingHint.QUEUE_SKIP
        in_use = Counter(freed)
        if any(host_port_conflicts(in_use, ip, proto, port) for ip, proto, port in pod_host_ports(pod)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
