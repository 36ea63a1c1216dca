"""NodeResourcesBalancedAllocation (PreScore, Score): prefer nodes whose resource fractions stay
balanced after placing the pod: score = (1 - standard deviation of the fractions) * 100."""

from __future__ import annotations

from typing import ClassVar

from kubus.api.objects import CPU, MEMORY, Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, Rows
from kubus.framework.status import Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins.node_resources_fit import ResourceWeight, _pod_score_requests, _resource_score

_PRE_SCORE_KEY = "PreScoreNodeResourcesBalancedAllocation"


def _balanced(xp: ArrayModule, cols: tuple[list[Array], list[Array]], weights: list[int]) -> Array:
    """kube's balancedResourceScorer, float64 operations in Go's order.

    Go keeps only the fractions of resources the node has (allocatable != 0), capped at 1;
    with exactly two it uses |f0 - f1| / 2, with more the population standard deviation.
    """
    alloc, req = cols
    fractions, counted = [], []
    for a, r in zip(alloc, req, strict=True):
        has = a != 0
        f = r.astype(xp.float64) / xp.where(has, a, 1).astype(xp.float64)
        fractions.append(xp.minimum(f, 1.0))
        counted.append(has)
    if len(fractions) == 2:
        both = counted[0] & counted[1]
        std = xp.where(both, xp.abs((fractions[0] - fractions[1]) / 2), 0.0)
    elif len(fractions) > 2:
        n = alloc[0].shape[0]
        count = xp.zeros(n, dtype=xp.int64)
        total = xp.zeros(n, dtype=xp.float64)
        first = xp.zeros(n, dtype=xp.float64)
        second = xp.zeros(n, dtype=xp.float64)
        for f, has in zip(fractions, counted, strict=True):
            first = xp.where(has & (count == 0), f, first)
            second = xp.where(has & (count == 1), f, second)
            total = total + xp.where(has, f, 0.0)
            count += has
        mean = total / xp.where(count == 0, 1, count).astype(xp.float64)
        acc = xp.zeros(n, dtype=xp.float64)
        for f, has in zip(fractions, counted, strict=True):
            acc = acc + xp.where(has, (f - mean) * (f - mean), 0.0)
        many = xp.sqrt(acc / xp.where(count == 0, 1, count).astype(xp.float64))
        std = xp.where(count == 2, xp.abs((first - second) / 2), xp.where(count > 2, many, 0.0))
    else:
        std = xp.zeros(alloc[0].shape[0] if alloc else 0, dtype=xp.float64)
    return ((1 - std) * MAX_NODE_SCORE).astype(xp.int64)


class NodeResourcesBalancedAllocation:
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    placement_sensitive: ClassVar[bool] = True
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        resources = getattr(args, "resources", None) or ()
        self.resources = tuple(ResourceWeight(r.name, r.weight) for r in resources) or (
            ResourceWeight(CPU, 1),
            ResourceWeight(MEMORY, 1),
        )

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        requests = _pod_score_requests(pod, [r.name for r in self.resources], use_requested=True)
        if not any(requests):
            # a best-effort pod would pile onto the already best-balanced node (kube skips it)
            return Status.skip()
        state.write(_PRE_SCORE_KEY, requests)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        return _resource_score(view, rows, self.resources, state.read(_PRE_SCORE_KEY), _balanced, use_requested=True)
