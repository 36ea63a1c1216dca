"""Leader leases with fencing tokens (one active cycle per profile)."""

from __future__ import annotations

from dataclasses import dataclass

from kubus.core.codec import text
from kubus.store._core import StoreCore


def cycle_lease(profile: str) -> str:
    """The lease of a profile's active cycle: its token fences the cycle's pops and reservations."""
    return f"cycle/{profile}"


def queue_lease() -> str:
    """The lease of the active queue (one for every profile): its token fences the queue's
    pops, and only its holder takes pods in and serves the cycles."""
    return "queue"


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str
    token: int
    ttl_ms: int
    """Milliseconds left before it lapses (as Redis reported it)."""


class LeaseStore(StoreCore):
    """Leases: `ClusterState` is one."""

    async def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> int | None:
        """Take or renew the lease for `ttl_ms` milliseconds. Returns the fencing token while
        `holder` holds it (the same token on renewal, a larger one on every new acquisition),
        None when someone else does. Raises ValueError for ttl_ms < 1 or an empty holder."""
        if ttl_ms < 1:
            raise ValueError(f"lease ttl must be at least 1 ms, got {ttl_ms}")
        if not holder:
            raise ValueError("lease holder must be non-empty")
        reply = await self.scripts.acquire_lease(
            keys=[self.keys.lease_holder(name), self.keys.lease_fence(name)], args=[holder, int(ttl_ms)]
        )
        return None if reply is None else int(text(reply))

    async def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up, if `holder` holds it. True when released."""
        reply = await self.scripts.release_lease(
            keys=[self.keys.lease_holder(name), self.keys.lease_fence(name)], args=[holder]
        )
        return int(reply) == 1

    async def get_lease(self, name: str) -> Lease | None:
        """Who holds the lease now, or None."""
        (lease,) = await self.get_leases(name)
        return lease

    async def get_leases(self, *names: str) -> tuple[Lease | None, ...]:
        """Who holds each lease now (None where nobody does), read in one round trip."""
        pipe = self.redis.pipeline(transaction=True)
        for name in names:
            key = self.keys.lease_holder(name)
            pipe.hmget(key, "holder", "token")
            pipe.pttl(key)
        replies = await pipe.execute()
        leases: list[Lease | None] = []
        for name, (holder, token), ttl in zip(names, replies[::2], replies[1::2], strict=True):
            leases.append(None if holder is None else Lease(name, text(holder), int(text(token)), int(ttl)))
        return tuple(leases)
