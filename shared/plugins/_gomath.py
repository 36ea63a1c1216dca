"""Go's float64 math where it differs from numpy's or the C library's, for plugins whose kube
twin computes in float64: `math.Log` (FreeBSD's algorithm, not the C library's, which differs in
the last bit for some inputs) and `math.Round` (halves away from zero, not to even)."""

from __future__ import annotations

import math

import numpy as np

_SQRT2_HALF = 7.07106781186547524401e-01
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_L1 = 6.666666666666735130e-01
_L2 = 3.999999999940941908e-01
_L3 = 2.857142874366239149e-01
_L4 = 2.222219843214978396e-01
_L5 = 1.818357216161805012e-01
_L6 = 1.531383769920937332e-01
_L7 = 1.479819860511658591e-01


def go_log(x: float) -> float:
    """Go's `math.Log(x)` for a finite x > 0, bit for bit (as its pure-Go and amd64 versions
    compute it, without fused multiply-adds)."""
    f1, ki = math.frexp(x)
    if f1 < _SQRT2_HALF:
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def go_round(x: np.ndarray) -> np.ndarray:
    """Go's `int64(math.Round(x))` over a float64 array of finite values: halves away from zero."""
    t = np.trunc(x)
    frac = x - t  # exact: the fractional part of a float64 is representable
    rounded: np.ndarray = t.astype(np.int64)
    rounded += frac >= 0.5
    rounded -= frac <= -0.5
    return rounded
