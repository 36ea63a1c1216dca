"""kubus.store: the shared state in Redis (nodes, pods, reservations, bindings, leases).

- `kubus.store.keys`: the key layout (hash-tagged per node, per pod, per lease) and escaping.
- `kubus.store.records`: NodeRecord, PodRecord, Reservation, PodEvent and their encodings.
- `kubus.store.scripts`: the Lua scripts (each atomic change is one) and their return codes.
- `kubus.store.cluster_state`: ClusterState, the async API every service uses, made of one part
  per aggregate: `nodes`, `reservations`, `pods`, `agents` (admission), `permits`, `podgroups`,
  `objects` (Namespaces, PriorityClasses, PodDisruptionBudgets), `preemption`, `leases`, `recovery`
  (over `_core`: the client, keys, scripts).
- `kubus.store.invariants`: check_invariants, no overcommit / no loss / no double binding.
"""

from kubus.store.cluster_state import (
    AdmissionView,
    AttemptResult,
    ClusterState,
    DecodedRecords,
    Eviction,
    Expiry,
    ExpiryKind,
    GiveBack,
    GPUUsage,
    HeartbeatResult,
    Lease,
    Move,
    NodeUsage,
    ObjectStore,
    PermitState,
    PodGroupStore,
    PodStart,
    PodStartResult,
    PodWrite,
    PreemptResult,
    PutNodeResult,
    ReserveResult,
    RoomLost,
    node_info_of,
)
from kubus.store.invariants import check_invariants
from kubus.store.keys import DEFAULT_PREFIX, Keys
from kubus.store.leases import cycle_lease, queue_lease
from kubus.store.preemption import preemption_message, preemptor_of
from kubus.store.records import (
    UNREACHABLE_TAINT_KEY,
    EventType,
    NodeRecord,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
    node_from_record,
)
from kubus.store.scripts import Scripts, StoreCode

__all__ = [
    "DEFAULT_PREFIX",
    "UNREACHABLE_TAINT_KEY",
    "AdmissionView",
    "AttemptResult",
    "ClusterState",
    "DecodedRecords",
    "EventType",
    "Eviction",
    "Expiry",
    "ExpiryKind",
    "GPUUsage",
    "GiveBack",
    "HeartbeatResult",
    "Keys",
    "Lease",
    "Move",
    "NodeRecord",
    "NodeUsage",
    "ObjectStore",
    "PermitState",
    "PodEvent",
    "PodGroupStore",
    "PodPhase",
    "PodRecord",
    "PodStart",
    "PodStartResult",
    "PodWrite",
    "PreemptResult",
    "PutNodeResult",
    "Reservation",
    "ReservationState",
    "ReserveResult",
    "RoomLost",
    "Scripts",
    "StoreCode",
    "check_invariants",
    "cycle_lease",
    "node_from_record",
    "node_info_of",
    "preemption_message",
    "preemptor_of",
    "queue_lease",
]
