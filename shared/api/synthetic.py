"""Synthetic clusters and workloads: realistic random Nodes and Pods from a seed.

For benchmarks, property tests and demos. The mix resembles a GPU cluster: CPU nodes of a few
instance types across zones, GPU nodes (8×H100, 8×A100, 4×L4) tainted for GPU pods, some
cordoned or PreferNoSchedule-tainted nodes, images on nodes; pods with requests, node
selectors and affinities, tolerations, whole and shared GPUs. Same seed, same cluster.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kubus.api.gpus import GPU_MEMORY_ANNOTATION, GPU_MODEL_ANNOTATION
from kubus.api.names import label_value_error
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
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

GI = 1024**3
MI = 1024**2
ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")
IMAGES = (
    ("registry.k8s.io/pause:3.9", 700_000),
    ("nginx:1.27", 190 * MI),
    ("python:3.12", 1000 * MI),
    ("nvcr.io/nvidia/pytorch:24.05-py3", 9 * GI),
    ("redis:7", 120 * MI),
    ("ghcr.io/example/trainer:v2", 4 * GI),
)
GPU_TAINT = Taint(NVIDIA_GPU, "present", TaintEffect.NO_SCHEDULE)


@dataclass(frozen=True, slots=True)
class _NodeKind:
    instance: str
    cpu: int  # milli
    memory: int
    gpus: tuple[str, int, int] | None = None  # model, count, memory per GPU


CPU_KINDS = (
    _NodeKind("m5.2xlarge", 8000, 32 * GI),
    _NodeKind("m5.4xlarge", 16000, 64 * GI),
    _NodeKind("c5.9xlarge", 36000, 72 * GI),
    _NodeKind("r5.8xlarge", 32000, 256 * GI),
)
GPU_KINDS = (
    _NodeKind("p5.48xlarge", 192000, 2048 * GI, ("NVIDIA-H100-80GB-HBM3", 8, 80 * GI)),
    _NodeKind("p4d.24xlarge", 96000, 1152 * GI, ("NVIDIA-A100-SXM4-40GB", 8, 40 * GI)),
    _NodeKind("g6.12xlarge", 48000, 192 * GI, ("NVIDIA-L4", 4, 24 * GI)),
)


def make_node(rng: random.Random, i: int, *, gpu_fraction: float = 0.25) -> Node:
    gpu = rng.random() < gpu_fraction
    kind = rng.choice(GPU_KINDS if gpu else CPU_KINDS)
    name = f"node-{i:06d}"
    zone = ZONES[i % len(ZONES)]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": zone,
        "node.kubernetes.io/instance-type": kind.instance,
        "pool": "gpu" if gpu else rng.choice(("general", "general", "batch")),
        "cores": str(kind.cpu // 1000),
    }
    taints: list[Taint] = []
    if gpu:
        taints.append(GPU_TAINT)
    if rng.random() < 0.05:
        taints.append(Taint("maintenance", "soon", TaintEffect.PREFER_NO_SCHEDULE))
    if rng.random() < 0.02:
        taints.append(Taint("dedicated", rng.choice(("infra", "db")), TaintEffect.NO_SCHEDULE))
    devices: tuple[GPUDevice, ...] = ()
    allocatable = {CPU: kind.cpu - 100, MEMORY: kind.memory - GI, PODS: 110, EPHEMERAL_STORAGE: 200 * GI}
    if kind.gpus:
        model, count, mem = kind.gpus
        devices = tuple(GPUDevice(d, f"GPU-{i:06d}-{d}", model, mem, healthy=rng.random() > 0.02) for d in range(count))
        allocatable[NVIDIA_GPU] = sum(1 for g in devices if g.healthy)
    images = tuple(
        ContainerImage((name_,), size) for name_, size in IMAGES if rng.random() < (0.9 if size < GI else 0.3)
    )
    return Node(
        ObjectMeta(name=name, namespace="", uid=f"uid-{name}", labels=labels),
        NodeSpec(unschedulable=rng.random() < 0.01, taints=tuple(taints)),
        NodeStatus(capacity=dict(allocatable), allocatable=allocatable, images=images),
        gpus=devices,
    )


def make_nodes(n: int, *, seed: int = 0, gpu_fraction: float = 0.25) -> list[Node]:
    rng = random.Random(seed)
    return [make_node(rng, i, gpu_fraction=gpu_fraction) for i in range(n)]


def make_pod(rng: random.Random, i: int, *, gpu_fraction: float = 0.2, prefix: str = "pod") -> Pod:
    name = f"{prefix}-{i:06d}"
    annotations: dict[str, str] = {}
    tolerations: list[Toleration] = []
    node_selector: dict[str, str] = {}
    affinity = None
    requests = {
        CPU: rng.choice((100, 250, 500, 1000, 2000, 4000)),
        MEMORY: rng.choice((128, 256, 512, 1024, 4096)) * MI,
    }
    ports: tuple[ContainerPort, ...] = ()
    image = rng.choice(IMAGES)[0]
    r = rng.random()
    if r < gpu_fraction:
        tolerations.append(Toleration(NVIDIA_GPU, TolerationOperator.EXISTS, "", TaintEffect.NO_SCHEDULE))
        image = "nvcr.io/nvidia/pytorch:24.05-py3"
        if rng.random() < 0.6:
            requests[NVIDIA_GPU] = rng.choice((1, 1, 2, 4, 8))
            if rng.random() < 0.3:
                annotations[GPU_MODEL_ANNOTATION] = rng.choice(("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"))
        else:
            annotations[GPU_MEMORY_ANNOTATION] = f"{rng.choice((4, 8, 10, 20))}Gi"
    else:
        roll = rng.random()
        if roll < 0.15:
            node_selector["pool"] = rng.choice(("general", "batch"))
        elif roll < 0.3:
            affinity = Affinity(
                node_affinity=NodeAffinity(
                    required=NodeSelector(
                        (
                            NodeSelectorTerm(
                                (
                                    NodeSelectorRequirement(
                                        "topology.kubernetes.io/zone", SelectorOperator.IN, tuple(rng.sample(ZONES, 2))
                                    ),
                                )
                            ),
                        )
                    ),
                    preferred=(
                        PreferredSchedulingTerm(
                            rng.randint(1, 100),
                            NodeSelectorTerm((NodeSelectorRequirement("cores", SelectorOperator.GT, ("15",)),)),
                        ),
                    ),
                )
            )
        if rng.random() < 0.02:
            ports = (ContainerPort(8080, host_port=rng.choice((8080, 9100))),)
    return Pod(
        ObjectMeta(
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            labels={"app": f"app-{i % 50}"},
            annotations=annotations,
            creation_timestamp=1_700_000_000.0 + i,
        ),
        PodSpec(
            containers=(Container("main", image, requests=requests, limits={}, ports=ports),),
            priority=rng.choice((0, 0, 0, 100, 1000)),
            node_selector=node_selector,
            affinity=affinity,
            tolerations=tuple(tolerations),
        ),
    )


def make_pods(n: int, *, seed: int = 1, gpu_fraction: float = 0.2, prefix: str = "pod") -> list[Pod]:
    rng = random.Random(seed)
    return [make_pod(rng, i, gpu_fraction=gpu_fraction, prefix=prefix) for i in range(n)]


def make_replicas(templates: int, replicas: int, *, seed: int = 1, gpu_fraction: float = 0.2) -> list[Pod]:
    """`templates` random pod templates, each stamped out `replicas` times (as a ReplicaSet or a
    Job does): same spec, own name and uid. Interleaved, as several controllers would submit."""
    bases = make_pods(templates, seed=seed, gpu_fraction=gpu_fraction, prefix="tmpl")
    pods = []
    for r in range(replicas):
        for t, base in enumerate(bases):
            name = f"rs{t:03d}-{r:05d}"
            meta = ObjectMeta(
                name=name,
                namespace=base.metadata.namespace,
                uid=f"uid-{name}",
                labels=base.metadata.labels,
                annotations=base.metadata.annotations,
                creation_timestamp=base.metadata.creation_timestamp,
            )
            pods.append(Pod(meta, base.spec))
    return pods


# ---- zones of simulated nodes (the gpu-agent stamps nodes from a template) ----------------------

SIMULATED_ZONES_ANNOTATION = "kubus.io/simulated-zones"
"""Template annotation: comma-separated zones the simulated nodes are spread over, round-robin."""

ZONE_LABEL = "topology.kubernetes.io/zone"


def simulated_zones(template: Node) -> tuple[str, ...]:
    """The zones the template's `SIMULATED_ZONES_ANNOTATION` lists, in order; () without the
    annotation. Raises ValueError (one line) for an empty entry or one that is not a label value."""
    raw = template.metadata.annotations.get(SIMULATED_ZONES_ANNOTATION)
    if raw is None:
        return ()
    zones = tuple(z.strip() for z in raw.split(","))
    for i, zone in enumerate(zones, start=1):
        where = f"node template {template.name}: annotation {SIMULATED_ZONES_ANNOTATION}: {raw!r}: zone {i}"
        if not zone:
            raise ValueError(f'{where} is empty (expected comma-separated zone names, e.g. "moon-1,moon-2")')
        problem = label_value_error(zone)
        if problem:
            raise ValueError(f"{where} ({zone!r}) is not a valid label value: {problem}")
    return zones
