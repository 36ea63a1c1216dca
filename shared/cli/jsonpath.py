"""kubectl's JSONPath templates (`-o jsonpath=...`, `--sort-by`, `-o custom-columns=...`), read as
client-go's ``util/jsonpath`` reads them, over the plain dicts and lists of a decoded object.

The subset kubectl users write: text outside braces printed as is; ``{.a.b}``, ``{$.a}``,
``{.items[*].metadata.name}``, ``{.items[0]}``, ``{.items[-1:]}``, ``{.items[0,2]}``,
``{['key.with.dots']}``, ``{.metadata.labels.app\\.kubernetes\\.io/name}``, ``{..name}``
(recursive), ``{.*}``, filters ``[?(@.type=="Ready")]`` (``==``, ``!=``, ``<``, ``>``, ``<=``,
``>=``, or just ``[?(@.field)]``: has it), string literals ``{"\\t"}``, and
``{range .items[*]}...{end}``. As kubectl's get does, a missing key prints nothing (no error);
several results of one expression are joined by a space; maps and lists print as JSON.

`parse` raises JSONPathError (a ValueError, one line) for a template that does not parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kubus.core import codec
from kubus.core.codec import JSONList, JSONValue

__all__ = ["JSONPathError", "Template", "parse", "relaxed"]


class JSONPathError(ValueError):
    """A template that does not parse; str() is one line naming the template."""


# ---- the parsed template ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    name: str


@dataclass(frozen=True, slots=True)
class _Recursive:
    name: str
    """"*" for every descendant."""


@dataclass(frozen=True, slots=True)
class _Wildcard:
    pass


@dataclass(frozen=True, slots=True)
class _Keys:
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Indexes:
    indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True, slots=True)
class _Filter:
    left: _Path
    op: str
    """"exists" for ``[?(@.a)]``."""
    right: _Operand


@dataclass(frozen=True, slots=True)
class _Path:
    steps: tuple[_Step, ...]
    relative: bool = False
    """Starts at ``@`` (the current element of a filter), else at the current object."""


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(slots=True)
class _Range:
    path: _Path
    body: list[_Node] = field(default_factory=list)


_Step = _Field | _Recursive | _Wildcard | _Keys | _Indexes | _Slice | _Filter
"""One step of a path: ``.a``, ``..a``, ``[*]``, ``['a','b']``, ``[0,1]``, ``[1:3]``, ``[?()]``."""
_Operand = _Path | str | bool | int | float | None
"""The right side of a filter's comparison: a path or a literal."""
_Node = _Text | _Path | list[_Path] | _Range
"""A piece of a template: text, an expression, a union of expressions, a range."""


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _unquote(literal: str, template: str) -> str:
    """A quoted string of a template, its escapes (\\n, \\t, \\", ...) resolved."""
    body = literal[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise JSONPathError(f"jsonpath {template!r}: unknown escape \\{nxt} in {literal}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _split_actions(template: str) -> Iterator[tuple[bool, str]]:
    """(is an action, text) pieces of ``template``: text outside braces, and each ``{...}``
    content (braces inside quotes do not count)."""
    i, start = 0, 0
    while i < len(template):
        if template[i] != "{":
            i += 1
            continue
        if i > start:
            yield False, template[start:i]
        j = _closing(template, i, "{", "}")
        if j < 0:
            raise JSONPathError(f"jsonpath {template!r}: unclosed action")
        yield True, template[i + 1 : j]
        i = start = j + 1
    if start < len(template):
        yield False, template[start:]


_FIELD_CHARS = re.compile(r"(?:\\.|[^.\[\]\s,])+")


def _closing(text: str, i: int, opens: str, closes: str) -> int:
    """The index of the character that closes the group opening at ``text[i]`` (groups of
    ``opens``/``closes`` nested inside counted, quoted strings skipped); -1 when it never closes."""
    depth, j, quote = 0, i, ""
    while j < len(text):
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in opens:
            depth += 1
        elif c in closes:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _read_bracket(text: str, i: int, template: str) -> tuple[str, int]:
    """The content of the bracket that opens at ``text[i]`` and the index after it."""
    j = _closing(text, i, "[(", "])")
    if j < 0 or text[j] != "]":
        raise JSONPathError(f"jsonpath {template!r}: unclosed [ in {text!r}")
    return text[i + 1 : j], j + 1


def _int(text: str, template: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise JSONPathError(f"jsonpath {template!r}: {text.strip()!r} is not an index") from None


def _bracket_step(content: str, template: str) -> _Step:
    inner = content.strip()
    if inner == "*":
        return _Wildcard()
    if inner.startswith("?"):
        body = inner[1:].strip()
        if not (body.startswith("(") and body.endswith(")")):
            raise JSONPathError(f"jsonpath {template!r}: a filter is [?(...)], got [{inner}]")
        return _parse_filter(body[1:-1].strip(), template)
    parts = _split_top(inner, ",")
    if all(p.strip()[:1] in "\"'" for p in parts):
        return _Keys(tuple(_unquote(p.strip(), template) for p in parts))
    if ":" in inner and len(parts) == 1:
        bounds = inner.split(":")
        if len(bounds) > 3:
            raise JSONPathError(f"jsonpath {template!r}: bad slice [{inner}]")
        values = [None if not b.strip() else _int(b, template) for b in bounds] + [None] * (3 - len(bounds))
        return _Slice(values[0], values[1], values[2])
    return _Indexes(tuple(_int(p, template) for p in parts))


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside quotes, brackets and parentheses."""
    out, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            if c == quote and text[i - 1] != "\\":
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")


def _parse_filter(body: str, template: str) -> _Filter:
    quote = ""
    for i, c in enumerate(body):
        if quote:
            if c == quote and body[i - 1] != "\\":
                quote = ""
            continue
        if c in "\"'":
            quote = c
            continue
        for op in _OPERATORS:
            if body.startswith(op, i):
                left = _parse_path(body[:i].strip(), template)
                return _Filter(left, op, _parse_operand(body[i + len(op) :].strip(), template))
    return _Filter(_parse_path(body, template), "exists", None)


def _parse_operand(text: str, template: str) -> _Operand:
    if text[:1] in "\"'":
        return _unquote(text, template)
    if text[:1] in "@$.":
        return _parse_path(text, template)
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise JSONPathError(f"jsonpath {template!r}: cannot read {text!r} in a filter") from None


def _parse_path(text: str, template: str) -> _Path:
    relative = False
    i = 0
    if text.startswith("@"):
        relative, i = True, 1
    elif text.startswith("$"):
        i = 1
    steps: list[_Step] = []
    while i < len(text):
        c = text[i]
        if text.startswith("..", i):
            m = _FIELD_CHARS.match(text, i + 2)
            if text.startswith("*", i + 2):
                steps.append(_Recursive("*"))
                i += 3
            elif m is not None:
                steps.append(_Recursive(m.group().replace("\\", "")))
                i = m.end()
            elif text.startswith("[", i + 2):  # ..[*] and the like: every descendant, then the bracket
                steps.append(_Recursive("*"))
                i += 2
            else:
                raise JSONPathError(f"jsonpath {template!r}: expected a field name after '..' in {text!r}")
        elif c == ".":
            if text.startswith("*", i + 1):
                steps.append(_Wildcard())
                i += 2
                continue
            m = _FIELD_CHARS.match(text, i + 1)
            if m is None:
                if i + 1 == len(text) and not steps:  # "{.}": the object itself
                    i += 1
                    continue
                raise JSONPathError(f"jsonpath {template!r}: expected a field name after '.' in {text!r}")
            steps.append(_Field(m.group().replace("\\", "")))
            i = m.end()
        elif c == "[":
            content, i = _read_bracket(text, i, template)
            steps.append(_bracket_step(content, template))
        elif c.isspace():
            raise JSONPathError(f"jsonpath {template!r}: unexpected space in {text!r}")
        else:
            m = _FIELD_CHARS.match(text, i)
            if m is None or steps or relative:
                raise JSONPathError(f"jsonpath {template!r}: unexpected {c!r} in {text!r}")
            steps.append(_Field(m.group().replace("\\", "")))  # "{metadata.name}", as kubectl lets it
            i = m.end()
    return _Path(tuple(steps), relative)


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed JSONPath template; `render` applies it to an object."""

    source: str
    nodes: tuple[_Node, ...]

    def render(self, obj: JSONValue) -> str:
        """The template's text for ``obj``. Never raises for missing keys (they print nothing)."""
        out: list[str] = []
        _render(self.nodes, obj, out)
        return "".join(out)

    def values(self, obj: JSONValue) -> JSONList:
        """The values of the template's expressions for ``obj``, in order (texts left out):
        what --sort-by and custom-columns read."""
        found: JSONList = []
        for node in self.nodes:
            if isinstance(node, _Path):
                found += _walk(node, [obj], obj)
            elif isinstance(node, list):  # a union: {.a,.b}
                for path in node:
                    found += _walk(path, [obj], obj)
        return found


def parse(template: str) -> Template:
    """Parse a kubectl JSONPath template. Raises JSONPathError."""
    root: list[_Node] = []
    stack: list[list[_Node]] = [root]
    for is_action, text in _split_actions(template):
        if not is_action:
            stack[-1].append(_Text(text))
            continue
        action = text.strip()
        if action[:1] in "\"'":
            if len(action) < 2 or action[-1] != action[0]:
                raise JSONPathError(f"jsonpath {template!r}: unterminated string {action}")
            stack[-1].append(_Text(_unquote(action, template)))
        elif action == "end":
            if len(stack) == 1:
                raise JSONPathError(f"jsonpath {template!r}: {{end}} without {{range}}")
            stack.pop()
        elif action.startswith("range ") or action.startswith("range\t"):
            node = _Range(_parse_path(action[6:].strip(), template))
            stack[-1].append(node)
            stack.append(node.body)
        elif not action:
            raise JSONPathError(f"jsonpath {template!r}: empty {{}}")
        else:
            paths = [_parse_path(p.strip(), template) for p in _split_top(action, ",")]
            stack[-1].append(paths[0] if len(paths) == 1 else paths)
    if len(stack) > 1:
        raise JSONPathError(f"jsonpath {template!r}: {{range}} without {{end}}")
    return Template(template, tuple(root))


_RELAXED = re.compile(r"^\{?(\$?\.?[^{}]*?)\}?$")


def relaxed(expression: str) -> Template:
    """``--sort-by`` and custom-columns' expressions: ``.metadata.name``, ``metadata.name`` or
    ``{.metadata.name}`` alike (kubectl's RelaxedJSONPathExpression). Raises JSONPathError."""
    m = _RELAXED.match(expression.strip())
    if m is None or not m.group(1):
        raise JSONPathError(f"jsonpath {expression!r}: expected a field path such as .metadata.name")
    path = m.group(1)
    if not path.startswith(("$", ".", "[")):
        path = "." + path
    return parse("{" + path + "}")


# ---- evaluation ---------------------------------------------------------------------------------


def _descendants(value: JSONValue) -> Iterator[JSONValue]:
    yield value
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        yield from _descendants(child)


def _step(step: _Step, values: Sequence[JSONValue], root: JSONValue) -> JSONList:
    out: JSONList = []
    for v in values:
        if isinstance(step, _Field):
            if isinstance(v, dict) and step.name in v:
                out.append(v[step.name])
        elif isinstance(step, _Keys):
            if isinstance(v, dict):
                out += [v[k] for k in step.names if k in v]
        elif isinstance(step, _Wildcard):
            if isinstance(v, dict):
                out += list(v.values())
            elif isinstance(v, list):
                out += v
        elif isinstance(step, _Recursive):
            for d in _descendants(v):
                if step.name == "*":
                    out.append(d)
                elif isinstance(d, dict) and step.name in d:
                    out.append(d[step.name])
        elif isinstance(step, _Indexes):
            if isinstance(v, list):
                out += [v[i] for i in step.indexes if -len(v) <= i < len(v)]
        elif isinstance(step, _Slice):
            if isinstance(v, list):
                out += v[step.start : step.stop : step.step or None]
        elif isinstance(step, _Filter) and isinstance(v, list):
            out += [item for item in v if _keeps(step, item, root)]
    return out


def _keeps(f: _Filter, item: JSONValue, root: JSONValue) -> bool:
    left = _walk(f.left, [item], root)
    if f.op == "exists":
        return bool(left)
    right = _walk(f.right, [item], root) if isinstance(f.right, _Path) else [f.right]
    if not left or not right:
        return False
    a, b = left[0], right[0]
    if f.op == "==":
        return bool(a == b)
    if f.op == "!=":
        return bool(a != b)
    try:
        if f.op == "<":
            return bool(a < b)
        if f.op == ">":
            return bool(a > b)
        if f.op == "<=":
            return bool(a <= b)
        return bool(a >= b)
    except TypeError:  # a string against a number: kube's filter says no match
        return False


def _walk(path: _Path, values: Sequence[JSONValue], root: JSONValue) -> JSONList:
    current = list(values)
    for step in path.steps:
        current = _step(step, current, root)
    return current


def text_of(value: JSONValue) -> str:
    """One value as kubectl's jsonpath prints it: strings as they are, maps and lists as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return codec.dumps(value).decode()
    return str(value)


def _render(nodes: Sequence[_Node], current: JSONValue, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Path):
            out.append(" ".join(text_of(v) for v in _walk(node, [current], current)))
        elif isinstance(node, list):
            out.append(" ".join(text_of(v) for p in node for v in _walk(p, [current], current)))
        elif isinstance(node, _Range):
            found = _walk(node.path, [current], current)
            items = found[0] if len(found) == 1 and isinstance(found[0], list) else found
            for item in items:
                _render(node.body, item, out)
