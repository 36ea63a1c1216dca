"""Kube-shaped objects made from the store's records: what `kubus get -o json|yaml|jsonpath`
prints, so that `jq .items[]`, kubectl's templates and `kubus apply -f -` read it as they read
an apiserver's answer.

A Pod is its stored manifest (spec as submitted; metadata with name, namespace, uid, labels,
annotations and an RFC 3339 creationTimestamp) with ``spec.nodeName`` once bound and a v1
``status`` (phase, conditions, startTime, reason/message of a failed pod). A Node is made from its
record (capacity and allocatable as kube quantities, a Ready condition). Events are collapsed as
kube's event recorder does: the same type, reason, message and source for one object is one
Event with a count and its first and last timestamps.

A pod's status is a v1 PodStatus (so strict validation takes it back): the kubus phase, where
kube's is coarser, is the ``kubus.io/Phase`` condition's reason; a Reserved pod's node is its
``nominatedNodeName``; the GPUs a bound pod holds are its `kubus.io/gpu-devices` annotation, as
kubus's binder pins them in cluster mode. `same_pod` sets all that the server writes aside, so
`kubus get pod X -o yaml | kubus apply -f -` is unchanged, as kubectl's apply ignores status. A
node's extras (requests in use, GPUs and their memory in use) are under ``status.kubus``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kubus.api.gpus import GPU_DEVICES_ANNOTATION, format_gpu_devices
from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject, JSONValue
from kubus.kernels.nodeinfo import NodeInfo
from kubus.store.permits import PermitState
from kubus.store.records import NodeRecord, PodEvent, PodPhase, PodRecord

__all__ = [
    "CollapsedEvent",
    "collapse_events",
    "event_object",
    "kube_list",
    "kube_quantity",
    "node_object",
    "pod_object",
    "rfc3339",
    "same_pod",
]

KUBE_PHASES = {
    PodPhase.PENDING: "Pending",
    PodPhase.RESERVED: "Pending",
    PodPhase.BOUND: "Pending",
    PodPhase.RUNNING: "Running",
    PodPhase.SUCCEEDED: "Succeeded",
    PodPhase.FAILED: "Failed",
    PodPhase.DELETED: "Failed",
}
"""kube's pod phase for each kubus phase: a reserved or bound pod has not started yet (Pending,
as a kube pod between binding and its kubelet's start); a deleted one ran no more."""

_ON_A_NODE = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.DELETED)
"""Phases whose node (when there is one) is the pod's spec.nodeName: bound there, as kube's
binding sets it. A Reserved pod's node is only a reservation (status.kubus.reservedNode)."""


def rfc3339(t: float) -> str | None:
    """Seconds since the epoch as kube prints a time: 2024-05-01T12:00:00Z (UTC, whole
    seconds); None for 0 (unknown)."""
    if not t:
        return None
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_quantity(resource: str, amount: int) -> str:
    """A base-unit amount as kube prints it: cpu in cores or millicores ("8", "500m"), bytes with
    the largest binary suffix that divides them ("32Gi", "1536Mi"), anything else as a number."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: kube_quantity(r, q) for r, q in sorted(amounts.items())}


def kube_list(items: Sequence[JSONMapping]) -> JSONObject:
    """A v1 List of ``items``, as kubectl prints several objects."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}


# ---- pods ----------------------------------------------------------------------------------------


def _manifest(record: PodRecord) -> JSONObject:
    try:
        doc = codec.loads(record.manifest)
    except ValueError:
        doc = None
    return doc if isinstance(doc, dict) else {}


def _condition(kind: str, status: bool, at: float, reason: str = "", message: str = "") -> JSONObject:
    out: JSONObject = {"type": kind, "status": "True" if status else "False"}
    out["lastProbeTime"] = None
    out["lastTransitionTime"] = rfc3339(at)
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _last(events: Iterable[PodEvent], *reasons: str) -> float:
    """When the last of ``events`` with one of ``reasons`` happened; 0 when none did."""
    return max((e.time for e in events if e.reason in reasons), default=0.0)


def pod_object(
    record: PodRecord, *, events: Sequence[PodEvent] = (), waiting: PermitState | None = None
) -> JSONObject:
    """The v1 Pod of a record: its stored manifest, ``spec.nodeName`` once bound, and a kube
    ``status`` computed from the record (and its ``events``, for the conditions' times and
    startTime, when given). Never raises: a manifest that no longer reads gives the record's
    names only."""
    doc = _manifest(record)
    metadata = dict(doc.get("metadata") or {})
    metadata.setdefault("name", record.name)
    metadata.setdefault("namespace", record.namespace)
    metadata.setdefault("uid", record.uid)
    if not metadata.get("creationTimestamp") and record.created_at:
        metadata["creationTimestamp"] = rfc3339(record.created_at)
    spec = dict(doc.get("spec") or {})
    if record.node and record.phase in _ON_A_NODE and not spec.get("nodeName"):
        spec["nodeName"] = record.node
    if record.gpu_devices and record.phase.on_node:
        # as kubus's binder pins them on a bound pod in cluster mode
        annotations = dict(metadata.get("annotations") or {})
        annotations.setdefault(GPU_DEVICES_ANNOTATION, format_gpu_devices(record.gpu_devices))
        metadata["annotations"] = annotations
    obj: JSONObject = {**doc, "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    obj["status"] = _pod_status(record, events, waiting)
    return obj


def _pod_status(record: PodRecord, events: Sequence[PodEvent], waiting: PermitState | None) -> JSONObject:
    phase = record.phase
    scheduled_at = _last(events, "Scheduled") or record.updated_at
    started_at = _last(events, "Started")
    conditions: list[JSONObject] = []
    if phase in _ON_A_NODE and record.node:
        conditions.append(_condition("PodScheduled", True, scheduled_at))
    elif phase is PodPhase.PENDING and record.reason:
        at = _last(events, "FailedScheduling") or record.updated_at
        conditions.append(_condition("PodScheduled", False, at, record.reason, record.message))
    if phase is PodPhase.RUNNING:
        at = started_at or record.updated_at
        conditions += [_condition(kind, True, at) for kind in ("Initialized", "Ready", "ContainersReady")]
    elif phase in (PodPhase.SUCCEEDED, PodPhase.FAILED) and record.node:
        conditions += [
            _condition(kind, False, record.updated_at, "PodCompleted") for kind in ("Ready", "ContainersReady")
        ]
    conditions.append(_condition(PHASE_CONDITION, True, record.updated_at, str(phase), _phase_message(record, waiting)))
    status: JSONObject = {"phase": KUBE_PHASES[phase], "conditions": conditions}
    if phase in (PodPhase.FAILED, PodPhase.DELETED) and record.reason:
        status["reason"] = record.reason
        if record.message:
            status["message"] = record.message
    if phase is PodPhase.RESERVED and record.node:
        status["nominatedNodeName"] = record.node
    if started_at and phase in (PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED):
        status["startTime"] = rfc3339(started_at)
    return status


PHASE_CONDITION = "kubus.io/Phase"
"""The pod condition that carries the kubus phase (its reason: Pending, Reserved, Bound, Running,
Succeeded, Failed, Deleted) where kube's phase is coarser, with the scheduler, attempts and a
Permit wait in its message. A condition, not a field of kubus's own: status stays v1 PodStatus,
which strict validation (`kubus apply`) checks."""


def _phase_message(record: PodRecord, waiting: PermitState | None) -> str:
    parts = [f"scheduler {record.profile}", f"{record.attempts} scheduling attempt(s)"]
    if waiting is not None:
        parts.append(f"waiting on Permit: {', '.join(sorted(waiting.pending))}")
    if record.reason and record.phase is not PodPhase.PENDING:
        parts.append(f"last failure: {record.reason}")
    return "; ".join(parts)


_SERVER_METADATA = ("creationTimestamp", "resourceVersion", "generation", "managedFields", "selfLink")
"""Metadata the server sets: an applied manifest that differs from the stored one only there is
the same pod."""


def _comparable(doc: JSONValue, node: str, devices: str) -> JSONValue:
    if not isinstance(doc, dict):
        return doc
    out = {k: v for k, v in doc.items() if k != "status"}
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and devices and annotations.get(GPU_DEVICES_ANNOTATION) == devices:
            annotations = {k: v for k, v in annotations.items() if k != GPU_DEVICES_ANNOTATION}
            metadata["annotations"] = annotations
        if metadata.get("annotations") == {}:
            del metadata["annotations"]
        out["metadata"] = metadata
    spec = out.get("spec")
    if isinstance(spec, dict) and node and spec.get("nodeName") == node:
        out["spec"] = {k: v for k, v in spec.items() if k != "nodeName"}
    return out


def same_pod(stored: bytes, applied: bytes, *, node: str = "", devices: Sequence[int] = ()) -> bool:
    """Whether ``applied`` (a manifest as the queue would store it) is the pod ``stored``
    already is, setting aside what the server writes: status, creationTimestamp and the like,
    a spec.nodeName that names the node the pod is bound to (``node``; "" for none) and a
    `kubus.io/gpu-devices` that names the GPUs it holds (``devices``). So `kubus get pod X -o
    yaml | kubus apply -f -` is unchanged."""
    if stored == applied:
        return True
    held = format_gpu_devices(tuple(devices)) if devices else ""
    try:
        return bool(_comparable(codec.loads(stored), node, held) == _comparable(codec.loads(applied), node, held))
    except ValueError:
        return False


# ---- nodes ---------------------------------------------------------------------------------------


def node_object(record: NodeRecord, info: NodeInfo | None = None, *, now: float | None = None) -> JSONObject:
    """The v1 Node of a record, with what the reservations on it use (``info``) under
    status.kubus. The Ready condition says Unknown for a node marked unreachable, as kube's
    node lifecycle controller does."""
    metadata: JSONObject = {"name": record.name}
    if record.uid:
        metadata["uid"] = record.uid
    created = rfc3339(record.created_at)
    if created:
        metadata["creationTimestamp"] = created
    if record.labels:
        metadata["labels"] = dict(record.labels)
    if record.annotations:
        metadata["annotations"] = dict(record.annotations)
    spec: JSONObject = {}
    if record.unschedulable:
        spec["unschedulable"] = True
    if record.taints:
        spec["taints"] = [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": str(t.effect)} for t in record.taints
        ]
    if record.unreachable:
        ready = {"status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
    elif record.ready:
        ready = {"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    else:
        ready = {"status": "False", "reason": "KubeletNotReady", "message": "the node says it is not ready"}
    condition = {"type": "Ready", **ready, "lastHeartbeatTime": rfc3339(record.heartbeat or 0.0)}
    status: JSONObject = {
        "capacity": _quantities(record.capacity),
        "allocatable": _quantities(record.allocatable),
        "conditions": [condition],
    }
    if record.images:
        status["images"] = [{"names": list(i.names), "sizeBytes": i.size_bytes} for i in record.images]
    kubus: JSONObject = {}
    if info is not None:
        kubus["requested"] = _quantities({r: q for r, q in info.requested.items() if q})
        kubus["pods"] = len(info.pods)
    if record.gpus:
        gpus = []
        for i, g in enumerate(record.gpus):
            gpu: JSONObject = {"index": g.index, "uuid": g.uuid, "model": g.model, "memory": g.memory}
            gpu["healthy"] = g.healthy
            if info is not None and i < len(info.gpu_free_memory):
                gpu["memoryUsed"] = g.memory - info.gpu_free_memory[i]
                gpu["pods"] = info.gpu_pod_count[i]
            gpus.append(gpu)
        kubus["gpus"] = gpus
    if record.heartbeat:
        kubus["heartbeatAgeSeconds"] = round((time.time() if now is None else now) - record.heartbeat, 3)
    if kubus:
        status["kubus"] = kubus
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec, "status": status}


# ---- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollapsedEvent:
    """Identical events of one pod (type, reason, message, source) as one, counted, as kube's
    event recorder keeps them."""

    first: float
    last: float
    count: int
    type: str
    reason: str
    message: str
    source: str


def collapse_events(events: Iterable[PodEvent]) -> list[CollapsedEvent]:
    """``events`` (one pod's) with the identical ones counted as one, ordered by when each was
    last seen (as kubectl describe sorts them)."""
    seen: dict[tuple[str, str, str, str], CollapsedEvent] = {}
    for e in events:
        key = (str(e.type), e.reason, e.message, e.source)
        was = seen.get(key)
        if was is None:
            seen[key] = CollapsedEvent(e.time, e.time, 1, *key)
        else:
            seen[key] = CollapsedEvent(min(was.first, e.time), max(was.last, e.time), was.count + 1, *key)
    return sorted(seen.values(), key=lambda c: (c.last, c.first))


def event_object(event: CollapsedEvent, pod: PodRecord) -> JSONObject:
    """The v1 Event of a (collapsed) pod event, named as kube names them: ``<pod>.<hex time>``."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod.name}.{int(event.first * 1e9):x}",
            "namespace": pod.namespace,
            "creationTimestamp": rfc3339(event.first),
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "source": {"component": event.source} if event.source else {},
        "reportingComponent": event.source,
        "firstTimestamp": rfc3339(event.first),
        "lastTimestamp": rfc3339(event.last),
        "count": event.count,
    }
