"""Recovery: what repairs the state a crash between two protocol steps left behind."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kubus.api.attempts import Attempt
from kubus.api.errors import ManifestError
from kubus.core.codec import DecodeError, text
from kubus.kernels.nodeinfo import PodInfo
from kubus.store._core import _BATCH
from kubus.store.keys import PHASES
from kubus.store.nodes import NodeStore
from kubus.store.permits import PermitStore
from kubus.store.pods import Binding, PodStore
from kubus.store.records import (
    EventType,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
)
from kubus.store.reservations import ReservationStore
from kubus.store.scripts import StoreCode


class ExpiryKind(Enum):
    """What the janitor did with a Reserved pod."""

    GIVEN_BACK = "given back"
    """Back to Pending (its room, if any, given back): queue it again."""
    BOUND = "bound"
    """Its bind finished: announce it (the assignment and pod.bound)."""


@dataclass(frozen=True, slots=True)
class Expiry:
    """One Reserved pod the janitor repaired (`ClusterState.expire_reserved`)."""

    pod: PodRecord
    """The record as it was read, before the repair (Reserved, with its manifest and node)."""
    kind: ExpiryKind
    attempt: Attempt
    reason: str
    message: str
    released: bool = False
    """GIVEN_BACK: room was given back now (announce pod.unreserved)."""
    devices: tuple[int, ...] = ()
    """BOUND: the GPU devices it was bound with."""


@dataclass(frozen=True, slots=True)
class RoomLost:
    """A Bound or Running pod that held no room on its node and could not get it back
    (`ClusterState.repair_placements`): the node has no room for it any more, or is gone."""

    pod: PodRecord
    reasons: tuple[str, ...]
    """Why not (RESERVE's refusal: "Insufficient cpu", "node not found", ...)."""


class Recovery(PodStore, ReservationStore, NodeStore, PermitStore):
    """Repairs: `ClusterState` is one."""

    async def reconcile(self, *, grace_s: float = 30.0) -> list[str]:
        """Give back the room a crash between two steps of the protocol left held; one line per
        fix. A reservation whose pod is missing, not on a node, or on another node gives its
        room back: at once when the pod finished or was deleted, after ``grace_s`` seconds
        otherwise (the attempt may still be between two steps). A reserved one goes by
        compare-and-delete on its attempt, so a newer reservation is never touched. Bound or
        running pods without a reservation are reported by check_invariants, not changed here:
        their room cannot be reclaimed safely. (Reserved pods: `expire_reserved`.)"""
        now = self.clock()
        fixes: list[str] = []
        for name in await self.node_names():
            reservations = await self.reservations(name)
            pods = await self.get_pods(r.pod_uid for r in reservations)
            for r, pod in zip(reservations, pods, strict=True):
                if pod is not None and pod.phase.on_node and pod.node == name:
                    continue
                finished = pod is not None and pod.phase.terminal
                if not finished and now - r.reserved_at < grace_s:
                    continue
                why = "no pod" if pod is None else f"pod {pod.phase} on {pod.node or 'no node'}"
                if r.state is ReservationState.BOUND or finished:
                    code = await self.release(name, r.pod_uid)
                else:
                    code = await self.unreserve(name, r.pod_uid, r.attempt)
                if code is StoreCode.OK:
                    fixes.append(f"node {name}: gave back the reservation of {r.pod_key} ({r.pod_uid}): {why}")
        return fixes

    async def repair_placements(self) -> tuple[list[str], list[RoomLost]]:
        """Bound and Running pods whose room on their node is not held as bind left it,
        repaired; returns one line per fix, and the pods whose room could not be held again.

        - A pod holding no reservation on its node (a release that should not have happened,
          say a forged deletion acted on) gets it back, marked bound, when the node has room for
          it next to what is reserved there now (RESTORE_ROOM, atomic with a check that the pod
          is still there); else it is returned, for the caller to fail it (it cannot stay there
          without overcommitting the node).
        - A reservation of a Bound or Running pod on its node not marked bound is marked.
        - A bound mark without a reservation is dropped.

        Reads the Bound and Running indexes and every node's reservation uids and bound marks
        (not the reservations themselves), then the records of the few pods found wanting. Each
        repair re-checks the pod in its script, so one that moved on meanwhile is left alone."""
        placed = await self.pod_uids_in_phase(PodPhase.BOUND) | await self.pod_uids_in_phase(PodPhase.RUNNING)
        names = await self.node_names()
        held: dict[str, str] = {}
        unmarked: list[tuple[str, str]] = []
        stray: list[tuple[str, str]] = []
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for name in chunk:
                pipe.hkeys(self.keys.node_reservations(name))
                pipe.smembers(self.keys.node_bound(name))
            replies = await pipe.execute()
            for i, name in enumerate(chunk):
                reserved = {text(u) for u in replies[2 * i]}
                marked = {text(u) for u in replies[2 * i + 1]}
                for uid in reserved:
                    held.setdefault(uid, name)
                unmarked += [(name, uid) for uid in sorted((reserved & placed) - marked)]
                stray += [(name, uid) for uid in sorted(marked - reserved)]
        fixes: list[str] = []
        for name, uid in stray:
            if await self.release(name, uid) is StoreCode.NOOP:  # no reservation: drops the mark alone
                fixes.append(f"node {name}: dropped the bound mark of pod {uid}, which holds no reservation")
        records = {r.uid: r for r in await self.get_pods(uid for _, uid in unmarked) if r is not None}
        for name, uid in unmarked:
            record = records.get(uid)
            if record is None or record.node != name or record.phase not in (PodPhase.BOUND, PodPhase.RUNNING):
                continue  # another node's, or moved on: reconcile's
            if await self.mark_bound(name, uid) is StoreCode.OK:
                fixes.append(f"node {name}: marked bound the reservation of {record.key} ({uid}), {record.phase}")
        lost: list[RoomLost] = []
        for record in await self.get_pods(sorted(placed - held.keys())):
            if record is None or record.phase not in (PodPhase.BOUND, PodPhase.RUNNING) or not record.node:
                continue
            code, reasons = await self.restore_room(record)
            if code is StoreCode.OK:
                fixes.append(f"node {record.node}: held again the room of {record.key} ({record.uid}), {record.phase}")
            elif code in (StoreCode.CONFLICT, StoreCode.NODE_GONE):
                lost.append(RoomLost(record, reasons))
        return fixes, lost

    async def observe_placed(
        self, record: PodRecord, reservation: Reservation, *, running: bool, moved: bool = False
    ) -> tuple[StoreCode, PodPhase | None, str]:
        """Make the store say what the apiserver says (cluster mode): ``record``'s pod is on
        ``reservation.node``, Bound (Running when ``running``), holding that room, marked bound
        (OBSERVE_PLACED). The record is stored when there is none; the room is taken whatever
        is left when the pod holds none there (the kubelet admitted it, not kubus). Returns the
        code (OK, ALREADY; CONFLICT: on another node, which the caller gives back first; GONE:
        finished or deleted, left alone; NODE_GONE: no such node yet), the pod's phase after,
        and, for CONFLICT, the other node. ``moved``: the caller gave the other node's room back
        (after a CONFLICT): the pod is recorded on this node all the same."""
        fields = [x for pair in record.to_fields().items() for x in pair]
        reply = await self._run(
            self.scripts.observe_placed,
            [*self._pod_keys(record.uid, record.profile), *self.keys.node_keys(reservation.node)],
            [record.uid, record.key, self.clock(), reservation.encode(),
             str(PodPhase.RUNNING if running else PodPhase.BOUND), "1" if moved else "", *fields],
        )  # fmt: skip
        code = text(reply[0])
        if code == "OK":
            return StoreCode.OK, PodPhase(text(reply[2])), ""
        if code == "ALREADY":
            return StoreCode.ALREADY, PodPhase(text(reply[1])), ""
        if code == "MOVED":
            return StoreCode.CONFLICT, PodPhase(text(reply[1])), text(reply[2])
        if code == "GONE":
            return StoreCode.GONE, PodPhase(text(reply[1])), ""
        return StoreCode.NODE_GONE, None, ""

    async def restore_room(self, record: PodRecord) -> tuple[StoreCode, tuple[str, ...]]:
        """Hold again, marked bound, the room of ``record`` (Bound or Running) on its node:
        RESTORE_ROOM's code (OK; ALREADY; NOOP: it moved on; CONFLICT: no room; NODE_GONE) and
        its reasons. A manifest that does not parse is CONFLICT with the parse error."""
        try:
            info = PodInfo.of(record.pod(), record.gpu_devices)
            reservation = Reservation.of(info, record.node, attempt=record.version, now=self.clock())
        except (ManifestError, DecodeError, ValueError) as exc:
            return StoreCode.CONFLICT, (f"its manifest cannot be read: {exc}",)
        reply = await self._run(
            self.scripts.restore_room,
            [self.keys.pod_record(record.uid), *self.keys.node_keys(record.node)],
            [record.uid, reservation.encode()],
        )
        return StoreCode(text(reply[0])), tuple(text(r) for r in reply[1:])

    async def expire_reserved(self, *, timeout_s: float, lost_after_s: float, source: str = "janitor") -> list[Expiry]:
        """The janitor: Reserved pods a crashed cycle or binder left behind, repaired; one
        `Expiry` per pod repaired, for the caller to announce and requeue.

        - Reserved ``lost_after_s`` seconds without a reservation on its node (a binder backed
          out, then died): back to Pending (`give_back`), reason ReservationLost.
        - Reserved ``timeout_s`` seconds with a reservation no binder marked bound (its
          BindRequest was never sent): room given back and back to Pending, ReservationTimeout.
        - Reserved with a bound reservation (the binder died between mark_bound and the bind):
          the bind is finished (`bind_many`: bind_pod and the Scheduled event; ``source`` names
          who did it), kind BOUND: the caller announces it as the binder would have.
        Every step is conditional on the attempt, so a pod that moved on meanwhile is left alone.
        """
        out: list[Expiry] = []
        for pod in await self._reserved_since(self.clock() - min(timeout_s, lost_after_s)):
            age = self.clock() - pod.updated_at
            held = await self.reservation(pod.node, pod.uid)
            if held is not None and held.state is ReservationState.BOUND:
                out += await self._finish_bind(pod, held, source)
                continue
            if held is None:
                if age < lost_after_s:
                    continue
                reason, message = "ReservationLost", f"its reservation on node {pod.node} is gone"
                attempt = pod.version
            else:
                if age < timeout_s:
                    continue
                wait = (await self.permit_states([pod.uid]))[pod.uid]
                if wait is not None and wait.attempt == held.attempt and self.clock() < wait.deadline:
                    continue  # waiting on Permit: its own deadline decides, not the janitor's
                reason, message = "ReservationTimeout", f"not bound on node {pod.node} within {timeout_s:g}s"
                attempt = held.attempt
            result = await self.give_back(pod.uid, pod.node, attempt, reason=reason, message=message)
            if result.code is StoreCode.BOUND:  # a binder marked it just now: finish it next time
                continue
            if result.ok:
                await self.clear_permit(pod.uid, pod.profile, attempt)
                out.append(Expiry(pod, ExpiryKind.GIVEN_BACK, attempt, reason, message, result.released))
        return out

    async def _finish_bind(self, pod: PodRecord, reservation: Reservation, source: str) -> list[Expiry]:
        attempt = reservation.attempt
        message = f"Successfully assigned {pod.key} to {pod.node}"
        binding = Binding(
            pod.uid,
            pod.node,
            attempt,
            reservation.gpu_devices,
            pod.profile,
            PodEvent(self.clock(), EventType.NORMAL, "Scheduled", message, source),
        )
        [result] = await self.bind_many([binding])
        if not result.bound:
            return []
        return [Expiry(pod, ExpiryKind.BOUND, attempt, "Scheduled", message, devices=tuple(reservation.gpu_devices))]

    async def _reserved_since(self, cutoff: float) -> list[PodRecord]:
        """The Reserved pods untouched since ``cutoff`` (seconds since the epoch), oldest first.
        Reads only the update times of the others (their manifests stay in Redis)."""
        uids = sorted(await self.pod_uids_in_phase(PodPhase.RESERVED))
        old: list[str] = []
        for start in range(0, len(uids), _BATCH):
            chunk = uids[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for uid in chunk:
                pipe.hget(self.keys.pod_record(uid), "updated_at")
            for uid, updated in zip(chunk, await pipe.execute(), strict=True):
                if updated is not None and float(updated) <= cutoff:
                    old.append(uid)
        records = [r for r in await self.get_pods(old) if r is not None and r.phase is PodPhase.RESERVED]
        return sorted((r for r in records if r.updated_at <= cutoff), key=lambda r: r.updated_at)

    async def repair_indexes(self) -> list[str]:
        """Rebuild the indexes from the records (after drift, e.g. keys edited by hand).
        Returns what it fixed, one line each; empty when the indexes were right."""
        k = self.keys
        fixes: list[str] = []
        node_names = {k.node_of_info_key(text(key)) async for key in self.redis.scan_iter(match=k.node_info_pattern())}
        indexed = {text(n) for n in await self.redis.smembers(k.nodes_index())}
        for name in sorted(node_names - indexed):
            await self.redis.sadd(k.nodes_index(), name)
            fixes.append(f"nodes index: added {name}")
        for name in sorted(indexed - node_names):
            await self.redis.srem(k.nodes_index(), name)
            fixes.append(f"nodes index: removed {name}")

        pods = await _all_pods(self)
        want_phase: dict[str, set[str]] = {p: set() for p in PHASES}
        want_pending: dict[str, set[str]] = {}
        for pod in pods:
            want_phase[str(pod.phase)].add(pod.uid)
            if pod.phase is PodPhase.PENDING:
                want_pending.setdefault(pod.profile, set()).add(pod.uid)
        for phase in PHASES:
            fixes += await _sync_set(self, k.phase_index(phase), want_phase[phase], f"phase index {phase}")
        pending_keys = {text(key) async for key in self.redis.scan_iter(match=k.pending_index_pattern())}
        for profile in want_pending:
            pending_keys.add(k.pending_index(profile))
        for key in sorted(pending_keys):
            profile = k.profile_of_pending_index(key)
            fixes += await _sync_set(self, key, want_pending.get(profile, set()), f"pending index {profile}")

        by_key: dict[str, PodRecord] = {}
        for pod in pods:
            best = by_key.get(pod.key)
            if best is None or (pod.created_at, pod.uid) > (best.created_at, best.uid):
                by_key[pod.key] = pod
        current = {text(a): text(b) for a, b in (await self.redis.hgetall(k.pod_keys_index())).items()}
        uids = {p.uid: p for p in pods}
        for key, pod in sorted(by_key.items()):
            have = uids.get(current.get(key, ""))
            if have is None or have.key != key:
                await self.redis.hset(k.pod_keys_index(), key, pod.uid)
                fixes.append(f"pod-keys index: {key} -> {pod.uid}")
        for key in sorted(set(current) - set(by_key)):
            await self.redis.hdel(k.pod_keys_index(), key)
            fixes.append(f"pod-keys index: removed {key}")
        return fixes


async def _sync_set(store: Recovery, key: str, want: set[str], label: str) -> list[str]:
    have = {text(u) for u in await store.redis.smembers(key)}
    fixes = []
    if want - have:
        await store.redis.sadd(key, *sorted(want - have))
        fixes += [f"{label}: added {u}" for u in sorted(want - have)]
    if have - want:
        await store.redis.srem(key, *sorted(have - want))
        fixes += [f"{label}: removed {u}" for u in sorted(have - want)]
    return fixes


async def _all_pods(store: Recovery) -> list[PodRecord]:
    """Every pod record, found by SCAN (not by the indexes)."""
    pattern = store.keys.pod_record_pattern()
    uids = [store.keys.pod_of_record_key(text(k)) async for k in store.redis.scan_iter(match=pattern, count=1000)]
    return [p for p in await store.get_pods(sorted(uids)) if p is not None]
