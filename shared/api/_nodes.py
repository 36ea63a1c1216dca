"""A Node manifest -> Node, with the defaults kubelet and the device plugin give (see
kubus.api.manifests)."""

from __future__ import annotations

from dataclasses import replace

from kubus.api._fields import (
    Reader,
    key_path,
    quote,
)
from kubus.api._metadata import STDIN, read_object
from kubus.api.gpus import (
    GPUS_ANNOTATION,
    gfd_gpus,
    parse_node_gpus,
)
from kubus.api.names import label_value_error, qualified_name_error
from kubus.api.objects import (
    NVIDIA_GPU,
    PODS,
    ContainerImage,
    GPUDevice,
    Node,
    NodeSpec,
    NodeStatus,
    Taint,
    TaintEffect,
)
from kubus.core.codec import JSONMapping, JSONValue

DEFAULT_MAX_PODS = 110
"""kubelet's default --max-pods, given to nodes whose status has no `pods`."""

HOSTNAME_LABEL = "kubernetes.io/hostname"


def _taints(r: Reader, raw: JSONValue, path: str) -> tuple[Taint, ...]:
    taints = []
    seen: dict[tuple[str, TaintEffect], int] = {}
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        taint = r.mapping(item, item_path)
        key = r.required_string(taint.get("key"), f"{item_path}.key")
        if problem := qualified_name_error(key):
            r.fail(f"{item_path}.key", f"{quote(key)} is not a valid taint key: {problem}")
        value_text = r.string(taint.get("value"), f"{item_path}.value")
        if problem := label_value_error(value_text):
            r.fail(f"{item_path}.value", f"{quote(value_text)} is not valid: {problem}")
        if taint.get("effect") is None or taint.get("effect") == "":
            r.fail(f"{item_path}.effect", "is required")
        effect = r.enum(taint.get("effect"), f"{item_path}.effect", TaintEffect)
        if (key, effect) in seen:
            r.fail(
                item_path,
                f"taints must be unique by key and effect: {key}:{effect.value} repeats {path}[{seen[(key, effect)]}]",
            )
        seen[(key, effect)] = i
        taints.append(Taint(key=key, value=value_text, effect=effect))
    return tuple(taints)


def _node_status(r: Reader, raw: JSONValue, gpus_total: int | None, gpus_healthy: int) -> NodeStatus:
    status = r.mapping(raw, "status")
    capacity = r.resource_list(status.get("capacity"), "status.capacity")
    allocatable = r.resource_list(status.get("allocatable"), "status.allocatable")
    if not allocatable:
        allocatable = dict(capacity)
    capacity.setdefault(PODS, DEFAULT_MAX_PODS)
    allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
    if gpus_total is not None:
        capacity.setdefault(NVIDIA_GPU, gpus_total)
        allocatable.setdefault(NVIDIA_GPU, gpus_healthy)

    images = []
    for i, item in enumerate(r.sequence(status.get("images"), "status.images")):
        item_path = f"status.images[{i}]"
        image = r.mapping(item, item_path)
        names = r.string_list(image.get("names"), f"{item_path}.names")
        size = 0
        if image.get("sizeBytes") is not None:
            size = r.integer(image.get("sizeBytes"), f"{item_path}.sizeBytes", lo=0)
        images.append(ContainerImage(names=names, size_bytes=size))

    ready = True
    for i, item in enumerate(r.sequence(status.get("conditions"), "status.conditions")):
        item_path = f"status.conditions[{i}]"
        condition = r.mapping(item, item_path)
        if r.string(condition.get("type"), f"{item_path}.type") != "Ready":
            continue
        state = r.choice(condition.get("status"), f"{item_path}.status", ("True", "False", "Unknown"))
        ready = state == "True"
    return NodeStatus(capacity=capacity, allocatable=allocatable, images=tuple(images), ready=ready)


def read_node(obj: JSONValue, source: str, where: str) -> Node:
    r, metadata = read_object(obj, source, where, "Node", namespaced=False)
    if HOSTNAME_LABEL not in metadata.labels:
        metadata = replace(metadata, labels={**metadata.labels, HOSTNAME_LABEL: metadata.name})

    gpus: tuple[GPUDevice, ...] = ()
    gpus_total = None
    gpus_healthy = 0
    annotation = metadata.annotations.get(GPUS_ANNOTATION)
    if annotation is not None:
        try:
            gpus = parse_node_gpus(annotation)
        except ValueError as e:
            r.fail(key_path("metadata.annotations", GPUS_ANNOTATION), str(e))
        gpus_total = len(gpus)
        gpus_healthy = sum(1 for g in gpus if g.healthy)

    spec = r.mapping(obj.get("spec"), "spec")
    node_spec = NodeSpec(
        unschedulable=r.boolean(spec.get("unschedulable"), "spec.unschedulable", False),
        taints=_taints(r, spec.get("taints"), "spec.taints"),
    )
    status = _node_status(r, obj.get("status"), gpus_total, gpus_healthy)
    if annotation is None and status.capacity.get(NVIDIA_GPU, 0) > 0:
        try:  # no gpu-agent's annotation: the device plugin's count and GPU feature discovery's labels
            gpus = gfd_gpus(metadata.labels, status.capacity[NVIDIA_GPU], status.allocatable.get(NVIDIA_GPU, 0))
        except ValueError as e:
            r.fail("metadata.labels", str(e))
    return Node(metadata=metadata, spec=node_spec, status=status, gpus=gpus)


def parse_node(obj: JSONMapping, *, source: str = STDIN, index: int = 1) -> Node:
    """A Node from its decoded manifest, defaulted and validated (see the module docstring).

    `source` and `index` (the 1-based document number) only label errors. Raises ManifestError.
    """
    return read_node(obj, source, f"document {index}")
