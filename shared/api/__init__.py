"""kubus.api: the Kubernetes objects kubus schedules, and reading them from manifests.

- `kubus.api.objects`: Pod, Node and their parts (frozen dataclasses, quantities as integers).
- `kubus.api.quantity`: Kubernetes quantities ("500m", "1.5Gi", "1e3") parsed exactly.
- `kubus.api.manifests`: YAML/JSON manifests -> Pods, Nodes, PodGroups, Namespaces, PriorityClasses,
  PodDisruptionBudgets, Services, ReplicationControllers, ReplicaSets and StatefulSets, with the
  API server's defaults and validation.
- `kubus.api.podgroups`: PodGroup (gang scheduling, scheduler-plugins' Coscheduling).
- `kubus.api.namespaces`: Namespace, and the labels of any namespace (`namespace_labels`).
- `kubus.api.priority`: PriorityClass and kube's Priority admission (`resolve_priority`).
- `kubus.api.disruption`: PodDisruptionBudget and the disruption controller's `disruptions_allowed`.
- `kubus.api.workloads`: Services, ReplicationControllers, ReplicaSets and StatefulSets (their pod
  selectors, for default topology spreading) and `Workloads`, the cluster's set of them.
- `kubus.api.requests`: what a pod requests of a node (kube's PodRequests).
- `kubus.api.gpus`: GPU devices of nodes and GPU requests of pods (`kubus.io/gpu*`).
- `kubus.api.node_affinity`: the one decoder of a NodeAffinity, under kube's two validations.
- `kubus.api.resource_names`: native and extended resource names, as kube classifies them.
- `kubus.api.errors`: ManifestError, the one-line error for bad input.

Only the standard library, PyYAML, `kubus.core.codec` and `kubus.core.errors` are imported here.
"""

from kubus.api.disruption import PodDisruptionBudget, disruptions_allowed, pdb_matches
from kubus.api.errors import ManifestError, ManifestErrors
from kubus.api.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_DEVICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_MODEL_ANNOTATION,
    GPUS_ANNOTATION,
    GPUAnnotationError,
    GPURequest,
    format_gpu_devices,
    parse_node_gpus,
    pod_gpu_devices,
    pod_gpu_request,
)
from kubus.api.manifests import (
    DEFAULT_MAX_PODS,
    DEFAULT_SCHEDULER_NAME,
    ManifestObject,
    Manifests,
    load_manifests,
    parse_manifests,
    parse_node,
    parse_pod,
    parse_pod_group,
)
from kubus.api.namespaces import NAMESPACE_NAME_LABEL, Namespace, namespace_labels
from kubus.api.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Affinity,
    Container,
    ContainerImage,
    ContainerPort,
    GPUDevice,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    PreemptionPolicy,
    PreferredSchedulingTerm,
    ResourceList,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from kubus.api.podgroups import DEFAULT_SCHEDULE_TIMEOUT, POD_GROUP_LABEL, PodGroup, pod_group_key
from kubus.api.priority import PriorityClass, PriorityError, resolve_priority
from kubus.api.quantity import MAX_INT64, milli_value, parse_quantity, to_base_units, value
from kubus.api.requests import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    pod_nonzero_requests,
    pod_requests,
)
from kubus.api.workloads import (
    NO_WORKLOADS,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
    Workload,
    Workloads,
)

__all__ = [
    "CPU",
    "DEFAULT_MAX_PODS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "DEFAULT_SCHEDULER_NAME",
    "DEFAULT_SCHEDULE_TIMEOUT",
    "EPHEMERAL_STORAGE",
    "GPUS_ANNOTATION",
    "GPU_COUNT_ANNOTATION",
    "GPU_DEVICES_ANNOTATION",
    "GPU_MEMORY_ANNOTATION",
    "GPU_MODEL_ANNOTATION",
    "MAX_INT64",
    "MEMORY",
    "NAMESPACE_NAME_LABEL",
    "NO_WORKLOADS",
    "NVIDIA_GPU",
    "PODS",
    "POD_GROUP_LABEL",
    "Affinity",
    "Container",
    "ContainerImage",
    "ContainerPort",
    "GPUAnnotationError",
    "GPUDevice",
    "GPURequest",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ManifestError",
    "ManifestErrors",
    "ManifestObject",
    "Manifests",
    "Namespace",
    "Node",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodDisruptionBudget",
    "PodGroup",
    "PodSpec",
    "PreemptionPolicy",
    "PreferredSchedulingTerm",
    "PriorityClass",
    "PriorityError",
    "ReplicaSet",
    "ReplicationController",
    "ResourceList",
    "SelectorOperator",
    "Service",
    "StatefulSet",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
    "Workload",
    "Workloads",
    "disruptions_allowed",
    "format_gpu_devices",
    "load_manifests",
    "milli_value",
    "namespace_labels",
    "parse_manifests",
    "parse_node",
    "parse_node_gpus",
    "parse_pod",
    "parse_pod_group",
    "parse_quantity",
    "pdb_matches",
    "pod_gpu_devices",
    "pod_gpu_request",
    "pod_group_key",
    "pod_nonzero_requests",
    "pod_requests",
    "resolve_priority",
    "to_base_units",
    "value",
]
