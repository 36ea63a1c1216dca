"""kubus.api.gpus: the kubus.io/gpus node annotation and the GPU requests of pods."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubus.api.errors import ManifestError
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
from kubus.api.manifests import parse_node
from kubus.api.objects import Container, GPUDevice, Node, ObjectMeta, Pod, PodSpec

Gi = 2**30
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"


def test_annotation_names() -> None:
    assert GPUS_ANNOTATION == "kubus.io/gpus"
    assert GPU_MEMORY_ANNOTATION == "kubus.io/gpu-memory"
    assert GPU_MODEL_ANNOTATION == "kubus.io/gpu-model"
    assert GPU_COUNT_ANNOTATION == "kubus.io/gpu-count"
    assert GPU_DEVICES_ANNOTATION == "kubus.io/gpu-devices"


# --- nodes ------------------------------------------------------------------------------------


def test_parse_node_gpus_sorts_and_defaults() -> None:
    value = (
        '[{"index": 1, "uuid": "GPU-b", "model": "NVIDIA-H100-80GB-HBM3", "memory": "80Gi",'
        '  "healthy": false},'
        ' {"index": 0, "uuid": "GPU-a", "model": "NVIDIA-H100-80GB-HBM3", "memory": 85899345920}]'
    )
    assert parse_node_gpus(value) == (
        GPUDevice(index=0, uuid="GPU-a", model=H100, memory=80 * Gi, healthy=True),
        GPUDevice(index=1, uuid="GPU-b", model=H100, memory=80 * Gi, healthy=False),
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[]", ()),
        ('[{"index": 0, "model": "m", "memory": "40Gi"}]', (GPUDevice(index=0, uuid="", model="m", memory=40 * Gi),)),
        (
            '[{"index": 0, "model": "m", "memory": "40G", "uuid": null, "healthy": null}]',
            (GPUDevice(index=0, uuid="", model="m", memory=40 * 10**9),),
        ),
        (
            '[{"index": 0, "model": "m", "memory": "0.5Gi", "healthy": true}]',
            (GPUDevice(index=0, uuid="", model="m", memory=Gi // 2),),
        ),
    ],
)
def test_parse_node_gpus_valid(value: str, expected: tuple[GPUDevice, ...]) -> None:
    assert parse_node_gpus(value) == expected


GOOD = '"model": "m", "memory": "1Gi"'


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "not valid JSON: Input is a zero-length, empty document: line 1 column 1 (char 0)"),
        ("{", "not valid JSON: unexpected end of data: line 1 column 2 (char 1)"),
        ('{"index": 0}', "expected a JSON list of GPU objects, got object"),
        ("[1]", "[0]: expected a GPU object, got integer"),
        ('[{"model": "m", "memory": "1Gi"}]', "[0].index: is required"),
        ('[{"index": 0, "memory": "1Gi"}]', "[0].model: is required"),
        ('[{"index": 0, "model": "m"}]', "[0].memory: is required"),
        (
            '[{"index": 0, "model": "m", "memory": "1Gi", "heatlhy": false}]',
            '[0]: unknown field "heatlhy" (known: index, uuid, model, memory, healthy)',
        ),
        (f'[{{"index": -1, {GOOD}}}]', "[0].index: expected a non-negative integer, got integer -1"),
        (f'[{{"index": "0", {GOOD}}}]', '[0].index: expected a non-negative integer, got string "0"'),
        (f'[{{"index": true, {GOOD}}}]', "[0].index: expected a non-negative integer, got boolean true"),
        ('[{"index": 0, "model": "", "memory": "1Gi"}]', '[0].model: expected a non-empty string, got string ""'),
        ('[{"index": 0, "model": "m", "memory": "80GB"}]', '[0].memory: quantity "80GB" is not valid'),
        ('[{"index": 0, "model": "m", "memory": "-1Gi"}]', '[0].memory: quantity "-1Gi" must not be negative'),
        ('[{"index": 0, "model": "m", "memory": 0}]', "[0].memory: must be greater than 0"),
        (
            '[{"index": 0, "model": "m", "memory": [1]}]',
            "[0].memory: expected a quantity string or integer bytes, got list",
        ),
        (f'[{{"index": 0, {GOOD}, "uuid": 7}}]', "[0].uuid: expected a string, got integer"),
        (f'[{{"index": 0, {GOOD}, "healthy": "yes"}}]', '[0].healthy: expected true or false, got string "yes"'),
        (f'[{{"index": 0, {GOOD}}}, {{"index": 0, {GOOD}}}]', "index 0 appears twice"),
        (
            f'[{{"index": 0, {GOOD}}}, {{"index": 2, {GOOD}}}]',
            'indices must be 0..1 without gaps, got [0, 2] (mark a failed GPU "healthy": false '
            "instead of leaving it out)",
        ),
        (
            f'[{{"index": 1, {GOOD}}}]',
            'indices must be 0..0 without gaps, got [1] (mark a failed GPU "healthy": false instead of leaving it out)',
        ),
        (
            f'[{{"index": 0, "uuid": "GPU-x", {GOOD}}}, {{"index": 1, "uuid": "GPU-x", {GOOD}}}]',
            'uuid "GPU-x" appears twice (indices 0 and 1)',
        ),
    ],
)
def test_parse_node_gpus_errors(value: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_node_gpus(value)
    assert str(info.value) == message


# --- pods -------------------------------------------------------------------------------------


def gpu_pod(
    annotations: dict[str, str] | None = None,
    requests: dict[str, int] | None = None,
    limits: dict[str, int] | None = None,
    init_requests: dict[str, int] | None = None,
) -> Pod:
    containers = (Container(name="c", requests=requests or {}, limits=limits or {}),)
    init = (Container(name="i", requests=init_requests),) if init_requests else ()
    return Pod(
        metadata=ObjectMeta(name="p", annotations=annotations or {}),
        spec=PodSpec(containers=containers, init_containers=init),
    )


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(gpu_pod(), None, id="no gpu"),
        pytest.param(gpu_pod(requests={"cpu": 1000}), None, id="cpu only"),
        pytest.param(gpu_pod(requests={"nvidia.com/gpu": 0}), None, id="zero gpus"),
        pytest.param(
            gpu_pod(requests={"nvidia.com/gpu": 2}), GPURequest(count=2, memory=0, models=(), shared=False), id="whole"
        ),
        pytest.param(
            gpu_pod(requests={"nvidia.com/gpu": 1}, init_requests={"nvidia.com/gpu": 4}),
            GPURequest(count=4, memory=0, models=(), shared=False),
            id="whole, aggregated like other resources",
        ),
        pytest.param(
            gpu_pod({GPU_MEMORY_ANNOTATION: "40Gi"}, requests={"nvidia.com/gpu": 4}),
            GPURequest(count=4, memory=40 * Gi, models=(), shared=False),
            id="whole with a minimum memory",
        ),
        pytest.param(
            gpu_pod({GPU_MODEL_ANNOTATION: f"{A100}, {H100}"}, requests={"nvidia.com/gpu": 1}),
            GPURequest(count=1, memory=0, models=(A100, H100), shared=False),
            id="whole, models",
        ),
        pytest.param(
            gpu_pod({GPU_MEMORY_ANNOTATION: "20Gi"}),
            GPURequest(count=1, memory=20 * Gi, models=(), shared=True),
            id="shared",
        ),
        pytest.param(
            gpu_pod({GPU_MEMORY_ANNOTATION: " 16Gi ", GPU_COUNT_ANNOTATION: "2"}),
            GPURequest(count=2, memory=16 * Gi, models=(), shared=True),
            id="shared over 2 devices",
        ),
        pytest.param(
            gpu_pod({GPU_MEMORY_ANNOTATION: "10G", GPU_MODEL_ANNOTATION: H100}),
            GPURequest(count=1, memory=10 * 10**9, models=(H100,), shared=True),
            id="shared, model",
        ),
        pytest.param(
            gpu_pod({GPU_MEMORY_ANNOTATION: "10Gi"}, requests={"nvidia.com/gpu": 0}),
            GPURequest(count=1, memory=10 * Gi, models=(), shared=True),
            id="shared; nvidia.com/gpu 0 is no whole GPU",
        ),
    ],
)
def test_pod_gpu_request(p: Pod, expected: GPURequest | None) -> None:
    assert pod_gpu_request(p) == expected
    assert (
        pod_gpu_request(p, requests={"nvidia.com/gpu": expected.count if (expected and not expected.shared) else 0})
        == expected
    )


@pytest.mark.parametrize(
    ("p", "annotation", "message"),
    [
        (gpu_pod({GPU_MEMORY_ANNOTATION: "lots"}), GPU_MEMORY_ANNOTATION, 'quantity "lots" is not valid'),
        (gpu_pod({GPU_MEMORY_ANNOTATION: "0"}), GPU_MEMORY_ANNOTATION, "must be greater than 0"),
        (gpu_pod({GPU_MEMORY_ANNOTATION: "-1Gi"}), GPU_MEMORY_ANNOTATION, 'quantity "-1Gi" must not be negative'),
        (
            gpu_pod({GPU_MEMORY_ANNOTATION: "1Gi", GPU_COUNT_ANNOTATION: "0"}),
            GPU_COUNT_ANNOTATION,
            '"0" is not a whole number of GPUs (1 or more)',
        ),
        (
            gpu_pod({GPU_MEMORY_ANNOTATION: "1Gi", GPU_COUNT_ANNOTATION: "two"}),
            GPU_COUNT_ANNOTATION,
            '"two" is not a whole number of GPUs (1 or more)',
        ),
        (
            gpu_pod({GPU_MEMORY_ANNOTATION: "1Gi", GPU_COUNT_ANNOTATION: "-1"}),
            GPU_COUNT_ANNOTATION,
            '"-1" is not a whole number of GPUs (1 or more)',
        ),
        (
            gpu_pod({GPU_COUNT_ANNOTATION: "2"}, requests={"nvidia.com/gpu": 2}),
            GPU_COUNT_ANNOTATION,
            "applies only to shared GPUs; this pod asks for 2 whole GPU(s) with nvidia.com/gpu",
        ),
        (
            gpu_pod({GPU_COUNT_ANNOTATION: "2"}),
            GPU_COUNT_ANNOTATION,
            "needs kubus.io/gpu-memory (the slice of each shared GPU to take); to ask for whole "
            "GPUs use the resource nvidia.com/gpu",
        ),
        (
            gpu_pod({GPU_MODEL_ANNOTATION: H100}),
            GPU_MODEL_ANNOTATION,
            "the pod asks for no GPU: add the resource nvidia.com/gpu (whole GPUs) or "
            "kubus.io/gpu-memory (a shared slice)",
        ),
        (
            gpu_pod({GPU_MODEL_ANNOTATION: f"{H100},,{A100}"}, requests={"nvidia.com/gpu": 1}),
            GPU_MODEL_ANNOTATION,
            f'"{H100},,{A100}" is not a comma-separated list of GPU models (an entry is empty)',
        ),
        (
            gpu_pod({GPU_MODEL_ANNOTATION: ""}, requests={"nvidia.com/gpu": 1}),
            GPU_MODEL_ANNOTATION,
            '"" is not a comma-separated list of GPU models (an entry is empty)',
        ),
    ],
)
def test_pod_gpu_request_errors(p: Pod, annotation: str, message: str) -> None:
    with pytest.raises(GPUAnnotationError) as info:
        pod_gpu_request(p)
    assert info.value.annotation == annotation
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, ()), ("", ()), ("0", (0,)), ("0,3", (0, 3)), (" 3, 0 ", (0, 3)), ("7,1,4", (1, 4, 7))],
)
def test_pod_gpu_devices(raw: str | None, expected: tuple[int, ...]) -> None:
    annotations = {} if raw is None else {GPU_DEVICES_ANNOTATION: raw}
    assert pod_gpu_devices(gpu_pod(annotations)) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("0,,1", '"0,,1" is not a comma-separated list of GPU indices (such as "0,3")'),
        ("a", '"a" is not a comma-separated list of GPU indices (such as "0,3")'),
        ("-1", '"-1" is not a comma-separated list of GPU indices (such as "0,3")'),
        ("0;1", '"0;1" is not a comma-separated list of GPU indices (such as "0,3")'),
        ("1,1", "index 1 appears twice"),
    ],
)
def test_pod_gpu_devices_errors(raw: str, message: str) -> None:
    with pytest.raises(GPUAnnotationError) as info:
        pod_gpu_devices(gpu_pod({GPU_DEVICES_ANNOTATION: raw}))
    assert info.value.annotation == GPU_DEVICES_ANNOTATION
    assert str(info.value) == message


def test_format_gpu_devices_round_trips() -> None:
    assert format_gpu_devices((3, 0)) == "0,3"
    assert format_gpu_devices([]) == ""
    text = format_gpu_devices([5, 1, 2])
    assert pod_gpu_devices(gpu_pod({GPU_DEVICES_ANNOTATION: text})) == (1, 2, 5)


@pytest.mark.parametrize(
    ("request_", "device", "accepted"),
    [
        (GPURequest(1, 0, (), False), GPUDevice(0, "", H100, 80 * Gi), True),
        (GPURequest(1, 0, (), False), GPUDevice(0, "", H100, 80 * Gi, healthy=False), False),
        (GPURequest(1, 0, (A100,), False), GPUDevice(0, "", H100, 80 * Gi), False),
        (GPURequest(1, 0, (A100, H100), False), GPUDevice(0, "", H100, 80 * Gi), True),
        (GPURequest(1, 40 * Gi, (), False), GPUDevice(0, "", A100, 40 * Gi), True),
        (GPURequest(1, 41 * Gi, (), False), GPUDevice(0, "", A100, 40 * Gi), False),
        (GPURequest(2, 20 * Gi, (), True), GPUDevice(0, "", A100, 40 * Gi), True),
        (GPURequest(1, 50 * Gi, (), True), GPUDevice(0, "", A100, 40 * Gi), False),
    ],
)
def test_gpu_request_accepts(request_: GPURequest, device: GPUDevice, accepted: bool) -> None:
    assert request_.accepts(device) is accepted


device_values = (
    st.none()
    | st.booleans()
    | st.integers(-5, 2**65)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["40Gi", "1", "-1Gi", "A100", "GPU-1"])
    | st.lists(st.integers(), max_size=2)
)
devices = st.lists(
    st.dictionaries(st.sampled_from(["index", "uuid", "model", "memory", "healthy", "x"]), device_values, max_size=6),
    max_size=4,
)


@given(devices)
def test_fuzzed_gpu_annotations_raise_only_value_errors(items: list[dict[str, object]]) -> None:
    try:
        parsed = parse_node_gpus(json.dumps(items))
    except ValueError as e:
        assert "\n" not in str(e)
    else:
        assert [d.index for d in parsed] == list(range(len(parsed)))
        assert all(d.memory > 0 and d.model for d in parsed)


def _api_node(labels: dict[str, str], capacity: str, allocatable: str | None = None) -> Node:
    status: dict[str, Any] = {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": capacity}}
    if allocatable is not None:
        status["allocatable"] = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": allocatable}
    return parse_node({"kind": "Node", "metadata": {"name": "g", "labels": labels}, "status": status})


def test_a_real_clusters_node_has_the_gpus_the_device_plugin_and_gpu_feature_discovery_publish() -> None:
    node = _api_node({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}, "8", "7")
    assert len(node.gpus) == 8
    assert {(g.model, g.memory) for g in node.gpus} == {("NVIDIA-H100-80GB-HBM3", 81559 * 2**20)}
    assert [g.healthy for g in node.gpus] == [True] * 7 + [False]  # allocatable says one is not usable
    assert node.status.allocatable["nvidia.com/gpu"] == 7


def test_without_the_labels_the_devices_have_no_model_or_memory_and_a_bad_memory_label_is_one_line() -> None:
    bare = _api_node({}, "2")
    assert [(g.index, g.model, g.memory, g.healthy) for g in bare.gpus] == [(0, "", 0, True), (1, "", 0, True)]
    with pytest.raises(ManifestError, match=r"metadata.labels: nvidia.com/gpu.memory: \"80Gi\" is not a whole number"):
        _api_node({"nvidia.com/gpu.memory": "80Gi"}, "2")


GFD_PRODUCT = "nvidia.com/gpu.product"


def test_the_gpus_annotation_wins_over_the_device_plugins_count() -> None:
    devices = '[{"index": 0, "model": "A100", "memory": "40Gi"}]'
    node = parse_node(
        {
            "kind": "Node",
            "metadata": {"name": "g", "annotations": {"kubus.io/gpus": devices}, "labels": {GFD_PRODUCT: "X"}},
            "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "1"}},
        }
    )
    assert [(g.model, g.memory) for g in node.gpus] == [("A100", 40 * 2**30)]
