"""Reading a scheduler configuration's fields strictly (an unknown field is an error, as kube's
strict decoding makes it), each problem a FieldError at a field path."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NoReturn

from kubus.api.names import is_qualified_name
from kubus.api.node_affinity import QUALIFIED_NAME_RULE
from kubus.core.codec import JSONList, JSONMapping, JSONValue

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class FieldError(Exception):
    """A problem at a field path inside the current scope (top level or one profile)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def type_name(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Mapping):
        return "mapping"
    if isinstance(v, (list, tuple)):
        return "list"
    return type(v).__name__


def mapping(v: object, path: str, *, allow_none: bool = True) -> JSONMapping:
    if v is None and allow_none:
        return {}
    if not isinstance(v, Mapping):
        raise FieldError(path, f"expected a mapping, got {type_name(v)}")
    for k in v:
        if not isinstance(k, str):
            raise FieldError(path, f"field names must be strings, got {k!r}")
    return v


def check_fields(m: JSONMapping, path: str, known: Iterable[str]) -> None:
    known = tuple(known)
    for k in m:
        if k not in known:
            raise FieldError(path, f'unknown field "{k}" (known fields: {", ".join(known)})')


def as_list(v: object, path: str) -> JSONList:
    if v is None:
        return []
    if not isinstance(v, list):
        raise FieldError(path, f"expected a list, got {type_name(v)}")
    return v


def string(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise FieldError(path, f"expected a string, got {type_name(v)}")
    return v


def integer(v: object, path: str, *, maximum: int = _INT32_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldError(path, f"expected an integer, got {type_name(v)} {v!r}")
    if not -maximum - 1 <= v <= maximum:
        raise FieldError(path, f"invalid value {v}: out of range for a {maximum.bit_length() + 1}-bit integer")
    return v


def check_qualified_name(v: str, path: str) -> None:
    """kube's IsQualifiedName: [DNS-subdomain prefix '/'] name, name <= 63 characters."""
    if not is_qualified_name(v):
        raise FieldError(path, f'invalid value "{v}": {QUALIFIED_NAME_RULE}')


class ConfigReader:
    """The strict reader of kubus.api.node_affinity's FieldReader, over the helpers above."""

    def fail(self, path: str, reason: str) -> NoReturn:
        raise FieldError(path, reason)

    def object(self, value: JSONValue, path: str, known: tuple[str, ...], *, allow_none: bool = True) -> JSONMapping:
        m = mapping(value, path, allow_none=allow_none)
        check_fields(m, path, known)
        return m

    def sequence(self, value: JSONValue, path: str) -> JSONList:
        return as_list(value, path)

    def string(self, value: JSONValue, path: str) -> str:
        return string(value, path)

    def string_list(self, value: JSONValue, path: str) -> tuple[str, ...]:
        return tuple(string(v, f"{path}[{i}]") for i, v in enumerate(as_list(value, path)))

    def integer(self, value: JSONValue, path: str, *, lo: int, hi: int) -> int:
        return integer(value, path, maximum=hi)
