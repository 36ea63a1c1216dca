"""`kubus simulate` admits pods as kube's Priority admission does before it schedules them: the
class a pod names decides its place in the queue, a class that does not exist rejects the pod,
and the manifests' Namespaces give the node table their labels."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from kubus.api.manifests import parse_manifests
from kubus.api.namespaces import NAMESPACE_NAME_LABEL
from kubus.cli import simulate as simulate_module
from kubus.cli.main import main
from kubus.cli.simulate import REJECTED, SCHEDULED, UNSCHEDULABLE, simulate
from kubus.framework.config import default_config
from kubus.kernels import NodeTable
from kubus.kernels.backend import select_backend
from kubus.plugins import in_tree_registry

CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: only}
status: {allocatable: {cpu: "1", memory: 4Gi, pods: "10"}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 100000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch}
value: 10
globalDefault: true
---
apiVersion: v1
kind: Namespace
metadata: {name: ml, labels: {team: vision}}
"""


def pod(name: str, minute: int, spec: str = "") -> str:
    return (
        f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml, "
        f'creationTimestamp: "2024-05-01T12:{minute:02d}:00Z"}}\n'
        f"spec:\n  containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]\n{spec}"
    )


# The first pod created takes the one CPU, unless a higher class puts another first.
PODS = (
    pod("early", 0)  # no class: the globalDefault, batch (10)
    + pod("late", 5, "  priorityClassName: urgent\n")
    + pod("typo", 1, "  priorityClassName: urgnet\n")
)


def run(text: str) -> dict[str, Any]:
    config = default_config(registry=in_tree_registry())
    outcomes, _ = simulate(parse_manifests(text), config, backend=select_backend("numpy"))
    return {o.pod.name: o for o in outcomes}


def test_the_priority_class_decides_the_queue_order() -> None:
    out = run(CLUSTER + PODS)
    assert (out["late"].status, out["late"].node) == (SCHEDULED, "only")
    assert out["early"].status == UNSCHEDULABLE
    assert (out["late"].pod.spec.priority, out["early"].pod.spec.priority) == (100000, 10)
    assert out["early"].pod.spec.priority_class_name == "batch"  # the default's name, as kube sets it


def test_a_class_below_the_default_goes_after_it() -> None:
    out = run(CLUSTER.replace("value: 100000", "value: 1") + PODS)
    assert out["early"].status == SCHEDULED and out["late"].status == UNSCHEDULABLE


def test_an_unknown_class_rejects_the_pod_first_and_never_schedules_it() -> None:
    outcomes = list(run(CLUSTER + PODS).values())
    assert outcomes[0].pod.name == "typo"
    assert (outcomes[0].status, outcomes[0].node, outcomes[0].message) == (
        REJECTED,
        None,
        "spec.priorityClassName: no PriorityClass with name urgnet was found",
    )


def test_a_priority_that_is_not_the_class_value_is_rejected() -> None:
    out = run(CLUSTER + pod("liar", 0, "  priorityClassName: urgent\n  priority: 5\n"))
    assert out["liar"].status == REJECTED
    assert out["liar"].message.startswith("spec.priority: the integer value of priority (5) must not be provided")


def test_the_namespaces_labels_reach_the_node_table(monkeypatch: pytest.MonkeyPatch) -> None:
    tables: list[NodeTable] = []

    class Recorded(NodeTable):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            tables.append(self)

    monkeypatch.setattr(simulate_module, "NodeTable", Recorded)
    run(CLUSTER + PODS)
    [table] = tables
    assert table.namespaces == {"ml": {"team": "vision", NAMESPACE_NAME_LABEL: "ml"}}


def test_the_cli_reads_classes_from_every_file(tmp_path: Path) -> None:
    classes, pods = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    classes.write_text(CLUSTER)
    pods.write_text(PODS)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", "-f", str(classes), "-f", str(pods), "-o", "json", "--backend", "numpy"]) == 0
    status = {p["name"]: p["status"] for p in json.loads(out.getvalue())["pods"]}
    assert status == {"typo": REJECTED, "late": SCHEDULED, "early": UNSCHEDULABLE}
