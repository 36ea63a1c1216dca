"""The cycles of the other profiles (`Presence`): this cycle's reservations announced to them
(`ReservedPods` on ``kubus.reserved.<profile>``) while they are there to take them in, and a
presence notice every ``presence_interval`` so that they announce theirs."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator, Sequence

import nats.errors
from nats.aio.client import Client as NATS

from kubus.bus import reserved as reserved_subject
from kubus.bus.messages import ReservedPods, encode
from kubus.core.codec import JSONObject
from kubus.cycle.batch import Reserved
from kubus.cycle.nodes import NodeTableKeeper
from kubus.cycle.options import CycleOptions
from kubus.runtime.service import StructuredLogger


class Presence:
    """Announces this cycle's reservations, and hears the other profiles' cycles."""

    def __init__(
        self,
        *,
        nc: NATS,
        profile: str,
        options: CycleOptions,
        nodes: NodeTableKeeper,
        log: StructuredLogger,
    ) -> None:
        self.nc = nc
        self.profile = profile
        self.options = options
        self.nodes = nodes
        """Whose `NodeTableKeeper.leading_since` begins the window in which this cycle announces
        before it could have heard anybody."""
        self.log = log
        self.subject = reserved_subject(profile)
        """Where this cycle announces (its own announcements come back there)."""
        self._heard_others_at = -math.inf
        """When another profile's cycle was last heard on kubus.reserved.* (the loop's clock)."""
        self._present_due = 0.0
        """When the next presence notice is due (the loop's clock)."""

    def heard(self) -> None:
        """Another profile's cycle spoke on kubus.reserved.* just now."""
        self._heard_others_at = asyncio.get_running_loop().time()

    def others_listen(self) -> bool:
        """Whether another profile's cycle may take announcements in (`presence_interval`)."""
        now, window = asyncio.get_running_loop().time(), 3 * self.options.presence_interval
        return now - self._heard_others_at <= window or now - self.nodes.leading_since <= window

    async def say_present(self) -> None:
        """An empty announcement every `presence_interval` while leading: the other profiles'
        cycles announce their reservations while they hear it."""
        now = asyncio.get_running_loop().time()
        if now < self._present_due:
            return
        self._present_due = now + self.options.presence_interval
        with contextlib.suppress(nats.errors.Error):
            await self.nc.publish(self.subject, encode(ReservedPods(self.profile)))

    async def announce(self, reserved: Sequence[Reserved]) -> None:
        """Tell the other profiles' cycles about the reservations about to be handed over. Sent
        before the BindRequests, on the same connection, so that it reaches them before any
        event a binder publishes about these pods. Best effort: a hint."""
        nc = self.nc
        try:
            for data in _notices(self.profile, [r.reservation.to_json() for r in reserved], nc.max_payload):
                await nc.publish(self.subject, data)
        except nats.errors.Error as exc:
            self.log.debug("reservations not announced", pods=len(reserved), error=repr(exc))


def _notices(profile: str, reservations: list[JSONObject], limit: int) -> Iterator[bytes]:
    """`ReservedPods` messages of at most ``limit`` bytes (NATS' max payload) for ``reservations``."""
    data = encode(ReservedPods(profile, tuple(reservations)))
    if len(data) <= limit or len(reservations) == 1:
        yield data
        return
    half = len(reservations) // 2
    yield from _notices(profile, reservations[:half], limit)
    yield from _notices(profile, reservations[half:], limit)
