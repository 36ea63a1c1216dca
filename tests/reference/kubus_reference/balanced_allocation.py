"""NodeResourcesBalancedAllocation (PreScore, Score): favors nodes whose resource fractions
(requested / allocatable, each capped at 1) stay close together after placing the pod.

score = int64((1 - std) * 100), where std is |f1 - f2| / 2 for two resources and the
population standard deviation for more (0 for fewer). Requests are the plain ones (no non-zero
defaults), and PreScore skips the plugin for a pod that requests none of the resources. After
kube's pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._allocation import ResourceAllocationScorer, resource_weights
from kubus_reference._gomath import go_int64

PRE_SCORE_STATE_KEY = "PreScoreNodeResourcesBalancedAllocation"


def balanced_resource_scorer(requested: list[int], allocatable: list[int]) -> int:
    """balancedResourceScorer, float64 operations in Go's order."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = float(req) / float(alloc)
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / float(len(fractions))
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / float(len(fractions)))
    return go_int64((1 - std) * float(MAX_NODE_SCORE))


def is_best_effort(pod_requests: Sequence[int]) -> bool:
    return all(r == 0 for r in pod_requests)


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """NodeResourcesBalancedAllocationArgs (`resources`), or None: cpu and memory."""
        resources = resource_weights(getattr(args, "resources", None))
        self.scorer = ResourceAllocationScorer(self.name, resources, balanced_resource_scorer, use_requested=True)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        requests = self.scorer.pod_request_list(pod)
        if is_best_effort(requests):
            # a pod requesting nothing would pile onto the already best-balanced node
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, requests)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        requests = state.get(PRE_SCORE_STATE_KEY)
        if requests is None:
            requests = self.scorer.pod_request_list(pod)
            if is_best_effort(requests):
                return 0
        return self.scorer.score(node_info, requests)
