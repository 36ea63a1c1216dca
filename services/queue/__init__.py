"""kubus.queue: the scheduling-queue service (activeQ, backoffQ, unschedulable and gated sets).

- `kubus.queue.queueing`: SchedulingQueue, one profile's queue, pure logic (kube's PriorityQueue).
- `kubus.queue.service`: QueueService, which feeds the queues from the bus and keeps them in
  step with Redis; ``python -m kubus.queue`` runs it. It is composed of parts, one concern
  each, given what they need: `queues` (every profile's queue), `term` (the lease: whether it
  serves), `intake` (the KUBUS_PODS consumer), `placement` (pods that name their node),
  `serving` (pop and done), `cluster_events` (hints on cluster events), `janitor` (repairs
  and resync), `node_lifecycle` (heartbeats); its settings are `options.QueueOptions`.
"""

from kubus.queue.queueing import (
    CLUSTER_EVENTS,
    ClusterChange,
    QueueEntry,
    QueueName,
    SchedulingQueue,
    backoff_duration,
)
from kubus.queue.service import QueueOptions, QueueService

__all__ = [
    "CLUSTER_EVENTS",
    "ClusterChange",
    "QueueEntry",
    "QueueName",
    "QueueOptions",
    "QueueService",
    "SchedulingQueue",
    "backoff_duration",
]
