"""What node agents read and write: admission views (and whether an assignment is still the
agent's to run), starting the pods they admitted, and which of their pods stopped running."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubus.api.attempts import NO_ATTEMPT, Attempt, attempt_arg
from kubus.core.codec import text
from kubus.store._core import _BATCH, RedisReply, StoreCore, _code
from kubus.store.records import (
    PodEvent,
    PodPhase,
    Reservation,
    ReservationState,
)
from kubus.store.scripts import StoreCode

_MEMBERSHIP_BATCH = 5000
"""Pods per SMISMEMBER of a phase index (one reply of 5,000 small integers)."""


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

    def refusal(self, attempt: Attempt = NO_ATTEMPT) -> str | None:
        """Why the agent of `node` may not run this pod for a NodeAssignment of ``attempt``
        (NO_ATTEMPT: any attempt), as one phrase; None when it may: the pod is Bound or
        Running on `node`, held by a bound reservation there of that attempt.

        The checks START_POD makes atomically (`ClusterState.start_pods`), made on this view so
        that an agent can decide before it starts anything; START_POD's answer still wins. One
        check more: a Running pod must hold its bound reservation too (the agent runs it on
        that reservation), where START_POD answers ALREADY for any pod Running on the node."""
        phase, reservation = self.phase, self.reservation
        if phase is None:
            return "no such pod"
        if phase.terminal:
            return f"pod already finished ({phase})"
        if self.pod_node != self.node:
            return f"the pod is on another node ({self.pod_node or '-'})"
        if reservation is None:
            return "no bound reservation on this node (no reservation)"
        if reservation.state is not ReservationState.BOUND:
            return "no bound reservation on this node (its reservation is not bound)"
        if attempt and reservation.attempt != attempt:
            return f"the reservation is another attempt's ({reservation.attempt})"
        if phase not in (PodPhase.BOUND, PodPhase.RUNNING):
            return f"the pod is not bound ({phase})"
        return None


@dataclass(frozen=True, slots=True)
class PodStart:
    """One pod an agent admitted, for `ClusterState.start_pods`."""

    uid: str
    node: str
    attempt: Attempt = NO_ATTEMPT
    """The attempt the reservation must carry (NO_ATTEMPT: any)."""
    event: PodEvent | None = None
    """Appended to the pod's events when it starts now (not on ALREADY)."""
    ends_at: float = 0.0
    """When the agent will finish it (seconds since the epoch; 0: runs until deleted): the
    record's `ends_at`."""


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


def _start_result(reply: Sequence[object]) -> PodStartResult:
    code = _code(reply[0])
    if code is StoreCode.NOT_FOUND:
        return PodStartResult(code)
    reason = text(reply[4]) if len(reply) > 4 else ""
    return PodStartResult(code, int(text(reply[1]) or 0), PodPhase(text(reply[2])), reason)


class AgentStore(StoreCore):
    """What node agents read and write (admission, starting pods, resync): `ClusterState` is one."""

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
            rows: list[RedisReply] = []  # fields of a script's reply, as redis-py gives them
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
                profile_text = text(profile)
                if profile_text:
                    self._remember_profile(uid, profile_text)
                out.append(
                    AdmissionView(
                        uid,
                        node,
                        PodPhase(text(phase)),
                        text(pod_node),
                        profile_text,
                        float(text(updated_at) or 0.0),
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
                args = [s.node, attempt_arg(s.attempt), now, event, cap, repr(float(s.ends_at))]
                await self.scripts.start_pod(keys=keys, args=args, client=pipe)
            for reply in await pipe.execute():
                out.append(_start_result(list(reply)))
        return out

    async def bound_here(self, nodes: Sequence[str]) -> dict[str, set[str]]:
        """The uids of the pods whose reservation on each of ``nodes`` is marked bound (the pods
        Bound or Running there, as the node's keys have them). One SMEMBERS per node, pipelined."""
        out: dict[str, set[str]] = {}
        for start in range(0, len(nodes), _BATCH):
            chunk = nodes[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for node in chunk:
                pipe.smembers(self.keys.node_bound(node))
            for node, uids in zip(chunk, await pipe.execute(), strict=True):
                out[node] = {text(u) for u in uids}
        return out

    async def not_running_here(self, pods: Sequence[tuple[str, str]]) -> dict[str, PodPhase | None]:
        """Which of these (node, uid) pods, each one an agent saw Running on that node, are not
        Running there any more: their uids, each with its phase now (None: no such pod).
        Read only.

        Cheap for many pods: the Running phase index, which changes in the same script as the
        records, is asked once per 5,000 pods, and only the pods missing from it are read (one
        round trip per 500). A pod in the index is Running where it was: a Running pod never
        changes node (bound is for life). Each answer is as Redis had it when read; a pod that
        moves on right after is the next call's."""
        pods = list(pods)
        index = self.keys.phase_index(str(PodPhase.RUNNING))
        suspects: list[tuple[str, str]] = []
        for start in range(0, len(pods), _MEMBERSHIP_BATCH):
            chunk = pods[start : start + _MEMBERSHIP_BATCH]
            flags = await self.redis.smismember(index, [uid for _, uid in chunk])
            suspects += [pod for pod, member in zip(chunk, flags, strict=True) if not int(member)]
        out: dict[str, PodPhase | None] = {}
        for start in range(0, len(suspects), _BATCH):
            chunk = suspects[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for _, uid in chunk:
                pipe.hmget(self.keys.pod_record(uid), "phase", "node")
            for (node, uid), (phase, pod_node) in zip(chunk, await pipe.execute(), strict=True):
                now = PodPhase(text(phase)) if phase else None
                if now is not PodPhase.RUNNING or text(pod_node) != node:
                    out[uid] = now
        return out
