"""Per-resource (allocatable, requested) columns as kube's resourceAllocationScorer sees them."""

from __future__ import annotations

from kubus.api.objects import CPU, EPHEMERAL_STORAGE, MEMORY
from kubus.framework.interface import Rows
from kubus.kernels.backend import Array
from kubus.kernels.node_table import TableView


def allocatable_and_requested(
    view: TableView, resource: str, pod_request: int, rows: Rows, *, use_requested: bool
) -> tuple[Array, Array]:
    """kube's calculateResourceAllocatableRequest, for every row.

    cpu and memory use the non-zero sums unless `use_requested`; an extended resource the pod
    does not request is not scored (allocatable 0). Returns int64 arrays (allocatable,
    requested on the node plus the pod's request).
    """
    i = view.table.resource_index.get(resource)
    if i is None or (pod_request == 0 and resource not in (CPU, MEMORY, EPHEMERAL_STORAGE)):
        zeros = view.xp.zeros(view.valid[rows].shape[0], dtype=view.xp.int64)
        return zeros, zeros
    alloc = view.alloc[i, rows]
    if resource == CPU and not use_requested:
        node_req = view.nz_cpu[rows]
    elif resource == MEMORY and not use_requested:
        node_req = view.nz_mem[rows]
    else:
        node_req = view.req[i, rows]
    return alloc, node_req + pod_request
