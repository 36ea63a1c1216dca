"""`kubus describe pod|node`: a pod's state and history, and why it is pending; a node's
capacity, GPUs and the pods holding room on it.

The "why" is computed on the spot: the current nodes and reservations are read from Redis into a
throwaway NodeTable and the pod's profile runs ``Scheduler.schedule([pod], explain=True)`` over
it. Nothing is reserved; the answer is what a scheduling attempt would see right now, per node
and per plugin, next to the summary the last real attempt recorded.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from kubus.api.errors import ManifestError
from kubus.api.gpus import pod_gpu_request
from kubus.api.objects import LabelSelector, Pod
from kubus.api.pod_affinity import selector_matches
from kubus.api.quantity import format_bytes, format_cpu
from kubus.api.requests import pod_requests
from kubus.cli.cluster import (
    NotFoundError,
    event_age,
    format_age,
    list_pods,
    nodes_in_use,
    not_found,
    write_table,
)
from kubus.cli.connect import open_store
from kubus.cli.kube_objects import collapse_events, kube_quantity
from kubus.cli.simulate import hints_text
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.hints import Hint, fit_hints
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import NodeExplain, Scheduler, ScheduleResult
from kubus.kernels.backend import Backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo
from kubus.plugins import in_tree_registry
from kubus.store.cluster_state import ClusterState
from kubus.store.records import NodeRecord, PodEvent, PodPhase, PodRecord

__all__ = ["Explanation", "describe_nodes", "describe_pod", "describe_pods", "explain_pod"]

MAX_REASON_GROUPS = 8
"""Filter reasons shown, most nodes first; the rest are summed up in one line."""
MAX_EXAMPLES = 3
"""Node names shown per reason."""
MAX_BEST = 5
"""Best-scoring feasible nodes shown."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """What a scheduling attempt of the pod would find now."""

    nodes: int
    result: ScheduleResult | None
    """None when the pod is gated (not scheduled at all)."""
    groups: list[tuple[str, str, list[str]]]
    """(plugin, reason, nodes) per distinct filter outcome of the rejected nodes, most nodes first."""
    best: list[tuple[str, NodeExplain]]
    """The feasible nodes that were scored, best first."""
    feasible: int
    """Nodes that passed every filter."""
    gated: str = ""
    """Why PreEnqueue keeps the pod out of scheduling ("SchedulingGates: waiting for ..."), if it does."""
    hints: tuple[Hint, ...] = ()
    """No node fits: the changes to the pod that would open some (`kubus.framework.hints`)."""


async def explain_pod(
    store: ClusterState, record: PodRecord, config: SchedulerConfiguration, backend: Backend
) -> Explanation | None:
    """Run the pod's profile over the cluster as Redis has it now, on a throwaway table.

    None when the pod's schedulerName names no profile of ``config``. Raises ManifestError
    when the stored manifest does not parse (it was validated at submit; not expected).
    """
    profile = next((p for p in config.profiles if p.scheduler_name == record.profile), None)
    if profile is None:
        return None
    pod = record.pod()
    registry = in_tree_registry(entry_points=True)  # the profile may name out-of-tree plugins
    framework = Framework.from_profile(
        profile, registry, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score
    )
    for plugin in framework.pre_enqueue:
        status = plugin.pre_enqueue(pod)
        if not status.is_success:
            return Explanation(0, None, [], [], 0, gated=f"{plugin.name}: {status.message()}")
    snapshot = await store.load_snapshot()
    table = NodeTable(backend, seed=0, capacity=max(64, len(snapshot)))
    for node, reservations in snapshot:
        table.set_node(node)
        for r in reservations:
            if r.pod_uid != record.uid:  # its own stale reservation would only confuse the answer
                table.assume(r.pod_info(), node.name)
    scheduler = Scheduler(framework, table, seed=0)
    result = scheduler.schedule([pod], explain=True)[0]
    hints: tuple[Hint, ...] = ()
    if result.node is None:
        # when the pods here finish, as their agents said when they started them
        uids = [r.pod_uid for _, held in snapshot for r in held if r.pod_uid != record.uid]
        ends_at = {p.key: p.ends_at for p in await store.get_pods(uids) if p is not None and p.ends_at > 0}
        hints = tuple(fit_hints(scheduler, pod, ends_at=ends_at, now=time.time()))
    per_node = result.explain or {}
    rejected: dict[str, list[str]] = {}
    feasible = 0
    for name, e in per_node.items():
        if e.filter == "ok":
            feasible += 1
        else:
            rejected.setdefault(e.filter, []).append(name)
    groups = []
    for text, names in sorted(rejected.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        source, sep, reason = text.partition(": ")
        groups.append((source, reason, names) if sep else ("", text, names))
    best = sorted(
        ((n, e) for n, e in per_node.items() if e.filter == "ok" and e.total is not None),
        key=lambda kv: (-(kv[1].total or 0), kv[0] != result.node, kv[0]),
    )
    if result.node is not None and not best:
        best = [(result.node, per_node.get(result.node, NodeExplain("ok")))]
    return Explanation(len(snapshot), result, groups, best, feasible, hints=hints)


def _fmt_time(t: float, now: float) -> str:
    if not t:
        return "<unknown>"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))} ({format_age(now - t)} ago)"


def _stored_pod(record: PodRecord) -> Pod | None:
    """The record's pod, parsed; None for a manifest that no longer parses."""
    try:
        return record.pod()
    except (ManifestError, ValueError):
        return None


def _requests_line(pod: Pod | None) -> str:
    if pod is None:
        return "<manifest unreadable>"
    parts = []
    for res, q in sorted(pod_requests(pod).items()):
        if res == "cpu":
            parts.append(f"cpu={format_cpu(q)}")
        elif res in ("memory", "ephemeral-storage") or res.startswith("hugepages-"):
            parts.append(f"{res}={format_bytes(q)}")
        else:
            parts.append(f"{res}={q}")
    gpu = pod_gpu_request(pod)
    if gpu is not None and gpu.shared:
        parts.append(f"gpu-memory={format_bytes(gpu.memory)} x{gpu.count} (shared)")
    return " ".join(parts) or "<none>"


def _write_fields(out: TextIO, fields: Sequence[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in fields) + 2
    for k, v in fields:
        out.write(f"{(k + ':').ljust(width)}{v}\n")


async def describe_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    names: Sequence[str],
    config: SchedulerConfiguration,
    backend: Backend,
    selector: LabelSelector | None = None,
) -> int:
    """`kubus describe pod NAME...`, or every pod of ``namespace`` (of all for None; those whose
    labels ``selector`` matches) without names, separated by a blank line as kubectl does. A
    name not found is kubectl's NotFound on stderr: exit status 1, else 0."""
    missing: list[str] = []
    async with open_store(settings) as store:
        if names:
            where = namespace or "default"
            records = []
            for name in dict.fromkeys(names):
                record = await store.find_pod(where, name)
                if record is None:
                    missing.append(not_found("pods", name, where))
                else:
                    records.append(record)
        else:
            records = [p for p in await list_pods(store, namespace) if p.phase is not PodPhase.DELETED]
        if selector is not None:
            records = [r for r in records if selector_matches(selector, _labels(r))]
        for i, record in enumerate(records):
            if i:
                out.write("\n\n")
            await _describe_one(out, store, record, config, backend)
    if not records and not missing:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        sys.stderr.write(f"No pods found in {where}.\n")
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0


def _labels(record: PodRecord) -> dict[str, str]:
    pod = _stored_pod(record)
    return dict(pod.metadata.labels) if pod is not None else {}


async def describe_pod(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str,
    name: str,
    config: SchedulerConfiguration,
    backend: Backend,
) -> int:
    """`kubus describe pod NAME` (`describe_pods` of one). Raises NotFoundError for an unknown pod."""
    async with open_store(settings) as store:
        record = await store.find_pod(namespace, name)
        if record is None:
            raise NotFoundError(not_found("pods", name, namespace))
        await _describe_one(out, store, record, config, backend)
    return 0


def _write_events(out: TextIO, events: Sequence[PodEvent], now: float) -> None:
    """The events as kubectl describe shows them: identical ones once, ``3s (x4 over 40s)``."""
    if not events:
        out.write("Events:  <none>\n")
        return
    out.write("Events:\n")
    rows = [["  Type", "Reason", "Age", "From", "Message"]]
    rows.append(["  ----", "------", "----", "----", "-------"])
    for c in collapse_events(events):
        rows.append([f"  {c.type}", c.reason, event_age(c, now), c.source or "-", c.message])
    write_table(rows, out)


async def _describe_one(
    out: TextIO, store: ClusterState, record: PodRecord, config: SchedulerConfiguration, backend: Backend
) -> None:
    events = await store.events(record.uid)
    pod = _stored_pod(record)
    now = time.time()
    fields = [
        ("Name", record.name),
        ("Namespace", record.namespace),
        ("UID", record.uid),
        ("Scheduler", record.profile),
        ("Phase", str(record.phase)),
        ("Node", record.node or "<none>"),
        ("GPU devices", ",".join(str(d) for d in record.gpu_devices) or "<none>"),
        ("Requests", _requests_line(pod)),
        ("Attempts", str(record.attempts)),
        ("Created", _fmt_time(record.created_at, now)),
        ("Updated", _fmt_time(record.updated_at, now)),
    ]
    if record.reason or record.message:
        label = "Last failure" if record.phase is not PodPhase.PENDING else "Reason"
        fields.append((label, record.reason or "-"))
        fields.append(("Message", record.message or "-"))
    fields += [("Not honoured", line) for line in (pod.spec.unhonoured if pod is not None else ())]
    if record.phase is PodPhase.RESERVED:
        wait = (await store.permit_states([record.uid]))[record.uid]
        if wait is not None and not wait.rejected:
            waits_on = ", ".join(sorted(wait.pending)) or "nothing (allowed; binding)"
            fields.append(("Waiting on Permit", f"{waits_on} (until {_fmt_time(wait.deadline, now)})"))
    _write_fields(out, fields)
    _write_events(out, events, now)
    if record.phase is PodPhase.PENDING:
        await _write_explanation(out, store, record, config, backend)


# ---- nodes ---------------------------------------------------------------------------------------


def _map_lines(values: Mapping[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(values.items())] or ["<none>"]


async def describe_nodes(
    settings: ConnectionSettings, out: TextIO, *, names: Sequence[str], selector: LabelSelector | None = None
) -> int:
    """`kubus describe node NAME...`, or every node (whose labels ``selector`` matches) without
    names: labels, taints, conditions, capacity and allocatable, GPUs with their memory in use,
    the pods holding room there and the requests they add up to. A name not found is kubectl's
    NotFound on stderr: exit status 1, else 0."""
    async with open_store(settings) as store:
        nodes, missing = await nodes_in_use(store, selector, names)
        uids = [p.pod.metadata.uid for _, info in nodes for p in info.pods.values()]
        created = {r.uid: r.created_at for r in await store.get_pods(uids) if r is not None}
    now = time.time()
    for i, (record, info) in enumerate(nodes):
        if i:
            out.write("\n\n")
        _describe_node(out, record, info, created, now)
    if not nodes and not missing:
        sys.stderr.write("No nodes found.\n")
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0


def _describe_node(
    out: TextIO, record: NodeRecord, info: NodeInfo, created: Mapping[str, float], now: float
) -> None:
    width = 20
    lines: list[str] = []

    def field(name: str, values: Sequence[str]) -> None:
        for j, value in enumerate(values):
            lines.append(f"{(name + ':') if j == 0 else '':<{width}}{value}")

    field("Name", [record.name])
    field("Labels", _map_lines(record.labels))
    annotations = {k: v for k, v in record.annotations.items() if k != "kubus.io/gpus"}
    field("Annotations", _map_lines(annotations))
    field("CreationTimestamp", [_fmt_time(record.created_at, now)])
    node_taints = record.to_node().spec.taints
    taints = [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in node_taints]
    field("Taints", taints or ["<none>"])
    field("Unschedulable", ["true" if record.unschedulable else "false"])
    out.write("\n".join(lines) + "\n")
    status = "Unknown" if record.unreachable else "True" if record.ready else "False"
    out.write("Conditions:\n")
    write_table(
        [
            ["  Type", "Status", "LastHeartbeatTime", "Reason"],
            ["  ----", "------", "-----------------", "------"],
            [
                "  Ready",
                status,
                _fmt_time(record.heartbeat or 0.0, now),
                "NodeStatusUnknown" if record.unreachable else "KubeletReady" if record.ready else "KubeletNotReady",
            ],
        ],
        out,
    )
    for title, amounts in (("Capacity", record.capacity), ("Allocatable", record.allocatable)):
        out.write(f"{title}:\n")
        for resource, amount in sorted(amounts.items()):
            out.write(f"  {resource}:{' ' * max(1, 24 - len(resource))}{kube_quantity(resource, amount)}\n")
    if record.gpus:
        out.write("GPUs:\n")
        rows = [["  Index", "Model", "Memory", "Used", "Pods", "Healthy"]]
        for g, free, pods in zip(record.gpus, info.gpu_free_memory, info.gpu_pod_count, strict=False):
            used = g.memory - free
            rows.append(
                [f"  {g.index}", g.model, format_bytes(g.memory), format_bytes(used), str(pods), str(g.healthy).lower()]
            )
        write_table(rows, out)
    out.write(f"Non-terminated Pods:  ({len(info.pods)} in total)\n")
    if info.pods:
        rows = [["  Namespace", "Name", "CPU Requests", "Memory Requests", "GPUs", "Age"]]
        rows.append(["  ---------", "----", "------------", "---------------", "----", "---"])
        for key, pod in sorted(info.pods.items()):
            ns, _, name = key.partition("/")
            born = created.get(pod.pod.metadata.uid, 0.0)
            rows.append(
                [
                    f"  {ns}",
                    name,
                    _request_share("cpu", pod.requests.get("cpu", 0), record.allocatable),
                    _request_share("memory", pod.requests.get("memory", 0), record.allocatable),
                    ",".join(str(d) for d in pod.gpu_devices) or "-",
                    format_age(now - born) if born else "<unknown>",
                ]
            )
        write_table(rows, out)
    out.write("Allocated resources:\n  (Total limits may be over 100 percent, i.e., overcommitted.)\n")
    rows = [["  Resource", "Requests"], ["  --------", "--------"]]
    for resource in sorted({"cpu", "memory", *info.requested}):
        if resource == "pods":
            continue
        rows.append([f"  {resource}", _request_share(resource, info.requested.get(resource, 0), record.allocatable)])
    write_table(rows, out)
    out.write("Events:  <none>\n")


def _request_share(resource: str, amount: int, allocatable: Mapping[str, int]) -> str:
    """``1500m (18%)``: a request and its share of the node's allocatable, as kubectl describe."""
    total = allocatable.get(resource, 0)
    share = f" ({100 * amount // total}%)" if total > 0 else ""
    return f"{kube_quantity(resource, amount)}{share}"


async def _write_explanation(
    out: TextIO, store: ClusterState, record: PodRecord, config: SchedulerConfiguration, backend: Backend
) -> None:
    out.write("\nWhy pending (a scheduling attempt evaluated now; nothing reserved):\n")
    try:
        ex = await explain_pod(store, record, config, backend)
    except (ManifestError, ValueError) as e:
        out.write(f"  cannot evaluate: {e}\n")
        return
    if ex is None:
        known = ", ".join(p.scheduler_name for p in config.profiles)
        out.write(f'  no scheduler profile "{record.profile}" in this configuration (profiles: {known})\n')
        return
    if ex.gated or ex.result is None:
        out.write(f"  not scheduled until PreEnqueue lets it in: {ex.gated}\n")
        return
    result = ex.result
    if ex.nodes == 0:
        out.write("  no nodes in the cluster\n")
        return
    if result.node is None:
        out.write(f"  {result.message}\n")
    else:
        out.write(
            f"  {ex.feasible}/{ex.nodes} nodes are feasible now; the best of them now is {result.node}"
            f"{_devices_note(result.gpu_devices)} (the pod may be waiting out its backoff).\n"
        )
    if ex.groups:
        out.write("  Filtered out, by plugin and reason:\n")
        rows = [["    NODES", "PLUGIN", "REASON", "FOR EXAMPLE"]]
        shown = ex.groups[:MAX_REASON_GROUPS]
        for plugin, reason, names in shown:
            examples = ", ".join(names[:MAX_EXAMPLES]) + (", ..." if len(names) > MAX_EXAMPLES else "")
            rows.append([f"    {len(names)}", plugin or "-", reason, examples])
        rest = ex.groups[MAX_REASON_GROUPS:]
        if rest:
            rows.append([f"    {sum(len(n) for _, _, n in rest)}", "...", f"{len(rest)} other reasons", ""])
        write_table(rows, out)
    if ex.best:
        plugins = sorted({p for _, e in ex.best for p in e.scores})
        out.write(f"  Best feasible nodes (of {len(ex.best)} scored):\n")
        rows = [["    NODE", "TOTAL", *plugins]]
        for node, scored in ex.best[:MAX_BEST]:
            rows.append(
                [
                    f"    {node}",
                    "-" if scored.total is None else str(scored.total),
                    *(str(scored.scores[p].weighted) if p in scored.scores else "-" for p in plugins),
                ]
            )
        write_table(rows, out)
    elif result.node is None:
        out.write("  No node is feasible.\n")
    if result.node is None:
        out.write("  What would make it fit (one change, or two, against the nodes as they are now):\n")
        out.write(hints_text(ex.hints))
    counts = Counter(result.reasons)
    if result.node is None and not ex.groups and counts:
        for reason, n in counts.most_common(MAX_REASON_GROUPS):
            out.write(f"    {n}  {reason}\n")


def _devices_note(devices: Sequence[int]) -> str:
    return f" (GPUs {','.join(str(d) for d in devices)})" if devices else ""
