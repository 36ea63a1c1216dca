"""Handing a decided batch's reserved pods to the binders (`HandOver`, docs/services.md 4c): a
`BindRequest` each on ``kubus.bind.<profile>`` (msg id ``bind/<uid>/<attempt>``), if this replica
still leads; what does not reach JetStream is undone."""

from __future__ import annotations

import asyncio
import time

from nats.js import JetStreamContext

from kubus.bus import Publication, bind, msgids, publish_durable_many
from kubus.bus.messages import BindRequest, Outcome, OutcomeKind, encode
from kubus.cycle.batch import Batch, Reserved, lost_lease_message, uid
from kubus.cycle.options import CycleOptions
from kubus.cycle.presence import Presence
from kubus.cycle.undo import Undo
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger


class HandOver:
    """Hands reserved pods to the binders; decides them RESERVED, or undoes them."""

    def __init__(
        self,
        *,
        js: JetStreamContext,
        profile: str,
        options: CycleOptions,
        leadership: Leadership,
        presence: Presence,
        undo: Undo,
        table_lock: asyncio.Lock,
        log: StructuredLogger,
    ) -> None:
        self.js = js
        self.profile = profile
        self.options = options
        self.leadership = leadership
        self.presence = presence
        self.undo = undo
        self.table_lock = table_lock
        """The node table's lock (`NodeTableKeeper.lock`): an undo waits for a batch being scheduled."""
        self.log = log

    async def hand_over(self, batch: Batch) -> None:
        """The batch's reserved pods' BindRequests, all sent before any ack is awaited, if this
        replica still leads (their reservations announced first to the other profiles' cycles);
        a pod whose request JetStream did not store is undone, the error its outcome."""
        reserved, limit = batch.reserved, asyncio.Semaphore(self.options.reserve_concurrency)

        async def undo(r: Reserved, message: str) -> None:
            async with limit:
                async with self.table_lock:  # not while the next batch is being scheduled
                    step = self.undo(r.result.pod, r.node, r.result.state, attempt=r.attempt)
                await step
            batch.error(uid(r.result.pod), message)

        if self.leadership.token != batch.token:
            await asyncio.gather(*(undo(r, lost_lease_message(self.profile)) for r in reserved))
            return
        if self.presence.others_listen():
            await self.presence.announce(reserved)
        requests = [
            BindRequest(
                uid=uid(r.result.pod),
                key=r.result.pod.key,
                profile=self.profile,
                node=r.node,
                manifest=batch.manifests[uid(r.result.pod)],
                gpu_devices=r.gpu_devices,
                fencing_token=batch.token,
                attempt=r.attempt,
                reserved_at=time.time(),
                victims=batch.evicted.get(uid(r.result.pod), ()),
            )
            for r in reserved
        ]
        publications = [Publication(bind(self.profile), encode(q), msgids.bind(q.uid, q.attempt)) for q in requests]
        try:
            acks = await publish_durable_many(self.js, publications, return_exceptions=True)
        except TRANSIENT_ERRORS as exc:
            acks = [exc] * len(reserved)
        failed = []
        for r, ack in zip(reserved, acks, strict=True):
            pod_uid = uid(r.result.pod)
            if isinstance(ack, Exception):
                failed.append(undo(r, f"handing the pod to the binders failed: {ack!r}"))
                continue
            self.log.debug("pod reserved", pod=r.result.pod.key, uid=pod_uid, node=r.node, attempt=r.attempt)
            batch.decide(
                Outcome(
                    uid=pod_uid, kind=OutcomeKind.RESERVED, node=r.node, gpu_devices=r.gpu_devices, attempt=r.attempt
                )
            )
        await asyncio.gather(*failed)
