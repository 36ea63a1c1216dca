"""PodTopologySpread's Filter side (kube's calPreFilterState, doFilter, updateWithPod): the
matching pods per domain of each DoNotSchedule constraint, the skew check per row, and the counts
moved by a pod added or removed (AddPod/RemovePod)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kubus.api.objects import Node, Pod
from kubus.api.pod_affinity import selector_matches
from kubus.framework.interface import FilterResult, Rejection, Rows
from kubus.framework.status import Code
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins._spreading_constraints import SpreadConstraint
from kubus.plugins._spreading_counts import (
    InclusionMasks,
    host_rows,
    label_column,
    matching_pods,
    node_included,
    valid_mask,
)

__all__ = [
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "Domains",
    "PreFilterState",
    "filter_rows",
    "pre_filter_state",
    "updated_with_pod",
]


ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Domains:
    """One constraint's topology domains over the table's rows (host arrays; never mutated)."""

    col: np.ndarray
    """int32 per row: the interned value of the topology key (0: the node lacks the key)."""
    counts: np.ndarray
    """int64 per domain id: matching pods on the domain's eligible nodes."""
    present: np.ndarray
    """bool per domain id: the domain has an eligible node (kube's TpValueToMatchNum keys)."""
    ids: Mapping[str, int]
    """Label value -> domain id (the table's vocabulary of the key), for AddPod/RemovePod."""

    def min_match(self, min_domains: int) -> int:
        """kube's preFilterState.minMatchNum: the global minimum, 0 below minDomains domains."""
        n = int(self.present.sum())
        if n < min_domains:
            return 0
        return int(self.counts[self.present].min()) if n else MAX_INT32


@dataclass(frozen=True, slots=True)
class PreFilterState:
    constraints: tuple[SpreadConstraint, ...]
    domains: tuple[Domains, ...]
    self_match: tuple[bool, ...]
    """Whether the pod matches each constraint's selector itself."""


def pre_filter_state(pod: Pod, table: NodeTable, constraints: tuple[SpreadConstraint, ...]) -> PreFilterState:
    """kube's calPreFilterState: per constraint, the matching pods per domain over the nodes it admits."""
    cols = [label_column(table, c.topology_key) for c in constraints]
    eligible_base = valid_mask(table)
    for col in cols:
        eligible_base &= col != 0
    masks = InclusionMasks(table, pod)
    domains = []
    for c, col in zip(constraints, cols, strict=True):
        eligible = masks.apply(c, eligible_base)
        per_row = matching_pods(table, pod, c)
        size = table.domains(c.topology_key)
        in_domain = col[eligible]
        counts = np.bincount(in_domain, weights=per_row[eligible], minlength=size).astype(np.int64)
        present = np.bincount(in_domain, minlength=size) > 0
        values = table.label_values.get(c.topology_key)
        domains.append(Domains(col, counts, present, values.ids if values is not None else {}))
    labels = pod.metadata.labels
    self_match = tuple(selector_matches(c.selector, labels) for c in constraints)
    return PreFilterState(constraints, tuple(domains), self_match)


def filter_rows(s: PreFilterState, view: TableView, rows: Rows) -> FilterResult:
    """kube's doFilter over ``rows``, constraints in order: the first failing one is a node's reason."""
    at = host_rows(view, rows)
    n = int(view.valid[rows].shape[0])
    # 0 passes, 1 skew too large, 2 missing the topology key: the first failing constraint's
    reason = np.zeros(n, dtype=np.int8)
    for c, d, self_match in zip(s.constraints, s.domains, s.self_match, strict=True):
        col = d.col[at]
        open_ = reason == 0
        missing = col == 0
        reason[open_ & missing] = 2
        skew = d.counts[col] + int(self_match) - d.min_match(c.min_domains)
        reason[open_ & ~missing & (skew > c.max_skew)] = 1
    xp = view.xp
    return FilterResult(
        xp.asarray(reason == 0),
        (
            Rejection(ERR_REASON_CONSTRAINTS_NOT_MATCH, xp.asarray(reason == 1), Code.UNSCHEDULABLE),
            Rejection(ERR_REASON_NODE_LABEL_NOT_MATCH, xp.asarray(reason == 2), Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
        ),
    )


def updated_with_pod(s: PreFilterState, pod: Pod, other: Pod, node: Node, delta: int) -> PreFilterState:
    """kube's updateWithPod: the count of the node's domain moves by ``delta`` for every
    constraint that selects ``other`` and whose inclusion policies admit the node. The state
    is a new one (``s`` itself for a pod of another namespace or a node without every topology
    key), never changed in place (clones share it)."""
    labels = node.metadata.labels
    if other.namespace != pod.namespace or not all(c.topology_key in labels for c in s.constraints):
        return s
    domains = list(s.domains)
    for i, c in enumerate(s.constraints):
        if not selector_matches(c.selector, other.metadata.labels):
            continue
        if not node_included(c, pod, node):
            continue
        d = domains[i]
        value = d.ids.get(labels[c.topology_key])
        if value is None or value >= len(d.counts):
            continue  # a value the table has never seen: no node of the table is in it
        counts, present = d.counts.copy(), d.present.copy()
        counts[value] += delta
        present[value] = True
        domains[i] = Domains(d.col, counts, present, d.ids)
    return PreFilterState(s.constraints, tuple(domains), s.self_match)
