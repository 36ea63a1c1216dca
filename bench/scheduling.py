"""Scheduling-decision benchmark: vectorized kernels against the one-node-at-a-time baseline.

Default profile, synthetic realistic clusters (kubus.api.synthetic: labels, taints, mixed GPU and CPU
nodes, images), every node filtered and scored (percentageOfNodesToScore: 100) unless the row
says "adaptive". For each size it reports the time per pod of one scheduling decision (a pod
scheduled and assumed, as the cycle does), batches of 256 pods, and the same decisions by the
nodewise reference scheduler (the kube-style plain Python implementation of the same plugins),
in the same process, with the speedup and a check that both chose the same nodes.

    python bench/scheduling.py                 # 1k, 5k, 10k, 100k nodes
    python bench/scheduling.py --quick         # small sizes, a smoke run
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass

from kubus.api.synthetic import make_nodes, make_pods, make_replicas
from kubus.framework.config import default_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo
from kubus.plugins import in_tree_registry
from kubus_reference import ReferenceScheduler, reference_profile


@dataclass
class Row:
    nodes: int
    mode: str
    pods: int
    ms_per_pod: float
    baseline_ms: float | None = None
    same: bool | None = None
    bytes_per_node: float | None = None


def _scheduler(nodes: list, pct: int | None, backend_name: str) -> Scheduler:
    registry = in_tree_registry()
    profile = default_config(registry=registry).profiles[0]
    table = NodeTable(select_backend(backend_name), seed=1, capacity=len(nodes))
    table.add_nodes(nodes)
    fw = Framework.from_profile(profile, registry, percentage_of_nodes_to_score=pct)
    return Scheduler(fw, table, seed=1)


def _reference(nodes: list, pct: int | None) -> tuple[ReferenceScheduler, list[NodeInfo]]:
    profile = default_config(registry=in_tree_registry()).profiles[0]
    return ReferenceScheduler(reference_profile(profile, pct), seed=1), [NodeInfo(n) for n in nodes]


def _timed(fn) -> tuple[float, object]:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def memory_per_node(n: int, backend_name: str) -> float:
    """Bytes allocated while building a table of n nodes (arrays and NodeInfos), per node.
    The Node objects themselves (the input) are built before measuring."""
    nodes = make_nodes(n, seed=2)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    table = NodeTable(select_backend(backend_name), seed=1, capacity=n)
    table.add_nodes(nodes)
    table.view()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


def bench_size(n: int, pods: int, baseline_pods: int, batch: int | None, backend: str) -> list[Row]:
    nodes = make_nodes(n, seed=2)
    workload = make_pods(pods, seed=3)
    rows = []

    sched = _scheduler(nodes, 100, backend)
    seconds, single = _timed(lambda: [sched.schedule([p])[0] for p in workload])
    row = Row(n, "one pod per call", pods, seconds / pods * 1e3)
    if baseline_pods:
        ref, infos = _reference(nodes, 100)
        ref_seconds, ref_results = _timed(lambda: ref.schedule_all(workload[:baseline_pods], infos))
        row.baseline_ms = ref_seconds / baseline_pods * 1e3
        row.same = [r.node for r in ref_results] == [r.node for r in single[:baseline_pods]]
    rows.append(row)

    if batch:
        sched = _scheduler(nodes, 100, backend)
        seconds, batched = _timed(
            lambda: [r for i in range(0, pods, batch) for r in sched.schedule(workload[i : i + batch])]
        )
        same = [r.node for r in batched] == [r.node for r in single]
        rows.append(Row(n, f"batches of {batch}, unique pods", pods, seconds / pods * 1e3, same=same))
        # ReplicaSet-like: 8 templates; pods of one template share one evaluation in a batch
        replicas = make_replicas(8, pods // 8, seed=4)
        sched = _scheduler(nodes, 100, backend)
        seconds, one_by_one = _timed(lambda: [sched.schedule([p])[0] for p in replicas])
        rows.append(Row(n, "one pod per call, replicas", len(replicas), seconds / len(replicas) * 1e3))
        sched = _scheduler(nodes, 100, backend)
        seconds, batched = _timed(
            lambda: [r for i in range(0, len(replicas), batch) for r in sched.schedule(replicas[i : i + batch])]
        )
        same = [r.node for r in batched] == [r.node for r in one_by_one]
        rows.append(Row(n, f"batches of {batch}, replicas", len(replicas), seconds / len(replicas) * 1e3, same=same))

    sched = _scheduler(nodes, None, backend)
    seconds, _ = _timed(lambda: [sched.schedule([p])[0] for p in workload])
    rows.append(Row(n, "one pod, adaptive %", pods, seconds / pods * 1e3))
    return rows


def print_table(rows: Sequence[Row], out=sys.stdout) -> None:
    header = ("nodes", "mode", "pods", "ms/pod", "pods/s", "baseline ms/pod", "speedup", "same nodes", "bytes/node")
    lines = [header]
    for r in rows:
        lines.append(
            (
                f"{r.nodes:,}",
                r.mode,
                str(r.pods),
                f"{r.ms_per_pod:.3f}",
                f"{1e3 / r.ms_per_pod:,.0f}",
                "-" if r.baseline_ms is None else f"{r.baseline_ms:.1f}",
                "-" if r.baseline_ms is None else f"{r.baseline_ms / r.ms_per_pod:.0f}x",
                "-" if r.same is None else ("yes" if r.same else "NO"),
                "-" if r.bytes_per_node is None else f"{r.bytes_per_node:,.0f}",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        out.write(
            "  ".join(c.rjust(w) if j != 1 else c.ljust(w) for j, (c, w) in enumerate(zip(line, widths, strict=True)))
            + "\n"
        )
        if i == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "auto"))
    args = parser.parse_args(argv)
    # (nodes, pods timed, baseline pods, batch size)
    sizes = (
        [(200, 40, 3, 16), (1000, 60, 2, None)]
        if args.quick
        else [
            (1_000, 400, 20, None),
            (5_000, 400, 5, None),
            (10_000, 1_024, 3, 256),
            (100_000, 200, 1, None),
        ]
    )
    rows: list[Row] = []
    for n, pods, baseline, batch in sizes:
        sys.stderr.write(f"benchmarking {n:,} nodes...\n")
        size_rows = bench_size(n, pods, baseline, batch, args.backend)
        size_rows[0].bytes_per_node = memory_per_node(n, args.backend)
        rows += size_rows
    print(
        f"backend: {select_backend(args.backend).name}; default profile; percentageOfNodesToScore 100 unless adaptive"
    )
    print_table(rows)
    return 0 if all(r.same is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
