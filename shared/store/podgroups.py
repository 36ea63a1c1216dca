"""PodGroups in Redis (gang scheduling, scheduler-plugins' Coscheduling): the groups as
`kubus apply` stored them, and the uids of each group's member pods, as the queue indexes them
when it stores the pods.

What a gang needs at Permit, `group_counts`, is read from the members' pod records (their phase
is the truth), so a member index that still names a finished or deleted pod costs nothing but a
read.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubus.api.podgroups import PodGroup
from kubus.core import codec
from kubus.core.codec import text
from kubus.store._core import _BATCH, StoreCore
from kubus.store.records import PodPhase

__all__ = ["PodGroupStore", "group_from_json", "group_to_json"]

_COUNTED = frozenset({PodPhase.PENDING, PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING})
"""Phases of members that still count toward minMember."""

_ASSIGNED = frozenset({PodPhase.BOUND, PodPhase.RUNNING})
"""Phases of members already placed (scheduler-plugins' assigned pods)."""


def group_to_json(group: PodGroup) -> bytes:
    """The record of a group: its fields, as JSON (keys sorted, so equal groups encode equally)."""
    return codec.dumps(
        {
            "creationTimestamp": group.creation_timestamp,
            "minMember": group.min_member,
            "minResources": dict(sorted(group.min_resources.items())),
            "name": group.name,
            "namespace": group.namespace,
            "scheduleTimeoutSeconds": group.schedule_timeout_seconds,
        }
    )


def group_from_json(data: bytes | str) -> PodGroup:
    """The inverse of `group_to_json`. Raises ValueError (DecodeError) or KeyError when malformed."""
    raw = codec.loads(data)
    timeout = raw.get("scheduleTimeoutSeconds")
    return PodGroup(
        namespace=str(raw["namespace"]),
        name=str(raw["name"]),
        min_member=int(raw["minMember"]),
        min_resources={str(k): int(v) for k, v in (raw.get("minResources") or {}).items()},
        schedule_timeout_seconds=None if timeout is None else int(timeout),
        creation_timestamp=float(raw.get("creationTimestamp") or 0.0),
    )


class PodGroupStore(StoreCore):
    """PodGroups and their members: `ClusterState` is one."""

    async def put_pod_group(self, group: PodGroup, manifest: bytes = b"") -> bool:
        """Insert or replace the group (keyed ``namespace/name``), listed in the groups index.
        True when it changed (new, or other fields or manifest), False when stored as is.
        Idempotent and atomic (one script)."""
        reply = await self._run(
            self.scripts.put_pod_group,
            [self.keys.pod_group_record(group.key), self.keys.pod_groups_index()],
            [group.key, group_to_json(group), manifest],
        )
        return int(text(reply[0]) or 0) == 1

    async def delete_pod_group(self, key: str) -> bool:
        """Forget the group ``namespace/name`` (its members stay indexed: pods outlive their
        group's object, as in kube). True when it was stored. Idempotent."""
        pipe = self._pipeline()
        pipe.delete(self.keys.pod_group_record(key))
        pipe.srem(self.keys.pod_groups_index(), key)
        removed, _ = await pipe.execute()
        return bool(removed)

    async def get_pod_group(self, key: str) -> PodGroup | None:
        """The group ``namespace/name``, or None when it was never put."""
        record = await self.redis.hget(self.keys.pod_group_record(key), "record")
        return group_from_json(record) if record else None

    async def pod_groups(self, keys: Iterable[str] | None = None) -> list[PodGroup]:
        """The groups of these keys that exist, in order; every group (sorted by key) for None.
        One round trip per 500 groups (plus one to list them)."""
        if keys is None:
            wanted = sorted(text(k) for k in await self.redis.smembers(self.keys.pod_groups_index()))
        else:
            wanted = list(keys)
        out: list[PodGroup] = []
        for start in range(0, len(wanted), _BATCH):
            pipe = self._pipeline()
            for key in wanted[start : start + _BATCH]:
                pipe.hget(self.keys.pod_group_record(key), "record")
            out += [group_from_json(r) for r in await pipe.execute() if r]
        return out

    async def add_group_members(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Add each (group key, pod uid) to the group's members; idempotent. One round trip
        (none for no pairs). The group need not exist yet (pods may come before their group)."""
        members: dict[str, set[str]] = {}
        for key, uid in pairs:
            members.setdefault(key, set()).add(uid)
        if not members:
            return
        pipe = self.redis.pipeline(transaction=False)
        for key, uids in members.items():
            pipe.sadd(self.keys.group_members(key), *sorted(uids))
        await pipe.execute()

    async def remove_group_member(self, key: str, uid: str) -> None:
        """Remove the pod from the group's members; idempotent."""
        await self.redis.srem(self.keys.group_members(key), uid)

    async def group_members(self, key: str) -> set[str]:
        """The uids indexed as members of the group, whatever their phase."""
        return {text(u) for u in await self.redis.smembers(self.keys.group_members(key))}

    async def group_counts(self, keys: Iterable[str]) -> dict[str, tuple[int, int]]:
        """Per group key: (members, assigned). Members are the indexed pods whose record exists
        and is Pending, Reserved, Bound or Running (not Succeeded, Failed or Deleted); assigned
        are those Bound or Running. (0, 0) for a group without members. Two pipelined round
        trips: the member sets, then the members' phases."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        pipe = self._pipeline()
        for key in wanted:
            pipe.smembers(self.keys.group_members(key))
        uids_of = [sorted({text(u) for u in raw}) for raw in await pipe.execute()]
        all_uids = sorted({u for uids in uids_of for u in uids})
        phases: dict[str, PodPhase | None] = {}
        for start in range(0, len(all_uids), _BATCH):
            chunk = all_uids[start : start + _BATCH]
            pipe = self._pipeline()
            for uid in chunk:
                pipe.hget(self.keys.pod_record(uid), "phase")
            for uid, raw in zip(chunk, await pipe.execute(), strict=True):
                phases[uid] = _phase(raw)
        out: dict[str, tuple[int, int]] = {}
        for key, uids in zip(wanted, uids_of, strict=True):
            counted = [phases[u] for u in uids if phases[u] in _COUNTED]
            out[key] = (len(counted), sum(1 for p in counted if p in _ASSIGNED))
        return out


def _phase(raw: object) -> PodPhase | None:
    value = text(raw)
    try:
        return PodPhase(value) if value else None
    except ValueError:
        return None
