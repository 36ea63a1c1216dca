"""`kubus simulate` with preemption: the victims, the nominated node and the victims' outcomes,
in the table and in JSON; PodDisruptionBudgets steer the choice."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from kubus.api.manifests import parse_manifests
from kubus.cli.main import main
from kubus.cli.simulate import PREEMPTED, SCHEDULED, UNSCHEDULABLE, simulate
from kubus.framework.config import default_config
from kubus.kernels.backend import select_backend
from kubus.plugins import in_tree_registry

NODES = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {capacity: {cpu: "4", memory: 8Gi, pods: "10"}}
"""


def pod(name: str, cpu: str, priority: int, *, node: str = "", labels: str = "{}", policy: str = "") -> str:
    extra = f"\n  nodeName: {node}" if node else ""
    extra += f"\n  preemptionPolicy: {policy}" if policy else ""
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {labels}}}
spec:
  priority: {priority}{extra}
  containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""


def outcomes(text: str) -> dict[str, tuple[str, str | None, tuple[str, ...], str]]:
    registry = in_tree_registry()
    result, _ = simulate(
        parse_manifests(NODES + text),
        default_config(registry=registry),
        backend=select_backend("numpy"),
        registry=registry,
    )
    return {o.pod.name: (o.status, o.node, o.preempted, o.message) for o in result}


def test_a_high_priority_pod_evicts_the_fewest_lowest_pods_it_needs() -> None:
    got = outcomes(
        pod("a", "2", 0, node="n1") + pod("b", "2", 0, node="n1") + pod("c", "3", 5, node="n2") + pod("vip", "3", 10)
    )
    # n2's only pod has priority 5, n1's have 0: kube picks the node whose highest victim is lowest
    assert got["vip"][:3] == (SCHEDULED, "n1", ("default/a", "default/b"))
    assert got["a"][0] == got["b"][0] == PREEMPTED
    assert got["a"][3] == "Preempted by default/vip on node n1"
    assert "c" not in got  # a pod given with spec.nodeName has an outcome only once evicted


def test_never_and_equal_priority_do_not_preempt() -> None:
    got = outcomes(
        pod("a", "4", 5, node="n1")
        + pod("b", "4", 5, node="n2")
        + pod("same", "2", 5)
        + pod("polite", "2", 9, policy="Never")
    )
    assert got["same"][0] == UNSCHEDULABLE and "No preemption victims found for incoming pod" in got["same"][3]
    assert got["polite"][0] == UNSCHEDULABLE
    assert "not eligible due to preemptionPolicy=Never" in got["polite"][3]
    assert "a" not in got and "b" not in got  # nothing evicted


def test_a_disruption_budget_steers_preemption_to_the_other_node() -> None:
    budget = """
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: keep-db}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: db}}
"""
    got = outcomes(
        budget
        + pod("db", "4", 0, node="n1", labels="{app: db}")
        + pod("batch", "4", 0, node="n2")
        + pod("vip", "4", 10)
    )
    assert got["vip"][:3] == (SCHEDULED, "n2", ("default/batch",))


def test_json_names_the_victims_and_the_nominated_node(tmp_path: Path) -> None:
    (tmp_path / "all.yaml").write_text(
        NODES + pod("a", "4", 0, node="n1") + pod("b", "4", 0, node="n2") + pod("vip", "1", 10)
    )
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", "-f", str(tmp_path / "all.yaml"), "-o", "json"]) == 0
    pods = {p["name"]: p for p in json.loads(out.getvalue())["pods"]}
    vip = pods["vip"]
    assert vip["status"] == SCHEDULED and vip["nominatedNode"] == vip["node"]
    assert vip["preempted"] in (["default/a"], ["default/b"])
    victim = vip["preempted"][0].split("/")[1]
    assert pods[victim]["status"] == PREEMPTED and pods[victim]["node"] is None
