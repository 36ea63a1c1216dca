"""Preemption: kube-scheduler's scheduler_perf PreemptionBasic, in process.

kubernetes v1.28 test/integration/scheduler_perf/config/performance-config.yaml, PreemptionBasic
at 500 nodes: nodes of 4 cpu / 32Gi / 110 pods; 2,000 low-priority init pods (900m, priority 0:
four per node, 3.6 cpu of 4) then 500 measured high-priority pods (3 cpu, priority 10): every
one must preempt (three victims each). kube-scheduler does about 40 pods/s on it on a 2-core
machine.

Default profile with DefaultPreemption at PostFilter. Reports the measured pods per second one at
a time and in batches of 256 (the cycle's), the victims, and that nothing is overcommitted.

    python bench/preemption.py              # 500 nodes
    python bench/preemption.py --nodes 100  # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubus.api.manifests import parse_node, parse_pod
from kubus.cli.workload import POD_CONSTRAINT_WORKLOADS, pod_constraint_pods
from kubus.framework.config import load_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry

PREEMPTION_BASIC = POD_CONSTRAINT_WORKLOADS["preemption-basic"]
"""The shapes `kubus bench --workload preemption-basic` runs."""
KUBE_PODS_PER_SECOND = PREEMPTION_BASIC.kube_pods_per_second

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    postFilter: {enabled: [{name: DefaultPreemption}]}
"""


def _scheduler(nodes: int, backend: str) -> Scheduler:
    registry = in_tree_registry()
    profile = load_config(CONFIG, registry=registry).profiles[0]
    table = NodeTable(select_backend(backend), seed=1, capacity=nodes)
    table.add_nodes(
        parse_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i}"},
                "status": {"capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}},
            }
        )
        for i in range(nodes)
    )
    scheduler = Scheduler(Framework.from_profile(profile, registry), table, seed=1)
    low = [parse_pod(p) for p in pod_constraint_pods(PREEMPTION_BASIC, nodes * 4, 0)[0]]
    for start in range(0, len(low), 256):
        assert all(r.node for r in scheduler.schedule(low[start : start + 256])), "init pods must all fit"
    return scheduler


@dataclass
class Row:
    mode: str
    nodes: int
    placed: int
    victims: int
    pods_per_second: float
    overcommitted: int


def _overcommitted(table: NodeTable) -> int:
    cpu = table.resource_index["cpu"]
    view = table.view()
    return int((view.req[cpu] > view.alloc[cpu]).sum())


def run(nodes: int, batch: int, backend: str) -> Row:
    scheduler = _scheduler(nodes, backend)
    high = [parse_pod(p) for p in pod_constraint_pods(PREEMPTION_BASIC, 0, nodes)[1]]
    began = time.perf_counter()
    results = []
    for start in range(0, len(high), batch):
        results += scheduler.schedule(high[start : start + batch])
    seconds = time.perf_counter() - began
    return Row(
        "one by one" if batch == 1 else f"batches of {batch}",
        nodes,
        sum(r.node is not None for r in results),
        sum(len(r.preempted) for r in results),
        len(high) / seconds,
        _overcommitted(scheduler.table),
    )


def print_table(rows: Sequence[Row], out: Any = sys.stdout) -> None:
    head = (
        f"{'PreemptionBasic':<18} {'nodes':>6} {'placed':>7} {'victims':>8} {'pods/s':>8} {'x kube':>7} "
        f"{'overcommitted':>14}"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        print(
            f"{r.mode:<18} {r.nodes:>6} {r.placed:>7} {r.victims:>8} {r.pods_per_second:>8.0f} "
            f"{r.pods_per_second / KUBE_PODS_PER_SECOND:>6.1f}x {r.overcommitted:>14}",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "auto"))
    args = parser.parse_args(argv)
    rows = [run(args.nodes, 1, args.backend), run(args.nodes, 256, args.backend)]
    print_table(rows)
    return 0 if all(r.placed == r.nodes and r.overcommitted == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
