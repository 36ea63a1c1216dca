"""ClusterState: the shared state of kubus in Redis, behind one async API.

Nodes (allocatable, labels, taints, GPUs), pods and their phase, reservations, bindings, pod
events and leader leases. Every change that must be atomic is one Lua script
(`kubus.store.scripts`, which documents each return code); reads are plain commands, pipelined.

The protocol the services follow (docs/services.md has the whole contract), so that neither
invariant (`kubus.store.invariants`) breaks and every step can be retried. An attempt id is the
pod record's version right after its Pending -> Reserved transition; every later step names it.

- queue:  put_pod (insert if absent) -> Pending.
- cycle:  v = transition(uid, RESERVED, node=n, expected_phases={PENDING}, count_attempt=True)
          .version; then reserve(n, Reservation.of(..., attempt=str(v), token=lease token)).
          On CONFLICT/NODE_GONE/FENCED, or any failure before the BindRequest is out:
          give_back(uid, n, v) (room given back and Pending again, one step).
- binder: mark_bound(n, uid, attempt) (NOT_FOUND: the attempt was abandoned, drop it), then
          bind_pod(uid, n, devices, expected_version=v) -> OK or ALREADY. Backing out after
          mark_bound takes release(n, uid, attempt): unreserve answers BOUND by then.
          A bound pod stays bound for life. bind_many does these steps for many pods at once.
- agent:  transition(RUNNING), then transition(SUCCEEDED | FAILED) and release(n, uid).
- delete: transition(DELETED) and release(n, uid); remove_group_member for a gang's pod.
- cycle (preemption): after transition(uid, RESERVED, ...) as above, preempt(n, reservation,
          victims) instead of reserve: the victims Deleted and their room given back, the
          preemptor's reservation made, one step; announcements.preempted for the victims.
- apply:  put_namespace, put_priority_class, put_pod_disruption_budget and put_pod_group for
          each object of those kinds, before the pods are submitted; the queue
          add_group_members for labeled pods once stored (before they are queued).
- queue:  priority_classes (cached on their version) to admit each submitted pod; the cycle
          namespaces (likewise) before each batch, for namespaceSelectors.
- queue:  a hand-back of attempt v: give_back(uid, n, v, reason=...), then requeue.
- janitor: expire_reserved(timeout_s, lost_after_s) repairs Reserved pods a crash left;
          reconcile(grace_s) gives back room no pod holds.
"""

from __future__ import annotations

from kubus.store.agents import AdmissionView, AgentStore, PodStart, PodStartResult
from kubus.store.leases import Lease, LeaseStore
from kubus.store.nodes import (
    DecodedRecords,
    GPUUsage,
    HeartbeatResult,
    Liveness,
    NodeUsage,
    PutNodeResult,
    node_info_of,
)
from kubus.store.objects import ObjectStore
from kubus.store.permits import PermitState
from kubus.store.podgroups import PodGroupStore
from kubus.store.pods import Binding, BindingResult, GiveBack, Move, PodWrite
from kubus.store.preemption import Eviction, PreemptionStore, PreemptResult
from kubus.store.recovery import Expiry, ExpiryKind, Recovery, RoomLost
from kubus.store.reservations import AttemptResult, ReserveResult

__all__ = [
    "AdmissionView",
    "AttemptResult",
    "Binding",
    "BindingResult",
    "ClusterState",
    "DecodedRecords",
    "Eviction",
    "Expiry",
    "ExpiryKind",
    "GPUUsage",
    "GiveBack",
    "HeartbeatResult",
    "Lease",
    "Liveness",
    "Move",
    "NodeUsage",
    "ObjectStore",
    "PermitState",
    "PodGroupStore",
    "PodStart",
    "PodStartResult",
    "PodWrite",
    "PreemptResult",
    "PutNodeResult",
    "ReserveResult",
    "RoomLost",
    "node_info_of",
]


class ClusterState(Recovery, AgentStore, LeaseStore, PodGroupStore, ObjectStore, PreemptionStore):
    """The shared state of the cluster in one Redis, behind one async API: nodes
    (`kubus.store.nodes`), reservations (`.reservations`), pods (`.pods`), node agents'
    admission (`.agents`), waits on Permit (`.permits`), pod groups and their members
    (`.podgroups`), namespaces, priority classes and disruption budgets (`.objects`),
    preemption (`.preemption`), leases (`.leases`) and recovery (`.recovery`), each a part of it.

    One Redis (a `redis.asyncio.Redis`; for high availability, Redis with replicas behind
    Sentinel or a managed failover endpoint). Safe to share between tasks; processes each build
    their own. The client may or may not decode responses.
    """
