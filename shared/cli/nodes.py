"""`kubus get nodes`: each node's status and what its reservations request against its
allocatable, as a table or v1 Nodes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TextIO

from kubus.api.objects import LabelSelector
from kubus.api.pod_affinity import selector_matches
from kubus.api.quantity import format_bytes, format_cpu
from kubus.cli.connect import open_store
from kubus.cli.kube_objects import node_object
from kubus.cli.not_found import not_found, report
from kubus.cli.output import Listing, Output, format_age, output_of
from kubus.core.settings import ConnectionSettings
from kubus.kernels.nodeinfo import NodeInfo
from kubus.store.cluster_state import ClusterState, node_info_of
from kubus.store.records import NodeRecord

__all__ = ["NO_NODES", "get_nodes", "node_listing", "nodes_in_use"]


def _node_status(record: NodeRecord) -> str:
    if record.unreachable:
        status = "Unreachable"
    elif not record.ready:
        status = "NotReady"
    else:
        status = "Ready"
    if record.unschedulable:
        status += ",SchedulingDisabled"
    return status


async def nodes_in_use(
    store: ClusterState, selector: LabelSelector | None, names: Sequence[str] = ()
) -> tuple[list[tuple[NodeRecord, NodeInfo]], list[str]]:
    """Every node (those ``names`` when given; whose labels ``selector`` matches) with what its
    reservations use, by name; and a NotFound line per name that is not there."""
    records = {r.name: r for r in await store.list_nodes() if selector is None or selector_matches(selector, r.labels)}
    missing = [not_found("nodes", n) for n in dict.fromkeys(names) if n not in records]
    wanted = [n for n in dict.fromkeys(names) if n in records] if names else None
    snapshot = await store.load_snapshot(wanted) if wanted is None or wanted else []
    return [(records[node.name], node_info_of(node, held)) for node, held in snapshot if node.name in records], missing


NO_NODES = "No nodes found (start nodes with `kubus up --nodes N`, or run gpu-agents)."


async def node_listing(
    store: ClusterState, *, output: Output, names: Sequence[str] = (), selector: LabelSelector | None = None
) -> tuple[Listing, list[str]]:
    """The nodes `kubus get nodes` shows (those ``names`` when given; whose labels ``selector``
    matches), each as a v1 Node with its table row, and a NotFound line per name not there."""
    nodes, missing = await nodes_in_use(store, selector, names)
    now = time.time()
    header = ["NAME", "STATUS", "CPU(req/alloc)", "MEMORY(req/alloc)", "GPUS(used/total)", "PODS", "AGE"]
    if output.format == "wide":
        header += ["GPU-MEMORY(used/total)", "HEARTBEAT", "TAINTS"]
    listing = Listing("node", header, colour_column=1, single=len(names) == 1)
    for record, info in nodes:
        alloc = record.allocatable
        gpus_total = len(record.gpus)
        gpus_used = sum(1 for count in info.gpu_pod_count if count > 0)
        gpu_mem_total = sum(g.memory for g in record.gpus)
        gpu_mem_used = gpu_mem_total - sum(info.gpu_free_memory)
        age = now - record.created_at if record.created_at else None
        heartbeat = now - record.heartbeat if record.heartbeat else None
        row = [
            record.name,
            _node_status(record),
            f"{format_cpu(info.requested.get('cpu', 0))}/{format_cpu(alloc.get('cpu', 0))}",
            f"{format_bytes(info.requested.get('memory', 0))}/{format_bytes(alloc.get('memory', 0))}",
            f"{gpus_used}/{gpus_total}",
            f"{len(info.pods)}/{alloc.get('pods', 0)}",
            format_age(age) if age is not None else "<unknown>",
        ]
        if output.format == "wide":
            taints = ",".join(
                f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in record.taints
            )
            row += [
                f"{format_bytes(gpu_mem_used)}/{format_bytes(gpu_mem_total)}",
                format_age(heartbeat) + " ago" if heartbeat is not None else "never",
                taints or "<none>",
            ]
        listing.rows.append((node_object(record, info, now=now), row))
    return listing, missing


async def get_nodes(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    output: str | Output,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
) -> int:
    """`kubus get nodes [NAME...]`: status, requests against allocatable, GPUs in use, pods, age
    (only the nodes whose labels ``selector`` matches, when given), or the v1 Nodes. Exit
    status 1 when a name is not found."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_store(settings) as store:
        listing, missing = await node_listing(store, output=shape, names=names, selector=selector)
    return report(listing, missing, out, shape, empty=NO_NODES)
