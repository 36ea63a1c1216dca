"""The watcher: cluster mode's bridge between a kube-apiserver and kubus (docs/cluster-mode.md).

It lists and watches the apiserver's Nodes, Pods, Namespaces, PriorityClasses,
PodDisruptionBudgets, PodGroups, Services, ReplicationControllers, ReplicaSets and StatefulSets
(`kubus.kubeapi.Reflector`: resumed from their resourceVersion, relisted after 410 Gone, backing
off on errors and 429s) and keeps kubus in step with them: nodes and objects in the store
(`NodeMirror`, `ObjectMirror`), pods submitted to the queue, recorded on their nodes, finished or
deleted (`PodMirror`). It reports what kubus
decides back to the apiserver as kube-scheduler does (`StatusWriter`: PodScheduled, events,
preemption's victims and nominations), from the cluster events on KUBUS_EVENTS (a durable
consumer, so nothing is missed while it restarts). Bindings are the binder's (`--kubeconfig`).

Order at start: the objects and the nodes are listed before the pods, so that a pod is admitted
against its PriorityClass and placed on a node kubus knows. A store or NATS outage pauses it
(the event in hand is applied again once they answer); an apiserver outage is the reflectors'
(they back off and say so); nothing stops the service but a failure at start: the apiserver
unreachable, the token refused or a permission missing, each one line naming what to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import zlib
from collections.abc import Sequence
from typing import Protocol

from nats.aio.msg import Msg

from kubus.bus import (
    EVENTS_STREAM,
    WATCHER_CONSUMER,
    MessageFaults,
    PullConsumer,
    ensure_pull_consumer,
    event_filter,
    put_consumer,
    redelivery_delay,
)
from kubus.bus.consumers import deliveries
from kubus.bus.messages import ClusterEvent
from kubus.core.codec import JSONMapping
from kubus.core.errors import KubusError
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import SchedulerConfiguration
from kubus.kubeapi import (
    NODES,
    PODS,
    EventType,
    KubeAccessError,
    KubeAPIError,
    KubeClient,
    KubeConfig,
    KubeUnreachable,
    Reflector,
    Replaced,
    Resource,
    WatchEvent,
    check_access,
)
from kubus.runtime.service import TRANSIENT_ERRORS, Service, is_transient
from kubus.store import ClusterState
from kubus.watcher.nodes import NodeMirror
from kubus.watcher.objects import ObjectMirror, mirrored
from kubus.watcher.options import WatcherOptions
from kubus.watcher.pods import PodMirror
from kubus.watcher.status import WATCHED_KINDS, StatusWriter

__all__ = ["WatcherService", "WatcherStartError"]

_STATUS_DRAIN = 5.0
"""Seconds a stopping watcher gives the status writes it has taken (the rest are redelivered)."""

_STATUS_FAILURES = 5
"""Failed tries of one event's apiserver writes (not outages) before it is given up, said."""

FIX_RBAC = "give kubus the ClusterRole of its Helm chart, deploy/helm/kubus/templates/rbac.yaml"

_CRD_RECHECK = 60.0
"""Seconds between two looks for a custom resource that was not served (PodGroup's CRD)."""

_FIRST_LISTS_GC_PAUSE = 60.0
"""Seconds at most the cyclic collector waits for the first lists (`WatcherService._first_lists`)."""

_REASSERT_CONSUMER = 60.0
"""Seconds between two puts of the status consumer's config (a client may change consumers on
KUBUS_EVENTS through the subject its `get pods -w` needs)."""


class WatcherStartError(KubusError, ConnectionError):
    """The watcher cannot work against this apiserver (unreachable, refused, a permission
    missing); str() is one line saying what to fix. The service exits with it at start."""


class _Mirror(Protocol):
    async def replace(self, objects: Sequence[JSONMapping]) -> None: ...

    async def changed(self, obj: JSONMapping) -> object: ...

    async def deleted(self, obj: JSONMapping) -> None: ...


class WatcherService(Service):
    """The watcher (see the module docstring). ``kube``: where the apiserver is and how to log
    in; ``config``: the scheduler profiles (whose pods kubus schedules)."""

    metrics_role = "watcher"

    def __init__(
        self,
        settings: ConnectionSettings | None,
        kube: KubeConfig,
        config: SchedulerConfiguration,
        options: WatcherOptions | None = None,
        *,
        name: str = "watcher",
    ) -> None:
        super().__init__(name, settings)
        self.kube = kube
        self.profiles = tuple(p.scheduler_name for p in config.profiles)
        self.options = options or WatcherOptions()
        self.client: KubeClient | None = None
        """The apiserver client, opened by start() (closed by stop())."""
        self.reflectors: dict[str, Reflector] = {}
        """By resource plural: the reflectors, once started (tests wait on their `synced`)."""

    async def on_start(self) -> None:
        assert self.nc is not None and self.js is not None and self.redis is not None
        o = self.options
        self.client = client = KubeClient(self.kube, qps=o.qps, burst=o.burst, write_lanes=o.status_writes)
        missing = await self._check_access(client)
        store = ClusterState(self.redis)
        nodes = NodeMirror(store=store, js=self.js, log=self.log)
        pods = PodMirror(
            store=store, js=self.js, nc=self.nc, profiles=self.profiles, log=self.log, submit_batch=o.submit_batch
        )
        status = StatusWriter(
            client=client,
            log=self.log,
            instance=socket.gethostname(),
            series_window=o.event_series_window,
            evicting=pods.evicting,
        )
        kinds = {kind: resource for kind, resource in mirrored().items() if resource not in missing}
        for resource in (*kinds.values(), NODES, PODS):
            self.reflectors[resource.plural] = Reflector(client, resource, watch_timeout=o.watch_timeout)
        for kind, resource in kinds.items():
            # The objects admission and the plugins read (classes, namespaces, budgets, gangs,
            # the workloads default spreading selects pods by).
            mirror = ObjectMirror(kind, store=store, log=self.log)
            self.spawn(f"watch {resource.plural}", self._mirror, self.reflectors[resource.plural], mirror)
        for kind, resource in mirrored().items():
            if resource in missing:
                # Its CRD is not installed: watched from the moment it is.
                mirror = ObjectMirror(kind, store=store, log=self.log)
                self.spawn(f"wait for {resource.plural}", self._mirror_once_served, client, resource, mirror)
        self.spawn("first lists", self._first_lists)
        # The nodes, with their room, labels, taints and GPUs.
        self.spawn("watch nodes", self._mirror, self.reflectors[NODES.plural], nodes)
        # The pods, once the objects and nodes are in: submitted, placed, finished, deleted.
        self.spawn("watch pods", self._pods, pods)
        # Bindings the store does not have in time (their binder died between the apiserver and the store).
        self.spawn("settle bindings", self._settle, pods)
        # The queue's node lifecycle marks silent nodes lost: the apiserver's are alive while listed.
        self.spawn("heartbeat nodes", self._heartbeat, nodes)
        consumer = self.intake(
            await ensure_pull_consumer(
                self.nc,
                self.js,
                EVENTS_STREAM.name,
                WATCHER_CONSUMER,
                filter_subjects=[event_filter(kind) for kind in WATCHED_KINDS],
                description="the watcher: what kubus decides, reported to the apiserver",
            )
        )
        # What kubus decides, written to the apiserver as kube-scheduler writes it.
        self.spawn("write status", self._status_loop, consumer, status)

    async def on_stop(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def synced(self) -> None:
        """Wait until every reflector has delivered its first list (tests, readiness)."""
        await asyncio.gather(*(r.synced() for r in self.reflectors.values()))

    # -- the parts' loops ------------------------------------------------------------------------

    async def _first_lists(self) -> None:
        """No cyclic garbage collection while the first lists are read and applied: what they
        parse (every node and pod) survives them, so each collection found nothing to free and
        took 35 ms (0.1 s of CPU a start at 5,000 nodes and 10,000 pods). Then what they left is
        frozen out of the collector's sight, as `_apply` freezes after each first list. At most
        `_FIRST_LISTS_GC_PAUSE` seconds (an apiserver that does not answer the lists)."""
        if not gc.isenabled():
            return  # someone else's choice: left as it is
        gc.disable()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.synced(), _FIRST_LISTS_GC_PAUSE)
        finally:
            gc.freeze()
            gc.enable()

    async def _mirror(self, reflector: Reflector, mirror: _Mirror) -> None:
        async with reflector:
            async for event in reflector:
                await self._apply(event, mirror, reflector.resource)

    async def _mirror_once_served(self, client: KubeClient, resource: Resource, mirror: _Mirror) -> None:
        while not await _sleep_or(self.stopping, _CRD_RECHECK):
            if not await self._missing(client, resource):
                self.log.info("now served: watching it", resource=str(resource))
                reflector = Reflector(client, resource, watch_timeout=self.options.watch_timeout)
                self.reflectors[resource.plural] = reflector
                await self._mirror(reflector, mirror)
                return

    async def _pods(self, mirror: PodMirror) -> None:
        await asyncio.gather(*(r.synced() for name, r in self.reflectors.items() if name != PODS.plural))
        await self._mirror(self.reflectors[PODS.plural], mirror)

    async def _apply(self, event: Replaced | WatchEvent, mirror: _Mirror, resource: Resource) -> None:
        """Apply one reflector event, again and again while the store or NATS is away (the
        watch waits meanwhile: nothing is skipped). A bug is said, and the event left out."""
        while not self.stopping.is_set():
            try:
                match event:
                    case Replaced(objects=objects, initial=initial):
                        await mirror.replace(objects)
                        if initial:
                            # What a first list leaves (a mirror's memory of every pod or node)
                            # lives as long as the watcher: out of the cyclic collector's sight,
                            # as what was loaded at start is (`tune_gc`).
                            gc.freeze()
                    case WatchEvent(type=EventType.ADDED | EventType.MODIFIED, object=obj):
                        await mirror.changed(obj)
                    case WatchEvent(type=EventType.DELETED, object=obj):
                        await mirror.deleted(obj)
                return
            except TRANSIENT_ERRORS as exc:
                self.outage.note(exc)
                await self.outage.pause(self.stopping)
            except Exception:
                self.log.exception("watch event not applied", resource=str(resource))
                return

    async def _settle(self, pods: PodMirror) -> None:
        while not await _sleep_or(self.stopping, 1.0):
            try:
                await pods.settle()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("settling bindings failed", error=repr(exc))

    async def _heartbeat(self, nodes: NodeMirror) -> None:
        while not await _sleep_or(self.stopping, self.options.heartbeat_interval):
            try:
                await nodes.heartbeat()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("heartbeat failed", error=repr(exc))

    async def _status_loop(self, consumer: PullConsumer, status: StatusWriter) -> None:
        """Fetch cluster events and hand each to one of `WatcherOptions.status_writes` writers by
        its pod: one pod's events are written (and acked) in their order, different pods' at
        once, and fetching goes on while writes are out (up to twice `status_batch` taken)."""
        faults = MessageFaults(_STATUS_FAILURES)
        writers = self.options.status_writes
        queues: list[asyncio.Queue[tuple[Msg, ClusterEvent | None]]] = [asyncio.Queue() for _ in range(writers)]
        room = asyncio.Semaphore(2 * self.options.status_batch)

        async def writer(queue: asyncio.Queue[tuple[Msg, ClusterEvent | None]]) -> None:
            while True:
                msg, event = await queue.get()
                try:
                    error = None if event is None else await status.write_one(event)
                    await self._settle_status(msg, error, faults)
                finally:
                    room.release()
                    queue.task_done()

        tasks = [asyncio.create_task(writer(q), name=f"{self.name}: status writer {i}") for i, q in enumerate(queues)]
        loop = asyncio.get_running_loop()
        reassert_at = loop.time() + _REASSERT_CONSUMER
        try:
            while not self.stopping.is_set():
                if loop.time() >= reassert_at and consumer.config is not None:
                    # Its config back, should a client have rewritten it (docs/security.md).
                    reassert_at = loop.time() + _REASSERT_CONSUMER
                    with contextlib.suppress(*TRANSIENT_ERRORS):
                        await put_consumer(self.jetstream(), consumer.stream, consumer.config)
                msgs = await self.fetch(consumer, self.options.status_batch, timeout=1.0, pace=self.options.status_pace)
                for msg in msgs:
                    await room.acquire()
                    event = status.read(msg)
                    pod = event.name if event is not None else ""
                    queues[zlib.crc32(pod.encode()) % writers].put_nowait((msg, event))
            # Stopping: what was taken is written and acked (not left to redeliver), briefly.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(q.join() for q in queues)), _STATUS_DRAIN)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _settle_status(self, msg: Msg, error: Exception | None, faults: MessageFaults) -> None:
        with contextlib.suppress(Exception):  # an ack that does not arrive: redelivered, idempotent enough
            if error is None:
                await msg.ack()
            elif _retryable(error):
                if isinstance(error, TRANSIENT_ERRORS | KubeUnreachable):
                    self.outage.note(error)
                await msg.nak(delay=redelivery_delay(deliveries(msg)))
            elif faults.exhausted(msg):
                self.log.error("status write given up", subject=msg.subject, error=str(error))
                await msg.term()
            else:
                self.log.warning("status write failed, will retry", subject=msg.subject, error=str(error))
                await msg.nak(delay=redelivery_delay(deliveries(msg)))

    # -- start -----------------------------------------------------------------------------------

    async def _check_access(self, client: KubeClient) -> set[Resource]:
        """Read one object of every kind the watcher reads, once: the apiserver unreachable, the
        token refused, a permission missing: `WatcherStartError`, one line naming what to fix.
        Returns the custom resources not served (PodGroups without their CRD), said."""
        try:
            missing = await check_access(client, (NODES, PODS, *mirrored().values()), fix_rbac=FIX_RBAC)
        except KubeAccessError as exc:
            raise WatcherStartError(str(exc)) from None
        for resource in missing:
            self.log.warning(
                "PodGroups cannot be read: their CRD is not installed (the Helm chart installs it); gangs are "
                "scheduled as separate pods until it is (looked for again every minute)",
                resource=str(resource),
            )
        return missing

    async def _missing(self, client: KubeClient, resource: Resource) -> bool:
        """Whether ``resource`` is (still) not served."""
        try:
            return bool(await check_access(client, (resource,), fix_rbac=FIX_RBAC))
        except KubeAccessError as exc:
            self.log.warning("looking for a custom resource failed", resource=str(resource), error=str(exc))
            return True


def _retryable(error: Exception) -> bool:
    if isinstance(error, KubeAPIError):
        return error.transient
    return isinstance(error, KubeUnreachable) or is_transient(error)


async def _sleep_or(event: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``; True (at once) when ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()

