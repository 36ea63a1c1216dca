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


_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01


def go_log(x: float) -> float:
    """Go's `math.Log(x)` for a finite x > 0, bit for bit (FreeBSD's e_log.c, as Go's pure-Go
    and amd64 versions compute it, without fused multiply-adds). It differs from the C
    library's log in the last bit for some inputs (log(3), log(14), ...)."""
    f1, ki = math.frexp(x)
    if f1 < math.sqrt(2) / 2:
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_LG1 + s4 * (_LG3 + s4 * (_LG5 + s4 * _LG7)))
    t2 = s4 * (_LG2 + s4 * (_LG4 + s4 * _LG6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)
