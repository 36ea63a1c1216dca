"""What would make a pod fit (kubus.framework.hints): each hint names one change (or two), and is
exact: the pod with that change, scheduled again through `kubus simulate`, passes Filter on
exactly the number of nodes the hint says, and is placed on one of them."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kubus.api.manifests import Manifests, load_manifests, parse_manifests
from kubus.cli.main import main
from kubus.cli.simulate import SCHEDULED, UNSCHEDULABLE, simulate
from kubus.framework.config import default_config, load_config
from kubus.framework.hints import Hint, fit_hints
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import in_tree_registry

NODES = """
apiVersion: v1
kind: Node
metadata: {name: small-1, labels: {gpu-model: H100, topology.kubernetes.io/zone: a}}
status: {capacity: {cpu: "4", memory: 8Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: small-2, labels: {gpu-model: H100, topology.kubernetes.io/zone: a}}
status: {capacity: {cpu: "5500m", memory: 8Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: small-3, labels: {gpu-model: L4, topology.kubernetes.io/zone: b}}
status: {capacity: {cpu: "5500m", memory: 8Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: tainted-1, labels: {topology.kubernetes.io/zone: b}}
spec: {taints: [{key: dedicated, value: batch, effect: NoSchedule}]}
status: {capacity: {cpu: "16", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: tainted-2, labels: {topology.kubernetes.io/zone: b}}
spec: {taints: [{key: dedicated, value: batch, effect: NoSchedule}]}
status: {capacity: {cpu: "16", memory: 64Gi}}
---
apiVersion: v1
kind: Node
metadata: {name: cordoned}
spec: {unschedulable: true}
status: {capacity: {cpu: "16", memory: 64Gi}}
"""


def pod(spec: str, name: str = "p", labels: str = "{}") -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {labels}}}
spec:
{spec}
"""


def hints_of(text: str) -> tuple[list[Hint], Manifests]:
    manifests = parse_manifests(NODES + text)
    registry = in_tree_registry()
    outcomes, _ = simulate(
        manifests, default_config(registry=registry), backend=select_backend("numpy"), explain=True, registry=registry
    )
    [outcome] = [o for o in outcomes if o.pod.metadata.name == "p"]
    assert outcome.status == UNSCHEDULABLE, outcome
    return list(outcome.hints), manifests


def assert_exact(hint: Hint, manifests: Manifests) -> None:
    """The pod with the hint's change, scheduled afresh: placed, on one of exactly `nodes` nodes."""
    registry = in_tree_registry()
    changed = replace(manifests, pods=[hint.pod if p.metadata.name == "p" else p for p in manifests.pods])
    outcomes, _ = simulate(
        changed, default_config(registry=registry), backend=select_backend("numpy"), explain=True, registry=registry
    )
    [o] = [o for o in outcomes if o.pod.metadata.name == "p"]
    assert o.status == SCHEDULED, (hint.change, o.message)
    fits = sorted(n for n, e in (o.explain or {}).items() if e.filter == "ok")
    assert len(fits) == hint.nodes and hint.example in fits and o.node in fits, (hint, fits)


def changes(hints: list[Hint]) -> list[tuple[str, int, str]]:
    return [(h.change, h.nodes, h.example) for h in hints]


def test_a_request_too_big_is_lowered_to_the_most_any_open_node_has_free() -> None:
    hints, manifests = hints_of(pod('  containers: [{name: c, resources: {requests: {cpu: "6"}}}]'))
    # small nodes have 4 and 5.5 cpu; the tainted and cordoned ones stay shut whatever the request
    assert ("cpu request 5.5 (now 6)", 2, "small-2") in changes(hints)
    for h in hints:
        assert_exact(h, manifests)


def test_taints_and_cordons_are_tolerated_one_at_a_time() -> None:
    hints, manifests = hints_of(pod('  containers: [{name: c, resources: {requests: {cpu: "10"}}}]'))
    # most nodes first; ties in the order tried (taints, then requests)
    assert changes(hints) == [
        ("tolerate taint dedicated=batch:NoSchedule", 2, "tainted-1"),
        ("cpu request 5.5 (now 10)", 2, "small-2"),
        ("tolerate taint node.kubernetes.io/unschedulable:NoSchedule", 1, "cordoned"),
    ]
    for h in hints:
        assert_exact(h, manifests)


def test_a_node_selector_no_node_matches_names_the_values_nodes_have() -> None:
    hints, manifests = hints_of(pod("  nodeSelector: {gpu-model: A100}\n  containers: [{name: c}]"))
    assert changes(hints) == [
        ("drop nodeSelector gpu-model=A100", 3, "small-1"),
        ("nodeSelector gpu-model=H100 (now A100)", 2, "small-1"),
        ("nodeSelector gpu-model=L4 (now A100)", 1, "small-3"),
    ]
    for h in hints:
        assert_exact(h, manifests)


def test_when_no_single_change_helps_pairs_are_tried() -> None:
    spec = '  nodeSelector: {gpu-model: A100}\n  containers: [{name: c, resources: {requests: {cpu: "6"}}}]'
    hints, manifests = hints_of(pod(spec))
    assert hints and all(", and " in h.change for h in hints)
    assert ("nodeSelector gpu-model=H100 (now A100), and cpu request 5.5 (now 6)", 1, "small-2") in changes(hints)
    for h in hints:
        assert_exact(h, manifests)


def web_pods(*, host_port: bool) -> str:
    ports = ", ports: [{containerPort: 80, hostPort: 80}]" if host_port else ""
    return "".join(
        pod(f"  nodeName: {n}\n  containers: [{{name: c{ports}}}]", f"web-{n}", "{app: web}")
        for n in ("small-1", "small-2", "small-3")
    )


def test_required_anti_affinity_is_dropped() -> None:
    anti = """  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {labelSelector: {matchLabels: {app: web}}, topologyKey: topology.kubernetes.io/zone}
  containers: [{name: c}]"""
    # web pods in zones a and b shut both zones; the cordoned node has no zone: only its cordon
    # stands in the way (kube: a node without the topology key breaks no anti-affinity)
    hints, manifests = hints_of(web_pods(host_port=False) + pod(anti))
    assert changes(hints) == [
        ("drop the required pod anti-affinity", 3, "small-1"),
        ("tolerate taint node.kubernetes.io/unschedulable:NoSchedule", 1, "cordoned"),
    ]
    for h in hints:
        assert_exact(h, manifests)


def test_a_host_port_taken_is_dropped() -> None:
    spec = "  containers: [{name: c, ports: [{containerPort: 8080, hostPort: 80}]}]"
    hints, manifests = hints_of(web_pods(host_port=True) + pod(spec))
    assert changes(hints) == [
        ("drop hostPort 80", 3, "small-1"),
        ("tolerate taint dedicated=batch:NoSchedule", 2, "tainted-1"),
        ("tolerate taint node.kubernetes.io/unschedulable:NoSchedule", 1, "cordoned"),
    ]
    for h in hints:
        assert_exact(h, manifests)


def test_a_pod_that_fits_has_no_hints_and_the_table_is_left_as_it_was() -> None:
    manifests = parse_manifests(NODES + pod("  containers: [{name: c}]"))
    registry = in_tree_registry()
    framework = Framework.from_profile(default_config(registry=registry).profiles[0], registry)
    table = NodeTable(select_backend("numpy"))
    table.add_nodes(manifests.nodes)
    scheduler = Scheduler(framework, table)
    version = table.version
    assert fit_hints(scheduler, manifests.pods[0]) == []
    big = replace(manifests.pods[0], spec=replace(manifests.pods[0].spec, node_selector={"gpu-model": "A100"}))
    assert fit_hints(scheduler, big)
    assert table.version == version and all(not i.pods for i in table.node_infos())


@pytest.mark.parametrize("output", ["json", "table"])
def test_simulate_explain_prints_the_hints(tmp_path: Path, output: str) -> None:
    (tmp_path / "all.yaml").write_text(NODES + pod('  containers: [{name: c, resources: {requests: {cpu: "6"}}}]'))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["simulate", "-f", str(tmp_path / "all.yaml"), "--explain", "-o", output]) == 0
    if output == "json":
        [entry] = json.loads(out.getvalue())["pods"]
        assert {"change": "cpu request 5.5 (now 6)", "nodes": 2, "example": "small-2"} in entry["hints"]
    else:
        assert "  would fit: cpu request 5.5 (now 6) -> 2 node(s), e.g. small-2\n" in out.getvalue()


EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def test_every_unschedulable_example_pod_gets_exact_hints_gpus_included() -> None:
    """deploy/examples (GPU nodes, the gpu-binpack profile): a pod asking for 500 cpu, one missing
    the GPU toleration, one naming a GPU model no node has (its nodeSelector and annotation)."""
    registry = in_tree_registry()
    config = load_config((EXAMPLES / "scheduler-config.yaml").read_text(), registry=registry)
    manifests = Manifests()
    for name in ("cluster.yaml", "pods.yaml"):
        loaded = load_manifests(EXAMPLES / name)
        manifests = replace(manifests, pods=[*manifests.pods, *loaded.pods], nodes=[*manifests.nodes, *loaded.nodes])
    outcomes, _ = simulate(manifests, config, backend=select_backend("numpy"), explain=True, registry=registry)
    stuck = {o.pod.metadata.name: o for o in outcomes if o.status == UNSCHEDULABLE}
    assert set(stuck) == {"too-big-1", "no-toleration-1", "wrong-model-1"}
    assert changes(list(stuck["no-toleration-1"].hints)) == [
        ("tolerate taint nvidia.com/gpu=present:NoSchedule", 1, "gpu-h100-2")
    ]
    model = [h.change for h in stuck["wrong-model-1"].hints]
    assert (
        "nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 (now NVIDIA-B200), and "
        "annotation kubus.io/gpu-model=NVIDIA-H100-80GB-HBM3 (now NVIDIA-B200)"
    ) in model
    for o in stuck.values():
        assert o.hints, o.pod.metadata.name
        for h in o.hints:
            changed = replace(manifests, pods=[h.pod if p.key == o.pod.key else p for p in manifests.pods])
            again, _ = simulate(changed, config, backend=select_backend("numpy"), explain=True, registry=registry)
            [r] = [a for a in again if a.pod.key == o.pod.key]
            fits = sorted(n for n, e in (r.explain or {}).items() if e.filter == "ok")
            assert r.status == SCHEDULED and r.node in fits, (h.change, r.message)
            # the other pods of the run take their places as before: the count is of the end state
            assert len(fits) >= 1 and h.example in {n for n, e in (r.explain or {}).items()}


def test_a_pod_that_may_not_preempt_is_told_whom_it_would_evict() -> None:
    def low(node: str, cpu: str, priority: int) -> str:
        container = f'[{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]'
        spec = f"  priority: {priority}\n  nodeName: {node}\n  containers: {container}"
        return pod(spec, f"low-{node}")

    # 4 cpu fits a small node only once its pod is gone; kube evicts the least important: small-2's
    lows = low("small-1", "3", 10) + low("small-2", "5", 0) + low("small-3", "2", 50)
    vip = '  priority: 100\n  preemptionPolicy: Never\n  containers: [{name: c, resources: {requests: {cpu: "4"}}}]'
    hints, manifests = hints_of(lows + pod(vip))
    [preempting] = [h for h in hints if h.change.startswith("preemptionPolicy")]
    assert preempting.change == (
        "preemptionPolicy PreemptLowerPriority (now Never), evicting 1 pod(s) on small-2: default/low-small-2"
    )
    registry = in_tree_registry()
    changed = replace(manifests, pods=[preempting.pod if p.metadata.name == "p" else p for p in manifests.pods])
    outcomes, _ = simulate(
        changed, default_config(registry=registry), backend=select_backend("numpy"), registry=registry
    )
    [o] = [o for o in outcomes if o.pod.metadata.name == "p"]
    assert (o.status, o.node, o.preempted) == (SCHEDULED, "small-2", ("default/low-small-2",))


def test_how_long_until_enough_running_pods_finish() -> None:
    def running(node: str, cpu: str, name: str) -> str:
        return pod(f'  nodeName: {node}\n  containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]', name)

    manifests = parse_manifests(
        NODES
        + running("small-1", "2", "a")  # small-1: 4 cpu, 2 + 2 used
        + running("small-1", "2", "b")
        + running("small-2", "5", "c")  # small-2: 5.5 cpu, 5 used
        + running("small-3", "5", "d")
        + pod('  containers: [{name: c, resources: {requests: {cpu: "4"}}}]')
    )
    registry = in_tree_registry()
    framework = Framework.from_profile(default_config(registry=registry).profiles[0], registry)
    table = NodeTable(select_backend("numpy"))
    table.add_nodes(manifests.nodes)
    for p in manifests.pods:
        if p.spec.node_name:
            table.assume(PodInfo.of(p), p.spec.node_name)
    scheduler = Scheduler(framework, table)
    target = next(p for p in manifests.pods if p.metadata.name == "p")
    before = {i.name: sorted(i.pods) for i in table.node_infos()}
    # a at +10s and b at +20s free small-1 (4 cpu) only once both are gone; c at +15s frees small-2
    ends = {"default/a": 1010.0, "default/b": 1020.0, "default/c": 1015.0, "default/d": 0.0}
    hints = fit_hints(scheduler, target, ends_at=ends, now=1000.0)
    [waiting] = [h for h in hints if h.change.startswith("wait")]
    assert (waiting.change, waiting.nodes, waiting.example) == (
        "wait 15s: 2 running pod(s) finish by then",
        1,
        "small-2",
    )
    assert {i.name: sorted(i.pods) for i in table.node_infos()} == before  # every pod back
    # exact: those two gone, the pod passes Filter on exactly that node
    table.forget("default/a", "small-1")
    table.forget("default/c", "small-2")
    assert [table.node_info(int(r)).name for r in np.flatnonzero(scheduler.feasible(target))] == ["small-2"]
    assert not [h for h in fit_hints(scheduler, target) if h.change.startswith("wait")]  # no ends_at, no wait
