"""NodeAffinity (PreFilter, Filter, PreScore, Score): spec.nodeSelector and node affinity.

Filter: the node must match spec.nodeSelector and the required node affinity (and the
scheduler-enforced `addedAffinity` of the plugin args). Score: the sum of the weights of the
preferred terms the node matches, normalized so the best node gets 100.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kubus.api.matching import NODE_NAME_FIELD, labels_match, node_selector_matches
from kubus.api.objects import Node, NodeSelector, Pod, PreferredSchedulingTerm, SelectorOperator
from kubus.api.objects import NodeAffinity as NodeAffinitySpec
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, FilterResult, Rejection, Rows
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    ClusterEventWithHint,
    EventObject,
    QueueingHint,
    events_on,
    node_change,
)
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins._columns import labels_mask, selector_mask, term_mask
from kubus.plugins._normalize import default_normalize_score

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
_PRE_FILTER_KEY = "PreFilterNodeAffinity"
_PRE_SCORE_KEY = "PreScoreNodeAffinity"


@dataclass(frozen=True, slots=True)
class _Required:
    node_selector: dict[str, str]
    affinity: NodeSelector | None


def _required_affinity(pod: Pod) -> NodeSelector | None:
    a = pod.spec.affinity
    return a.node_affinity.required if a and a.node_affinity else None


def _preferred(pod: Pod) -> tuple[PreferredSchedulingTerm, ...]:
    a = pod.spec.affinity
    return a.node_affinity.preferred if a and a.node_affinity else ()


def pre_filter_node_names(pod: Pod) -> frozenset[str] | None:
    """The node names the required terms pin the pod to (the union over the terms of each
    term's intersected `metadata.name In` values), as kube's PreFilter computes them; None when
    some term does not pin by name, or there are no terms. Empty when every term's names
    conflict."""
    required = _required_affinity(pod)
    if required is None or not required.node_selector_terms:
        return None
    names: set[str] = set()
    for term in required.node_selector_terms:
        term_names: set[str] | None = None
        for req in term.match_fields:
            if req.key == NODE_NAME_FIELD and req.operator is SelectorOperator.IN:
                term_names = set(req.values) if term_names is None else term_names & set(req.values)
        if term_names is None:
            return None  # this term does not pin by name, and terms are ORed
        names |= term_names
    return frozenset(names)


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        added: NodeAffinitySpec | None = getattr(args, "added_affinity", None)
        self.added_required: NodeSelector | None = added.required if added else None
        self.added_preferred: tuple[PreferredSchedulingTerm, ...] = added.preferred if added else ()

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[frozenset[str] | None, Status]:
        required = _required_affinity(pod)
        if not pod.spec.node_selector and required is None and self.added_required is None:
            return None, Status.skip()
        state.write(_PRE_FILTER_KEY, _Required(pod.spec.node_selector, required))
        names = pre_filter_node_names(pod)
        if names is not None and not names:
            # kube: no node can match names that conflict in every term
            return None, Status.unschedulable(ERR_REASON_CONFLICT, resolvable=False)
        return names, Status.success()

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        xp = view.xp
        n = view.valid[rows].shape[0]
        rejections = []
        enforced_ok = xp.ones(n, dtype=bool)
        if self.added_required is not None:
            enforced_ok = selector_mask(view, self.added_required, rows)
            rejections.append(Rejection(ERR_REASON_ENFORCED, ~enforced_ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        req: _Required | None = state.get(_PRE_FILTER_KEY)
        pod_ok = xp.ones(n, dtype=bool)
        if req is not None:
            if req.node_selector:
                pod_ok &= labels_mask(view, req.node_selector, rows)
            if req.affinity is not None:
                pod_ok &= selector_mask(view, req.affinity, rows)
            # a node failing the enforced affinity reports only that reason
            rejections.append(Rejection(ERR_REASON_POD, enforced_ok & ~pod_ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        return FilterResult(enforced_ok & pod_ok, tuple(rejections))

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        terms = self.added_preferred + _preferred(pod)
        if not terms:
            return Status.skip()
        state.write(_PRE_SCORE_KEY, terms)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        xp = view.xp
        total = xp.zeros(view.valid[rows].shape[0], dtype=xp.int64)
        for term in state.read(_PRE_SCORE_KEY):
            if term.weight == 0:
                continue
            total += term_mask(view, term.preference, rows).astype(xp.int64) * term.weight
        return total

    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        return default_normalize_score(xp, MAX_NODE_SCORE, False, scores)

    # ---- queueing hints ----------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """kube: Node Add | UpdateNodeLabel, hinted by `is_schedulable_after_node_change`."""
        return events_on((NODE_ADDED, NODE_UPDATED), self.is_schedulable_after_node_change)

    def is_schedulable_after_node_change(self, pod: Pod, old: EventObject, new: EventObject) -> QueueingHint:
        """kube's isSchedulableAfterNodeChange: QUEUE when the node (added, or updated from not
        matching) now matches the pod's nodeSelector, its required node affinity and the
        scheduler-enforced affinity."""
        original, modified = node_change(old, new)
        if modified is None:
            return QueueingHint.QUEUE  # the node is unknown: maybe
        if self.added_required is not None and not node_selector_matches(
            self.added_required, modified.metadata.labels, modified.name
        ):
            return QueueingHint.QUEUE_SKIP
        if not _required_matches(pod, modified):
            return QueueingHint.QUEUE_SKIP
        if original is None:
            return QueueingHint.QUEUE  # added (or first seen), and it matches
        # an update: only unmatched -> matched helps
        return QueueingHint.QUEUE_SKIP if _required_matches(pod, original) else QueueingHint.QUEUE


def _required_matches(pod: Pod, node: Node) -> bool:
    """kube's GetRequiredNodeAffinity(pod).Match(node): spec.nodeSelector and the required terms."""
    labels = node.metadata.labels
    if pod.spec.node_selector and not labels_match(pod.spec.node_selector, labels):
        return False
    required = _required_affinity(pod)
    return required is None or node_selector_matches(required, labels, node.name)
