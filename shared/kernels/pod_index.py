"""The pods on the node table's nodes, indexed for plugins that look at other pods.

InterPodAffinity and PodTopologySpread ask "how many pods matching this selector are on each
node" and "which existing pods' terms select this pod". kube-scheduler answers by walking every
pod on every node for every pod it schedules; here pods are grouped:

- by (namespace, labels, terminating): a selector is evaluated once per distinct label set, and
  the group's per-row counts are summed into a vector over the table's rows (the plugins then sum
  it per topology domain with a bincount over the interned label column); terminating pods
  (deletionTimestamp set) are grouped apart, for the plugins that leave them out
  (PodTopologySpread, as kube's countPodsMatchSelector);
- by the affinity terms they carry (kind, term, weight): the existing pods' terms an incoming pod
  is checked against (existing anti-affinity, hardPodAffinityWeight, preferred terms).

Updated on every assume/forget, O(terms of the pod). Not thread-safe, as the table.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from kubus.api.pod_affinity import AffinityTerm

if TYPE_CHECKING:
    from kubus.kernels.nodeinfo import PodInfo

DENSE_AFTER = 32
"""A group on more rows than this keeps a dense vector once queried (cheaper to add up than a
dict); smaller ones stay sparse, so many small groups cost no memory per node."""


class TermKind(Enum):
    REQUIRED_AFFINITY = "requiredAffinity"
    REQUIRED_ANTI_AFFINITY = "requiredAntiAffinity"
    PREFERRED_AFFINITY = "preferredAffinity"
    PREFERRED_ANTI_AFFINITY = "preferredAntiAffinity"


class RowCounts:
    """How many pods of one group sit on each row."""

    __slots__ = ("_dense", "rows", "total")

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}
        self.total = 0
        self._dense: np.ndarray | None = None

    def change(self, row: int, delta: int) -> None:
        n = self.rows.get(row, 0) + delta
        if n:
            self.rows[row] = n
        else:
            self.rows.pop(row, None)
        self.total += delta
        if self._dense is not None:
            if row >= len(self._dense):
                self._dense = None  # the table grew; rebuilt on the next query
            else:
                self._dense[row] += delta

    def add_to(self, out: np.ndarray, weight: int = 1) -> None:
        """``out[row] += count * weight`` for every row of the group."""
        n = len(out)
        if len(self.rows) > DENSE_AFTER:
            if self._dense is None or len(self._dense) < n:
                dense = np.zeros(max(n, 64), dtype=np.int64)
                rows = np.fromiter(self.rows.keys(), dtype=np.intp, count=len(self.rows))
                dense[rows] = np.fromiter(self.rows.values(), dtype=np.int64, count=len(self.rows))
                self._dense = dense
            out += self._dense[:n] * weight if weight != 1 else self._dense[:n]
            return
        for row, count in self.rows.items():
            out[row] += count * weight


@dataclass(slots=True, eq=False)
class LabelGroup:
    """The pods of one namespace with one exact label set, terminating or not."""

    namespace: str
    labels: Mapping[str, str]
    terminating: bool = False
    """The group's pods have metadata.deletionTimestamp set."""
    counts: RowCounts = field(default_factory=RowCounts)


@dataclass(slots=True, eq=False)
class TermGroup:
    """Existing pods carrying one affinity term (resolved against their own namespace)."""

    kind: TermKind
    term: AffinityTerm
    weight: int
    """The preferred term's weight; 0 for required terms."""
    counts: RowCounts = field(default_factory=RowCounts)


PodMatch = Callable[[str, Mapping[str, str]], bool]
"""``match(namespace, labels)``: whether a pod is selected."""


class PodIndex:
    """Pods of a node table grouped by labels and by the affinity terms they carry."""

    def __init__(self) -> None:
        self._labels: dict[tuple[str, tuple[tuple[str, str], ...], bool], LabelGroup] = {}
        self._terms: dict[tuple[object, ...], TermGroup] = {}
        self.version = 0
        """Bumped on every change; `count` caches on it."""
        self._cache: dict[Hashable, np.ndarray] = {}
        self._cache_version = -1

    # ---- upkeep ------------------------------------------------------------------------------

    def add(self, row: int, info: PodInfo) -> None:
        self._change(row, info, +1)

    def remove(self, row: int, info: PodInfo) -> None:
        self._change(row, info, -1)

    def _change(self, row: int, info: PodInfo, delta: int) -> None:
        self.version += 1
        key = info.label_key
        group = self._labels.get(key)
        if group is None:
            meta = info.pod.metadata
            group = self._labels[key] = LabelGroup(meta.namespace, dict(meta.labels), key[2])
        group.counts.change(row, delta)
        if not group.counts.total:
            del self._labels[key]
        terms = info.affinity
        if terms is None:
            return
        for kind, required in (
            (TermKind.REQUIRED_AFFINITY, terms.required_affinity),
            (TermKind.REQUIRED_ANTI_AFFINITY, terms.required_anti_affinity),
        ):
            for term in required:
                self._change_term(kind, term, 0, row, delta)
        for kind, preferred in (
            (TermKind.PREFERRED_AFFINITY, terms.preferred_affinity),
            (TermKind.PREFERRED_ANTI_AFFINITY, terms.preferred_anti_affinity),
        ):
            for weighted in preferred:
                self._change_term(kind, weighted.term, weighted.weight, row, delta)

    def _change_term(self, kind: TermKind, term: AffinityTerm, weight: int, row: int, delta: int) -> None:
        key = (kind, term.key, weight)
        group = self._terms.get(key)
        if group is None:
            group = self._terms[key] = TermGroup(kind, term, weight)
        group.counts.change(row, delta)
        if not group.counts.total:
            del self._terms[key]

    # ---- queries -----------------------------------------------------------------------------

    def label_groups(self) -> Iterator[LabelGroup]:
        return iter(self._labels.values())

    def term_groups(self, *kinds: TermKind) -> Iterator[TermGroup]:
        """The groups of existing pods' terms of the given kinds (all kinds without any)."""
        return (g for g in self._terms.values() if not kinds or g.kind in kinds)

    def has_terms(self, *kinds: TermKind) -> bool:
        return any(True for _ in self.term_groups(*kinds))

    def count(
        self, rows: int, match: PodMatch, cache_key: Hashable | None = None, *, terminating: bool = True
    ) -> np.ndarray:
        """Pods that ``match`` selects, per row: an int64 vector of length ``rows`` (do not
        modify it: with ``cache_key`` it is shared until the index changes). ``terminating``
        False leaves out the pods being deleted (give such a count its own ``cache_key``)."""
        if cache_key is not None:
            if self._cache_version != self.version:
                self._cache.clear()
                self._cache_version = self.version
            hit = self._cache.get(cache_key)
            if hit is not None and len(hit) == rows:
                return hit
        out = np.zeros(rows, dtype=np.int64)
        for group in self._labels.values():
            if (terminating or not group.terminating) and match(group.namespace, group.labels):
                group.counts.add_to(out)
        if cache_key is not None:
            self._cache[cache_key] = out
        return out

    def __len__(self) -> int:
        """Number of pods indexed."""
        return sum(g.counts.total for g in self._labels.values())


__all__ = ["DENSE_AFTER", "LabelGroup", "PodIndex", "PodMatch", "RowCounts", "TermGroup", "TermKind"]
