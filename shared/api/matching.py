"""Matching rules of the core API: tolerations against taints, node selectors against labels.

These are kube's own helpers (`k8s.io/api/core/v1` Toleration.ToleratesTaint,
`component-helpers/scheduling/corev1` and its nodeaffinity package), written for one node.
The vectorized plugins apply them to each distinct label value or taint list of the cluster
and gather the answers over all nodes, so both forms share one definition.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from kubus.api.names import is_qualified_name, is_valid_label_value
from kubus.api.objects import (
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SelectorOperator,
    Taint,
    Toleration,
    TolerationOperator,
)

NODE_NAME_FIELD = "metadata.name"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Toleration.ToleratesTaint: effect and key match when given; Equal compares values."""
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator is TolerationOperator.EXISTS:
        return True
    return toleration.value == taint.value


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def first_untolerated_taint(
    taints: Iterable[Taint], tolerations: Iterable[Toleration], include: Callable[[Taint], bool]
) -> Taint | None:
    """FindMatchingUntoleratedTaint: the first taint passing `include` that nothing tolerates."""
    tolerations = tuple(tolerations)
    for taint in taints:
        if include(taint) and not tolerated(taint, tolerations):
            return taint
    return None


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): no spaces, no underscores; None where Go errs."""
    if _GO_INT.fullmatch(text) is None:
        return None
    v = int(text, 10)
    return v if -(2**63) <= v < 2**63 else None


def requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    """One node selector requirement against a label's value (None: the node lacks the label).

    Gt/Lt compare as integers; a value that is not an integer never matches (as in kube).
    """
    op = req.operator
    if op is SelectorOperator.IN:
        return value is not None and value in req.values
    if op is SelectorOperator.NOT_IN:
        return value is None or value not in req.values
    if op is SelectorOperator.EXISTS:
        return value is not None
    if op is SelectorOperator.DOES_NOT_EXIST:
        return value is None
    if value is None or len(req.values) != 1:
        return False
    have, bound = _int64(value), _int64(req.values[0])
    if have is None or bound is None:
        return False
    return have > bound if op is SelectorOperator.GT else have < bound


def requirement_is_valid(req: NodeSelectorRequirement, *, field: bool = False) -> bool:
    """Whether kube can parse the requirement (labels.NewRequirement, or the field selector
    for matchFields: metadata.name with In/NotIn and exactly one value)."""
    op, n = req.operator, len(req.values)
    if field:
        return req.key == NODE_NAME_FIELD and op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and n == 1
    if not is_qualified_name(req.key) or not all(is_valid_label_value(v) for v in req.values):
        return False
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        return n > 0
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST):
        return n == 0
    return n == 1 and _int64(req.values[0]) is not None


def term_is_valid(term: NodeSelectorTerm) -> bool:
    """A term kube cannot parse matches no node (the selector's other terms still count)."""
    return all(requirement_is_valid(r) for r in term.match_expressions) and all(
        requirement_is_valid(r, field=True) for r in term.match_fields
    )


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], node_name: str) -> bool:
    """A NodeSelectorTerm: every requirement holds; a term with no requirements, or one kube
    cannot parse, matches nothing."""
    if (not term.match_expressions and not term.match_fields) or not term_is_valid(term):
        return False
    for req in term.match_expressions:
        if not requirement_matches(req, labels.get(req.key)):
            return False
    return all(requirement_matches(req, node_name) for req in term.match_fields)


def node_selector_matches(selector: NodeSelector, labels: Mapping[str, str], node_name: str) -> bool:
    """Terms are ORed; a selector with no terms matches nothing."""
    return any(term_matches(t, labels, node_name) for t in selector.node_selector_terms)


def labels_match(required: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """spec.nodeSelector: every key present with an equal value."""
    return all(labels.get(k) == v for k, v in required.items())


__all__ = [
    "NODE_NAME_FIELD",
    "first_untolerated_taint",
    "labels_match",
    "node_selector_matches",
    "requirement_is_valid",
    "requirement_matches",
    "term_is_valid",
    "term_matches",
    "tolerated",
    "tolerates",
]
