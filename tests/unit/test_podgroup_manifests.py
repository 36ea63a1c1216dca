"""PodGroup documents (scheduling.x-k8s.io/v1alpha1) read by kubus.api.manifests."""

from __future__ import annotations

import pytest

from kubus.api import ManifestError, ManifestErrors, PodGroup, load_manifests, parse_manifests
from kubus.api.manifests import parse_pod_group, wire_pod

GROUP = """\
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: train
  namespace: ml
  creationTimestamp: "2024-05-01T12:00:00Z"
spec:
  minMember: 4
  minResources:
    cpu: "2"
    memory: 1Gi
    nvidia.com/gpu: 4
  scheduleTimeoutSeconds: 30
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: worker-0
  namespace: ml
  labels: {scheduling.x-k8s.io/pod-group: train}
spec:
  containers: [{name: c}]
"""


def _group(spec: str, extra: str = "") -> str:
    return f"apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {{name: g}}\n{extra}spec: {spec}\n"


def _error(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        parse_manifests(text, source="gang.yaml")
    return str(info.value)


def test_a_pod_group_is_read_with_its_spec_in_base_units() -> None:
    m = parse_manifests(GROUP + "---\n" + POD)
    assert m.pod_groups == (
        PodGroup(
            namespace="ml",
            name="train",
            min_member=4,
            min_resources={"cpu": 2000, "memory": 1 << 30, "nvidia.com/gpu": 4},
            schedule_timeout_seconds=30,
            creation_timestamp=1714564800.0,
        ),
    )
    assert [p.name for p in m.pods] == ["worker-0"] and m.nodes == []


def test_defaults_namespace_no_resources_no_timeout() -> None:
    [group] = parse_manifests(_group("{minMember: 1}")).pod_groups
    assert group == PodGroup("default", "g", 1)
    assert group.key == "default/g"


def test_no_pod_groups_is_an_empty_tuple() -> None:
    assert parse_manifests(POD).pod_groups == ()


def test_json_lists_and_load_manifests_read_pod_groups(tmp_path: object) -> None:
    text = (
        '{"apiVersion": "v1", "kind": "List", "items": ['
        '{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", '
        '"metadata": {"name": "a"}, "spec": {"minMember": 2}},'
        '{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", '
        '"metadata": {"name": "b"}, "spec": {"minMember": 3}}]}'
    )
    assert [(g.name, g.min_member) for g in load_manifests(text).pod_groups] == [("a", 2), ("b", 3)]


def test_parse_pod_group_reads_one_decoded_object() -> None:
    obj = {"kind": "PodGroup", "metadata": {"name": "x", "namespace": "n"}, "spec": {"minMember": 2}}
    assert parse_pod_group(obj) == PodGroup("n", "x", 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_group("{}"), "gang.yaml: PodGroup default/g: spec.minMember: is required (an integer, at least 1)"),
        (_group(""), "gang.yaml: PodGroup default/g: spec: is required (spec.minMember at least)"),
        (_group("{minMember: 0}"), "gang.yaml: PodGroup default/g: spec.minMember: must be between 1 and"),
        (
            _group("{minMember: '3'}"),
            'gang.yaml: PodGroup default/g: spec.minMember: expected an integer, got string "3"',
        ),
        (
            _group("{minMember: 2.5}"),
            "gang.yaml: PodGroup default/g: spec.minMember: expected an integer, got number 2.5",
        ),
        (
            _group("{minMember: 2, minMembers: 3}"),
            "gang.yaml: PodGroup default/g: spec.minMembers: unknown field (a PodGroup spec has minMember, "
            "minResources, scheduleTimeoutSeconds)",
        ),
        (
            _group("{minMember: 2, minResources: {cpu: abc}}"),
            'gang.yaml: PodGroup default/g: spec.minResources.cpu: quantity "abc" is not valid',
        ),
        (
            _group("{minMember: 2, minResources: {cpus: 1}}"),
            'gang.yaml: PodGroup default/g: spec.minResources.cpus: "cpus" is not a resource a pod can request',
        ),
        (
            _group("{minMember: 2, minResources: {memory: -1}}"),
            "gang.yaml: PodGroup default/g: spec.minResources.memory: quantity",
        ),
        (
            _group("{minMember: 2, scheduleTimeoutSeconds: 0}"),
            "gang.yaml: PodGroup default/g: spec.scheduleTimeoutSeconds: must be between 1 and",
        ),
        (
            _group("{minMember: 2, scheduleTimeoutSeconds: 10s}"),
            'gang.yaml: PodGroup default/g: spec.scheduleTimeoutSeconds: expected an integer, got string "10s"',
        ),
        (_group("[1]"), "gang.yaml: PodGroup default/g: spec: expected a mapping, got list"),
        (
            _group("{minMember: 2}", "specs: {}\n"),
            "gang.yaml: PodGroup default/g: specs: unknown field "
            "(a PodGroup has apiVersion, kind, metadata, spec, status)",
        ),
        (
            _group("{minMember: 2}").replace("v1alpha1", "v1beta1"),
            'gang.yaml: PodGroup default/g: apiVersion: "scheduling.x-k8s.io/v1beta1" is not supported for PodGroup '
            "(want scheduling.x-k8s.io/v1alpha1)",
        ),
        (
            _group("{minMember: 2}").replace("{name: g}", "{name: G_1}"),
            'gang.yaml: PodGroup default/G_1: metadata.name: "G_1" is not a valid name',
        ),
        (
            _group("{minMember: 2}").replace("{name: g}", "{}"),
            "gang.yaml: document 1: metadata.name: is required",
        ),
        (
            _group("{minMember: 2}").replace("{name: g}", "{name: g, creationTimestamp: yesterday}"),
            'gang.yaml: PodGroup default/g: metadata.creationTimestamp: "yesterday" is not an RFC 3339 time',
        ),
    ],
)
def test_bad_values_name_the_file_the_object_and_the_field(text: str, message: str) -> None:
    assert _error(text).startswith(message)


def test_the_same_group_twice_is_an_error() -> None:
    text = _group("{minMember: 2}") + "---\n" + _group("{minMember: 3}")
    assert _error(text) == (
        "gang.yaml: PodGroup default/g: metadata.name: duplicate: the same pod group is already defined in document 1"
    )


def test_the_same_name_in_two_namespaces_is_two_groups() -> None:
    text = _group("{minMember: 2}") + "---\n" + _group("{minMember: 3}").replace("{name: g}", "{name: g, namespace: b}")
    assert [g.key for g in parse_manifests(text).pod_groups] == ["default/g", "b/g"]


def test_every_bad_group_is_reported() -> None:
    with pytest.raises(ManifestErrors) as info:
        parse_manifests(_group("{}") + "---\n" + _group("{minMember: -1}").replace("{name: g}", "{name: h}"))
    assert len(info.value.errors) == 2


def test_a_wire_pod_is_one_pod_and_nothing_else() -> None:
    with pytest.raises(ValueError, match="expected one Pod"):
        wire_pod(GROUP + "---\n" + POD, "uid", "ml/worker-0")
