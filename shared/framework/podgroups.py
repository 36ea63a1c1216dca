"""The pod groups (gangs) a scheduler sees: what Coscheduling reads through the framework
handle (``handle.pod_groups``), as scheduler-plugins' Coscheduling reads its PodGroup lister.

`PodGroups` is a view its owner loads: the cycle from Redis before each batch, `kubus simulate`
from the manifests. Counts are of members that still count (not finished, failed or deleted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubus.api.podgroups import PodGroup

__all__ = ["PodGroups"]


@dataclass(slots=True)
class PodGroups:
    """Pod groups by key (namespace/name), with their member counts."""

    _groups: dict[str, PodGroup] = field(default_factory=dict)
    _members: dict[str, int] = field(default_factory=dict)
    _assigned: dict[str, int] = field(default_factory=dict)

    def get(self, key: str) -> PodGroup | None:
        """The group ``namespace/name``, or None when no such PodGroup exists."""
        return self._groups.get(key)

    def members(self, key: str) -> int:
        """Pods of the group that exist and still count (pending, reserved, bound, running)."""
        return self._members.get(key, 0)

    def assigned(self, key: str) -> int:
        """Members placed for good: bound or running (not the ones waiting on Permit)."""
        return self._assigned.get(key, 0)

    def load(self, groups: Iterable[PodGroup], members: Mapping[str, int], assigned: Mapping[str, int]) -> None:
        """Replace the view."""
        self._groups = {g.key: g for g in groups}
        self._members = dict(members)
        self._assigned = dict(assigned)

    def note_assigned(self, key: str, count: int = 1) -> None:
        """``count`` more members of ``key`` were placed for good (simulate binds at once)."""
        self._assigned[key] = self._assigned.get(key, 0) + count
