"""`kubus describe pod`: a pod's state and history, and why it is pending.

The "why" is computed on the spot: the current nodes and reservations are read from Redis into a
throwaway NodeTable and the pod's profile runs ``Scheduler.schedule([pod], explain=True)`` over
it. Nothing is reserved; the answer is what a scheduling attempt would see right now, per node
and per plugin, next to the summary the last real attempt recorded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from kubus.api.errors import ManifestError
from kubus.api.gpus import pod_gpu_request
from kubus.api.objects import Pod
from kubus.api.quantity import format_bytes, format_cpu
from kubus.api.requests import pod_requests
from kubus.cli.cluster import format_age, write_table
from kubus.cli.connect import UsageError, open_state
from kubus.cli.simulate import hints_text
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.hints import Hint, fit_hints
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import NodeExplain, Scheduler, ScheduleResult
from kubus.kernels.backend import Backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry
from kubus.settings import ConnectionSettings
from kubus.store.cluster_state import ClusterState
from kubus.store.records import PodPhase, PodRecord

__all__ = ["Explanation", "describe_pod", "explain_pod"]

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
    state: ClusterState, record: PodRecord, config: SchedulerConfiguration, backend: Backend
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
    snapshot = await state.load_snapshot()
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
        ends_at = {p.key: p.ends_at for p in await state.get_pods(uids) if p is not None and p.ends_at > 0}
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
        plugin, sep, reason = text.partition(": ")
        groups.append((plugin, reason, names) if sep else ("", text, names))
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


async def describe_pod(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str,
    name: str,
    config: SchedulerConfiguration,
    backend: Backend,
) -> int:
    """`kubus describe pod NAME`. Raises UsageError for an unknown pod."""
    async with open_state(settings) as state:
        record = await state.find_pod(namespace, name)
        if record is None:
            raise UsageError(f'pod "{name}" not found in namespace "{namespace}"')
        events = await state.events(record.uid)
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
            wait = (await state.permit_states([record.uid]))[record.uid]
            if wait is not None and not wait.rejected:
                waits_on = ", ".join(sorted(wait.pending)) or "nothing (allowed; binding)"
                fields.append(("Waiting on Permit", f"{waits_on} (until {_fmt_time(wait.deadline, now)})"))
        _write_fields(out, fields)
        out.write("Events:\n")
        if not events:
            out.write("  <none>\n")
        else:
            rows = [["  Type", "Reason", "Age", "From", "Message"]]
            rows.append(["  ----", "------", "----", "----", "-------"])
            for e in events:
                rows.append([f"  {e.type}", e.reason, format_age(now - e.time), e.source or "-", e.message])
            write_table(rows, out)
        if record.phase is PodPhase.PENDING:
            await _write_explanation(out, state, record, config, backend)
    return 0


async def _write_explanation(
    out: TextIO, state: ClusterState, record: PodRecord, config: SchedulerConfiguration, backend: Backend
) -> None:
    out.write("\nWhy pending (a scheduling attempt evaluated now; nothing reserved):\n")
    try:
        ex = await explain_pod(state, record, config, backend)
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
        for node, e in ex.best[:MAX_BEST]:
            rows.append(
                [
                    f"    {node}",
                    "-" if e.total is None else str(e.total),
                    *(str(e.scores[p].weighted) if p in e.scores else "-" for p in plugins),
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
