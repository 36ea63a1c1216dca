"""kubus.queue: the scheduling-queue service (activeQ, backoffQ, unschedulable and gated sets).

- `kubus.queue.queueing`: SchedulingQueue, one profile's queue, pure logic (kube's PriorityQueue).
- `kubus.queue.intake`: reading what clients submit (manifests to pods, bad input to one line).
- `kubus.queue.service`: QueueService, which feeds the queues from the bus and keeps them in
  step with Redis; ``python -m kubus.queue`` runs it.
"""

from kubus.queue.intake import Rejected, Submission, read_submission
from kubus.queue.queueing import (
    CLUSTER_EVENTS,
    PLUGIN_EVENTS,
    QueueEntry,
    QueueName,
    SchedulingQueue,
    backoff_duration,
    event_may_help,
)
from kubus.queue.service import ERROR_HEADER, QueueOptions, QueueService

__all__ = [
    "CLUSTER_EVENTS",
    "ERROR_HEADER",
    "PLUGIN_EVENTS",
    "QueueEntry",
    "QueueName",
    "QueueOptions",
    "QueueService",
    "Rejected",
    "SchedulingQueue",
    "Submission",
    "backoff_duration",
    "event_may_help",
    "read_submission",
]
