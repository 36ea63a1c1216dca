"""The one JSON codec of kubus (orjson): wire messages, CLI output, annotations.

Nothing else calls orjson directly, so encoding options and error types live in one place.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import orjson

# Decoded JSON and YAML are untyped: orjson.loads and yaml's loaders return Any, and a value's
# type is only known once a reader has checked it (kubus.api's Reader, the config decoders).
# These aliases name that one fact, so every other module says "JSON" rather than "Any".
JSONValue: TypeAlias = Any
"""A decoded JSON/YAML value of unchecked type: dict, list, str, int, float, bool or None."""
JSONObject: TypeAlias = dict[str, Any]
"""A decoded JSON object (or one being built for encoding): str keys, values of any JSON type."""
JSONMapping: TypeAlias = Mapping[str, Any]
"""A read-only view of a JSON object: what a function that only reads a document accepts."""
JSONList: TypeAlias = list[Any]
"""A decoded JSON array."""

DecodeError = orjson.JSONDecodeError
"""Raised by `loads` for malformed JSON (a ValueError)."""


# Any: ``default`` is handed whatever orjson cannot encode natively, of any type (as orjson's own).
def dumps(obj: object, *, pretty: bool = False, default: Callable[[Any], JSONValue] | None = None) -> bytes:
    """JSON bytes; dataclasses and enums are encoded natively, dict keys as given. ``default``
    turns a value of any other type into one that is encoded (or raises TypeError)."""
    return orjson.dumps(obj, default=default, option=orjson.OPT_INDENT_2 if pretty else 0)


_LARGE = 1 << 20
"""Bytes of JSON from which `loads` holds the cyclic collector off while it builds the result."""


def loads(data: bytes | str) -> JSONValue:
    """Parse JSON. Raises DecodeError (a ValueError) on malformed input.

    A large document (an apiserver's list of thousands of pods) is parsed with the cyclic
    collector off: JSON makes no cycles, and every container it builds would otherwise be
    scanned by the collections its building sets off (a tenth of a watcher's start, py-spy)."""
    if len(data) < _LARGE or not gc.isenabled():
        return orjson.loads(data)
    gc.disable()
    try:
        return orjson.loads(data)
    finally:
        gc.enable()


def text(value: object) -> str:
    """``value`` as str: bytes decoded as UTF-8 (a Redis reply, whether or not the client
    decodes responses), None as "", anything else by str()."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)
