"""TaintToleration (Filter, PreScore, Score, NormalizeScore).

Filter: the first NoSchedule/NoExecute taint the pod does not tolerate rejects the node.
Score: the number of PreferNoSchedule taints the pod does not tolerate, normalized in reverse
(fewest intolerable taints -> 100). After kube's
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from kubus.api.objects import Pod, Taint, TaintEffect, Toleration
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._normalize import default_normalize_score
from kubus_reference._selectors import (
    find_matching_untolerated_taint,
    tolerations_tolerate_taint,
)

PRE_SCORE_STATE_KEY = "PreScoreTaintToleration"


def untolerated_taint_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def do_not_schedule_taint(taint: Taint) -> bool:
    """helper.DoNotScheduleTaintsFilterFunc: the effects that keep a pod off a node."""
    return taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


def tolerations_prefer_no_schedule(tolerations: Sequence[Toleration]) -> tuple[Toleration, ...]:
    """getAllTolerationPreferNoSchedule: tolerations with no effect or PreferNoSchedule."""
    return tuple(t for t in tolerations if t.effect is None or t.effect is TaintEffect.PREFER_NO_SCHEDULE)


def count_intolerable_taints_prefer_no_schedule(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> int:
    return sum(
        1
        for taint in taints
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerations_tolerate_taint(tolerations, taint)
    )


class TaintToleration:
    name: ClassVar[str] = "TaintToleration"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        taint = find_matching_untolerated_taint(node_info.node.spec.taints, pod.spec.tolerations, do_not_schedule_taint)
        if taint is None:
            return Status.success()
        return Status.unschedulable(untolerated_taint_reason(taint), resolvable=False)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_STATE_KEY, tolerations_prefer_no_schedule(pod.spec.tolerations))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        tolerations = state.read(PRE_SCORE_STATE_KEY)
        return count_intolerable_taints_prefer_no_schedule(node_info.node.spec.taints, tolerations)

    def normalize_score(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        default_normalize_score(MAX_NODE_SCORE, True, scores)
