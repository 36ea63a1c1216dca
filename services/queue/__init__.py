"""kubus.queue: the scheduling-queue service (activeQ, backoffQ, unschedulable and gated sets).

- `kubus.queue.queueing`: SchedulingQueue, one profile's queue, pure logic (kube's PriorityQueue).
- `kubus.queue.submission`: reading what clients submit (manifests to pods, bad input to one line).
- `kubus.queue.service`: QueueService, which feeds the queues from the bus and keeps them in
  step with Redis; ``python -m kubus.queue`` runs it. It is made of parts, one concern each:
  `intake` (the KUBUS_PODS consumer), `serving` (pop and done), `janitor` (repairs and
  resync), `node_lifecycle` (heartbeats), over `_base` (state and shared helpers); its
  settings are `options.QueueOptions`.
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
from kubus.queue.submission import Rejected, Submission, read_submission

__all__ = [
    "CLUSTER_EVENTS",
    "ClusterChange",
    "QueueEntry",
    "QueueName",
    "QueueOptions",
    "QueueService",
    "Rejected",
    "SchedulingQueue",
    "Submission",
    "backoff_duration",
    "read_submission",
]
