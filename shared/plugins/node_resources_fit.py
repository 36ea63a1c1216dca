"""NodeResourcesFit (PreFilter, Filter, PreScore, Score): the node must have room for the pod's
requests; scored by LeastAllocated (default), MostAllocated or RequestedToCapacityRatio."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from kubus.api.objects import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Node, Pod
from kubus.api.requests import pod_nonzero_requests, pod_requests
from kubus.api.resource_names import is_extended_resource_name
from kubus.framework.config.args import MAX_CUSTOM_PRIORITY_SCORE
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, FilterResult, Rejection, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    POD_FREED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
    removed_pod,
)
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins._columns import go_div
from kubus.plugins._resources import allocatable_and_requested

_PRE_FILTER_KEY = "PreFilterNodeResourcesFit"
"""The (resource, quantity, reason) checks of the pod's requests (`NodeResourcesFit._checks`)."""
_PRE_SCORE_KEY = "PreScoreNodeResourcesFit"
TOO_MANY_PODS = "Too many pods"
MAX_UTILIZATION = 100

_Scorer: TypeAlias = Callable[[ArrayModule, tuple[list[Array], list[Array]], list[int]], Array]
"""`scorer(xp, (allocatable, requested) per resource, weights)`: an int64 score per row."""


@dataclass(frozen=True, slots=True)
class ResourceWeight:
    name: str
    weight: int


def _strategy(args: object) -> tuple[str, tuple[ResourceWeight, ...], tuple[tuple[int, int], ...]]:
    """(type, resources, shape) from NodeResourcesFitArgs, with kube's defaults."""
    s = getattr(args, "scoring_strategy", None)
    kind = getattr(s, "type", None) or "LeastAllocated"
    resources = tuple(ResourceWeight(r.name, r.weight) for r in (getattr(s, "resources", None) or ()))
    if not resources:
        resources = (ResourceWeight(CPU, 1), ResourceWeight(MEMORY, 1))
    ratio = getattr(s, "requested_to_capacity_ratio", None)
    shape = tuple((p.utilization, p.score) for p in (getattr(ratio, "shape", None) or ()))
    return str(getattr(kind, "value", kind)), resources, shape


class NodeResourcesFit:
    name: ClassVar[str] = "NodeResourcesFit"
    placement_sensitive: ClassVar[bool] = True
    reads_table_only: ClassVar[bool] = True
    reads_view_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        self.ignored_resources = frozenset(getattr(args, "ignored_resources", None) or ())
        self.ignored_groups = frozenset(getattr(args, "ignored_resource_groups", None) or ())
        kind, self.resources, shape = _strategy(args)
        self.strategy = kind
        self.scorer: _Scorer = {
            "LeastAllocated": _least_allocated,
            "MostAllocated": _most_allocated,
            "RequestedToCapacityRatio": _requested_to_capacity_ratio(shape),
        }[kind]

    # ---- filter ------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[None, Status]:
        state.write(_PRE_FILTER_KEY, self._checks(pod_requests(pod)))
        return None, Status.success()

    def _ignored(self, name: str) -> bool:
        if not is_extended_resource_name(name):
            return False
        return name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_groups

    def ignored_requests(self, requests: Iterable[str]) -> tuple[str, ...]:
        """The resource names among ``requests`` this plugin does not check (its
        ignoredResources and ignoredResourceGroups args; extended resources only, as kube): a
        reservation leaves them out of Redis's capacity check too."""
        return tuple(name for name in requests if self._ignored(name))

    def _checks(self, request: dict[str, int]) -> tuple[tuple[str, int, str], ...]:
        """(resource, quantity, reason) for each request Filter checks, in kube's order."""
        return tuple(
            (name, request[name], f"Insufficient {name}")
            for name in _ordered(request)
            if request[name] != 0 and name != PODS and not self._ignored(name)
        )

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        xp = view.xp
        index = view.table.resource_index
        checks: tuple[tuple[str, int, str], ...] = state.read(_PRE_FILTER_KEY)
        alloc, req = view.alloc, view.req
        pods = index[PODS]
        positions = [index.get(name) for name, _, _ in checks]
        if None not in positions:
            # When every row fits (most calls: the rows a placement touched), no reason masks:
            # one comparison over the checked resources' rows at once.
            a, r = alloc[:, rows], req[:, rows]
            fits = r[pods] + 1 <= a[pods]
            if positions:
                wanted = xp.asarray([qty for _, qty, _ in checks], dtype=xp.int64)[:, None]
                fits &= (wanted <= a[positions] - r[positions]).all(axis=0)
            if bool(fits.all()):
                return FilterResult(fits)
        too_many = req[pods, rows] + 1 > alloc[pods, rows]
        n = too_many.shape[0]
        rejections = [Rejection(TOO_MANY_PODS, too_many)]
        for name, qty, reason in checks:
            i = index.get(name)
            if i is None:  # no node has this resource at all
                rejections.append(Rejection(reason, xp.ones(n, dtype=bool), Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
                continue
            allocatable = alloc[i, rows]
            short = qty > allocatable - req[i, rows]
            # kube: a request beyond the node's allocatable is UnschedulableAndUnresolvable
            # (no preemption can help there); the reason reads the same
            beyond = qty > allocatable
            rejections.append(Rejection(reason, short & ~beyond))
            rejections.append(Rejection(reason, beyond, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        return FilterResult.of(xp, rejections, n)

    # ---- score -------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        state.write(_PRE_SCORE_KEY, _pod_score_requests(pod, [r.name for r in self.resources], use_requested=False))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        return _resource_score(view, rows, self.resources, state.read(_PRE_SCORE_KEY), self.scorer, use_requested=False)

    # ---- queueing hints ----------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Pod Delete hinted by `is_schedulable_after_pod_event` (kubus has no in-place
        resize, so no UpdatePodScaleDown); Node Add | UpdateNodeAllocatable hinted by
        `is_schedulable_after_node_change`."""
        return (
            *events_on(POD_FREED, self.is_schedulable_after_pod_event),
            *events_on((NODE_ADDED, NODE_UPDATED), self.is_schedulable_after_node_change),
        )

    def is_schedulable_after_pod_event(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterPodEvent for a deletion: QUEUE when the pod that left held
        room on a node (any scheduled pod's room may be what this pod lacked)."""
        deleted = removed_pod(old)
        if deleted is not None and not deleted.spec.node_name:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeChange: QUEUE when the pod would fit the node empty and
        the node was added, or one of the resources the pod requests (or its pod count) grew."""
        original, modified = node_change(old, new)
        if modified is None:
            return QueueingHint.QUEUE
        request = pod_requests(pod)
        if not self._fits_empty(request, modified):
            return QueueingHint.QUEUE_SKIP
        if original is None:
            return QueueingHint.QUEUE
        grown = original.status.allocatable, modified.status.allocatable
        return QueueingHint.QUEUE if _requested_resources_grew(request, *grown) else QueueingHint.QUEUE_SKIP

    def _fits_empty(self, request: dict[str, int], node: Node) -> bool:
        """kube's isFit: the pod fits the node with nothing on it."""
        allocatable = node.status.allocatable
        if allocatable.get(PODS, 0) < 1:
            return False
        return all(
            qty <= allocatable.get(name, 0)
            for name, qty in request.items()
            if qty > 0 and name != PODS and not self._ignored(name)
        )


def _requested_resources_grew(request: dict[str, int], before: dict[str, int], after: dict[str, int]) -> bool:
    """kube's haveAnyRequestedResourcesIncreased: the allowed pod count, or the allocatable of a
    resource the pod requests, grew."""
    if after.get(PODS, 0) > before.get(PODS, 0):
        return True
    return any(after.get(name, 0) > before.get(name, 0) for name, qty in request.items() if qty > 0 and name != PODS)


def _ordered(request: dict[str, int]) -> list[str]:
    """kube checks cpu, memory, ephemeral-storage, then the scalar resources."""
    first = [r for r in (CPU, MEMORY, EPHEMERAL_STORAGE) if r in request]
    return first + sorted(r for r in request if r not in (CPU, MEMORY, EPHEMERAL_STORAGE))


def _pod_score_requests(pod: Pod, names: Sequence[str], *, use_requested: bool) -> list[int]:
    """The pod's request per scored resource; cpu/memory count missing requests at kube's
    defaults unless `use_requested`."""
    plain = pod_requests(pod)
    nz_cpu, nz_mem = pod_nonzero_requests(pod)
    out = []
    for name in names:
        if not use_requested and name == CPU:
            out.append(nz_cpu)
        elif not use_requested and name == MEMORY:
            out.append(nz_mem)
        else:
            out.append(plain.get(name, 0))
    return out


def _resource_score(
    view: TableView,
    rows: Rows,
    resources: Sequence[ResourceWeight],
    pod_request: Sequence[int],
    scorer: _Scorer,
    *,
    use_requested: bool,
) -> Array:
    """kube's resourceAllocationScorer.score over rows: [resource][row] matrices to the scorer."""
    cols = [
        allocatable_and_requested(view, r.name, q, rows, use_requested=use_requested)
        for r, q in zip(resources, pod_request, strict=True)
    ]
    alloc = [c[0] for c in cols]
    req = [c[1] for c in cols]
    weights = [r.weight for r in resources]
    return scorer(view.xp, (alloc, req), weights)


def _weighted_mean(xp: ArrayModule, alloc: list[Array], scores: list[Array], weights: list[int]) -> Array:
    """kube's `nodeScore / weightSum` over the resources the node has (allocatable != 0).

    The common case, every node having every resource, takes no masks at all.
    """
    n = alloc[0].shape[0] if alloc else 0
    total = xp.zeros(n, dtype=xp.int64)
    weight_sum: Array = 0
    for a, s, w in zip(alloc, scores, weights, strict=True):
        if bool(a.all()):
            total += s * w
            weight_sum = weight_sum + w
        else:
            has = a != 0
            total += xp.where(has, s * w, 0)
            weight_sum = weight_sum + has * w
    if isinstance(weight_sum, int):
        return total // weight_sum if weight_sum else total * 0
    return xp.where(weight_sum == 0, 0, total // xp.maximum(weight_sum, 1))


def _least_allocated(xp: ArrayModule, cols: tuple[list[Array], list[Array]], weights: list[int]) -> Array:
    """((allocatable - requested) * 100) / allocatable per resource, 0 when over capacity."""
    alloc, req = cols
    # floor division of a negative (over capacity) gives a negative: clamping makes it 0
    scores = [xp.maximum((a - r) * MAX_NODE_SCORE // xp.maximum(a, 1), 0) for a, r in zip(alloc, req, strict=True)]
    return _weighted_mean(xp, alloc, scores, weights)


def _most_allocated(xp: ArrayModule, cols: tuple[list[Array], list[Array]], weights: list[int]) -> Array:
    """(min(requested, allocatable) * 100) / allocatable per resource."""
    alloc, req = cols
    scores = [xp.minimum(r, a) * MAX_NODE_SCORE // xp.maximum(a, 1) for a, r in zip(alloc, req, strict=True)]
    return _weighted_mean(xp, alloc, scores, weights)


def _requested_to_capacity_ratio(shape: tuple[tuple[int, int], ...]) -> _Scorer:
    """kube's RequestedToCapacityRatio: a broken-linear function of utilization; shape scores
    (0..10) are scaled to 0..100 as kube does."""
    points = [(u, s * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for u, s in shape] or [(0, 0), (100, 100)]

    def broken_linear(xp: ArrayModule, p: Array) -> Array:
        out = xp.full(p.shape, points[-1][1], dtype=xp.int64)
        decided = xp.zeros(p.shape, dtype=bool)
        for i, (u, s) in enumerate(points):
            here = (~decided) & (p <= u)
            if i == 0:
                val = xp.full(p.shape, s, dtype=xp.int64)
            else:
                pu, ps = points[i - 1]
                val = ps + go_div(xp, (s - ps) * (p - pu), xp.full(p.shape, u - pu, dtype=xp.int64))
            out = xp.where(here, val, out)
            decided |= here
        return out

    def scorer(xp: ArrayModule, cols: tuple[list[Array], list[Array]], weights: list[int]) -> Array:
        alloc, req = cols
        n = alloc[0].shape[0] if alloc else 0
        total = xp.zeros(n, dtype=xp.int64)
        wsum = xp.zeros(n, dtype=xp.int64)
        for a, r, w in zip(alloc, req, weights, strict=True):
            util = xp.where((a == 0) | (r > a), MAX_UTILIZATION, r * MAX_UTILIZATION // xp.maximum(a, 1))
            score = broken_linear(xp, util)
            counted = (a != 0) & (score > 0)  # kube counts only positive resource scores
            total += xp.where(counted, score * w, 0)
            wsum += xp.where(counted, w, 0)
        mean = total.astype(xp.float64) / xp.maximum(wsum, 1).astype(xp.float64)
        return xp.where(wsum == 0, 0, xp.floor(mean + 0.5).astype(xp.int64))  # Go math.Round, x >= 0

    return scorer
