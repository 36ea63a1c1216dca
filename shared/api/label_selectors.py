"""Label selectors written as kubectl's `-l` takes them (`app=web,tier!=db,env in (a,b),gpu,!spot`),
read into the LabelSelector that `kubus.api.pod_affinity.selector_matches` evaluates.

The syntax is apimachinery's labels.Parse: requirements separated by commas; `k=v` and `k==v`
(the label is v), `k!=v` (the label is not v, or absent), `k in (v1,v2)`, `k notin (v1,v2)` (or
absent), `k` (present), `!k` (absent). Keys and values are checked as the API server checks
labels. An empty text selects everything.
"""

from __future__ import annotations

import re

from kubus.api.names import label_value_error, qualified_name_error
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, SelectorOperator
from kubus.core.errors import KubusError

__all__ = ["LabelSelectorSyntaxError", "parse_label_selector"]


class LabelSelectorSyntaxError(KubusError, ValueError):
    """A `-l` selector that does not parse; the message names the requirement and the problem."""


_SET = re.compile(r"^(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY = re.compile(r"^(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_EXISTS = re.compile(r"^(?P<not>!?)\s*(?P<key>[^\s!=(),]+)$")


def parse_label_selector(text: str) -> LabelSelector:
    """``text`` as a LabelSelector (every requirement a matchExpression). Raises
    LabelSelectorSyntaxError for text that is not a selector or a bad key or value."""
    requirements = [_requirement(part.strip(), text) for part in _split(text) if part.strip()]
    return LabelSelector(match_expressions=tuple(requirements))


def _split(text: str) -> list[str]:
    """Top-level comma-separated parts (commas inside `( )` belong to a set)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise LabelSelectorSyntaxError(f'label selector "{text}": unbalanced ")"')
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise LabelSelectorSyntaxError(f'label selector "{text}": unbalanced "("')
    parts.append(text[start:])
    return parts


def _requirement(part: str, text: str) -> LabelSelectorRequirement:
    if m := _SET.match(part):
        values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
        if not values:
            raise LabelSelectorSyntaxError(f'label selector "{text}": "{part}": a set needs at least one value')
        op = SelectorOperator.IN if m["op"] == "in" else SelectorOperator.NOT_IN
        return _checked(m["key"], op, values, part, text)
    if m := _EQUALITY.match(part):
        op = SelectorOperator.NOT_IN if m["op"] == "!=" else SelectorOperator.IN
        return _checked(m["key"], op, (m["value"],), part, text)
    if m := _EXISTS.match(part):
        op = SelectorOperator.DOES_NOT_EXIST if m["not"] else SelectorOperator.EXISTS
        return _checked(m["key"], op, (), part, text)
    raise LabelSelectorSyntaxError(
        f'label selector "{text}": "{part}" is not a requirement '
        "(key=value, key!=value, key in (a,b), key notin (a,b), key, !key)"
    )


def _checked(key: str, op: SelectorOperator, values: tuple[str, ...], part: str, text: str) -> LabelSelectorRequirement:
    if problem := qualified_name_error(key):
        raise LabelSelectorSyntaxError(f'label selector "{text}": "{part}": key "{key}" is not valid: {problem}')
    for value in values:
        if problem := label_value_error(value):
            raise LabelSelectorSyntaxError(
                f'label selector "{text}": "{part}": value "{value}" is not valid: {problem}'
            )
    return LabelSelectorRequirement(key, op, values)
