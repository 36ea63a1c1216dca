"""What would make a pod fit: kube's FitError says why no node took a pod; a hint says which one
change to the pod would open nodes, how many, and one of them.

Each hint is the pod with one constraint relaxed (a request lowered to what some node has free,
a taint tolerated, a nodeSelector value changed or dropped, a required affinity or a DoNotSchedule
spread dropped, a host port dropped), run through the profile's own PreFilter and Filter over
every node of the table (`Scheduler.feasible`: the same kernels, one pass each, nothing placed).
So a hint is exact: the changed pod passes every filter on exactly `nodes` nodes of the table as
it is now. Hints are ranked by the nodes they open; a relaxation that opens none is no hint.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from kubus.api.gpus import GPU_MODEL_ANNOTATION
from kubus.api.objects import (
    NVIDIA_GPU,
    UNSCHEDULABLE_TAINT,
    Affinity,
    Container,
    Pod,
    PreemptionPolicy,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from kubus.api.quantity import format_bytes, format_cpu
from kubus.api.requests import pod_requests
from kubus.framework.scheduling import Scheduler

__all__ = ["Hint", "fit_hints"]

_MAX_TAINTS = 5
"""Taints tried, the ones on the most nodes first."""
_MAX_VALUES = 3
"""Other values of a nodeSelector label tried, the most common first."""


@dataclass(frozen=True, slots=True)
class Hint:
    change: str
    """The change, in words: 'cpu request 5.5 (now 6)'."""
    nodes: int
    """Nodes where the changed pod passes every filter now."""
    example: str
    """One of them (the first in the table's order)."""
    pod: Pod
    """The pod with the change made: what `nodes` was counted for."""


Relaxation = Callable[[Pod], tuple[str, Pod] | None]
"""One change: the pod -> (the change in words, the changed pod), None when it does not apply."""

GPU_ANNOTATION_PREFIX = "kubus.io/gpu"
"""kubus' GPU annotations on a pod (kubus.api.gpus): with any of them it asks for a GPU."""

_MAX_PAIRS = 40
"""Pairs of changes tried when no single change opens a node."""


def fit_hints(
    scheduler: Scheduler,
    pod: Pod,
    *,
    limit: int = 8,
    ends_at: Mapping[str, float] | None = None,
    now: float = 0.0,
) -> list[Hint]:
    """The changes to ``pod`` that would let it pass Filter on some node of ``scheduler``'s
    table as it is now, most nodes opened first (at most ``limit``): single changes, or pairs of
    them when no single one opens a node; with ``ends_at`` (pod key -> when it finishes, epoch
    seconds, as of ``now``) also how long until enough of those pods finish. Empty when the pod
    already fits somewhere or nothing tried helps. Leaves the table holding the pods it held."""
    table = scheduler.table
    if len(table) == 0 or scheduler.feasible(pod).any():
        return []
    relaxations = _relaxations(scheduler, pod)
    hints = _tried(scheduler, ((r,) for r in relaxations), pod)
    hints += _preempting(scheduler, pod)
    if ends_at:
        hints += _when_pods_finish(scheduler, pod, ends_at, now)
    if not hints:
        pairs = ((a, b) for i, a in enumerate(relaxations) for b in relaxations[i + 1 :])
        hints = _tried(scheduler, itertools.islice(pairs, _MAX_PAIRS), pod)
    hints.sort(key=lambda h: -h.nodes)  # stable: ties keep the order tried
    return hints[:limit]


def _tried(scheduler: Scheduler, combos: Iterable[tuple[Relaxation, ...]], pod: Pod) -> list[Hint]:
    hints: list[Hint] = []
    seen: set[str] = set()
    for combo in combos:
        try:
            applied = _apply(combo, pod)
            if applied is None or applied[0] in seen:
                continue
            change, changed = applied
            seen.add(change)
            mask = scheduler.feasible(changed)
        except ValueError:  # the change made a pod kube would refuse (e.g. GPU annotations, no GPU)
            continue
        if mask.any():
            first = int(np.flatnonzero(mask)[0])
            hints.append(Hint(change, int(mask.sum()), scheduler.table.node_info(first).name, changed))
    return hints


def _preempting(scheduler: Scheduler, pod: Pod) -> list[Hint]:
    """A pod that may not preempt (preemptionPolicy Never): where the profile's preemption would
    put it if it could, and whom it would evict."""
    if pod.spec.preemption_policy is not PreemptionPolicy.NEVER:
        return []
    changed = replace(pod, spec=replace(pod.spec, preemption_policy=PreemptionPolicy.PREEMPT_LOWER_PRIORITY))
    found = scheduler.preemption(changed)
    if found is None:
        return []
    node, victims = found
    names = ", ".join(v.pod.key for v in victims)
    change = f"preemptionPolicy PreemptLowerPriority (now Never), evicting {len(victims)} pod(s) on {node}: {names}"
    return [Hint(change, 1, node, changed)]


def _when_pods_finish(scheduler: Scheduler, pod: Pod, ends_at: Mapping[str, float], now: float) -> list[Hint]:
    """The soonest time at which, the pods due to finish by then gone, the pod passes Filter on
    some node: a binary search over the finishing times (fitting only gets easier as pods
    leave), each probe one pass with those pods taken off the table and put back."""
    table = scheduler.table
    where = {key: info.name for info in table.node_infos() for key in info.pods}
    finishing = sorted((t, key) for key, t in ends_at.items() if t > 0 and key in where)
    if not finishing:
        return []

    def fits_after(i: int) -> np.ndarray:
        gone = [(table.forget(key, where[key]), where[key]) for _, key in finishing[: i + 1]]
        try:
            return scheduler.feasible(pod)
        finally:
            for info, node in reversed(gone):
                table.assume(info, node)

    mask = fits_after(len(finishing) - 1)
    if not mask.any():
        return []
    low, high = 0, len(finishing) - 1  # the first index after which the pod fits is in [low, high]
    while low < high:
        mid = (low + high) // 2
        if fits_after(mid).any():
            high = mid
        else:
            low = mid + 1
    until = finishing[low][0]
    while low + 1 < len(finishing) and finishing[low + 1][0] == until:
        low += 1  # every pod due at that moment is gone by then
    mask = fits_after(low)
    first = int(np.flatnonzero(mask)[0])
    change = f"wait {_duration(until - now)}: {low + 1} running pod(s) finish by then"
    return [Hint(change, int(mask.sum()), table.node_info(first).name, pod)]


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _apply(combo: tuple[Relaxation, ...], pod: Pod) -> tuple[str, Pod] | None:
    """The changes of ``combo`` made in turn: (their words, the pod), None if one does not apply."""
    words = []
    for relax in combo:
        step = relax(pod)
        if step is None:
            return None
        words.append(step[0])
        pod = step[1]
    return ", and ".join(words), pod


# ---- what is tried ----------------------------------------------------------------------------


def _relaxations(scheduler: Scheduler, pod: Pod) -> list[Relaxation]:
    """Every change tried for ``pod``, lowering a request last (so that in a pair it asks for
    what is free where the other change lets the pod go)."""
    out: list[Relaxation] = [*_taints(scheduler), *_node_selector(scheduler, pod), *_gpu_model(scheduler, pod)]
    spec = pod.spec
    affinity = spec.affinity or Affinity()
    if affinity.node_affinity is not None and affinity.node_affinity.required is not None:
        out.append(_drop_affinity("node_affinity", "drop the required node affinity"))
    if affinity.pod_affinity is not None and affinity.pod_affinity.required:
        out.append(_drop_affinity("pod_affinity", "drop the required pod affinity"))
    if affinity.pod_anti_affinity is not None and affinity.pod_anti_affinity.required:
        out.append(_drop_affinity("pod_anti_affinity", "drop the required pod anti-affinity"))
    for i, constraint in enumerate(spec.topology_spread_constraints):
        if constraint.when_unsatisfiable == "DoNotSchedule":
            out.append(_schedule_anyway(i))
    ports = sorted({p.host_port for c in (*spec.containers, *spec.init_containers) for p in c.ports if p.host_port})
    out += [_drop_host_port(port) for port in ports]
    out += [_lower_request(scheduler, name) for name, asked in sorted(pod_requests(pod).items()) if asked > 0]
    return out


def _lower_request(scheduler: Scheduler, name: str) -> Relaxation:
    """The request of ``name`` lowered to the most free on a node where the pod would pass
    every filter were it to ask for none of it."""

    def relax(pod: Pod) -> tuple[str, Pod] | None:
        table = scheduler.table
        row = table.resource_index.get(name)
        asked = pod_requests(pod).get(name, 0)
        if row is None or name == "pods" or asked <= 0:
            return None
        # a pod with kubus' GPU annotations must ask for a GPU: its floor is one, not none
        floor = 1 if name == NVIDIA_GPU and _has_gpu_annotations(pod) else 0
        if asked <= floor:
            return None
        open_rows = scheduler.feasible(_with_request(pod, name, floor))
        if not open_rows.any():
            return None  # something else rejects every node: lowering this alone opens none
        view = table.view()
        alloc, req = table.backend.to_host(view.alloc[row]), table.backend.to_host(view.req[row])
        most = int((alloc - req)[open_rows].max())
        if not 0 < most < asked:
            return None
        return f"{name} request {_amount(name, most)} (now {_amount(name, asked)})", _with_request(pod, name, most)

    return relax


def _taints(scheduler: Scheduler) -> list[Relaxation]:
    """The taints that repel pods (a cordoned node's included), on the most nodes first, each
    tolerated. Counted over the table's interned taint sets, not node by node."""
    table = scheduler.table
    valid = table.valid_rows()
    view = table.view()
    sets = table.backend.to_host(view.taint_set)[valid]
    counts: Counter[Taint] = Counter()
    ids, per_id = np.unique(sets, return_counts=True)
    for i, n in zip(ids.tolist(), per_id.tolist(), strict=True):
        for taint in set(table.taint_sets.values[i] or ()):
            if taint.effect is not TaintEffect.PREFER_NO_SCHEDULE:
                counts[taint] += n
    cordoned = int(table.backend.to_host(view.unschedulable)[valid].sum())
    if cordoned:
        counts[UNSCHEDULABLE_TAINT] += cordoned
    return [_tolerate(taint) for taint, _ in counts.most_common(_MAX_TAINTS)]


def _tolerate(taint: Taint) -> Relaxation:
    operator = TolerationOperator.EXISTS if taint == UNSCHEDULABLE_TAINT else TolerationOperator.EQUAL
    toleration = Toleration(
        taint.key, operator, "" if operator is TolerationOperator.EXISTS else taint.value, taint.effect
    )
    text = f"{taint.key}={taint.value}" if taint.value else taint.key

    def relax(pod: Pod) -> tuple[str, Pod]:
        spec = replace(pod.spec, tolerations=(*pod.spec.tolerations, toleration))
        return f"tolerate taint {text}:{taint.effect.value}", replace(pod, spec=spec)

    return relax


def _node_selector(scheduler: Scheduler, pod: Pod) -> list[Relaxation]:
    """Per nodeSelector label: the values nodes have instead (most common first), then none.
    Counted over the table's interned label column, not node by node."""
    table = scheduler.table
    out: list[Relaxation] = []
    for key, value in sorted(pod.spec.node_selector.items()):
        col = table.host_label(key)
        if col is not None:
            per_value = np.bincount(col[table.valid_rows()], minlength=table.domains(key))
            names = table.label_values[key].values
            ranked = sorted((-int(n), names[i]) for i, n in enumerate(per_value.tolist()) if i and n)
            others = [v for _, v in ranked if v != value][:_MAX_VALUES]
            out += [_select(key, value, other) for other in others]
        out.append(_select(key, value, None))
    return out


def _gpu_model(scheduler: Scheduler, pod: Pod) -> list[Relaxation]:
    """The GPU models nodes have (most common first) instead of the one the pod names, then any."""
    wanted = pod.metadata.annotations.get(GPU_MODEL_ANNOTATION)
    if wanted is None:
        return []
    models: Counter[str] = Counter()
    for info in scheduler.table.node_infos():
        models.update({g.model for g in info.node.gpus} - {wanted})
    out = [_annotate(GPU_MODEL_ANNOTATION, wanted, m) for m, _ in models.most_common(_MAX_VALUES)]
    return [*out, _annotate(GPU_MODEL_ANNOTATION, wanted, None)]


def _annotate(key: str, value: str, other: str | None) -> Relaxation:
    def relax(pod: Pod) -> tuple[str, Pod]:
        annotations = {k: v for k, v in pod.metadata.annotations.items() if k != key}
        words = f"drop annotation {key}={value}"
        if other is not None:
            annotations[key] = other
            words = f"annotation {key}={other} (now {value})"
        return words, replace(pod, metadata=replace(pod.metadata, annotations=annotations))

    return relax


def _select(key: str, value: str, other: str | None) -> Relaxation:
    def relax(pod: Pod) -> tuple[str, Pod]:
        selector = {k: v for k, v in pod.spec.node_selector.items() if k != key}
        if other is None:
            return f"drop nodeSelector {key}={value}", _with_selector(pod, selector)
        return f"nodeSelector {key}={other} (now {value})", _with_selector(pod, {**selector, key: other})

    return relax


def _drop_affinity(field: str, words: str) -> Relaxation:
    def relax(pod: Pod) -> tuple[str, Pod] | None:
        affinity = pod.spec.affinity
        if affinity is None:
            return None
        kept = getattr(affinity, field)
        changed = replace(kept, required=None if field == "node_affinity" else ())
        return words, replace(pod, spec=replace(pod.spec, affinity=replace(affinity, **{field: changed})))

    return relax


def _schedule_anyway(index: int) -> Relaxation:
    def relax(pod: Pod) -> tuple[str, Pod]:
        constraints = list(pod.spec.topology_spread_constraints)
        c = constraints[index]
        constraints[index] = replace(c, when_unsatisfiable="ScheduleAnyway")
        spec = replace(pod.spec, topology_spread_constraints=tuple(constraints))
        words = f"topology spread on {c.topology_key} (maxSkew {c.max_skew}): whenUnsatisfiable ScheduleAnyway"
        return words, replace(pod, spec=spec)

    return relax


def _drop_host_port(port: int) -> Relaxation:
    def relax(pod: Pod) -> tuple[str, Pod]:
        def strip(c: Container) -> Container:
            return replace(c, ports=tuple(p for p in c.ports if p.host_port != port))

        spec = replace(
            pod.spec,
            containers=tuple(strip(c) for c in pod.spec.containers),
            init_containers=tuple(strip(c) for c in pod.spec.init_containers),
        )
        return f"drop hostPort {port}", replace(pod, spec=spec)

    return relax


# ---- building the changed pod -----------------------------------------------------------------


def _has_gpu_annotations(pod: Pod) -> bool:
    return any(k.startswith(GPU_ANNOTATION_PREFIX) for k in pod.metadata.annotations)


def _amount(resource: str, n: int) -> str:
    if resource == "cpu":
        return format_cpu(n)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return format_bytes(n)
    return str(n)


def _with_request(pod: Pod, resource: str, amount: int) -> Pod:
    """``pod`` asking for exactly ``amount`` of ``resource`` (pod_requests), the rest as it was:
    the resource off every container and the overhead, then ``amount`` on the first container."""

    def without(c: Container) -> Container:
        return replace(
            c,
            requests={k: v for k, v in c.requests.items() if k != resource},
            limits={k: v for k, v in c.limits.items() if k != resource},
        )

    containers = [without(c) for c in pod.spec.containers]
    if amount:
        first = containers[0]
        containers[0] = replace(first, requests={**first.requests, resource: amount})
    spec = replace(
        pod.spec,
        containers=tuple(containers),
        init_containers=tuple(without(c) for c in pod.spec.init_containers),
        overhead={k: v for k, v in pod.spec.overhead.items() if k != resource},
    )
    return replace(pod, spec=spec)


def _with_selector(pod: Pod, selector: dict[str, str]) -> Pod:
    return replace(pod, spec=replace(pod.spec, node_selector=selector))
