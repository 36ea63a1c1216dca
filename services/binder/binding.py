"""The binding cycle of requests whose Permit passed (`BindingCycle`): PreBind and Bind plugins,
the bind in the kube-apiserver (cluster mode), the store's bind, what it is announced with, and
PostBind; docs/services.md step 5, every step conditional on the request's attempt.

Steps 3 and 4 for a group in one `ClusterState.bind_many` call (per pod one atomic script on a
single Redis: mark bound, bind, the "Scheduled" event, release when refused), their messages in
one publication (`publish_durable_many`: the group's binds in one ``pods.bound`` event), then
each request acked. A request whose message could not be published is retried (nak); the rest
of its group is acked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from nats.js.api import PubAck

from kubus.api.errors import ManifestError
from kubus.api.manifests import wire_pod
from kubus.binder.apiserver import ApiBinding, ApiBindResult, ScheduledEvents
from kubus.binder.handback import HandBack, requeue_publication, unreserved_publication
from kubus.binder.work import BindResult, Work, framework_of, request_log
from kubus.bus import EventKind, Publication, announcements
from kubus.bus.messages import BatchedPod, BindRequest, NodeAssignment
from kubus.core.metrics import Metrics
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.status import Status
from kubus.runtime.service import StructuredLogger, is_transient
from kubus.store import ClusterState, EventType, PodEvent, PodPhase, StoreCode
from kubus.store.cluster_state import Binding, BindingResult

__all__ = ["BindingCycle", "Publish"]

Publish = Callable[[Sequence[Publication]], Awaitable[list[PubAck | Exception]]]
"""Publishes durably, all at once; an error in the place of each message not stored."""


class BindingCycle:
    """PreBind, Bind and PostBind of the requests whose Permit passed, group by group. ``apiserver``:
    cluster mode, where a pod is bound in the kube-apiserver first (`kubus.binder.apiserver`),
    and ``events`` writes each bound pod's Scheduled event there; None: the bus mode, where the
    store's bind is the binding and the node's agent is told.
    ``source``: who recorded the pod events it writes."""

    def __init__(
        self,
        *,
        store: ClusterState,
        frameworks: Mapping[str, Framework],
        apiserver: ApiBinding | None,
        events: ScheduledEvents | None = None,
        handback: HandBack,
        publish: Publish,
        metrics: Metrics,
        clock: Callable[[], float],
        source: str,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.frameworks = frameworks
        self.apiserver = apiserver
        self.events = events
        self.handback = handback
        self.publish = publish
        self.metrics = metrics
        self.clock = clock
        self.source = source
        self.log = log

    async def bind_group(self, works: list[Work]) -> None:
        """PreBind, Bind and PostBind of requests whose Permit passed, exactly as docs/services.md
        step 5 says, every step conditional on the attempt. Pods of profiles with binding
        plugins run them one by one first; the store's bind is one call for the group."""
        plain: list[Work] = []
        plugged: list[Work] = []
        for work in works:
            (plain if framework_of(self.frameworks, work.request).binds_plainly else plugged).append(work)
        if plugged:
            works = plain + [w for w in await asyncio.gather(*map(self._bind_plugins, plugged)) if w is not None]
        if works and self.apiserver is not None:
            works = await self._bind_in_apiserver(self.apiserver, works)
        if not works:
            return
        await self._store_bind(works)
        for work in works:
            if work.result is BindResult.BOUND and work.pod is not None:
                fw = framework_of(self.frameworks, work.request)
                await fw.run_post_bind(work.cycle_state, work.pod, work.request.node, self._time_plugin)

    async def _bind_in_apiserver(self, apiserver: ApiBinding, works: list[Work]) -> list[Work]:
        """Bind in the apiserver (cluster mode); the works it bound, for the store's bind. The
        others are finished here: retried (an error), or this attempt given up (the pod bound
        elsewhere, or gone: its room given back, the message acked)."""
        bound: list[Work] = []
        for work, result in zip(works, await apiserver.bind_all([w.request for w in works]), strict=True):
            if result is ApiBindResult.BOUND:
                bound.append(work)
            elif isinstance(result, Exception):
                await self.handback.fail(work, result)
            else:
                try:
                    await self.handback.unreserve_plugins(work.request)
                    await self.store.unreserve(work.request.node, work.request.uid, work.request.attempt)
                    await work.msg.ack()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    await self.handback.fail(work, exc)
                    continue
                elsewhere = result is ApiBindResult.ELSEWHERE
                request_log(self.log, work.request).info(
                    "bind given up: the apiserver has the pod " + ("bound elsewhere" if elsewhere else "no more")
                )
                work.finish(BindResult.CONFLICT if elsewhere else BindResult.DELETED, self.metrics)
        return bound

    async def _bind_plugins(self, work: Work) -> Work | None:
        """PreBind, then Bind plugins until one does not Skip, for one request; the work to
        record in the store (Bind said Success), or None once it was handed back."""
        request, fw = work.request, framework_of(self.frameworks, work.request)
        try:
            work.pod = wire_pod(request.manifest, request.uid, request.key)
        except (ManifestError, ValueError) as exc:
            await self.handback.hand_back_now(work, f"unreadable manifest: {exc}")
            return None
        point, status = "PreBind", await fw.run_pre_bind(work.cycle_state, work.pod, request.node, self._time_plugin)
        if status.is_success:
            point, status = "Bind", await fw.run_bind(work.cycle_state, work.pod, request.node, self._time_plugin)
        if status.is_success:
            return work
        await self.handback.hand_back_now(
            work, f"{point} plugin {status.plugin}: {status.message() or status.code.name}"
        )
        return None

    def _time_plugin(self, plugin: str, point: ExtensionPoint, status: Status, seconds: float) -> None:
        self.metrics.plugin_execution_duration.labels(
            plugin=plugin, extension_point=point.label, status=status.code.name
        ).observe(seconds)

    async def _store_bind(self, works: list[Work]) -> None:
        """The store's bind (DefaultBinder) of a group, and what follows it."""
        now = self.clock()
        bindings = [
            Binding(
                uid=r.uid,
                node=r.node,
                attempt=r.attempt,
                devices=r.gpu_devices,
                profile=r.profile,
                event=PodEvent(
                    now, EventType.NORMAL, "Scheduled", f"Successfully assigned {r.key} to {r.node}", self.source
                ),
            )
            for r in (w.request for w in works)
        ]
        try:
            # mark_bound, bind_pod, the Scheduled event, and release when refused: per pod atomic.
            results = await self.store.bind_many(bindings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if len(works) > 1 and not is_transient(exc):  # find the one at fault: each alone
                for work in works:
                    await self._store_bind([work])
                return
            for work in works:
                await self.handback.fail(work, exc)
            return

        if self.events is not None:  # bound now (not a redelivery's repeat): kube's Scheduled event
            self.events.record(
                [w.request for w, r in zip(works, results, strict=True) if r.bound and r.write is not None
                 and r.write.code is StoreCode.OK]
            )  # fmt: skip
        publications: list[Publication] = []
        owners: list[Sequence[int]] = []
        """Per publication, the requests (indexes in ``works``) that are acked only once it is stored."""
        bound: list[tuple[int, BatchedPod]] = []
        told: set[tuple[str, int]] = set()
        outcomes: list[BindResult] = []
        failures: dict[int, Exception] = {}
        for i, (work, result) in enumerate(zip(works, results, strict=True)):
            try:
                outcome, pubs, announced = self._after_bind(work.request, result)
            except Exception as exc:  # a bug: this request alone is retried
                outcomes.append(BindResult.RETRY)
                failures[i] = exc
                continue
            outcomes.append(outcome)
            publications += pubs
            owners += [(i,)] * len(pubs)
            if announced is not None and (announced.uid, announced.attempt) not in told:
                told.add((announced.uid, announced.attempt))  # a repeat in the group: once
                bound.append((i, announced))
        # The group's binds in one pods.bound, after their assignments. Its id is its pods'
        # digest: a redelivered group is stored once; a repeat that comes in another group is
        # announced again (pod.bound is read idempotently).
        if bound:
            events = announcements.pod_batch(EventKind.PODS_BOUND, [p for _, p in bound], at=self.clock())
            publications += events
            owners += [[i for i, _ in bound]] * len(events)

        if publications:
            try:
                acks = await self.publish(publications)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                acks = [exc] * len(publications)
            for group, ack in zip(owners, acks, strict=True):
                if isinstance(ack, Exception):
                    for owner in group:
                        failures.setdefault(owner, ack)
        for i, work in enumerate(works):
            failure = failures.get(i)
            if failure is None:
                try:
                    await work.msg.ack()
                    work.finish(outcomes[i], self.metrics)
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as ack_exc:
                    failure = ack_exc
            await self.handback.fail(work, failure)

    def _after_bind(
        self, request: BindRequest, result: BindingResult
    ) -> tuple[BindResult, list[Publication], BatchedPod | None]:
        """What one pod's Bind step means, the messages that tell everyone (published before
        the ack; their msg ids make a redelivery's repeats harmless), and the pod as its group's
        ``pods.bound`` announces it (None: not bound)."""
        uid, attempt = request.uid, request.attempt
        if result.marked in (StoreCode.NOT_FOUND, StoreCode.CONFLICT):
            # The attempt was abandoned (the janitor or a newer attempt took over). Still Reserved
            # at this attempt with its room gone: a hand-back of ours was cut short: finish it.
            why = "no reservation" if result.marked is StoreCode.NOT_FOUND else "the reservation is another attempt's"
            unfinished = (
                result.marked is StoreCode.NOT_FOUND
                and bool(attempt)
                and result.phase is PodPhase.RESERVED
                and result.version == attempt
            )
            pubs = [requeue_publication(request, f"reservation lost before binding ({why})")] if unfinished else []
            request_log(self.log, request).info(
                "bind request dropped: attempt abandoned", reason=why, handed_back=unfinished
            )
            return BindResult.ABANDONED, pubs, None
        write = result.write
        assert write is not None
        if result.bound:
            # Bound now, or before (a redelivery): the node's agent and everyone else are told.
            # Cluster mode has no agents: the kubelet runs the pod, told by the apiserver.
            pubs = []
            if self.apiserver is None:
                assignment = NodeAssignment(
                    uid=uid,
                    key=request.key,
                    node=request.node,
                    manifest=request.manifest,
                    gpu_devices=request.gpu_devices,
                    attempt=attempt,
                )
                pubs.append(announcements.assigned(assignment))
            announced = BatchedPod(request.key, uid, node=request.node, attempt=attempt, profile=request.profile)
            if write.ok and result.created_at:
                latency = max(0.0, self.clock() - result.created_at)
                self.metrics.pod_scheduling_sli_duration.labels(attempts=str(result.attempts)).observe(latency)
                self.metrics.pod_scheduling_attempts.observe(max(result.attempts, 1))
            if self.log.logger.isEnabledFor(logging.DEBUG):
                request_log(self.log, request).debug("pod bound", already=write.code is StoreCode.ALREADY)
            return BindResult.BOUND, pubs, announced
        pubs = []
        if result.released is StoreCode.OK:
            pubs.append(unreserved_publication(request, at=self.clock()))
        if write.code is StoreCode.GONE:
            request_log(self.log, request).info("pod deleted while binding: room released")
            return BindResult.DELETED, pubs, None
        # CONFLICT or NOT_FOUND: the pod moved on (bound elsewhere, a newer attempt, gone).
        request_log(self.log, request).warning(
            "bind refused: the pod moved on; this attempt's room released",
            code=str(write.code),
            phase=str(write.phase or "-"),
            version=write.version,
        )
        return BindResult.CONFLICT, pubs, None
