"""GPUs: the devices a node has, and what a pod asks of them.

Nodes
-----
A node lists its GPUs in the annotation `kubus.io/gpus`, a JSON list with one object per
device::

    kubus.io/gpus: |
      [{"index": 0, "uuid": "GPU-8f3c...", "model": "NVIDIA-H100-80GB-HBM3", "memory": "80Gi"},
       {"index": 1, "uuid": "GPU-1d2e...", "model": "NVIDIA-H100-80GB-HBM3", "memory": "80Gi",
        "healthy": false}]

- `index` (required): the device's number on the node. Indices run 0..N-1 without gaps: mark a
  failed GPU `"healthy": false` rather than leaving it out.
- `model` (required): the product name, matched exactly against `kubus.io/gpu-model`. The
  NVIDIA device plugin's `nvidia.com/gpu.product` label uses the same spelling.
- `memory` (required): total device memory, a quantity string ("80Gi") or integer bytes.
- `uuid` (optional): the device's UUID; unique on the node when given.
- `healthy` (optional, default true): an unhealthy GPU is never given to a pod.
Any other key is an error (a typo would otherwise be ignored silently).

A node with this annotation and no `nvidia.com/gpu` in its status gets `nvidia.com/gpu` = the
number of GPUs in capacity and the number of healthy GPUs in allocatable, as the NVIDIA device
plugin reports them.

A node without the annotation (a real cluster's node, where no gpu-agent runs) has its GPUs
read from what the NVIDIA device plugin and GPU feature discovery publish (`gfd_gpus`):
`nvidia.com/gpu` in status.capacity is the number of devices, of which as many as
status.allocatable has are healthy; the labels `nvidia.com/gpu.product` and
`nvidia.com/gpu.memory` (MiB) give every device its model and memory. Without the memory label
the devices have no memory known (0): requests for whole GPUs fit, memory slices do not.

Pods
----
- Whole GPUs: the extended resource `nvidia.com/gpu: K` in a container's requests or limits
  asks for K devices held exclusively. Optional `kubus.io/gpu-memory: "40Gi"` then asks that
  each of them has at least that much memory in total.
- Shared GPUs: without `nvidia.com/gpu`, `kubus.io/gpu-memory: "20Gi"` asks for a slice of
  20Gi of free memory on each of `kubus.io/gpu-count` devices (default 1). A shared device
  hosts several pods while its memory lasts; it is never given whole to a pod at the same time.
- `kubus.io/gpu-model: "NVIDIA-H100-80GB-HBM3"` (or a comma-separated list of acceptable
  models) restricts either kind of request to those models, by exact string match.
- `kubus.io/gpu-devices: "0,3"` records the indices of the devices a bound pod holds. kubus
  writes it at bind time (`format_gpu_devices`); it is read for pods that already carry
  `spec.nodeName`, and must then list exactly as many devices as the pod asks for.

Annotation values are strings (quote numbers in YAML: `kubus.io/gpu-count: "2"`).
`kubus.io/gpu-count` without `kubus.io/gpu-memory`, with `nvidia.com/gpu`, or a
`kubus.io/gpu-model` on a pod that asks for no GPU, is an error.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from kubus.api.objects import NVIDIA_GPU, GPUDevice, Pod
from kubus.api.quantity import to_base_units
from kubus.api.requests import pod_requests
from kubus.core import codec
from kubus.core.codec import JSONValue
from kubus.core.errors import KubusError

GPUS_ANNOTATION = "kubus.io/gpus"
GPU_MEMORY_ANNOTATION = "kubus.io/gpu-memory"
GPU_MODEL_ANNOTATION = "kubus.io/gpu-model"
GPU_COUNT_ANNOTATION = "kubus.io/gpu-count"
GPU_DEVICES_ANNOTATION = "kubus.io/gpu-devices"

_DEVICE_KEYS = ("index", "uuid", "model", "memory", "healthy")

GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GPU feature discovery: the devices' product name (the same spelling `kubus.io/gpu-model` uses)."""
GFD_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GPU feature discovery: each device's memory in MiB."""

# GPUFit's contract, shared by the production plugin (kubus.plugins.gpu_fit) and the reference
# (kubus_reference.gpu_fit, in tests/reference), which implement it independently: the scoring
# modes, and the reasons a node fails a request, the first that applies, in this order.
BINPACK = "binpack"
"""GPUFit mode: prefer the fullest nodes and devices (keep whole GPUs free for large jobs)."""
SPREAD = "spread"
"""GPUFit mode: prefer the emptiest nodes and devices."""
GPU_MODES = (BINPACK, SPREAD)
REASON_NO_GPUS = "node(s) had no GPUs"
REASON_MODEL = "node(s) didn't have the requested GPU model"
REASON_HEALTHY = "node(s) didn't have enough healthy GPUs"
REASON_MEMORY = "node(s) didn't have GPUs with enough memory"
REASON_FREE_MEMORY = "node(s) didn't have enough free GPU memory"
REASON_FREE_GPUS = "node(s) didn't have enough free GPUs"


class GPUAnnotationError(KubusError, ValueError):
    """A `kubus.io/gpu*` annotation is wrong; `annotation` names which one."""

    def __init__(self, annotation: str, reason: str) -> None:
        super().__init__(reason)
        self.annotation = annotation


@dataclass(frozen=True, slots=True)
class GPURequest:
    """What a pod asks of GPUs (see the module docstring)."""

    count: int
    """Devices wanted: whole devices, or devices to take a shared slice of."""
    memory: int
    """Bytes per device: the minimum total memory of a whole device (0 = any), or the size of
    the slice of free memory taken on each shared device (> 0)."""
    models: tuple[str, ...]
    """Acceptable GPU models; empty = any."""
    shared: bool
    """True for a slice of shared devices, False for whole devices held exclusively."""

    def accepts(self, device: GPUDevice) -> bool:
        """Whether the device could ever serve this request: healthy, of an accepted model, and
        with enough total memory. Whether it is free now is the scheduler's question."""
        return device.healthy and (not self.models or device.model in self.models) and device.memory >= self.memory


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _quote(text: str) -> str:
    """Double-quoted with JSON escapes, so that a message stays on one line."""
    return json.dumps(text, ensure_ascii=False)


def _describe(value: object) -> str:
    """`integer -1`, `string "0"`, `boolean true`: a JSON value as a message shows it."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"{_type_name(value)} {value}"
    if isinstance(value, str):
        return f"string {_quote(value)}"
    return _type_name(value)


def gfd_gpus(labels: Mapping[str, str], capacity: int, allocatable: int) -> tuple[GPUDevice, ...]:
    """A node's devices as the NVIDIA device plugin (``capacity``/``allocatable`` of
    `nvidia.com/gpu`) and GPU feature discovery (``labels``) describe them: ``capacity``
    devices, the first ``allocatable`` of them healthy (the plugin does not say which failed),
    each of the labelled model and memory. Raises ValueError for a memory label that is not a
    whole number of MiB."""
    memory_mib = labels.get(GFD_MEMORY_LABEL, "0") or "0"
    if not memory_mib.isdigit():
        raise ValueError(f"{GFD_MEMORY_LABEL}: {_quote(memory_mib)} is not a whole number of MiB")
    model, memory = labels.get(GFD_PRODUCT_LABEL, ""), int(memory_mib) * 2**20
    return tuple(GPUDevice(i, "", model, memory, healthy=i < allocatable) for i in range(capacity))


@lru_cache(maxsize=1024)
def parse_node_gpus(annotation_value: str) -> tuple[GPUDevice, ...]:
    """The devices listed in a node's `kubus.io/gpus` annotation, sorted by index.

    Raises ValueError with a one-line reason (naming the list item) when the value is not a
    JSON list of device objects as the module docstring describes. Results are cached (they
    are immutable): the nodes of a pool share one annotation value.
    """
    try:
        raw = codec.loads(annotation_value)
    except codec.DecodeError as e:
        raise ValueError(f"not valid JSON: {e}") from None
    if not isinstance(raw, list):
        raise ValueError(f"expected a JSON list of GPU objects, got {_type_name(raw)}")
    devices = [_parse_device(item, i) for i, item in enumerate(raw)]
    devices.sort(key=lambda d: d.index)
    seen_uuids: dict[str, int] = {}
    for position, device in enumerate(devices):
        if device.index != position:
            indices = sorted(d.index for d in devices)
            if position > 0 and device.index == devices[position - 1].index:
                raise ValueError(f"index {device.index} appears twice")
            raise ValueError(
                f"indices must be 0..{len(devices) - 1} without gaps, got {indices} "
                '(mark a failed GPU "healthy": false instead of leaving it out)'
            )
        if device.uuid:
            if device.uuid in seen_uuids:
                raise ValueError(
                    f"uuid {_quote(device.uuid)} appears twice (indices {seen_uuids[device.uuid]} and {device.index})"
                )
            seen_uuids[device.uuid] = device.index
    return tuple(devices)


def _parse_device(item: JSONValue, position: int) -> GPUDevice:
    where = f"[{position}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a GPU object, got {_type_name(item)}")
    unknown = [k for k in item if k not in _DEVICE_KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown field {_quote(unknown[0])} (known: {', '.join(_DEVICE_KEYS)})")
    for key in ("index", "model", "memory"):
        if item.get(key) is None:
            raise ValueError(f"{where}.{key}: is required")
    index = item["index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{where}.index: expected a non-negative integer, got {_describe(index)}")
    model = item["model"]
    if not isinstance(model, str) or not model:
        raise ValueError(f"{where}.model: expected a non-empty string, got {_describe(model)}")
    uuid = item.get("uuid")
    if uuid is None:
        uuid = ""
    if not isinstance(uuid, str):
        raise ValueError(f"{where}.uuid: expected a string, got {_type_name(uuid)}")
    memory_raw = item["memory"]
    if isinstance(memory_raw, bool) or not isinstance(memory_raw, str | int):
        raise ValueError(f"{where}.memory: expected a quantity string or integer bytes, got {_type_name(memory_raw)}")
    try:
        memory = to_base_units("memory", memory_raw)
    except ValueError as e:
        raise ValueError(f"{where}.memory: {e}") from None
    if memory <= 0:
        raise ValueError(f"{where}.memory: must be greater than 0")
    healthy = item.get("healthy")
    if healthy is None:
        healthy = True
    if not isinstance(healthy, bool):
        raise ValueError(f"{where}.healthy: expected true or false, got {_describe(healthy)}")
    return GPUDevice(index=index, uuid=uuid, model=model, memory=memory, healthy=healthy)


def _positive_memory(annotation: str, raw: str) -> int:
    try:
        memory = to_base_units("memory", raw)
    except ValueError as e:
        raise GPUAnnotationError(annotation, str(e)) from None
    if memory <= 0:
        raise GPUAnnotationError(annotation, "must be greater than 0")
    return memory


def _models(raw: str) -> tuple[str, ...]:
    models = tuple(m.strip() for m in raw.split(","))
    if not all(models):
        raise GPUAnnotationError(
            GPU_MODEL_ANNOTATION,
            f"{_quote(raw)} is not a comma-separated list of GPU models (an entry is empty)",
        )
    return models


def _count(raw: str) -> int:
    text = raw.strip()
    if not text.isdigit() or not text.isascii() or int(text) < 1:
        raise GPUAnnotationError(GPU_COUNT_ANNOTATION, f"{_quote(raw)} is not a whole number of GPUs (1 or more)")
    return int(text)


def pod_gpu_request(pod: Pod, *, requests: Mapping[str, int] | None = None) -> GPURequest | None:
    """What the pod asks of GPUs, or None for a pod that asks for no GPU.

    `requests` may pass `pod_requests(pod)` when the caller has it already. Raises
    GPUAnnotationError (a ValueError naming the annotation) when the pod's `kubus.io/gpu*`
    annotations are invalid or contradict each other; manifests reject such pods up front.
    """
    annotations = pod.metadata.annotations
    memory_raw = annotations.get(GPU_MEMORY_ANNOTATION)
    model_raw = annotations.get(GPU_MODEL_ANNOTATION)
    count_raw = annotations.get(GPU_COUNT_ANNOTATION)
    # The common case: no annotation, and no container mentions nvidia.com/gpu.
    if memory_raw is None and model_raw is None and count_raw is None and not _mentions_gpu(pod):
        return None
    whole = (pod_requests(pod) if requests is None else requests).get(NVIDIA_GPU, 0)
    memory = None if memory_raw is None else _positive_memory(GPU_MEMORY_ANNOTATION, memory_raw)
    models = () if model_raw is None else _models(model_raw)
    if whole > 0:
        if count_raw is not None:
            raise GPUAnnotationError(
                GPU_COUNT_ANNOTATION,
                f"applies only to shared GPUs; this pod asks for {whole} whole GPU(s) with {NVIDIA_GPU}",
            )
        return GPURequest(count=whole, memory=memory or 0, models=models, shared=False)
    if memory is None:
        if count_raw is not None:
            raise GPUAnnotationError(
                GPU_COUNT_ANNOTATION,
                f"needs {GPU_MEMORY_ANNOTATION} (the slice of each shared GPU to take); "
                f"to ask for whole GPUs use the resource {NVIDIA_GPU}",
            )
        if model_raw is not None:
            raise GPUAnnotationError(
                GPU_MODEL_ANNOTATION,
                f"the pod asks for no GPU: add the resource {NVIDIA_GPU} (whole GPUs) "
                f"or {GPU_MEMORY_ANNOTATION} (a shared slice)",
            )
        return None
    count = 1 if count_raw is None else _count(count_raw)
    return GPURequest(count=count, memory=memory, models=models, shared=True)


def _mentions_gpu(pod: Pod) -> bool:
    spec = pod.spec
    return (
        any(NVIDIA_GPU in c.requests or NVIDIA_GPU in c.limits for c in (*spec.containers, *spec.init_containers))
        or NVIDIA_GPU in spec.overhead
    )


def pod_gpu_devices(pod: Pod) -> tuple[int, ...]:
    """Indices of the GPUs a bound pod holds, from `kubus.io/gpu-devices`, sorted; () if none.

    Raises GPUAnnotationError if the value is not a comma-separated list of distinct
    non-negative integers.
    """
    raw = pod.metadata.annotations.get(GPU_DEVICES_ANNOTATION)
    if raw is None or not raw.strip():
        return ()
    parts = [p.strip() for p in raw.split(",")]
    if not all(p.isdigit() and p.isascii() for p in parts):
        raise GPUAnnotationError(
            GPU_DEVICES_ANNOTATION,
            f'{_quote(raw)} is not a comma-separated list of GPU indices (such as "0,3")',
        )
    indices = sorted(int(p) for p in parts)
    for a, b in itertools.pairwise(indices):
        if a == b:
            raise GPUAnnotationError(GPU_DEVICES_ANNOTATION, f"index {a} appears twice")
    return tuple(indices)


def format_gpu_devices(indices: tuple[int, ...] | list[int]) -> str:
    """The `kubus.io/gpu-devices` value for these device indices ("0,3"), sorted."""
    return ",".join(str(i) for i in sorted(indices))


def gpu_mode(args: object) -> str:
    """The `mode` of GPUFit's args (GPUArgs, or None: binpack), as a string of GPU_MODES.
    Raises ValueError for an unknown mode."""
    mode = getattr(args, "mode", None) or BINPACK
    mode = str(getattr(mode, "value", mode))
    if mode not in GPU_MODES:
        raise ValueError(f"GPUFit mode {mode!r} is not one of {', '.join(GPU_MODES)}")
    return mode
