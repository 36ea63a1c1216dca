"""Takeover of a profile's scheduling cycle at scale: the time from `kill -9` of the leading cycle
to the next pod bound, with a warm standby (its node table kept current while it waits: the
default) and a cold one (``--cold-standby``: the table loaded on taking the lease: before).

A cluster as `kubus bench` runs it (every service its own process, N simulated nodes from the
gpu-agent, pods that finish at once) plus a standby queue and a standby cycle
(`kubus up --standby`). Pods flow at a steady rate. Each run readies the standby in the run's
mode (warm: restarted with a warm table and waited for until loaded; cold: restarted with
``--cold-standby``), SIGKILLs the leading cycle, and measures: kill -> the standby holds the
lease (the lease's ttl, 5 s by default), lease -> the first pod bound after it (the takeover's
own work), and kill -> that pod bound. The killed cycle is started again as the next standby.
Modes alternate, run after run, and the medians are reported (the machine may be shared).

    python bench/takeover.py                         # 50,000 nodes, 3 runs of each mode
    python bench/takeover.py --nodes 2000 --runs 1   # a smoke run
    python bench/takeover.py --nats URL --redis URL  # empty external servers instead of embedded ones
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubus.bus.messages import ClusterEvent, decode, expand
from kubus.bus.subjects import EventKind, event_filter, with_batches
from kubus.cli.cluster import pod_manifests, submit
from kubus.cli.connect import open_bus, open_store
from kubus.cli.processes import ServiceProcess
from kubus.cli.up import Cluster, check_template, start_cluster, wait_ready
from kubus.cli.workload import gpu_scheduler_config
from kubus.store import ClusterState, cycle_lease

PROFILE = "default-scheduler"
COLD = "--cold-standby"
KEYS = ("kill_to_lease_s", "lease_to_bound_s", "kill_to_bound_s")


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"t-{i:07d}", "namespace": "takeover"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }


async def _holder_pid(store: ClusterState) -> int | None:
    lease = await store.get_lease(cycle_lease(PROFILE))
    return None if lease is None else int(lease.holder.split("/")[1])


async def _cycles(cluster: Cluster, store: ClusterState) -> tuple[ServiceProcess, ServiceProcess]:
    """(leading cycle, standby cycle)."""
    pid = await _holder_pid(store)
    cycles = cluster.group.by_role("cycle")
    [leading] = [c for c in cycles if c.pid == pid]
    [standby] = [c for c in cycles if c is not leading]
    return leading, standby


async def _ready_standby(standby: ServiceProcess, mode: str, settle: float) -> None:
    """Restart the standby in ``mode`` and wait until it is ready to take over (warm: its table loaded)."""
    args = tuple(a for a in standby.spec.args if a != COLD) + ((COLD,) if mode == "cold" else ())
    await standby.stop()
    standby.spec = dataclasses.replace(standby.spec, args=args)
    standby.start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        tail = standby.log_tail(400)
        if standby.started() and (mode == "cold" or "node table loaded" in tail):
            break
        if not standby.running:
            raise SystemExit(f"the standby cycle exited:\n{tail}")
        await asyncio.sleep(0.2)
    else:
        raise SystemExit("the standby cycle was not ready after 600 s")
    await asyncio.sleep(settle)  # let the restart's own load settle, as a standby that waited long


async def _run(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    config = directory / "scheduler-config.yaml"
    config.write_text(gpu_scheduler_config([PROFILE]))
    template = check_template(None, directory, args.nodes)
    started = time.time()
    cluster = await start_cluster(
        directory,
        config=str(config),
        profiles=(PROFILE,),
        nodes=args.nodes,
        node_template=template,
        nats=args.nats,
        redis=args.redis,
        pod_duration=0.0,
        standby=True,
    )
    results: list[dict[str, Any]] = []
    try:
        async with open_store(cluster.settings) as store, open_bus(cluster.settings, "takeover-bench") as (nc, js):
            failed = await wait_ready(cluster, store, timeout=120 + args.nodes / 50, since=started)
            if failed:
                raise SystemExit(f"services exited: {[s.name for s in failed]}")
            print(f"ready in {time.time() - started:.1f}s: {args.nodes} nodes", flush=True)
            bound_at: list[float] = []

            async def on_bound(msg: Any) -> None:
                # pod.bound, or pods.bound: several pods bound at once
                bound_at.extend([time.monotonic()] * len(expand(decode(ClusterEvent, msg.data))))

            for kind in with_batches({EventKind.POD_BOUND.value}):
                await nc.subscribe(event_filter(kind), cb=on_bound)
            stop = asyncio.Event()

            async def flow() -> None:
                i, step = 0, 0.1
                per_step = max(1, round(args.rate * step))
                while not stop.is_set():
                    await submit(js, pod_manifests([_pod(n) for n in range(i, i + per_step)]))
                    i += per_step
                    await asyncio.sleep(step)

            flowing = asyncio.create_task(flow())
            try:
                for run in range(2 * args.runs):
                    mode = ("warm", "cold")[run % 2]
                    leading, standby = await _cycles(cluster, store)
                    await _ready_standby(standby, mode, args.settle)
                    count = len(bound_at)
                    while len(bound_at) < count + 20:  # the leader schedules the flow
                        await asyncio.sleep(0.05)
                    killed = time.monotonic()
                    leading.kill()
                    await leading.wait(10)
                    while await _holder_pid(store) != standby.pid:
                        await asyncio.sleep(0.01)
                    won = time.monotonic()
                    while not [t for t in bound_at if t > won]:
                        if time.monotonic() - won > 120:
                            raise SystemExit(f"nothing bound 120 s after the takeover:\n{standby.log_tail(30)}")
                        await asyncio.sleep(0.005)
                    first = min(t for t in bound_at if t > won)
                    row = {
                        "mode": mode,
                        "kill_to_lease_s": round(won - killed, 3),
                        "lease_to_bound_s": round(first - won, 3),
                        "kill_to_bound_s": round(first - killed, 3),
                    }
                    results.append(row)
                    print(row, flush=True)
                    leading.start()  # the next standby
            finally:
                stop.set()
                await flowing
    finally:
        await cluster.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each mode (default 3)")
    parser.add_argument("--rate", type=float, default=50.0, help="pods submitted per second (default 50)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds a readied standby waits (default 5)")
    parser.add_argument("--nats", help="external NATS URL (with --redis); default: embedded servers")
    parser.add_argument("--redis", help="external Redis URL (with --nats)")
    args = parser.parse_args()
    if (args.nats is None) != (args.redis is None):
        parser.error("give both --nats and --redis, or neither")
    directory = Path(tempfile.mkdtemp(prefix="kubus-takeover-"))
    try:
        results = asyncio.run(_run(args, directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\n{args.nodes} nodes, {args.runs} runs of each mode, medians (seconds):")
    print(f"{'mode':6} {'kill->lease':>12} {'lease->bound':>13} {'kill->bound':>12}")
    for mode in ("cold", "warm"):
        rows = [r for r in results if r["mode"] == mode]
        if rows:
            lease, work, total = (statistics.median(r[k] for r in rows) for k in KEYS)
            print(f"{mode:6} {lease:12.2f} {work:13.2f} {total:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
