"""Pods waiting on Permit: the waiting state in Redis, so it survives the crash of any service
and every replica sees it (the cycle that made the pod wait, the binder that waits for it, a
standby, the janitor).

A pod waits for one attempt (its reservation stays held meanwhile): ``wait_on_permit`` records
the plugins it waits on and its deadline (now + the shortest of their timeouts, as the first
plugin timer to fire rejects it in kube). Any plugin lets it go with ``allow_permit`` or fails it
with ``reject_permit``; every call names the attempt, so a late call about an older attempt
changes nothing. The binder's WaitOnPermit reads the state (`permit_states`) until no plugin
holds the pod (allowed), one rejected it, or the deadline passed; whoever ends the wait calls
``clear_permit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from redis.typing import EncodableT

from kubus.api.attempts import Attempt
from kubus.core.codec import text
from kubus.framework.waiting import Decision
from kubus.store._core import _BATCH, StoreCore

__all__ = ["PermitState", "PermitStore"]


@dataclass(frozen=True, slots=True)
class PermitState:
    """One pod's wait on Permit, as Redis has it."""

    uid: str
    key: str
    """namespace/name"""
    attempt: Attempt
    node: str
    profile: str
    deadline: float
    """Seconds since the epoch: the wait is rejected (timeout) after this."""
    pending: frozenset[str]
    """The Permit plugins that have not allowed the pod yet."""
    rejected: str = ""
    """``"<plugin>: <message>"`` once a plugin rejected the pod, else empty."""
    group: str = ""
    """The pod group (namespace/name) the pod belongs to, else empty."""

    @property
    def allowed(self) -> bool:
        """No plugin holds the pod and none rejected it: it may be bound."""
        return not self.pending and not self.rejected

    def timed_out(self, now: float) -> bool:
        return not self.allowed and not self.rejected and now >= self.deadline


def _state(uid: str, raw: Mapping[bytes | str, bytes | str]) -> PermitState | None:
    fields = {text(k): text(v) for k, v in raw.items()}
    if "attempt" not in fields:
        return None
    return PermitState(
        uid=uid,
        key=fields.get("key", ""),
        attempt=int(fields["attempt"] or 0),
        node=fields.get("node", ""),
        profile=fields.get("profile", ""),
        deadline=float(fields.get("deadline") or 0.0),
        pending=frozenset(k[2:] for k in fields if k.startswith("p:")),
        rejected=fields.get("rejected", ""),
        group=fields.get("group", ""),
    )


class PermitStore(StoreCore):
    """Waiting on Permit: `ClusterState` is one."""

    async def wait_on_permit(
        self,
        uid: str,
        *,
        key: str,
        profile: str,
        attempt: Attempt,
        node: str,
        waiting_on: Mapping[str, float],
        group: str = "",
    ) -> PermitState:
        """Record that attempt ``attempt`` of the pod waits on these plugins (name -> timeout in
        seconds), replacing any older wait of the pod; listed among the profile's waiting pods.
        Atomic (MULTI). Raises ValueError without a plugin to wait on."""
        if not waiting_on:
            raise ValueError(f"pod {uid}: a wait on Permit needs a plugin to wait on")
        deadline = self.clock() + min(waiting_on.values())
        permit = self.keys.pod_permit(uid)
        mapping: dict[EncodableT, EncodableT] = {  # what redis-py's hset takes
            "key": key,
            "attempt": str(attempt),
            "node": node,
            "profile": profile,
            "deadline": repr(deadline),
            "group": group,
        }
        mapping.update({f"p:{name}": repr(float(timeout)) for name, timeout in waiting_on.items()})
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(permit)
        pipe.hset(permit, mapping=mapping)
        pipe.sadd(self.keys.waiting_index(profile), uid)
        await pipe.execute()
        return PermitState(uid, key, attempt, node, profile, deadline, frozenset(waiting_on), group=group)

    async def allow_permit(self, uid: str, attempt: Attempt, plugin: str) -> bool:
        """``plugin`` lets attempt ``attempt`` of the pod go. False when the pod does not wait
        (any more) at that attempt. Idempotent."""
        reply = await self.scripts.permit_allow(keys=[self.keys.pod_permit(uid)], args=[str(attempt), plugin])
        return bool(int(reply))

    async def reject_permit(self, uid: str, attempt: Attempt, plugin: str, message: str) -> bool:
        """``plugin`` fails the pod's wait (the first rejection is kept). False when the pod does
        not wait (any more) at that attempt. Idempotent."""
        reply = await self.scripts.permit_reject(keys=[self.keys.pod_permit(uid)], args=[str(attempt), plugin, message])
        return bool(int(reply))

    async def apply_permit_decisions(self, decisions: Iterable[Decision]) -> None:
        """What plugins decided about waiting pods (`kubus.framework.waiting.Decision`: kind
        allow or reject, uid, attempt, plugin, message), applied in order."""
        for d in decisions:
            if d.kind.value == "allow":
                await self.allow_permit(d.uid, d.attempt, d.plugin)
            else:
                await self.reject_permit(d.uid, d.attempt, d.plugin, d.message)

    async def permit_states(self, uids: Iterable[str]) -> dict[str, PermitState | None]:
        """The wait of each pod (None where it does not wait), pipelined."""
        uids = list(uids)
        out: dict[str, PermitState | None] = {}
        for start in range(0, len(uids), _BATCH):
            chunk = uids[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for uid in chunk:
                pipe.hgetall(self.keys.pod_permit(uid))
            for uid, raw in zip(chunk, await pipe.execute(), strict=True):
                out[uid] = _state(uid, raw) if raw else None
        return out

    async def waiting_pods(self, profile: str) -> list[PermitState]:
        """The pods of ``profile`` waiting on Permit, by uid (entries whose wait is gone are
        dropped from the index)."""
        index = self.keys.waiting_index(profile)
        uids = sorted(text(u) for u in await self.redis.smembers(index))
        states = await self.permit_states(uids)
        gone = [uid for uid, state in states.items() if state is None]
        if gone:
            await self.redis.srem(index, *gone)
        return [state for state in states.values() if state is not None]

    async def clear_permit(self, uid: str, profile: str, attempt: Attempt | None = None) -> None:
        """End the pod's wait (allowed and bound, rejected, timed out, given back); with
        ``attempt``, only a wait of that attempt. Idempotent."""
        if attempt is not None:
            current = (await self.permit_states([uid]))[uid]
            if current is None or current.attempt != attempt:
                return
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.keys.pod_permit(uid))
        pipe.srem(self.keys.waiting_index(profile), uid)
        await pipe.execute()
