"""`kubus simulate` end to end: manifests in, placements and kube's messages out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kubus.cli import main

NODES = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-1, labels: {zone: a}}
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: cpu-2, labels: {zone: b}}
  status: {allocatable: {cpu: "2", memory: 4Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-1
    labels: {zone: a}
    annotations:
      kubus.io/gpus: '[{"index": 0, "uuid": "GPU-a", "model": "H100", "memory": "80Gi"},
                       {"index": 1, "uuid": "GPU-b", "model": "H100", "memory": "80Gi"}]'
  spec:
    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
  status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
"""

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: prod}
spec:
  nodeName: cpu-2
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 1500m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: prod}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 250m, memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: prod}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: "3900m"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers: [{name: c, image: trainer, resources: {limits: {nvidia.com/gpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  schedulingGates: [{name: quota}, {name: review}]
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: stray}
spec:
  schedulerName: nobody
  containers: [{name: c, image: nginx}]
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "nodes.yaml").write_text(NODES)
    (tmp_path / "pods.yaml").write_text(PODS)
    return str(tmp_path / "nodes.yaml"), str(tmp_path / "pods.yaml")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output_is_exactly_the_documented_shape(
    capsys: pytest.CaptureFixture[str], files: tuple[str, str]
) -> None:
    code, out, err = run(capsys, "-f", files[0], "-f", files[1], "-o", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got == {
        "pods": [
            {"name": "web", "namespace": "prod", "node": "cpu-1", "status": "Scheduled", "message": ""},
            {
                "name": "big",
                "namespace": "prod",
                "node": None,
                "status": "Unschedulable",
                # cpu-1 has 3750m left after web; cpu-2 500m after the running pod; gpu-1 is tainted
                "message": "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present},"
                " 2 Insufficient cpu.",
            },
            {"name": "train", "namespace": "default", "node": "gpu-1", "status": "Scheduled", "message": ""},
            {
                "name": "gated",
                "namespace": "default",
                "node": None,
                "status": "SchedulingGated",
                "message": "waiting for scheduling gates: [quota review]",
            },
            {
                "name": "stray",
                "namespace": "default",
                "node": None,
                "status": "UnknownScheduler",
                "message": 'no scheduler profile "nobody" (profiles: default-scheduler)',
            },
        ]
    }


def test_explain_gives_per_node_reasons_and_scores(capsys: pytest.CaptureFixture[str], files: tuple[str, str]) -> None:
    code, out, _ = run(capsys, "-f", files[0], "-f", files[1], "-o", "json", "--explain")
    assert code == 0
    pods = {p["name"]: p for p in json.loads(out)["pods"]}
    web = pods["web"]["explain"]["nodes"]
    assert web["gpu-1"] == {
        "filter": "TaintToleration: node(s) had untolerated taint {nvidia.com/gpu: present}",
        "scores": {},
        "total": None,
    }
    for node in ("cpu-1", "cpu-2"):
        assert web[node]["filter"] == "ok"
        scores = web[node]["scores"]
        # NodeAffinity skips a pod without preferred terms
        assert set(scores) == {
            "TaintToleration",
            "NodeResourcesFit",
            "NodeResourcesBalancedAllocation",
            "ImageLocality",
        }
        assert web[node]["total"] == sum(s["weighted"] for s in scores.values())
        assert scores["TaintToleration"] == {"raw": 0, "normalized": 100, "weighted": 300}
    assert web["cpu-1"]["total"] > web["cpu-2"]["total"]
    big = pods["big"]["explain"]["nodes"]
    assert big["cpu-1"]["filter"] == "NodeResourcesFit: Insufficient cpu"
    assert big["cpu-2"]["filter"] == "NodeResourcesFit: Insufficient cpu"


def test_table_output_is_aligned_and_summarized(capsys: pytest.CaptureFixture[str], files: tuple[str, str]) -> None:
    code, out, _ = run(capsys, "-f", files[0], "-f", files[1])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "NODE", "STATUS", "GPUS", "MESSAGE"]
    status_col = lines[0].index("STATUS")
    body = lines[1:6]
    assert [line[status_col:].split()[0] for line in body] == [
        "Scheduled",
        "Unschedulable",
        "Scheduled",
        "SchedulingGated",
        "UnknownScheduler",
    ]
    train = next(line for line in body if line.startswith("default/train"))
    assert train.split()[1:4] == ["gpu-1", "Scheduled", "-"]  # devices are picked by GPUFit, not enabled here
    assert lines[-1] == "2/5 pods scheduled"


def test_gpu_profile_picks_devices(capsys: pytest.CaptureFixture[str], files: tuple[str, str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{name: GPUFit}]\n"
    )
    code, out, _ = run(capsys, "-f", files[0], "-f", files[1], "--config", str(config))
    assert code == 0
    train = next(line for line in out.splitlines() if line.startswith("default/train"))
    assert train.split()[1:4] == ["gpu-1", "Scheduled", "0,1"]


BAD_CPU = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
    "  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n"
)
BAD_EFFECT = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  taints: [{key: k, effect: Sometimes}]\n"


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (BAD_CPU, "{bad}: Pod default/p: spec.containers[0].resources.requests.cpu: "),
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "{bad}: "),
        ("{not yaml: [", "{bad}: "),
        (BAD_EFFECT, "{bad}: Node n: spec.taints[0].effect: "),
    ],
)
def test_bad_manifests_are_one_clear_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest: str, expected: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest)
    code, out, err = run(capsys, "-f", str(bad))
    assert code == 2
    assert out == ""
    assert err.startswith("error: " + expected.format(bad=bad)), err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_bad_config_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], files: tuple[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled: [{name: PodTopologySpread}]\n"
    )
    code, _, err = run(capsys, "-f", files[0], "--config", str(config))
    assert code == 2
    assert err.startswith(f"error: {config}: ") and "PodTopologySpread" in err
    assert len(err.splitlines()) == 1


def test_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "-f", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert err.startswith(f"error: {tmp_path / 'nope.yaml'}: cannot read the file")


def test_console_script_reads_stdin(files: tuple[str, str]) -> None:
    """The installed `kubus` command, reading pods from standard input."""
    kubus = Path(sys.executable).parent / "kubus"
    result = subprocess.run(
        [str(kubus), "simulate", "-f", files[0], "-f", "-", "-o", "json"],
        input=Path(files[1]).read_text(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert [p["node"] for p in json.loads(result.stdout)["pods"]] == ["cpu-1", None, "gpu-1", None, None]
