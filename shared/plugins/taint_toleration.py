"""TaintToleration (Filter, PreScore, Score): untolerated NoSchedule/NoExecute taints reject a
node; untolerated PreferNoSchedule taints lower its score."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kubus.api.matching import first_untolerated_taint, tolerated
from kubus.api.objects import Pod, Taint, TaintEffect
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, FilterResult, Rejection, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
)
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins._normalize import default_normalize_score

_STATE_KEY = "PreScoreTaintToleration"


def _hard(taint: Taint) -> bool:
    return taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


class TaintToleration:
    name: ClassVar[str] = "TaintToleration"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        # One answer per distinct taint list, gathered over the rows.
        sets = view.table.taint_sets.values
        reason_of = np.zeros(len(sets), dtype=np.int32)
        reasons: list[str] = []
        for i, taints in enumerate(sets):
            taint = first_untolerated_taint(taints, pod.spec.tolerations, _hard)
            if taint is not None:
                reason = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
                if reason not in reasons:
                    reasons.append(reason)
                reason_of[i] = reasons.index(reason) + 1
        xp = view.xp
        per_row = xp.asarray(reason_of)[view.taint_set[rows]]
        rejections = tuple(
            Rejection(r, per_row == k + 1, Code.UNSCHEDULABLE_AND_UNRESOLVABLE) for k, r in enumerate(reasons)
        )
        return FilterResult(per_row == 0, rejections)

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        prefer = tuple(t for t in pod.spec.tolerations if t.effect in (None, TaintEffect.PREFER_NO_SCHEDULE))
        state.write(_STATE_KEY, prefer)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        tolerations = state.read(_STATE_KEY)
        counts = np.array(
            [
                sum(1 for t in taints if t.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerated(t, tolerations))
                for taints in view.table.taint_sets.values
            ],
            dtype=np.int64,
        )
        return view.xp.asarray(counts)[view.taint_set[rows]]

    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        return default_normalize_score(xp, MAX_NODE_SCORE, True, scores)

    # ---- queueing hints ----------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Node Add | UpdateNodeTaint, hinted by `is_schedulable_after_node_change`."""
        return events_on((NODE_ADDED, NODE_UPDATED), self.is_schedulable_after_node_change)

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeChange: QUEUE when the node had an untolerated
        NoSchedule/NoExecute taint (or was just added) and now has none."""
        original, modified = node_change(old, new)
        if modified is None:
            return QueueingHint.QUEUE
        tolerations = pod.spec.tolerations
        was_untolerated = (
            original is None or first_untolerated_taint(original.spec.taints, tolerations, _hard) is not None
        )
        is_untolerated = first_untolerated_taint(modified.spec.taints, tolerations, _hard) is not None
        return QueueingHint.QUEUE if was_untolerated and not is_untolerated else QueueingHint.QUEUE_SKIP
