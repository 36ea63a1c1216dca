"""NodeAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore).

Filter: the scheduler-enforced `addedAffinity` (plugin args), then the pod's nodeSelector and
requiredDuringSchedulingIgnoredDuringExecution. PreFilter narrows the pod to the node names of
`matchFields metadata.name In` terms when every term has one. Score: the weights of the
matching preferred terms, the pod's and `addedAffinity`'s, normalized to 0..100. After kube's
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go.

A pod's empty `preferred` tuple counts as absent (kube distinguishes nil from an empty list:
an empty list scores every node 0 instead of skipping Score, which changes no placement), and so
does an empty nodeSelector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kubus.api.objects import NodeSelectorTerm, Pod, SelectorOperator
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._normalize import default_normalize_score
from kubus_reference._selectors import (
    LazyNodeSelector,
    PreferredTerms,
    labels_selector_matches,
)

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
PRE_FILTER_STATE_KEY = "PreFilterNodeAffinity"
PRE_SCORE_STATE_KEY = "PreScoreNodeAffinity"
OBJECT_NAME_FIELD = "metadata.name"
_UNSET = object()


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """nodeaffinity.RequiredNodeAffinity: spec.nodeSelector AND the required affinity terms."""

    node_selector: dict[str, str] | None
    affinity: LazyNodeSelector | None

    @classmethod
    def of(cls, pod: Pod) -> RequiredNodeAffinity:
        selector = dict(pod.spec.node_selector) if pod.spec.node_selector else None
        na = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        affinity = LazyNodeSelector.parse(na.required) if na and na.required is not None else None
        return cls(selector, affinity)

    def matches(self, node_info: NodeInfo) -> bool:
        labels = node_info.node.metadata.labels
        if self.node_selector is not None and not labels_selector_matches(self.node_selector, labels):
            return False
        if self.affinity is not None:
            return self.affinity.matches(labels, node_info.name)
        return True


def _pod_preferred(pod: Pod) -> PreferredTerms | None:
    """getPodPreferredNodeAffinity. Raises ValueError for a term that does not parse."""
    na = pod.spec.affinity.node_affinity if pod.spec.affinity else None
    if na is None or not na.preferred:
        return None
    return PreferredTerms.parse(na.preferred)


def _term_node_names(term: NodeSelectorTerm) -> set[str] | None:
    """The names a term's `metadata.name In` field requirements allow (intersected); None when
    the term has no such requirement."""
    names: set[str] | None = None
    for r in term.match_fields:
        if r.key == OBJECT_NAME_FIELD and r.operator is SelectorOperator.IN:
            names = set(r.values) if names is None else names & set(r.values)
    return names


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        """`args.added_affinity` (a NodeAffinity, or None). Raises ValueError when it does not
        parse, as kube's New does."""
        added = getattr(args, "added_affinity", None)
        self.added_node_selector: LazyNodeSelector | None = None
        self.added_pref_sched_terms: PreferredTerms | None = None
        if added is not None:
            if added.required is not None:
                sel = LazyNodeSelector.parse(added.required)
                if sel.errors:
                    raise ValueError(
                        "parsing addedAffinity.requiredDuringSchedulingIgnoredDuringExecution: " + "; ".join(sel.errors)
                    )
                self.added_node_selector = sel
            if added.preferred:
                try:
                    self.added_pref_sched_terms = PreferredTerms.parse(added.preferred)
                except ValueError as e:
                    where = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                    raise ValueError(f"parsing {where}: {e}") from None

    # ---- filtering ---------------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[frozenset[str] | None, Status]:
        na = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        required = na.required if na is not None else None
        if required is None and self.added_node_selector is None and not pod.spec.node_selector:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, RequiredNodeAffinity.of(pod))
        if required is None or not required.node_selector_terms:
            return None, Status.success()
        node_names: set[str] | None = None
        for term in required.node_selector_terms:
            term_names = _term_node_names(term)
            if term_names is None:
                # the terms are ORed: a term without a name requirement allows every node
                return None, Status.success()
            node_names = term_names if node_names is None else node_names | term_names
        if node_names is not None and not node_names:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_CONFLICT,))
        if node_names:
            return frozenset(node_names), Status.success()
        return None, Status.success()

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if self.added_node_selector is not None and not self.added_node_selector.matches(
            node_info.node.metadata.labels, node_info.name
        ):
            return Status.unschedulable(ERR_REASON_ENFORCED, resolvable=False)
        required = state.get(PRE_FILTER_STATE_KEY)
        if required is None:
            required = RequiredNodeAffinity.of(pod)
        if not required.matches(node_info):
            return Status.unschedulable(ERR_REASON_POD, resolvable=False)
        return Status.success()

    # ---- scoring -----------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            preferred = _pod_preferred(pod)
        except ValueError as e:
            return Status.error(str(e))
        if preferred is None and self.added_pref_sched_terms is None:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, preferred)
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        labels, name = node_info.node.metadata.labels, node_info.name
        count = 0
        if self.added_pref_sched_terms is not None:
            count += self.added_pref_sched_terms.score(labels, name)
        preferred = state.get(PRE_SCORE_STATE_KEY, _UNSET)
        if preferred is _UNSET:
            # PreScore was not run: compute what it would have stored, as kube's Score does
            preferred = _pod_preferred(pod)
        if preferred is not None:
            count += preferred.score(labels, name)
        return count

    def normalize_score(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        default_normalize_score(MAX_NODE_SCORE, False, scores)
