"""`kubus simulate` end to end: manifests in, placements and kube's messages out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubus.cli import main

try:
    import kubus_test_plugins as tp
except ModuleNotFoundError:  # pragma: no cover - the venv was not made by `make`
    pytest.fail(
        "the test plugin package is not installed: .venv/bin/pip install -e tests/plugins/kubus-test-plugins",
        pytrace=False,
    )

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
            {
                "name": "web",
                "namespace": "prod",
                "node": "cpu-1",
                "status": "Scheduled",
                "message": "",
                "gpuDevices": [],
            },
            {
                "name": "big",
                "namespace": "prod",
                "node": None,
                "status": "Unschedulable",
                # cpu-1 has 3750m left after web; cpu-2 500m after the running pod; gpu-1 is tainted
                "message": "0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present},"
                " 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 No preemption victims found for"
                " incoming pod, 2 Preemption is not helpful for scheduling..",
                "gpuDevices": [],
            },
            {
                "name": "train",
                "namespace": "default",
                "node": "gpu-1",
                "status": "Scheduled",
                "message": "",
                "gpuDevices": [],  # devices are picked by GPUFit, not enabled here
            },
            {
                "name": "gated",
                "namespace": "default",
                "node": None,
                "status": "SchedulingGated",
                "message": "waiting for scheduling gates: [quota review]",
                "gpuDevices": [],
            },
            {
                "name": "stray",
                "namespace": "default",
                "node": None,
                "status": "UnknownScheduler",
                "message": 'no scheduler profile "nobody" (profiles: default-scheduler)',
                "gpuDevices": [],
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
    assert lines[-1] == "2/5 pods scheduled; 1 more given as running on their nodes (spec.nodeName)"


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
    code, out, _ = run(capsys, "-f", files[0], "-f", files[1], "--config", str(config), "-o", "json")
    assert code == 0
    devices = {p["name"]: p["gpuDevices"] for p in json.loads(out)["pods"]}
    assert devices == {"web": [], "big": [], "train": [0, 1], "gated": [], "stray": []}


BAD_CPU = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
    "  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n"
)
BAD_EFFECT = "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  taints: [{key: k, effect: Sometimes}]\n"


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (BAD_CPU, "{bad}: Pod default/p: spec.containers[0].resources.requests.cpu: "),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n", "{bad}: "),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selecter: {app: web}}\n",
            "{bad}: Service default/s: spec.selecter: unknown field",
        ),
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
        "profiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled: [{name: DefaultPreemption}]\n"
    )
    code, _, err = run(capsys, "-f", files[0], "--config", str(config))
    assert code == 2
    assert err.startswith(f"error: {config}: ") and "DefaultPreemption" in err
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


# ---- queue order: the profile's QueueSort plugin ---------------------------------------------

ONE_SLOT = """
apiVersion: v1
kind: Node
metadata: {name: only}
status: {allocatable: {cpu: "1", memory: 8Gi, pods: "110"}}
"""


def _pod(name: str, created: str, priority: int | None = None) -> str:
    prio = f"  priority: {priority}\n" if priority is not None else ""
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, creationTimestamp: '{created}'}}\nspec:\n{prio}"
        "  containers: [{name: c, image: nginx, resources: {requests: {cpu: '1'}}}]\n"
    )


def test_pods_are_scheduled_in_priority_sort_order_not_input_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Higher priority first, then the earlier created: only the first pod popped fits."""
    (tmp_path / "node.yaml").write_text(ONE_SLOT)
    pods = [
        _pod("late", "2024-01-02T00:00:00Z"),
        _pod("early", "2024-01-01T00:00:00Z"),
        _pod("urgent", "2024-01-03T00:00:00Z", priority=100),
    ]
    (tmp_path / "pods.yaml").write_text("---\n".join(pods))
    code, out, err = run(capsys, "-f", str(tmp_path / "node.yaml"), "-f", str(tmp_path / "pods.yaml"), "-o", "json")
    assert code == 0, err
    got = [(p["name"], p["node"]) for p in json.loads(out)["pods"]]
    assert got == [("urgent", "only"), ("early", None), ("late", None)]
    (tmp_path / "pods.yaml").write_text("---\n".join(pods[:2]))
    code, out, _ = run(capsys, "-f", str(tmp_path / "node.yaml"), "-f", str(tmp_path / "pods.yaml"), "-o", "json")
    assert [(p["name"], p["node"]) for p in json.loads(out)["pods"]] == [("early", "only"), ("late", None)]


def test_queue_order_follows_a_queue_sort_plugins_less(tmp_path: Path) -> None:
    """A QueueSort plugin with only `less` (no sort_key), as an out-of-tree one would be."""
    from kubus.api.manifests import load_manifests
    from kubus.cli.simulate import queue_order

    class ByName:
        name = "ByName"

        def less(self, a, b) -> bool:
            return a.pod.name < b.pod.name

    (tmp_path / "pods.yaml").write_text(
        "---\n".join(_pod(n, "2024-01-01T00:00:00Z", p) for n, p in (("c", 9), ("a", 0), ("b", 5)))
    )
    pods = load_manifests(str(tmp_path / "pods.yaml")).pods
    assert [p.name for p in queue_order(pods, ByName())] == ["a", "b", "c"]
    assert [p.name for p in queue_order(pods)] == ["c", "b", "a"]


# ---- out-of-tree plugins (tests/plugins/kubus-test-plugins) ----------------------------------

LABELED_NODES = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: big, labels: {test.kubus.io/reject: "true"}}
  status: {allocatable: {cpu: "32", memory: 64Gi, pods: "110"}}
- apiVersion: v1
  kind: Node
  metadata: {name: small, labels: {test.kubus.io/reject: "false"}}
  status: {allocatable: {cpu: "2", memory: 4Gi, pods: "110"}}
"""
ONE_POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: nginx}]\n"


def test_an_out_of_tree_filter_plugin_decides_placements(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(tp.SCHEDULER_CONFIG)
    (tmp_path / "nodes.yaml").write_text(LABELED_NODES)
    (tmp_path / "pods.yaml").write_text(ONE_POD)
    args = (
        "-f",
        str(tmp_path / "nodes.yaml"),
        "-f",
        str(tmp_path / "pods.yaml"),
        "--config",
        str(tmp_path / "config.yaml"),
    )
    code, out, err = run(capsys, *args, "-o", "json", "--explain")
    assert code == 0, err
    [web] = json.loads(out)["pods"]
    assert web["node"] == "small"  # the roomier node would score higher, but RejectLabeled rejects it
    assert web["explain"]["nodes"]["big"]["filter"] == "RejectLabeled: node(s) had label test.kubus.io/reject=true"
    assert web["explain"]["nodes"]["small"]["filter"] == "ok"
    # every node rejected: kube's summary names the out-of-tree reason
    (tmp_path / "nodes.yaml").write_text(LABELED_NODES.replace('"false"', '"true"'))
    code, out, err = run(capsys, *args)
    assert code == 0 and "not registered" not in err
    assert "0/2 nodes are available: 2 node(s) had label test.kubus.io/reject=true." in out


def test_an_unknown_plugin_is_still_one_clear_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(tp.SCHEDULER_CONFIG.replace("RecordingBinder", "NoSuchPlugin"))
    (tmp_path / "pods.yaml").write_text(ONE_POD)
    code, out, err = run(capsys, "-f", str(tmp_path / "pods.yaml"), "--config", str(tmp_path / "config.yaml"))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {tmp_path / 'config.yaml'}: ") and "NoSuchPlugin" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_broken_entry_point_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed distribution whose `kubus.plugins` entry point does not import."""
    info = tmp_path / "kubus_broken_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kubus-broken-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kubus.plugins]\nBroken = kubus_no_such_module_x:Broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pods.yaml").write_text(ONE_POD)
    code, out, err = run(capsys, "-f", str(tmp_path / "pods.yaml"))
    assert code == 2 and out == ""
    assert err.startswith(
        'error: entry point "Broken = kubus_no_such_module_x:Broken" (group kubus.plugins, '
        "distribution kubus-broken-plugins): cannot be loaded: ModuleNotFoundError: "
    ), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def _placed(capsys: pytest.CaptureFixture[str], nodes: str) -> dict[str, dict[str, Any]]:
    """The example pods simulated onto ``nodes`` with the example config, by pod name."""
    config = str(EXAMPLES / "scheduler-config.yaml")
    code, out, err = run(capsys, "-f", nodes, "-f", str(EXAMPLES / "pods.yaml"), "--config", config, "-o", "json")
    assert code == 0, err
    return {p["name"]: p for p in json.loads(out)["pods"]}


def test_make_simulate_places_every_example_pod_as_its_comment_says(capsys: pytest.CaptureFixture[str]) -> None:
    """`make simulate`: deploy/examples/pods.yaml on cluster.yaml's nodes, each pod checked
    against the comment above it there."""
    placed = _placed(capsys, str(EXAMPLES / "cluster.yaml"))
    zone = {"cpu-a1": "a", "cpu-a2": "a", "cpu-b1": "b", "cpu-b2": "b", "cpu-c1": "c", "mem-b1": "b"}
    zone |= {"batch-c1": "c", "gpu-h100-1": "a", "gpu-h100-2": "b", "gpu-a100-1": "a", "gpu-a100-2": "c"}

    def on(name: str) -> str:
        pod = placed[name]
        assert pod["status"] == "Scheduled", (name, pod["message"])
        return str(pod["node"])

    assert "running-1" not in placed and "running-gpu-1" not in placed  # given as running on their nodes
    webs = [on(f"web-{i}") for i in (1, 2, 3)]
    assert len(set(webs)) == 3 and {zone[n] for n in webs} == {"a", "b", "c"}  # spread, one per host
    assert zone[on("api-1")] == "a"
    assert on("cache-1") == "mem-b1"  # the only r6i, in zone b
    assert on("batch-etl-1") == "batch-c1"
    assert on("ingress-1") != on("ingress-2")  # hostPort 80
    on("probe-1")
    assert placed["gated-1"]["status"] == "SchedulingGated"
    assert (on("train-llm-1"), placed["train-llm-1"]["gpuDevices"]) == ("gpu-h100-1", list(range(8)))
    assert len(placed["train-vision-1"]["gpuDevices"]) == 4 and on("train-vision-1")
    assert on("finetune-1").startswith("gpu-a100-") and len(placed["finetune-1"]["gpuDevices"]) == 2
    if on("finetune-1") == "gpu-a100-1":
        assert 0 not in placed["finetune-1"]["gpuDevices"]  # running-gpu-1 holds it
    small = [(on(n), placed[n]["gpuDevices"]) for n in ("infer-small-1", "infer-small-2")]
    assert small[0] == small[1] and len(small[0][1]) == 1  # one device, shared
    assert on("infer-medium-1") and len(placed["infer-medium-1"]["gpuDevices"]) == 1
    assert len(placed["infer-tp2-1"]["gpuDevices"]) == 2 and on("infer-tp2-1")
    stuck = {name for name, pod in placed.items() if pod["status"] == "Unschedulable"}
    assert stuck == {"too-big-1", "no-toleration-1", "wrong-model-1"}  # the last three


def test_the_example_pods_on_the_simulated_nodes_do_what_the_readme_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docker compose and the chart's simulate mode: ten copies of node-template.yaml (the README
    says which of pods.yaml's pods do as their comments say there, and which cannot)."""
    template = yaml.safe_load((EXAMPLES / "node-template.yaml").read_text())
    items = []
    for i in range(10):
        name = f"sim-{i:05d}"
        meta = {**template["metadata"], "name": name}
        meta["labels"] = {**meta["labels"], "kubernetes.io/hostname": name}
        items.append({**template, "metadata": meta})
    (tmp_path / "nodes.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    placed = _placed(capsys, str(tmp_path / "nodes.yaml"))
    status = {name: pod["status"] for name, pod in placed.items()}
    assert "running-1" not in placed and "running-gpu-1" not in placed  # their nodes are not there
    assert status.pop("gated-1") == "SchedulingGated"
    pending = {"too-big-1", "wrong-model-1", "api-1", "cache-1", "finetune-1"}
    assert {name for name, s in status.items() if s != "Scheduled"} == pending
    assert placed["no-toleration-1"]["status"] == "Scheduled"  # no node is tainted
    assert len(placed["train-llm-1"]["gpuDevices"]) == 8
