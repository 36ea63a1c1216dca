"""NodeUnschedulable (Filter): cordoned nodes take only pods tolerating the unschedulable taint."""

from __future__ import annotations

from typing import ClassVar

from kubus.api.matching import tolerated
from kubus.api.objects import UNSCHEDULABLE_TAINT, Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
)
from kubus.framework.status import Code
from kubus.kernels.node_table import TableView

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        cordoned = view.unschedulable[rows]
        if tolerated(UNSCHEDULABLE_TAINT, pod.spec.tolerations):
            cordoned = view.xp.zeros_like(cordoned)
        return FilterResult.single(~cordoned, ERR_REASON_UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Node Add | UpdateNodeTaint, hinted by `is_schedulable_after_node_change`."""
        return events_on((NODE_ADDED, NODE_UPDATED), self.is_schedulable_after_node_change)

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeChange: QUEUE when a schedulable node was added or a
        cordoned one uncordoned."""
        original, modified = node_change(old, new)
        if modified is None:
            return QueueingHint.QUEUE
        if not modified.spec.unschedulable and (original is None or original.spec.unschedulable):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
