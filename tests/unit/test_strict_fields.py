"""Strict field validation, as kubectl's default ``--validate=strict``: a field the object's
Kubernetes schema lacks, or a field given twice, is refused naming it; ``warn`` accepts it with a
warning, ``ignore`` silently. Every field of the v1 schema is accepted (status, managedFields
included), and the services' own reading stays lenient. A typo in a profile's ``disabled`` list
is refused as one in ``enabled`` is."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kubus.api.errors import ManifestError
from kubus.api.manifests import FieldValidation, parse_manifests
from kubus.api.schema import _DATA, build, render, unknown_fields
from kubus.cli.main import main
from kubus.framework.config import ConfigError, load_config
from kubus.plugins import in_tree_registry

REPO = Path(__file__).resolve().parents[2]

TYPO = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Pod
    metadata: {name: typo}
    spec:
      containers:
      - name: c
        image: x
        resourcse: {requests: {cpu: "1"}}
    """
)

FULL = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Pod
    metadata:
      name: full
      namespace: default
      uid: 1f2e3d4c-0000-4000-8000-000000000001
      resourceVersion: "42"
      generation: 1
      creationTimestamp: "2024-01-02T03:04:05Z"
      labels: {app: web}
      annotations: {example.com/anything: "yes"}
      ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: u, controller: true}]
      finalizers: [example.com/keep]
      managedFields:
      - manager: kubectl
        operation: Apply
        apiVersion: v1
        fieldsType: FieldsV1
        fieldsV1: {"f:spec": {"f:containers": {}}}
    spec:
      serviceAccountName: web
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 30
      dnsPolicy: ClusterFirst
      restartPolicy: Always
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      volumes: [{name: tmp, emptyDir: {}}]
      containers:
      - name: web
        image: nginx
        imagePullPolicy: IfNotPresent
        command: [nginx]
        env: [{name: A, value: b}, {name: C, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        ports: [{containerPort: 80, protocol: TCP}]
        resources: {requests: {cpu: 100m}, limits: {memory: 64Mi}}
        volumeMounts: [{name: tmp, mountPath: /tmp}]
        livenessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 10}
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        terminationMessagePath: /dev/termination-log
    status:
      phase: Running
      conditions: [{type: Ready, status: "True", lastTransitionTime: "2024-01-02T03:04:05Z"}]
      containerStatuses: [{name: web, ready: true, restartCount: 0, image: nginx, imageID: "", started: true,
                           state: {running: {startedAt: "2024-01-02T03:04:05Z"}}}]
      podIP: 10.0.0.1
      qosClass: Burstable
    """
)


def test_an_unknown_field_is_refused_naming_it() -> None:
    with pytest.raises(ManifestError) as err:
        parse_manifests(TYPO, source="pods.yaml", validate=FieldValidation.STRICT)
    assert err.value.field == "spec.containers[0].resourcse"
    expected = 'pods.yaml: Pod default/typo: spec.containers[0].resourcse: unknown field "resourcse"'
    assert str(err.value).startswith(expected)
    assert "--validate=false" in str(err.value)


def test_warn_accepts_it_with_a_warning_and_ignore_silently() -> None:
    warned = parse_manifests(TYPO, source="pods.yaml", validate=FieldValidation.WARN)
    assert [p.name for p in warned.pods] == ["typo"]
    assert warned.warnings == [
        'pods.yaml: Pod default/typo: spec.containers[0].resourcse: unknown field "resourcse": ignored'
    ]
    ignored = parse_manifests(TYPO, validate=FieldValidation.IGNORE)
    assert [p.name for p in ignored.pods] == ["typo"] and ignored.warnings == []


def test_services_reading_stays_lenient() -> None:
    """None, the default: what the queue reads (kubus apply --validate=warn may have sent it)."""
    assert [p.name for p in parse_manifests(TYPO).pods] == ["typo"]


def test_a_duplicate_field_is_refused_strict_and_accepted_otherwise() -> None:
    text = TYPO.replace("image: x\n", "image: x\n    image: y\n").replace("resourcse", "resources")
    with pytest.raises(ManifestError, match='duplicate field "image"'):
        parse_manifests(text, validate=FieldValidation.STRICT)
    warned = parse_manifests(text, validate=FieldValidation.WARN)
    assert len(warned.warnings) == 1 and 'duplicate field "image"' in warned.warnings[0]
    assert parse_manifests(text, validate=FieldValidation.IGNORE).warnings == []


def test_every_field_of_the_v1_schema_is_accepted() -> None:
    manifests = parse_manifests(FULL, validate=FieldValidation.STRICT)
    assert [p.name for p in manifests.pods] == ["full"]


@pytest.mark.parametrize(
    ("kind", "obj", "path"),
    [
        ("Pod", {"spec": {"nodeSelectr": {}}}, "spec.nodeSelectr"),
        ("Pod", {"metadata": {"labelz": {}}}, "metadata.labelz"),
        ("Pod", {"spec": {"affinity": {"nodeAffinity": {"required": {}}}}}, "spec.affinity.nodeAffinity.required"),
        ("Pod", {"spec": {"tolerations": [{"key": "a"}, {"efect": "NoSchedule"}]}}, "spec.tolerations[1].efect"),
        ("Node", {"status": {"alocatable": {}}}, "status.alocatable"),
        ("PodDisruptionBudget", {"spec": {"minAvaliable": 1}}, "spec.minAvaliable"),
        ("StatefulSet", {"spec": {"template": {"spec": {"containerz": []}}}}, "spec.template.spec.containerz"),
        ("PodGroup", {"spec": {"minMembers": 2}}, "spec.minMembers"),
    ],
)
def test_unknown_fields_are_found_at_any_depth(kind: str, obj: dict[str, object], path: str) -> None:
    assert list(unknown_fields(kind, obj)) == [path]


def test_maps_and_free_form_fields_take_any_key() -> None:
    obj = {
        "metadata": {"labels": {"any/key": "v"}, "managedFields": [{"fieldsV1": {"f:anything": {}}}]},
        "spec": {"nodeSelector": {"x": "y"}, "containers": [{"resources": {"requests": {"example.com/foo": 1}}}]},
    }
    assert list(unknown_fields("Pod", obj)) == []


def test_the_schema_data_is_current() -> None:
    """``python -m kubus.api.schema`` writes it from kubernetes-validate's bundled schemas."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    assert _DATA.read_text() == render(build(root)), "run: python -m kubus.api.schema"


def test_cli_validate_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(TYPO)
    cluster = str(REPO / "deploy" / "examples" / "cluster.yaml")
    assert main(["simulate", "-f", cluster, "-f", str(typo)]) == 2
    assert 'spec.containers[0].resourcse: unknown field "resourcse"' in capsys.readouterr().err
    assert main(["simulate", "-f", cluster, "-f", str(typo), "--validate=warn"]) == 0
    assert "Warning: " in capsys.readouterr().err
    assert main(["simulate", "-f", cluster, "-f", str(typo), "--validate=false"]) == 0
    assert "Warning" not in capsys.readouterr().err


@pytest.mark.parametrize("point", ["multiPoint", "score", "filter"])
def test_a_typo_in_a_disabled_list_is_refused(point: str) -> None:
    config = textwrap.dedent(
        f"""\
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: KubeSchedulerConfiguration
        profiles:
        - schedulerName: x
          plugins:
            {point}:
              disabled: [{{name: "*"}}, {{name: VolumeBinding}}, {{name: NodeResourcesBalancedAllocatoin}}]
              enabled: [{{name: NodeResourcesFit}}]
        """
    )
    wrong = rf'plugins\.{point}\.disabled\[2\]\.name: plugin "NodeResourcesBalancedAllocatoin" is not registered'
    with pytest.raises(ConfigError, match=wrong):
        load_config(config, registry=in_tree_registry())
