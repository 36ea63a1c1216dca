"""What a node has: its Node object, from a manifest or the host, with the GPUs NVML reports.

A real node's agent describes its node from, in this order of precedence:

1. NVML (the optional ``nvidia-ml-py`` package, import name ``pynvml``), when it loads and sees
   GPUs: the real devices, their memory and health replace whatever the manifest says about
   GPUs (`kubus.io/gpus`, ``nvidia.com/gpu``);
2. the Node manifest given with ``--manifest`` (labels, taints, capacity, allocatable);
3. without a manifest, the host itself: CPUs and memory as the kernel reports them, kubelet's
   default of 110 pods.

Without NVML (not installed, no driver, no GPU) the agent works on the manifest alone and says
so once in its log. Everything here is synchronous and cheap; NVML calls take microseconds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from kubus.api.errors import ManifestError
from kubus.api.gpus import GPUS_ANNOTATION
from kubus.api.manifests import DEFAULT_MAX_PODS, HOSTNAME_LABEL, load_manifests, parse_node
from kubus.api.names import dns1123_subdomain_error, label_value_error
from kubus.api.objects import CPU, MEMORY, NVIDIA_GPU, PODS, GPUDevice, Node
from kubus.core import codec
from kubus.runtime.service import logger

__all__ = ["NVML", "NodeInventory", "host_node", "load_node_template", "renamed", "with_gpus"]

_log = logger("kubus.gpu-agent")

_UID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "gpu-agent.kubus.io")


def load_node_template(path: str | os.PathLike[str]) -> Node:
    """The one Node of a manifest file (YAML or JSON). Raises ManifestError (one line naming
    the file and the field) for a bad manifest, or one that holds pods or not exactly one node."""
    manifests = load_manifests(Path(path))
    if manifests.pods or len(manifests.nodes) != 1:
        raise ManifestError(
            str(path), "", "", f"expected exactly one Node, found {len(manifests.nodes)} node(s) and "
            f"{len(manifests.pods)} pod(s)"
        )  # fmt: skip
    return manifests.nodes[0]


def renamed(node: Node, name: str) -> Node:
    """``node`` as the node ``name``: its name, ``kubernetes.io/hostname`` label and uid (derived
    from the name, so stable across restarts). The node itself when the name is unchanged.
    Raises ValueError (one line) for a name that is not a valid node name or hostname label."""
    if node.name == name:
        return node
    problem = dns1123_subdomain_error(name) or label_value_error(name)
    if problem:
        raise ValueError(f"node name {name!r} is not valid: {problem}")
    meta = replace(
        node.metadata,
        name=name,
        uid=str(uuid.uuid5(_UID_NAMESPACE, name)),
        labels={**node.metadata.labels, HOSTNAME_LABEL: name},
    )
    return replace(node, metadata=meta)


def with_gpus(node: Node, gpus: Sequence[GPUDevice]) -> Node:
    """``node`` with exactly these GPUs: the `kubus.io/gpus` annotation rewritten, ``nvidia.com/gpu``
    = the devices in capacity and the healthy ones in allocatable (as the device plugin reports)."""
    devices = tuple(sorted(gpus, key=lambda g: g.index))
    annotation = codec.dumps(
        [
            {"index": g.index, "uuid": g.uuid, "model": g.model, "memory": g.memory, "healthy": g.healthy}
            for g in devices
        ]
    ).decode()
    meta = replace(node.metadata, annotations={**node.metadata.annotations, GPUS_ANNOTATION: annotation})
    status = replace(
        node.status,
        capacity={**node.status.capacity, NVIDIA_GPU: len(devices)},
        allocatable={**node.status.allocatable, NVIDIA_GPU: sum(1 for g in devices if g.healthy)},
    )
    return replace(node, metadata=meta, status=status, gpus=devices)


def host_node(name: str) -> Node:
    """A Node for this host: all its CPUs and memory allocatable, 110 pods, no GPU."""
    cpus = os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return parse_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"capacity": {CPU: str(cpus), MEMORY: str(memory), PODS: str(DEFAULT_MAX_PODS)}},
        },
        source="host",
    )


class NVML:
    """The GPUs of this machine through NVML. `NVML.open()` gives None where NVML is missing.

    What NVML answers with an error (``pynvml.NVMLError``: a GPU lost or fallen off the bus,
    a query the GPU does not support) is a GPU to report unhealthy, never a crash; any other
    exception is a bug and propagates."""

    def __init__(self, module: ModuleType) -> None:
        self._nvml = module
        self._error: type[Exception] = getattr(module, "NVMLError", Exception)
        """``pynvml.NVMLError``, the base of every NVML error; for a stand-in module without
        one (a test's fake), any Exception."""

    @classmethod
    def open(cls, module: ModuleType | None = None) -> NVML | None:
        """NVML initialised, or None (logged once, with why) when the package is not installed,
        the driver is missing, or initialisation fails. ``module`` replaces ``import pynvml``."""
        nvml: Any = module  # Any: pynvml ships no types (and a test's stand-in module is duck-typed)
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[import-not-found, no-redef]
            except ImportError:
                _log.info("nvml unavailable", reason="pynvml (nvidia-ml-py) not installed")
                return None
        try:
            nvml.nvmlInit()
        except getattr(nvml, "NVMLError", Exception) as exc:  # no driver, no library, no GPU
            _log.info("nvml unavailable", reason=f"nvmlInit failed: {exc}")
            return None
        return cls(nvml)

    def devices(self) -> tuple[GPUDevice, ...]:
        """Every GPU NVML sees, by index. A device that does not answer is listed unhealthy."""
        nvml = self._nvml
        out = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = codec.text(nvml.nvmlDeviceGetName(handle))
                device_uuid = codec.text(nvml.nvmlDeviceGetUUID(handle))
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except self._error as exc:
                _log.warning("gpu does not answer", index=index, error=repr(exc))
                out.append(GPUDevice(index=index, uuid="", model="unknown", memory=0, healthy=False))
                continue
            # The product name as the NVIDIA device plugin's nvidia.com/gpu.product label spells it.
            model = "-".join(name.split())
            out.append(GPUDevice(index, device_uuid, model, memory, self._healthy(handle)))
        return tuple(out)

    def healthy(self, index: int) -> bool:
        """Whether device ``index`` exists and answers without a pending row-remapping failure.
        False when NVML answers with an error (no such device, lost, fallen off the bus)."""
        try:
            handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        except self._error:
            return False
        return self._healthy(handle)

    def _healthy(self, handle: Any) -> bool:  # Any: a pynvml device handle (pynvml ships no types)
        nvml = self._nvml
        try:
            nvml.nvmlDeviceGetMemoryInfo(handle)
        except self._error:
            return False  # the device does not answer
        try:
            remapped = nvml.nvmlDeviceGetRemappedRows(handle)  # (corrected, uncorrected, pending, failure)
        except self._error:
            return True  # not supported on this GPU (pre-Ampere): nothing to say against it
        return not bool(remapped[3])

    def close(self) -> None:
        """Shut NVML down; an NVML error doing so is logged (debug) and ignored."""
        try:
            self._nvml.nvmlShutdown()
        except self._error as exc:
            _log.debug("nvml shutdown failed", error=repr(exc))


class NodeInventory:
    """One real node: its template (manifest or host), refreshed with NVML's GPUs when present.

    `node()` reads NVML each time it is called (the agent calls it at registration and then
    periodically, so a GPU that fails shows up as unhealthy); `device_healthy` answers for one
    device at admission (None without NVML: the node record is all there is).
    """

    def __init__(self, name: str, template: Node | None = None, *, nvml: NVML | None = None) -> None:
        self.name = name
        self.template = renamed(template, name) if template is not None else host_node(name)
        self.nvml = nvml

    @classmethod
    def discover(cls, name: str, manifest: str | os.PathLike[str] | None = None) -> NodeInventory:
        """The inventory of this host as node ``name``: the manifest if given, NVML if it loads."""
        template = load_node_template(manifest) if manifest is not None else None
        return cls(name, template, nvml=NVML.open())

    def node(self) -> Node:
        """The node as it is now."""
        if self.nvml is None:
            return self.template
        gpus = self.nvml.devices()
        if not gpus and not self.template.gpus:
            return self.template
        return with_gpus(self.template, gpus)

    @property
    def device_healthy(self) -> Any:  # Any: NVML.healthy, an (index) -> bool, or None
        """A ``(index) -> bool`` that asks NVML, or None without NVML."""
        return self.nvml.healthy if self.nvml is not None else None

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
