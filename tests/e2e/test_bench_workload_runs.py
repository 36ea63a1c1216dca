"""`kubus bench --workload`: kube scheduler_perf's pod-constraint workloads end to end, tiny.

30 CPU nodes, 20 init pods, 20 measured pods: every measured pod is accounted for (bound, or
unschedulable where kube would leave it pending), the placements are the ones kube's constraint
gives, and the invariants hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_support import run_kubus

NODES, INIT, MEASURED = 30, 20, 20


@pytest.mark.parametrize(
    ("workload", "bound"),
    [
        ("pod-affinity", MEASURED),
        # One color=green pod per hostname: the init pods take 20 nodes, 10 are left.
        ("pod-anti-affinity", NODES - INIT),
        ("topology-spreading", MEASURED),
        ("preferred-topology-spreading", MEASURED),
    ],
)
async def test_pod_constraint_workload(tmp_path: Path, workload: str, bound: int) -> None:
    result = await run_kubus(
        "bench", "--workload", workload, "--nodes", str(NODES), "--pods", str(MEASURED),
        "--init-pods", str(INIT), "--timeout", "120", "-o", "json",
        env={"KUBUS_HOME": str(tmp_path)}, timeout=200,
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    assert report["workload"] == workload and report["nodes"] == NODES
    assert report["init"]["bound"] == INIT and report["init"]["unschedulable"] == 0
    assert report["bound"] + report["unschedulable"] == MEASURED and report["not_bound"] == []
    assert report["invariant_violations"] == []
    assert report["constraint_check"]["ok"], report["constraint_check"]
    assert (report["bound"], report["unschedulable"]) == (bound, MEASURED - bound)
    assert report["pods_per_second"] > 0 and report["latency"]["p50"] is not None
    assert report["kube_pods_per_second"] in (36, 112, 82, 84) and report["vs_kube"] > 0


async def test_preemption_basic_workload(tmp_path: Path) -> None:
    """PreemptionBasic, tiny: 10 nodes full of four 900m pods each; 10 pods of 3 cpu at a higher
    priority each evict three of them and run."""
    result = await run_kubus(
        "bench", "--workload", "preemption-basic", "--nodes", "10", "--pods", "10",
        "--init-pods", "40", "--timeout", "120", "-o", "json",
        env={"KUBUS_HOME": str(tmp_path)}, timeout=200,
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    assert report["init"]["bound"] == 40
    assert (report["bound"], report["unschedulable"]) == (10, 0)
    assert report["invariant_violations"] == [] and report["constraint_check"]["ok"]
    assert "(30 preempted)" in report["constraint_check"]["check"]
    assert report["kube_pods_per_second"] == 40


async def test_an_offered_load_is_submitted_steadily_not_all_at_once(tmp_path: Path) -> None:
    """--rate 40 for 80 pods: two seconds of submitting, the latency of a cluster that keeps up."""
    result = await run_kubus(
        "bench", "--nodes", "20", "--pods", "80", "--rate", "40", "--timeout", "120", "-o", "json",
        env={"KUBUS_HOME": str(tmp_path)}, timeout=200,
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    assert report["offered_pods_per_second"] == 40 and report["bound"] == 80
    assert 1.5 <= report["submit_seconds"] <= 4.0, report["submit_seconds"]  # not a burst of 80
    assert sum(report["bound_per_second"]) == 80 and len(report["bound_per_second"]) >= 2
    bad = await run_kubus("bench", "--rate", "0", env={"KUBUS_HOME": str(tmp_path)}, timeout=60)
    assert bad.code == 2 and "--rate: expected pods per second above 0, got 0" in bad.err
