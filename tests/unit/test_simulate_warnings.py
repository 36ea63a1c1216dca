"""`kubus simulate` never drops a pod field silently: what kubus does not honour is listed per pod
(JSON `warnings`, a block under the table); hostNetwork ports are honoured (NodePorts sees them)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from kubus.cli.main import main

NODE = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "4", memory: 8Gi, pods: "10"}}
"""

MANIFESTS = (
    NODE
    + """
---
apiVersion: v1
kind: Pod
metadata: {name: db}
spec:
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
"""
)

HOST_NETWORK = (
    NODE
    + """
---
apiVersion: v1
kind: Pod
metadata: {name: proxy-1}
spec:
  hostNetwork: true
  containers: [{name: c, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: proxy-2}
spec:
  containers: [{name: c, ports: [{containerPort: 9090, hostPort: 8080}]}]
"""
)


def run(tmp_path: Path, text: str, *args: str) -> str:
    (tmp_path / "all.yaml").write_text(text)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", "-f", str(tmp_path / "all.yaml"), *args]) == 0
    return out.getvalue()


def test_json_lists_the_fields_not_honoured_per_pod(tmp_path: Path) -> None:
    pods = {p["name"]: p for p in json.loads(run(tmp_path, MANIFESTS, "-o", "json"))["pods"]}
    [warning] = pods["db"]["warnings"]
    assert warning.startswith("spec.volumes[0].persistentVolumeClaim: not honoured:")
    assert pods["db"]["node"] == "n1"  # still scheduled, with what kubus does check
    assert "warnings" not in pods["web"]


def test_the_table_ends_with_the_warnings(tmp_path: Path) -> None:
    text = run(tmp_path, MANIFESTS)
    head, _, warnings = text.partition("Warnings (fields kubus does not honour):\n")
    assert "2/2 pods scheduled" in head
    assert warnings.splitlines() == [
        "  default/db: spec.volumes[0].persistentVolumeClaim: not honoured: kubus has no PersistentVolumes: "
        "VolumeBinding, VolumeZone and NodeVolumeLimits do not run, so the claim's binding, zone and the "
        "node's attach limits are not checked"
    ]


def test_a_host_network_port_blocks_the_same_host_port(tmp_path: Path) -> None:
    pods = {p["name"]: p for p in json.loads(run(tmp_path, HOST_NETWORK, "-o", "json"))["pods"]}
    assert pods["proxy-1"]["node"] == "n1"
    assert pods["proxy-2"]["node"] is None
    assert "didn't have free ports" in pods["proxy-2"]["message"]


def test_configuration_fields_not_honoured_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A KubeSchedulerConfiguration field kubus accepts without honouring it (leader election,
    a protobuf content type) is said on stderr, never dropped silently."""
    config = tmp_path / "sched.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "leaderElection: {leaderElect: true}\n"
        "clientConnection: {contentType: application/vnd.kubernetes.protobuf, qps: 100}\n"
    )
    run(tmp_path, MANIFESTS, "--config", str(config))
    err = capsys.readouterr().err
    assert "warning: config field leaderElection is not honoured: kubus elects" in err
    assert "warning: config field clientConnection.contentType is not honoured: kubus speaks JSON" in err
    assert "qps" not in err  # honoured: the watcher's and binders' pace
