"""The Kubernetes objects kubus schedules: Pod and Node, and the parts of them scheduling reads.

These mirror `k8s.io/api/core/v1` field for field where scheduling uses a field, in snake_case.
They are frozen, slotted dataclasses: built once by `kubus.api.manifests`, never mutated
(scheduling decisions live in the node table, not in these objects). Quantities are already
converted to integers in base units: milli-CPU for `cpu`, bytes for memory and storage, plain
counts for everything else (see `kubus.api.quantity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Resource names with a meaning of their own to the scheduler.
CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"

DEFAULT_SCHEDULER_NAME = "default-scheduler"
"""The scheduler of a pod that names none, and the name of kube's lone default profile."""

ResourceList = dict[str, int]
"""Resource name -> integer quantity (milli-CPU for `cpu`, bytes for memory, counts otherwise)."""


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class SelectorOperator(StrEnum):
    """Operators of NodeSelectorRequirement and LabelSelectorRequirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class PreemptionPolicy(StrEnum):
    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """metadata.ownerReferences[]: an object this one depends on. Scheduling reads the
    controller's (kube's default topology spreading selects a pod by its ReplicationController,
    ReplicaSet or StatefulSet: `kubus.api.workloads`)."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    name: str
    namespace: str = "default"
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    creation_timestamp: float = 0.0
    """Seconds since the epoch; 0.0 when the manifest has none."""
    owner_references: tuple[OwnerReference, ...] = ()
    """metadata.ownerReferences, in manifest order; at most one is the controller."""
    deletion_timestamp: float | None = None
    """metadata.deletionTimestamp in seconds since the epoch: the object is being deleted (a
    pod keeps running, terminating, until its grace period ends); None when it is not."""

    @property
    def controller(self) -> OwnerReference | None:
        """The owner reference with ``controller: true`` (kube's GetControllerOf), or None."""
        for ref in self.owner_references:
            if ref.controller:
                return ref
        return None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)
"""What a cordoned node (spec.unschedulable) is to kube's NodeUnschedulable: a pod that tolerates
it may go there."""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    """None tolerates every effect, as the empty string does in Kubernetes."""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed; a term with neither list matches no node (as in Kubernetes)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()
    """Only `metadata.name` is a valid field key."""


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms ORed."""

    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    required: NodeSelector | None = None
    """requiredDuringSchedulingIgnoredDuringExecution"""
    preferred: tuple[PreferredSchedulingTerm, ...] = ()
    """preferredDuringSchedulingIgnoredDuringExecution"""


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    pod_affinity_term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Used for both podAffinity and podAntiAffinity."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class Affinity:
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # "DoNotSchedule" | "ScheduleAnyway"
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None  # "Honor" | "Ignore"
    node_taints_policy: str | None = None  # "Honor" | "Ignore"
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerPort:
    container_port: int
    host_port: int = 0
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    image: str = ""
    requests: ResourceList = field(default_factory=dict)
    limits: ResourceList = field(default_factory=dict)
    ports: tuple[ContainerPort, ...] = ()
    restart_policy: str | None = None
    """Only for init containers: "Always" makes it a restartable (sidecar) init container."""


@dataclass(frozen=True, slots=True)
class PodSpec:
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    priority: int = 0
    priority_class_name: str = ""
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    node_name: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...] = ()
    overhead: ResourceList = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()
    """Names of spec.schedulingGates; the pod is not scheduled while any remain."""
    unhonoured: tuple[str, ...] = ()
    """Fields the pod sets that kube-scheduler acts on and kubus does not (yet), one line each
    ("spec.volumes[0].persistentVolumeClaim: ..."): never silent, they reach the pod's Warning
    event, `kubus describe` and `kubus simulate`."""


@dataclass(frozen=True, slots=True)
class Pod:
    metadata: ObjectMeta
    spec: PodSpec = field(default_factory=PodSpec)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """`namespace/name`, the pod's identity in messages and logs."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def terminating(self) -> bool:
        """metadata.deletionTimestamp is set: the pod is being deleted (kube's
        `pod.DeletionTimestamp != nil`)."""
        return self.metadata.deletion_timestamp is not None


@dataclass(frozen=True, slots=True)
class ContainerImage:
    names: tuple[str, ...]
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class GPUDevice:
    """One GPU of a node, as carried in the node's `kubus.io/gpus` annotation (see kubus.api.gpus)."""

    index: int
    uuid: str
    model: str
    memory: int
    """Total device memory in bytes."""
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class NodeSpec:
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeStatus:
    capacity: ResourceList = field(default_factory=dict)
    allocatable: ResourceList = field(default_factory=dict)
    """Defaults to capacity when the manifest gives no allocatable."""
    images: tuple[ContainerImage, ...] = ()
    ready: bool = True
    """The Ready condition; True when the manifest lists no conditions."""


@dataclass(frozen=True, slots=True)
class Node:
    metadata: ObjectMeta
    spec: NodeSpec = field(default_factory=NodeSpec)
    status: NodeStatus = field(default_factory=NodeStatus)
    gpus: tuple[GPUDevice, ...] = ()
    """Parsed from the `kubus.io/gpus` annotation; empty for a node without GPUs."""

    @property
    def name(self) -> str:
        return self.metadata.name
