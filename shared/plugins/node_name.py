"""NodeName (Filter): a pod naming a node in spec.nodeName fits only that node."""

from __future__ import annotations

from typing import ClassVar

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.queueing_hints import NODE_ADDED, ClusterEventWithHint, EventObject, QueueingHint, node_change
from kubus.framework.status import Code
from kubus.kernels.node_table import TableView
from kubus.plugins._columns import node_name_mask

ERR_REASON = "node(s) didn't match the requested node name"


class NodeName:
    name: ClassVar[str] = "NodeName"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        if not pod.spec.node_name:
            return FilterResult(view.xp.ones(view.valid[rows].shape[0], dtype=bool))
        passed = node_name_mask(view, (pod.spec.node_name,), rows)
        return FilterResult.single(passed, ERR_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Node Add, hinted by `is_schedulable_after_node_add`."""
        return (ClusterEventWithHint(NODE_ADDED, self.is_schedulable_after_node_add),)

    def is_schedulable_after_node_add(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeAdd: QUEUE when the added node is the one the pod names
        (or it names none)."""
        _, added = node_change(old, new)
        if added is None or not pod.spec.node_name or pod.spec.node_name == added.name:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
