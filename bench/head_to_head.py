"""kubus against kube-scheduler, one after the other on the same kube-apiserver.

For each workload, a fresh etcd + kube-apiserver (../shared/kube's binaries, as the tests start
them; ``--kube-bin`` for others) on loopback, N Nodes in scheduler_perf's node shape (4 cpu, 32Gi,
110 pods; kubernetes.io/hostname and zone labels; Ready, untainted), then, for each round and each
scheduler in turn, in namespaces of the run's own:

1. the init pods (the constraint workloads' first half) and, for SchedulingBasic, the measured
   pods are created before the scheduler starts; the scheduler starts; for the constraint
   workloads the measured pods are created once the init pods are bound, while it runs (as
   scheduler_perf does);
2. from a watch of every pod: the measured pods bound per second, from the first bind to the last
   (scheduler_perf's SchedulingThroughput: the average and the per-second samples), the seconds
   from the scheduler's start to its first bind, and the CPU seconds of every process (kube-apiserver,
   etcd, the scheduler's processes) over that phase;
3. SchedulingBasic also measures creation-to-binding latency at a steady ``--rate``;
4. the placements are checked: every pod bound once, no node over its allocatable cpu, memory or
   pods, and the workload's constraint (anti-affinity: one green pod per node; spreading: zone
   skew within maxSkew; affinity: a matching pod in the zone) held;
5. the scheduler stops and the run's pods are deleted.

kube-scheduler: ../shared/kube/kube-scheduler (v1.28.4), its default profile, leader election
off, clientConnection qps 5000 / burst 5000 (scheduler_perf's client; the defaults of 50/100 bound
the binding rate), percentageOfNodesToScore unset (kube's adaptive default: 10% at 5,000 nodes).
kubus: `kubus up --kubeconfig` as a user runs it (embedded NATS and Valkey, a watcher, the queue,
one cycle for profile "kubus" with kube's default plugins, ``--binders`` binders), the cycle's
batch size ``--batch-size`` (`BATCH_SIZE`, 512), the same clientConnection qps 5000 / burst
5000 (its watcher's and binders' pace). Every node is filtered and scored by kubus (its kernels
run over all). kubus's sources are byte-compiled first, as installing its wheel compiles them
(`byte_compile`).

A last check places a few constrained pods on a handful of unequal nodes, one pod at a time,
with each scheduler, and compares the node each chose per pod (where the scores have one best
node, both must agree).

    python bench/head_to_head.py                          # SchedulingBasic, 5,000 nodes, 10,000 pods, best of 3
    python bench/head_to_head.py --workloads all          # + the constraint workloads and PreemptionBasic
    python bench/head_to_head.py --quick                  # 500 nodes, 1,000 pods, one round: a smoke run
    python bench/head_to_head.py -o json > result.json
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube_support import KubeApiServer, kube_binaries, make_nodes

from kubus.api.quantity import parse_quantity
from kubus.cli.bench import cpu_seconds
from kubus.cli.up import Cluster, start_cluster, wait_ready
from kubus.cli.workload import HOSTNAME_LABEL, POD_CONSTRAINT_WORKLOADS, ZONE_LABEL, pod_constraint_pods
from kubus.core.settings import redis_client
from kubus.kubeapi import (
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    EventType,
    KubeAPIError,
    KubeClient,
    Reflector,
    Replaced,
    WatchEvent,
)
from kubus.store import ClusterState

KUBE_QPS = 5000
KUBE_BURST = 5000
KUBUS_PROFILE = "kubus"
BATCH_SIZE = 512
"""kubus's cycle batch size here (its own default is 256): in four alternating pairs of
SchedulingBasic rounds, kubus alone, 512 took 8-22% less CPU per pod than 256, nearly every
process less, the apiserver too (fewer, fuller bursts down the line); 1024, in one round, took
more than either."""
LOW, HIGH = "h2h-low", "h2h-high"
"""PreemptionBasic's priority classes (values 0 and 10), set on its pods by name as a user would."""

Manifest = dict[str, Any]


# -- workloads -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One scheduler_perf workload at this run's scale: pods as manifests of the default scheduler
    (`for_scheduler` renames them and their namespaces per run)."""

    name: str
    nodes: int
    zones: tuple[str, ...]
    init: list[Manifest]
    measured: list[Manifest]
    created_before_start: bool
    """SchedulingBasic: the measured pods wait for the scheduler; else they come while it runs."""
    steady: bool = False

    def namespaces(self) -> set[str]:
        return {p["metadata"]["namespace"] for p in (*self.init, *self.measured)}


def basic_pod(name: str) -> Manifest:
    """scheduler_perf's pod-default.yaml: one pause container, 100m and 500Mi requested (= limits)."""
    resources = {"cpu": "100m", "memory": "500Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "basic"},
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.9",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": dict(resources), "limits": dict(resources)},
                }
            ]
        },
    }


def workloads(names: Sequence[str], *, nodes: int | None, pods: int, scale: float) -> list[Workload]:
    out = []
    for name in names:
        if name == "basic":
            n = nodes or 5000
            out.append(Workload("SchedulingBasic", n, ("zone-a", "zone-b", "zone-c"), [],
                                [basic_pod(f"pod-{i:06d}") for i in range(pods)], True, steady=True))  # fmt: skip
            continue
        w = POD_CONSTRAINT_WORKLOADS[name]
        n = nodes or int(w.nodes * scale)
        init, measured = pod_constraint_pods(w, max(1, int(w.init_pods * scale)), max(1, int(w.measured_pods * scale)))
        if name == "preemption-basic":
            # scheduler_perf's pod-low-priority.yaml: terminationGracePeriodSeconds 0, so a
            # victim goes at once (no kubelet here ends a grace period); priorities by class.
            for pod, cls in [*((p, LOW) for p in init), *((p, HIGH) for p in measured)]:
                pod["spec"].pop("priority", None)
                pod["spec"]["priorityClassName"] = cls
                pod["spec"]["terminationGracePeriodSeconds"] = 0
        out.append(Workload(w.kube_name, n, w.zones or ("zone-a",), init, measured, False))
    return out


def for_scheduler(pod: Manifest, scheduler: str, prefix: str) -> Manifest:
    """``pod`` for ``scheduler``, its namespace (and the namespaces its affinity terms name)
    prefixed with the run's ``prefix``."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = f"{prefix}-{pod['metadata']['namespace']}"
    spec = pod["spec"]
    spec.pop("schedulerName", None)
    if scheduler != "default-scheduler":
        spec["schedulerName"] = scheduler
    for kind in ("podAffinity", "podAntiAffinity"):
        for term in ((spec.get("affinity") or {}).get(kind) or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []:
            term["namespaces"] = [f"{prefix}-{n}" for n in term.get("namespaces") or []]
    return pod


# -- the schedulers --------------------------------------------------------------------------------


class Scheduler(Protocol):
    label: str
    scheduler_name: str

    async def start(self) -> None: ...
    def pids(self) -> dict[str, int]: ...
    async def stop(self) -> None: ...


class KubeScheduler:
    """../shared/kube's kube-scheduler, as a process of its own."""

    label = "kube-scheduler"
    scheduler_name = "default-scheduler"

    def __init__(self, binary: Path, server: KubeApiServer, workdir: Path) -> None:
        self.binary = binary
        self.server = server
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kube-scheduler.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {self.server.kubeconfig}\n  qps: {KUBE_QPS}\n  burst: {KUBE_BURST}\n"
            "leaderElection:\n  leaderElect: false\n"
        )
        log = open(self.workdir / "kube-scheduler.log", "ab")  # noqa: SIM115 (the child holds it)
        try:
            self.process = subprocess.Popen(
                [str(self.binary), f"--config={config}", "--secure-port=0", "-v=1"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()

    def pids(self) -> dict[str, int]:
        return {"kube-scheduler": self.process.pid} if self.process else {}

    async def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            await asyncio.to_thread(self.process.wait, 30)
        self.process = None


class Kubus:
    """`kubus up --kubeconfig`: embedded NATS and Valkey, watcher, queue, cycle, binders."""

    label = "kubus"
    scheduler_name = KUBUS_PROFILE

    def __init__(self, server: KubeApiServer, workdir: Path, *, binders: int, batch_size: int | None,
                 fork: bool = True) -> None:  # fmt: skip
        self.server = server
        self.fork = fork
        self.workdir = workdir
        self.binders = binders
        self.batch_size = batch_size
        self.cluster: Cluster | None = None

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "scheduler-config.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  qps: {KUBE_QPS}\n  burst: {KUBE_BURST}\n"
            f"profiles:\n- schedulerName: {KUBUS_PROFILE}\n"
        )
        started = time.time()
        self.cluster = await start_cluster(
            self.workdir, config=str(config), profiles=(KUBUS_PROFILE,), nodes=0, node_template=None,
            binders=self.binders, batch_size=self.batch_size, kubeconfig=str(self.server.kubeconfig), fork=self.fork,
        )  # fmt: skip
        store = ClusterState(redis_client(self.cluster.settings))
        try:
            failed = await wait_ready(self.cluster, store, timeout=180, since=started)
        finally:
            await store.redis.aclose()
        if failed:
            raise RuntimeError(f"kubus services exited: {[s.name for s in failed]} (logs in {self.workdir}/logs)")

    def pids(self) -> dict[str, int]:
        if self.cluster is None:
            return {}
        pids = {s.name: s.pid for s in self.cluster.group if s.pid is not None}
        forks = self.cluster.group.forks
        if forks is not None and forks.pid is not None:
            pids["forkserver"] = forks.pid  # the services' imports are its CPU
        if self.cluster.servers is not None:
            pids.update(self.cluster.servers.pids())
        return pids

    async def stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
        self.cluster = None


# -- watching binds --------------------------------------------------------------------------------


@dataclass
class Binds:
    """What a watch of every pod saw: when each pod was first seen bound, to which node, pods
    whose node changed (bound twice), and pods a scheduler said it could not place (condition
    PodScheduled False, reason Unschedulable)."""

    node: dict[str, str] = field(default_factory=dict)
    at: dict[str, float] = field(default_factory=dict)
    rebound: list[str] = field(default_factory=list)
    unschedulable: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def see(self, pod: Manifest, now: float) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        node = pod["spec"].get("nodeName")
        if not node:
            conditions = (pod.get("status") or {}).get("conditions") or ()
            if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions):
                self.unschedulable.add(key)
                self.changed.set()
            return
        seen = self.node.get(key)
        if seen is None:
            self.node[key], self.at[key] = node, now
            self.changed.set()
        elif seen != node:
            self.rebound.append(f"{key}: {seen} then {node}")

    def count(self, keys: Iterable[str]) -> int:
        return sum(1 for k in keys if k in self.at)


async def watch_binds(client: KubeClient, binds: Binds, synced: asyncio.Event) -> None:
    async with Reflector(client, PODS) as pods:
        async for event in pods:
            now = time.monotonic()
            if isinstance(event, Replaced):
                for obj in event.objects:
                    binds.see(obj, now)
                synced.set()
            elif isinstance(event, WatchEvent) and event.type in (EventType.ADDED, EventType.MODIFIED):
                binds.see(event.object, now)


async def wait_bound(
    binds: Binds, keys: list[str], timeout: float, what: str, *, or_unschedulable: bool = False
) -> None:
    """Until every pod of ``keys`` is bound (or said unschedulable, with ``or_unschedulable``);
    TimeoutError after ``timeout`` seconds, or 120 s without one more."""
    deadline = time.monotonic() + timeout
    last, last_change = -1, time.monotonic()

    def done() -> int:
        n = binds.count(keys)
        return n + sum(1 for k in keys if k in binds.unschedulable and k not in binds.at) if or_unschedulable else n

    while (n := done()) < len(keys):
        if n != last:
            last, last_change = n, time.monotonic()
        if time.monotonic() > deadline or time.monotonic() - last_change > 120:
            raise TimeoutError(f"{what}: {n} of {len(keys)} pods bound after {timeout:g}s")
        binds.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(binds.changed.wait(), 1.0)


# -- the API ---------------------------------------------------------------------------------------


def key_of(pod: Manifest) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


async def create_pods(client: KubeClient, pods: list[Manifest], concurrency: int = 64) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(pod: Manifest) -> None:
        async with slots:
            await client.create(PODS, pod, namespace=pod["metadata"]["namespace"])

    await asyncio.gather(*map(one, pods))


async def delete_pods(client: KubeClient, namespaces: Iterable[str], concurrency: int = 64) -> None:
    slots = asyncio.Semaphore(concurrency)

    async def one(namespace: str, name: str) -> None:
        async with slots:
            with contextlib.suppress(KubeAPIError):
                await client.delete(PODS, name, namespace=namespace, grace_period_seconds=0)

    for namespace in namespaces:
        listed = await client.list(PODS, namespace=namespace)
        await asyncio.gather(*(one(namespace, p["metadata"]["name"]) for p in listed.items))


def apiserver_requests(server: KubeApiServer) -> Counter[str]:
    """The apiserver's requests so far (apiserver_request_total), counted by "VERB resource[/sub]"."""
    counts: Counter[str] = Counter()
    for line in server.metrics().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[f"{labels.get('verb', '?')} {what}"] += int(float(line.rsplit(" ", 1)[1]))
    return counts


async def events_written(server: KubeApiServer, since: Counter[str], count: int, timeout: float = 120.0) -> None:
    """Return once ``count`` events were created since the request counts ``since`` (or after
    ``timeout`` seconds): a scheduler that writes its Scheduled events in the background is done
    with its pods only then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        written = await asyncio.to_thread(apiserver_requests, server)
        if written["POST events"] - since["POST events"] >= count:
            return
        await asyncio.sleep(0.2)


def start_profilers(scheduler: Scheduler, directory: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy on each of the scheduler's Python processes (collapsed stacks, DIR/<name>.txt)."""
    directory.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    python = {
        n: pid
        for n, pid in scheduler.pids().items()
        if n not in ("nats-server", "valkey-server", "kube-scheduler", "forkserver")
    }
    return [
        subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--native",
                          "-o", str(directory / f"{name}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, pid in python.items()
    ]  # fmt: skip


def stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for process in profilers:
        process.send_signal(signal.SIGINT)
    for process in profilers:
        process.wait(30)


# -- checks ----------------------------------------------------------------------------------------


def _requests(pod: Manifest) -> tuple[float, float]:
    cpu = memory = 0.0
    for c in pod["spec"].get("containers") or []:
        requests = (c.get("resources") or {}).get("requests") or {}
        cpu += float(parse_quantity(requests.get("cpu", "0")))
        memory += float(parse_quantity(requests.get("memory", "0")))
    return cpu, memory


def check(workload: str, pods: list[Manifest], nodes: list[Manifest], expected: set[str]) -> list[str]:
    """What the placements break: pods not bound, nodes overcommitted, the workload's constraint."""
    problems: list[str] = []
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    unbound = expected - {key_of(p) for p in live if p["spec"].get("nodeName")}
    if unbound:
        problems.append(f"{len(unbound)} pods not bound (e.g. {sorted(unbound)[:3]})")
    by_node: dict[str, list[Manifest]] = defaultdict(list)
    for p in live:
        if p["spec"].get("nodeName"):
            by_node[p["spec"]["nodeName"]].append(p)
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    for n in nodes:
        name, allocatable = n["metadata"]["name"], n["status"]["allocatable"]
        on = by_node.get(name, [])
        cpu = sum(_requests(p)[0] for p in on)
        memory = sum(_requests(p)[1] for p in on)
        if (
            cpu > float(parse_quantity(allocatable["cpu"])) + 1e-9
            or memory > float(parse_quantity(allocatable["memory"]))
            or len(on) > int(allocatable["pods"])
        ):
            problems.append(f"node {name} overcommitted: {len(on)} pods, cpu {cpu:g}, memory {memory:g}")
    if workload == "SchedulingPodAntiAffinity":
        green = Counter(p["spec"]["nodeName"] for p in live if p["spec"].get("nodeName")
                        and (p["metadata"].get("labels") or {}).get("color") == "green")  # fmt: skip
        crowded = [n for n, c in green.items() if c > 1]
        if crowded:
            problems.append(f"anti-affinity broken on {len(crowded)} nodes (e.g. {crowded[:3]})")
    if workload == "SchedulingPodAffinity":
        zones = Counter(labels[p["spec"]["nodeName"]].get(ZONE_LABEL) for p in live if p["spec"].get("nodeName"))
        if len(zones) > 1:
            problems.append(f"affinity pods in {len(zones)} zones: {dict(zones)}")
    if workload == "TopologySpreading":
        for namespace in {p["metadata"]["namespace"] for p in live}:
            blue = Counter(labels[p["spec"]["nodeName"]].get(ZONE_LABEL) for p in live
                           if p["metadata"]["namespace"] == namespace and p["spec"].get("nodeName")
                           and (p["metadata"].get("labels") or {}).get("color") == "blue")  # fmt: skip
            counts = [blue.get(z, 0) for z in {labels[n].get(ZONE_LABEL) for n in labels}]
            if counts and max(counts) - min(counts) > 5:
                problems.append(f"zone skew {max(counts) - min(counts)} > maxSkew 5 in {namespace}: {dict(blue)}")
    return problems


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class Run:
    workload: str
    scheduler: str
    round: int
    pods: int
    pods_per_second: float
    samples_p50: float
    samples_p90: float
    samples_p99: float
    first_bind_after: float
    cpu: dict[str, float]
    startup_cpu: dict[str, float]
    """Of ``cpu``, what was spent before the first measured bind (SchedulingBasic: lists, start)."""
    requests: dict[str, int]
    """The apiserver's requests during the phase, by verb and resource (the bench's own among them)."""
    latency_ms: dict[str, float] | None
    problems: list[str]

    def cpu_ms_per_pod(self, names: Iterable[str] | None = None) -> float:
        chosen = self.cpu if names is None else {k: v for k, v in self.cpu.items() if k in set(names)}
        return 1000 * sum(chosen.values()) / max(1, self.pods)

    @property
    def control_plane_ms(self) -> float:
        return self.cpu_ms_per_pod(("kube-apiserver", "etcd"))

    @property
    def scheduler_ms(self) -> float:
        return 1000 * sum(v for k, v in self.cpu.items() if k not in ("kube-apiserver", "etcd")) / max(1, self.pods)


def throughput(times: list[float]) -> tuple[float, list[float]]:
    """Pods per second from the first bind to the last, and the per-second samples (binds in each
    whole second after the first bind, as scheduler_perf's throughput collector takes them)."""
    times = sorted(times)
    span = times[-1] - times[0]
    if span <= 0:
        return float(len(times)), [float(len(times))]
    samples = Counter(int(t - times[0]) for t in times)
    seconds = int(span)
    return (len(times) - 1) / span, [float(samples.get(s, 0)) for s in range(max(1, seconds))]


async def one_run(
    client: KubeClient, server: KubeApiServer, scheduler: Scheduler, workload: Workload, round_: int,
    args: argparse.Namespace, progress: Callable[[str], None],
) -> Run:  # fmt: skip
    prefix = f"{scheduler.label.split('-')[0]}{round_}"
    init = [for_scheduler(p, scheduler.scheduler_name, prefix) for p in workload.init]
    measured = [for_scheduler(p, scheduler.scheduler_name, prefix) for p in workload.measured]
    namespaces = {p["metadata"]["namespace"] for p in (*init, *measured)}
    steady_ns = f"{prefix}-steady"
    for namespace in sorted(namespaces | ({steady_ns} if workload.steady and args.rate > 0 else set())):
        with contextlib.suppress(KubeAPIError):
            await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    binds = Binds()
    synced = asyncio.Event()
    watching = asyncio.create_task(watch_binds(client, binds, synced), name="watch binds")
    try:
        t0 = time.monotonic()
        await create_pods(client, init + (measured if workload.created_before_start else []))
        progress(f"{len(init) + (len(measured) if workload.created_before_start else 0)} pods created "
                 f"in {time.monotonic() - t0:.1f}s; starting {scheduler.label}")  # fmt: skip
        await synced.wait()

        def cpu_now() -> dict[str, float | None]:
            pids = {**server.pids(), **scheduler.pids()}
            return {name: cpu_seconds(pid) for name, pid in pids.items()}

        before = cpu_now()  # the scheduler's processes count from 0
        requests_before = await asyncio.to_thread(apiserver_requests, server)
        started = time.monotonic()
        await scheduler.start()
        profilers = start_profilers(scheduler, Path(args.profile) / f"{workload.name}-{prefix}") if args.profile else []
        if init:
            await wait_bound(binds, [key_of(p) for p in init], args.timeout, "init pods")
            # The init pods' Scheduled events are the init phase's work, not the measured one's.
            await events_written(server, requests_before, len(init))
            progress(f"{len(init)} init pods bound in {time.monotonic() - started:.1f}s; creating the measured pods")
            before = cpu_now()
            requests_before = await asyncio.to_thread(apiserver_requests, server)
            await create_pods(client, measured)
        keys = [key_of(p) for p in measured]
        while not init and not binds.at:
            await asyncio.sleep(0.05)
        at_first_bind = cpu_now()
        await wait_bound(binds, keys, args.timeout, "measured pods")
        # The phase ends once the scheduler has also written its Scheduled events (one per pod,
        # as kube-scheduler): writes it defers are its work too.
        await events_written(server, requests_before, len(measured))
        after = cpu_now()
        stop_profilers(profilers)
        requests = await asyncio.to_thread(apiserver_requests, server)
        requests.subtract(requests_before)
        cpu = {name: round((end or 0.0) - (before.get(name) or 0.0), 2) for name, end in after.items()}
        startup = {name: round((at_first_bind.get(name) or 0.0) - (before.get(name) or 0.0), 2) for name in after}
        times = [binds.at[k] for k in keys]
        first_bind = min(binds.at.values()) - started
        rate, samples = throughput(times)
        q = statistics.quantiles(samples, n=100) if len(samples) > 1 else samples * 99
        latency = await steady(client, binds, steady_ns, scheduler.scheduler_name, args) if workload.steady else None
        pods = (await client.list(PODS)).items
        nodes = (await client.list(NODES)).items
        ours = [p for p in pods if p["metadata"]["namespace"] in namespaces]
        # PreemptionBasic's init pods are there to be evicted: each measured pod must be bound,
        # and takes the room of three of them (deleted, as kube-scheduler deletes its victims).
        preempting = workload.name == "PreemptionBasic"
        expected = {key_of(p) for p in (*(() if preempting else init), *measured)}
        problems = check(workload.name, ours, nodes, expected)
        if preempting:
            gone = {key_of(p) for p in init} - {key_of(p) for p in ours if not p["metadata"].get("deletionTimestamp")}
            progress(f"  {len(gone)} init pods preempted for {len(measured)} measured pods")
        problems += [f"bound twice: {r}" for r in binds.rebound]
    finally:
        await scheduler.stop()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    await delete_pods(client, sorted(namespaces | {steady_ns}))
    return Run(workload.name, scheduler.label, round_, len(measured), round(rate, 1), q[49], q[89], q[98],
               round(first_bind, 2), cpu, startup, {k: v for k, v in sorted(requests.items()) if v > 0}, latency,
               problems)  # fmt: skip


async def steady(
    client: KubeClient, binds: Binds, namespace: str, scheduler: str, args: argparse.Namespace
) -> dict[str, float] | None:
    """Creation-to-binding latency of pods created at ``args.rate`` a second for ``args.seconds``."""
    if args.rate <= 0:
        return None
    total = int(args.rate * args.seconds)
    created: dict[str, float] = {}
    pending: set[asyncio.Task[None]] = set()

    async def one(i: int) -> None:
        pod = for_scheduler(basic_pod(f"s{i:06d}"), scheduler, "x")
        pod["metadata"]["namespace"] = namespace
        created[f"{namespace}/s{i:06d}"] = time.monotonic()
        await client.create(PODS, pod, namespace=namespace)

    start = time.monotonic()
    for i in range(total):
        await asyncio.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        task = asyncio.create_task(one(i))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    await wait_bound(binds, list(created), args.timeout, "steady pods")
    latencies = sorted(binds.at[k] - t for k, t in created.items())
    q = statistics.quantiles(latencies, n=100)
    return {"rate": args.rate, "p50": round(q[49] * 1000), "p90": round(q[89] * 1000), "p99": round(q[98] * 1000),
            "max": round(latencies[-1] * 1000)}  # fmt: skip


# -- same answers ----------------------------------------------------------------------------------


EQUALITY_NODES = [
    # name, cpu, memory, zone, extra labels. Sized so that every pod of `equality_pods` has one
    # best node by kube-scheduler's default scores (no tie for its random pick to break)
    ("eq-a", "4", "16Gi", "zone-a", {"disk": "ssd"}),
    ("eq-b", "8", "20Gi", "zone-a", {}),
    ("eq-c", "6", "48Gi", "zone-b", {"disk": "ssd"}),
    ("eq-d", "16", "32Gi", "zone-b", {}),
    ("eq-e", "12", "64Gi", "zone-c", {"disk": "hdd"}),
]


def equality_pods() -> list[Manifest]:
    """Constrained pods of unequal requests, one best node each (resources, node affinity,
    anti-affinity, spreading and taint-free preferences), placed one at a time."""

    def pod(name: str, cpu: str, memory: str, labels: dict[str, str] | None = None, **spec: Any) -> Manifest:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "eq", "labels": labels or {"app": "eq"}},
            "spec": {"containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec},
        }  # fmt: skip

    ssd = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}  # fmt: skip
    prefer_b = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": ZONE_LABEL, "operator": "In", "values": ["zone-b"]}]}}]}}  # fmt: skip
    apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME_LABEL}]}}  # fmt: skip
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE_LABEL}]}}  # fmt: skip
    spread = [{"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]  # fmt: skip
    return [
        pod("p01-big", "7", "8Gi"),
        pod("p02-ssd", "1", "2Gi", affinity=ssd),
        pod("p03-db", "2", "20Gi", {"app": "db"}, affinity=apart),
        pod("p04-db", "2", "20Gi", {"app": "db"}, affinity=apart),
        pod("p05-near-db", "500m", "1Gi", affinity=near),
        pod("p06-zone-b", "1", "4Gi", affinity=prefer_b),
        pod("p07-web", "300m", "3Gi", {"app": "web"}, topologySpreadConstraints=spread),
        pod("p08-web", "300m", "3Gi", {"app": "web"}, topologySpreadConstraints=spread),
        pod("p09-web", "300m", "3Gi", {"app": "web"}, topologySpreadConstraints=spread),
        pod("p10-db", "2", "20Gi", {"app": "db"}, affinity=apart),
        pod("p11-ssd", "2", "6Gi", affinity=ssd),
        pod("p12-small", "250m", "512Mi"),
    ]


async def same_answers(
    client: KubeClient, schedulers: Sequence[Scheduler], progress: Callable[[str], None]
) -> dict[str, Any]:
    """Each scheduler places `equality_pods` one at a time on `EQUALITY_NODES` (their own, with a
    taint the pods tolerate, so the big workloads' nodes stay out); the node chosen per pod."""
    names = [n[0] for n in EQUALITY_NODES]
    for name, cpu, memory, zone, extra in EQUALITY_NODES:
        await make_nodes(client, [name], zones=(zone,), cpu=cpu, memory=memory, labels={**extra, "h2h": "eq"})
    chosen: dict[str, dict[str, str]] = {}
    for scheduler in schedulers:
        prefix = f"eq{scheduler.label.split('-')[0]}"
        with contextlib.suppress(KubeAPIError):
            await client.create(NAMESPACES, {"metadata": {"name": f"{prefix}-eq"}})
        binds = Binds()
        synced = asyncio.Event()
        watching = asyncio.create_task(watch_binds(client, binds, synced))
        await synced.wait()
        await scheduler.start()
        try:
            for p in equality_pods():
                pod = for_scheduler(p, scheduler.scheduler_name, prefix)
                pod["spec"]["nodeSelector"] = {"h2h": "eq"}
                await client.create(PODS, pod, namespace=pod["metadata"]["namespace"])
                with contextlib.suppress(TimeoutError):
                    await wait_bound(binds, [key_of(pod)], 30, p["metadata"]["name"], or_unschedulable=True)
            keys = {p["metadata"]["name"]: f"{prefix}-eq/{p['metadata']['name']}" for p in equality_pods()}
            chosen[scheduler.label] = {
                name: binds.node.get(key, "unschedulable" if key in binds.unschedulable else "-")
                for name, key in keys.items()
            }
        finally:
            await scheduler.stop()
            watching.cancel()
        await delete_pods(client, [f"{prefix}-eq"])
    for name in names:
        with contextlib.suppress(KubeAPIError):
            await client.delete(NODES, name)
    labels = [s.label for s in schedulers]
    rows = [{"pod": pod, **{label: chosen[label][pod] for label in labels}} for pod in chosen[labels[0]]]
    differ = [r["pod"] for r in rows if len({r[label] for label in labels}) > 1]
    progress(f"same answers: {len(rows) - len(differ)} of {len(rows)} pods on the same node")
    return {"pods": rows, "differ": differ}


# -- main ------------------------------------------------------------------------------------------


def byte_compile() -> None:
    """kubus's sources compiled to bytecode (their __pycache__), as installing kubus's wheel (the
    Docker image) compiles them: from an editable install, under PYTHONDONTWRITEBYTECODE, each
    service would compile every module of kubus again at its start, CPU the bench would count
    against kubus and no installed kubus spends."""
    root = Path(__file__).resolve().parents[1]
    for folder in ("shared", "services"):
        compileall.compile_dir(root / folder, quiet=1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    def progress(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    byte_compile()

    bin_dir = Path(args.kube_bin) if args.kube_bin else kube_binaries()
    names = list(POD_CONSTRAINT_WORKLOADS) if args.workloads == ["all"] else args.workloads
    if args.workloads == ["all"]:
        names = ["basic", *names]
    scale = 0.1 if args.quick else 1.0
    pods = args.pods if args.pods is not None else (1000 if args.quick else 10_000)
    nodes = args.nodes if args.nodes is not None else (500 if args.quick else None)
    chosen = workloads(names, nodes=nodes, pods=pods, scale=scale)
    runs: list[Run] = []
    equality: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="kubus-h2h-") as scratch:
        for index, workload in enumerate(chosen):
            data = Path(args.keep or scratch) / workload.name
            with KubeApiServer(bin_dir, data / "kube") as server:
                async with server.client(qps=5000, burst=5000, timeout=120) as client:
                    compare = index == 0 and args.only is None and not args.no_equality
                    done, same = await run_workload(client, server, bin_dir, workload, data, compare, args, progress)
                    runs += done
                    equality = equality or same
    return {"runs": [asdict(r) for r in runs], "summary": summarize(runs), "same_answers": equality,
            "settings": {"kube_qps": KUBE_QPS, "kube_burst": KUBE_BURST, "kubus_batch_size": args.batch_size,
                         "kubus_binders": args.binders, "kubus_fork": args.fork, "cpus": os.cpu_count()}}  # fmt: skip


async def run_workload(
    client: KubeClient, server: KubeApiServer, bin_dir: Path, workload: Workload, data: Path, compare: bool,
    args: argparse.Namespace, progress: Callable[[str], None],
) -> tuple[list[Run], dict[str, Any] | None]:  # fmt: skip
    """Every round of ``workload`` on a fresh apiserver; then, with ``compare``, `same_answers`."""
    progress(f"{workload.name}: {workload.nodes} nodes, {len(workload.init)} init pods, "
             f"{len(workload.measured)} measured pods")  # fmt: skip
    names = [f"node-{i:05d}" for i in range(workload.nodes)]
    await make_nodes(client, names, zones=workload.zones, cpu="4", memory="32Gi", pods="110")
    for name, value in ((LOW, 0), (HIGH, 10)):
        await client.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
    kube = KubeScheduler(bin_dir / "kube-scheduler", server, data / "kube-scheduler")
    kubus = Kubus(server, data / "kubus", binders=args.binders, batch_size=args.batch_size, fork=args.fork)
    schedulers: list[Scheduler] = [kube, kubus]
    runs = []
    for round_ in range(1, args.rounds + 1):
        for scheduler in schedulers if args.only is None else [s for s in schedulers if s.label == args.only]:
            if isinstance(scheduler, Kubus) and scheduler.workdir.exists():
                shutil.rmtree(scheduler.workdir)  # fresh servers each run
            progress(f"{workload.name} round {round_}: {scheduler.label}")
            result = await one_run(client, server, scheduler, workload, round_, args, progress)
            progress(f"  {result.pods_per_second:.0f} pods/s, first bind after {result.first_bind_after:.1f}s, "
                     f"CPU ms/pod: scheduler {result.scheduler_ms:.2f}, apiserver+etcd {result.control_plane_ms:.2f}"
                     + (f", latency {result.latency_ms}" if result.latency_ms else "")
                     + (f"; PROBLEMS: {result.problems}" if result.problems else ""))  # fmt: skip
            runs.append(result)
    if not compare:
        return runs, None
    kubus.workdir = data / "kubus-eq"
    return runs, await same_answers(client, schedulers, progress)


def best(runs: list[Run]) -> Run | None:
    return max(runs, key=lambda r: r.pods_per_second) if runs else None


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for workload in dict.fromkeys(r.workload for r in runs):
        kube = best([r for r in runs if r.workload == workload and r.scheduler == "kube-scheduler"])
        kubus = best([r for r in runs if r.workload == workload and r.scheduler == "kubus"])
        row: dict[str, Any] = {"workload": workload}
        for label, r in (("kube", kube), ("kubus", kubus)):
            if r is not None:
                row[f"{label}_pods_per_second"] = r.pods_per_second
                row[f"{label}_scheduler_cpu_ms_per_pod"] = round(r.scheduler_ms, 3)
                row[f"{label}_control_plane_cpu_ms_per_pod"] = round(r.control_plane_ms, 3)
                row[f"{label}_ok"] = not r.problems
                row[f"{label}_cpu_s"] = r.cpu
                row[f"{label}_startup_cpu_s"] = r.startup_cpu
                row[f"{label}_requests_per_pod"] = {k: round(v / r.pods, 3) for k, v in r.requests.items()}
        if kube and kubus:
            row["ratio"] = round(kubus.pods_per_second / kube.pods_per_second, 2)
            row["scheduler_cpu_ratio"] = round(kubus.scheduler_ms / kube.scheduler_ms, 2) if kube.scheduler_ms else None
            row["control_plane_cpu_ratio"] = (
                round(kubus.control_plane_ms / kube.control_plane_ms, 2) if kube.control_plane_ms else None
            )
        rows.append(row)
    return rows


def print_tables(result: dict[str, Any]) -> None:
    print("| workload | kube-scheduler pods/s | kubus pods/s | ratio | scheduler CPU ms/pod kube / kubus | "
          "apiserver+etcd CPU ms/pod under kube / kubus | constraints held kube / kubus |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for row in result["summary"]:

        def get(key: str, fmt: str = "{}", row: dict[str, Any] = row) -> str:
            return fmt.format(row[key]) if key in row else "-"

        print(f"| {row['workload']} | {get('kube_pods_per_second', '{:.0f}')} | "
              f"{get('kubus_pods_per_second', '{:.0f}')} | {get('ratio', '{:.2f}x')} | "
              f"{get('kube_scheduler_cpu_ms_per_pod', '{:.2f}')} / {get('kubus_scheduler_cpu_ms_per_pod', '{:.2f}')} "
              f"({get('scheduler_cpu_ratio', '{:.2f}x')}) | {get('kube_control_plane_cpu_ms_per_pod', '{:.2f}')} / "
              f"{get('kubus_control_plane_cpu_ms_per_pod', '{:.2f}')} ({get('control_plane_cpu_ratio', '{:.2f}x')}) | "
              f"{get('kube_ok')} / {get('kubus_ok')} |")  # fmt: skip
    print("\nCPU seconds per process (the best run of each):")
    print("| workload | scheduler | process | CPU s | of which before the first bind | ms/pod |")
    print("|---|---|---|---|---|---|")
    for row in result["summary"]:
        for label in ("kube", "kubus"):
            pods = next((r["pods"] for r in result["runs"] if r["workload"] == row["workload"]), 1)
            startup = row.get(f"{label}_startup_cpu_s") or {}
            for name, seconds in sorted((row.get(f"{label}_cpu_s") or {}).items(), key=lambda kv: -kv[1]):
                print(f"| {row['workload']} | {label} | {name} | {seconds:.2f} | {startup.get(name, 0):.2f} | "
                      f"{1000 * seconds / pods:.3f} |")
    print("\napiserver requests per measured pod (the best run of each; the bench's own creates and watch among them):")
    print("| workload | request | kube-scheduler | kubus |")
    print("|---|---|---|---|")
    for row in result["summary"]:
        kube, kubus = row.get("kube_requests_per_pod") or {}, row.get("kubus_requests_per_pod") or {}
        for what in sorted(set(kube) | set(kubus), key=lambda w: -max(kube.get(w, 0), kubus.get(w, 0))):
            if max(kube.get(what, 0), kubus.get(what, 0)) >= 0.001:
                print(f"| {row['workload']} | {what} | {kube.get(what, 0):.3f} | {kubus.get(what, 0):.3f} |")
    latency = [r for r in result["runs"] if r["latency_ms"]]
    if latency:
        print("\ncreation -> binding at a steady rate:")
        print("| scheduler | round | rate | p50 ms | p90 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|---|")
        for r in latency:
            q = r["latency_ms"]
            print(
                f"| {r['scheduler']} | {r['round']} | {q['rate']:g}/s | {q['p50']} | {q['p90']} | {q['p99']} | "
                f"{q['max']} |"
            )
    if result["same_answers"]:
        same = result["same_answers"]
        print(f"\nsame answers, one pod at a time on {len(EQUALITY_NODES)} unequal nodes "
              f"({len(same['pods']) - len(same['differ'])} of {len(same['pods'])} the same):")  # fmt: skip
        print("| pod | kube-scheduler | kubus |")
        print("|---|---|---|")
        for row in same["pods"]:
            print(f"| {row['pod']} | {row['kube-scheduler']} | {row['kubus']} |")
    problems = [(r["workload"], r["scheduler"], r["round"], p) for r in result["runs"] for p in r["problems"]]
    for p in problems:
        print(f"PROBLEM {p}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["basic"],
                        choices=["all", "basic", *POD_CONSTRAINT_WORKLOADS],
                        help="default: basic (SchedulingBasic)")  # fmt: skip
    parser.add_argument("--nodes", type=int, help="nodes (default: the workload's, 5,000; 500 for PreemptionBasic)")
    parser.add_argument("--pods", type=int, help="SchedulingBasic's pods (default 10,000)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds; the best of each scheduler is reported (default 3)"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="SchedulingBasic's steady rate, pods/s (0: none)")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds at the steady rate")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE,
                        help=f"kubus's cycle batch size (default {BATCH_SIZE})")  # fmt: skip
    parser.add_argument("--binders", type=int, default=1, help="kubus's binders (default 1)")
    parser.add_argument("--no-fork", dest="fork", action="store_false",
                        help="start each kubus service in a fresh interpreter (kubus up --no-fork)")  # fmt: skip
    parser.add_argument("--only", choices=["kube-scheduler", "kubus"], help="run one scheduler only")
    parser.add_argument("--no-equality", action="store_true", help="skip the same-answers check")
    parser.add_argument("--quick", action="store_true", help="500 nodes, 1,000 pods, a tenth of each workload, 1 round")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a phase may take")
    parser.add_argument(
        "--kube-bin", help="folder with etcd, kube-apiserver, kube-scheduler (default: ../shared/kube's)"
    )
    parser.add_argument("--profile", metavar="DIR", help="py-spy each kubus process over the measured phase, into DIR")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and data here")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    if args.quick and args.rounds == 3:
        args.rounds = 1
    result = asyncio.run(run(args))
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print_tables(result)
    return 1 if any(r["problems"] for r in result["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
