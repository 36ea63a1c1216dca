"""Recovery: what repairs the state a crash between two protocol steps left behind."""

from __future__ import annotations

from kubus.store.keys import PHASES
from kubus.store.nodes import NodeStore
from kubus.store.pods import PodStore
from kubus.store.records import (
    PodPhase,
    PodRecord,
    ReservationState,
    _text,
)
from kubus.store.reservations import ReservationStore
from kubus.store.scripts import StoreCode


class Recovery(PodStore, ReservationStore, NodeStore):
    """Repairs: `ClusterState` is one."""

    async def reconcile(self, *, grace_s: float = 30.0, reserved_timeout_s: float | None = None) -> list[str]:
        """Repair what a crash between two steps of the protocol leaves behind; one line per fix.

        - A reservation whose pod is missing, not on a node, or on another node gives its room
          back: at once when the pod finished or was deleted, after `grace_s` seconds otherwise
          (the attempt may still be between two steps). A reserved one goes by
          compare-and-delete on its attempt, so a newer reservation is never touched.
        - A pod Reserved on a node where it holds no reservation, untouched for `grace_s`,
          goes back to Pending (compare-and-set on its version), reason ReservationLost.
        - With `reserved_timeout_s`: a pod Reserved that long whose reservation no binder has
          marked bound (its BindRequest was never sent) gives the room back (on its attempt)
          and goes back to Pending, reason ReservationTimeout.
        Bound or running pods without a reservation are reported by check_invariants, not
        changed here: their room cannot be reclaimed safely.
        """
        now = self.clock()
        fixes: list[str] = []
        held: set[tuple[str, str]] = set()
        for name in await self.node_names():
            reservations = await self.reservations(name)
            pods = await self.get_pods(r.pod_uid for r in reservations)
            for r, pod in zip(reservations, pods, strict=True):
                held.add((name, r.pod_uid))
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
                    held.discard((name, r.pod_uid))
                    fixes.append(f"node {name}: gave back the reservation of {r.pod_key} ({r.pod_uid}): {why}")
        for pod in await self.pods_in_phase(PodPhase.RESERVED):
            age = now - pod.updated_at
            if (pod.node, pod.uid) in held:
                if reserved_timeout_s is None or age < reserved_timeout_s:
                    continue
                r = await self.reservation(pod.node, pod.uid)
                if r is not None:
                    if r.state is ReservationState.BOUND or await self.unreserve(pod.node, pod.uid, r.attempt) not in (
                        StoreCode.OK,
                        StoreCode.NOOP,
                    ):
                        continue  # a binder has it now
                    fixes.append(f"node {pod.node}: gave back the reservation of {pod.key} ({pod.uid}): never bound")
                reason, message = "ReservationTimeout", f"not bound on node {pod.node} within {reserved_timeout_s}s"
            else:
                if age < grace_s or await self.reservation(pod.node, pod.uid) is not None:
                    continue  # too young, or reserved since we listed the node
                reason, message = "ReservationLost", f"its reservation on node {pod.node} is gone"
            w = await self.transition(
                pod.uid, PodPhase.PENDING, expected_version=pod.version, reason=reason, message=message
            )
            if w.ok:
                fixes.append(f"pod {pod.key} ({pod.uid}): Reserved on {pod.node}, {reason}, back to Pending")
        return fixes

    async def repair_indexes(self) -> list[str]:
        """Rebuild the indexes from the records (after drift, e.g. keys edited by hand).
        Returns what it fixed, one line each; empty when the indexes were right."""
        k = self.keys
        fixes: list[str] = []
        node_names = {k.node_of_info_key(_text(key)) async for key in self.redis.scan_iter(match=k.node_info_pattern())}
        indexed = {_text(n) for n in await self.redis.smembers(k.nodes_index())}
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
        pending_keys = {_text(key) async for key in self.redis.scan_iter(match=k.pending_index_pattern())}
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
        current = {_text(a): _text(b) for a, b in (await self.redis.hgetall(k.pod_keys_index())).items()}
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


async def _sync_set(state: Recovery, key: str, want: set[str], label: str) -> list[str]:
    have = {_text(u) for u in await state.redis.smembers(key)}
    fixes = []
    if want - have:
        await state.redis.sadd(key, *sorted(want - have))
        fixes += [f"{label}: added {u}" for u in sorted(want - have)]
    if have - want:
        await state.redis.srem(key, *sorted(have - want))
        fixes += [f"{label}: removed {u}" for u in sorted(have - want)]
    return fixes


async def _all_pods(state: Recovery) -> list[PodRecord]:
    """Every pod record, found by SCAN (not by the indexes)."""
    pattern = state.keys.pod_record_pattern()
    uids = [state.keys.pod_of_record_key(_text(k)) async for k in state.redis.scan_iter(match=pattern, count=1000)]
    return [p for p in await state.get_pods(sorted(uids)) if p is not None]
