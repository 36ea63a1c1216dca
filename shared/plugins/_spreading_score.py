"""PodTopologySpread's Score side (kube's PreScore, Score, NormalizeScore): what the nodes alone
give for a pod's ScheduleAnyway constraints, every row's score over the scored rows, and the
normalization."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kubus.api.objects import Pod
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable
from kubus.plugins._gomath import go_log, go_round
from kubus.plugins._spreading_constraints import LABEL_HOSTNAME, SpreadConstraint
from kubus.plugins._spreading_counts import InclusionMasks, label_column, matching_pods, valid_mask

__all__ = ["PreScoreState", "ScoreNodes", "normalized", "pre_score_state", "score_nodes"]


@dataclass(frozen=True, slots=True)
class PreScoreState:
    raw: np.ndarray
    """int64 per row: the Score of every row (0 for ignored ones)."""
    ignored: np.ndarray
    """bool per row: the node misses a topology key (kube's IgnoredNodes)."""
    rows: np.ndarray
    """The rows PreScore saw, in the order their scores come to NormalizeScore."""


@dataclass(frozen=True, slots=True)
class ScoreNodes:
    """What PreScore reads of the nodes alone, for one pod and its ScheduleAnyway constraints:
    the same for every decision of a pod class until the node set changes (placements do not
    change it), so it is kept in the class's CycleState."""

    nodes_version: int
    rows: int
    cols: tuple[np.ndarray, ...]
    """The topology key's interned label column, per constraint."""
    has_all: np.ndarray
    """bool per row: the node has every required topology key."""
    eligible: tuple[np.ndarray, ...]
    """bool per row, per constraint: a node (of every key) its inclusion policies admit."""
    ignored: np.ndarray
    """``~has_all``."""
    valid: int
    """How many nodes the table has: PreScore over that many rows is over every node."""
    every_node_keyed: bool
    """Every node has every required topology key (none is ignored)."""
    present: tuple[np.ndarray | None, ...]
    """Per constraint (None for the hostname): bool per domain, some node is in it."""
    admitted: tuple[tuple[np.ndarray, np.ndarray], ...]
    """Per constraint: the rows ``eligible`` holds and their domains."""


def score_nodes(
    pod: Pod, table: NodeTable, constraints: tuple[SpreadConstraint, ...], system_defaulted: bool
) -> ScoreNodes:
    """What PreScore reads of the nodes alone (`ScoreNodes`)."""
    # kube requires every topology key unless the constraints are the System defaults of a
    # pod without its own (there a node lacking the zone counts as a "" zone of its own)
    require_all = bool(pod.spec.topology_spread_constraints) or not system_defaulted
    cols = tuple(label_column(table, c.topology_key) for c in constraints)
    has_all = np.ones(table.rows, dtype=bool)
    if require_all:
        for col in cols:
            has_all &= col != 0
    valid = valid_mask(table)
    eligible_base = valid & has_all
    masks = InclusionMasks(table, pod)
    eligible = tuple(masks.apply(c, eligible_base) for c in constraints)
    present = tuple(
        None
        if c.topology_key == LABEL_HOSTNAME
        else np.bincount(col[valid], minlength=table.domains(c.topology_key)) > 0
        for c, col in zip(constraints, cols, strict=True)
    )
    admitted_rows = [np.flatnonzero(e) for e in eligible]
    admitted = tuple((rows, col[rows]) for col, rows in zip(cols, admitted_rows, strict=True))
    return ScoreNodes(
        table.nodes_version, table.rows, cols, has_all, eligible, ~has_all, int(valid.sum()),
        bool(has_all[valid].all()), present, admitted,
    )  # fmt: skip


def pre_score_state(
    pod: Pod, table: NodeTable, constraints: tuple[SpreadConstraint, ...], rows: NDArray[np.intp], nodes: ScoreNodes
) -> PreScoreState:
    """kube's PreScore over the scored ``rows``: every row's Score (0 for ignored rows)."""
    n = table.rows
    scored = np.asarray(rows, dtype=np.intp)
    has_all = nodes.has_all
    # every node scored and keyed (the common case): what the nodes alone give is known
    every = nodes.every_node_keyed and len(scored) == nodes.valid
    ignored_scored = np.zeros(len(scored), dtype=bool) if every else ~has_all[scored]
    kept = scored if every else scored[~ignored_scored]
    score = np.zeros(n, dtype=np.float64)
    raw: np.ndarray | None = None
    for k, (c, col, admitted) in enumerate(zip(constraints, nodes.cols, nodes.eligible, strict=True)):
        per_row = matching_pods(table, pod, c)
        size = table.domains(c.topology_key)
        if c.topology_key == LABEL_HOSTNAME:
            # the hostname special case: the node's own pods, whatever the policies
            count = per_row.astype(np.float64)
            domains = len(scored) - int(ignored_scored.sum())
            term = count * go_log(float(domains + 2)) + float(c.max_skew - 1)
            score = score + np.where(col != 0, term, 0.0)
            continue
        if every:
            # every node's domain is present: the eligible rows are the admitted ones
            present = nodes.present[k]
            assert present is not None
            admitted_rows, admitted_cols = nodes.admitted[k]
            per_domain = np.bincount(admitted_cols, weights=per_row[admitted_rows], minlength=size)
        else:
            present = np.bincount(col[kept], minlength=size) > 0
            eligible = admitted & present[col]
            per_domain = np.bincount(col[eligible], weights=per_row[eligible], minlength=size)
        domains = int(present.sum())
        # the term of each domain, then of each row: the same float arithmetic per value
        terms = per_domain * go_log(float(domains + 2)) + float(c.max_skew - 1)
        terms[0] = 0.0  # value 0: the node lacks the key
        if len(constraints) == 1:
            raw = go_round(terms)[col]  # one term: round the few domains, not every row
        else:
            score = score + terms[col]
    if raw is None:
        raw = go_round(score)
    ignored = nodes.ignored
    raw[ignored] = 0
    return PreScoreState(raw, ignored, scored)


def normalized(s: PreScoreState, xp: ArrayModule, scores: Array) -> Array:
    """kube's NormalizeScore over the scores of the rows PreScore saw, in that order: ignored
    nodes 0; with max and min over the others, 100 when max is 0, else
    100 * (max + min - score) / max."""
    if len(s.rows) != int(scores.shape[0]):
        raise ValueError(
            f"PodTopologySpread: NormalizeScore got {int(scores.shape[0])} scores for the "
            f"{len(s.rows)} rows of its PreScore"
        )
    ignored = xp.asarray(s.ignored[s.rows])
    counted = scores[~ignored]
    if counted.shape[0] == 0:
        return xp.zeros_like(scores)
    top = max(int(counted.max()), 0)
    low = int(counted.min())
    if top == 0:
        normalized = xp.full_like(scores, MAX_NODE_SCORE)
    else:
        normalized = MAX_NODE_SCORE * (top + low - scores) // top
    return xp.where(ignored, 0, normalized).astype(xp.int64)
