"""The agent's node inventory (manifest, host, NVML) and its command line."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kubus.api.errors import ManifestError
from kubus.api.gpus import parse_node_gpus
from kubus.core import codec
from kubus.gpu_agent.__main__ import build, parse_args
from kubus.gpu_agent.inventory import NVML, NodeInventory, host_node, load_node_template, renamed, with_gpus

GI = 1024**3

NODE_YAML = """\
apiVersion: v1
kind: Node
metadata:
  name: template
  labels: {pool: h100}
  annotations:
    kubus.io/gpus: '[{"index": 0, "model": "old", "memory": "40Gi"}]'
status:
  capacity: {cpu: "64", memory: 512Gi}
"""


class FakeNVML:
    """Stands in for the pynvml module: `devices` is what the driver reports."""

    def __init__(self, devices: list[dict[str, Any]], *, init_error: Exception | None = None) -> None:
        self.devices = devices
        self.init_error = init_error
        self.shut = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self.devices[index]

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> bytes:
        return handle["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str:
        return handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        if handle.get("lost"):
            raise RuntimeError("GPU is lost")
        return SimpleNamespace(total=handle["memory"], free=handle["memory"], used=0)

    def nvmlDeviceGetRemappedRows(self, handle: dict[str, Any]) -> tuple[int, int, int, int]:
        if "remap_failed" not in handle:
            raise RuntimeError("not supported")
        return (0, 0, 0, int(handle["remap_failed"]))


def h100(i: int, **kw: Any) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}", "memory": 80 * GI, **kw}


def test_a_node_template_is_read_from_a_manifest(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(NODE_YAML)
    node = load_node_template(path)
    assert node.name == "template" and node.metadata.labels["pool"] == "h100" and len(node.gpus) == 1
    path.write_text(NODE_YAML + "---\n" + NODE_YAML.replace("name: template", "name: other"))
    with pytest.raises(ManifestError, match="expected exactly one Node, found 2 node"):
        load_node_template(path)
    path.write_text(NODE_YAML.replace('cpu: "64"', 'cpu: "lots"'))
    with pytest.raises(ManifestError, match="cpu"):
        load_node_template(path)


def test_renamed_and_with_gpus() -> None:
    node = load_node_template_text(NODE_YAML)
    same = renamed(node, "template")
    assert same is node
    worker = renamed(node, "worker-7")
    assert (worker.name, worker.metadata.labels["kubernetes.io/hostname"]) == ("worker-7", "worker-7")
    assert worker.metadata.uid != node.metadata.uid
    from kubus.api.objects import GPUDevice

    gpus = [GPUDevice(1, "GPU-1", "H100", 80 * GI, healthy=False), GPUDevice(0, "GPU-0", "H100", 80 * GI)]
    with_two = with_gpus(worker, gpus)
    assert [g.index for g in with_two.gpus] == [0, 1]
    assert with_two.status.capacity["nvidia.com/gpu"] == 2 and with_two.status.allocatable["nvidia.com/gpu"] == 1
    assert parse_node_gpus(with_two.metadata.annotations["kubus.io/gpus"]) == with_two.gpus


def test_the_host_node_has_this_machines_cpus_and_memory() -> None:
    node = host_node("this-host")
    assert node.status.allocatable["cpu"] >= 1000 and node.status.allocatable["memory"] > GI
    assert node.status.allocatable["pods"] == 110 and node.gpus == ()


def test_without_nvml_the_manifest_is_all_there_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert NVML.open() is None
    assert NVML.open(FakeNVML([], init_error=RuntimeError("driver not loaded"))) is None  # type: ignore[arg-type]
    inventory = NodeInventory("worker-1", load_node_template_text(NODE_YAML))
    assert inventory.node().gpus == inventory.template.gpus and inventory.device_healthy is None


def test_nvml_devices_replace_the_manifests() -> None:
    fake = FakeNVML([h100(0), h100(1, remap_failed=True), h100(2, lost=True), h100(3, remap_failed=False)])
    nvml = NVML.open(fake)  # type: ignore[arg-type]
    assert nvml is not None
    inventory = NodeInventory("worker-1", load_node_template_text(NODE_YAML), nvml=nvml)
    node = inventory.node()
    assert [(g.index, g.model, g.memory, g.healthy) for g in node.gpus] == [
        (0, "NVIDIA-H100-80GB-HBM3", 80 * GI, True),
        (1, "NVIDIA-H100-80GB-HBM3", 80 * GI, False),
        (2, "unknown", 0, False),
        (3, "NVIDIA-H100-80GB-HBM3", 80 * GI, True),
    ]
    assert node.status.allocatable["nvidia.com/gpu"] == 2
    assert inventory.device_healthy(0) and not inventory.device_healthy(1) and not inventory.device_healthy(9)
    fake.devices[0]["lost"] = True  # a GPU falls off the bus: the next read says so
    assert not inventory.node().gpus[0].healthy
    inventory.close()
    assert fake.shut


def test_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(NODE_YAML)
    flags = ["--simulate", "3", "--template", str(path), "--name-prefix", "h-", "--pod-duration-jitter", "0.5"]
    agent = build(parse_args(flags))
    assert agent.simulated and list(agent.nodes) == ["h-00000", "h-00001", "h-00002"]
    assert (agent.options.pod_duration, agent.options.pod_duration_jitter) == (30.0, 0.5)

    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("NODE_NAME", "worker-9")
    agent = build(parse_args(["--manifest", str(path)]))
    assert not agent.simulated and list(agent.nodes) == ["worker-9"] and agent.options.pod_duration == 0.0
    agent = build(parse_args(["--node", "w1", "--pod-duration", "5"]))
    assert list(agent.nodes) == ["w1"] and agent.options.pod_duration == 5.0

    bad_flags = (
        ["--simulate", "2"],
        ["--simulate", "2", "--template", "x", "--manifest", "y"],
        ["--node", "a", "--simulate", "1"],
        ["--node", "a", "--template", "x"],
    )
    for bad in bad_flags:
        with pytest.raises(SystemExit):
            parse_args(bad)
    monkeypatch.delenv("NODE_NAME")
    with pytest.raises(SystemExit):
        parse_args([])


def load_node_template_text(text: str):  # type: ignore[no-untyped-def]
    from kubus.api.manifests import parse_manifests

    (node,) = parse_manifests(text).nodes
    return node


def test_gpu_annotation_round_trips_through_json() -> None:
    annotation = codec.loads(with_gpus(load_node_template_text(NODE_YAML), []).metadata.annotations["kubus.io/gpus"])
    assert annotation == []
