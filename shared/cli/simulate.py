"""`kubus simulate`: offline what-if scheduling of Pod manifests onto Node manifests.

Pods that carry spec.nodeName are facts: they are counted on their node as they are, even if
they overcommit it. Every other pod goes through its profile's framework in queue order (the
profiles' QueueSort plugin, PrioritySort by default: priority, then creation time, then file
order), each seeing the ones before it.

PodGroups (gangs, for Coscheduling) come from the manifests: their members are the manifests'
pods that carry the group's label, and the ones with spec.nodeName count as already placed. A
pod that waits on Permit holds its node until a plugin rejects it (it is given back then) or the
run ends (placed if its plugins allowed it, given back if not: the timeout).

Every pod is admitted first as kube's Priority admission would (`kubus.api.priority`), with the
manifests' PriorityClasses: a pod it refuses (no such class...) is Rejected, never scheduled.
The manifests' Namespaces give namespaceSelectors their labels; their Services,
ReplicationControllers, ReplicaSets and StatefulSets select the pods PodTopologySpread's default
constraints spread (kube's default spreading: a pod of a Service is spread over its nodes and
zones).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cmp_to_key
from typing import TYPE_CHECKING, TextIO

from kubus.api.gpus import pod_gpu_devices, pod_gpu_request
from kubus.api.manifests import Manifests
from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.api.priority import PriorityError, resolve_priority
from kubus.api.workloads import Workloads
from kubus.core.codec import JSONObject
from kubus.framework.config import SchedulerConfiguration, ignored_warnings
from kubus.framework.hints import Hint, fit_hints
from kubus.framework.interface import QueueSortPlugin
from kubus.framework.registry import Registry
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import NodeExplain, Scheduler, ScheduleResult
from kubus.framework.waiting import WaitingPods
from kubus.kernels.backend import Backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import PrioritySort, QueuedPodInfo, in_tree_registry
from kubus.plugins.gpu_fit import pick_devices

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
SCHEDULING_GATED = "SchedulingGated"
UNKNOWN_SCHEDULER = "UnknownScheduler"
REJECTED = "Rejected"
"""Refused before the queue, by kube's Priority admission."""
PREEMPTED = "Preempted"
"""Placed (or given as running on its node), then evicted by a pod of higher priority."""


@dataclass(frozen=True, slots=True)
class PodOutcome:
    pod: Pod
    node: str | None
    status: str
    message: str
    gpu_devices: tuple[int, ...] = ()
    explain: dict[str, NodeExplain] | None = None
    nominated_node: str = ""
    """The node preemption nominated for the pod (it is placed there when it preempted)."""
    preempted: tuple[str, ...] = ()
    """The pods (namespace/name) this pod evicted to fit."""
    hints: tuple[Hint, ...] = ()
    """Unschedulable, with --explain: the changes that would let it fit at the end of the run."""


def place_facts(table: NodeTable, pods: Sequence[Pod]) -> list[str]:
    """Count pods that already name a node on it. Returns warnings for pods naming no known node."""
    warnings = []
    for pod in pods:
        if pod.spec.node_name not in table:
            warnings.append(f"pod {pod.key}: spec.nodeName {pod.spec.node_name!r} is not a known node; ignored")
            continue
        devices = pod_gpu_devices(pod)
        request = pod_gpu_request(pod)
        if request is not None and not devices:
            devices = pick_devices(request, table.node_info(pod.spec.node_name))
        table.assume(PodInfo.of(pod, devices), pod.spec.node_name)
    return warnings


def queue_order(pods: Sequence[Pod], queue_sort: QueueSortPlugin | None = None) -> list[Pod]:
    """The pods in the order kube's activeQ pops them: by the QueueSort plugin's `less`
    (PrioritySort when None), each pod queued at its creation time; equal pods as given."""
    sort = queue_sort if queue_sort is not None else PrioritySort()
    key: Callable[[QueuedPodInfo], SupportsRichComparison]
    sort_key = getattr(sort, "sort_key", None)
    if callable(sort_key):
        key = sort_key
    else:
        less = sort.less
        key = cmp_to_key(lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0))
    queued = [QueuedPodInfo(pod=p, timestamp=p.metadata.creation_timestamp) for p in pods]
    return [q.pod for q in sorted(queued, key=key)]


def simulate(
    manifests: Manifests,
    config: SchedulerConfiguration,
    *,
    backend: Backend,
    seed: int = 0,
    explain: bool = False,
    registry: Registry | None = None,
) -> tuple[list[PodOutcome], list[str]]:
    """Schedule the manifests' pending pods with the plugins of `registry` (default: the in-tree
    and installed out-of-tree plugins). Returns outcomes (the pods admission Rejected first, then
    in queue order), and warnings. Raises RegistryError for a broken out-of-tree plugin."""
    if registry is None:
        registry = in_tree_registry(entry_points=True)
    manifests, outcomes = _admit(manifests)
    table = NodeTable(backend, seed=seed, capacity=max(64, len(manifests.nodes)))
    table.add_nodes(manifests.nodes)
    table.namespaces = {ns.name: ns.labels for ns in manifests.namespaces}
    table.disruption_budgets = tuple(manifests.disruption_budgets)
    table.workloads = Workloads(manifests.workloads)
    facts = [p for p in manifests.pods if p.spec.node_name]
    warnings = [*ignored_warnings(config), *place_facts(table, facts)]
    # Permit runs right after Reserve; a pod it makes wait holds its node until a plugin rejects
    # it, or the end of the run: placed if its plugins allowed it, given back if not (timeout).
    waiting = {profile.scheduler_name: WaitingPods() for profile in config.profiles}
    _load_pod_groups(manifests, waiting.values())
    schedulers = {
        profile.scheduler_name: Scheduler(
            Framework.from_profile(
                profile,
                registry,
                percentage_of_nodes_to_score=config.percentage_of_nodes_to_score,
                handle=waiting[profile.scheduler_name],
            ),
            table,
            seed=seed,
            run_permit=True,
            waiting=waiting[profile.scheduler_name],
        )
        for profile in config.profiles
    }
    waits: list[tuple[int, ScheduleResult, str]] = []
    batch: list[Pod] = []
    batch_profile = ""
    batch_group: str | None = None

    def flush() -> None:
        if batch:
            handle = waiting[batch_profile]
            for r in schedulers[batch_profile].schedule(batch, explain=explain):
                if r.waiting_on and r.node is not None:
                    waits.append((len(outcomes), r, batch_profile))
                elif r.node is not None and (key := pod_group_key(r.pod)) is not None:
                    handle.pod_groups.note_assigned(key)
                _evicted(outcomes, r)
                outcomes.append(_outcome(r))
            batch.clear()
            _release_rejected(table, outcomes, waits, waiting)

    # kube requires every profile to have the same QueueSort: one queue orders all pods
    queue_sort = next((s.framework.queue_sort for s in schedulers.values() if s.framework.queue_sort), None)
    for pod in queue_order([p for p in manifests.pods if not p.spec.node_name], queue_sort):
        name = pod.spec.scheduler_name
        scheduler = schedulers.get(name)
        if scheduler is None:
            flush()
            known = ", ".join(sorted(schedulers))
            outcomes.append(
                PodOutcome(pod, None, UNKNOWN_SCHEDULER, f'no scheduler profile "{name}" (profiles: {known})')
            )
            continue
        gated = next((s for p in scheduler.framework.pre_enqueue if not (s := p.pre_enqueue(pod)).is_success), None)
        if gated is not None:
            flush()
            outcomes.append(PodOutcome(pod, None, SCHEDULING_GATED, gated.message()))
            continue
        # A gang is a batch of its own: the waits its members' failures reject give their nodes
        # back before the next pods are scheduled, as kube's Unreserve does at once.
        group = pod_group_key(pod)
        if name != batch_profile or group != batch_group:
            flush()
            batch_profile, batch_group = name, group
        batch.append(pod)
    flush()
    _end_waits(table, outcomes, waits, waiting)
    if explain:
        # against the cluster as the run left it: what would make each pod fit now
        for i, o in enumerate(outcomes):
            if o.status == UNSCHEDULABLE and (scheduler := schedulers.get(o.pod.spec.scheduler_name)):
                outcomes[i] = replace(o, hints=tuple(fit_hints(scheduler, o.pod)))
    return outcomes, warnings


def _admit(manifests: Manifests) -> tuple[Manifests, list[PodOutcome]]:
    """The manifests with each pod as kube's Priority admission lets it in (its class's priority
    and preemptionPolicy), and a Rejected outcome for each pod it refuses, left out."""
    classes = {pc.name: pc for pc in manifests.priority_classes}
    admitted: list[Pod] = []
    refused: list[PodOutcome] = []
    for pod in manifests.pods:
        try:
            admitted.append(resolve_priority(pod, classes))
        except PriorityError as e:
            refused.append(PodOutcome(pod, None, REJECTED, f"{e.field}: {e}"))
    return replace(manifests, pods=admitted), refused


def _load_pod_groups(manifests: Manifests, handles: Iterable[WaitingPods]) -> None:
    """Each profile's view of the manifests' PodGroups: members are the pods labelled for a
    group (kubus pods carry no phase, so none has finished), assigned the ones naming a node."""
    groups = manifests.pod_groups
    members: Counter[str] = Counter()
    assigned: Counter[str] = Counter()
    for pod in manifests.pods:
        key = pod_group_key(pod)
        if key is not None:
            members[key] += 1
            if pod.spec.node_name:
                assigned[key] += 1
    for handle in handles:
        handle.pod_groups.load(groups, members, assigned)


def _release_rejected(
    table: NodeTable,
    outcomes: list[PodOutcome],
    waits: list[tuple[int, ScheduleResult, str]],
    waiting: Mapping[str, WaitingPods],
) -> None:
    """Waiting pods a plugin rejected give their node back now and fail with its message."""
    kept = []
    for index, r, profile in waits:
        handle, uid = waiting[profile], r.pod.metadata.uid or r.pod.key
        rejection = handle.rejection(uid)
        if not rejection:
            kept.append((index, r, profile))
            continue
        assert r.node is not None
        table.forget(r.pod.key, r.node)
        message = f"rejected while waiting on Permit: {rejection}"
        outcomes[index] = PodOutcome(r.pod, None, UNSCHEDULABLE, message, (), r.explain)
    waits[:] = kept


def _end_waits(
    table: NodeTable,
    outcomes: list[PodOutcome],
    waits: Sequence[tuple[int, ScheduleResult, str]],
    waiting: Mapping[str, WaitingPods],
) -> None:
    """The end of the run: a pod still waiting on Permit times out (kube's Permit timeout), one
    a plugin rejected fails; both give their node back."""
    for index, r, profile in waits:
        handle, uid = waiting[profile], r.pod.metadata.uid or r.pod.key
        if handle.allowed(uid):
            continue
        held = handle.get_waiting_pod(uid)
        if held is None:
            message = f"rejected while waiting on Permit: {handle.rejection(uid)}"
        else:
            message = f"rejected due to timeout waiting on {', '.join(sorted(held.pending_plugins))}"
        assert r.node is not None
        table.forget(r.pod.key, r.node)
        outcomes[index] = PodOutcome(r.pod, None, UNSCHEDULABLE, message, (), r.explain)


def _outcome(r: ScheduleResult) -> PodOutcome:
    victims = tuple(v.pod.key for v in r.preempted)
    if r.node is not None:
        message = f"preempted {len(victims)} pod(s) on node {r.node}: {', '.join(victims)}" if victims else ""
        return PodOutcome(r.pod, r.node, SCHEDULED, message, r.gpu_devices, r.explain, r.nominated_node, victims)
    return PodOutcome(r.pod, None, UNSCHEDULABLE, r.message, (), r.explain, r.nominated_node)


def _evicted(outcomes: list[PodOutcome], r: ScheduleResult) -> None:
    """The outcomes of the pods ``r``'s preemption evicted become Preempted (a pod given with
    spec.nodeName has no outcome yet: it gets one)."""
    if not r.preempted:
        return
    message = f"Preempted by {r.pod.key} on node {r.node}"
    index = {o.pod.key: i for i, o in enumerate(outcomes)}
    for victim in r.preempted:
        i = index.get(victim.pod.key)
        pod = victim.pod if i is None else outcomes[i].pod
        outcome = PodOutcome(pod, None, PREEMPTED, message)
        if i is None:
            outcomes.append(outcome)
        else:
            outcomes[i] = outcome


# ---- output ----------------------------------------------------------------------------------


def to_json(outcomes: Sequence[PodOutcome], *, explain: bool) -> JSONObject:
    pods = []
    for o in outcomes:
        entry: JSONObject = {
            "name": o.pod.name,
            "namespace": o.pod.namespace,
            "node": o.node,
            "status": o.status,
            "message": o.message,
            "gpuDevices": list(o.gpu_devices),
        }
        if o.nominated_node:
            entry["nominatedNode"] = o.nominated_node
        if o.preempted:
            entry["preempted"] = list(o.preempted)
        if o.pod.spec.unhonoured:
            entry["warnings"] = list(o.pod.spec.unhonoured)
        if explain:
            entry["explain"] = {"nodes": {n: _explain_json(e) for n, e in (o.explain or {}).items()}}
            if o.status == UNSCHEDULABLE:
                entry["hints"] = [{"change": h.change, "nodes": h.nodes, "example": h.example} for h in o.hints]
        pods.append(entry)
    return {"pods": pods}


def _explain_json(e: NodeExplain) -> JSONObject:
    return {
        "filter": e.filter,
        "scores": {p: {"raw": s.raw, "normalized": s.normalized, "weighted": s.weighted} for p, s in e.scores.items()},
        "total": e.total,
    }


def print_table(outcomes: Sequence[PodOutcome], out: TextIO, *, explain: bool, running: int = 0) -> None:
    """The table of ``outcomes``; ``running`` pods were given with spec.nodeName (counted on their
    nodes, not scheduled), said under the count so that no pod of the input goes unmentioned."""
    rows = [("POD", "NODE", "STATUS", "GPUS", "MESSAGE")]
    for o in outcomes:
        gpus = ",".join(str(d) for d in o.gpu_devices) or "-"
        rows.append((o.pod.key, o.node or "-", o.status, gpus, o.message))
    write_columns(rows, out)
    scheduled = sum(1 for o in outcomes if o.node)
    given = f"; {running} more given as running on their nodes (spec.nodeName)" if running else ""
    out.write(f"\n{scheduled}/{len(outcomes)} pods scheduled{given}\n")
    warnings = [(o.pod.key, line) for o in outcomes for line in o.pod.spec.unhonoured]
    if warnings:
        out.write("\nWarnings (fields kubus does not honour):\n")
        for key, line in warnings:
            out.write(f"  {key}: {line}\n")
    if not explain:
        return
    for o in outcomes:
        if o.node is None and o.status != UNSCHEDULABLE:
            # Gated, rejected, preempted, or no such profile: no node was looked at, nothing to tabulate.
            out.write(f"\n{o.pod.key} -> {o.status}: {o.message or 'not scheduled'}\n")
            continue
        out.write(f"\n{o.pod.key} -> {o.node or 'unschedulable'}\n")
        if o.status == UNSCHEDULABLE:
            out.write(hints_text(o.hints))
        plugins = sorted({p for e in (o.explain or {}).values() for p in e.scores})
        header = ("  NODE", "FILTER", *plugins, "TOTAL")
        lines = []
        ranked = sorted((o.explain or {}).items(), key=lambda kv: (kv[1].total is None, -(kv[1].total or 0), kv[0]))
        for node, e in ranked:
            scores = [f"{e.scores[p].weighted}" if p in e.scores else "-" for p in plugins]
            lines.append((f"  {node}", e.filter, *scores, "-" if e.total is None else str(e.total)))
        write_columns([header, *lines], out)


def hints_text(hints: Sequence[Hint]) -> str:
    """'What would make it fit', one line per hint (simulate --explain, describe pod)."""
    if not hints:
        return "  would fit: no single change (nor pair of changes) kubus tried opens a node\n"
    lines = [f"  would fit: {h.change} -> {h.nodes} node(s), e.g. {h.example}\n" for h in hints]
    return "".join(lines)


def write_columns(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Rows as left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]
        out.write("  ".join(cells).rstrip() + "\n")


def stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
