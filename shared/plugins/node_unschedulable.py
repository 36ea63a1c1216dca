"""NodeUnschedulable (Filter): cordoned nodes take only pods tolerating the unschedulable taint."""

from __future__ import annotations

from typing import ClassVar

from kubus.api.matching import tolerated
from kubus.api.objects import Pod, Taint, TaintEffect
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterResult, Rows
from kubus.framework.status import Code
from kubus.kernels.node_table import TableView

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)


class NodeUnschedulable:
    name: ClassVar[str] = "NodeUnschedulable"
    placement_sensitive: ClassVar[bool] = False

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        cordoned = view.unschedulable[rows]
        if tolerated(UNSCHEDULABLE_TAINT, pod.spec.tolerations):
            cordoned = view.xp.zeros_like(cordoned)
        return FilterResult.single(~cordoned, ERR_REASON_UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
