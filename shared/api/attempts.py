"""A pod's scheduling attempt, one type from the cycle to the agent (`Attempt`).

Each time a cycle reserves a pod, the store moves it Pending -> Reserved and gives it the next
version: that version names the attempt everywhere after (the reservation on the node, the bind
request, the outcome, the Permit wait, the node's assignment), so a step of an older attempt
never undoes a newer one's work. Redis scripts take and keep it in its decimal form
(`attempt_arg`); "" there means none (`NO_ATTEMPT`), or "any" where a script may insist on one.
"""

from __future__ import annotations

from typing import Final, TypeAlias

__all__ = ["NO_ATTEMPT", "Attempt", "attempt_arg", "read_attempt"]

Attempt: TypeAlias = int
"""The pod's version the attempt's reservation gave it: 1, 2, ...; `NO_ATTEMPT` for none."""

NO_ATTEMPT: Final[Attempt] = 0
"""No attempt: a placement kubus did not make (a pod bound by another scheduler), or, as an
argument, any attempt."""


def attempt_arg(attempt: Attempt) -> str:
    """``attempt`` as the Redis scripts take and store it: decimal, "" for NO_ATTEMPT."""
    return str(attempt) if attempt else ""


def read_attempt(value: object) -> Attempt:
    """An attempt as stored (decimal text, or a JSON number); NO_ATTEMPT for "" or None, and for
    the non-numeric ids releases before this one wrote (a random id, "apiserver" for a pod bound
    by another scheduler), which no attempt of this release can match."""
    if isinstance(value, int):
        return value
    text = value.decode() if isinstance(value, bytes) else str(value or "")
    return int(text) if text.isdigit() else NO_ATTEMPT
