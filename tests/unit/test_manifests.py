"""kubus.api.manifests and kubus.api.errors: reading Pods and Nodes as the API server would."""

from __future__ import annotations

import copy
import io
import json
import pickle
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kubus.api import (
    Affinity,
    Container,
    ContainerImage,
    ContainerPort,
    GPUDevice,
    LabelSelector,
    LabelSelectorRequirement,
    ManifestError,
    ManifestErrors,
    Manifests,
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
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    load_manifests,
    parse_manifests,
    parse_node,
    parse_pod,
    pod_gpu_request,
    pod_requests,
)
from kubus.api.manifests import json_document, read_documents, wire_pod
from kubus.api.submission import Rejected, read_submission

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
Gi, Mi = 2**30, 2**20
In, NotIn, Exists = SelectorOperator.IN, SelectorOperator.NOT_IN, SelectorOperator.EXISTS


def pod_uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_DNS, "kubus.io"), f"Pod/{namespace}/{name}"))


def a_pod(name: str = "web-1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app"}], **spec},
    }


def a_node(name: str = "n1", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


def pod_error(obj: dict[str, Any]) -> str:
    with pytest.raises(ManifestError) as info:
        parse_pod(obj, source="pods.yaml", index=3)
    assert type(info.value) is ManifestError
    return str(info.value)


def node_error(obj: dict[str, Any]) -> str:
    with pytest.raises(ManifestError) as info:
        parse_node(obj, source="nodes.yaml", index=2)
    return str(info.value)


def load_error(text: str, source: str = "m.yaml") -> str:
    with pytest.raises(ManifestError) as info:
        load_manifests(text, source=source)
    return str(info.value)


# --- errors.py ---------------------------------------------------------------------------------


def test_manifest_error_is_one_line_with_its_parts() -> None:
    e = ManifestError(
        "pods.yaml",
        "Pod default/web-1",
        "spec.containers[0].resources.requests.cpu",
        'quantity "abc" is not valid',
    )
    assert str(e) == (
        'pods.yaml: Pod default/web-1: spec.containers[0].resources.requests.cpu: quantity "abc" is not valid'
    )
    assert (e.source, e.obj, e.field) == ("pods.yaml", "Pod default/web-1", e.field)
    assert str(ManifestError("a.yaml", "", "", "cannot read")) == "a.yaml: cannot read"
    assert str(ManifestError("a.yaml", "document 2", "", "bad")) == "a.yaml: document 2: bad"
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) and again.field == e.field


def test_manifest_errors_aggregate() -> None:
    one = ManifestError("a", "b", "c", "d")
    two = ManifestError("a", "x", "", "y")
    many = ManifestErrors([one, two])
    assert isinstance(many, ManifestError)
    assert str(many) == "a: b: c: d\na: x: y"
    assert list(many) == [one, two] and len(many) == 2
    assert (many.source, many.obj, many.field, many.reason) == ("a", "b", "c", "d")
    assert str(pickle.loads(pickle.dumps(many))) == str(many)
    with pytest.raises(ValueError):
        ManifestErrors([])


# --- a pod with every field --------------------------------------------------------------------

FULL_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  namespace: ml
  uid: 6c3a1b36-0000-4000-8000-000000000001
  labels: {app: trainer, tier: "1"}
  annotations: {kubus.io/gpu-model: "NVIDIA-H100-80GB-HBM3", note: hello}
  creationTimestamp: "2024-05-01T12:00:00Z"
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: j, uid: j-1, controller: true}
  - {apiVersion: v1, kind: ConfigMap, name: c}
spec:
  schedulerName: gpu-scheduler
  priority: 1000
  priorityClassName: high
  preemptionPolicy: Never
  nodeSelector: {topology.kubernetes.io/zone: us-east-1a}
  overhead: {cpu: 250m, memory: 120Mi}
  schedulingGates: [{name: example.com/gate}]
  volumes: [{name: data, emptyDir: {}}]           # ignored
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: dedicated, value: ml}
  - {operator: Exists}
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}
          - {key: example.com/cores, operator: Gt, values: ["64"]}
        - matchFields:
          - {key: metadata.name, operator: NotIn, values: [gpu-h100-9]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 20
        preference:
          matchExpressions: [{key: spot, operator: DoesNotExist}]
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: topology.kubernetes.io/zone
        labelSelector:
          matchLabels: {app: dataset}
          matchExpressions: [{key: tier, operator: NotIn, values: ["2", "3"]}]
        namespaces: [data]
        namespaceSelector: {}
        matchLabelKeys: [pod-template-hash]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {matchExpressions: [{key: app, operator: Exists}]}
          mismatchLabelKeys: [team]
  topologySpreadConstraints:
  - maxSkew: 2
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: trainer}}
    minDomains: 3
    nodeAffinityPolicy: Honor
    nodeTaintsPolicy: Ignore
    matchLabelKeys: [pod-template-hash]
  initContainers:
  - name: fetch
    image: busybox
    resources:
      limits: {cpu: "2", memory: 1Gi}
  - name: proxy
    image: envoy
    restartPolicy: Always
    resources:
      requests: {cpu: 100m}
    ports: [{containerPort: 9901, hostPort: 9901}]
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:24.05-py3
    command: [python, train.py]                   # ignored
    resources:
      requests: {cpu: "8", memory: 64Gi, ephemeral-storage: 10Gi}
      limits: {cpu: 16, memory: 64Gi, nvidia.com/gpu: 4, hugepages-2Mi: 1Gi}
    ports:
    - {containerPort: 8080, hostPort: 80, protocol: UDP, hostIP: 10.0.0.1}
    - {containerPort: 9090}
status: {phase: Pending}                            # ignored
"""

FULL_POD_EXPECTED = Pod(
    metadata=ObjectMeta(
        name="trainer-0",
        namespace="ml",
        uid="6c3a1b36-0000-4000-8000-000000000001",
        labels={"app": "trainer", "tier": "1"},
        annotations={"kubus.io/gpu-model": "NVIDIA-H100-80GB-HBM3", "note": "hello"},
        creation_timestamp=1714564800.0,
        owner_references=(
            OwnerReference("batch/v1", "Job", "j", "j-1", controller=True),
            OwnerReference("v1", "ConfigMap", "c"),
        ),
    ),
    spec=PodSpec(
        containers=(
            Container(
                name="main",
                image="nvcr.io/nvidia/pytorch:24.05-py3",
                requests={
                    "cpu": 8000,
                    "memory": 64 * Gi,
                    "ephemeral-storage": 10 * Gi,
                    "nvidia.com/gpu": 4,
                    "hugepages-2Mi": Gi,
                },
                limits={"cpu": 16000, "memory": 64 * Gi, "nvidia.com/gpu": 4, "hugepages-2Mi": Gi},
                ports=(
                    ContainerPort(8080, host_port=80, protocol="UDP", host_ip="10.0.0.1"),
                    ContainerPort(9090),
                ),
            ),
        ),
        init_containers=(
            Container(
                name="fetch", image="busybox", requests={"cpu": 2000, "memory": Gi}, limits={"cpu": 2000, "memory": Gi}
            ),
            Container(
                name="proxy",
                image="envoy",
                requests={"cpu": 100},
                ports=(ContainerPort(9901, host_port=9901),),
                restart_policy="Always",
            ),
        ),
        scheduler_name="gpu-scheduler",
        priority=1000,
        priority_class_name="high",
        preemption_policy=PreemptionPolicy.NEVER,
        node_selector={"topology.kubernetes.io/zone": "us-east-1a"},
        affinity=Affinity(
            node_affinity=NodeAffinity(
                required=NodeSelector(
                    (
                        NodeSelectorTerm(
                            match_expressions=(
                                NodeSelectorRequirement("node.kubernetes.io/instance-type", In, ("p5.48xlarge",)),
                                NodeSelectorRequirement("example.com/cores", SelectorOperator.GT, ("64",)),
                            )
                        ),
                        NodeSelectorTerm(
                            match_fields=(NodeSelectorRequirement("metadata.name", NotIn, ("gpu-h100-9",)),)
                        ),
                    )
                ),
                preferred=(
                    PreferredSchedulingTerm(
                        20,
                        NodeSelectorTerm(
                            match_expressions=(NodeSelectorRequirement("spot", SelectorOperator.DOES_NOT_EXIST),)
                        ),
                    ),
                ),
            ),
            pod_affinity=PodAffinity(
                required=(
                    PodAffinityTerm(
                        topology_key="topology.kubernetes.io/zone",
                        label_selector=LabelSelector(
                            match_labels={"app": "dataset"},
                            match_expressions=(LabelSelectorRequirement("tier", NotIn, ("2", "3")),),
                        ),
                        namespaces=("data",),
                        namespace_selector=LabelSelector(),
                        match_label_keys=("pod-template-hash",),
                    ),
                )
            ),
            pod_anti_affinity=PodAffinity(
                preferred=(
                    WeightedPodAffinityTerm(
                        100,
                        PodAffinityTerm(
                            topology_key="kubernetes.io/hostname",
                            label_selector=LabelSelector(match_expressions=(LabelSelectorRequirement("app", Exists),)),
                            mismatch_label_keys=("team",),
                        ),
                    ),
                )
            ),
        ),
        tolerations=(
            Toleration("nvidia.com/gpu", TolerationOperator.EXISTS, "", TaintEffect.NO_SCHEDULE),
            Toleration("dedicated", TolerationOperator.EQUAL, "ml", None),
            Toleration("", TolerationOperator.EXISTS, "", None),
            Toleration(
                "node.kubernetes.io/not-ready",
                TolerationOperator.EXISTS,
                "",
                TaintEffect.NO_EXECUTE,
                toleration_seconds=300,
            ),
        ),
        topology_spread_constraints=(
            TopologySpreadConstraint(
                max_skew=2,
                topology_key="topology.kubernetes.io/zone",
                when_unsatisfiable="DoNotSchedule",
                label_selector=LabelSelector(match_labels={"app": "trainer"}),
                min_domains=3,
                node_affinity_policy="Honor",
                node_taints_policy="Ignore",
                match_label_keys=("pod-template-hash",),
            ),
        ),
        overhead={"cpu": 250, "memory": 120 * Mi},
        scheduling_gates=("example.com/gate",),
    ),
)


def test_full_pod_yaml() -> None:
    m = load_manifests(FULL_POD, source="pods.yaml")
    assert m == Manifests(pods=[FULL_POD_EXPECTED], nodes=[])


def test_full_pod_json_is_the_same() -> None:
    as_json = orjson.dumps(yaml.safe_load(FULL_POD)).decode()
    assert load_manifests(as_json).pods == [FULL_POD_EXPECTED]


def test_full_pod_requests_and_gpus() -> None:
    p = FULL_POD_EXPECTED
    # main 8 + sidecar 0.1 = 8.1 CPU; fetch 2 < 8.1; + overhead 0.25.
    assert pod_requests(p) == {
        "cpu": 8350,
        "memory": 64 * Gi + 120 * Mi,
        "ephemeral-storage": 10 * Gi,
        "nvidia.com/gpu": 4,
        "hugepages-2Mi": Gi,
    }
    gpu = pod_gpu_request(p)
    assert gpu is not None and (gpu.count, gpu.shared, gpu.models) == (4, False, ("NVIDIA-H100-80GB-HBM3",))


# --- a node with every field -------------------------------------------------------------------

FULL_NODE = """
apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  uid: node-uid-1
  labels: {topology.kubernetes.io/zone: z1, kubernetes.io/hostname: gpu-1.example}
  annotations:
    kubus.io/gpus: >-
      [{"index": 1, "uuid": "GPU-b", "model": "A100", "memory": "40Gi", "healthy": false},
       {"index": 0, "uuid": "GPU-a", "model": "A100", "memory": 42949672960}]
  creationTimestamp: 2024-05-01T14:00:00.5+02:00
spec:
  unschedulable: true
  podCIDR: 10.0.0.0/24                               # ignored
  taints:
  - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
  - {key: spot, effect: PreferNoSchedule}
  - {key: nvidia.com/gpu, value: present, effect: NoExecute}
status:
  capacity: {cpu: "48", memory: 340Gi, ephemeral-storage: 1Ti, pods: "110", hugepages-1Gi: "0"}
  allocatable: {cpu: 47500m, memory: 330Gi, ephemeral-storage: 900Gi, pods: 100}
  conditions:
  - {type: MemoryPressure, status: "False"}
  - {type: Ready, status: "False", reason: KubeletNotReady}
  images:
  - {names: [nvcr.io/nvidia/pytorch:24.05-py3, "nvcr.io/nvidia/pytorch@sha256:abc"], sizeBytes: 21474836480}
  - {names: [busybox]}
  nodeInfo: {kubeletVersion: v1.30.0}                 # ignored
"""

FULL_NODE_EXPECTED = Node(
    metadata=ObjectMeta(
        name="gpu-1",
        namespace="",
        uid="node-uid-1",
        labels={"topology.kubernetes.io/zone": "z1", "kubernetes.io/hostname": "gpu-1.example"},
        annotations={
            "kubus.io/gpus": (
                '[{"index": 1, "uuid": "GPU-b", "model": "A100", "memory": "40Gi", "healthy": false},'
                '\n {"index": 0, "uuid": "GPU-a", "model": "A100", "memory": 42949672960}]'
            )
        },
        creation_timestamp=1714564800.5,
    ),
    spec=NodeSpec(
        unschedulable=True,
        taints=(
            Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE),
            Taint("spot", "", TaintEffect.PREFER_NO_SCHEDULE),
            Taint("nvidia.com/gpu", "present", TaintEffect.NO_EXECUTE),
        ),
    ),
    status=NodeStatus(
        capacity={
            "cpu": 48000,
            "memory": 340 * Gi,
            "ephemeral-storage": 2**40,
            "pods": 110,
            "hugepages-1Gi": 0,
            "nvidia.com/gpu": 2,
        },
        allocatable={"cpu": 47500, "memory": 330 * Gi, "ephemeral-storage": 900 * Gi, "pods": 100, "nvidia.com/gpu": 1},
        images=(
            ContainerImage(("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch@sha256:abc"), 21474836480),
            ContainerImage(("busybox",), 0),
        ),
        ready=False,
    ),
    gpus=(
        GPUDevice(0, "GPU-a", "A100", 40 * Gi, True),
        GPUDevice(1, "GPU-b", "A100", 40 * Gi, False),
    ),
)


def test_full_node_yaml() -> None:
    assert load_manifests(FULL_NODE).nodes == [FULL_NODE_EXPECTED]


def test_full_node_json_is_the_same() -> None:
    as_json = orjson.dumps(yaml.safe_load(FULL_NODE)).decode()  # orjson writes RFC 3339
    assert load_manifests(as_json).nodes == [FULL_NODE_EXPECTED]


# --- defaults ----------------------------------------------------------------------------------


def test_pod_defaults() -> None:
    p = parse_pod({"metadata": {"name": "web-1"}, "spec": {"containers": [{"name": "app"}]}})
    assert p == Pod(
        metadata=ObjectMeta(name="web-1", namespace="default", uid=pod_uid("default", "web-1")),
        spec=PodSpec(containers=(Container(name="app"),)),
    )
    assert p.spec.scheduler_name == "default-scheduler"
    assert p.spec.preemption_policy is PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    assert p.spec.priority == 0


def test_uids_are_deterministic_and_distinct() -> None:
    a = parse_pod(a_pod("web-1"))
    b = parse_pod(a_pod("web-1"))
    other_ns = parse_pod({**a_pod("web-1"), "metadata": {"name": "web-1", "namespace": "x"}})
    node = parse_node(a_node("web-1"))
    assert a.metadata.uid == b.metadata.uid == pod_uid("default", "web-1")
    assert len({a.metadata.uid, other_ns.metadata.uid, node.metadata.uid}) == 3
    explicit = parse_pod({**a_pod(), "metadata": {"name": "web-1", "uid": "u-1"}})
    assert explicit.metadata.uid == "u-1"


def test_empty_scheduler_name_is_defaulted() -> None:
    assert parse_pod(a_pod(schedulerName="")).spec.scheduler_name == "default-scheduler"
    assert parse_pod(a_pod(schedulerName="gpu")).spec.scheduler_name == "gpu"


def test_limits_default_requests_per_resource() -> None:
    p = parse_pod(
        a_pod(
            containers=[
                {
                    "name": "app",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": 0},
                        "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 1},
                    },
                }
            ],
            initContainers=[{"name": "init", "resources": {"limits": {"cpu": "1"}}}],
        )
    )
    assert p.spec.containers[0].requests == {"cpu": 100, "memory": 0, "nvidia.com/gpu": 1}
    assert p.spec.containers[0].limits == {"cpu": 2000, "memory": Gi, "nvidia.com/gpu": 1}
    assert p.spec.init_containers[0].requests == {"cpu": 1000}


def test_requests_only_extended_resource_is_accepted() -> None:
    p = parse_pod(a_pod(containers=[{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 2}}}]))
    assert p.spec.containers[0].requests == {"nvidia.com/gpu": 2}


def test_null_fields_are_absent() -> None:
    p = parse_pod(
        {
            "metadata": {"name": "a", "namespace": None, "labels": None, "annotations": None},
            "spec": {
                "containers": [{"name": "c", "resources": None, "ports": None, "image": None}],
                "initContainers": None,
                "tolerations": None,
                "affinity": None,
                "nodeSelector": None,
                "priority": None,
                "overhead": None,
            },
        }
    )
    assert p == parse_pod({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}})


def test_label_and_annotation_null_values_are_empty_strings() -> None:
    p = parse_pod({**a_pod(), "metadata": {"name": "a", "labels": {"x": None}}})
    assert p.metadata.labels == {"x": ""}


def test_timestamps_stay_strings_in_yaml() -> None:
    m = load_manifests("""
kind: Pod
metadata:
  name: a
  labels: {date: 2024-01-02}
  creationTimestamp: 2024-01-02T03:04:05Z
spec: {containers: [{name: c}]}
""")
    assert m.pods[0].metadata.labels == {"date": "2024-01-02"}
    assert m.pods[0].metadata.creation_timestamp == 1704164645.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-02T03:04:05Z", 1704164645.0),
        ("2024-01-02T03:04:05z", 1704164645.0),
        ("2024-01-02T03:04:05.25Z", 1704164645.25),
        ("2024-01-02T05:04:05+02:00", 1704164645.0),
        ("2024-01-01T22:04:05-05:00", 1704164645.0),
        ("", 0.0),
    ],
)
def test_creation_timestamp(text: str, expected: float) -> None:
    p = parse_pod({**a_pod(), "metadata": {"name": "a", "creationTimestamp": text}})
    assert p.metadata.creation_timestamp == expected


def test_node_defaults() -> None:
    n = parse_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "memory": "8Gi"}}})
    assert n == Node(
        metadata=ObjectMeta(
            name="n1",
            namespace="",
            uid=str(uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_DNS, "kubus.io"), "Node//n1")),
            labels={"kubernetes.io/hostname": "n1"},
        ),
        status=NodeStatus(
            capacity={"cpu": 4000, "memory": 8 * Gi, "pods": 110},
            allocatable={"cpu": 4000, "memory": 8 * Gi, "pods": 110},
            ready=True,
        ),
    )


def test_node_without_status() -> None:
    n = parse_node({"metadata": {"name": "bare"}})
    assert n.status == NodeStatus(capacity={"pods": 110}, allocatable={"pods": 110})
    assert n.spec == NodeSpec() and n.gpus == ()


def test_node_allocatable_given_keeps_its_own_values() -> None:
    n = parse_node(a_node(capacity={"cpu": "4", "pods": 50}, allocatable={"cpu": "3"}))
    assert n.status.capacity == {"cpu": 4000, "pods": 50}
    assert n.status.allocatable == {"cpu": 3000, "pods": 110}


GPUS_3 = (
    '[{"index": 0, "model": "m", "memory": "16Gi"}, {"index": 1, "model": "m", "memory": "16Gi"},'
    ' {"index": 2, "model": "m", "memory": "16Gi", "healthy": false}]'
)


def test_node_gpu_count_defaults_from_the_annotation() -> None:
    n = parse_node(
        {"metadata": {"name": "g", "annotations": {"kubus.io/gpus": GPUS_3}}, "status": {"capacity": {"cpu": "8"}}}
    )
    assert n.status.capacity["nvidia.com/gpu"] == 3
    assert n.status.allocatable["nvidia.com/gpu"] == 2
    assert [g.healthy for g in n.gpus] == [True, True, False]


def test_node_gpu_count_given_is_kept() -> None:
    n = parse_node(
        {
            "metadata": {"name": "g", "annotations": {"kubus.io/gpus": GPUS_3}},
            "status": {"capacity": {"nvidia.com/gpu": 3}, "allocatable": {"nvidia.com/gpu": 1}},
        }
    )
    assert n.status.capacity["nvidia.com/gpu"] == 3
    assert n.status.allocatable["nvidia.com/gpu"] == 1


def test_node_without_gpu_annotation_has_no_gpu_resource() -> None:
    n = parse_node(a_node(capacity={"cpu": "8"}))
    assert "nvidia.com/gpu" not in n.status.allocatable and n.gpus == ()


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        (None, True),
        ([], True),
        ([{"type": "DiskPressure", "status": "False"}], True),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
    ],
)
def test_node_ready(conditions: list[dict[str, str]] | None, ready: bool) -> None:
    assert parse_node(a_node(conditions=conditions)).status.ready is ready


# --- pod validation: one exact message per mistake ---------------------------------------------

P = "pods.yaml: Pod default/web-1: "
C0 = "spec.containers[0]"


def with_container(**fields: Any) -> dict[str, Any]:
    return a_pod(containers=[{"name": "app", **fields}])


def with_resources(requests: Any = None, limits: Any = None) -> dict[str, Any]:
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return with_container(resources=resources)


def node_affinity(*expressions: Any, fields: Any = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields is not None:
        term = {"matchFields": fields}
    return a_pod(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    )


NA = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"


def anti_affinity_term(**term: Any) -> dict[str, Any]:
    return a_pod(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})


PAA = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"


def spread(**tsc: Any) -> dict[str, Any]:
    base = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    return a_pod(topologySpreadConstraints=[{**base, **tsc}])


def annotated(annotations: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj = a_pod(**spec)
    obj["metadata"]["annotations"] = annotations
    return obj


POD_ERRORS = [
    # --- object and metadata
    ("not a mapping", ["a"], "pods.yaml: document 3: expected a Pod (a mapping), got list"),
    ("wrong kind", {**a_pod(), "kind": "Node"}, P + 'kind: expected Pod, got "Node"'),
    (
        "wrong apiVersion",
        {**a_pod(), "apiVersion": "apps/v1"},
        P + 'apiVersion: "apps/v1" is not supported for Pod (want v1)',
    ),
    ("no metadata", {"spec": {"containers": [{"name": "a"}]}}, "pods.yaml: document 3: metadata: is required"),
    ("no name", {"metadata": {"namespace": "x"}, "spec": {}}, "pods.yaml: document 3: metadata.name: is required"),
    (
        "generateName",
        {"metadata": {"generateName": "web-"}, "spec": {}},
        "pods.yaml: document 3: metadata.name: is required (generateName is not supported)",
    ),
    (
        "name not a string",
        {"metadata": {"name": 12}, "spec": {}},
        "pods.yaml: document 3: metadata.name: expected a string, got integer 12 (quote it)",
    ),
    (
        "bad name",
        a_pod("Web_1"),
        'pods.yaml: Pod default/Web_1: metadata.name: "Web_1" is not a valid name: a lowercase '
        "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
        "must start and end with an alphanumeric character",
    ),
    (
        "bad namespace",
        {**a_pod(), "metadata": {"name": "web-1", "namespace": "a.b"}},
        'pods.yaml: Pod a.b/web-1: metadata.namespace: "a.b" is not a valid namespace: a lowercase '
        "RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
        "and end with an alphanumeric character",
    ),
    (
        "labels not a mapping",
        {**a_pod(), "metadata": {"name": "web-1", "labels": ["a"]}},
        P + "metadata.labels: expected a mapping, got list",
    ),
    (
        "label value a number",
        {**a_pod(), "metadata": {"name": "web-1", "labels": {"tier": 1}}},
        P + "metadata.labels.tier: expected a string, got integer 1 (quote it)",
    ),
    (
        "label value a YAML boolean",
        {**a_pod(), "metadata": {"name": "web-1", "labels": {"gpu": True}}},
        P + "metadata.labels.gpu: expected a string, got boolean true (quote it)",
    ),
    (
        "label key invalid",
        {**a_pod(), "metadata": {"name": "web-1", "labels": {"a b": "x"}}},
        P + 'metadata.labels[a b]: key "a b" is not valid: name part must consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character",
    ),
    (
        "label value invalid",
        {**a_pod(), "metadata": {"name": "web-1", "labels": {"a": "-x"}}},
        P + 'metadata.labels.a: "-x" is not valid: a valid label must be an empty string or consist '
        "of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character",
    ),
    (
        "label key non-string",
        {**a_pod(), "metadata": {"name": "web-1", "labels": {1: "x"}}},
        P + "metadata.labels: keys must be strings, got integer 1",
    ),
    (
        "annotation value a number",
        {**a_pod(), "metadata": {"name": "web-1", "annotations": {"kubus.io/gpu-count": 2}}},
        P + "metadata.annotations[kubus.io/gpu-count]: expected a string, got integer 2 (quote it)",
    ),
    (
        "bad timestamp",
        {**a_pod(), "metadata": {"name": "web-1", "creationTimestamp": "yesterday"}},
        P + 'metadata.creationTimestamp: "yesterday" is not an RFC 3339 time (such as 2024-05-01T12:00:00Z)',
    ),
    (
        "timestamp without zone",
        {**a_pod(), "metadata": {"name": "web-1", "creationTimestamp": "2024-01-02T03:04:05"}},
        P + 'metadata.creationTimestamp: "2024-01-02T03:04:05" is not an RFC 3339 time (such as 2024-05-01T12:00:00Z)',
    ),
    (
        "date only",
        {**a_pod(), "metadata": {"name": "web-1", "creationTimestamp": "2024-01-02"}},
        P + 'metadata.creationTimestamp: "2024-01-02" is not an RFC 3339 time (such as 2024-05-01T12:00:00Z)',
    ),
    # --- spec basics
    ("no spec", {"metadata": {"name": "web-1"}}, P + "spec: is required"),
    ("spec a list", {"metadata": {"name": "web-1"}, "spec": []}, P + "spec: expected a mapping, got list"),
    ("no containers", a_pod(containers=[]), P + "spec.containers: is required: a pod needs at least one container"),
    ("containers a mapping", a_pod(containers={"name": "a"}), P + "spec.containers: expected a list, got mapping"),
    ("null container", a_pod(containers=[None]), P + "spec.containers[0]: expected a container, got null"),
    ("container without name", a_pod(containers=[{"image": "x"}]), P + "spec.containers[0].name: is required"),
    (
        "container bad name",
        a_pod(containers=[{"name": "App"}]),
        P + 'spec.containers[0].name: "App" is not a valid container name: a lowercase RFC 1123 '
        "label must consist of lower case alphanumeric characters or '-', and must start and end "
        "with an alphanumeric character",
    ),
    (
        "duplicate container names",
        a_pod(containers=[{"name": "a"}], initContainers=[{"name": "a"}]),
        P + 'spec.containers[0].name: duplicate container name "a" (also spec.initContainers[0])',
    ),
    ("image a number", with_container(image=3), P + f"{C0}.image: expected a string, got integer 3 (quote it)"),
    ("priority a word", a_pod(priority="high"), P + 'spec.priority: expected an integer, got string "high"'),
    ("priority fractional", a_pod(priority=1.5), P + "spec.priority: expected an integer, got number 1.5"),
    ("priority boolean", a_pod(priority=True), P + "spec.priority: expected an integer, got boolean true"),
    (
        "priority out of int32",
        a_pod(priority=2**31),
        P + "spec.priority: must be between -2147483648 and 2147483647, inclusive",
    ),
    (
        "preemptionPolicy unknown",
        a_pod(preemptionPolicy="Sometimes"),
        P + 'spec.preemptionPolicy: unsupported value "Sometimes" (supported: PreemptLowerPriority, Never)',
    ),
    (
        "preemptionPolicy empty",
        a_pod(preemptionPolicy=""),
        P + 'spec.preemptionPolicy: unsupported value "" (supported: PreemptLowerPriority, Never)',
    ),
    (
        "schedulerName a number",
        a_pod(schedulerName=5),
        P + "spec.schedulerName: expected a string, got integer 5 (quote it)",
    ),
    (
        "nodeName invalid",
        a_pod(nodeName="Node_1"),
        P + 'spec.nodeName: "Node_1" is not a valid node name: a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with an "
        "alphanumeric character",
    ),
    (
        "nodeSelector value a boolean",
        a_pod(nodeSelector={"gpu": True}),
        P + "spec.nodeSelector.gpu: expected a string, got boolean true (quote it)",
    ),
    ("nodeSelector a list", a_pod(nodeSelector=["a"]), P + "spec.nodeSelector: expected a mapping, got list"),
    ("gate without name", a_pod(schedulingGates=[{}]), P + "spec.schedulingGates[0].name: is required"),
    ("gate a string", a_pod(schedulingGates=["g"]), P + 'spec.schedulingGates[0]: expected a mapping, got string "g"'),
    (
        "duplicate gates",
        a_pod(schedulingGates=[{"name": "a"}, {"name": "a"}]),
        P + 'spec.schedulingGates[1].name: duplicate scheduling gate "a"',
    ),
    (
        "gates with nodeName",
        a_pod(schedulingGates=[{"name": "a"}], nodeName="n1"),
        P + "spec.schedulingGates: cannot be set on a pod that already has spec.nodeName",
    ),
    # --- resources
    ("bad quantity", with_resources({"cpu": "abc"}), P + f'{C0}.resources.requests.cpu: quantity "abc" is not valid'),
    (
        "bad suffix",
        with_resources({"memory": "1GB"}),
        P + f'{C0}.resources.requests.memory: quantity "1GB" is not valid',
    ),
    (
        "negative request",
        with_resources({"memory": "-1Gi"}),
        P + f'{C0}.resources.requests.memory: quantity "-1Gi" must not be negative',
    ),
    (
        "negative limit",
        with_resources(limits={"cpu": -1}),
        P + f'{C0}.resources.limits.cpu: quantity "-1" must not be negative',
    ),
    (
        "boolean quantity",
        with_resources({"cpu": True}),
        P + f"{C0}.resources.requests.cpu: expected a quantity (string or number), got boolean true",
    ),
    (
        "null quantity",
        with_resources({"cpu": None}),
        P + f"{C0}.resources.requests.cpu: expected a quantity (string or number), got null",
    ),
    (
        "too large",
        with_resources({"cpu": "10E"}),
        P + f'{C0}.resources.requests.cpu: quantity "10E" is too large (more than 2^63-1 millicores)',
    ),
    (
        "unknown resource",
        with_resources({"cpus": "1"}),
        P + f'{C0}.resources.requests.cpus: "cpus" is not a resource a pod can request (cpu, '
        "memory, ephemeral-storage, hugepages-<size>, or an extended resource such as "
        "nvidia.com/gpu)",
    ),
    (
        "bad extended resource name",
        with_resources({"nvidia.com/GPU!": 1}),
        P + f'{C0}.resources.requests[nvidia.com/GPU!]: resource name "nvidia.com/GPU!" is not '
        "valid: name part must consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character",
    ),
    (
        "fractional gpu",
        with_resources(limits={"nvidia.com/gpu": "0.5"}),
        P + f'{C0}.resources.limits[nvidia.com/gpu]: quantity "0.5" must be a whole number for nvidia.com/gpu',
    ),
    (
        "request above limit",
        with_resources({"cpu": "2"}, {"cpu": "1500m"}),
        P + f"{C0}.resources.requests.cpu: must be less than or equal to cpu limit of 1500m",
    ),
    (
        "gpu request differs from limit",
        with_resources({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}),
        P + f"{C0}.resources.requests[nvidia.com/gpu]: must be equal to nvidia.com/gpu limit of 2",
    ),
    (
        "hugepages request differs",
        with_resources({"hugepages-2Mi": "2Mi"}, {"hugepages-2Mi": "4Mi"}),
        P + f"{C0}.resources.requests.hugepages-2Mi: must be equal to hugepages-2Mi limit of 4194304",
    ),
    ("resources a list", with_container(resources=["cpu"]), P + f"{C0}.resources: expected a mapping, got list"),
    ("overhead bad", a_pod(overhead={"memory": "x"}), P + 'spec.overhead.memory: quantity "x" is not valid'),
    (
        "init container bad quantity",
        a_pod(initContainers=[{"name": "i", "resources": {"requests": {"cpu": "1 core"}}}]),
        P + 'spec.initContainers[0].resources.requests.cpu: quantity "1 core" is not valid',
    ),
    (
        "init restartPolicy",
        a_pod(initContainers=[{"name": "i", "restartPolicy": "OnFailure"}]),
        P + 'spec.initContainers[0].restartPolicy: unsupported value "OnFailure" (supported: Always)',
    ),
    # --- ports
    (
        "hostPort other than containerPort with hostNetwork",
        a_pod(hostNetwork=True, containers=[{"name": "app", "ports": [{"containerPort": 80, "hostPort": 8080}]}]),
        P + f"{C0}.ports[0].hostPort: must match `containerPort` when `hostNetwork` is true",
    ),
    (
        "hostNetwork a string",
        a_pod(hostNetwork="yes"),
        P + 'spec.hostNetwork: expected true or false, got string "yes"',
    ),
    (
        "port without containerPort",
        with_container(ports=[{"hostPort": 80}]),
        P + f"{C0}.ports[0].containerPort: is required",
    ),
    (
        "port out of range",
        with_container(ports=[{"containerPort": 70000}]),
        P + f"{C0}.ports[0].containerPort: must be between 1 and 65535, inclusive",
    ),
    (
        "hostPort as a string",
        with_container(ports=[{"containerPort": 80, "hostPort": "80"}]),
        P + f'{C0}.ports[0].hostPort: expected an integer, got string "80"',
    ),
    (
        "bad protocol",
        with_container(ports=[{"containerPort": 80, "protocol": "HTTP"}]),
        P + f'{C0}.ports[0].protocol: unsupported value "HTTP" (supported: TCP, UDP, SCTP)',
    ),
    (
        "bad hostIP",
        with_container(ports=[{"containerPort": 80, "hostIP": "localhost"}]),
        P + f'{C0}.ports[0].hostIP: "localhost" is not a valid IP address',
    ),
    # --- tolerations
    (
        "toleration operator unknown",
        a_pod(tolerations=[{"key": "k", "operator": "Equals"}]),
        P + 'spec.tolerations[0].operator: unsupported value "Equals" (supported: Exists, Equal)',
    ),
    (
        "toleration effect unknown",
        a_pod(tolerations=[{"key": "k", "effect": "NoSchedul"}]),
        P + 'spec.tolerations[0].effect: unsupported value "NoSchedul" '
        "(supported: NoSchedule, PreferNoSchedule, NoExecute)",
    ),
    (
        "Exists with value",
        a_pod(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        P + "spec.tolerations[0].value: must be empty when `operator` is 'Exists'",
    ),
    (
        "empty key with Equal",
        a_pod(tolerations=[{"value": "v"}]),
        P + "spec.tolerations[0].operator: must be Exists when `key` is empty (to tolerate every taint)",
    ),
    (
        "tolerationSeconds without NoExecute",
        a_pod(tolerations=[{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]),
        P + "spec.tolerations[0].effect: must be 'NoExecute' when `tolerationSeconds` is set",
    ),
    (
        "tolerationSeconds a string",
        a_pod(tolerations=[{"key": "k", "effect": "NoExecute", "tolerationSeconds": "5"}]),
        P + 'spec.tolerations[0].tolerationSeconds: expected an integer, got string "5"',
    ),
    (
        "toleration not a mapping",
        a_pod(tolerations=["k=v:NoSchedule"]),
        P + 'spec.tolerations[0]: expected a mapping, got string "k=v:NoSchedule"',
    ),
    (
        "toleration key invalid",
        a_pod(tolerations=[{"key": "a/b/c", "operator": "Exists"}]),
        P + 'spec.tolerations[0].key: "a/b/c" is not a valid taint key: prefix part a lowercase '
        "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
        "must start and end with an alphanumeric character",
    ),
    # --- node affinity
    (
        "In without values",
        node_affinity({"key": "zone", "operator": "In"}),
        P + f"{NA}.matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        "NotIn empty values",
        node_affinity({"key": "zone", "operator": "NotIn", "values": []}),
        P + f"{NA}.matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        "Exists with values",
        node_affinity({"key": "zone", "operator": "Exists", "values": ["a"]}),
        P + f"{NA}.matchExpressions[0].values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
    ),
    (
        "Gt with two values",
        node_affinity({"key": "cores", "operator": "Gt", "values": ["1", "2"]}),
        P + f"{NA}.matchExpressions[0].values: must be specified single value when `operator` is 'Lt' or 'Gt'",
    ),
    (
        "Lt with a word",
        node_affinity({"key": "cores", "operator": "Lt", "values": ["many"]}),
        P + f'{NA}.matchExpressions[0].values[0]: "many" is not an integer',
    ),
    (
        "Gt with a float",
        node_affinity({"key": "cores", "operator": "Gt", "values": ["1.5"]}),
        P + f'{NA}.matchExpressions[0].values[0]: "1.5" is not an integer',
    ),
    (
        "value a number",
        node_affinity({"key": "cores", "operator": "Gt", "values": [4]}),
        P + f"{NA}.matchExpressions[0].values[0]: expected a string, got integer 4 (quote it)",
    ),
    (
        "operator unknown",
        node_affinity({"key": "zone", "operator": "in", "values": ["a"]}),
        P + f'{NA}.matchExpressions[0].operator: unsupported value "in" '
        "(supported: In, NotIn, Exists, DoesNotExist, Gt, Lt)",
    ),
    (
        "operator missing",
        node_affinity({"key": "zone", "values": ["a"]}),
        P + f"{NA}.matchExpressions[0].operator: is required",
    ),
    ("key missing", node_affinity({"operator": "Exists"}), P + f"{NA}.matchExpressions[0].key: is required"),
    (
        "matchFields other key",
        node_affinity(fields=[{"key": "metadata.labels", "operator": "In", "values": ["a"]}]),
        P + f'{NA}.matchFields[0].key: "metadata.labels" is not supported: must be metadata.name',
    ),
    (
        "matchFields Exists",
        node_affinity(fields=[{"key": "metadata.name", "operator": "Exists"}]),
        P + f'{NA}.matchFields[0].operator: "Exists" is not supported: must be In or NotIn',
    ),
    (
        "matchFields two values",
        node_affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]),
        P + f"{NA}.matchFields[0].values: must be only one value when `operator` is 'In' or "
        "'NotIn' for node field selector",
    ),
    (
        "no terms",
        a_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
        P + "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms: must have at least one node selector term",
    ),
    (
        "preferred weight 0",
        a_pod(
            affinity={
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {"matchExpressions": []}}
                    ]
                }
            }
        ),
        P + "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
        "must be between 1 and 100, inclusive",
    ),
    (
        "preferred without preference",
        a_pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}),
        P + "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference: is required",
    ),
    # --- pod (anti-)affinity
    ("no topologyKey", anti_affinity_term(labelSelector={}), P + f"{PAA}.topologyKey: is required"),
    (
        "label selector Gt",
        anti_affinity_term(
            topologyKey="zone", labelSelector={"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}
        ),
        P + f'{PAA}.labelSelector.matchExpressions[0].operator: "Gt" is not a valid label selector '
        "operator (supported: In, NotIn, Exists, DoesNotExist)",
    ),
    (
        "label selector In without values",
        anti_affinity_term(topologyKey="zone", labelSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        P + f"{PAA}.labelSelector.matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        "namespaces a string",
        anti_affinity_term(topologyKey="zone", namespaces="prod"),
        P + f'{PAA}.namespaces: expected a list, got string "prod"',
    ),
    (
        "weighted term weight 101",
        a_pod(
            affinity={
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 101, "podAffinityTerm": {"topologyKey": "zone"}}
                    ]
                }
            }
        ),
        P + "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
        "must be between 1 and 100, inclusive",
    ),
    (
        "weighted term missing",
        a_pod(affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}),
        P + "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm: is required",
    ),
    # --- topology spread
    (
        "maxSkew 0",
        spread(maxSkew=0),
        P + "spec.topologySpreadConstraints[0].maxSkew: must be between 1 and 2147483647, inclusive",
    ),
    (
        "whenUnsatisfiable unknown",
        spread(whenUnsatisfiable="Never"),
        P + 'spec.topologySpreadConstraints[0].whenUnsatisfiable: unsupported value "Never" '
        "(supported: DoNotSchedule, ScheduleAnyway)",
    ),
    (
        "whenUnsatisfiable missing",
        spread(whenUnsatisfiable=None),
        P + "spec.topologySpreadConstraints[0].whenUnsatisfiable: is required",
    ),
    (
        "minDomains with ScheduleAnyway",
        spread(whenUnsatisfiable="ScheduleAnyway", minDomains=2),
        P + "spec.topologySpreadConstraints[0].minDomains: can only be set when `whenUnsatisfiable` is 'DoNotSchedule'",
    ),
    (
        "minDomains 0",
        spread(minDomains=0),
        P + "spec.topologySpreadConstraints[0].minDomains: must be between 1 and 2147483647, inclusive",
    ),
    (
        "nodeTaintsPolicy unknown",
        spread(nodeTaintsPolicy="Respect"),
        P + 'spec.topologySpreadConstraints[0].nodeTaintsPolicy: unsupported value "Respect" '
        "(supported: Honor, Ignore)",
    ),
    (
        "duplicate constraints",
        a_pod(
            topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            ]
        ),
        P + "spec.topologySpreadConstraints[1]: duplicate topologyKey and whenUnsatisfiable pair "
        "(zone, DoNotSchedule) with spec.topologySpreadConstraints[0]",
    ),
    # --- GPU annotations
    (
        "gpu-memory invalid",
        annotated({"kubus.io/gpu-memory": "20 GB"}),
        P + 'metadata.annotations[kubus.io/gpu-memory]: quantity "20 GB" is not valid',
    ),
    (
        "gpu-count without memory",
        annotated({"kubus.io/gpu-count": "2"}),
        P + "metadata.annotations[kubus.io/gpu-count]: needs kubus.io/gpu-memory (the slice of "
        "each shared GPU to take); to ask for whole GPUs use the resource nvidia.com/gpu",
    ),
    (
        "gpu-model without a gpu",
        annotated({"kubus.io/gpu-model": "A100"}),
        P + "metadata.annotations[kubus.io/gpu-model]: the pod asks for no GPU: add the resource "
        "nvidia.com/gpu (whole GPUs) or kubus.io/gpu-memory (a shared slice)",
    ),
    (
        "gpu-devices malformed",
        annotated({"kubus.io/gpu-devices": "0 3"}, nodeName="n1"),
        P + 'metadata.annotations[kubus.io/gpu-devices]: "0 3" is not a comma-separated list of '
        'GPU indices (such as "0,3")',
    ),
    (
        "gpu-devices without a gpu",
        annotated({"kubus.io/gpu-devices": "0"}, nodeName="n1"),
        P + "metadata.annotations[kubus.io/gpu-devices]: the pod asks for no GPU",
    ),
    (
        "gpu-devices unbound",
        annotated({"kubus.io/gpu-devices": "0", "kubus.io/gpu-memory": "1Gi"}),
        P + "metadata.annotations[kubus.io/gpu-devices]: is only valid on a pod bound to a node (spec.nodeName)",
    ),
    (
        "gpu-devices count mismatch",
        annotated(
            {"kubus.io/gpu-devices": "0,1"},
            nodeName="n1",
            containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        ),
        P + "metadata.annotations[kubus.io/gpu-devices]: lists 2 GPU(s) but the pod asks for 1",
    ),
]


@pytest.mark.parametrize(("obj", "message"), [pytest.param(o, m, id=i) for i, o, m in POD_ERRORS])
def test_pod_errors(obj: Any, message: str) -> None:
    assert pod_error(copy.deepcopy(obj)) == message


def test_pod_gpu_annotations_accepted() -> None:
    shared = parse_pod(annotated({"kubus.io/gpu-memory": "10Gi", "kubus.io/gpu-count": "2"}))
    assert pod_gpu_request(shared) is not None
    bound = parse_pod(
        annotated(
            {"kubus.io/gpu-devices": "1,3"},
            nodeName="n1",
            containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
        )
    )
    assert bound.metadata.annotations["kubus.io/gpu-devices"] == "1,3"


# --- node validation --------------------------------------------------------------------------

N = "nodes.yaml: Node n1: "

NODE_ERRORS = [
    ("not a mapping", "n1", 'nodes.yaml: document 2: expected a Node (a mapping), got string "n1"'),
    ("wrong kind", {**a_node(), "kind": "Pod"}, N + 'kind: expected Node, got "Pod"'),
    ("no name", {"metadata": {}}, "nodes.yaml: document 2: metadata.name: is required"),
    ("bad capacity", a_node(capacity={"cpu": "lots"}), N + 'status.capacity.cpu: quantity "lots" is not valid'),
    (
        "negative allocatable",
        a_node(allocatable={"memory": "-1"}),
        N + 'status.allocatable.memory: quantity "-1" must not be negative',
    ),
    (
        "resource name with a space",
        a_node(capacity={"my resource": "1"}),
        N + 'status.capacity[my resource]: resource name "my resource" is not valid: name part '
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character",
    ),
    (
        "label key with a newline",
        {**a_node(), "metadata": {"name": "n1", "labels": {"a\nb": "x"}}},
        N + 'metadata.labels[a\\nb]: key "a\\nb" is not valid: name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character",
    ),
    (
        "fractional extended resource",
        a_node(capacity={"example.com/fpga": "1.5"}),
        N + 'status.capacity[example.com/fpga]: quantity "1.5" must be a whole number for example.com/fpga',
    ),
    (
        "unschedulable a string",
        {**a_node(), "spec": {"unschedulable": "true"}},
        N + 'spec.unschedulable: expected true or false, got string "true"',
    ),
    (
        "taint without effect",
        {**a_node(), "spec": {"taints": [{"key": "k"}]}},
        N + "spec.taints[0].effect: is required",
    ),
    (
        "taint effect unknown",
        {**a_node(), "spec": {"taints": [{"key": "k", "effect": "Never"}]}},
        N + 'spec.taints[0].effect: unsupported value "Never" (supported: NoSchedule, PreferNoSchedule, NoExecute)',
    ),
    (
        "taint without key",
        {**a_node(), "spec": {"taints": [{"effect": "NoSchedule"}]}},
        N + "spec.taints[0].key: is required",
    ),
    (
        "taint value invalid",
        {**a_node(), "spec": {"taints": [{"key": "k", "value": "a b", "effect": "NoSchedule"}]}},
        N + 'spec.taints[0].value: "a b" is not valid: a valid label must be an empty string or '
        "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character",
    ),
    (
        "duplicate taint",
        {
            **a_node(),
            "spec": {
                "taints": [
                    {"key": "k", "value": "a", "effect": "NoSchedule"},
                    {"key": "k", "value": "b", "effect": "NoSchedule"},
                ]
            },
        },
        N + "spec.taints[1]: taints must be unique by key and effect: k:NoSchedule repeats spec.taints[0]",
    ),
    (
        "image names a string",
        a_node(images=[{"names": "busybox"}]),
        N + 'status.images[0].names: expected a list, got string "busybox"',
    ),
    (
        "image size negative",
        a_node(images=[{"names": ["a"], "sizeBytes": -1}]),
        N + "status.images[0].sizeBytes: must be between 0 and 9223372036854775807, inclusive",
    ),
    (
        "condition status bool",
        a_node(conditions=[{"type": "Ready", "status": True}]),
        N + "status.conditions[0].status: expected a string, got boolean true (quote it)",
    ),
    (
        "condition status unknown",
        a_node(conditions=[{"type": "Ready", "status": "Yes"}]),
        N + 'status.conditions[0].status: unsupported value "Yes" (supported: True, False, Unknown)',
    ),
    (
        "gpus not JSON",
        {**a_node(), "metadata": {"name": "n1", "annotations": {"kubus.io/gpus": "8x H100"}}},
        N + "metadata.annotations[kubus.io/gpus]: not valid JSON: unexpected content after "
        "document: line 1 column 2 (char 1)",
    ),
    (
        "gpus bad device",
        {
            **a_node(),
            "metadata": {
                "name": "n1",
                "annotations": {"kubus.io/gpus": '[{"index": 0, "model": "A100", "memory": "40GB"}]'},
            },
        },
        N + 'metadata.annotations[kubus.io/gpus]: [0].memory: quantity "40GB" is not valid',
    ),
]


@pytest.mark.parametrize(("obj", "message"), [pytest.param(o, m, id=i) for i, o, m in NODE_ERRORS])
def test_node_errors(obj: Any, message: str) -> None:
    assert node_error(copy.deepcopy(obj)) == message


# --- files: formats, documents, lists ----------------------------------------------------------

POD_A = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n"
NODE_N = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"


def test_multi_document_yaml_keeps_order_and_skips_empty_documents() -> None:
    text = f"---\n{POD_A}---\n---\n{NODE_N}---\n# only a comment\n---\n" + POD_A.replace("name: a", "name: b")
    m = load_manifests(text)
    assert [p.name for p in m.pods] == ["a", "b"]
    assert [n.name for n in m.nodes] == ["n"]


@pytest.mark.parametrize("kind", ["List", "PodList", "NodeList"])
def test_lists(kind: str) -> None:
    items = {
        "List": [yaml.safe_load(POD_A), yaml.safe_load(NODE_N)],
        "PodList": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}],
        "NodeList": [{"metadata": {"name": "n"}}],
    }[kind]
    m = load_manifests(orjson.dumps({"apiVersion": "v1", "kind": kind, "items": items}))
    assert [p.name for p in m.pods] == (["a"] if kind != "NodeList" else [])
    assert [n.name for n in m.nodes] == (["n"] if kind != "PodList" else [])


def test_nested_list_and_empty_items() -> None:
    text = orjson.dumps(
        {
            "kind": "List",
            "items": [
                {"kind": "List", "items": [yaml.safe_load(POD_A)]},
                {"kind": "PodList", "items": None},
            ],
        }
    )
    assert [p.name for p in load_manifests(text).pods] == ["a"]


def test_json_array_of_documents_is_not_an_object() -> None:
    assert load_error("[" + orjson.dumps(yaml.safe_load(POD_A)).decode() + "]") == (
        "m.yaml: document 1: expected a Kubernetes object (a mapping), got list"
    )


def test_yaml_flow_mapping_that_is_not_json() -> None:
    m = load_manifests("{kind: Pod, metadata: {name: a}, spec: {containers: [{name: c}]}}")
    assert [p.name for p in m.pods] == ["a"]


def test_empty_inputs() -> None:
    assert load_manifests("") == Manifests()
    assert load_manifests("---\n---\n") == Manifests()
    assert load_manifests(b"") == Manifests()


def test_path_bytes_stdin_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(POD_A.replace("{name: c}", "{name: c, resources: {requests: {cpu: x}}}"))
    expected_tail = 'Pod default/a: spec.containers[0].resources.requests.cpu: quantity "x" is not valid'
    for arg in (f, str(f)):
        with pytest.raises(ManifestError) as info:
            load_manifests(arg)
        assert str(info.value) == f"{f}: {expected_tail}"
    with pytest.raises(ManifestError) as info:
        load_manifests(f, source="pods.yaml")
    assert str(info.value) == f"pods.yaml: {expected_tail}"
    with pytest.raises(ManifestError) as info:
        load_manifests(f.read_bytes())
    assert str(info.value) == f"<stdin>: {expected_tail}"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(f.read_bytes())))
    with pytest.raises(ManifestError) as info:
        load_manifests("-")
    assert str(info.value) == f"<stdin>: {expected_tail}"


def test_parse_manifests_never_reads_a_path(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(POD_A)
    with pytest.raises(ManifestError) as info:
        parse_manifests(str(f))
    assert str(info.value) == (
        f'<stdin>: document 1: expected a Kubernetes object (a mapping), got string "{f}"'
        if len(str(f)) <= 40
        else "<stdin>: document 1: expected a Kubernetes object (a mapping), got string"
    )
    one_line = "{kind: Pod, metadata: {name: a}, spec: {containers: [{name: c}]}}"
    assert [p.name for p in parse_manifests(one_line, source="bus").pods] == ["a"]
    assert [p.name for p in parse_manifests(POD_A.encode(), source="bus").pods] == ["a"]
    with pytest.raises(ManifestError) as info:
        parse_manifests(b"kind: Pod\n", source="bus")
    assert str(info.value) == "bus: document 1: metadata: is required"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + POD_A.encode())
    assert [p.name for p in load_manifests(f).pods] == ["a"]


def test_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ManifestError) as info:
        load_manifests(missing)
    assert str(info.value) == f"{missing}: cannot read the file: No such file or directory"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kind: Pod\n\xff\xfe")
    with pytest.raises(ManifestError) as info:
        load_manifests(binary, source="bin.yaml")
    assert str(info.value) == "bin.yaml: not UTF-8 text: invalid start byte at byte 10"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: Pod\nmetadata: {name: a\nspec: {}\n",
            "m.yaml: document 1: invalid YAML at line 3, column 5: did not find expected ',' or '}'",
        ),
        ("- 1\n- 2\n", "m.yaml: document 1: expected a Kubernetes object (a mapping), got list"),
        ("just text\n", 'm.yaml: document 1: expected a Kubernetes object (a mapping), got string "just text"'),
        ("metadata: {name: a}\n", "m.yaml: document 1: kind: is required (Pod, Node or List)"),
        (
            "kind: Deployment\napiVersion: apps/v1\nmetadata: {name: a}\n",
            'm.yaml: document 1: kind: "Deployment" is not supported; kubus reads Pod, Node, PodGroup, Namespace, '
            "PriorityClass, PodDisruptionBudget, Service, ReplicationController, ReplicaSet, StatefulSet and "
            "List (PodList, NodeList)",
        ),
        (
            "kind: 3\n",
            "m.yaml: document 1: kind: integer 3 is not supported; kubus reads "
            "Pod, Node, PodGroup, Namespace, PriorityClass, PodDisruptionBudget, "
            "Service, ReplicationController, ReplicaSet, StatefulSet and List (PodList, NodeList)",
        ),
        (
            "kind: List\napiVersion: v2\nitems: []\n",
            'm.yaml: document 1: apiVersion: "v2" is not supported for List (want v1)',
        ),
        ("kind: List\nitems: {a: 1}\n", "m.yaml: document 1: items: expected a list, got mapping"),
        (
            "kind: List\nitems: [1]\n",
            "m.yaml: document 1 items[0]: expected a Kubernetes object (a mapping), got integer 1",
        ),
        ("kind: List\nitems: [{kind: Pod}]\n", "m.yaml: document 1 items[0]: metadata: is required"),
        (
            "kind: List\nitems: [{metadata: {name: a}}]\n",
            "m.yaml: document 1 items[0]: kind: is required (Pod, Node or List)",
        ),
    ],
)
def test_document_errors(text: str, message: str) -> None:
    assert load_error(text) == message


@pytest.mark.parametrize(
    ("text", "start"),
    [
        (
            POD_A + "---\nkind: Pod\n  bad: indent\n",
            "m.yaml: document 2: invalid YAML at line 7, column 6: mapping values are not allowed",
        ),
        ("a: *nope\n", "m.yaml: document 1: invalid YAML at line 1, column 4: found undefined alias"),
    ],
)
def test_yaml_errors_name_the_line(text: str, start: str) -> None:
    # The rest of the wording depends on whether PyYAML's C or pure-Python parser runs.
    assert load_error(text).startswith(start)


def test_duplicates_are_errors() -> None:
    assert load_error(POD_A + "---\n" + POD_A) == (
        "m.yaml: Pod default/a: metadata.name: duplicate: the same pod is already defined in document 1"
    )
    assert load_error(NODE_N + "---\n" + NODE_N) == (
        "m.yaml: Node n: metadata.name: duplicate: the same node is already defined in document 1"
    )
    other_ns = POD_A.replace("{name: a}", "{name: a, namespace: other}")
    assert len(load_manifests(POD_A + "---\n" + other_ns).pods) == 2
    assert len(load_manifests(POD_A + "---\n" + NODE_N.replace("name: n", "name: a")).pods) == 1


def test_every_bad_object_is_reported_once() -> None:
    text = "\n---\n".join(
        [
            POD_A.replace("name: a}", "name: a, labels: [x]}"),
            POD_A.replace("name: a", "name: b"),
            "kind: Deployment\n",
            NODE_N.replace("{name: n}", "{name: n, annotations: {kubus.io/gpus: '[1]'}}"),
            POD_A.replace("{name: c}", "{name: c, ports: [{containerPort: 0}]}").replace("name: a}", "name: e}"),
        ]
    )
    with pytest.raises(ManifestErrors) as info:
        load_manifests(text, source="all.yaml")
    assert str(info.value).splitlines() == [
        "all.yaml: Pod default/a: metadata.labels: expected a mapping, got list",
        'all.yaml: document 3: kind: "Deployment" is not supported; kubus reads '
        "Pod, Node, PodGroup, Namespace, PriorityClass, PodDisruptionBudget, "
        "Service, ReplicationController, ReplicaSet, StatefulSet and List (PodList, NodeList)",
        "all.yaml: Node n: metadata.annotations[kubus.io/gpus]: [0]: expected a GPU object, got integer",
        "all.yaml: Pod default/e: spec.containers[0].ports[0].containerPort: must be between 1 and 65535, inclusive",
    ]
    assert len(info.value.errors) == 4


# --- a key given twice: refused as kube's strict decoding refuses it, never "the last one wins" ---

TWICE = [
    (
        "top level",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\nspec: {}\n",
        'm.yaml: Pod default/a: spec: duplicate field "spec" at line 5 (first at line 4)',
    ),
    (
        "metadata",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  namespace: x\n  name: b\nspec: {containers: [{name: c}]}\n",
        'm.yaml: Pod x/b: metadata.name: duplicate field "name" at line 6 (first at line 4)',
    ),
    (
        "container",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web-1}\nspec:\n  containers:\n  - name: c\n"
        "    resources:\n      requests: {cpu: 1}\n    image: x\n    resources:\n      limits: {cpu: 2}\n",
        'm.yaml: Pod default/web-1: spec.containers[0].resources: duplicate field "resources" at line 10 '
        "(first at line 7)",
    ),
    (
        "flow mapping",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {app: x, app: y}}\nspec: {containers: [{name: c}]}\n",
        'm.yaml: Pod default/a: metadata.labels.app: duplicate field "app" at line 3, column 38 (first at column 30)',
    ),
    (
        "list item",
        "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: n1}\n- kind: Pod\n"
        "  metadata: {name: p}\n  spec:\n    containers: [{name: c}]\n    nodeSelector: {zone: a}\n"
        "    nodeSelector: {zone: b}\n",
        'm.yaml: Pod default/p: spec.nodeSelector: duplicate field "nodeSelector" at line 11 (first at line 10)',
    ),
    (
        "list itself",
        "apiVersion: v1\nkind: List\nitems: []\nitems:\n- {kind: Node, metadata: {name: n1}}\n",
        'm.yaml: document 1: items: duplicate field "items" at line 4 (first at line 3)',
    ),
    (
        "node",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  allocatable: {cpu: '1', cpu: '64'}\n",
        'm.yaml: Node n1: status.allocatable.cpu: duplicate field "cpu" at line 5, column 27 (first at column 17)',
    ),
    (
        "extended resource key",
        "kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n"
        "        nvidia.com/gpu: 1\n        nvidia.com/gpu: 8\n",
        'm.yaml: Pod default/a: spec.containers[0].resources.limits[nvidia.com/gpu]: duplicate field "nvidia.com/gpu" '
        "at line 9 (first at line 8)",
    ),
    (
        "json",
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": '
        '[{"name": "c", "resources": {"requests": {"cpu": "1"}}, "resources": {}}]}}',
        'm.yaml: Pod default/a: spec.containers[0].resources: duplicate field "resources"',
    ),
    (
        "json list item",
        '{"kind": "PodList", "items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}, '
        '{"metadata": {"name": "b", "name": "c"}, "spec": {"containers": [{"name": "c"}]}}]}',
        'm.yaml: Pod default/c: metadata.name: duplicate field "name"',
    ),
    (
        "json with a blank before a colon",
        '{"kind" : "Pod", "metadata" : {"name" : "a"}, "spec" : {"containers" : [{"name" : "c"}]}, "kind" : "Pod"}',
        'm.yaml: Pod default/a: kind: duplicate field "kind"',
    ),
    (
        "json with a colon spelled as an escape",  # its colon makes up, in orjson's output, for the one dropped
        '{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}, "kind": "Pod", '
        '"note": "\\u003a"}',
        'm.yaml: Pod default/a: kind: duplicate field "kind"',
    ),
    (
        "json with a key spelled with escapes",  # "k\u0069nd" is "kind": only the decoded keys count
        '{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}, "k\\u0069nd": "Pod", '
        '"note": "\\u0022:"}',
        'm.yaml: Pod default/a: kind: duplicate field "kind"',
    ),
]


@pytest.mark.parametrize(("text", "message"), [pytest.param(t, m, id=i) for i, t, m in TWICE])
def test_a_key_given_twice_is_refused(text: str, message: str) -> None:
    assert load_error(text) == message
    path_and_reason = message.split(": ", 2)[2]
    if "List" not in text and "items" not in text:
        with pytest.raises(yaml.YAMLError, match="duplicate field") as info:
            list(read_documents(text))
        assert str(info.value) == path_and_reason


def test_every_object_with_a_key_given_twice_is_reported() -> None:
    twice = POD_A.replace("{name: c}", "{name: c, name: d}")
    text = "\n---\n".join([twice, POD_A.replace("name: a", "name: b"), NODE_N, twice.replace("name: a", "name: e")])
    with pytest.raises(ManifestErrors) as info:
        load_manifests(text, source="all.yaml")
    assert str(info.value).splitlines() == [
        'all.yaml: Pod default/a: spec.containers[0].name: duplicate field "name" at line 4, column 31 '
        "(first at column 22)",
        'all.yaml: Pod default/e: spec.containers[0].name: duplicate field "name" at line 21, column 31 '
        "(first at column 22)",
    ]


def test_merge_keys_may_be_overridden_but_not_given_twice() -> None:
    base = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels: &common {app: web, tier: x}\nspec:\n"
    overridden = base + "  nodeSelector: {<<: *common, tier: y}\n  containers: [{name: c}]\n"
    assert load_manifests(overridden).pods[0].spec.node_selector == {"app": "web", "tier": "y"}
    twice = base + "  nodeSelector: {<<: *common, tier: y, tier: z}\n  containers: [{name: c}]\n"
    assert load_error(twice) == (
        'm.yaml: Pod default/a: spec.nodeSelector.tier: duplicate field "tier" at line 7, column 40 '
        "(first at column 31)"
    )


def test_a_key_given_twice_in_another_kind_is_left_to_the_kind_error() -> None:
    assert load_error("kind: Deployment\nmetadata: {name: a}\nspec: {}\nspec: {}\n") == (
        'm.yaml: document 1: kind: "Deployment" is not supported; kubus reads '
        "Pod, Node, PodGroup, Namespace, PriorityClass, PodDisruptionBudget, "
        "Service, ReplicationController, ReplicaSet, StatefulSet and List (PodList, NodeList)"
    )


@pytest.mark.parametrize(
    "text",
    [
        # Colons, quotes and escapes inside strings, blanks before colons.
        '{"kind": "Pod", "metadata": {"name": "a", "annotations": {"x": "{\\"k\\": 1, \\"k\\" : 2}"}}, '
        '"spec": {"containers": [{"name": "c"}]}}',
        '{"kind": "Pod", "metadata": {"name": "a", "annotations": {"x": "\\u0022:", "y": "\\u003a\\u003A"}}, '
        '"spec": {"containers": [{"name": "c"}]}}',
        '{"kind" : "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}',
        '{"kind": "Pod", "metadata": {"name": "a", "labels": {"a": "1", "b": "1"}}, '
        '"spec": {"containers": [{"name": "c"}]}}',
    ],
)
def test_json_whose_keys_are_all_different_is_read(text: str) -> None:
    assert [p.name for p in load_manifests(text).pods] == ["a"]
    assert json_document(text) == json.loads(text)
    assert json_document(text.encode()) == json.loads(text)


def test_json_nested_deeper_than_orjson_writes_is_checked_the_slow_way() -> None:
    deep = "[" * 300 + "]" * 300  # orjson reads 1024 levels, writes 254
    pod = '{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}, "x": %s%s}'
    assert [p.name for p in load_manifests(pod % (deep, "")).pods] == ["a"]
    assert load_error(pod % (deep, ', "kind": "Pod"')) == 'm.yaml: Pod default/a: kind: duplicate field "kind"'


def test_json_document_refuses_what_may_give_a_key_twice() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        json_document(b'{"a": 1, "b": {"c": 1, "c": 2}}')
    with pytest.raises(orjson.JSONDecodeError):
        json_document(b"{")
    assert json_document(b'{"a": 1, "b": {"c": 1, "d": [{"c": 2}]}}') == {"a": 1, "b": {"c": 1, "d": [{"c": 2}]}}


def _submitted(data: bytes) -> Rejected:
    with pytest.raises(Rejected) as info:
        read_submission(data, source="bus", max_manifest_bytes=1 << 20)
    return info.value


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"ns"},"spec":{"containers":'
            b'[{"name":"c","resources":{"limits":{"cpu":"1"}},"resources":{}}]}}',
            'bus: Pod ns/web-1: spec.containers[0].resources: duplicate field "resources"',
        ),
        (
            b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"ns","namespace":"ns"},'
            b'"spec":{"containers":[{"name":"c"}]}}',
            'bus: Pod ns/web-1: metadata.namespace: duplicate field "namespace"',
        ),
        (
            b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"ns"},"spec":{"containers":'
            b'[{"name":"c"}],"priority":1,"priority":2}}',
            'bus: Pod ns/web-1: spec.priority: duplicate field "priority"',
        ),
        (
            b"apiVersion: v1\nkind: Pod\nmetadata: {name: web-1, namespace: ns}\nspec:\n  containers: [{name: c}]\n"
            b"  containers: [{name: d}]\n",
            'bus: Pod ns/web-1: spec.containers: duplicate field "containers" at line 6 (first at line 5)',
        ),
    ],
)
def test_the_queue_refuses_a_pod_that_gives_a_key_twice(pod: bytes, message: str) -> None:
    rejected = _submitted(pod)
    assert str(rejected) == message
    assert (rejected.reason, rejected.key) == ("Invalid", "ns/web-1")  # still named, for its events


# --- quantities: at most 2**63-1 in base units, whatever the resource and wherever it is written ----

HUGE_EI = "1000000000000000000000000000000Ei"
INT64 = 2**63 - 1

QUANTITY_BOUNDS = [
    # resource, the most it takes, one base unit more, its unit in the message
    ("cpu", "9223372036854775807m", "9223372036854775808m", " millicores"),
    ("memory", "9223372036854775807", "9223372036854775808", " bytes"),
    ("memory", "9223372036854775807", "8Ei", " bytes"),
    ("ephemeral-storage", "9223372036854775807", "9223372036854775808", " bytes"),
    ("example.com/foo", "9223372036854775807", "9223372036854775808", ""),
]


@pytest.mark.parametrize(("resource", "most", "more", "unit"), QUANTITY_BOUNDS)
@pytest.mark.parametrize("where", ["requests", "limits"])
def test_pod_quantities_are_bounded(resource: str, most: str, more: str, unit: str, where: str) -> None:
    pod = parse_pod(with_resources(**{where: {resource: most}}))
    assert pod.spec.containers[0].requests[resource] == INT64
    path = f"{C0}.resources.{where}" + (f"[{resource}]" if "/" in resource else f".{resource}")
    assert pod_error(with_resources(**{where: {resource: more}})) == (
        P + f'{path}: quantity "{more}" is too large (more than 2^63-1{unit})'
    )


@pytest.mark.parametrize(("resource", "most", "more", "unit"), QUANTITY_BOUNDS)
def test_node_quantities_are_bounded(resource: str, most: str, more: str, unit: str) -> None:
    node = parse_node(a_node(allocatable={resource: most}, capacity={resource: most}))
    assert node.status.allocatable[resource] == node.status.capacity[resource] == INT64
    path = "status.allocatable" + (f"[{resource}]" if "/" in resource else f".{resource}")
    assert node_error(a_node(allocatable={resource: more})) == (
        N + f'{path}: quantity "{more}" is too large (more than 2^63-1{unit})'
    )


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            with_resources({"memory": HUGE_EI}),
            P + f'{C0}.resources.requests.memory: quantity "{HUGE_EI}" is too large (more than 2^63-1 bytes)',
        ),
        (
            with_resources(limits={"memory": HUGE_EI}),
            P + f'{C0}.resources.limits.memory: quantity "{HUGE_EI}" is too large (more than 2^63-1 bytes)',
        ),
        (
            with_resources({"cpu": "1e1000"}),
            P + f'{C0}.resources.requests.cpu: quantity "1e1000" is too large (more than 2^63-1 millicores)',
        ),
        (
            a_pod(overhead={"memory": "9Ei"}),
            P + 'spec.overhead.memory: quantity "9Ei" is too large (more than 2^63-1 bytes)',
        ),
        (
            a_pod(initContainers=[{"name": "i", "resources": {"limits": {"hugepages-2Mi": "8Ei"}}}]),
            P + 'spec.initContainers[0].resources.limits.hugepages-2Mi: quantity "8Ei" is too large (more than '
            "2^63-1 bytes)",
        ),
    ],
)
def test_huge_pod_quantities_are_too_large(obj: dict[str, Any], message: str) -> None:
    assert pod_error(obj) == message


def test_huge_quantities_are_too_large_in_every_kind_and_annotation() -> None:
    assert node_error(a_node(capacity={"memory": HUGE_EI})) == (
        N + f'status.capacity.memory: quantity "{HUGE_EI}" is too large (more than 2^63-1 bytes)'
    )
    gpus = json.dumps([{"index": 0, "model": "H100", "memory": "9Ei"}])
    node = a_node()
    node["metadata"]["annotations"] = {"kubus.io/gpus": gpus}
    assert node_error(node) == (
        N + 'metadata.annotations[kubus.io/gpus]: [0].memory: quantity "9Ei" is too large (more than 2^63-1 bytes)'
    )
    group = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: g}\n"
    assert load_error(group + f"spec: {{minMember: 1, minResources: {{memory: {HUGE_EI}}}}}\n") == (
        f'm.yaml: PodGroup default/g: spec.minResources.memory: quantity "{HUGE_EI}" is too large (more than '
        "2^63-1 bytes)"
    )


# --- fuzz: bad input never escapes as anything but ManifestError --------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "1", "500m", "1Gi", "-1", "In", "Exists", "NoSchedule", "Always", "metadata.name"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(max_size=8)
            | st.sampled_from(["key", "operator", "values", "name", "cpu", "effect", "items", "kind"]),
            children,
            max_size=3,
        )
    ),
    max_leaves=12,
)

POD_PATHS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "creationTimestamp"),
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests"),
    ("spec", "containers", 0, "resources", "limits", "cpu"),
    ("spec", "containers", 0, "ports"),
    ("spec", "initContainers"),
    ("spec", "tolerations"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "affinity", "podAntiAffinity"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "overhead"),
    ("spec", "schedulingGates"),
    ("spec", "priority"),
    ("spec", "nodeSelector"),
    ("spec", "preemptionPolicy"),
    ("kind",),
    ("apiVersion",),
]


def set_path(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step] if isinstance(step, int) else obj.setdefault(step, {})
    obj[path[-1]] = value


@settings(max_examples=300)
@given(path=st.sampled_from(POD_PATHS), value=json_values)
def test_fuzzed_pods_raise_only_manifest_errors(path: tuple[Any, ...], value: Any) -> None:
    obj = a_pod(containers=[{"name": "c", "resources": {"limits": {"cpu": "1"}}}])
    set_path(obj, path, value)
    try:
        parse_pod(obj)
    except ManifestError as e:
        assert "\n" not in str(e)


@settings(max_examples=200)
@given(
    value=json_values,
    key=st.sampled_from(
        ["metadata", "spec", "status", "capacity", "allocatable", "taints", "images", "conditions", "annotations"]
    ),
)
def test_fuzzed_nodes_raise_only_manifest_errors(value: Any, key: str) -> None:
    obj: dict[str, Any] = {"kind": "Node", "metadata": {"name": "n"}, "spec": {}, "status": {}}
    if key in ("metadata", "spec", "status"):
        obj[key] = value
    elif key in ("taints",):
        obj["spec"][key] = value
    elif key == "annotations":
        text = value if isinstance(value, str) else json.dumps(value)
        obj["metadata"]["annotations"] = {"kubus.io/gpus": text}
    else:
        obj["status"][key] = value
    try:
        parse_node(obj)
    except ManifestError as e:
        assert "\n" not in str(e)


@settings(max_examples=200)
@given(st.text(max_size=80))
def test_fuzzed_text_raises_only_manifest_errors(text: str) -> None:
    try:
        load_manifests(text + "\n")
    except ManifestErrors as e:
        assert len(str(e).splitlines()) == len(e.errors)
    except ManifestError as e:
        assert "\n" not in str(e)


# --- the shipped examples ----------------------------------------------------------------------


def test_example_cluster() -> None:
    m = load_manifests(EXAMPLES / "cluster.yaml")
    nodes = {n.name: n for n in m.nodes}
    assert len(nodes) == 12 and not m.pods
    assert nodes["cpu-c2"].spec.unschedulable
    h100 = nodes["gpu-h100-2"]
    assert len(h100.gpus) == 8 and [g.index for g in h100.gpus if not g.healthy] == [5]
    assert h100.status.allocatable["nvidia.com/gpu"] == 7
    assert Taint("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE) in h100.spec.taints
    a100 = nodes["gpu-a100-1"]
    assert a100.status.allocatable["nvidia.com/gpu"] == 4
    assert {g.model for g in a100.gpus} == {"NVIDIA-A100-SXM4-40GB"}
    assert all(g.memory == 40 * Gi for g in a100.gpus)
    assert nodes["cpu-a1"].status.images
    assert {n.metadata.labels["topology.kubernetes.io/zone"] for n in m.nodes} == {
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    }


def test_example_pods() -> None:
    m = load_manifests(EXAMPLES / "pods.yaml")
    pods = {p.name: p for p in m.pods}
    assert len(pods) >= 20 and not m.nodes
    assert pods["gated-1"].spec.scheduling_gates == ("example.com/quota-check",)
    assert pods["running-1"].spec.node_name == "cpu-a1"
    assert pods["ingress-1"].spec.containers[0].ports[0].host_port == 80
    shared = pod_gpu_request(pods["infer-tp2-1"])
    assert shared is not None and (shared.shared, shared.count, shared.memory) == (True, 2, 16 * Gi)
    whole = pod_gpu_request(pods["train-llm-1"])
    assert whole is not None and (whole.shared, whole.count) == (False, 8)
    assert pods["batch-etl-1"].spec.init_containers[1].restart_policy == "Always"


def test_example_bad_pods() -> None:
    with pytest.raises(ManifestErrors) as info:
        load_manifests(EXAMPLES / "bad-pods.yaml", source="bad-pods.yaml")
    lines = str(info.value).splitlines()
    assert len(lines) == 14
    assert all(line.startswith("bad-pods.yaml: ") for line in lines)
    assert lines[0] == (
        "bad-pods.yaml: Pod default/bad-quantity: spec.containers[0].resources.requests.cpu: "
        'quantity "1.5 cores" is not valid'
    )


# --- hostNetwork and the fields kubus does not honour ------------------------------------------


def test_host_network_ports_default_their_host_port_as_the_api_server_does() -> None:
    pod = parse_pod(
        a_pod(
            hostNetwork=True,
            containers=[{"name": "app", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}],
            initContainers=[{"name": "init", "ports": [{"containerPort": 9000, "hostPort": 9000}]}],
        )
    )
    assert [p.host_port for p in pod.spec.containers[0].ports] == [80, 53]
    assert [p.host_port for p in pod.spec.init_containers[0].ports] == [9000]
    # without hostNetwork a container port takes no host port
    plain = parse_pod(a_pod(containers=[{"name": "app", "ports": [{"containerPort": 80}]}]))
    assert plain.spec.containers[0].ports[0].host_port == 0


def test_fields_kubus_does_not_honour_are_listed_never_dropped() -> None:
    pod = parse_pod(
        a_pod(
            volumes=[
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "disk", "gcePersistentDisk": {"pdName": "d"}},
            ],
            resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}],
            runtimeClassName="kata",
        )
    )
    lines = pod.spec.unhonoured
    assert [line.split(":", 1)[0] for line in lines] == [
        "spec.volumes[0].persistentVolumeClaim",
        "spec.volumes[2].ephemeral",
        "spec.volumes[3].gcePersistentDisk",
        "spec.resourceClaims",
        "spec.runtimeClassName",
    ]
    assert "VolumeBinding" in lines[0] and "DynamicResources" in lines[3] and "overhead" in lines[4]
    # what kubus does honour is not listed: emptyDir, a RuntimeClass whose overhead is given
    assert parse_pod(a_pod(volumes=[{"name": "s", "emptyDir": {}}])).spec.unhonoured == ()
    assert parse_pod(a_pod(runtimeClassName="kata", overhead={"cpu": "250m"})).spec.unhonoured == ()


# ---- a pod on the wire: one JSON Pod, read the short way ------------------------------------------


def _wire(name: str, spec: dict[str, Any]) -> bytes:
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": "u"}, "spec": spec}
    return orjson.dumps(doc)


WIRE_SPEC = {
    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}],
    "tolerations": [{"key": "a", "operator": "Exists"}],
    "nodeSelector": {"zone": "a"},
}


def test_a_wire_pod_is_what_parse_manifests_reads() -> None:
    for spec in (WIRE_SPEC, {"containers": [{"name": "c"}], "priority": 5, "schedulerName": "other"}):
        manifest = _wire("p", spec)
        assert wire_pod(manifest, "u", "ns/p") == parse_manifests(manifest).pods[0]
        assert wire_pod(manifest, "other-uid", "ns/p").metadata.uid == "other-uid"


def test_pods_of_one_template_share_their_spec_and_each_error_names_its_pod() -> None:
    spec = {**WIRE_SPEC, "containers": [{"name": f"c-{uuid.uuid4().hex[:8]}"}]}  # a spec no other test read
    a, b = wire_pod(_wire("a", spec), "u", "ns/a"), wire_pod(_wire("b", spec), "u", "ns/b")
    assert a.spec is b.spec and (a.name, b.name) == ("a", "b")
    bad = {**spec, "priority": "high"}
    for name in ("x", "y"):  # an error is never kept: each pod gets its own, as parse_manifests says it
        with pytest.raises(ManifestError) as got:
            wire_pod(_wire(name, bad), "u", f"ns/{name}")
        with pytest.raises(ManifestError) as want:
            parse_manifests(_wire(name, bad), source=f"pod ns/{name}")
        message = str(got.value)
        assert message == str(want.value) and f"ns/{name}" in message and "spec.priority" in message


def test_a_wire_pod_that_is_no_json_pod_is_read_as_any_manifest() -> None:
    yaml_pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c}]}\n"
    assert wire_pod(yaml_pod, "u", "ns/p").spec.containers[0].name == "c"
    with pytest.raises(ValueError, match="expected one Pod"):
        wire_pod(orjson.dumps({"kind": "List", "items": []}), "u", "ns/p")
    with pytest.raises(ManifestError, match="invalid"):
        wire_pod(b'{"kind": "Pod", ', "u", "ns/p")


def test_deletion_timestamp_marks_a_terminating_pod() -> None:
    """metadata.deletionTimestamp (RFC 3339) is carried as seconds since the epoch: the pod is
    terminating (kube's DeletionTimestamp != nil); without it, or empty, it is not."""
    meta = {"name": "a", "deletionTimestamp": "2024-05-01T12:00:00Z"}
    p = parse_pod({**a_pod(), "metadata": meta})
    assert p.metadata.deletion_timestamp == 1714564800.0 and p.terminating
    for meta in ({"name": "a"}, {"name": "a", "deletionTimestamp": None}, {"name": "a", "deletionTimestamp": ""}):
        p = parse_pod({**a_pod(), "metadata": meta})
        assert p.metadata.deletion_timestamp is None and not p.terminating
    with pytest.raises(ManifestError, match=r"metadata\.deletionTimestamp.*not an RFC 3339 time"):
        parse_pod({**a_pod(), "metadata": {"name": "a", "deletionTimestamp": "soon"}})
