"""helper.DefaultNormalizeScore, over a node name -> score dict."""

from __future__ import annotations

from kubus_reference._gomath import go_div

MIN_NODE_SCORE = 0


def default_normalize_score(max_priority: int, reverse: bool, scores: dict[str, int]) -> None:
    """Scale scores from [0, max(scores)] to [0, max_priority] in place, integer division as Go
    does; `reverse` turns s into max_priority - s. All zeros stay 0 (max_priority if reversed)."""
    max_count = 0
    for s in scores.values():
        max_count = max(max_count, s)
    if max_count == 0:
        if reverse:
            for name in scores:
                scores[name] = max_priority
        return
    for name, s in scores.items():
        s = go_div(max_priority * s, max_count)
        scores[name] = max_priority - s if reverse else s
