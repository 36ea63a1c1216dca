"""What node agents read and write: admission views and starting the pods they admitted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubus.store._core import _BATCH, StoreCore, _code
from kubus.store.records import (
    PodEvent,
    PodPhase,
    Reservation,
    _text,
)
from kubus.store.scripts import StoreCode


@dataclass(frozen=True, slots=True)
class AdmissionView:
    """What a node agent reads to admit one assigned pod (`ClusterState.admission_views`)."""

    uid: str
    node: str
    """The node asked about (where the assignment says the pod runs)."""
    phase: PodPhase | None
    """None when there is no such pod."""
    pod_node: str
    """The node the pod record names ('' for none)."""
    profile: str
    updated_at: float
    """The record's last change, seconds since the epoch (a Running pod's start)."""
    reservation: Reservation | None
    """The pod's reservation on `node` (with its state), or None."""


@dataclass(frozen=True, slots=True)
class PodStart:
    """One pod an agent admitted, for `ClusterState.start_pods`."""

    uid: str
    node: str
    attempt: str = ""
    """The attempt the reservation must carry ('' = any)."""
    event: PodEvent | None = None
    """Appended to the pod's events when it starts now (not on ALREADY)."""


@dataclass(frozen=True, slots=True)
class PodStartResult:
    """What `ClusterState.start_pods` did with one pod."""

    code: StoreCode
    """OK (Running now), ALREADY (Running before), CONFLICT (not Bound on that node with a
    bound reservation of that attempt; nothing changed), GONE (deleted) or NOT_FOUND."""
    version: int = 0
    phase: PodPhase | None = None
    """The phase before (OK), else the current one."""
    reason: str = ""
    """Why CONFLICT."""

    @property
    def started(self) -> bool:
        """Running now or before: the agent runs it."""
        return self.code in (StoreCode.OK, StoreCode.ALREADY)


def _start_result(reply: list[Any]) -> PodStartResult:
    code = _code(reply[0])
    if code is StoreCode.NOT_FOUND:
        return PodStartResult(code)
    reason = _text(reply[4]) if len(reply) > 4 else ""
    return PodStartResult(code, int(_text(reply[1]) or 0), PodPhase(_text(reply[2])), reason)


class AgentStore(StoreCore):
    """Admission: `ClusterState` is one."""

    async def admission_views(self, pods: Sequence[tuple[str, str]]) -> list[AdmissionView]:
        """For each (node, uid): the pod's phase, node, profile and last update, and its
        reservation on that node, pipelined (one round trip per 500 pods).
        Each pod's fields are read together, not atomically with its reservation: the agent
        decides on them and `start_pods` checks again atomically. Remembers the profiles, so a
        later `transition` of these pods reads nothing first."""
        out: list[AdmissionView] = []
        pods = list(pods)
        for start in range(0, len(pods), _BATCH):
            chunk = pods[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            rows: list[Any] = []
            for node, uid in chunk:  # one read-only script per pod (a third of the commands)
                keys = [self.keys.pod_record(uid), self.keys.node_reservations(node), self.keys.node_bound(node)]
                await self.scripts.admission_view(keys=keys, args=[uid], client=pipe)
            for phase, pod_node, profile, updated_at, value, bound in await pipe.execute():
                rows.append((phase or None, pod_node, profile, updated_at, value or None, int(bound)))
            for (node, uid), (phase, pod_node, profile, updated_at, value, bound) in zip(chunk, rows, strict=True):
                reservation = None if value is None else Reservation.decode(value, bound=bool(bound))
                if phase is None:
                    out.append(AdmissionView(uid, node, None, "", "", 0.0, reservation))
                    continue
                profile_text = _text(profile)
                if profile_text:
                    self._remember_profile(uid, profile_text)
                out.append(
                    AdmissionView(
                        uid,
                        node,
                        PodPhase(_text(phase)),
                        _text(pod_node),
                        profile_text,
                        float(_text(updated_at) or 0.0),
                        reservation,
                    )
                )
        return out

    async def start_pods(self, starts: Sequence[PodStart]) -> list[PodStartResult]:
        """Bound -> Running for pods an agent admitted, each atomically with its checks (Bound
        on its node, holding a bound reservation there of its attempt) and its event (see
        START_POD in kubus.store.scripts); pipelined, one round trip per 500 pods on a single
        Redis. Results in the order of `starts`; each pod's start is atomic, the batch is not.
        Idempotent: a pod Running already answers ALREADY and gets no second event."""
        out: list[PodStartResult] = []
        now = repr(float(self.clock()))
        cap = str(self.event_cap)
        moved = [self.keys.phase_index(str(PodPhase.BOUND)), self.keys.phase_index(str(PodPhase.RUNNING))]
        for begin in range(0, len(starts), _BATCH):
            chunk = starts[begin : begin + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for s in chunk:
                keys = [
                    self.keys.pod_record(s.uid),
                    self.keys.pod_events(s.uid),
                    self.keys.node_reservations(s.node),
                    self.keys.node_bound(s.node),
                    *moved,
                ]
                event = s.event.encode() if s.event is not None else b""
                await self.scripts.start_pod(keys=keys, args=[s.node, s.attempt, now, event, cap], client=pipe)
            for reply in await pipe.execute():
                out.append(_start_result(list(reply)))
        return out
