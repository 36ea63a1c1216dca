"""The cycle's scheduling work in process: `Scheduler.schedule` over the nodes and the pods of
`kubus bench` (simulated 8-GPU nodes, the mixed workload, kube's default profile plus GPUFit),
in batches of 256 as the cycle calls it, with no servers. Reports the CPU per pod and a digest of
the placements, which a change that only makes scheduling faster leaves as it was.

    python bench/cycle_batches.py                    # 5,000 nodes, 10,240 pods, 3 runs
    python bench/cycle_batches.py --nodes 1000 --runs 5
    python bench/cycle_batches.py --profiles 2       # two cycles, as `kubus bench --profiles 2`

With ``--profiles N`` the pods are dealt round-robin to N schedulers, each with its own table
of the same nodes (one process doing the work of N cycles): they take turns, a batch of 256
each, and before its turn a scheduler's table takes in the placements the others made since
its last turn, as a cycle takes in the others' `ReservedPods` notices. The CPU per pod is the
sum over all of them, so it compares with one profile's directly.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kubus.api.manifests import parse_node, parse_pod
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config, mixed_workload
from kubus.framework.config.loading import load_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import in_tree_registry

BATCH = 256


def bench_scheduler(nodes: list, backend: str) -> Scheduler:
    """A Scheduler of `kubus bench`'s profile (kube's default plus GPUFit) over ``nodes``."""
    registry = in_tree_registry()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(gpu_scheduler_config())
        config = load_config(str(path), registry=registry)
    table = NodeTable(select_backend(backend), seed=1, capacity=len(nodes))
    table.add_nodes(nodes)
    framework = Framework.from_profile(
        config.profiles[0], registry, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score
    )
    return Scheduler(framework, table, seed=1)


def _run(nodes: list, pods: list, backend: str, profiles: int) -> tuple[float, int, str]:
    """CPU seconds per pod, pods placed, and the placements' digest of one run on fresh tables."""
    schedulers = [bench_scheduler(nodes, backend) for _ in range(profiles)]
    dealt = [pods[i::profiles] for i in range(profiles)]
    news: list[list[tuple[PodInfo, str]]] = [[] for _ in range(profiles)]
    """Per scheduler: the others' placements it has yet to take in."""
    digest = hashlib.sha1()
    placed = 0
    began = time.process_time()
    for start in range(0, max(len(d) for d in dealt), BATCH):
        for i, scheduler in enumerate(schedulers):
            for pod_info, node in news[i]:
                scheduler.table.assume(pod_info, node)
            news[i] = []
            for result in scheduler.schedule(dealt[i][start : start + BATCH]):
                if result.node is None:
                    continue
                placed += 1
                digest.update(f"{result.node} {result.gpu_devices};".encode())
                pod_info = result.pod_info or scheduler.table.node_info(result.node).pods[result.pod.key]
                for j in range(profiles):
                    if j != i:
                        news[j].append((pod_info, result.node))
    return (time.process_time() - began) / len(pods), placed, digest.hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10240)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profiles", type=int, default=1, help="schedulers sharing the nodes (default 1)")
    parser.add_argument("--backend", choices=("numpy", "cupy", "auto"), default="numpy")
    args = parser.parse_args(argv)
    template = yaml.safe_load(NODE_TEMPLATE)
    nodes = []
    for i in range(args.nodes):
        manifest = copy.deepcopy(template)
        manifest["metadata"]["name"] = f"sim-{i:05d}"
        manifest["metadata"]["labels"]["kubernetes.io/hostname"] = f"sim-{i:05d}"
        nodes.append(parse_node(manifest))
    pods = []
    for i, manifest in enumerate(mixed_workload(args.pods)):
        manifest["metadata"]["uid"] = f"uid-{i}"
        pods.append(parse_pod(manifest))
    runs = [_run(nodes, pods, args.backend, args.profiles) for _ in range(args.runs)]
    per_pod = [r[0] for r in runs]
    digests = {r[2] for r in runs}
    print(
        f"{'nodes':>6} {'profiles':>8} {'pods':>6} {'placed':>6} {'ms/pod (median)':>16} "
        f"{'runs (ms/pod)':>24}  placements"
    )
    print(
        f"{args.nodes:>6} {args.profiles:>8} {args.pods:>6} {runs[0][1]:>6} {statistics.median(per_pod) * 1e3:>16.3f} "
        f"{' '.join(f'{p * 1e3:.3f}' for p in per_pod):>24}  {'/'.join(sorted(digests))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
