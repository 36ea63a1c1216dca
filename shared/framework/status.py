"""Status codes and the Status a plugin returns, as kube-scheduler's framework defines them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Code(IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    """Rejected, but preemption or a cluster event may help."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """Rejected, and preempting pods on the node would not help."""
    WAIT = 4
    """Permit: the pod waits, holding its reservation, until allowed, rejected or timed out."""
    SKIP = 5
    PENDING = 6


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    """The plugin that returned it (filled in by the framework)."""

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, resolvable: bool = True) -> Status:
        code = Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return cls(code, tuple(reasons))

    @classmethod
    def error(cls, reason: str) -> Status:
        return cls(Code.ERROR, (reason,))

    @classmethod
    def skip(cls) -> Status:
        return _SKIP

    @classmethod
    def wait(cls, *reasons: str) -> Status:
        """Permit's answer for a pod that must wait (with the plugin's timeout beside it)."""
        return cls(Code.WAIT, tuple(reasons))

    @property
    def is_wait(self) -> bool:
        return self.code is Code.WAIT

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return Status(self.code, self.reasons, plugin)


_SUCCESS = Status()
_SKIP = Status(Code.SKIP)
