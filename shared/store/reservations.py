"""Reservations: a pod's room on a node, held from Reserve until the pod finishes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kubus.api.attempts import NO_ATTEMPT, Attempt, attempt_arg
from kubus.core.codec import text
from kubus.store._core import _RESERVE_CHUNK, StoreCore, _code
from kubus.store.nodes import _reservations
from kubus.store.pods import PodWrite
from kubus.store.records import (
    PodPhase,
    Reservation,
)
from kubus.store.scripts import StoreCode


@dataclass(frozen=True, slots=True)
class ReserveResult:
    code: StoreCode
    """OK, CONFLICT, NODE_GONE or FENCED."""
    reasons: tuple[str, ...] = ()
    """Why not (CONFLICT: every shortfall, "Insufficient cpu", "gpu 3 busy", ...)."""
    already: bool = False
    """OK because the pod already held a reservation on this node (an idempotent retry)."""
    gpu_devices: tuple[int, ...] | None = None
    """OK: the devices held when they may differ from the reservation's (RESERVE picked again,
    `Reservation.gpu_pick`; an idempotent retry); None when they are the reservation's."""

    @property
    def ok(self) -> bool:
        return self.code is StoreCode.OK

    @property
    def reason(self) -> str:
        return ", ".join(self.reasons)


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What `ClusterState.reserve_attempts` did with one Pending pod."""

    write: PodWrite
    """The pod: OK (Pending -> Reserved; the attempt is ``write.version``), NOOP (its room was
    refused: still Pending, unchanged), or, with nothing tried, CONFLICT (not Pending, or
    another profile's), GONE or NOT_FOUND."""
    room: ReserveResult | None
    """The room's answer (OK, or why not), when the pod was Pending; None otherwise."""

    @property
    def ok(self) -> bool:
        return self.write.ok


def on_node(reservation: Reservation, node: str) -> Reservation:
    """``reservation`` for ``node`` (one naming no node gets it). Raises ValueError when it
    names another node."""
    if reservation.node == node:
        return reservation
    if reservation.node:
        raise ValueError(f"reservation of {reservation.pod_key} is for node {reservation.node!r}, not {node!r}")
    return replace(reservation, node=node)


def _reserve_result(code: StoreCode, details: tuple[str, ...]) -> ReserveResult:
    """RESERVE's reply: OK 'reserved' ['devices' d...] | OK 'already reserved' 'devices' d... |
    CODE reasons..."""
    if code is not StoreCode.OK:
        return ReserveResult(code, details)
    devices = tuple(int(d) for d in details[2:]) if details[1:2] == ("devices",) else None
    return ReserveResult(code, already=details[:1] == ("already reserved",), gpu_devices=devices)


def _attempt_result(reply: list[str]) -> AttemptResult:
    """RESERVE_PODS's reply for one pod: its {code, version, phase, profile}, then RESERVE's when tried."""
    code = _code(reply[0])
    if code is StoreCode.NOT_FOUND:
        return AttemptResult(PodWrite(code), None)
    if code is StoreCode.PROFILE:  # not this profile's pod: not ours to schedule
        return AttemptResult(PodWrite(StoreCode.CONFLICT), None)
    write = PodWrite(code, int(reply[1] or 0), PodPhase(reply[2]))
    if len(reply) <= 4:
        return AttemptResult(write, None)
    return AttemptResult(write, _reserve_result(_code(reply[4]), tuple(reply[5:])))


class ReservationStore(StoreCore):
    """Reservations: `ClusterState` is one."""

    async def reservations(self, name: str) -> list[Reservation]:
        """The reservations on a node (with their state), sorted by pod key."""
        pipe = self._pipeline()
        pipe.hvals(self.keys.node_reservations(name))
        pipe.smembers(self.keys.node_bound(name))
        values, bound = await pipe.execute()
        return _reservations(values, bound)

    async def reservation(self, node: str, uid: str) -> Reservation | None:
        """The pod's reservation on the node, or None."""
        pipe = self._pipeline()
        pipe.hget(self.keys.node_reservations(node), uid)
        pipe.sismember(self.keys.node_bound(node), uid)
        value, bound = await pipe.execute()
        return None if value is None else Reservation.decode(value, bound=bool(bound))

    async def reserve(self, node: str, reservation: Reservation) -> ReserveResult:
        """Reserve room for a pod on a node, atomically, or say why not (see RESERVE in
        kubus.store.scripts). Idempotent: a pod that holds a reservation here gets OK again.
        Raises ValueError when `reservation.node` names another node."""
        reservation = on_node(reservation, node)
        reply = await self._run(
            self.scripts.reserve, self.keys.node_keys(node), [reservation.pod_uid, reservation.encode()]
        )
        return _reserve_result(_code(reply[0]), tuple(text(r) for r in reply[1:]))

    async def reserve_attempts(self, profile: str, reservations: Sequence[Reservation]) -> list[AttemptResult]:
        """A cycle's attempts for Pending pods of ``profile``, each on its `Reservation.node`,
        in one round trip; results in order. Each is one atomic step (RESERVE_PODS in
        kubus.store.scripts, `_RESERVE_CHUNK` pods a call): the room reserved as `reserve` does,
        then the pod Pending -> Reserved with its node and the devices held, its attempt being
        the version it gets (the reservations carry no `attempt`: the script writes it in). A
        refused room leaves the pod Pending as it was: nothing to give back. Raises ValueError
        for a reservation without a node or with an attempt."""
        for r in reservations:
            if not r.node or r.attempt:
                raise ValueError(f"reservation of {r.pod_uid}: needs a node and no attempt (RESERVE_PODS gives it)")
        if not reservations:
            return []
        now = repr(float(self.clock()))
        shared = [*self.keys.phase_indexes(), self.keys.pending_index(profile)]
        pipe = self.redis.pipeline(transaction=False)  # the chunks in one round trip
        for start in range(0, len(reservations), _RESERVE_CHUNK):
            keys = list(shared)
            args: list[str | bytes] = [profile, now]
            for r in reservations[start : start + _RESERVE_CHUNK]:
                keys += [self.keys.pod_record(r.pod_uid), *self.keys.node_keys(r.node)]
                args += [r.pod_uid, r.encode()]
            await self.scripts.reserve_pods(keys=keys, args=args, client=pipe)
        return [_attempt_result([text(x) for x in reply]) for chunk in await pipe.execute() for reply in chunk]

    async def unreserve(self, node: str, uid: str, attempt: Attempt = NO_ATTEMPT) -> StoreCode:
        """Give back a reserved (not bound) reservation, only if `attempt` made it (when given).
        OK, NOOP (none), BOUND (refused: bound) or CONFLICT (refused: another attempt's)."""
        reply = await self._run(self.scripts.unreserve, self.keys.node_keys(node), [uid, attempt_arg(attempt)])
        return _code(reply[0])

    async def mark_bound(self, node: str, uid: str, attempt: Attempt = NO_ATTEMPT) -> StoreCode:
        """Mark the reservation bound: OK, ALREADY, NOT_FOUND (the reservation is gone) or
        CONFLICT (it is another attempt's, when `attempt` is given)."""
        reply = await self._run(self.scripts.mark_bound, self.keys.node_keys(node), [uid, attempt_arg(attempt)])
        return _code(reply[0])

    async def release(self, node: str, uid: str, attempt: Attempt = NO_ATTEMPT) -> StoreCode:
        """Give back the pod's reservation, bound or not: the pod finished or was deleted, or
        (with its `attempt`) a binder backs out after mark_bound. OK, NOOP or CONFLICT (the
        reservation is another attempt's)."""
        reply = await self._run(self.scripts.release, self.keys.node_keys(node), [uid, attempt_arg(attempt)])
        return _code(reply[0])
