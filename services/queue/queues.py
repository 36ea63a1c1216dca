"""Every profile's scheduling queue (`Queues`): built from the profile's plugins, emptied when the
queue stops serving, with the pending-pods gauges and the wake-ups of pops waiting for pods."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView

from kubus.bus import EventKind, with_batches
from kubus.core.metrics import Metrics
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.queueing_hints import WILDCARD
from kubus.framework.runtime import Framework
from kubus.queue.options import QueueOptions
from kubus.queue.queueing import CLUSTER_EVENTS, QueueName, SchedulingQueue
from kubus.runtime.service import StructuredLogger

__all__ = ["Queues"]

_PENDING_QUEUES = (QueueName.ACTIVE, QueueName.BACKOFF, QueueName.UNSCHEDULABLE, QueueName.GATED)


class Queues(Mapping[str, SchedulingQueue]):
    """One `SchedulingQueue` per profile (schedulerName), read as a mapping. `reset` replaces
    them all with fresh, empty ones; a caller iterating (``items()``, ``values()``) across an
    await goes on with the queues it started with."""

    def __init__(
        self,
        *,
        config: SchedulerConfiguration,
        options: QueueOptions,
        frameworks: Mapping[str, Framework],
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self._config = config
        self.options = options
        self._frameworks = frameworks
        self.metrics = metrics
        self.log = log
        self._queues: dict[str, SchedulingQueue] = {name: self._build(name) for name in frameworks}
        self._ready = {profile: asyncio.Event() for profile in self._queues}
        """Profile -> set when its queue has pods (`changed`): a pop waiting for one wakes."""
        self._inflight_labels: set[str] = set()
        self._unschedulable_labels: dict[str, set[str]] = {}
        """Profile -> the plugins of its scheduler_unschedulable_pods series set last time."""
        # scheduler_inflight_events describes the queues' state: read at each scrape, in the loop.
        metrics.sample(self._sample_inflight_events)

    # -- the mapping ------------------------------------------------------------------------------

    def __getitem__(self, profile: str) -> SchedulingQueue:
        return self._queues[profile]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def keys(self) -> KeysView[str]:
        return self._queues.keys()

    def items(self) -> ItemsView[str, SchedulingQueue]:
        return self._queues.items()

    def values(self) -> ValuesView[SchedulingQueue]:
        return self._queues.values()

    # -- what the parts call -----------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every pod: fresh, empty queues (the next leader rebuilds its own from Redis)."""
        self._queues = {name: self._build(name) for name in self._frameworks}

    def ready(self, profile: str) -> asyncio.Event:
        """Set once the profile's queue has pods (after `changed`); a waiting pop clears it first."""
        return self._ready[profile]

    def event_kinds(self) -> list[str]:
        """The cluster event kinds the queue listens to: every node event (the node copies the
        hints read follow them; ``nodes.changed``, several in one, too), and the pod events some
        profile's plugin registered, all of them where one registered every event (kube's
        informers listen for the registered events alone), with the ``pods.*`` kinds that carry
        them. With kube's plugins, pod.running, one per pod, is not among them."""
        registered = frozenset().union(*(queue.registered_kinds for queue in self._queues.values()))
        nodes_changed = EventKind.NODES_CHANGED.value  # several node events in one
        if WILDCARD in registered:
            return sorted(with_batches({*CLUSTER_EVENTS, nodes_changed}))
        kinds = {nodes_changed, *(k for k in CLUSTER_EVENTS if k.startswith("node.") or k in registered)}
        return sorted(with_batches(kinds))

    def changed(self) -> None:
        """Refresh the pending-pods gauges and wake pops waiting for a profile that has pods."""
        totals: Counter[QueueName] = Counter()
        for profile, queue in self._queues.items():
            for name, count in queue.counts().items():
                totals[name] += count
            if len(queue):
                self._ready[profile].set()
        for name in _PENDING_QUEUES:
            self.metrics.pending_pods.labels(queue=str(name)).set(totals[name])

    async def flush_backoff(self) -> None:
        """Pods whose backoff expired go to the activeQ (kube's flushBackoffQCompleted)."""
        for queue in self._queues.values():
            queue.flush_backoff()
        self._count_unschedulable()

    async def flush_leftover(self) -> None:
        """Pods unschedulable for too long are retried anyway (kube's flushUnschedulablePodsLeftover)."""
        for profile, queue in self._queues.items():
            if moved := queue.flush_unschedulable_leftover():
                self.log.info("unschedulable leftovers requeued", profile=profile, pods=moved)

    # -- inside -----------------------------------------------------------------------------------

    def _build(self, name: str) -> SchedulingQueue:
        framework = self._frameworks[name]
        return SchedulingQueue(
            name,
            initial_backoff=float(self._config.pod_initial_backoff_seconds),
            max_backoff=float(self._config.pod_max_backoff_seconds),
            max_in_unschedulable=self.options.max_in_unschedulable,
            in_flight_timeout=self.options.in_flight_timeout,
            pre_enqueue=framework.pre_enqueue,
            queue_sort=framework.queue_sort,
            on_incoming=self._count_incoming,
            plugins=framework.plugins,
            on_hint=self._observe_hint,
        )

    def _observe_hint(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        self.metrics.queueing_hint_execution_duration.labels(plugin=plugin, event=event, hint=hint).observe(seconds)

    def _count_incoming(self, queue: QueueName, event: str) -> None:
        self.metrics.queue_incoming_pods.labels(queue=str(queue), event=event).inc()

    def _count_unschedulable(self) -> None:
        # Once a second, with the flush: counting walks the unschedulable set.
        for profile, queue in self._queues.items():
            counts = queue.unschedulable_by_plugin()
            for plugin in self._unschedulable_labels.get(profile, set()) - set(counts):
                self.metrics.unschedulable_pods.labels(plugin=plugin, profile=profile).set(0)
            for plugin, count in counts.items():
                self.metrics.unschedulable_pods.labels(plugin=plugin, profile=profile).set(count)
            self._unschedulable_labels[profile] = set(counts)

    def _sample_inflight_events(self) -> None:
        totals: Counter[str] = Counter()
        for queue in self._queues.values():
            totals.update(queue.inflight_events())
        self._inflight_labels.update(totals)
        for event in self._inflight_labels:  # an event no longer kept reads 0, not its last count
            self.metrics.inflight_events.labels(event=event).set(totals[event])
