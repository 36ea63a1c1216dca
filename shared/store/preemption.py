"""Preemption: evicting lower-priority pods from a node and reserving the room they free for
the preemptor, as one atomic step (PREEMPT in `kubus.store.scripts`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubus.api.attempts import Attempt, attempt_arg
from kubus.core.codec import text
from kubus.store._core import RedisReply, StoreCore, _code
from kubus.store.records import EventType, PodEvent, PodPhase, Reservation
from kubus.store.reservations import ReserveResult, on_node
from kubus.store.scripts import StoreCode

PREEMPTED = "Preempted"
"""The reason (kube's) a preempted victim's record and event carry."""


@dataclass(frozen=True, slots=True)
class Eviction:
    """A victim `ClusterState.preempt` evicted: its pod is Deleted now, its room given back."""

    uid: str
    key: str
    """`namespace/name`."""
    profile: str
    phase: PodPhase | None = None
    """The phase it was evicted from (Reserved, Bound or Running)."""
    version: int = 0
    """Its record's version after the eviction."""


@dataclass(frozen=True, slots=True)
class PreemptResult(ReserveResult):
    """What `ClusterState.preempt` did: `reserve`'s answer for the preemptor (CONFLICT reasons
    also name each stale or protected victim), and the victims it evicted."""

    evicted: tuple[Eviction, ...] = ()
    """OK: the victims evicted now (none on an idempotent retry, `already`)."""
    message: str = ""
    """OK: what the victims' records and events say, ``Preempted by <ns/preemptor> on node
    <node>`` (for their announcement, `kubus.bus.announcements.preempted`)."""


class PreemptionStore(StoreCore):
    """Preemption: `ClusterState` is one."""

    async def preempt(
        self,
        node: str,
        reservation: Reservation,
        victims: Sequence[tuple[str, Attempt]],
        *,
        now: float | None = None,
        source: str = "",
    ) -> PreemptResult:
        """Evict ``victims`` from ``node`` and reserve their room for ``reservation``'s pod (the
        preemptor, already moved Pending -> Reserved on its attempt as for `reserve`), in one
        atomic step: nothing is written unless every check passes.

        ``victims`` are ``(uid, attempt)`` pairs, the attempt (`Reservation.attempt`) of the
        reservation the cycle's view holds for each. CONFLICT, nothing changed, when a victim no
        longer holds that reservation on this node (its pod no longer Reserved, Bound or Running
        here), when a victim's priority is not lower than ``reservation.priority``, or when the
        preemptor would not fit even with the victims gone (RESERVE's reasons; the victims'
        reservations do not count in its hostname anti-affinity check). NODE_GONE or FENCED as
        `reserve`. OK: each victim's room is given back and its pod is Deleted (reason
        ``Preempted``, message ``Preempted by <ns/preemptor> on node <node>``, a Warning pod
        event from ``source`` at ``now``, default the store's clock), and the preemptor holds
        its reservation. Announce the evictions after (`kubus.bus.announcements.preempted`).

        Idempotent: again with the same preemptor attempt after success answers OK with
        ``already`` set and changes nothing. Raises ValueError when ``reservation.node`` names
        another node.
        """
        return (await self.preempt_many([(node, reservation, victims)], now=now, source=source))[0]

    async def preempt_many(
        self,
        preemptions: Sequence[tuple[str, Reservation, Sequence[tuple[str, Attempt]]]],
        *,
        now: float | None = None,
        source: str = "",
    ) -> list[PreemptResult]:
        """`preempt` for each ``(node, reservation, victims)``, in order, in one pipelined round
        trip: each is atomic on its own and sees the ones before it, as one `preempt` after
        another would. Raises ValueError as `preempt`."""
        if not preemptions:
            return []
        at = self.clock() if now is None else now
        pipe = self.redis.pipeline(transaction=False)
        messages = []
        for node, reservation, victims in preemptions:
            reservation = on_node(reservation, node)
            message = preemption_message(reservation.pod_key, node)
            messages.append(message)
            event = PodEvent(at, EventType.WARNING, PREEMPTED, message, source)
            keys = [*self.keys.node_keys(node), *self.keys.phase_indexes()]
            args: list[str | bytes | int | float] = [
                reservation.pod_uid,
                reservation.encode(),
                repr(float(at)),
                PREEMPTED,
                message,
                event.encode(),
                self.event_cap,
            ]
            for uid, attempt in victims:
                keys += [self.keys.pod_record(uid), self.keys.pod_events(uid)]
                args += [uid, attempt_arg(attempt)]
            await self.scripts.preempt(keys=keys, args=args, client=pipe)
        return [_preempt_result(reply, message) for reply, message in zip(await pipe.execute(), messages, strict=True)]


def preemption_message(preemptor: str, node: str) -> str:
    """What a victim's deletion says (its event, its record's message, its ``pod.deleted``):
    ``Preempted by <namespace/name> on node <node>``, kube's words."""
    return f"Preempted by {preemptor} on node {node}"


def preemptor_of(message: str) -> tuple[str, str] | None:
    """(preemptor ``namespace/name``, node) of a `preemption_message`, or None for another."""
    head, sep, node = message.removeprefix("Preempted by ").rpartition(" on node ")
    if not sep or not message.startswith("Preempted by ") or "/" not in head or not node:
        return None
    return head, node


def _preempt_result(reply: RedisReply, message: str) -> PreemptResult:
    reply = list(reply) if isinstance(reply, list | tuple) else [reply]
    code = _code(reply[0])
    details = [text(r) for r in reply[1:]]
    if code is not StoreCode.OK:
        return PreemptResult(code, tuple(details))
    if details == ["already reserved"]:
        return PreemptResult(code, already=True, message=message)
    evicted = []
    for i in range(1, len(details), 5):
        uid, key, profile, phase, version = details[i : i + 5]
        evicted.append(Eviction(uid, key, profile, PodPhase(phase), int(version)))
    return PreemptResult(code, evicted=tuple(evicted), message=message)
