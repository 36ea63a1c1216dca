"""Preemption's candidates (kube's preemption util and pickOneNodeForPreemption): start times
and importance, how many candidates to look for and from which node, a Candidate, and the pick
among them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubus.api.objects import Pod
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import PodInfo
from kubus.kernels.tiebreak import stable_hash

__all__ = [
    "PRIORITY_OFFSET",
    "Candidate",
    "DryRunResult",
    "calculate_num_candidates",
    "earliest_victim_start_time",
    "importance",
    "pick_one_node_for_preemption",
    "pick_scores",
    "preemption_offset",
    "start_time",
]


PRIORITY_OFFSET = 2**31
"""kube adds MaxInt32+1 to every victim priority before summing them, so all terms are >= 0."""


# ---- kube's util: start times and importance ---------------------------------------------------


def start_time(info: PodInfo) -> float:
    """kube's GetPodStartTime: when the pod started; "now" (later than any start) when unknown."""
    return info.start_time if info.start_time > 0 else math.inf


def importance(info: PodInfo) -> tuple[int, float]:
    """Sort key, most important first: kube's MoreImportantPod (higher priority, then the
    earlier start)."""
    return -info.pod.spec.priority, start_time(info)


def earliest_victim_start_time(victims: Sequence[PodInfo]) -> float:
    """kube's GetEarliestPodStartTime: the earliest start among the victims of the highest
    priority. Raises ValueError for no victims."""
    top = max(v.pod.spec.priority for v in victims)
    return min(start_time(v) for v in victims if v.pod.spec.priority == top)


def calculate_num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """kube's calculateNumCandidates: max(num_nodes * percentage / 100, absolute), at most
    num_nodes."""
    return min(max(num_nodes * percentage // 100, absolute), num_nodes)


def preemption_offset(pod: Pod, num_nodes: int, seed: int = 0) -> int:
    """Where in the potential nodes the dry run for ``pod`` starts (kube: rand.Int31n(numNodes)):
    a hash of its uid (its namespace/name when it has none) under ``seed``, modulo
    ``num_nodes``; 0 for no nodes."""
    if num_nodes <= 0:
        return 0
    return stable_hash(seed, "preemption/" + (pod.metadata.uid or pod.key)) % num_nodes


# ---- candidates -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the pod fits once ``victims`` are evicted (kube's Candidate)."""

    node: str
    victims: tuple[PodInfo, ...]
    """Most important first."""
    num_pdb_violations: int = 0
    scores: tuple[int, int, int, int, float] | None = field(default=None, compare=False, repr=False)
    """`pick_scores`, when the dry run worked them out for many candidates at once (None: the
    pick works them out)."""


@dataclass(frozen=True, slots=True)
class DryRunResult:
    candidates: tuple[Candidate, ...]
    """Those that violate no budget first, each kind in the order examined."""
    statuses: dict[str, Status] = field(default_factory=dict)
    """Node -> why it is not a candidate, for every node examined that is not."""
    errors: tuple[str, ...] = ()
    """The messages of the Error statuses, in the order examined."""


def pick_one_node_for_preemption(candidates: Sequence[Candidate]) -> Candidate | None:
    """kube's pickOneNodeForPreemption with the default score functions, ties going to the
    earlier candidate; a candidate without victims wins at once. None for no candidates."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c
    # kube keeps the candidates with the best score of each function in turn and then takes the
    # first: the lexicographic best of all five scores, the first one of equals (as max does)
    return max(candidates, key=_scores_of)


def _scores_of(c: Candidate) -> tuple[int, int, int, int, float]:
    return c.scores if c.scores is not None else pick_scores(c)


def pick_scores(c: Candidate) -> tuple[int, int, int, int, float]:
    """kube's five default scores of a candidate with victims, higher better: fewest budget
    violations, lowest highest victim priority, smallest sum of victim priorities (each offset
    by MaxInt32+1), fewest victims, latest start of the highest-priority victims."""
    victims = c.victims
    priorities = [v.pod.spec.priority for v in victims]
    top = max(priorities)
    return (
        -c.num_pdb_violations,
        -priorities[0],
        -(sum(priorities) + PRIORITY_OFFSET * len(priorities)),
        -len(victims),
        min(start_time(v) for v, q in zip(victims, priorities, strict=True) if q == top),  # earliest_victim_start_time
    )
