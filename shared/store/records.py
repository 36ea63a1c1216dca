"""What kubus stores in Redis: nodes, pods, reservations and pod events, as frozen dataclasses.

Each record knows its own encoding (`kubus.core.codec` JSON, or the fields of a Redis hash) and how to
decode it back; the key layout is in `kubus.store.keys`, the atomic changes in
`kubus.store.scripts`. Quantities are integers in base units (milli-CPU, bytes), as everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from kubus.api.attempts import NO_ATTEMPT, Attempt, attempt_arg, read_attempt
from kubus.api.gpus import GPURequest, format_gpu_devices
from kubus.api.manifests import HOSTNAME_LABEL, parse_pod
from kubus.api.namespaces import NAMESPACE_NAME_LABEL, namespace_labels
from kubus.api.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    Affinity,
    ContainerImage,
    GPUDevice,
    Node,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    Taint,
    TaintEffect,
)
from kubus.api.pod_affinity import (
    AffinityTerm,
    PodAffinityTerms,
    pod_affinity_manifest,
    read_pod_affinity_manifest,
    selector_manifest,
)
from kubus.core import codec
from kubus.core.codec import text
from kubus.kernels.nodeinfo import PodInfo
from kubus.store._core import RedisHash

UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
"""The taint kube's node lifecycle controller puts on a node that stopped reporting. A node
carrying it (or marked with `ClusterState.mark_unreachable`) takes no new reservations."""


class PodPhase(StrEnum):
    """Where an accepted pod is. Exactly one at a time; see `kubus.store.scripts` for the moves."""

    PENDING = "Pending"
    """Waiting to be scheduled; `reason`/`message` hold the last failure, if any."""
    RESERVED = "Reserved"
    """A scheduling cycle reserved room on `node`; not yet bound."""
    BOUND = "Bound"
    """Bound to `node` (exactly once in the pod's life)."""
    RUNNING = "Running"
    """The node's agent admitted and started it."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETED = "Deleted"

    @property
    def terminal(self) -> bool:
        return self in (PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.DELETED)

    @property
    def on_node(self) -> bool:
        """Whether a pod in this phase holds a reservation on its node."""
        return self in (PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING)


class ReservationState(StrEnum):
    RESERVED = "reserved"
    """Held for a pod a cycle placed; `unreserve` gives it back."""
    BOUND = "bound"
    """The binder is binding or has bound the pod: only `release` gives it back."""


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


def _blob(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def _str_dict(raw: RedisHash) -> dict[str, Any]:  # Any: the hash's values, decoded as read
    return {text(k): v for k, v in raw.items()}


def _devices(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(",") if p.strip()) if text else ()


# ---- nodes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as stored: every field `kubus.api.objects.Node` has, plus bookkeeping.

    `to_node()` rebuilds the Node (with the unreachable taints added when `unreachable`).
    """

    name: str
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    creation_timestamp: float = 0.0
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    images: tuple[ContainerImage, ...] = ()
    ready: bool = True
    gpus: tuple[GPUDevice, ...] = ()
    generation: int = 0
    """Bumped by every put_node that changed something (and by mark_unreachable)."""
    heartbeat: float | None = None
    """Seconds since the epoch of the node's last heartbeat; None when it never sent one."""
    unreachable: bool = False
    """The node lifecycle marked the node lost: no new reservations (NODE_GONE)."""
    manifest: bytes | None = None
    """The node's manifest as given to put_node (JSON or YAML bytes), for display only."""
    registered: float | None = None
    """Seconds since the epoch when a put_node first stored the node (kept by every later one:
    agent restarts and re-registrations); None when not stored yet."""

    @property
    def created_at(self) -> float:
        """When the node was created, seconds since the epoch: its own
        metadata.creationTimestamp (a real apiserver's node), else when the store first
        registered it (a simulated or manifest node); 0 when neither is known."""
        return self.creation_timestamp or self.registered or 0.0

    @classmethod
    def of(cls, node: Node, manifest: bytes | None = None) -> NodeRecord:
        meta = node.metadata
        return cls(
            name=meta.name,
            uid=meta.uid,
            labels=dict(meta.labels),
            annotations=dict(meta.annotations),
            creation_timestamp=meta.creation_timestamp,
            unschedulable=node.spec.unschedulable,
            taints=node.spec.taints,
            capacity=dict(node.status.capacity),
            allocatable=dict(node.status.allocatable),
            images=node.status.images,
            ready=node.status.ready,
            gpus=node.gpus,
            unreachable=any(t.key == UNREACHABLE_TAINT_KEY for t in node.spec.taints),
            manifest=manifest,
        )

    def to_node(self) -> Node:
        """The Node scheduling sees. An unreachable node gets kube's unreachable taints
        (NoSchedule, NoExecute) if it lacks them, and is not ready."""
        taints = self.taints
        if self.unreachable:
            have = {(t.key, t.effect) for t in taints}
            taints = taints + tuple(
                Taint(UNREACHABLE_TAINT_KEY, "", effect)
                for effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
                if (UNREACHABLE_TAINT_KEY, effect) not in have
            )
        return Node(
            metadata=ObjectMeta(
                name=self.name,
                namespace="",
                uid=self.uid,
                labels=dict(self.labels),
                annotations=dict(self.annotations),
                creation_timestamp=self.creation_timestamp,
            ),
            spec=NodeSpec(unschedulable=self.unschedulable, taints=taints),
            status=NodeStatus(
                capacity=dict(self.capacity),
                allocatable=dict(self.allocatable),
                images=self.images,
                ready=self.ready and not self.unreachable,
            ),
            gpus=self.gpus,
        )

    def encode_static(self) -> bytes:
        """JSON of the fields that describe the node (not generation, heartbeat, manifest)."""
        return codec.dumps(
            {
                "name": self.name,
                "uid": self.uid,
                "labels": self.labels,
                "annotations": self.annotations,
                "creation_timestamp": self.creation_timestamp,
                "unschedulable": self.unschedulable,
                "taints": [[t.key, t.value, str(t.effect)] for t in self.taints],
                "capacity": self.capacity,
                "allocatable": self.allocatable,
                "images": [[list(i.names), i.size_bytes] for i in self.images],
                "ready": self.ready,
                "gpus": [[g.index, g.uuid, g.model, g.memory, g.healthy] for g in self.gpus],
            }
        )

    HASH_FIELDS: ClassVar[tuple[str, ...]] = (
        "record",
        "generation",
        "heartbeat",
        "unreachable",
        "manifest",
        "registered",
    )
    """The fields of a node's info hash `from_hash` reads; the rest (allocatable and GPU fields,
    tens of them on a GPU node) are the Lua scripts'. Read these, not the whole hash."""

    @classmethod
    def from_hash(cls, raw: RedisHash) -> NodeRecord:
        """Decode a node info hash (HGETALL, or HMGET of `HASH_FIELDS` as `hash_fields` makes
        it). Raises KeyError/ValueError when malformed."""
        h = _str_dict(raw)
        d = codec.loads(h["record"])
        heartbeat = text(h.get("heartbeat"))
        registered = text(h.get("registered"))
        return cls(
            name=d["name"],
            uid=d["uid"],
            labels=d["labels"],
            annotations=d["annotations"],
            creation_timestamp=float(d["creation_timestamp"]),
            unschedulable=bool(d["unschedulable"]),
            taints=tuple(Taint(k, v, TaintEffect(e)) for k, v, e in d["taints"]),
            capacity={k: int(v) for k, v in d["capacity"].items()},
            allocatable={k: int(v) for k, v in d["allocatable"].items()},
            images=tuple(ContainerImage(tuple(n), int(s)) for n, s in d["images"]),
            ready=bool(d["ready"]),
            gpus=tuple(GPUDevice(int(i), u, m, int(mem), bool(ok)) for i, u, m, mem, ok in d["gpus"]),
            generation=int(text(h.get("generation")) or 0),
            heartbeat=float(heartbeat) if heartbeat else None,
            unreachable=text(h.get("unreachable")) == "1",
            manifest=_blob(h.get("manifest")),
            registered=float(registered) if registered else None,
        )


def hash_fields(values: Sequence[bytes | str | None]) -> dict[str, bytes | str]:
    """The reply of HMGET of `NodeRecord.HASH_FIELDS` as the mapping `from_hash` reads ({}:
    no such node)."""
    return {field: v for field, v in zip(NodeRecord.HASH_FIELDS, values, strict=True) if v is not None}


def node_from_record(record: NodeRecord) -> Node:
    """The kubus.api Node a NodeRecord describes (see NodeRecord.to_node)."""
    return record.to_node()


# ---- pods --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRecord:
    """An accepted pod: its manifest, where it is (phase, node) and why (reason, message)."""

    uid: str
    namespace: str
    name: str
    profile: str
    """spec.schedulerName: the scheduler profile that owns the pod."""
    manifest: bytes
    """The pod's manifest as submitted (JSON bytes); `pod()` parses it."""
    phase: PodPhase = PodPhase.PENDING
    node: str = ""
    """The node it is reserved on, bound to or ran on; "" while pending."""
    gpu_devices: tuple[int, ...] = ()
    attempts: int = 0
    """Scheduling attempts so far: each transition(..., count_attempt=True) adds one."""
    reason: str = ""
    """The last failure's reason ("Unschedulable", "NodeLost", ...); kept after it moves on."""
    message: str = ""
    """The last failure's message ("0/5 nodes are available: ...")."""
    version: int = 0
    """Bumped by every change; 1 once stored. Compare-and-set on it with transition()."""
    bindings: int = 0
    """How many times bind_pod bound it: 0 or 1 (more would be a double binding)."""
    created_at: float = 0.0
    updated_at: float = 0.0
    ends_at: float = 0.0
    """Running: when its agent will finish it (seconds since the epoch), as the agent said when it
    started the pod; 0 when it runs until deleted or the agent cannot tell. What-ifs read it
    ("fits when pods finish")."""

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: Pod, manifest: bytes, *, now: float = 0.0) -> PodRecord:
        """A new Pending record for a parsed pod and the manifest it was parsed from."""
        return cls(
            uid=pod.metadata.uid,
            namespace=pod.namespace,
            name=pod.name,
            profile=pod.spec.scheduler_name,
            manifest=manifest,
            created_at=now,
            updated_at=now,
        )

    def pod(self) -> Pod:
        """Parse the manifest. Raises ManifestError (or a DecodeError) for a bad one."""
        return parse_pod(codec.loads(self.manifest))

    def to_fields(self) -> dict[str, str | bytes]:
        """The Redis hash fields of this record."""
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "profile": self.profile,
            "manifest": self.manifest,
            "phase": str(self.phase),
            "node": self.node,
            "gpu_devices": format_gpu_devices(self.gpu_devices),
            "attempts": str(self.attempts),
            "reason": self.reason,
            "message": self.message,
            "version": str(self.version),
            "bindings": str(self.bindings),
            "created_at": repr(self.created_at),
            "updated_at": repr(self.updated_at),
            "ends_at": repr(self.ends_at),
        }

    @classmethod
    def from_hash(cls, raw: RedisHash) -> PodRecord:
        """Decode a pod record hash (HGETALL). Raises KeyError/ValueError when malformed."""
        h = _str_dict(raw)
        return cls(
            uid=text(h["uid"]),
            namespace=text(h["namespace"]),
            name=text(h["name"]),
            profile=text(h["profile"]),
            manifest=_blob(h.get("manifest")) or b"",
            phase=PodPhase(text(h["phase"])),
            node=text(h.get("node")),
            gpu_devices=_devices(text(h.get("gpu_devices"))),
            attempts=int(text(h.get("attempts")) or 0),
            reason=text(h.get("reason")),
            message=text(h.get("message")),
            version=int(text(h.get("version")) or 0),
            bindings=int(text(h.get("bindings")) or 0),
            created_at=float(text(h.get("created_at")) or 0.0),
            updated_at=float(text(h.get("updated_at")) or 0.0),
            ends_at=float(text(h.get("ends_at")) or 0.0),
        )


# ---- reservations ------------------------------------------------------------------------------

_FIRST_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE)


def ordered_requests(requests: Mapping[str, int]) -> list[tuple[str, int]]:
    """kube's check order: cpu, memory, ephemeral-storage, then the rest by name; no `pods`."""
    first = [(r, requests[r]) for r in _FIRST_RESOURCES if r in requests]
    rest = sorted((r, q) for r, q in requests.items() if r not in _FIRST_RESOURCES and r != PODS)
    return first + rest


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room a pod holds on a node: what `reserve` checks and accounts, atomically.

    Accounting follows `kubus.kernels.nodeinfo` exactly: every resource of `requests` is
    added to the node's usage, `pods` counts one per reservation, and each device of
    `gpu_devices` is held with `gpu_memory` bytes (shared) or all of its memory (whole), as
    `gpu_memory_taken` says. `pod_info()` gives back a PodInfo NodeInfo accounts identically.
    """

    pod_uid: str
    pod_key: str
    """`namespace/name`."""
    node: str
    profile: str
    requests: dict[str, int]
    """kube's PodRequests (`pod_requests`), without `pods`."""
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    host_ports: tuple[tuple[str, str, int], ...] = ()
    """(hostIP, protocol, hostPort) as PodInfo has them."""
    gpu_devices: tuple[int, ...] = ()
    """Indices of the node's GPUs the pod holds, sorted."""
    gpu_memory: int = 0
    """The GPU request's memory per device: the slice (shared) or the minimum size (whole)."""
    gpu_shared: bool = False
    gpu_pick: str = ""
    """How GPUFit picked `gpu_devices` (binpack, spread), when RESERVE may pick again: another
    profile's cycle may have taken those devices since, while others on the node can take the
    pod. Empty: exactly these devices (preemption, a pod that names them)."""
    gpu_models: tuple[str, ...] = ()
    """The GPU models the pod accepts (any when empty), for RESERVE's new pick."""
    token: int = 0
    """The fencing token of the cycle that reserved (its lease); 0 = unfenced."""
    attempt: Attempt = NO_ATTEMPT
    """Which scheduling attempt made it (`Attempt`): reserve is idempotent for the same attempt,
    refuses another attempt's second reservation of the pod on the node, and
    unreserve/mark_bound can insist on it, so racing duplicates never undo each other's work.
    NO_ATTEMPT: a placement no attempt of kubus made (a pod bound by another scheduler)."""
    ignored: tuple[str, ...] = ()
    """Requested resources not to check (NodeResourcesFit's ignoredResources); still counted."""
    labels: dict[str, str] = field(default_factory=dict)
    """The pod's labels, for plugins that look at the pods on a node."""
    affinity: Affinity | None = None
    """The pod's podAffinity / podAntiAffinity (not its node affinity), for the same plugins:
    InterPodAffinity checks an incoming pod against the terms of the pods already placed."""
    priority: int = 0
    """The pod's resolved priority: preemption evicts only pods of lower priority."""
    namespace_labels: dict[str, str] = field(default_factory=dict)
    """Labels of the pod's namespace (kube's kubernetes.io/metadata.name left implied), for the
    namespaceSelectors of RESERVE's anti-affinity check; empty when it has no others."""
    reserved_at: float = 0.0
    deletion_timestamp: float | None = None
    """The pod's metadata.deletionTimestamp (seconds since the epoch): it is terminating on the
    node, still holding its room (cluster mode: deleted gracefully, running out its grace
    period); None when it is not. Stored only when set, so older JSON reads as not terminating."""
    state: ReservationState = ReservationState.RESERVED
    """Not part of the stored JSON: Redis keeps it in the node's bound set."""

    @property
    def namespace(self) -> str:
        return self.pod_key.partition("/")[0]

    @property
    def pod_name(self) -> str:
        return self.pod_key.partition("/")[2]

    @property
    def gpu_request(self) -> GPURequest | None:
        if not self.gpu_devices:
            return None
        return GPURequest(count=len(self.gpu_devices), memory=self.gpu_memory, models=(), shared=self.gpu_shared)

    @classmethod
    def of(
        cls,
        pod_info: PodInfo,
        node: str,
        *,
        profile: str | None = None,
        token: int = 0,
        attempt: Attempt = NO_ATTEMPT,
        ignored: Iterable[str] = (),
        now: float | None = None,
        namespace_labels: Mapping[str, str] | None = None,
        gpu_pick: str = "",
    ) -> Reservation:
        """The reservation for a pod placed on `node` (pod_info.gpu_devices already picked).

        `profile` defaults to the pod's schedulerName, `attempt` to NO_ATTEMPT (a placement no
        attempt made: a reserve is then idempotent for any other such), `now` to the wall clock;
        `gpu_pick` (GPUFit's mode) lets RESERVE pick other devices when these are taken.
        Raises ValueError when the pod asks for
        GPUs and the number of picked devices differs from its request, or devices repeat.
        """
        pod = pod_info.pod
        devices = tuple(sorted(pod_info.gpu_devices))
        gpu = pod_info.gpu
        if gpu is None:
            if devices:
                raise ValueError(f"pod {pod.key} asks for no GPU but holds devices {devices}")
        elif len(devices) != gpu.count or len(set(devices)) != len(devices):
            raise ValueError(f"pod {pod.key} asks for {gpu.count} GPU(s), got devices {devices}")
        return cls(
            pod_uid=pod.metadata.uid,
            pod_key=pod.key,
            node=node,
            profile=pod.spec.scheduler_name if profile is None else profile,
            requests={r: q for r, q in pod_info.requests.items() if r != PODS},
            non_zero_cpu=pod_info.non_zero_cpu,
            non_zero_memory=pod_info.non_zero_memory,
            host_ports=tuple(pod_info.host_ports),
            gpu_devices=devices,
            gpu_memory=gpu.memory if gpu is not None else 0,
            gpu_shared=gpu.shared if gpu is not None else False,
            gpu_pick=gpu_pick if devices else "",
            gpu_models=tuple(gpu.models) if gpu is not None and devices and gpu_pick else (),
            token=token,
            attempt=attempt,
            ignored=tuple(sorted(set(ignored))),
            labels=dict(pod.metadata.labels),
            affinity=_pod_affinity_only(pod),
            priority=pod.spec.priority,
            namespace_labels={k: v for k, v in (namespace_labels or {}).items() if k != NAMESPACE_NAME_LABEL},
            reserved_at=time.time() if now is None else now,
            deletion_timestamp=pod.metadata.deletion_timestamp,
        )

    def pod_info(self, pod: Pod | None = None) -> PodInfo:
        """A PodInfo that NodeInfo accounts exactly as Redis does for this reservation.

        Without `pod`, the Pod in it is a stand-in carrying only name, namespace, uid and
        labels (enough for every node-level plugin); pass the parsed pod for the real one.
        """
        if pod is None:
            pod = Pod(
                metadata=ObjectMeta(
                    name=self.pod_name,
                    namespace=self.namespace,
                    uid=self.pod_uid,
                    labels=dict(self.labels),
                    deletion_timestamp=self.deletion_timestamp,
                ),
                spec=PodSpec(affinity=self.affinity, priority=self.priority),
            )
        return PodInfo(
            pod=pod,
            requests=dict(self.requests),
            non_zero_cpu=self.non_zero_cpu,
            non_zero_memory=self.non_zero_memory,
            host_ports=self.host_ports,
            gpu=self.gpu_request,
            gpu_devices=self.gpu_devices,
            affinity=PodAffinityTerms.of(pod),
            start_time=self.reserved_at,
        )

    def encode(self) -> bytes:
        """The JSON the Lua scripts read (requests as ordered pairs; no `state`)."""
        return codec.dumps(self.to_json())

    def to_json(self) -> codec.JSONObject:
        """`encode`'s object, before it is serialized (a cycle's notice carries several).

        Keep "gpu_devices" and "attempt" before "labels" and "affinity" (the only objects whose
        keys a pod chooses): the Lua scripts find the first of each in the JSON text without
        decoding it (RESERVE's new devices, `attempt_of`)."""
        return {
            "pod_uid": self.pod_uid,
            "pod_key": self.pod_key,
            "node": self.node,
            "profile": self.profile,
            "requests": ordered_requests(self.requests),
            "non_zero_cpu": self.non_zero_cpu,
            "non_zero_memory": self.non_zero_memory,
            "host_ports": [list(p) for p in self.host_ports],
            "gpu_devices": list(self.gpu_devices),
            "gpu_memory": self.gpu_memory,
            "gpu_shared": self.gpu_shared,
            "token": self.token,
            "attempt": attempt_arg(self.attempt),
            "ignored": list(self.ignored),
            "labels": self.labels,
            "affinity": (
                pod_affinity_manifest(Pod(ObjectMeta(""), PodSpec(affinity=self.affinity)))
                if self.affinity is not None
                else {}
            ),
            "reserved_at": self.reserved_at,
            "priority": self.priority,
            **self._anti_affinity_guard(),
            **({"gpu_pick": self.gpu_pick, "gpu_models": list(self.gpu_models)} if self.gpu_pick else {}),
            **({"deleted_at": self.deletion_timestamp} if self.deletion_timestamp is not None else {}),
        }

    def anti_affinity_on_host(self) -> tuple[AffinityTerm, ...]:
        """The pod's required anti-affinity terms on kubernetes.io/hostname: what RESERVE
        checks between the pods of one node."""
        if self.affinity is None or self.affinity.pod_anti_affinity is None:
            return ()  # the common case, without building a PodInfo to find out
        terms = self.pod_info().affinity
        if terms is None:
            return ()
        return tuple(t for t in terms.required_anti_affinity if t.topology_key == HOSTNAME_LABEL)

    def namespace_labels_or_default(self) -> Mapping[str, str]:
        return namespace_labels({self.namespace: self.namespace_labels}, self.namespace)

    def _anti_affinity_guard(self) -> codec.JSONObject:
        """What RESERVE's Lua checks: the required anti-affinity terms on the hostname topology
        (resolved as kube's AffinityTerm: namespaces, merged selector, namespaceSelector) and the
        namespace's labels. Omitted when empty, so most reservations carry nothing more."""
        out: codec.JSONObject = {}
        if self.namespace_labels:
            out["nsl"] = self.namespace_labels
        host = self.anti_affinity_on_host()
        if host:
            out["anti_host"] = [
                {
                    "ns": sorted(t.namespaces),
                    "sel": selector_manifest(t.selector),
                    "nss": selector_manifest(t.namespace_selector),
                }
                for t in host
            ]
        return out

    @classmethod
    def decode(cls, data: bytes | str, *, bound: bool = False) -> Reservation:
        """Parse `encode()`'s JSON. Raises ValueError/KeyError when malformed."""
        return cls.from_json(codec.loads(data), bound=bound)

    @classmethod
    def from_json(cls, d: codec.JSONMapping, *, bound: bool = False) -> Reservation:
        """`to_json`'s object back. Raises ValueError/KeyError/TypeError when malformed."""
        return cls(
            pod_uid=d["pod_uid"],
            pod_key=d["pod_key"],
            node=d["node"],
            profile=d["profile"],
            requests={r: int(q) for r, q in d["requests"]},
            non_zero_cpu=int(d["non_zero_cpu"]),
            non_zero_memory=int(d["non_zero_memory"]),
            host_ports=tuple((ip, proto, int(port)) for ip, proto, port in d["host_ports"]),
            gpu_devices=tuple(int(i) for i in d["gpu_devices"]),
            gpu_memory=int(d["gpu_memory"]),
            gpu_shared=bool(d["gpu_shared"]),
            gpu_pick=str(d.get("gpu_pick", "")),
            gpu_models=tuple(str(m) for m in d.get("gpu_models", ())),
            token=int(d["token"]),
            attempt=read_attempt(d.get("attempt")),
            ignored=tuple(d["ignored"]),
            labels=dict(d["labels"]),
            affinity=read_pod_affinity_manifest(d.get("affinity") or {}, f"reservation of {d['pod_key']}"),
            namespace_labels=dict(d.get("nsl") or {}),
            priority=int(d.get("priority", 0)),
            reserved_at=float(d["reserved_at"]),
            deletion_timestamp=float(d["deleted_at"]) if d.get("deleted_at") is not None else None,
            state=ReservationState.BOUND if bound else ReservationState.RESERVED,
        )


def _pod_affinity_only(pod: Pod) -> Affinity | None:
    a = pod.spec.affinity
    if a is None or (a.pod_affinity is None and a.pod_anti_affinity is None):
        return None
    return Affinity(pod_affinity=a.pod_affinity, pod_anti_affinity=a.pod_anti_affinity)


# ---- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One line of a pod's history, as `kubectl describe` shows events."""

    time: float
    """Seconds since the epoch."""
    type: EventType
    reason: str
    """CamelCase, as kube's: Scheduled, FailedScheduling, Bound, Started, Rejected, ..."""
    message: str = ""
    source: str = ""
    """The service (and replica) that recorded it."""

    def encode(self) -> bytes:
        return codec.dumps(
            {
                "time": self.time,
                "type": str(self.type),
                "reason": self.reason,
                "message": self.message,
                "source": self.source,
            }
        )

    @classmethod
    def decode(cls, data: bytes | str) -> PodEvent:
        d = codec.loads(data)
        return cls(
            time=float(d["time"]),
            type=EventType(d["type"]),
            reason=d["reason"],
            message=d.get("message", ""),
            source=d.get("source", ""),
        )
