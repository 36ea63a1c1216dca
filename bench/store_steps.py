"""Redis's CPU per pod for each store step of a pod's life, in isolation: the queue's intake
(`put_pods`), the cycle's attempt (`reserve_attempts`), the binder's bind (`bind_many`), the
watcher's settle (`pod_placements`), the cycle's full read of its table (`load_snapshot`, every
node with its pods, decoded afresh: its cost per pod is one read of the whole table spread over
the pods) and the agent's start (`admission_views`, `start_pods`), on an embedded Valkey with
nothing else running.

    python bench/store_steps.py                     # 5,000 nodes, 10,240 pods, 3 runs
    python bench/store_steps.py --nodes 1000 --pods 4096 --runs 5
    python bench/store_steps.py --instructions --nodes 1000 --pods 2048 --runs 1
    python bench/store_steps.py --workload basic    # scheduler_perf's SchedulingBasic pods and nodes

The pods are `kubus bench`'s mixed workload on its simulated nodes (``--workload basic``:
scheduler_perf's SchedulingBasic pods on its 4-cpu nodes, bench/head_to_head.py's), placed in process by
`Scheduler.schedule` (kube's default profile plus GPUFit: `bench/cycle_batches.py`'s), then
driven through the store in batches of 256, as the services drive them. Per step it reports the
server's CPU per pod (from /proc: the scripts, and the commands' reading, parsing and replies
around them), the time Redis counts inside the scripts (INFO commandstats, EVALSHA), and the
client's CPU per pod (this process: redis-py packing the commands and reading the replies).

Under `kubus bench` the same scripts take two to four times as long in SLOWLOG
(`bench/redis_scripts.py`): the server is descheduled on a busy machine. Even alone, the CPU
times here move by a quarter from run to run on a shared machine. ``--instructions`` runs the
server under valgrind's callgrind instead and counts the instructions it executes per pod in
each step (about 50 times slower): the same from run to run, whatever else the machine does,
so two versions of a script compare in one run each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import yaml
from cycle_batches import bench_scheduler  # this folder's: run as `python bench/store_steps.py`
from head_to_head import basic_pod  # which puts tests/ on the path, for kube_support
from kube_support import node_manifest

from kubus.api.manifests import parse_node, parse_pod
from kubus.cli.bench import cpu_seconds
from kubus.cli.embedded import EmbeddedServers, free_port, valkey_server_binary
from kubus.cli.workload import NODE_TEMPLATE, mixed_workload
from kubus.core import codec
from kubus.framework.scheduling import ScheduleResult
from kubus.gpu_agent.simulation import simulated_nodes
from kubus.plugins.gpu_fit import GPUFit
from kubus.store import ClusterState, PodStart
from kubus.store.cluster_state import Binding
from kubus.store.records import EventType, PodEvent, PodRecord, Reservation

BATCH = 256
PROFILE = "default-scheduler"


def _placements(
    node_count: int, pod_count: int, workload: str
) -> tuple[list[Any], list[tuple[ScheduleResult, bytes]], str]:
    """The nodes, the pods placed on them (every one: the workload fits) with their manifests,
    and GPUFit's mode."""
    basic = workload == "basic"
    # scheduler_perf's node (the head to head's): 4 cpu, 32Gi, 110 pods
    template = node_manifest("node", cpu="4", memory="32Gi") if basic else yaml.safe_load(NODE_TEMPLATE)
    nodes = simulated_nodes(parse_node(template), node_count)
    scheduler = bench_scheduler(nodes, "numpy")
    pods, manifests = [], {}
    workload_pods = [basic_pod(f"pod-{i}") for i in range(pod_count)] if basic else mixed_workload(pod_count)
    for i, manifest in enumerate(workload_pods):
        manifest["metadata"]["uid"] = f"uid-{i}"
        pods.append(parse_pod(manifest))
        manifests[f"uid-{i}"] = codec.dumps(manifest)
    results = [r for start in range(0, len(pods), BATCH) for r in scheduler.schedule(pods[start : start + BATCH])]
    if any(r.node is None for r in results):
        raise SystemExit("the workload did not fit the nodes: use more nodes or fewer pods")
    gpu_fit = next((p for p in scheduler.framework.filter if isinstance(p, GPUFit)), None)
    return nodes, [(r, manifests[r.pod.metadata.uid]) for r in results], gpu_fit.mode if gpu_fit is not None else ""


class _Callgrind:
    """A Valkey under valgrind's callgrind, set up as the embedded one (append-only file,
    fsync every second), counting the instructions it executes between `begin` and `end`."""

    def __init__(self, directory: Path) -> None:
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            raise SystemExit("--instructions needs valgrind (Debian: apt install valgrind)")
        self.directory = directory
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={directory}/cg.out",
             str(valkey_server_binary()), "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(directory),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    async def wait_ready(self) -> None:
        client = aioredis.from_url(self.url)
        try:
            for _ in range(300):  # valgrind takes seconds to start the server
                try:
                    await client.ping()
                    return
                except (ConnectionError, OSError, aioredis.ConnectionError):
                    await asyncio.sleep(0.2)
            raise SystemExit("valkey-server under valgrind did not answer within 60 s")
        finally:
            await client.aclose()

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True)

    def begin(self) -> None:
        self._control("-z")
        self._control("-i", "on")

    def end(self) -> int:
        """Instructions executed since `begin`."""
        self._control("-i", "off")
        self._control("-d")
        dumps = [f for f in os.listdir(self.directory) if f.startswith("cg.out.")]
        newest = max(dumps, key=lambda f: int(f.rsplit(".", 1)[1]))
        with open(self.directory / newest) as dump:
            return next(int(line.split()[1]) for line in dump if line.startswith("totals:"))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


class _Meter:
    """Per step: the server's CPU (or instructions, under callgrind), Redis's EVALSHA time and
    this process's CPU."""

    def __init__(self, redis: aioredis.Redis, server_pid: int, pods: int, callgrind: _Callgrind | None) -> None:
        self.redis, self.server_pid, self.pods, self.callgrind = redis, server_pid, pods, callgrind
        self.steps: dict[str, tuple[float, float, float]] = {}
        """Per step, per pod: server CPU (µs; thousands of instructions under callgrind), Redis
        script time (µs) and client CPU (µs)."""

    async def step(
        self, name: str, items: Sequence[Any], call: Callable[[Sequence[Any]], Awaitable[Sequence[Any]]]
    ) -> list[Any]:
        """``call`` over ``items`` in batches, as the services call the store; its results."""
        await self.redis.config_resetstat()
        if self.callgrind is not None:
            self.callgrind.begin()
        server, client = cpu_seconds(self.server_pid) or 0.0, time.process_time()
        out: list[Any] = []
        for start in range(0, len(items), BATCH):
            out += await call(items[start : start + BATCH])
        client = time.process_time() - client
        server = ((cpu_seconds(self.server_pid) or 0.0) - server) * 1e6
        if self.callgrind is not None:
            server = self.callgrind.end() / 1000
        stats = await self.redis.info("commandstats")
        scripts = stats.get("cmdstat_evalsha", {}).get("usec", 0) / 1e6
        self.steps[name] = (server / self.pods, scripts / self.pods * 1e6, client / self.pods * 1e6)
        return out


async def _run(
    url: str,
    server_pid: int,
    nodes: list[Any],
    placed: list[tuple[ScheduleResult, bytes]],
    gpu_pick: str,
    callgrind: _Callgrind | None = None,
) -> dict[str, tuple[float, float, float]]:
    redis = aioredis.from_url(url)
    try:
        await redis.flushall()
        store = ClusterState(redis)
        for node in nodes:
            await store.put_node(node)
        meter = _Meter(redis, server_pid, len(placed), callgrind)
        now = time.time()
        event = PodEvent(now, EventType.NORMAL, "Scheduled", "bench", "bench")
        pods = [(r.pod_info, r.node or "", manifest) for r, manifest in placed if r.pod_info is not None]

        records = [PodRecord.of(info.pod, manifest, now=now) for info, _, manifest in pods]
        stored = await meter.step("put_pods (queue)", records, store.put_pods)

        reservations = [
            Reservation.of(info, node, profile=PROFILE, attempt="", gpu_pick=gpu_pick) for info, node, _ in pods
        ]
        attempts = await meter.step(
            "reserve_attempts (cycle)", reservations, lambda chunk: store.reserve_attempts(PROFILE, chunk)
        )

        bindings = [
            Binding(info.pod.metadata.uid, node, attempt.write.version, info.gpu_devices, PROFILE, event)
            for (info, node, _), attempt in zip(pods, attempts, strict=True)
        ]
        bound = await meter.step("bind_many (binder)", bindings, store.bind_many)
        placements = await meter.step("pod_placements (watcher)", [b.uid for b in bindings], store.pod_placements)
        # The cycle's full read of its table (a new term, each resync): every node with its pods.
        names = [node.name for node in nodes]
        table = await meter.step("load_snapshot (cycle, every node)", names, store.load_snapshot)

        async def admit(chunk: Sequence[Binding]) -> list[Any]:
            await store.admission_views([(b.node, b.uid) for b in chunk])
            return await store.start_pods([PodStart(b.uid, b.node, str(b.attempt), event, now + 60) for b in chunk])

        started = await meter.step("admission_views + start_pods (agent)", bindings, admit)
        # The numbers are of pods that went all the way.
        if not (
            all(stored)
            and all(a.ok for a in attempts)
            and all(b.write is not None and b.write.ok for b in bound)
            and all(p is not None and p[1] == b.node for p, b in zip(placements, bindings, strict=True))
            and all(s.started for s in started)
            and sum(len(reservations) for _, reservations in table) == len(bindings)
        ):
            raise SystemExit("a step refused pods: the numbers would not be of the full path")
        return meter.steps
    finally:
        await redis.aclose()


async def _main(args: argparse.Namespace) -> int:
    nodes, placed, gpu_pick = _placements(args.nodes, args.pods, args.workload)
    runs: list[dict[str, tuple[float, float, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.instructions:
            callgrind = _Callgrind(Path(tmp))
            try:
                await callgrind.wait_ready()
                for _ in range(args.runs):
                    runs.append(await _run(callgrind.url, callgrind.proc.pid, nodes, placed, gpu_pick, callgrind))
            finally:
                callgrind.stop()
        else:
            servers = EmbeddedServers(Path(tmp))
            await servers.start()
            try:
                pid = servers.pids()["valkey-server"]
                for _ in range(args.runs):
                    runs.append(await _run(servers.redis_url, pid, nodes, placed, gpu_pick))
            finally:
                await servers.stop()
    print(f"{args.nodes} nodes, {len(placed)} pods ({args.workload}), median of {args.runs} runs, per pod")
    if args.instructions:
        print(f"{'step':<40} {'server, thousands of instructions':>34}")
        for step in runs[0]:
            print(f"{step:<40} {statistics.median(run[step][0] for run in runs):>34.1f}")
        return 0
    print(f"{'step':<40} {'server CPU µs':>14} {'in scripts µs':>14} {'client CPU µs':>14}")
    for step in runs[0]:
        server, scripts, client = (statistics.median(run[step][i] for run in runs) for i in range(3))
        print(f"{step:<40} {server:>14.1f} {scripts:>14.1f} {client:>14.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10240)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--workload", choices=["mixed", "basic"], default="mixed",
        help="kubus bench's mixed pods on its GPU nodes (default), or scheduler_perf's SchedulingBasic",
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true", help="count the server's instructions under callgrind (needs valgrind)"
    )
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
