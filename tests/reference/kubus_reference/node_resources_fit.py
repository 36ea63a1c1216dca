"""NodeResourcesFit (PreFilter, Filter, PreScore, Score).

Filter: the node must hold one more pod ("Too many pods") and the pod's requests on top of what
is requested there already; every shortfall is reported ("Insufficient cpu", ...), and the
status is UnschedulableAndUnresolvable when a request exceeds even the empty node's allocatable.
Extended resources named in ignoredResources, or whose domain is in ignoredResourceGroups, are
not checked. Score: LeastAllocated, MostAllocated or RequestedToCapacityRatio over the
configured resources and weights. After kube's
pkg/scheduler/framework/plugins/noderesources/{fit,least_allocated,most_allocated,
requested_to_capacity_ratio}.go and helper/shape_score.go.

kube checks the scalar resources in Go map order, which is random; here they are checked, and
their reasons listed, sorted by name (after pods, cpu, memory and ephemeral-storage).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kubus.api.objects import Pod
from kubus.api.requests import pod_requests
from kubus.api.resource_names import is_extended_resource_name
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._allocation import ResourceAllocationScorer, Scorer, resource_weights
from kubus_reference._gomath import go_div, go_round
from kubus_reference._resources import Resource

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100
PRE_FILTER_STATE_KEY = "PreFilterNodeResourcesFit"
PRE_SCORE_STATE_KEY = "PreScoreNodeResourcesFit"


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    resource_name: str
    reason: str
    requested: int
    used: int
    capacity: int
    unresolvable: bool = False
    """The request exceeds the node's allocatable: preempting pods there cannot help."""


def fits_request(
    request: Resource,
    node_info: NodeInfo,
    ignored_extended_resources: frozenset[str] = frozenset(),
    ignored_resource_groups: frozenset[str] = frozenset(),
) -> list[InsufficientResource]:
    """fitsRequest: every resource the node lacks for the pod, in kube's order."""
    out: list[InsufficientResource] = []
    allocatable = Resource.of(node_info.allocatable)
    requested = Resource.of(node_info.requested)
    used_pods = len(node_info.pods)
    allowed = allocatable.allowed_pod_number
    if used_pods + 1 > allowed:
        out.append(InsufficientResource("pods", "Too many pods", 1, used_pods, allowed))
    if request.milli_cpu == 0 and request.memory == 0 and request.ephemeral_storage == 0 and not request.scalar:
        return out
    for name, want, have, cap in (
        ("cpu", request.milli_cpu, requested.milli_cpu, allocatable.milli_cpu),
        ("memory", request.memory, requested.memory, allocatable.memory),
        (
            "ephemeral-storage",
            request.ephemeral_storage,
            requested.ephemeral_storage,
            allocatable.ephemeral_storage,
        ),
    ):
        if want > 0 and want > cap - have:
            out.append(InsufficientResource(name, f"Insufficient {name}", want, have, cap, want > cap))
    for name in sorted(request.scalar):
        want = request.scalar[name]
        if want == 0:
            continue
        if is_extended_resource_name(name):
            group = name.split("/")[0] if ignored_resource_groups else ""
            if name in ignored_extended_resources or group in ignored_resource_groups:
                continue
        have, cap = requested.scalar.get(name, 0), allocatable.scalar.get(name, 0)
        if want > cap - have:
            out.append(InsufficientResource(name, f"Insufficient {name}", want, have, cap, want > cap))
    return out


def compute_pod_resource_request(pod: Pod) -> Resource:
    """computePodResourceRequest: the pod's effective requests (max of init containers, sum of
    containers and sidecars, plus overhead), as kube's Resource."""
    return Resource.max_of(pod_requests(pod))


# ---- scoring strategies ------------------------------------------------------------------------


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return go_div((capacity - requested) * MAX_NODE_SCORE, capacity)


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    # requested can exceed capacity: pods without requests count the non-zero defaults
    requested = min(requested, capacity)
    return go_div(requested * MAX_NODE_SCORE, capacity)


def _weighted_average(per_resource: Callable[[int, int], int], weights: Sequence[int]) -> Scorer:
    def scorer(requested: list[int], allocatable: list[int]) -> int:
        node_score = weight_sum = 0
        for i, alloc in enumerate(allocatable):
            if alloc == 0:
                continue
            node_score += per_resource(requested[i], alloc) * weights[i]
            weight_sum += weights[i]
        return 0 if weight_sum == 0 else go_div(node_score, weight_sum)

    return scorer


def broken_linear_function(shape: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """helper.BuildBrokenLinearFunction over (utilization, score) points, Go integer math."""

    def f(p: int) -> int:
        for i, (util, score) in enumerate(shape):
            if p <= util:
                if i == 0:
                    return shape[0][1]
                u0, s0 = shape[i - 1]
                return s0 + go_div((score - s0) * (p - u0), util - u0)
        return shape[-1][1]

    return f


def scaled_utilization(requested: int, capacity: int, maximum: int) -> int:
    """requested * maximum / capacity with requested clamped to [0, capacity]."""
    if capacity <= 0 or requested <= 0:
        return 0
    if requested >= capacity:
        return maximum
    return requested * maximum // capacity


def requested_to_capacity_ratio_scorer(weights: Sequence[int], shape: Sequence[tuple[int, int]]) -> Scorer:
    """`shape` in the config's units (score 0..10); scaled to 0..100 as kube does."""
    scale = go_div(MAX_NODE_SCORE, MAX_CUSTOM_PRIORITY_SCORE)
    raw = broken_linear_function([(u, s * scale) for u, s in shape])

    def resource_score(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(scaled_utilization(requested, capacity, MAX_UTILIZATION))

    def scorer(requested: list[int], allocatable: list[int]) -> int:
        node_score = weight_sum = 0
        for i, alloc in enumerate(allocatable):
            if alloc == 0:
                continue
            s = resource_score(requested[i], alloc)
            if s > 0:
                node_score += s * weights[i]
                weight_sum += weights[i]
        if weight_sum == 0:
            return 0
        return go_round(float(node_score) / float(weight_sum))

    return scorer


def _strategy_type(strategy: Any) -> str:
    t = getattr(strategy, "type", None) or LEAST_ALLOCATED
    return str(getattr(t, "value", t))


def _shape(strategy: Any) -> list[tuple[int, int]]:
    param = getattr(strategy, "requested_to_capacity_ratio", None)
    points = getattr(param, "shape", None) if param is not None else None
    if not points:
        raise ValueError("NodeResourcesFit: RequestedToCapacityRatio needs a shape")
    return [(int(p.utilization), int(p.score)) for p in points]


class NodeResourcesFit:
    name: ClassVar[str] = "NodeResourcesFit"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """NodeResourcesFitArgs (or None for kube's defaults: LeastAllocated on cpu and memory).
        Raises ValueError for an unknown strategy or a RequestedToCapacityRatio without shape."""
        self.ignored_resources = frozenset(getattr(args, "ignored_resources", None) or ())
        self.ignored_resource_groups = frozenset(getattr(args, "ignored_resource_groups", None) or ())
        strategy = getattr(args, "scoring_strategy", None)
        kind = _strategy_type(strategy)
        resources = resource_weights(getattr(strategy, "resources", None))
        weights = [r.weight for r in resources]
        if kind == LEAST_ALLOCATED:
            scorer = _weighted_average(least_requested_score, weights)
        elif kind == MOST_ALLOCATED:
            scorer = _weighted_average(most_requested_score, weights)
        elif kind == REQUESTED_TO_CAPACITY_RATIO:
            scorer = requested_to_capacity_ratio_scorer(weights, _shape(strategy))
        else:
            raise ValueError(f"NodeResourcesFit: scoring strategy {kind} is not supported")
        self.strategy = kind
        self.scorer = ResourceAllocationScorer(kind, resources, scorer)

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        state.write(PRE_FILTER_STATE_KEY, compute_pod_resource_request(pod))
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        request = state.get(PRE_FILTER_STATE_KEY)
        if request is None:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        insufficient = fits_request(request, node_info, self.ignored_resources, self.ignored_resource_groups)
        if not insufficient:
            return Status.success()
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if any(r.unresolvable for r in insufficient) else Code.UNSCHEDULABLE
        return Status(code, tuple(r.reason for r in insufficient))

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_STATE_KEY, self.scorer.pod_request_list(pod))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        requests = state.get(PRE_SCORE_STATE_KEY)
        if requests is None:
            requests = self.scorer.pod_request_list(pod)
        return self.scorer.score(node_info, requests)
