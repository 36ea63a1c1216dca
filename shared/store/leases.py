"""Leader leases with fencing tokens (one active cycle per profile)."""

from __future__ import annotations

from dataclasses import dataclass

from kubus.codec import text
from kubus.store._core import StoreCore


def cycle_lease(profile: str) -> str:
    """The lease of a profile's active cycle: its token fences the cycle's pops and reservations."""
    return f"cycle/{profile}"


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
        key = self.keys.lease_holder(name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hmget(key, "holder", "token")
        pipe.pttl(key)
        (holder, token), ttl = await pipe.execute()
        if holder is None:
            return None
        return Lease(name, text(holder), int(text(token)), int(ttl))
