"""kube's helper.DefaultNormalizeScore, over an int64 score array."""

from __future__ import annotations

from kubus.kernels.backend import Array, ArrayModule


def default_normalize_score(xp: ArrayModule, max_priority: int, reverse: bool, scores: Array) -> Array:
    """Scale so the highest score becomes max_priority (integer division, as Go); reverse flips.

    All scores zero: unchanged, or all max_priority when reversed.
    """
    top = int(scores.max()) if scores.shape[0] else 0
    if top <= 0:
        return xp.full_like(scores, max_priority) if reverse else scores.copy()
    out = max_priority * scores // top
    return max_priority - out if reverse else out
