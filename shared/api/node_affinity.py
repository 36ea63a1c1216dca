"""A core/v1 NodeAffinity from its JSON shape: the one decoder of node affinity in kubus.

kube validates a node affinity in two places, with two sets of rules, and this decoder applies
whichever the caller names (`Validation`):

- `Validation.POD`: the API server's checks of a pod's `spec.affinity.nodeAffinity`
  (ValidateNodeAffinity, ValidateNodeSelectorRequirement, ValidateNodeFieldSelectorRequirement):
  at least one required term, preferred weights 1..100, operator and values-count rules; label
  values are not checked. kubus also rejects a Gt/Lt value that is not an integer (kube lets it
  through and the pod then matches no node) and a preferred term without `preference`.
- `Validation.PLUGIN_ARGS`: the scheduler's nodeaffinity parser, which validates
  NodeAffinityArgs.addedAffinity (ValidateNodeAffinityArgs -> NewNodeSelector,
  NewPreferredSchedulingTerms, labels.NewRequirement): label keys and values, Gt/Lt integers,
  matchFields only `metadata.name` with one value; no rule on weights or term counts.

Each set speaks kube's own words for its rules. How fields are read (strictly, as a scheduler
configuration is, or leniently, as the API server reads a pod) and how a problem is raised is the
caller's `FieldReader`.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import NoReturn, Protocol

from kubus.api.names import label_value_error, qualified_name_error
from kubus.api.objects import (
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    SelectorOperator,
)
from kubus.api.quantity import MAX_INT64
from kubus.core.codec import JSONList, JSONMapping, JSONValue

__all__ = [
    "LABEL_VALUE_RULE",
    "QUALIFIED_NAME_RULE",
    "FieldReader",
    "Validation",
    "check_selector_values",
    "decode_node_affinity",
]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NODE_NAME_FIELD = "metadata.name"
_SET_OPERATORS = (SelectorOperator.IN, SelectorOperator.NOT_IN)
_EXISTS_OPERATORS = (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT32_MAX = 2**31 - 1

QUALIFIED_NAME_RULE = (
    "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 "
    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
"""The scheduler configuration's one-line statement of kube's IsQualifiedName."""
LABEL_VALUE_RULE = (
    "must be a valid label value: at most 63 alphanumerics, '-', '_' or '.', starting and ending "
    "with an alphanumeric (or empty)"
)
"""The scheduler configuration's one-line statement of kube's IsValidLabelValue."""


class Validation(Enum):
    """Which of kube's two validations of a node affinity applies (see the module docstring)."""

    POD = "pod"
    PLUGIN_ARGS = "plugin args"


class FieldReader(Protocol):
    """Reads the fields of one input and raises its own error type, naming the field path."""

    def fail(self, path: str, reason: str) -> NoReturn:
        """Raise the reader's error for the field at `path`."""
        ...

    def object(self, value: JSONValue, path: str, known: tuple[str, ...], *, allow_none: bool = True) -> JSONMapping:
        """`value` as a mapping ({} for None when `allow_none`). `known`: the fields the object
        has; a strict reader rejects any other, a lenient one ignores them."""
        ...

    def sequence(self, value: JSONValue, path: str) -> JSONList:
        """`value` as a list ([] for None)."""
        ...

    def string(self, value: JSONValue, path: str) -> str:
        """`value` as a string."""
        ...

    def string_list(self, value: JSONValue, path: str) -> tuple[str, ...]:
        """`value` as a list of strings (() for None)."""
        ...

    def integer(self, value: JSONValue, path: str, *, lo: int, hi: int) -> int:
        """`value` as an integer in [lo, hi]."""
        ...


def _quote(text: str) -> str:
    """Double-quoted with JSON escapes, so that a message stays on one line (the API server's)."""
    return json.dumps(text, ensure_ascii=False)


def _plain(text: str) -> str:
    """Double-quoted as is (the scheduler configuration's)."""
    return f'"{text}"'


def check_selector_values(r: FieldReader, op: SelectorOperator, values: tuple[str, ...], path: str) -> None:
    """The API server's rules on the values of a selector requirement (node selectors and label
    selectors alike): In/NotIn need values, Exists/DoesNotExist take none, Gt/Lt take one integer."""
    if op in _SET_OPERATORS and not values:
        r.fail(path, "must be specified when `operator` is 'In' or 'NotIn'")
    if op in _EXISTS_OPERATORS and values:
        r.fail(path, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            r.fail(path, "must be specified single value when `operator` is 'Lt' or 'Gt'")
        text = values[0]
        if not _INTEGER.fullmatch(text) or not -(2**63) <= int(text) <= MAX_INT64:
            r.fail(f"{path}[0]", f"{_quote(text)} is not an integer")


def _pod_requirement(r: FieldReader, raw: JSONValue, path: str, *, is_field: bool) -> NodeSelectorRequirement:
    """ValidateNodeSelectorRequirement / ValidateNodeFieldSelectorRequirement (the API server)."""
    req = r.object(raw, path, ("key", "operator", "values"))
    key = r.string(req.get("key", ""), f"{path}.key")
    if not key:
        r.fail(f"{path}.key", "is required")
    if req.get("operator") is None:
        r.fail(f"{path}.operator", "is required")
    op_raw = r.string(req["operator"], f"{path}.operator")
    try:
        op = SelectorOperator(op_raw)
    except ValueError:
        supported = ", ".join(o.value for o in SelectorOperator)
        r.fail(f"{path}.operator", f"unsupported value {_quote(op_raw)} (supported: {supported})")
    values = r.string_list(req.get("values"), f"{path}.values")
    if is_field:
        if key != _NODE_NAME_FIELD:
            r.fail(f"{path}.key", f"{_quote(key)} is not supported: must be {_NODE_NAME_FIELD}")
        if op not in _SET_OPERATORS:
            r.fail(f"{path}.operator", f"{_quote(op.value)} is not supported: must be In or NotIn")
        if len(values) != 1:
            r.fail(
                f"{path}.values",
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )
    else:
        if problem := qualified_name_error(key):
            r.fail(f"{path}.key", f"{_quote(key)} is not a valid label key: {problem}")
        check_selector_values(r, op, values, f"{path}.values")
    return NodeSelectorRequirement(key=key, operator=op, values=values)


def _parser_requirement(r: FieldReader, raw: JSONValue, path: str, *, is_field: bool) -> NodeSelectorRequirement:
    """The scheduler's nodeaffinity parser: labels.NewRequirement for matchExpressions, one
    In/NotIn value of `metadata.name` for matchFields."""
    m = r.object(raw, path, ("key", "operator", "values"), allow_none=False)
    key = r.string(m.get("key", ""), f"{path}.key")
    op_raw = r.string(m.get("operator", ""), f"{path}.operator")
    values_path = f"{path}.values"
    values = r.string_list(m.get("values"), values_path)
    supported = _SET_OPERATORS if is_field else tuple(SelectorOperator)
    if op_raw not in {o.value for o in supported}:
        listed = ", ".join(_plain(s.value) for s in supported)
        r.fail(f"{path}.operator", f"unsupported value {_plain(op_raw)} (supported: {listed})")
    op = SelectorOperator(op_raw)
    if is_field:
        if key != _NODE_NAME_FIELD:
            r.fail(f"{path}.key", f"unsupported value {_plain(key)} (supported: {_plain(_NODE_NAME_FIELD)})")
        if len(values) != 1:
            r.fail(values_path, "must have one element")
        return NodeSelectorRequirement(key, op, values)
    if qualified_name_error(key):
        r.fail(f"{path}.key", f"invalid value {_plain(key)}: {QUALIFIED_NAME_RULE}")
    if op in _SET_OPERATORS and not values:
        r.fail(values_path, "for 'in', 'notin' operators, values set can't be empty")
    if op in _EXISTS_OPERATORS and values:
        r.fail(values_path, "values set must be empty for exists and does not exist")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            r.fail(values_path, "for 'Gt', 'Lt' operators, exactly one value is required")
        if not _INTEGER.fullmatch(values[0]) or not -(2**63) <= int(values[0]) < 2**63:
            r.fail(values_path, "for 'Gt', 'Lt' operators, the value must be an integer")
    for i, v in enumerate(values):
        if label_value_error(v):
            r.fail(f"{values_path}[{i}]", f"invalid value {_plain(v)}: {LABEL_VALUE_RULE}")
    return NodeSelectorRequirement(key, op, values)


def _term(r: FieldReader, raw: JSONValue, path: str, validation: Validation) -> NodeSelectorTerm:
    term = r.object(raw, path, ("matchExpressions", "matchFields"))
    requirement = _pod_requirement if validation is Validation.POD else _parser_requirement
    exprs_path, fields_path = f"{path}.matchExpressions", f"{path}.matchFields"
    return NodeSelectorTerm(
        match_expressions=tuple(
            requirement(r, item, f"{exprs_path}[{i}]", is_field=False)
            for i, item in enumerate(r.sequence(term.get("matchExpressions"), exprs_path))
        ),
        match_fields=tuple(
            requirement(r, item, f"{fields_path}[{i}]", is_field=True)
            for i, item in enumerate(r.sequence(term.get("matchFields"), fields_path))
        ),
    )


def decode_node_affinity(r: FieldReader, raw: JSONValue, path: str, validation: Validation) -> NodeAffinity:
    """A NodeAffinity from its JSON shape at field path `path`, validated as kube does for
    `validation`. Raises whatever `r.fail` raises, at the first problem."""
    pod = validation is Validation.POD
    affinity = r.object(raw, path, (_REQUIRED, _PREFERRED))
    required: NodeSelector | None = None
    req_path = f"{path}.{_REQUIRED}"
    if affinity.get(_REQUIRED) is not None:
        selector = r.object(affinity[_REQUIRED], req_path, ("nodeSelectorTerms",))
        terms_path = f"{req_path}.nodeSelectorTerms"
        terms = r.sequence(selector.get("nodeSelectorTerms"), terms_path)
        if pod and not terms:
            r.fail(terms_path, "must have at least one node selector term")
        required = NodeSelector(tuple(_term(r, t, f"{terms_path}[{i}]", validation) for i, t in enumerate(terms)))
    pref_path = f"{path}.{_PREFERRED}"
    preferred: list[PreferredSchedulingTerm] = []
    for i, item in enumerate(r.sequence(affinity.get(_PREFERRED), pref_path)):
        item_path = f"{pref_path}[{i}]"
        pref = r.object(item, item_path, ("weight", "preference"), allow_none=pod)
        if pod:
            weight = r.integer(pref.get("weight"), f"{item_path}.weight", lo=1, hi=100)
            if pref.get("preference") is None:
                r.fail(f"{item_path}.preference", "is required")
        else:
            weight = r.integer(pref.get("weight", 0), f"{item_path}.weight", lo=-_INT32_MAX - 1, hi=_INT32_MAX)
        term = _term(r, pref.get("preference"), f"{item_path}.preference", validation)
        preferred.append(PreferredSchedulingTerm(weight=weight, preference=term))
    return NodeAffinity(required=required, preferred=tuple(preferred))
