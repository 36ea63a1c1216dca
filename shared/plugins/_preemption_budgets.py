"""PodDisruptionBudgets in preemption (kube's filterPodsWithPDBViolation): which pods a budget
counts, its disruptionsAllowed over the node table, and potential victims split by violation."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

from kubus.api.disruption import PodDisruptionBudget, disruptions_allowed
from kubus.api.objects import ObjectMeta, Pod, PodSpec
from kubus.api.pod_affinity import selector_matches
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo

__all__ = [
    "preemption_selects",
    "split_by_pdb_violation",
    "split_indices_by_pdb_violation",
    "table_disruptions_allowed",
]


# ---- PodDisruptionBudgets ---------------------------------------------------------------------


def preemption_selects(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    """Whether filterPodsWithPDBViolation counts ``pod`` against ``pdb``: same namespace, and a
    selector that matches its labels. Unlike the disruption controller, a nil or empty selector
    matches nothing here, and so does a pod without labels."""
    selector = pdb.selector
    if not pod.metadata.labels or selector is None:
        return False
    if not selector.match_labels and not selector.match_expressions:
        return False
    return pod.namespace == pdb.namespace and selector_matches(selector, pod.metadata.labels)


def table_disruptions_allowed(pdb: PodDisruptionBudget, table: NodeTable) -> int:
    """status.disruptionsAllowed of ``pdb`` over the pods in the table, every one of them placed:
    `kubus.api.disruption.disruptions_allowed` over a placed stand-in per pod of the budget's
    namespace (the table groups pods by labels; nothing else of them counts)."""

    def placed() -> Iterator[Pod]:
        for group in table.pods.label_groups():
            if group.namespace != pdb.namespace:
                continue
            stand_in = Pod(ObjectMeta("", group.namespace, labels=dict(group.labels)), PodSpec(node_name="-"))
            yield from itertools.repeat(stand_in, group.counts.total)

    return disruptions_allowed(pdb, placed())


def split_by_pdb_violation(
    victims: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget], allowed: Sequence[int]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """kube's filterPodsWithPDBViolation: (pods whose eviction would violate a budget, the
    others), each in the order given. Every budget a pod counts against is counted down as the
    pods go by; a pod violates when one goes below 0."""
    violating, others = split_indices_by_pdb_violation(range(len(victims)), victims, pdbs, allowed)
    return [victims[j] for j in violating], [victims[j] for j in others]


def split_indices_by_pdb_violation(
    order: Iterable[int], pods: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget], allowed: Sequence[int]
) -> tuple[list[int], list[int]]:
    """`split_by_pdb_violation` of ``pods[j] for j in order``, as indices."""
    if not pdbs:
        return [], list(order)
    left = list(allowed)
    violating: list[int] = []
    others: list[int] = []
    for j in order:
        pod = pods[j].pod
        violated = False
        for i, pdb in enumerate(pdbs):
            if preemption_selects(pdb, pod):
                left[i] -= 1
                violated = violated or left[i] < 0
        (violating if violated else others).append(j)
    return violating, others
