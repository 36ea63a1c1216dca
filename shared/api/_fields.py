"""Reading one manifest object's fields: shapes, strings, integers, quantities, times, each
failing with a ManifestError that names the object and the field path."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from fractions import Fraction
from functools import lru_cache
from typing import NoReturn, TypeVar

from kubus.api.errors import ManifestError
from kubus.api.names import qualified_name_error
from kubus.api.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
)
from kubus.api.quantity import MAX_INT64, resource_quantity
from kubus.api.resource_names import is_extended_resource_name
from kubus.core.codec import JSONList, JSONObject, JSONValue

_POD_RESOURCES = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE})

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

_E = TypeVar("_E", bound=Enum)


def quote(text: str) -> str:
    """Double-quoted with JSON escapes, so that a message stays on one line."""
    return json.dumps(text, ensure_ascii=False)


def shown(value: JSONValue) -> str:
    """A string quoted, anything else described: for values that should have been a string."""
    return quote(value) if isinstance(value, str) else describe(value)


def describe(value: JSONValue) -> str:
    """A value's JSON type and, when short, the value: `integer 1`, `list`, `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {quote(value)}" if len(value) <= 40 else "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def key_path(base: str, key: str) -> str:
    """`base.key` for a plain identifier, `base[key]` otherwise (kube's field.Path.Key)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    if not key.isprintable():
        key = quote(key)[1:-1]
    return f"{base}[{key}]"


def _enum_values(cls: type[Enum]) -> str:
    return ", ".join(m.value for m in cls)


@lru_cache(maxsize=4096, typed=True)
def _resource_quantity(name: str, raw: str | int | float) -> tuple[int, Fraction]:
    """(base units, exact value) of a quantity of resource `name` (`resource_quantity`: at most
    2**63-1 in base units, whatever the resource), a whole number for an extended resource.
    Cached: a cluster file repeats the same few quantities thousands of times."""
    base, exact = resource_quantity(name, raw)
    if exact.denominator != 1 and is_extended_resource_name(name):
        shown = raw.strip() if isinstance(raw, str) else repr(raw)
        raise ValueError(f"quantity {quote(shown)} must be a whole number for {name}")
    return base, exact


class Reader:
    """Reads one object's fields, raising ManifestError with the object's name and field path."""

    __slots__ = ("obj", "source")

    def __init__(self, source: str, obj: str) -> None:
        self.source = source
        self.obj = obj

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ManifestError(self.source, self.obj, path, reason)

    # -- shapes --------------------------------------------------------------------------------
    def mapping(self, value: JSONValue, path: str) -> JSONObject:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {describe(key)}")
        return value

    def object(self, value: JSONValue, path: str, known: tuple[str, ...], *, allow_none: bool = True) -> JSONObject:
        """A mapping ({} for None when `allow_none`). Fields other than `known` are ignored, as
        the API server ignores them."""
        if value is None and not allow_none:
            self.fail(path, "expected a mapping, got null")
        return self.mapping(value, path)

    def sequence(self, value: JSONValue, path: str) -> JSONList:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {describe(value)}")
        return value

    def string(self, value: JSONValue, path: str, default: str = "") -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            hint = " (quote it)" if isinstance(value, int | float | bool) else ""
            self.fail(path, f"expected a string, got {describe(value)}{hint}")
        return value

    def required_string(self, value: JSONValue, path: str) -> str:
        text = self.string(value, path)
        if not text:
            self.fail(path, "is required")
        return text

    def integer(self, value: JSONValue, path: str, *, lo: int = -MAX_INT64 - 1, hi: int = MAX_INT64) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {describe(value)}")
        if not lo <= value <= hi:
            self.fail(path, f"must be between {lo} and {hi}, inclusive")
        return value

    def optional_integer(self, value: JSONValue, path: str, *, lo: int, hi: int) -> int | None:
        return None if value is None else self.integer(value, path, lo=lo, hi=hi)

    def boolean(self, value: JSONValue, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {describe(value)}")
        return value

    def enum(self, value: JSONValue, path: str, cls: type[_E]) -> _E:
        text = self.string(value, path)
        try:
            return cls(text)
        except ValueError:
            self.fail(path, f"unsupported value {quote(text)} (supported: {_enum_values(cls)})")

    def choice(self, value: JSONValue, path: str, choices: tuple[str, ...]) -> str:
        text = self.string(value, path)
        if text not in choices:
            self.fail(path, f"unsupported value {quote(text)} (supported: {', '.join(choices)})")
        return text

    def string_list(
        self, value: JSONValue, path: str, check: Callable[[str], str | None] | None = None
    ) -> tuple[str, ...]:
        items = self.sequence(value, path)
        result = []
        for i, item in enumerate(items):
            item_path = f"{path}[{i}]"
            if item is None:
                self.fail(item_path, "expected a string, got null")
            text = self.string(item, item_path)
            if check is not None and (problem := check(text)):
                self.fail(item_path, f"{quote(text)} is not valid: {problem}")
            result.append(text)
        return tuple(result)

    def string_map(
        self,
        value: JSONValue,
        path: str,
        key_check: Callable[[str], str | None] | None = None,
        value_check: Callable[[str], str | None] | None = None,
    ) -> dict[str, str]:
        raw = self.mapping(value, path)
        result: dict[str, str] = {}
        for key, item in raw.items():
            item_path = key_path(path, key)
            if key_check is not None and (problem := key_check(key)):
                self.fail(item_path, f"key {quote(key)} is not valid: {problem}")
            if item is None:
                item = ""
            text = self.string(item, item_path)
            if value_check is not None and (problem := value_check(text)):
                self.fail(item_path, f"{quote(text)} is not valid: {problem}")
            result[key] = text
        return result

    # -- quantities ----------------------------------------------------------------------------
    def quantity(self, name: str, raw: JSONValue, path: str) -> tuple[int, Fraction]:
        """(base units, exact value) of one resource quantity; rejects negatives and > int64."""
        if raw is None or isinstance(raw, bool) or not isinstance(raw, str | int | float):
            self.fail(path, f"expected a quantity (string or number), got {describe(raw)}")
        try:
            return _resource_quantity(name, raw)
        except ValueError as e:
            self.fail(path, str(e))

    def resources(self, value: JSONValue, path: str, *, pod: bool = False) -> dict[str, tuple[int, Fraction, str]]:
        """name -> (base units, exact value, field path) for a ResourceList.

        `pod` restricts names without a domain to those a container can ask for, as kube's
        validateContainerResourceName does (it catches typos such as "cpus").
        """
        raw = self.mapping(value, path)
        result = {}
        for name, amount in raw.items():
            item_path = key_path(path, name)
            if not name:
                self.fail(path, "resource names must be non-empty")
            if problem := qualified_name_error(name):
                self.fail(item_path, f"resource name {quote(name)} is not valid: {problem}")
            standard = name in _POD_RESOURCES or name.startswith("hugepages-")
            if pod and "/" not in name and not standard:
                self.fail(
                    item_path,
                    f"{quote(name)} is not a resource a pod can request (cpu, memory, "
                    "ephemeral-storage, hugepages-<size>, or an extended resource such as "
                    "nvidia.com/gpu)",
                )
            base, exact = self.quantity(name, amount, item_path)
            result[name] = (base, exact, item_path)
        return result

    def resource_list(self, value: JSONValue, path: str, *, pod: bool = False) -> dict[str, int]:
        return {name: base for name, (base, _, _) in self.resources(value, path, pod=pod).items()}

    # -- metadata ------------------------------------------------------------------------------
    def timestamp(self, value: JSONValue, path: str) -> float:
        if value is None:
            return 0.0
        text = self.string(value, path)
        if not text:
            return 0.0
        try:
            moment = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            moment = None
        if moment is None or "T" not in text.upper() or moment.tzinfo is None:
            self.fail(
                path,
                f"{quote(text)} is not an RFC 3339 time (such as 2024-05-01T12:00:00Z)",
            )
        return moment.astimezone(UTC).timestamp()
