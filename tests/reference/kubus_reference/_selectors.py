"""Node selectors, field selectors and tolerations, as kube's helpers evaluate them for one node.

Written after `k8s.io/apimachinery/pkg/labels` (Requirement.Matches, NewRequirement's checks),
`k8s.io/apimachinery/pkg/fields`, `component-helpers/scheduling/corev1/nodeaffinity` and
`k8s.io/api/core/v1` Toleration.ToleratesTaint, independently of `kubus.api.matching` so that
the two can check each other.

A node selector term is parsed once: a term kube cannot parse (a requirement with the wrong
number of values, Gt/Lt on a non-integer, a field selector other than In/NotIn with one value,
an invalid label key or value) never matches any node, and the other terms still count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubus.api.names import is_qualified_name, is_valid_label_value
from kubus.api.objects import (
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    Toleration,
    TolerationOperator,
)

_OP = SelectorOperator
_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64); None where Go returns an error."""
    if _GO_INT.fullmatch(text) is None:
        return None
    v = int(text, 10)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def requirement_errors(req: NodeSelectorRequirement) -> list[str]:
    """labels.NewRequirement's checks on one label requirement; empty when it is valid."""
    errs = []
    if not is_qualified_name(req.key):
        errs.append(f"invalid label key {req.key!r}")
    op, vals = req.operator, req.values
    if op in (_OP.IN, _OP.NOT_IN):
        if not vals:
            errs.append("for 'in', 'notin' operators, values set can't be empty")
    elif op in (_OP.EXISTS, _OP.DOES_NOT_EXIST):
        if vals:
            errs.append("values set must be empty for exists and does not exist")
    elif op in (_OP.GT, _OP.LT):
        if len(vals) != 1:
            errs.append("for 'Gt', 'Lt' operators, exactly one value is required")
        errs.extend("for 'Gt', 'Lt' operators, the value must be an integer" for v in vals if parse_int64(v) is None)
    else:
        errs.append(f"unsupported operator {op!r}")
    errs.extend(f"invalid label value {v!r}" for v in vals if not is_valid_label_value(v))
    return errs


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """labels.Requirement.Matches for a (valid) requirement."""
    op = req.operator
    has = req.key in labels
    if op is _OP.IN:
        return has and labels[req.key] in req.values
    if op is _OP.NOT_IN:
        return not has or labels[req.key] not in req.values
    if op is _OP.EXISTS:
        return has
    if op is _OP.DOES_NOT_EXIST:
        return not has
    if op in (_OP.GT, _OP.LT):
        if not has:
            return False
        have = parse_int64(labels[req.key])
        if have is None or len(req.values) != 1:
            return False
        bound = parse_int64(req.values[0])
        if bound is None:
            return False
        return have > bound if op is _OP.GT else have < bound
    return False


def _field_requirement_errors(req: NodeSelectorRequirement) -> list[str]:
    if req.operator in (_OP.IN, _OP.NOT_IN):
        return [] if len(req.values) == 1 else ["must have one element"]
    return [f"unsupported field selector operator {req.operator!r}"]


def _field_matches(req: NodeSelectorRequirement, fields: Mapping[str, str]) -> bool:
    # fields.Set.Get returns "" for a field the set lacks
    value = fields.get(req.key, "")
    return value == req.values[0] if req.operator is _OP.IN else value != req.values[0]


@dataclass(frozen=True, slots=True)
class ParsedTerm:
    """nodeaffinity.nodeSelectorTerm: a parsed term, or its parse errors."""

    term: NodeSelectorTerm
    errors: tuple[str, ...]

    @classmethod
    def parse(cls, term: NodeSelectorTerm) -> ParsedTerm:
        errs: list[str] = []
        for req in term.match_expressions:
            errs.extend(requirement_errors(req))
        for req in term.match_fields:
            errs.extend(_field_requirement_errors(req))
        return cls(term, tuple(errs))

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """False for a term with parse errors."""
        if self.errors:
            return False
        if not all(requirement_matches(r, labels) for r in self.term.match_expressions):
            return False
        # kube only knows metadata.name, and skips field requirements for a nameless node
        fields = {"metadata.name": node_name} if node_name else {}
        return not (
            self.term.match_fields and fields and not all(_field_matches(r, fields) for r in self.term.match_fields)
        )


def is_empty_term(term: NodeSelectorTerm) -> bool:
    return not term.match_expressions and not term.match_fields


@dataclass(frozen=True, slots=True)
class LazyNodeSelector:
    """nodeaffinity.LazyErrorNodeSelector: terms ORed; empty and unparsable terms match nothing."""

    terms: tuple[ParsedTerm, ...]

    @classmethod
    def parse(cls, selector: NodeSelector) -> LazyNodeSelector:
        return cls(tuple(ParsedTerm.parse(t) for t in selector.node_selector_terms if not is_empty_term(t)))

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(e for t in self.terms for e in t.errors)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        return any(t.matches(labels, node_name) for t in self.terms)


@dataclass(frozen=True, slots=True)
class PreferredTerms:
    """nodeaffinity.PreferredSchedulingTerms: the weights of the matching terms add up."""

    terms: tuple[tuple[int, ParsedTerm], ...]

    @classmethod
    def parse(cls, terms: Sequence[PreferredSchedulingTerm]) -> PreferredTerms:
        """Terms of weight 0 and empty terms are dropped. Raises ValueError if any term does not
        parse (kube's NewPreferredSchedulingTerms returns an error then)."""
        parsed = []
        errors: list[str] = []
        for t in terms:
            if t.weight == 0 or is_empty_term(t.preference):
                continue
            p = ParsedTerm.parse(t.preference)
            if p.errors:
                errors.extend(p.errors)
            else:
                parsed.append((t.weight, p))
        if errors:
            raise ValueError("; ".join(errors))
        return cls(tuple(parsed))

    def score(self, labels: Mapping[str, str], node_name: str) -> int:
        return sum(w for w, t in self.terms if t.matches(labels, node_name))


def labels_selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """labels.SelectorFromSet(spec.nodeSelector).Matches: each key present with that value."""
    return all(k in labels and labels[k] == v for k, v in selector.items())


def tolerates_taint(toleration: Toleration, taint: Taint) -> bool:
    """Toleration.ToleratesTaint: an empty effect or key matches any; Exists ignores the value."""
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator is TolerationOperator.EXISTS:
        return True
    if toleration.operator is TolerationOperator.EQUAL:
        return toleration.value == taint.value
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates_taint(t, taint) for t in tolerations)


def find_matching_untolerated_taint(
    taints: Iterable[Taint], tolerations: Sequence[Toleration], include: Callable[[Taint], bool]
) -> Taint | None:
    """corev1.FindMatchingUntoleratedTaint: the first included taint no toleration tolerates."""
    for taint in taints:
        if include(taint) and not tolerations_tolerate_taint(tolerations, taint):
            return taint
    return None
