"""Sample clusters and workloads for `kubus up --demo`, `kubus bench` and the end-to-end tests.

`NODE_TEMPLATE` is the simulated GPU node (the same as ``deploy/examples/node-template.yaml``):
the gpu-agent stamps out as many nodes as asked from it. `mixed_workload` makes Pod manifests
(plain dicts, as a user would write them) of a mixed GPU/CPU workload that such nodes can run:
CPU services, whole-GPU training jobs, shared-GPU inference, a few high-priority batch pods.
Every pod carries its kind in the label ``kubus.io/workload`` so summaries can group by it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import yaml

__all__ = [
    "KIND_LABEL",
    "NODE_TEMPLATE",
    "gpu_scheduler_config",
    "impossible_pods",
    "mixed_workload",
    "to_yaml",
]

KIND_LABEL = "kubus.io/workload"
"""Label holding the workload kind of a generated pod (cpu, gpu, gpu-shared, batch, impossible)."""

GPU_MODEL = "NVIDIA-H100-80GB-HBM3"

NODE_TEMPLATE = f"""\
# A simulated GPU node for `kubus up --node-template` and the gpu-agent's --template:
# 8 x H100 80GB, 96 cores, 1 TiB, 110 pods. The agent stamps out N nodes from it, each with its
# own name. Untainted, so CPU pods may share these nodes with GPU pods (a taint such as
# nvidia.com/gpu=present:NoSchedule would keep CPU pods off them).
apiVersion: v1
kind: Node
metadata:
  name: sim-gpu
  labels:
    node.kubernetes.io/instance-type: p5.48xlarge
    nvidia.com/gpu.product: {GPU_MODEL}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
  annotations:
    kubus.io/gpus: |
      [{{"index": 0, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 1, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 2, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 3, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 4, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 5, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 6, "model": "{GPU_MODEL}", "memory": "80Gi"}},
       {{"index": 7, "model": "{GPU_MODEL}", "memory": "80Gi"}}]
status:
  capacity: {{cpu: "96", memory: 1024Gi, ephemeral-storage: 2Ti, pods: "110"}}
  allocatable: {{cpu: 95500m, memory: 1000Gi, ephemeral-storage: 1900Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True"}}]
"""


def gpu_scheduler_config(profiles: Sequence[str] = ("default-scheduler",)) -> str:
    """A KubeSchedulerConfiguration with one profile per name: kube's default plugins plus
    GPUFit (kubus's default set has no GPU plugin, and the simulated nodes are GPU nodes: without
    GPUFit a profile cannot pick GPU devices for a pod, so GPU pods would not be placed)."""
    lines = [
        "# Written by kubus: kube's default profile plus GPUFit, once per profile.",
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "profiles:",
    ]
    for name in profiles:
        lines += [
            f"  - schedulerName: {name}",
            "    plugins:",
            "      multiPoint:",
            "        enabled:",
            "          - name: GPUFit",
            "            weight: 2",
        ]
    return "\n".join(lines) + "\n"


_IMAGES = ("nginx:1.27", "python:3.12", "redis:7", "registry.example.com/api:2.0.1")
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pod(
    namespace: str, name: str, kind: str, scheduler: str, container: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    labels = {KIND_LABEL: kind, "app": name.rsplit("-", 1)[0]}
    annotations = spec.pop("annotations", None)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    body: dict[str, Any] = {"containers": [container], **spec}
    if scheduler != "default-scheduler":
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}


def mixed_workload(
    count: int,
    *,
    seed: int = 0,
    namespace: str = "default",
    prefix: str = "pod",
    profiles: Sequence[str] = ("default-scheduler",),
) -> list[dict[str, Any]]:
    """``count`` Pod manifests, named ``<prefix>-<kind>-<i>``, spread round-robin over
    ``profiles`` (spec.schedulerName). Mix: 55% CPU services (250m-2 CPU, 256Mi-4Gi), 20%
    whole-GPU jobs (1, 2 or 4 GPUs, some pinned to the H100 model), 20% shared-GPU slices
    (10Gi or 20Gi of GPU memory), 5% high-priority CPU batch pods. Same seed, same pods."""
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        scheduler = profiles[i % len(profiles)]
        roll = rng.random()
        image = rng.choice(_IMAGES)
        if roll < 0.55:
            kind = "cpu"
            requests = {"cpu": rng.choice(("250m", "500m", "1", "2")), "memory": rng.choice(("256Mi", "1Gi", "4Gi"))}
            container = {"name": "app", "image": image, "resources": {"requests": requests}}
            spec: dict[str, Any] = {}
        elif roll < 0.75:
            kind = "gpu"
            gpus = rng.choice(("1", "1", "2", "4"))
            container = {
                "name": "train",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": gpus}},
            }
            spec = {"tolerations": [_GPU_TOLERATION]}
            if rng.random() < 0.3:
                spec["annotations"] = {"kubus.io/gpu-model": GPU_MODEL}
        elif roll < 0.95:
            kind = "gpu-shared"
            container = {
                "name": "infer",
                "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
                "resources": {"requests": {"cpu": "1", "memory": "8Gi"}},
            }
            spec = {
                "tolerations": [_GPU_TOLERATION],
                "annotations": {"kubus.io/gpu-memory": rng.choice(("10Gi", "20Gi"))},
            }
        else:
            kind = "batch"
            container = {"name": "batch", "image": image, "resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}
            spec = {"priority": 1000}
        pods.append(_pod(namespace, f"{prefix}-{kind}-{i:05d}", kind, scheduler, container, **spec))
    return pods


def impossible_pods(namespace: str = "default", prefix: str = "pod") -> list[dict[str, Any]]:
    """Two pods no simulated node can take (16 GPUs on an 8-GPU node; a zone that does not
    exist), so a demo has a "why pending" to show."""
    return [
        _pod(
            namespace,
            f"{prefix}-impossible-16gpus",
            "impossible",
            "default-scheduler",
            {
                "name": "huge",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"limits": {"nvidia.com/gpu": "16"}},
            },
            tolerations=[_GPU_TOLERATION],
        ),
        _pod(
            namespace,
            f"{prefix}-impossible-zone",
            "impossible",
            "default-scheduler",
            {"name": "app", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m"}}},
            nodeSelector={"topology.kubernetes.io/zone": "mars-1a"},
        ),
    ]


def to_yaml(pods: Iterable[dict[str, Any]]) -> str:
    """Manifests as one multi-document YAML text."""
    return yaml.safe_dump_all(list(pods), sort_keys=False)
