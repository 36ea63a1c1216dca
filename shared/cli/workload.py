"""Sample clusters and workloads for `kubus up --demo`, `kubus bench` and the end-to-end tests.

`NODE_TEMPLATE` is the simulated GPU node (the same as ``deploy/examples/node-template.yaml``):
the gpu-agent stamps out as many nodes as asked from it. `mixed_workload` makes Pod manifests
(plain dicts, as a user would write them) of a mixed GPU/CPU workload that such nodes can run:
CPU services, whole-GPU training jobs, shared-GPU inference, a few high-priority batch pods.
Every pod carries its kind in the label ``kubus.io/workload`` so summaries can group by it.

`POD_CONSTRAINT_WORKLOADS` are kubernetes v1.28 scheduler_perf's workloads that stress the
plugins looking at other pods (InterPodAffinity, PodTopologySpread), on `cpu_node_template`
nodes (4 cpu / 32Gi / 110 pods, spread over zones as the workload says): init pods placed first,
then the measured ones; `pod_constraint_pods` makes their manifests.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from kubus.api.synthetic import SIMULATED_ZONES_ANNOTATION, ZONE_LABEL
from kubus.core.codec import JSONMapping, JSONObject, JSONValue

__all__ = [
    "BENCH_WORKLOADS",
    "CPU_NODE_TEMPLATE",
    "HOSTNAME_LABEL",
    "KIND_LABEL",
    "NODE_TEMPLATE",
    "POD_CONSTRAINT_WORKLOADS",
    "SIMULATED_ZONES_ANNOTATION",
    "ZONE_LABEL",
    "PodConstraintWorkload",
    "PodShape",
    "cpu_node_template",
    "gpu_scheduler_config",
    "impossible_pods",
    "mixed_workload",
    "pod_constraint_pods",
    "pod_constraints_scheduler_config",
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


def cpu_node_template(zones: Sequence[str] = ()) -> str:
    """A simulated CPU node as kube's scheduler_perf makes them: 4 cpu, 32Gi, 110 pods, no GPU,
    no taint. With ``zones``, the gpu-agent puts node ``i`` in ``zones[i % len(zones)]``
    (label ``topology.kubernetes.io/zone``); without, the nodes have no zone."""
    annotations = f'  annotations:\n    {SIMULATED_ZONES_ANNOTATION}: "{",".join(zones)}"\n' if zones else ""
    return f"""\
# A simulated CPU node for `kubus up --node-template` and the gpu-agent's --template, the shape
# of kube's scheduler_perf nodes: 4 cores, 32Gi, 110 pods, no GPU. The agent stamps out N nodes
# from it, each with its own name{" and, round-robin, one of the zones the annotation lists" if zones else ""}.
apiVersion: v1
kind: Node
metadata:
  name: sim-cpu
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
{annotations}status:
  capacity: {{cpu: "4", memory: 32Gi, pods: "110"}}
  allocatable: {{cpu: "4", memory: 32Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True"}}]
"""


CPU_NODE_TEMPLATE = cpu_node_template()
"""`cpu_node_template` without zones."""


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


def pod_constraints_scheduler_config(profiles: Sequence[str] = ("default-scheduler",)) -> str:
    """A KubeSchedulerConfiguration with one profile per name, each kube's default profile (no
    GPUFit: the pod-constraint workloads run on CPU nodes), every node filtered and scored
    (percentageOfNodesToScore 100, as bench/pod_constraints.py runs them)."""
    lines = [
        "# Written by kubus: kube's default profile, once per profile; every node scored.",
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "percentageOfNodesToScore: 100",
        "profiles:",
    ]
    lines += [f"  - schedulerName: {name}" for name in profiles]
    return "\n".join(lines) + "\n"


_IMAGES = ("nginx:1.27", "python:3.12", "redis:7", "registry.example.com/api:2.0.1")
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pod(
    namespace: str, name: str, kind: str, scheduler: str, container: JSONObject, **spec: JSONValue
) -> JSONObject:
    labels = {KIND_LABEL: kind, "app": name.rsplit("-", 1)[0]}
    annotations = spec.pop("annotations", None)
    metadata: JSONObject = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    body: JSONObject = {"containers": [container], **spec}
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
) -> list[JSONObject]:
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
            spec: JSONObject = {}
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


def impossible_pods(namespace: str = "default", prefix: str = "pod") -> list[JSONObject]:
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


BENCH_WORKLOADS = (
    "mixed",
    "pod-affinity",
    "pod-anti-affinity",
    "topology-spreading",
    "preferred-topology-spreading",
    "preemption-basic",
)
"""`kubus bench --workload` choices: `mixed_workload`, then `POD_CONSTRAINT_WORKLOADS`."""

HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class PodShape:
    """The pods of one half (init or measured) of a pod-constraint workload."""

    namespace: str
    labels: Mapping[str, str]
    spec: JSONMapping = field(default_factory=dict)
    """Added to the pod's spec: affinity, topologySpreadConstraints, priority."""
    cpu: str = "100m"


@dataclass(frozen=True)
class PodConstraintWorkload:
    """One of kube scheduler_perf's pod-constraint workloads (v1.28 performance-config.yaml)."""

    name: str
    """`kubus bench --workload` name."""
    kube_name: str
    """scheduler_perf's name."""
    zones: tuple[str, ...]
    """Zones of the nodes, round-robin; () for none."""
    init: PodShape
    measured: PodShape
    init_pods: int
    """scheduler_perf's init pods at 5,000 nodes."""
    measured_pods: int
    """scheduler_perf's measured pods at 5,000 nodes."""
    kube_pods_per_second: float
    """kube-scheduler's figure for it on a 2-core machine at 5,000 nodes."""
    plugin: str
    """The plugin whose constraint the pods carry."""
    nodes: int = 5000
    """scheduler_perf's node count for it (`kubus bench --nodes` when not given)."""


def _affinity(kind: str, color: str, key: str) -> JSONObject:
    term = {
        "labelSelector": {"matchLabels": {"color": color}},
        "topologyKey": key,
        "namespaces": ["sched-0", "sched-1"],
    }
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def _spread(when: str) -> JSONObject:
    constraint = {
        "maxSkew": 5,
        "topologyKey": ZONE_LABEL,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"color": "blue"}},
    }
    return {"topologySpreadConstraints": [constraint]}


_MOONS = ("moon-1", "moon-2", "moon-3")

POD_CONSTRAINT_WORKLOADS: Mapping[str, PodConstraintWorkload] = {
    w.name: w
    for w in (
        PodConstraintWorkload(
            "pod-affinity",
            "SchedulingPodAffinity",
            ("zone1",),
            PodShape("sched-0", {"color": "blue"}, _affinity("podAffinity", "blue", ZONE_LABEL)),
            PodShape("sched-1", {"color": "blue"}, _affinity("podAffinity", "blue", ZONE_LABEL)),
            5000,
            1000,
            36,
            "InterPodAffinity",
        ),
        PodConstraintWorkload(
            "pod-anti-affinity",
            "SchedulingPodAntiAffinity",
            (),
            PodShape("sched-0", {"color": "green"}, _affinity("podAntiAffinity", "green", HOSTNAME_LABEL)),
            PodShape("sched-1", {"color": "green"}, _affinity("podAntiAffinity", "green", HOSTNAME_LABEL)),
            1000,
            1000,
            112,
            "InterPodAffinity",
        ),
        PodConstraintWorkload(
            "topology-spreading",
            "TopologySpreading",
            _MOONS,
            PodShape("bench", {}),
            PodShape("bench", {"color": "blue"}, _spread("DoNotSchedule")),
            5000,
            2000,
            82,
            "PodTopologySpread",
        ),
        PodConstraintWorkload(
            "preferred-topology-spreading",
            "PreferredTopologySpreading",
            _MOONS,
            PodShape("bench", {}),
            PodShape("bench", {"color": "blue"}, _spread("ScheduleAnyway")),
            5000,
            2000,
            84,
            "PodTopologySpread",
        ),
        PodConstraintWorkload(
            "preemption-basic",
            "PreemptionBasic",
            (),
            PodShape("bench", {}, {"priority": 0}, cpu="900m"),
            PodShape("bench", {}, {"priority": 10}, cpu="3"),
            2000,
            500,
            40,
            "DefaultPreemption",
            nodes=500,
        ),
    )
}
"""kubernetes v1.28 scheduler_perf's SchedulingPodAffinity (every node in zone1; required
podAffinity to color=blue on the zone, namespaces sched-0 and sched-1), SchedulingPodAntiAffinity
(required podAntiAffinity to color=green on the hostname: one such pod per node), TopologySpreading
(zones moon-1..3; plain init pods, then a DoNotSchedule spread, maxSkew 5 on the zone, over
color=blue) and PreferredTopologySpreading (the same, ScheduleAnyway): pods of 100m / 500Mi, kube's
figures at 5,000 nodes. PreemptionBasic: init pods of 900m at priority 0 (four per node), then
pods of 3 cpu at priority 10 that must each preempt three; scheduler_perf runs it at 500 nodes
(`--nodes 500`: 2,000 init and 500 measured pods)."""


def _constraint_pod(name: str, shape: PodShape, scheduler: str) -> JSONObject:
    container = {
        "name": "pause",
        "image": "registry.k8s.io/pause:3.5",
        "ports": [{"containerPort": 80}],
        "resources": {"requests": {"cpu": shape.cpu, "memory": "500Mi"}},
    }
    metadata: JSONObject = {"name": name, "namespace": shape.namespace}
    if shape.labels:
        metadata["labels"] = dict(shape.labels)
    spec: JSONObject = {"containers": [container], **shape.spec}
    if scheduler != "default-scheduler":
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pod_constraint_pods(
    workload: PodConstraintWorkload,
    init: int,
    measured: int,
    *,
    profiles: Sequence[str] = ("default-scheduler",),
) -> tuple[list[JSONObject], list[JSONObject]]:
    """The init pods (``init-<i>``) and the measured pods (``measured-<i>``) of ``workload``, as
    Pod manifests, each half spread round-robin over ``profiles``."""
    return (
        [_constraint_pod(f"init-{i:05d}", workload.init, profiles[i % len(profiles)]) for i in range(init)],
        [_constraint_pod(f"measured-{i:05d}", workload.measured, profiles[i % len(profiles)]) for i in range(measured)],
    )


def to_yaml(pods: Iterable[JSONObject]) -> str:
    """Manifests as one multi-document YAML text."""
    return yaml.safe_dump_all(list(pods), sort_keys=False)
