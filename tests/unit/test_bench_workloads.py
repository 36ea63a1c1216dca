"""`kubus bench --workload`: argument handling, the pod-constraint workloads' shapes, and the
check of kube's outcome. No servers: the bench itself runs in tests/e2e/test_bench_workloads.py."""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import pytest

from kubus.api.manifests import parse_manifests, parse_pod
from kubus.api.requests import pod_requests
from kubus.cli.bench import BenchPlan, bench_plan, bound_per_second, constraint_check, write_throughput_plot
from kubus.cli.connect import UsageError
from kubus.cli.main import build_parser, main
from kubus.cli.progress import PodTimes
from kubus.cli.workload import (
    BENCH_WORKLOADS,
    CPU_NODE_TEMPLATE,
    POD_CONSTRAINT_WORKLOADS,
    cpu_node_template,
    pod_constraint_pods,
)
from kubus.gpu_agent.simulation import simulated_nodes
from kubus.store.records import PodPhase


def bench_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_unknown_workload_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        bench_args("--workload", "pod-affinty")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--workload" in err and "invalid choice" in err and "pod-affinity" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("--workload", "pod-affinity", "--init-pods", "-1"), "--init-pods: expected 0 or more, got -1"),
        (("--workload", "topology-spreading", "--pods", "0"), "--pods: expected 1 or more, got 0"),
        (("--init-pods", "10"), "--init-pods: the mixed workload has no init pods"),
        (("--workload", "preemption-basic", "--nodes", "0"), "--nodes: expected 1 or more, got 0"),
    ],
)
def test_bad_counts_are_usage_errors(argv: tuple[str, ...], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=expected):
        bench_plan(bench_args(*argv))
    # Through `kubus` itself: one line, exit 2, before anything is started.
    assert main(["bench", *argv]) == 2
    assert capsys.readouterr().err == f"error: {expected}" + (
        " (give a pod-constraint --workload)\n" if "mixed" in expected else "\n"
    )


def test_counts_default_to_the_workload_s_own() -> None:
    assert bench_plan(bench_args()) == BenchPlan("mixed", 10_000, 0, None, 5000)
    assert bench_plan(bench_args("--init-pods", "0")).init_pods == 0
    expected = {
        "pod-affinity": (1000, 5000),
        "pod-anti-affinity": (1000, 1000),
        "topology-spreading": (2000, 5000),
        "preferred-topology-spreading": (2000, 5000),
        "preemption-basic": (500, 2000),
    }
    for name, (pods, init) in expected.items():
        plan = bench_plan(bench_args("--workload", name))
        assert (plan.pods, plan.init_pods, plan.constraints) == (pods, init, POD_CONSTRAINT_WORKLOADS[name])
        # scheduler_perf's node count: at 5,000 nodes PreemptionBasic's init pods leave room, no one preempts
        assert plan.nodes == (500 if name == "preemption-basic" else 5000)
    assert bench_plan(bench_args("--workload", "preemption-basic", "--nodes", "100")).nodes == 100
    plan = bench_plan(bench_args("--workload", "pod-anti-affinity", "--pods", "20", "--init-pods", "0"))
    assert (plan.pods, plan.init_pods) == (20, 0)
    assert set(BENCH_WORKLOADS) == {"mixed", *POD_CONSTRAINT_WORKLOADS}
    assert [w.kube_pods_per_second for w in POD_CONSTRAINT_WORKLOADS.values()] == [36, 112, 82, 84, 40]


def test_cpu_nodes_and_pods_have_scheduler_perf_s_shapes() -> None:
    (plain,) = parse_manifests(CPU_NODE_TEMPLATE).nodes
    assert plain.status.allocatable == {"cpu": 4000, "memory": 32 * 2**30, "pods": 110}
    assert not plain.gpus and not plain.spec.taints
    (zoned,) = parse_manifests(cpu_node_template(("moon-1", "moon-2", "moon-3"))).nodes
    zones = [n.metadata.labels.get("topology.kubernetes.io/zone") for n in simulated_nodes(zoned, 4)]
    assert zones == ["moon-1", "moon-2", "moon-3", "moon-1"]
    assert "topology.kubernetes.io/zone" not in simulated_nodes(plain, 1)[0].metadata.labels
    for w in POD_CONSTRAINT_WORKLOADS.values():
        init, measured = pod_constraint_pods(w, 3, 2, profiles=("default-scheduler", "profile-1"))
        assert [p["metadata"]["name"] for p in init] == ["init-00000", "init-00001", "init-00002"]
        assert [p["metadata"]["name"] for p in measured] == ["measured-00000", "measured-00001"]
        assert [p["spec"].get("schedulerName") for p in measured] == [None, "profile-1"]
        pods = [parse_pod(p) for p in init + measured]
        cpu = {"preemption-basic": [900] * 3 + [3000] * 2}.get(w.name, [100] * 5)
        assert [pod_requests(p) for p in pods] == [{"cpu": c, "memory": 500 * 2**20} for c in cpu]
    _, (m,) = pod_constraint_pods(POD_CONSTRAINT_WORKLOADS["pod-anti-affinity"], 0, 1)
    term = m["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname" and m["metadata"]["labels"] == {"color": "green"}
    _, (m,) = pod_constraint_pods(POD_CONSTRAINT_WORKLOADS["topology-spreading"], 0, 1)
    assert m["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"


def placed(*nodes: str) -> list[PodTimes]:
    return [PodTimes(f"ns/p{i}", f"u{i}", bound=1.0, phase=PodPhase.RUNNING, node=n) for i, n in enumerate(nodes)]


NODES = {f"n{i}": {"topology.kubernetes.io/zone": f"moon-{i % 3 + 1}"} for i in range(6)}


def test_constraint_check_is_kube_s_outcome() -> None:
    anti = POD_CONSTRAINT_WORKLOADS["pod-anti-affinity"]
    pending = PodTimes("ns/x", "ux", phase=PodPhase.PENDING, reason="Unschedulable")
    assert constraint_check(anti, placed("n0"), [*placed("n1", "n2"), pending], NODES)["ok"]
    bad = constraint_check(anti, placed("n0"), placed("n1", "n0"), NODES)
    assert not bad["ok"] and "most on one node: 2" in bad["check"]

    affinity = POD_CONSTRAINT_WORKLOADS["pod-affinity"]
    assert constraint_check(affinity, placed("n0"), placed("n3", "n0"), NODES)["ok"]
    assert not constraint_check(affinity, placed("n0"), placed("n1"), NODES)["ok"]
    assert not constraint_check(affinity, [], placed("elsewhere"), NODES)["ok"]  # a node without a zone

    spread = POD_CONSTRAINT_WORKLOADS["topology-spreading"]
    even = constraint_check(spread, placed("n0"), placed(*["n0"] * 5, "n1"), NODES)
    assert even["ok"] and "skew 5" in even["check"], even
    skewed = constraint_check(spread, [], placed(*["n0"] * 6), NODES)
    assert not skewed["ok"] and "moon-1: 6, moon-2: 0, moon-3: 0" in skewed["check"]
    preferred = constraint_check(
        POD_CONSTRAINT_WORKLOADS["preferred-topology-spreading"], [], placed(*["n0"] * 6), NODES
    )
    assert preferred["ok"] and "skew 6" in preferred["check"]

    preemption = POD_CONSTRAINT_WORKLOADS["preemption-basic"]
    both = placed("n0", "n1")
    assert constraint_check(preemption, [], both, NODES, preempted=6)["ok"]
    lax = constraint_check(preemption, [], both, NODES, preempted=2)  # placed without evicting: not kube's
    assert not lax["ok"] and "(2 preempted)" in lax["check"]
    assert not constraint_check(preemption, [], [*placed("n0"), pending], NODES, preempted=6)["ok"]


def test_throughput_over_time_is_counted_per_second_and_drawn_as_a_png(tmp_path: Path) -> None:
    assert bound_per_second([], 100.0) == []
    assert bound_per_second([100.2, 100.9, 102.5, 99.0], 100.0) == [3, 0, 1]  # a clock a bit behind counts at 0
    result = {"workload": "mixed", "nodes": 10, "pods": 4, "pods_per_second": 1.3, "bound_per_second": [3, 0, 1]}
    path = tmp_path / "throughput.png"
    write_throughput_plot(result, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (800, 400)
