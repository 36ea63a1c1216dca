"""The core every part of `ClusterState` shares: the client, the key layout, the scripts,
the cache of pod profiles, and the reply helpers."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript
from redis.typing import EncodableT

from kubus.core.codec import text
from kubus.core.redis_connection import KubusRedis
from kubus.store.keys import DEFAULT_PREFIX, Keys
from kubus.store.scripts import Scripts, StoreCode

_MAX_LUA_INT = 2**53
"""Quantities the scripts compare are doubles in Lua: exact up to here (see scripts.py)."""

_BATCH = 500
"""Commands per pipeline round trip in bulk reads."""

_BIND_CHUNK = 128
"""Pods per BIND_MANY script call (bounds how long one call holds Redis)."""

_RESERVE_CHUNK = 128
"""Pods per RESERVE_PODS script call (bounds how long one call holds Redis)."""


RedisReply: TypeAlias = Any
"""One reply of Redis as redis-py hands it on: bytes (str where the client decodes responses),
int, None, or a list of these (a script's reply, whose shape is that script's contract, in its
.lua file). Any: redis-py types replies as Any (`redis.typing.ResponseT`)."""

RedisHash: TypeAlias = Mapping[Any, Any]
"""A hash as HGETALL (or `records.hash_fields`) gives it: field -> value, each bytes, or str
where the client decodes responses. Any: Mapping's key type is invariant, so no one precise key
type takes both HGETALL's bytes-or-str keys and our own str-keyed dicts."""

_CODES: dict[object, StoreCode] = {**{c.value: c for c in StoreCode}, **{c.value.encode(): c for c in StoreCode}}
"""A script's reply code as Redis returns it (bytes, or text where the client decodes): a dict
look-up, not an enum call per reply (thousands a heartbeat)."""


def _code(reply: object) -> StoreCode:
    code = _CODES.get(reply)
    return code if code is not None else StoreCode(text(reply))


class StoreCore:
    """The shared state of the cluster in one Redis (a `redis.asyncio.Redis`; for high
    availability, Redis with replicas behind Sentinel or a managed failover endpoint). Safe to
    share between tasks; processes each build their own. The indexes change in the same script
    as the records. The client may or may not decode responses.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        event_cap: int = 100,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.keys = Keys(prefix)
        self.event_cap = event_cap
        """Events kept per pod; older ones are dropped."""
        self.clock = clock
        self.scripts = Scripts(redis)
        self._profiles: OrderedDict[str, str] = OrderedDict()

    async def confirm_replicated(self) -> None:
        """Return once this process's earlier writes are on the replicas the client waits for
        (`kubus.core.redis_connection.KubusRedis.confirm_replicated`: ``redis_wait_replicas``); at
        once without replicas to wait for. Called by the writes a failover must not undo once
        they are acknowledged: stored submissions, bindings, deletions. Raises ReplicationTimeout
        (transient: retry the step, which is idempotent) when the replicas do not confirm in time."""
        if isinstance(self.redis, KubusRedis) and self.redis.wait_replicas > 0:
            await self.redis.confirm_replicated(self.keys.replication_fence())

    async def _run(self, script: AsyncScript, keys: Sequence[str], args: Sequence[EncodableT]) -> list[RedisReply]:
        reply = await script(keys=list(keys), args=list(args))
        return list(reply) if isinstance(reply, list | tuple) else [reply]

    def _node_keys(self, node: str) -> list[str]:
        return [*self.keys.node_keys(node), self.keys.nodes_index(), self.keys.heartbeats_index()]

    def _pod_keys(self, uid: str, profile: str) -> list[str]:
        return [
            self.keys.pod_record(uid),
            self.keys.pod_keys_index(),
            *self.keys.phase_indexes(),
            self.keys.pending_index(profile),
        ]

    def know_profile(self, uid: str, profile: str) -> None:
        """Tell the store the profile of a pod it is about to write (a caller that knows it,
        like a cycle holding the pod it popped): saves reading it first. A wrong profile costs
        a retry, never a wrong write (the scripts check it)."""
        self._remember_profile(uid, profile)

    def _remember_profile(self, uid: str, profile: str) -> None:
        self._profiles[uid] = profile
        self._profiles.move_to_end(uid)
        if len(self._profiles) > 65536:
            self._profiles.popitem(last=False)

    async def _profile_of(self, uid: str) -> str:
        profile = self._profiles.get(uid)
        if profile is None:
            profile = text(await self.redis.hget(self.keys.pod_record(uid), "profile"))
            if profile:
                self._remember_profile(uid, profile)
        return profile

    def _pipeline(self) -> Pipeline:
        """A pipeline for bulk reads: MULTI/EXEC, so a consistent snapshot."""
        return self.redis.pipeline(transaction=True)
