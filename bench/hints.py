"""What would make it fit: the cost of `kubus.framework.hints.fit_hints` per pending pod.

5,000 nodes (4 / 8 / 16 cpu, the 16-cpu third tainted nvidia.com/gpu=present:NoSchedule, a
gpu-model label on half, 1% cordoned), the default profile, every node filtered. Each pod shape
below fits no node; the table prints the hints found, the filter passes they took and the time
per pod (median of --repeat runs), against the time of one scheduling attempt of the same pod in
the same process. The bar: at most 20 ms per pod at 5,000 nodes.

    python bench/hints.py                 # 5,000 nodes
    python bench/hints.py --nodes 500     # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node, Pod
from kubus.framework.config import default_config
from kubus.framework.hints import fit_hints
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry


def node(i: int) -> Node:
    labels = {"kubernetes.io/hostname": f"node-{i}"}
    if i % 2 == 0:
        labels["gpu-model"] = ("H100", "L4", "A10")[i % 3]
    spec: dict[str, Any] = {}
    if i % 3 == 2:
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    if i % 100 == 1:
        spec["unschedulable"] = True
    cpu = ("4", "8", "16")[i % 3]
    return parse_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i}", "labels": labels},
            "spec": spec,
            "status": {"capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"}},
        }
    )


def pod(name: str, spec: dict[str, Any]) -> Pod:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}], **spec}
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


SHAPES = {
    "too much cpu": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "20"}}}]},
    "missing toleration": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "12"}}}]},
    "no such label value": {"nodeSelector": {"gpu-model": "A100"}},
    "two changes needed": {
        "nodeSelector": {"gpu-model": "A100"},
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "20"}}}],
    },
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "auto"))
    args = parser.parse_args(argv)
    registry = in_tree_registry()
    framework = Framework.from_profile(
        default_config(registry=registry).profiles[0], registry, percentage_of_nodes_to_score=100
    )
    table = NodeTable(select_backend(args.backend), capacity=args.nodes)
    table.add_nodes(node(i) for i in range(args.nodes))
    scheduler = Scheduler(framework, table)
    head = f"{'pending pod':<22} {'nodes':>6} {'hints':>6} {'best hint':<58} {'ms/pod':>7} {'1 attempt ms':>13}"
    print(head)
    print("-" * len(head))
    worst = 0.0
    for name, spec in SHAPES.items():
        p = pod(name.replace(" ", "-"), spec)
        hint_times, attempt_times = [], []
        hints = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            scheduler.feasible(p)
            attempt_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            hints = fit_hints(scheduler, p)
            hint_times.append(time.perf_counter() - began)
        ms = statistics.median(hint_times) * 1000
        worst = max(worst, ms)
        best = f"{hints[0].change} -> {hints[0].nodes}" if hints else "-"
        print(
            f"{name:<22} {args.nodes:>6} {len(hints):>6} {best[:58]:<58} {ms:>7.1f} "
            f"{statistics.median(attempt_times) * 1000:>13.2f}"
        )
    return 0 if worst <= 20 or args.nodes != 5000 else 1


if __name__ == "__main__":
    sys.exit(main())
