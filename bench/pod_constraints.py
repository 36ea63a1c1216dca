"""InterPodAffinity and PodTopologySpread: kube-scheduler's scheduler_perf workloads, in process.

The four workloads of kubernetes v1.28 test/integration/scheduler_perf/config/performance-config.yaml
that stress the plugins looking at other pods, with the shapes `kubus bench --workload` runs
(`kubus.cli.workload.POD_CONSTRAINT_WORKLOADS`; 5,000 nodes of 4 cpu / 32Gi / 110 pods; pods of
100m / 500Mi):

- SchedulingPodAffinity: every node in zone1; 5,000 init pods then 1,000 measured, each with
  required podAffinity to color=blue on the zone (namespaces sched-0 and sched-1);
- SchedulingPodAntiAffinity: 1,000 init pods then 1,000 measured, each with required
  podAntiAffinity to color=green on the hostname;
- TopologySpreading: zones moon-1..3; 5,000 plain init pods then 2,000 measured with a
  DoNotSchedule spread (maxSkew 5, zone, color=blue);
- PreferredTopologySpreading: the same with ScheduleAnyway.

Default profile, every node filtered and scored (percentageOfNodesToScore 100). Reports the measured
pods per second one at a time (as kube schedules) and in batches of 256 (as the cycle does), the
one-node-at-a-time reference (`kubus_reference`, kube's way: walks every pod of every node) on
the first pods in the same process, whether both placed those the same, and memory per node and
per pod (what the placed pods keep: their NodeInfos, table rows and the pod index).

    python bench/pod_constraints.py                  # 5,000 nodes
    python bench/pod_constraints.py --quick          # 500 nodes, a smoke run
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node, Pod
from kubus.cli.workload import POD_CONSTRAINT_WORKLOADS, pod_constraint_pods
from kubus.framework.config import default_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import in_tree_registry
from kubus_reference import ReferenceScheduler, reference_profile


def node(i: int, zone: str | None) -> Node:
    labels = {"kubernetes.io/hostname": f"node-{i}"}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return parse_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i}", "labels": labels},
            "status": {"capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}},
        }
    )


@dataclass(frozen=True)
class Workload:
    """`kubus bench --workload`'s shapes (`kubus.cli.workload.POD_CONSTRAINT_WORKLOADS`), as Pods."""

    name: str
    zones: Sequence[str]
    init: list[Pod]
    measured: list[Pod]
    kube_pods_per_second: float


def workloads(scale: float) -> list[Workload]:
    out = []
    for w in POD_CONSTRAINT_WORKLOADS.values():
        if w.plugin not in ("InterPodAffinity", "PodTopologySpread"):
            continue  # PreemptionBasic: bench/preemption.py
        init, measured = pod_constraint_pods(w, max(1, int(w.init_pods * scale)), max(1, int(w.measured_pods * scale)))
        pods = [parse_pod(p) for p in init], [parse_pod(p) for p in measured]
        out.append(Workload(w.kube_name, w.zones, *pods, w.kube_pods_per_second))
    return out


@dataclass
class Row:
    workload: str
    nodes: int
    pods: int
    one_by_one: float
    batched: float
    reference: float
    same: bool
    bytes_per_node: float
    bytes_per_pod: float
    kube: float


def _setup(w: Workload, nodes: int, backend: str) -> tuple[Scheduler, list[Node]]:
    registry = in_tree_registry()
    profile = default_config(registry=registry).profiles[0]
    fw = Framework.from_profile(profile, registry, percentage_of_nodes_to_score=100)
    cluster = [node(i, w.zones[i % len(w.zones)] if w.zones else None) for i in range(nodes)]
    table = NodeTable(select_backend(backend), seed=1, capacity=nodes)
    table.add_nodes(cluster)
    scheduler = Scheduler(fw, table, seed=1)
    init = w.init
    for start in range(0, len(init), 256):
        scheduler.schedule(init[start : start + 256])
    return scheduler, cluster


def run(w: Workload, nodes: int, backend: str, reference_pods: int) -> Row:
    measured = w.measured
    # one at a time, as kube-scheduler decides
    scheduler, cluster = _setup(w, nodes, backend)
    began = time.perf_counter()
    one = [scheduler.schedule([p])[0] for p in measured]
    one_s = time.perf_counter() - began
    placed = sum(r.node is not None for r in one)
    # batches of 256, as the cycle decides
    scheduler, _ = _setup(w, nodes, backend)
    began = time.perf_counter()
    batched = []
    for start in range(0, len(measured), 256):
        batched += scheduler.schedule(measured[start : start + 256])
    batch_s = time.perf_counter() - began
    assert [r.node for r in batched] == [r.node for r in one], f"{w.name}: batch != one by one"
    # memory the placed pods keep (table rows, NodeInfos, the pod index), traced in a run of its own
    traced, _ = _setup(w, nodes, backend)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for start in range(0, len(measured), 256):
        traced.schedule(measured[start : start + 256])
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    # the kube-way reference on the first pods, from the same start
    ref_scheduler = ReferenceScheduler(
        reference_profile(default_config(registry=in_tree_registry()).profiles[0], 100), seed=1
    )
    infos = [NodeInfo(n) for n in cluster]
    by_name = {i.name: i for i in infos}
    fresh, _ = _setup(w, nodes, backend)  # the init pods where the vectorized scheduler put them
    for info in fresh.table.node_infos():
        for p in info.pods.values():
            by_name[info.name].add_pod(PodInfo.of(p.pod))
    k = min(reference_pods, len(measured))
    began = time.perf_counter()
    ref = ref_scheduler.schedule_all(measured[:k], infos)
    ref_s = time.perf_counter() - began
    same = [r.node for r in ref] == [r.node for r in one[:k]]
    table = scheduler.table
    return Row(
        w.name,
        nodes,
        placed,
        len(measured) / one_s,
        len(measured) / batch_s,
        k / ref_s,
        same,
        table.nbytes() / nodes,
        grown / max(1, len(measured)),
        w.kube_pods_per_second,
    )


def print_table(rows: Sequence[Row], out: Any = sys.stdout) -> None:
    head = (
        f"{'workload':<28} {'nodes':>6} {'placed':>7} {'1-by-1 pods/s':>14} {'batch pods/s':>13} "
        f"{'reference':>10} {'x ref':>7} {'x kube':>7} {'same':>5} {'B/node':>7} {'B/pod':>7}"
    )
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        kube = r.kube
        print(
            f"{r.workload:<28} {r.nodes:>6} {r.pods:>7} {r.one_by_one:>14.0f} {r.batched:>13.0f} "
            f"{r.reference:>10.1f} {r.one_by_one / r.reference:>6.0f}x "
            f"{(f'{r.one_by_one / kube:.0f}x' if kube else '-'):>7} {('yes' if r.same else 'NO'):>5} "
            f"{r.bytes_per_node:>7.0f} {r.bytes_per_pod:>7.0f}",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="500 nodes and a tenth of the pods")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--reference-pods", type=int, default=20, help="pods the reference schedules (slow)")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "auto"))
    parser.add_argument("--only", help="run one workload (its name)")
    args = parser.parse_args(argv)
    nodes, scale = (500, 0.1) if args.quick else (args.nodes, 1.0)
    rows = []
    for w in workloads(scale):
        if args.only and w.name != args.only:
            continue
        rows.append(run(w, nodes, args.backend, args.reference_pods))
        print(f"  {w.name}: done", file=sys.stderr, flush=True)
    print_table(rows)
    return 0 if all(r.same for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
