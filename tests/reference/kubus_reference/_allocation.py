"""kube's resourceAllocationScorer: the per-resource (allocatable, requested) pairs that
NodeResourcesFit's scoring strategies and NodeResourcesBalancedAllocation score.

After kube's pkg/scheduler/framework/plugins/noderesources/resource_allocation.go:

- cpu and memory count the node's *non-zero* requests and the pod's non-zero request (100m /
  200MB for a container that sets none) -- except for BalancedAllocation (`use_requested`),
  which counts the plain requests;
- ephemeral-storage always counts plain requests;
- a scalar resource (extended, hugepages, ...) the pod does not request is left out, and so is
  a scalar resource the node does not list in its allocatable, and any other name;
- a resource whose allocatable is 0 is left out (its slot stays (0, 0)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubus.api.objects import CPU, EPHEMERAL_STORAGE, MEMORY, Pod
from kubus.api.requests import pod_nonzero_requests, pod_requests
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._resources import is_scalar_resource_name


@dataclass(frozen=True, slots=True)
class ResourceWeight:
    """config.ResourceSpec."""

    name: str
    weight: int


DEFAULT_RESOURCES = (ResourceWeight(CPU, 1), ResourceWeight(MEMORY, 1))


def resource_weights(specs: Any) -> tuple[ResourceWeight, ...]:
    """Resource specs (objects with `name` and `weight`) as ResourceWeights; kube's default
    (cpu and memory, weight 1) when there are none."""
    if not specs:
        return DEFAULT_RESOURCES
    return tuple(ResourceWeight(str(s.name), int(s.weight)) for s in specs)


Scorer = Callable[[list[int], list[int]], int]


@dataclass(frozen=True, slots=True)
class ResourceAllocationScorer:
    name: str
    resources: tuple[ResourceWeight, ...]
    scorer: Scorer
    use_requested: bool = False

    def pod_request_list(self, pod: Pod) -> list[int]:
        """calculatePodResourceRequestList: the pod's request per configured resource, with init
        containers, sidecars and overhead counted; non-zero defaults for cpu and memory (100m,
        200MB for a container that sets none) unless `use_requested`."""
        requests = pod_requests(pod)
        nonzero = dict(zip((CPU, MEMORY), pod_nonzero_requests(pod), strict=True))
        out = []
        for r in self.resources:
            if not self.use_requested and r.name in nonzero:
                out.append(nonzero[r.name])
            else:
                out.append(requests.get(r.name, 0))
        return out

    def allocatable_request(self, node_info: NodeInfo, resource: str, pod_request: int) -> tuple[int, int]:
        """calculateResourceAllocatableRequest: (allocatable, requested including the pod)."""
        alloc = node_info.allocatable
        if pod_request == 0 and is_scalar_resource_name(resource):
            return 0, 0
        if resource == CPU:
            node_cpu = node_info.requested[CPU] if self.use_requested else node_info.non_zero_cpu
            return alloc.get(CPU, 0), node_cpu + pod_request
        if resource == MEMORY:
            node_mem = node_info.requested[MEMORY] if self.use_requested else node_info.non_zero_memory
            return alloc.get(MEMORY, 0), node_mem + pod_request
        if resource == EPHEMERAL_STORAGE:
            return alloc.get(EPHEMERAL_STORAGE, 0), node_info.requested[EPHEMERAL_STORAGE] + pod_request
        if is_scalar_resource_name(resource) and resource in alloc:
            return alloc[resource], node_info.requested[resource] + pod_request
        return 0, 0

    def score(self, node_info: NodeInfo, pod_requests_list: Sequence[int]) -> int:
        """resourceAllocationScorer.score. Raises ValueError without resources (kube: Error)."""
        if not self.resources:
            raise ValueError("resources not found")
        n = len(self.resources)
        requested, allocatable = [0] * n, [0] * n
        for i, r in enumerate(self.resources):
            a, q = self.allocatable_request(node_info, r.name, pod_requests_list[i])
            if a == 0:
                continue
            allocatable[i], requested[i] = a, q
        return self.scorer(requested, allocatable)
