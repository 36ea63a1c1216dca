"""Kubernetes resource quantities (`k8s.io/apimachinery/pkg/api/resource.Quantity`), exactly.

Grammar (as kube's `ParseQuantity` reads it)::

    <quantity>   ::= <sign>? <number> <suffix>?
    <sign>       ::= "+" | "-"
    <number>     ::= <digits> | <digits> "." <digits>? | "." <digits>
    <suffix>     ::= <binarySI> | <decimalSI> | <exponent>
    <binarySI>   ::= Ki | Mi | Gi | Ti | Pi | Ei                 (powers of 1024)
    <decimalSI>  ::= n | u | m | k | M | G | T | P | E            (powers of 1000)
    <exponent>   ::= ("e" | "E") <sign>? <digits>                 (1e3, 1E-3, 12e6)

Arithmetic is exact (`fractions.Fraction`, never floats). As in kube:

- a value is kept down to nano (1e-9); a finer non-zero value is rounded away from zero
  ("0.9n" is 1n, "0.5e-9" is 1n);
- `parse_quantity` caps a quantity with a binary suffix, silently, at 2**63-1 ("9Ei" is
  2**63-1);
- `value()` and `milli_value()` round up, away from zero, like `Quantity.Value()` and
  `Quantity.MilliValue()` ("1.5" is 2 and 1500m; "0.1m" is 1m);
- leading and trailing whitespace is rejected by `parse_quantity` (as by `ParseQuantity`) but
  trimmed by `to_base_units` (as kube's JSON/YAML decoding does before parsing).

Two deliberate differences:

- kube accepts a quantity with no digit at all ("k", "Mi", ".", "-", "e3") and reads it as 0
  (kubernetes/apimachinery#165); kubus rejects it as the typo it is.
- kube's ParseQuantity reads "1000000000000000000000000000000Ei" as 2**63-1 (the cap above) and
  leaves "1e1000" uncapped (its `MilliValue()` then overflows int64); kubus refuses both: every
  resource's quantity is at most 2**63-1 in base units (`resource_quantity`, `MAX_INT64`).

`resource_quantity` (and `to_base_units`) is what manifests use: milli-CPU for `cpu`, the value
rounded up for everything else (memory and storage in bytes, pods, extended resources such as
`nvidia.com/gpu`, `hugepages-*`), refusing negative values and values past 2**63-1, the exact
value read without the cap (`exact_quantity`).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from functools import lru_cache

MAX_INT64 = 2**63 - 1

_DIGITS = frozenset("0123456789")
# Characters kube's scanner takes as the start of a suffix.
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Beyond this a decimal exponent is a mistake, and 10**exponent would be slow to build.
_MAX_EXPONENT = 10_000
_NANO = 10**9
_MAX_DIGITS = 4000  # Python's int() refuses strings of more than 4300 digits by default
_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
"""Resources counted in bytes, besides `hugepages-<size>`."""


def _invalid(text: str, detail: str = "") -> ValueError:
    message = f"quantity {_quote(text)} is not valid"
    return ValueError(f"{message}: {detail}" if detail else message)


def _quote(text: str) -> str:
    """Double-quoted with JSON escapes, so that a message stays on one line."""
    return json.dumps(text, ensure_ascii=False)


def _scan(text: str) -> tuple[bool, str, str, str]:
    """kube's parseQuantityString: (positive, integer digits, fraction digits, suffix)."""
    end = len(text)
    pos = 0
    positive = True
    if text[0] == "-":
        positive = False
        pos = 1
    elif text[0] == "+":
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise _invalid(text)
    if not num and not denom:
        raise _invalid(text, "it has no digits")
    return positive, num or "0", denom, text[suffix_start:]


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> tuple[Fraction, bool]:
    """(the exact value, whether its suffix is binary): ParseQuantity less the cap."""
    if not text:
        raise _invalid(text, "it is empty")
    if text == "0":
        return Fraction(0), False
    positive, num, denom, suffix = _scan(text)
    if len(num) + len(denom) > _MAX_DIGITS:
        raise _invalid(text, "too many digits")
    amount = Fraction(int(num + denom), 10 ** len(denom))
    binary = False
    if suffix in _BINARY_SUFFIXES:
        amount *= 2 ** _BINARY_SUFFIXES[suffix]
        binary = True
    elif suffix in _DECIMAL_SUFFIXES:
        amount *= Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _is_signed_integer(suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise _invalid(text, "exponent out of range")
        amount *= Fraction(10) ** exponent
    else:
        raise _invalid(text, f"unknown suffix {_quote(suffix)}")
    if amount.denominator != 1 and (amount * _NANO).denominator != 1:
        # Round a non-zero value finer than nano up to the next nano (away from zero).
        amount = Fraction(math.ceil(amount * _NANO), _NANO)
    return (amount if positive else -amount), binary


def _is_signed_integer(text: str) -> bool:
    digits = text[1:] if text[:1] in ("+", "-") else text
    return bool(digits) and all(c in _DIGITS for c in digits)


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity as kube's `ParseQuantity` does; raise ValueError with a
    one-line reason if invalid.

    Strings follow kube's grammar (see the module docstring), a binary-suffixed value capped at
    2**63-1 ("9Ei" is 2**63-1, "-9Ei" is -(2**63-1)). Integers are taken as they are. Floats
    (YAML and JSON numbers such as `0.5`) are read through their shortest repr, so 0.1 stays
    1/10. Booleans, NaN and infinities are refused. Negative values parse.
    """
    amount, binary = _parse(value)
    if binary and abs(amount) > MAX_INT64:
        return Fraction(MAX_INT64 if amount > 0 else -MAX_INT64)
    return amount


def exact_quantity(value: str | int | float) -> Fraction:
    """`parse_quantity` without kube's cap: "9Ei" is 9 * 2**60. What base units are checked
    against, so that "1000000000000000000000000000000Ei" is too large as "1e1000" is."""
    return _parse(value)[0]


def _parse(value: str | int | float) -> tuple[Fraction, bool]:
    if isinstance(value, bool):
        raise ValueError(f"quantity must be a string or a number, got {str(value).lower()}")
    if isinstance(value, int):
        return Fraction(value), False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(repr(value))
        return _parse_text(repr(value))
    if isinstance(value, str):
        return _parse_text(value)
    raise ValueError(f"quantity must be a string or a number, got {type(value).__name__}")


def value(q: Fraction) -> int:
    """kube's `Quantity.Value()`: q rounded up to an integer, away from zero."""
    return math.ceil(q) if q >= 0 else math.floor(q)


def milli_value(q: Fraction) -> int:
    """kube's `Quantity.MilliValue()`: q * 1000 rounded up to an integer, away from zero."""
    return value(q * 1000)


def resource_quantity(resource_name: str, raw: str | int | float) -> tuple[int, Fraction]:
    """(base units, exact value) of `raw` of `resource_name`: the integer kubus stores, milli-CPU
    for "cpu", else Value() (bytes for memory and storage, a count for the rest).

    Whitespace around a string is trimmed (kube's JSON decoding does the same). Raises
    ValueError for an invalid quantity, a negative one, or one past 2**63-1 in base units, the
    same bound for every resource: `quantity "8Ei" is too large (more than 2^63-1 bytes)`.
    """
    if isinstance(raw, str):
        raw = raw.strip()
    exact = exact_quantity(raw)
    shown = raw if isinstance(raw, str) else repr(raw)
    if exact < 0:
        raise ValueError(f"quantity {_quote(shown)} must not be negative")
    result = milli_value(exact) if resource_name == "cpu" else value(exact)
    if result > MAX_INT64:
        raise ValueError(f"quantity {_quote(shown)} is too large (more than 2^63-1{_unit(resource_name)})")
    return result, exact


def to_base_units(resource_name: str, raw: str | int | float) -> int:
    """`resource_quantity`'s base units: the integer kubus stores for `raw` of `resource_name`."""
    return resource_quantity(resource_name, raw)[0]


def _unit(resource_name: str) -> str:
    """The base unit of a resource, with its leading space; "" for a count."""
    if resource_name == "cpu":
        return " millicores"
    if resource_name in _BYTE_RESOURCES or resource_name.startswith("hugepages-"):
        return " bytes"
    return ""


def format_cpu(milli: int) -> str:
    """Milli-CPU as cores, for people: 95500 -> 95.5, 250 -> 0.25 (rounded to 10m)."""
    return f"{milli / 1000:.2f}".rstrip("0").rstrip(".")


def format_bytes(n: int) -> str:
    """Bytes with a binary suffix, for people: 1073741824000 -> 1000Gi (one decimal)."""
    for unit, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.1f}".rstrip("0").rstrip(".") + unit
    return str(n)
