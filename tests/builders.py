"""Test builders for Pods and Nodes (kube's ``st.MakePod()`` / ``st.MakeNode()``), one place
instead of a private ``pod()``/``node()`` per test file. Import as ``from builders import ...``
(tests/ is on the path, as for `support`).

- `make_pod` / `make_node`: the typed objects (`kubus.api.objects`), every field a keyword;
  what is not given is the dataclass default (a Pod in "default", no containers, priority 0).
- `pod_manifest` / `node_manifest`: the dicts a user writes (what `kubus apply` and the queue
  read), quantities as strings.

Builders never derive a uid: pass ``uid=`` where a test needs one (many use ``f"uid-{name}"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubus.api.objects import (
    DEFAULT_SCHEDULER_NAME,
    NVIDIA_GPU,
    Affinity,
    Container,
    ContainerPort,
    GPUDevice,
    Node,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodSpec,
    PreemptionPolicy,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)

__all__ = ["GI", "ZONE_LABEL", "labels_of", "make_node", "make_pod", "node_manifest", "pod_manifest"]

GI = 1024**3
ZONE_LABEL = "topology.kubernetes.io/zone"


def labels_of(*labels: str) -> dict[str, str]:
    """Labels written ``key`` (value "") or ``key=value``, as kube's st helpers take them."""
    return dict(lb.split("=", 1) if "=" in lb else (lb, "") for lb in labels)


def make_pod(
    name: str = "p",
    *,
    namespace: str = "default",
    uid: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owners: tuple[OwnerReference, ...] = (),
    created: float = 0.0,
    deleted: float | None = None,
    requests: Mapping[str, int] | None = None,
    image: str = "",
    host_ports: Sequence[int] = (),
    containers: Sequence[Container] = (),
    init_containers: Sequence[Container] = (),
    overhead: Mapping[str, int] | None = None,
    node_name: str = "",
    node_selector: Mapping[str, str] | None = None,
    affinity: Affinity | None = None,
    tolerations: Sequence[Toleration] = (),
    spread: Sequence[TopologySpreadConstraint] = (),
    priority: int = 0,
    priority_class: str = "",
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    gates: Sequence[str] = (),
) -> Pod:
    """A Pod. ``requests`` (base units: milli-CPU, bytes, counts), ``image`` or ``host_ports``
    give it one container "c" (``requests={}``: one with no requests), before ``containers``;
    ``host_ports``: container port = host port."""
    own: tuple[Container, ...] = ()
    if requests is not None or image or host_ports:
        ports = tuple(ContainerPort(container_port=p, host_port=p) for p in host_ports)
        own = (Container("c", image, requests=dict(requests or {}), ports=ports),)
    spec = PodSpec(
        containers=own + tuple(containers),
        init_containers=tuple(init_containers),
        priority=priority,
        priority_class_name=priority_class,
        preemption_policy=policy,
        node_name=node_name,
        node_selector=dict(node_selector or {}),
        affinity=affinity,
        tolerations=tuple(tolerations),
        topology_spread_constraints=tuple(spread),
        overhead=dict(overhead or {}),
        scheduling_gates=tuple(gates),
        scheduler_name=scheduler_name,
    )
    meta = ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        creation_timestamp=created,
        owner_references=owners,
        deletion_timestamp=deleted,
    )
    return Pod(meta, spec)


def make_node(
    name: str = "node",
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    zone: str = "",
    allocatable: Mapping[str, int] | None = None,
    capacity: Mapping[str, int] | None = None,
    gpus: int = 0,
    gpu_devices: Sequence[GPUDevice] = (),
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> Node:
    """A Node (cluster-scoped: namespace ""). ``allocatable`` in base units (none given: empty);
    ``capacity`` defaults to the same amounts. ``zone``: the topology.kubernetes.io/zone label.
    ``gpus``: that many H100s of 80 GiB ("GPU-<name>-<i>"), counted in ``nvidia.com/gpu`` unless
    given; ``gpu_devices``: these devices instead, counted nowhere."""
    all_labels = dict(labels or {})
    if zone:
        all_labels[ZONE_LABEL] = zone
    alloc = dict(allocatable or {})
    devices = tuple(gpu_devices)
    if gpus:
        alloc.setdefault(NVIDIA_GPU, gpus)
        devices = tuple(GPUDevice(i, f"GPU-{name}-{i}", "H100", 80 * GI) for i in range(gpus))
    return Node(
        ObjectMeta(name=name, namespace="", labels=all_labels, annotations=dict(annotations or {})),
        NodeSpec(unschedulable=unschedulable, taints=tuple(taints)),
        NodeStatus(capacity=dict(capacity) if capacity is not None else dict(alloc), allocatable=alloc, ready=ready),
        gpus=devices,
    )


def pod_manifest(
    name: str,
    *,
    namespace: str | None = "default",
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    requests: Mapping[str, Any] | None = None,
    image: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod manifest as a user writes it: one container "c" (``image``, ``requests`` as
    written: "100m", "1Gi"), ``spec`` fields in camelCase added to its spec. ``namespace`` None
    leaves it out; ``labels`` None leaves them out."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = dict(labels)
    container: dict[str, Any] = {"name": "c"}
    if image is not None:
        container["image"] = image
    if requests is not None:
        container["resources"] = {"requests": dict(requests)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def node_manifest(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    capacity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Node manifest as its agent or a user writes it, ``capacity`` as written ("8", "16Gi")."""
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"capacity": dict(capacity or {})}}
