"""Cluster mode's costs against a real kube-apiserver (../shared/kube, as the tests start it):

1. the watcher's CPU and memory for the nodes and pods it watches: N Nodes created, then P pods
   of a kubus profile created before kubus starts (the initial list), scheduled and bound; the
   watcher's CPU seconds and peak memory (VmHWM), per 1,000 nodes and per 10,000 pods;
2. the time from a pod's creation to its binding at a steady offered rate (``--rate`` pods/s for
   ``--seconds``): each pod's create call timed, its binding seen on a watch of its namespace;
   p50, p90, p99 and max.

kubus runs as `kubus up --kubeconfig` runs it: embedded NATS and Redis, every service a process.

    python bench/cluster_mode.py [--nodes 1000] [--pods 10000] [--rate 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube_support import KubeApiServer, kube_binaries, make_nodes, pod_manifest

from kubus.cli.bench import cpu_seconds, peak_memory
from kubus.cli.up import start_cluster, wait_ready
from kubus.core.settings import redis_client
from kubus.kubeapi import NAMESPACES, PODS, EventType, KubeClient, Reflector, Replaced, WatchEvent
from kubus.store import ClusterState

PROFILE = "kubus"


def _config(directory: Path) -> str:
    path = directory / "scheduler-config.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"profiles:\n- schedulerName: {PROFILE}\n"
    )
    return str(path)


async def _create(client: KubeClient, namespace: str, names: list[str], concurrency: int = 32) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        async with slots:
            await client.create(PODS, pod_manifest(name, cpu="100m", scheduler=PROFILE), namespace=namespace)

    await asyncio.gather(*map(one, names))


async def _bound_count(client: KubeClient, namespace: str) -> int:
    listed = await client.list(PODS, namespace=namespace)
    return sum(1 for p in listed.items if p["spec"].get("nodeName"))


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as scratch, KubeApiServer(kube_binaries(), Path(scratch) / "kube") as server:
        tmp = args.keep or scratch
        directory = Path(tmp) / "kubus"
        directory.mkdir(parents=True, exist_ok=True)
        async with server.client(qps=2000, burst=4000) as client:
            names = [f"node-{i:05d}" for i in range(args.nodes)]
            t0 = time.monotonic()
            await make_nodes(client, names)
            print(f"{args.nodes} nodes created in {time.monotonic() - t0:.1f}s", flush=True)
            await client.create(NAMESPACES, {"metadata": {"name": "bench"}})
            t0 = time.monotonic()
            await _create(client, "bench", [f"p{i:06d}" for i in range(args.pods)])
            print(f"{args.pods} pods created in {time.monotonic() - t0:.1f}s", flush=True)

            started = time.time()
            cluster = await start_cluster(
                directory, config=_config(directory), profiles=(PROFILE,), nodes=0, node_template=None,
                kubeconfig=str(server.kubeconfig),
            )  # fmt: skip
            try:
                store = ClusterState(redis_client(cluster.settings))
                failed = await wait_ready(cluster, store, timeout=120, since=started)
                assert not failed, [s.name for s in failed]
                watcher = cluster.group["watcher"]
                assert watcher.pid is not None
                t0 = time.monotonic()
                while await _bound_count(client, "bench") < args.pods:
                    await asyncio.sleep(1.0)
                took = time.monotonic() - t0
                cpu = {s.name: cpu_seconds(s.pid) if s.pid else None for s in cluster.group}
                memory = peak_memory(watcher.pid) or 0
                print(f"\n{args.pods} pods bound in {took:.1f}s ({args.pods / took:.0f} pods/s)")
                print("| process | CPU s | per 1,000 nodes + 10,000 pods |")
                print("|---|---|---|")
                scale = (args.nodes / 1000 + args.pods / 10_000) or 1
                for name, seconds in cpu.items():
                    print(f"| {name} | {seconds or 0:.2f} | {(seconds or 0) / scale:.2f} |")
                print(f"\nwatcher peak memory: {memory / 2**20:.0f} MiB "
                      f"({args.nodes} nodes, {args.pods} pods watched)")  # fmt: skip

                latencies = await _steady(client, args.rate, args.seconds)
                q = statistics.quantiles(latencies, n=100)
                print(f"\ncreation -> binding at {args.rate} pods/s for {args.seconds}s ({len(latencies)} pods):")
                print("| p50 | p90 | p99 | max |")
                print("|---|---|---|---|")
                print(f"| {q[49] * 1000:.0f} ms | {q[89] * 1000:.0f} ms | {q[98] * 1000:.0f} ms | "
                      f"{max(latencies) * 1000:.0f} ms |")  # fmt: skip
                await store.redis.aclose()
            finally:
                await cluster.stop()
    return 0


async def _steady(client: KubeClient, rate: float, seconds: float) -> list[float]:
    """Create ``rate`` pods a second for ``seconds`` in a fresh namespace; each one's seconds
    from its create call to the watch event that shows it bound."""
    namespace = "steady"
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    total = int(rate * seconds)
    done = asyncio.Event()

    async def watch() -> None:
        # A reflector, not a bare watch: the apiserver may end a watch, and a pod's binding
        # seen late (after a resume) is still seen.
        async with Reflector(client, PODS, namespace=namespace) as pods:
            async for event in pods:
                objects = event.objects if isinstance(event, Replaced) else [event.object]
                if isinstance(event, WatchEvent) and event.type is EventType.BOOKMARK:
                    continue
                now = time.monotonic()
                for obj in objects:
                    name = obj["metadata"]["name"]
                    if obj["spec"].get("nodeName") and name not in bound:
                        bound[name] = now
                if len(bound) >= total:
                    done.set()
                    return

    watching = asyncio.create_task(watch())
    start = time.monotonic()
    pending: set[asyncio.Task[None]] = set()

    async def one(name: str) -> None:
        created[name] = time.monotonic()
        await client.create(PODS, pod_manifest(name, cpu="10m", scheduler=PROFILE), namespace=namespace)

    for i in range(total):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        task = asyncio.create_task(one(f"s{i:06d}"))
        pending.add(task)
        task.add_done_callback(pending.discard)
    try:
        await asyncio.wait_for(done.wait(), timeout=seconds + 120)
    except TimeoutError:
        print(f"only {len(bound)} of {total} pods bound within {seconds + 120:g}s", flush=True)
    watching.cancel()
    return [bound[n] - created[n] for n in bound]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--keep", metavar="DIR", help="kubus's data and logs here (kept), not in a scratch folder")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
