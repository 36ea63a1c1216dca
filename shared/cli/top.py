"""`kubus top nodes` and `kubus top pods`: what the pods holding room on each node requested
(kubus has no usage metrics: requests are what it accounts), with each GPU's memory as a bar."""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import TextIO

from kubus.api.objects import LabelSelector
from kubus.api.pod_affinity import selector_matches
from kubus.api.quantity import format_bytes, format_cpu
from kubus.cli.connect import open_store
from kubus.cli.nodes import NO_NODES, nodes_in_use
from kubus.cli.not_found import not_found
from kubus.cli.output import DOCUMENT_OUTPUTS, write_document, write_table
from kubus.cli.pods import format_devices
from kubus.core.codec import JSONObject
from kubus.core.settings import ConnectionSettings
from kubus.kernels.nodeinfo import PodInfo
from kubus.store.records import NodeRecord

__all__ = ["GPU_BAR_WIDTH", "gpu_bar", "top_nodes", "top_pods"]


def _percent(used: int, total: int) -> str:
    return f"{100 * used // total}%" if total > 0 else "-"


GPU_BAR_WIDTH = 20
"""Characters of a GPU's memory bar in `kubus top nodes --gpus`."""


def gpu_bar(used: int, total: int, width: int = GPU_BAR_WIDTH) -> str:
    """Used memory of one GPU as a text bar: '[#####---------------]' (rounded up, so any use shows)."""
    filled = 0 if total <= 0 else min(width, -(-used * width // total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


async def top_nodes(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    output: str,
    gpus: bool,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
    headers: bool = True,
) -> int:
    """`kubus top nodes [NAME...]`: requested against allocatable per node, in percent (kubus has
    no usage metrics: requests are what it accounts); with ``gpus`` each GPU's memory as a bar
    (used / total), its pods and health. Exit status 1 when a name is not found."""
    async with open_store(settings) as store:
        nodes, missing = await nodes_in_use(store, selector, names)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    status = 1 if missing else 0
    if output in DOCUMENT_OUTPUTS:
        doc = []
        for record, info in nodes:
            item: JSONObject = {
                "name": record.name,
                "requested": dict(info.requested),
                "allocatable": dict(record.allocatable),
            }
            if gpus:
                item["gpus"] = [
                    {
                        "index": g.index,
                        "model": g.model,
                        "healthy": g.healthy,
                        "memory": g.memory,
                        "memoryUsed": g.memory - free,
                        "pods": pods,
                    }
                    for g, free, pods in zip(record.gpus, info.gpu_free_memory, info.gpu_pod_count, strict=False)
                ]
            doc.append(item)
        write_document({"nodes": doc}, out, output)
        return status
    if not nodes:
        if not missing:
            sys.stderr.write(NO_NODES + "\n")
        return status
    rows = [["NAME", "CPU(req)", "CPU%", "MEMORY(req)", "MEMORY%", "GPUS(used/total)", "GPU-MEMORY%", "PODS"]]
    for record, info in nodes:
        alloc, req = record.allocatable, info.requested
        gpu_total = sum(g.memory for g in record.gpus)
        gpu_used = gpu_total - sum(info.gpu_free_memory)
        rows.append(
            [
                record.name,
                format_cpu(req.get("cpu", 0)),
                _percent(req.get("cpu", 0), alloc.get("cpu", 0)),
                format_bytes(req.get("memory", 0)),
                _percent(req.get("memory", 0), alloc.get("memory", 0)),
                f"{sum(1 for n in info.gpu_pod_count if n > 0)}/{len(record.gpus)}",
                _percent(gpu_used, gpu_total),
                f"{len(info.pods)}/{alloc.get('pods', 0)}",
            ]
        )
    if not gpus:
        write_table(rows if headers else rows[1:], out)
        return status
    aligned = io.StringIO()
    write_table(rows, aligned)
    header, *lines = aligned.getvalue().splitlines()
    if headers:
        out.write(header + "\n")
    for (record, info), line in zip(nodes, lines, strict=True):
        out.write(line + "\n")
        for g, free, pods in zip(record.gpus, info.gpu_free_memory, info.gpu_pod_count, strict=False):
            used = g.memory - free
            health = "" if g.healthy else "  UNHEALTHY"
            out.write(
                f"  gpu{g.index} {gpu_bar(used, g.memory)} {format_bytes(used)}/{format_bytes(g.memory)}"
                f"  {pods} pod(s)  {g.model}{health}\n"
            )
    return status


async def top_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
    headers: bool = True,
    sort_by: str | None = None,
) -> int:
    """`kubus top pods [NAME...]`: what each pod that holds room on a node (reserved, bound or
    running) requested: cpu, memory, GPUs and GPU memory, and its node. kubus has no usage
    metrics: requests are what it accounts. ``sort_by`` is kubectl top's: cpu or memory. Exit
    status 1 when a name is not found."""
    async with open_store(settings) as store:
        nodes, _ = await nodes_in_use(store, None)
    held: list[tuple[str, PodInfo, NodeRecord]] = []
    for record, info in nodes:
        for key, pod in info.pods.items():
            ns, _, name = key.partition("/")
            if namespace is not None and ns != namespace:
                continue
            if selector is not None and not selector_matches(selector, pod.pod.metadata.labels):
                continue
            if names and name not in names:
                continue
            held.append((key, pod, record))
    seen = {key.partition("/")[2] for key, _, _ in held}
    missing = [not_found("pods", n, namespace or "default") + " on any node" for n in names if n not in seen]
    if sort_by == "cpu":
        held.sort(key=lambda h: -h[1].requests.get("cpu", 0))
    elif sort_by == "memory":
        held.sort(key=lambda h: -h[1].requests.get("memory", 0))
    else:
        held.sort(key=lambda h: h[0])
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    status = 1 if missing else 0

    def gpu_memory(pod: PodInfo, node: NodeRecord) -> int:
        if pod.gpu is None or not pod.gpu_devices:
            return 0
        if pod.gpu.shared:
            return pod.gpu.memory * len(pod.gpu_devices)
        sizes = {g.index: g.memory for g in node.gpus}
        return sum(sizes.get(d, 0) for d in pod.gpu_devices)

    if output in DOCUMENT_OUTPUTS:
        doc = [
            {
                "namespace": key.partition("/")[0],
                "name": key.partition("/")[2],
                "node": node.name,
                "requested": dict(pod.requests),
                "gpuDevices": list(pod.gpu_devices),
                "gpuMemory": gpu_memory(pod, node),
            }
            for key, pod, node in held
        ]
        write_document({"pods": doc}, out, output)
        return status
    if not held:
        if not missing:
            where = f" in namespace {namespace}" if namespace else ""
            sys.stderr.write(f"No pods hold room on a node{where}.\n")
        return status
    rows = [["NAMESPACE", "NAME", "CPU(req)", "MEMORY(req)", "GPUS", "GPU-MEMORY", "NODE"]]
    for key, pod, node in held:
        ns, _, name = key.partition("/")
        memory = gpu_memory(pod, node)
        rows.append(
            [
                ns,
                name,
                format_cpu(pod.requests.get("cpu", 0)),
                format_bytes(pod.requests.get("memory", 0)),
                format_devices(pod.gpu_devices),
                format_bytes(memory) if memory else "-",
                node.name,
            ]
        )
    if namespace is not None:
        rows = [row[1:] for row in rows]
    write_table(rows if headers else rows[1:], out)
    return status
