"""Go's arithmetic, where it differs from Python's: the nodewise plugins compute as kube does.

Go's integer division truncates toward zero, Python's `//` floors; `math.Round` rounds halves
away from zero, Python's `round` to even; converting a float64 to int64 truncates. Everything
else (int64 products of quantities, float64 operations in the same order) is the same in both,
as long as nothing overflows int64, which kube's own quantities never do.
"""

from __future__ import annotations

import math


def go_div(a: int, b: int) -> int:
    """Go's `a / b` on int64: the quotient truncated toward zero. Raises ZeroDivisionError."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def go_round(x: float) -> int:
    """Go's `int64(math.Round(x))`: the nearest integer, halves away from zero."""
    t = math.trunc(x)
    # x - t is exact: it is x's fractional part, representable whenever x has one
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return int(t)


def go_int64(x: float) -> int:
    """Go's `int64(x)` for a finite float64: truncation toward zero."""
    return math.trunc(x)
