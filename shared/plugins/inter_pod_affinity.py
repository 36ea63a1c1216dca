"""InterPodAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore): where a pod may go, and
where it would rather go, given the pods already placed, per topology domain.

A topology domain is the set of nodes that share one value of a label key (the term's
topologyKey); a node without the key is in no domain of it. Kube walks every pod of every node
for each pod it schedules; here the existing pods come grouped from the node table's `PodIndex`
(by label set, and by the affinity terms they carry), so one pod costs one pass over the groups,
then, per topology key, one `bincount` of per-row counts over the interned label column (the
counts per domain) and one gather back to the rows. The domain arithmetic is done on the host with
numpy; only the final masks and scores go to the backend (CuPy gives identical results).

Filter, kube's three checks in kube's order, one reason per rejected node (the first that fails):
1. the pod's required affinity: every term's topology key on the node, and in the node's domain
   of every term some pod matching *all* the terms; unless no pod anywhere matches them all and
   the pod matches them itself (the first pod of a series) — UnschedulableAndUnresolvable;
2. the pod's required anti-affinity: no pod matching a term in the node's domain of that term;
3. the existing pods' required anti-affinity: no pod whose term selects this pod in the node's
   domain of that term.
Score: kube's topologyScore, the sum over topology keys of what the node's domain collected: the
pod's preferred affinity (+weight) and anti-affinity (-weight) for every pod they select, and for
every existing pod whose terms select this pod, its required affinity (hardPodAffinityWeight) and
preferred affinity (+weight) and anti-affinity (-weight). NormalizeScore: min-max to 0..100.

The pod's namespaceSelectors are resolved as kube's mergeAffinityTermNamespacesIfNotEmpty does
(every namespace whose labels match, the labels from `NodeTable.namespaces` plus the
`kubernetes.io/metadata.name` label every namespace has), lazily, per namespace of the pods looked
at. After pkg/scheduler/framework/plugins/interpodaffinity (filtering.go, scoring.go, plugin.go).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from kubus.api.namespaces import namespace_labels
from kubus.api.objects import Node, Pod
from kubus.api.pod_affinity import AffinityTerm, PodAffinityTerms, selector_matches
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, FilterResult, Rejection, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    POD_BOUND,
    POD_FREED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
)
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import Interned, NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.kernels.pod_index import PodMatch, TermKind

ERR_REASON_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1

_INCOMING_KEY = "InterPodAffinity/incoming"
_PRE_FILTER_KEY = "PreFilterInterPodAffinity"
_PRE_SCORE_KEY = "PreScoreInterPodAffinity"
_NO_TERMS = PodAffinityTerms()
_MISSING = object()

DomainCounts = dict[str, np.ndarray]
"""Topology key -> an int64 per domain (indexed by the label's interned id; index 0, the nodes
without the label, is always 0): kube's topologyToMatchedTermCount / topologyScore."""


# ---- the incoming pod ------------------------------------------------------------------------


class _NamespaceLabels:
    """Namespace -> its labels (`kubus.api.pod_affinity.namespace_labels`), each looked up once."""

    __slots__ = ("_known", "_seen")

    def __init__(self, known: Mapping[str, Mapping[str, str]]) -> None:
        self._known = known
        self._seen: dict[str, Mapping[str, str]] = {}

    def __call__(self, namespace: str) -> Mapping[str, str]:
        labels = self._seen.get(namespace)
        if labels is None:
            labels = self._seen[namespace] = namespace_labels(self._known, namespace)
        return labels


@dataclass(frozen=True, slots=True, eq=False)
class _Incoming:
    """The pod being scheduled: how other pods' terms see it, and its own resolved terms."""

    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str]
    terms: PodAffinityTerms
    namespaces: _NamespaceLabels

    @classmethod
    def of(cls, pod: Pod, table: NodeTable) -> _Incoming:
        namespaces = _NamespaceLabels(table.namespaces)
        terms = PodAffinityTerms.of(pod) or _NO_TERMS
        return cls(pod.namespace, pod.metadata.labels, namespaces(pod.namespace), terms, namespaces)

    def selects(self, term: AffinityTerm, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether this pod's own term (its namespaceSelector merged) selects a pod in
        ``namespace`` with ``labels``."""
        return term.matches(namespace, labels, self.namespaces(namespace))

    def selects_all(self, terms: tuple[AffinityTerm, ...], namespace: str, labels: Mapping[str, str]) -> bool:
        """kube's podMatchesAllAffinityTerms: False for no terms."""
        return bool(terms) and all(self.selects(t, namespace, labels) for t in terms)

    def selected_by(self, term: AffinityTerm) -> bool:
        """Whether another pod's term selects this pod."""
        return term.matches(self.namespace, self.labels, self.namespace_labels)

    @property
    def has_preferred(self) -> bool:
        return bool(self.terms.preferred_affinity or self.terms.preferred_anti_affinity)


def _cacheable(*terms: AffinityTerm) -> bool:
    """A count over terms that name their namespaces depends on nothing but the pods: it may be
    cached in the PodIndex (a namespaceSelector also reads the namespaces' labels)."""
    return all(t.namespace_selector is None for t in terms)


# ---- per-domain arithmetic -------------------------------------------------------------------


def _per_domain(table: NodeTable, key: str, per_row: np.ndarray) -> np.ndarray:
    """``per_row`` summed over the nodes of each domain of topology key ``key``."""
    out = np.zeros(table.domains(key), dtype=np.int64)
    col = table.host_label(key)
    if col is None:
        return out
    valid = table.valid_rows()
    if len(valid) != len(col):  # rows freed by deleted nodes hold stale labels: leave them out
        col, per_row = col[valid], per_row[valid]
    # float64 weights are exact for integer counts far beyond any cluster's
    out[:] = np.bincount(col, weights=per_row, minlength=len(out))
    out[0] = 0
    return out


def _at_rows(table: NodeTable, key: str, per_domain: np.ndarray) -> np.ndarray:
    """``per_domain`` of each row's domain of ``key`` (0 for a row without the label)."""
    col = table.host_label(key)
    if col is None:
        return np.zeros(table.rows, dtype=np.int64)
    short = table.domains(key) - len(per_domain)
    if short > 0:  # label values interned after the counts were taken: no pod counted there
        per_domain = np.concatenate([per_domain, np.zeros(short, dtype=np.int64)])
    result: np.ndarray = per_domain[col]
    return result


def _accumulate(rows: int, into: dict[str, np.ndarray], key: str) -> np.ndarray:
    acc = into.get(key)
    if acc is None:
        acc = into[key] = np.zeros(rows, dtype=np.int64)
    return acc


def _to_domains(table: NodeTable, per_row: Mapping[str, np.ndarray]) -> DomainCounts:
    return {key: _per_domain(table, key, counts) for key, counts in per_row.items()}


def _select_rows(view: TableView, host: np.ndarray, rows: Rows) -> Array:
    """``host[rows]`` as a fresh backend array."""
    picked = host[rows].copy() if isinstance(rows, slice) else host[view.table.backend.to_host(rows)]
    return view.xp.asarray(picked)


# ---- PreFilter / Filter state -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FilterMasks:
    """Per row: passes, and which of kube's three checks rejects it first."""

    passed: np.ndarray
    affinity: np.ndarray
    anti_affinity: np.ndarray
    existing_anti_affinity: np.ndarray


@dataclass(slots=True, eq=False)
class _PreFilterState:
    """kube's preFilterState, per domain. Treated as immutable once written, except the cache."""

    incoming: _Incoming
    existing_anti_affinity: DomainCounts
    """Existing pods whose required anti-affinity terms select the pod."""
    affinity: DomainCounts
    """Existing pods matching all of the pod's required affinity terms (once per term)."""
    anti_affinity: DomainCounts
    """Existing pods matching each of the pod's required anti-affinity terms."""
    matches_itself: bool
    """The pod matches all its own required affinity terms (the first pod of a series)."""
    label_values: Mapping[str, Interned[str, None]]
    """The table's label interning, to find a node's domain in add_pod / remove_pod."""
    cache: tuple[Hashable, _FilterMasks] | None = None

    def masks(self, table: NodeTable) -> _FilterMasks:
        key = (table.nodes_version, table.rows)
        if self.cache is None or self.cache[0] != key:
            self.cache = (key, self._compute(table))
        return self.cache[1]

    def _compute(self, table: NodeTable) -> _FilterMasks:
        n = table.rows
        terms = self.incoming.terms
        ok_affinity = np.ones(n, dtype=bool)
        if terms.required_affinity:
            has_keys = np.ones(n, dtype=bool)
            pods_exist = np.ones(n, dtype=bool)
            for term in terms.required_affinity:
                key = term.topology_key
                col = table.host_label(key)
                if col is None:
                    has_keys[:] = False
                    continue
                has_keys &= col != 0
                counts = self.affinity.get(key)
                if counts is None:
                    pods_exist[:] = False
                else:
                    pods_exist &= _at_rows(table, key, counts) > 0
            first_of_series = self.matches_itself and not any(c.any() for c in self.affinity.values())
            ok_affinity = has_keys & (pods_exist | first_of_series)
        ok_anti = np.ones(n, dtype=bool)
        for term in terms.required_anti_affinity:
            counts = self.anti_affinity.get(term.topology_key)
            if counts is not None:
                ok_anti &= ~(_at_rows(table, term.topology_key, counts) > 0)
        ok_existing = np.ones(n, dtype=bool)
        for key, counts in self.existing_anti_affinity.items():
            ok_existing &= ~(_at_rows(table, key, counts) > 0)
        return _FilterMasks(
            ok_affinity & ok_anti & ok_existing,
            ~ok_affinity,
            ok_affinity & ~ok_anti,
            ok_affinity & ok_anti & ~ok_existing,
        )

    def updated(self, pod_info: PodInfo, node: Node, multiplier: int) -> _PreFilterState | None:
        """kube's preFilterState.updateWithPod, as a new state: ``pod_info`` added on (1) or
        removed from (-1) ``node``. None when the node is not one of the table's."""
        incoming, other = self.incoming, pod_info.pod
        existing = {k: v.copy() for k, v in self.existing_anti_affinity.items()}
        affinity = {k: v.copy() for k, v in self.affinity.items()}
        anti = {k: v.copy() for k, v in self.anti_affinity.items()}
        changes: list[tuple[DomainCounts, str]] = []
        if pod_info.affinity is not None:
            changes += [
                (existing, t.topology_key) for t in pod_info.affinity.required_anti_affinity if incoming.selected_by(t)
            ]
        required = incoming.terms.required_affinity
        if incoming.selects_all(required, other.namespace, other.metadata.labels):
            changes += [(affinity, t.topology_key) for t in required]
        changes += [
            (anti, t.topology_key)
            for t in incoming.terms.required_anti_affinity
            if incoming.selects(t, other.namespace, other.metadata.labels)
        ]
        labels = node.metadata.labels
        for counts, key in changes:
            value = labels.get(key)
            if value is None:
                continue
            interned = self.label_values.get(key)
            if interned is None or value not in interned.ids:
                return None
            domain = interned.ids[value]
            per_domain = counts.get(key)
            if per_domain is None:
                per_domain = counts[key] = np.zeros(len(interned), dtype=np.int64)
            if domain >= len(per_domain):
                per_domain = counts[key] = np.concatenate(
                    [per_domain, np.zeros(domain + 1 - len(per_domain), dtype=np.int64)]
                )
            per_domain[domain] += multiplier
        return replace(self, existing_anti_affinity=existing, affinity=affinity, anti_affinity=anti, cache=None)


# ---- PreScore / Score state -------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _PreScoreState:
    topology_score: DomainCounts
    """Only the keys some term contributed to, as kube's map (NormalizeScore leaves the scores
    alone when it is empty)."""
    cache: tuple[Hashable, np.ndarray] | None = None

    def scores(self, table: NodeTable) -> np.ndarray:
        key = (table.nodes_version, table.rows)
        if self.cache is None or self.cache[0] != key:
            total = np.zeros(table.rows, dtype=np.int64)
            for topology_key, per_domain in self.topology_score.items():
                total += _at_rows(table, topology_key, per_domain)
            self.cache = (key, total)
        return self.cache[1]


# ---- the plugin -------------------------------------------------------------------------------


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True
    """Its answer for a node changes with pods placed anywhere in the node's domains: the
    scheduler asks `placement_affects` instead."""

    def __init__(self, args: object = None, handle: object = None) -> None:
        """``args``: an `InterPodAffinityArgs` (None: kube's defaults)."""
        self.hard_pod_affinity_weight: int = getattr(args, "hard_pod_affinity_weight", DEFAULT_HARD_POD_AFFINITY_WEIGHT)
        self.ignore_preferred_terms_of_existing_pods: bool = getattr(
            args, "ignore_preferred_terms_of_existing_pods", False
        )

    # ---- filtering ---------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[None, Status]:
        """kube's PreFilter: the three counts per domain. Skip when no existing pod's required
        anti-affinity selects the pod and the pod has no required terms of its own."""
        incoming = _Incoming.of(pod, table)
        state.write(_INCOMING_KEY, incoming)
        rows = table.rows
        existing: dict[str, np.ndarray] = {}
        for group in table.pods.term_groups(TermKind.REQUIRED_ANTI_AFFINITY):
            if incoming.selected_by(group.term):
                group.counts.add_to(_accumulate(rows, existing, group.term.topology_key))
        existing_anti = {k: v for k, v in _to_domains(table, existing).items() if v.any()}
        required = incoming.terms.required_affinity
        required_anti = incoming.terms.required_anti_affinity
        if not existing_anti and not required and not required_anti:
            state.write(_PRE_FILTER_KEY, None)  # no state left from an earlier run of this cycle
            return None, Status.skip()

        affinity: dict[str, np.ndarray] = {}
        if required:

            def matches_all(namespace: str, labels: Mapping[str, str]) -> bool:
                return incoming.selects_all(required, namespace, labels)

            cache_key = (self.name, "all", tuple(t.key for t in required)) if _cacheable(*required) else None
            counts = table.pods.count(rows, matches_all, cache_key)
            for term in required:
                _accumulate(rows, affinity, term.topology_key)[:] += counts
        anti: dict[str, np.ndarray] = {}
        for term in required_anti:
            counts = table.pods.count(rows, self._matcher(incoming, term), self._cache_key(term))
            _accumulate(rows, anti, term.topology_key)[:] += counts

        state.write(
            _PRE_FILTER_KEY,
            _PreFilterState(
                incoming,
                existing_anti,
                _to_domains(table, affinity),
                _to_domains(table, anti),
                incoming.selects_all(required, incoming.namespace, incoming.labels),
                table.label_values,
            ),
        )
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        """kube's three checks, the first failing one the node's reason. After a PreFilter that
        skipped, every row passes. Raises KeyError when PreFilter has not run."""
        s: _PreFilterState | None = state.read(_PRE_FILTER_KEY)
        if s is None:
            return FilterResult(view.xp.ones(view.valid[rows].shape[0], dtype=bool))
        masks = s.masks(view.table)
        return FilterResult(
            _select_rows(view, masks.passed, rows),
            (
                Rejection(
                    ERR_REASON_AFFINITY, _select_rows(view, masks.affinity, rows), Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                ),
                Rejection(ERR_REASON_ANTI_AFFINITY, _select_rows(view, masks.anti_affinity, rows)),
                Rejection(ERR_REASON_EXISTING_ANTI_AFFINITY, _select_rows(view, masks.existing_anti_affinity, rows)),
            ),
        )

    # ---- PreFilterExtensions (what-ifs: nominated pods, preemption victims) ---------------------

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status:
        return self._update(state, pod_to_add, node_info, 1)

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status:
        return self._update(state, pod_to_remove, node_info, -1)

    def _update(self, state: CycleState, pod_info: PodInfo, node_info: NodeInfo, multiplier: int) -> Status:
        current: _PreFilterState | None = state.get(_PRE_FILTER_KEY, _MISSING)
        if current is _MISSING:
            return Status.error(f"reading {_PRE_FILTER_KEY!r} from cycle state: not found")
        if current is None:
            return Status.success()  # PreFilter skipped: so does this plugin's Filter (kube skips AddPod)
        updated = current.updated(pod_info, node_info.node, multiplier)
        if updated is None:
            return Status.error(f"node {node_info.name} is not in the node table")
        state.write(_PRE_FILTER_KEY, updated)
        return Status.success()

    # ---- scoring -----------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        """kube's PreScore: topologyScore per domain. Skip when it is empty, or when the pod has
        no preferred terms and ignorePreferredTermsOfExistingPods is set."""
        incoming = _Incoming.of(pod, table)
        state.write(_PRE_SCORE_KEY, None)  # until there is something to score
        if self.ignore_preferred_terms_of_existing_pods and not incoming.has_preferred:
            return Status.skip()
        rows = table.rows
        weighted: dict[str, np.ndarray] = {}
        hits: dict[str, np.ndarray] = {}
        for sign, preferred in ((1, incoming.terms.preferred_affinity), (-1, incoming.terms.preferred_anti_affinity)):
            for weighted_term in preferred:
                term = weighted_term.term
                counts = table.pods.count(rows, self._matcher(incoming, term), self._cache_key(term))
                _accumulate(rows, weighted, term.topology_key)[:] += counts * (sign * weighted_term.weight)
                _accumulate(rows, hits, term.topology_key)[:] += counts
        for group in table.pods.term_groups(
            TermKind.REQUIRED_AFFINITY, TermKind.PREFERRED_AFFINITY, TermKind.PREFERRED_ANTI_AFFINITY
        ):
            weight = self._existing_term_weight(group.kind, group.weight)
            if not weight or not incoming.selected_by(group.term):
                continue
            key = group.term.topology_key
            group.counts.add_to(_accumulate(rows, weighted, key), weight)
            group.counts.add_to(_accumulate(rows, hits, key))
        touched = {k for k, v in _to_domains(table, hits).items() if v.any()}
        if not touched:
            return Status.skip()
        scores = _to_domains(table, {k: v for k, v in weighted.items() if k in touched})
        state.write(_PRE_SCORE_KEY, _PreScoreState(scores))
        return Status.success()

    def pre_score_add_pods(
        self, state: CycleState, pod: Pod, table: NodeTable, placed: Sequence[tuple[PodInfo, int]]
    ) -> bool:
        """kubus, not kube (which has no such extension): PreScore's state moved as if the
        ``placed`` pods (and their rows) had been there when it ran, what PreScore would now
        compute, without going over every pod again (a batch, after its placements). False when
        it cannot say: PreScore skipped or has not run (a placement may end a skip)."""
        current: _PreScoreState | None = state.get(_PRE_SCORE_KEY)
        incoming: _Incoming | None = state.get(_INCOMING_KEY)
        if current is None or incoming is None:
            return False
        adds: dict[str, dict[int, int]] = {}
        for info, row in placed:
            found = self._score_terms(incoming, info)
            for key, weight in found:
                col = table.host_label(key)
                domain = 0 if col is None else int(col[row])
                if domain:  # a node without the key counts in no domain
                    per_key = adds.setdefault(key, {})
                    per_key[domain] = per_key.get(domain, 0) + weight
        if adds:
            scores = dict(current.topology_score)
            for key, per_domain in adds.items():
                size = table.domains(key)
                old = scores.get(key)
                moved = np.zeros(size, dtype=np.int64)
                if old is not None:
                    moved[: len(old)] = old
                for domain, weight in per_domain.items():
                    moved[domain] += weight
                scores[key] = moved
            state.write(_PRE_SCORE_KEY, _PreScoreState(scores))
        return True

    def _score_terms(self, incoming: _Incoming, existing: PodInfo) -> list[tuple[str, int]]:
        """(topology key, weight) of every term by which PreScore counts ``existing``: the
        incoming pod's preferred terms that select it, and its own terms (required affinity
        with hardPodAffinityWeight, preferred) that select the incoming pod."""
        other = existing.pod
        namespace, labels = other.namespace, other.metadata.labels
        own = incoming.terms
        found = [
            (w.term.topology_key, w.weight)
            for w in own.preferred_affinity
            if incoming.selects(w.term, namespace, labels)
        ]
        found += [
            (w.term.topology_key, -w.weight)
            for w in own.preferred_anti_affinity
            if incoming.selects(w.term, namespace, labels)
        ]
        terms = existing.affinity
        if terms is None:
            return found
        theirs = [
            *((TermKind.REQUIRED_AFFINITY, t, 0) for t in terms.required_affinity),
            *((TermKind.PREFERRED_AFFINITY, w.term, w.weight) for w in terms.preferred_affinity),
            *((TermKind.PREFERRED_ANTI_AFFINITY, w.term, w.weight) for w in terms.preferred_anti_affinity),
        ]
        for kind, term, preferred_weight in theirs:
            weight = self._existing_term_weight(kind, preferred_weight)
            if weight and incoming.selected_by(term):
                found.append((term.topology_key, weight))
        return found

    def _existing_term_weight(self, kind: TermKind, weight: int) -> int:
        """What an existing pod's term that selects the incoming pod adds to the score of its
        node's domain (kube's processExistingPod): hardPodAffinityWeight for required affinity,
        the preferred term's weight, negated for anti-affinity; 0: it does not count."""
        if kind is TermKind.REQUIRED_AFFINITY:
            return max(self.hard_pod_affinity_weight, 0)
        return weight if kind is TermKind.PREFERRED_AFFINITY else -weight

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        """The sum over topology keys of the score of the node's domain (not normalized); 0
        after a PreScore that skipped. Raises KeyError when PreScore has not run."""
        s: _PreScoreState | None = state.read(_PRE_SCORE_KEY)
        if s is None:
            return view.xp.zeros(view.valid[rows].shape[0], dtype=view.xp.int64)
        return _select_rows(view, s.scores(view.table), rows)

    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        """kube's: (score - min) / (max - min) * 100 in float64, truncated; unchanged when no
        term contributed anything."""
        s: _PreScoreState | None = state.read(_PRE_SCORE_KEY)
        if s is None or not s.topology_score or scores.shape[0] == 0:
            return scores.copy()
        low = int(scores.min())
        spread = int(scores.max()) - low
        if spread <= 0:
            return xp.zeros_like(scores)
        fraction = (scores - low).astype(xp.float64) / float(spread)
        return (float(MAX_NODE_SCORE) * fraction).astype(xp.int64)

    # ---- batches -----------------------------------------------------------------------------

    def placement_affects(self, state: CycleState, pod: Pod, placed: PodInfo) -> bool:
        """Whether ``placed`` can change this pod's Filter or Score: it matches one of the pod's
        terms, or one of its own terms (required anti-affinity; required affinity when
        hardPodAffinityWeight > 0; preferred) selects the pod. Wherever it went: a placement on
        a node without the term's topology key changes nothing, but True is still safe."""
        incoming: _Incoming | None = state.get(_INCOMING_KEY)
        if incoming is None:
            return True  # PreFilter has not run: nothing to go by
        other, terms = placed.pod, incoming.terms
        if terms is _NO_TERMS and placed.affinity is None:
            return False  # neither pod has a term: the common case, answered at once
        namespace, labels = other.namespace, other.metadata.labels
        if incoming.selects_all(terms.required_affinity, namespace, labels):
            return True
        if any(incoming.selects(t, namespace, labels) for t in terms.required_anti_affinity):
            return True
        scored = incoming.has_preferred or not self.ignore_preferred_terms_of_existing_pods
        preferred = terms.preferred_affinity + terms.preferred_anti_affinity
        if scored and any(incoming.selects(w.term, namespace, labels) for w in preferred):
            return True
        theirs = placed.affinity
        if theirs is None:
            return False
        if any(incoming.selected_by(t) for t in theirs.required_anti_affinity):
            return True
        if not scored:
            return False
        if self.hard_pod_affinity_weight > 0 and any(incoming.selected_by(t) for t in theirs.required_affinity):
            return True
        return any(incoming.selected_by(w.term) for w in theirs.preferred_affinity + theirs.preferred_anti_affinity)

    # ---- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _matcher(incoming: _Incoming, term: AffinityTerm) -> PodMatch:
        def match(namespace: str, labels: Mapping[str, str]) -> bool:
            return incoming.selects(term, namespace, labels)

        return match

    def _cache_key(self, term: AffinityTerm) -> Hashable | None:
        return (self.name, "one", term.key) if _cacheable(term) else None

    # ---- queueing hints ----------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube's: a pod added to a node (pod.bound) or gone from one (pod.finished, deleted,
        unreserved), hinted by `is_schedulable_after_pod_change`; a node added or updated, hinted
        by `is_schedulable_after_node_added` / `is_schedulable_after_node_change`. kube's
        UpdatePodLabel has no kubus event: a bound pod's labels do not change (pod.running is a
        phase change, nothing this plugin reads)."""
        return (
            *events_on((POD_BOUND, *POD_FREED), self.is_schedulable_after_pod_change),
            ClusterEventWithHint(NODE_ADDED, self.is_schedulable_after_node_added),
            ClusterEventWithHint(NODE_UPDATED, self.is_schedulable_after_node_change),
        )

    def is_schedulable_after_pod_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """After kube's isSchedulableAfterPodChange, made safe where kube's is not: QUEUE when a
        pod that arrived on a node matches all of the pod's required affinity terms; when one that
        left matches any of its required anti-affinity terms, had a required anti-affinity term
        selecting the pod, or matched all its affinity terms (its leaving can make the pod the
        first of its series); an update counts as both. A namespaceSelector is taken to match
        (the hint cannot see the namespaces' labels)."""
        original = old if isinstance(old, Pod) else None
        modified = new if isinstance(new, Pod) else None
        if original is None and modified is None:
            return QueueingHint.QUEUE
        if (modified is not None and not modified.spec.node_name) or (
            original is not None and not original.spec.node_name
        ):
            return QueueingHint.QUEUE_SKIP  # not on a node: it counts nowhere
        if (
            original is not None
            and modified is not None
            and original.metadata.labels == modified.metadata.labels
            and original.spec.affinity == modified.spec.affinity
            and original.spec.node_name == modified.spec.node_name
        ):
            return QueueingHint.QUEUE_SKIP  # e.g. pod.running: nothing this plugin reads changed
        terms = PodAffinityTerms.of(pod) or _NO_TERMS
        if modified is not None and _hint_matches_all(terms.required_affinity, modified):
            return QueueingHint.QUEUE
        if original is not None:
            if any(_hint_matches(t, original) for t in terms.required_anti_affinity):
                return QueueingHint.QUEUE
            if _hint_matches_all(terms.required_affinity, original):
                return QueueingHint.QUEUE
            theirs = PodAffinityTerms.of(original)
            if theirs is not None and any(_hint_matches(t, pod) for t in theirs.required_anti_affinity):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_added(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """QUEUE when the new node can pass the affinity check: it has the topology key of every
        required affinity term of the pod. (kube queues on any one of the pod's topology keys,
        which misses a pod that only other pods' anti-affinity kept out.) A new node holds no
        pod, so no other node's answer changes."""
        _, added = node_change(old, new)
        if added is None:
            return QueueingHint.QUEUE
        terms = PodAffinityTerms.of(pod) or _NO_TERMS
        labels = added.metadata.labels
        if all(t.topology_key in labels for t in terms.required_affinity):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """QUEUE when the node's labels changed (or the old node is unknown): the node may have
        moved into or out of a domain, and the pods on it with it, which changes other nodes'
        answers too."""
        original, modified = node_change(old, new)
        if original is not None and modified is not None and original.metadata.labels == modified.metadata.labels:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE


def _hint_matches(term: AffinityTerm, pod: Pod) -> bool:
    """``term`` selects ``pod``, a namespaceSelector taken to select every namespace (a hint
    may say QUEUE too often, never too rarely)."""
    if pod.namespace not in term.namespaces and term.namespace_selector is None:
        return False
    return selector_matches(term.selector, pod.metadata.labels)


def _hint_matches_all(terms: tuple[AffinityTerm, ...], pod: Pod) -> bool:
    return bool(terms) and all(_hint_matches(t, pod) for t in terms)


__all__ = [
    "ERR_REASON_AFFINITY",
    "ERR_REASON_ANTI_AFFINITY",
    "ERR_REASON_EXISTING_ANTI_AFFINITY",
    "InterPodAffinity",
]
