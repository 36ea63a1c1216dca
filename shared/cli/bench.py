"""`kubus bench`: the whole system under load, measured from the outside.

Embedded servers, every service as its own process (as `kubus up` runs them) and N simulated
nodes whose pods run until deleted (so the end state is quiet and checkable). ``--workload``
picks what is submitted:

- ``mixed`` (the default): P pods of the mixed GPU/CPU workload on 8 x H100 nodes, the profile
  kube's default plus GPUFit;
- ``pod-affinity``, ``pod-anti-affinity``, ``topology-spreading``,
  ``preferred-topology-spreading``: kubernetes v1.28 scheduler_perf's SchedulingPodAffinity,
  SchedulingPodAntiAffinity, TopologySpreading and PreferredTopologySpreading
  (`kubus.cli.workload.POD_CONSTRAINT_WORKLOADS`) on CPU nodes of 4 cpu / 32Gi / 110 pods spread
  over the workload's zones, the profile kube's default with every node scored
  (percentageOfNodesToScore 100). Their init pods (``--init-pods``) are submitted first and
  followed until each is bound (and running) or reported unschedulable, unmeasured; then the
  measured pods (``--pods``). A measured pod that cannot fit (pod-anti-affinity: one pod per
  hostname, so only as many as there are nodes) counts as unschedulable once the queue recorded
  it so (Pending, reason Unschedulable): the run ends when every measured pod is bound or
  unschedulable. kube-scheduler's own figure for the workload (2 cores; 5,000 nodes, 500 for
  PreemptionBasic) is reported next to kubus's, and so is whether the end state is the one kube's
  constraint gives (at most one color=green pod per node; every color=blue pod in one zone; the
  zones within maxSkew; every high-priority pod bound by preempting).

The pods are submitted as fast as JetStream takes them; the bench follows them until every one
is accounted for, then reports:

- throughput: pods bound per second, first submit to last bind, and the submit rate alone;
- submit-to-bound latency (p50, p99, max) per pod: its JetStream ack to the event announcing it bound;
- time per stage: submit → accepted (the queue stored it: the record's created_at), accepted
  → bound, bound → running (the agent started it);
- CPU seconds each process spent while the measured pods flowed (services, servers and the
  bench itself, which shares the machine): where the time goes;
- the invariants (`kubus.store.invariants.check_invariants`) on the final state.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TextIO

from nats.js import JetStreamContext

from kubus.api.synthetic import simulated_zones
from kubus.cli.cluster import SubmitManifest, pod_manifests, submit, write_table
from kubus.cli.connect import UsageError, open_bus, open_store
from kubus.cli.embedded import ServerStartError
from kubus.cli.progress import LiveLine, PodTimes, PodTracker, percentile, status_line
from kubus.cli.up import Cluster, check_template, report_exit, start_cluster, wait_ready
from kubus.cli.workload import (
    POD_CONSTRAINT_WORKLOADS,
    ZONE_LABEL,
    PodConstraintWorkload,
    cpu_node_template,
    gpu_scheduler_config,
    mixed_workload,
    pod_constraint_pods,
    pod_constraints_scheduler_config,
)
from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject
from kubus.store.cluster_state import ClusterState
from kubus.store.invariants import check_invariants
from kubus.store.records import PodPhase

__all__ = ["BenchPlan", "bench_plan", "check_invariants_settled", "profile_names", "run_bench"]

_PLACED = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED)
_SETTLED = frozenset({PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED})
"""Phases a bench pod (which runs until deleted) does not leave: not read again once seen."""

_UNSCHEDULABLE = "Unschedulable"
"""The reason the queue records for a pod no node fits (`kubus.queue`)."""

_CONFIRM_UNSCHEDULABLE = 2.5
"""Seconds every pod must stay accounted for (placed or unschedulable) before the run ends: past
the first backoff (1 s) of a pod whose reservation was refused, and one full read of the records."""

_MIXED_PODS = 10_000
_MIXED_NODES = 5_000
_MAX_SKEW = 5


def profile_names(count: int) -> list[str]:
    """``default-scheduler`` then ``profile-1`` ... ``profile-<count-1>``."""
    return ["default-scheduler", *(f"profile-{i}" for i in range(1, count))]


@dataclass(frozen=True)
class BenchPlan:
    """What one `kubus bench` runs: the workload and its pod counts."""

    workload: str
    pods: int
    """Measured pods."""
    init_pods: int
    """Pods placed before the measurement (pod-constraint workloads only)."""
    constraints: PodConstraintWorkload | None
    """None for the mixed workload."""
    nodes: int
    """Simulated nodes: --nodes, else the workload's own count (5,000; 500 for preemption-basic)."""


def bench_plan(args: argparse.Namespace) -> BenchPlan:
    """The workload and pod counts the arguments ask for, the workload's own counts where
    --pods/--init-pods are not given. Raises UsageError for a bad count or workload."""
    name = args.workload
    constraints = POD_CONSTRAINT_WORKLOADS.get(name)
    if constraints is None and name != "mixed":
        choices = ", ".join(["mixed", *POD_CONSTRAINT_WORKLOADS])
        raise UsageError(f"--workload: unknown workload {name!r} (choose from {choices})")
    pods = args.pods
    if pods is None:
        pods = constraints.measured_pods if constraints else _MIXED_PODS
    if pods < 1:
        raise UsageError(f"--pods: expected 1 or more, got {pods}")
    init = args.init_pods
    if init is not None and init < 0:
        raise UsageError(f"--init-pods: expected 0 or more, got {init}")
    if constraints is None:
        if init:
            raise UsageError("--init-pods: the mixed workload has no init pods (give a pod-constraint --workload)")
        init = 0
    elif init is None:
        init = constraints.init_pods
    nodes = args.nodes
    if nodes is None:
        nodes = constraints.nodes if constraints else _MIXED_NODES
    if nodes < 1:
        raise UsageError(f"--nodes: expected 1 or more, got {nodes}")
    return BenchPlan(name, pods, init, constraints, nodes)


async def check_invariants_settled(store: ClusterState, timeout: float = 15.0) -> list[str]:
    """check_invariants until it comes back clean or ``timeout`` passes; the last violations.

    A step between two scripts (a pod finished but its reservation not yet released) reads as a
    violation for a moment; a real violation stays."""
    deadline = time.monotonic() + timeout
    while True:
        violations = await check_invariants(store)
        if not violations or time.monotonic() > deadline:
            return violations
        await asyncio.sleep(0.5)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process so far (Linux /proc); None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_memory(pid: int) -> int | None:
    """Peak resident memory of a live process so far, bytes (Linux /proc: VmHWM); None where
    unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _processes(cluster: Cluster) -> dict[str, int]:
    """name -> pid of every process of the run: the services, the servers, this bench."""
    pids = {service.name: service.pid for service in cluster.group if service.pid is not None}
    if cluster.servers is not None:
        pids.update(cluster.servers.pids())
    pids["bench (this process)"] = os.getpid()
    return pids


def _cpu_used(before: dict[str, float | None], pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        start, end = before.get(name), cpu_seconds(pid)
        if start is not None and end is not None:
            out[name] = round(end - start, 2)
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


def _check_zones(path: str) -> None:
    """A node template's zones annotation, checked as the gpu-agent will (UsageError)."""
    from kubus.api.manifests import load_manifests

    try:
        simulated_zones(load_manifests(path).nodes[0])
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _missing_plugins(config_path: Path, plan: BenchPlan) -> list[str]:
    """The plugin the workload's constraints need, when the profile does not run it."""
    if plan.constraints is None:
        return []
    from kubus.cli.commands import scheduler_config
    from kubus.framework.registry import ExtensionPoint

    profile = scheduler_config(str(config_path)).profiles[0]
    enabled = {ref.name for point in ExtensionPoint for ref in profile.enabled(point)}
    return [] if plan.constraints.plugin in enabled else [plan.constraints.plugin]


async def run_bench(args: argparse.Namespace) -> int:
    """`kubus bench`; see the module docstring. 0 when every measured pod was bound (or, in a
    pod-constraint workload, reported unschedulable), the end state is the one kube's constraint
    gives and the invariants hold; 1 otherwise."""
    plan = bench_plan(args)
    if args.plot:
        _matplotlib()  # before the run, not after it
    if args.rate is not None and not args.rate > 0:
        raise UsageError(f"--rate: expected pods per second above 0, got {args.rate:g}")
    for flag, value in (
        ("--batch-size", args.batch_size),
        ("--profiles", args.profiles),
        ("--binders", args.binders),
    ):
        if value < 1:
            raise UsageError(f"{flag}: expected 1 or more, got {value}")
    if args.node_template:
        check_template(args.node_template, Path("."), plan.nodes)  # a bad template: exit 2, nothing made
        _check_zones(args.node_template)
    keep = args.data_dir is not None
    directory = Path(args.data_dir).resolve() if keep else Path(tempfile.mkdtemp(prefix="kubus-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    profiles = profile_names(args.profiles)
    config_path = directory / "scheduler-config.yaml"
    if plan.constraints is None:
        config_path.write_text(gpu_scheduler_config(profiles))
        template = check_template(args.node_template, directory, plan.nodes)
    else:
        config_path.write_text(pod_constraints_scheduler_config(profiles))
        if args.node_template:
            template = check_template(args.node_template, directory, plan.nodes)
        else:
            target = directory / "node-template.yaml"
            target.write_text(cpu_node_template(plan.constraints.zones))
            template = str(target.resolve())
    missing = _missing_plugins(config_path, plan)
    out = sys.stdout
    # Progress goes to stderr with -o json, so stdout is the JSON document alone.
    progress = sys.stderr if args.output == "json" else sys.stdout
    pods = f"{plan.init_pods} init + {plan.pods} measured pods" if plan.constraints else f"{plan.pods} pods"
    print(
        f"kubus bench: workload {plan.workload}, {plan.nodes} nodes, {pods}, batch {args.batch_size}, "
        f"{args.profiles} profile(s), {args.binders} binder(s), {os.cpu_count()} CPUs"
        f"{', HA servers' if args.ha else ''}; data in {directory}",
        file=progress,
        flush=True,
    )
    for plugin in missing:
        print(
            f"note: the default profile has no {plugin} yet: the pods' constraints are not enforced",
            file=progress,
            flush=True,
        )
    started = time.time()
    try:
        cluster = await start_cluster(
            directory,
            config=str(config_path),
            profiles=profiles,
            nodes=plan.nodes,
            node_template=template,
            binders=args.binders,
            pod_duration=0.0,
            batch_size=args.batch_size,
            log_level="warning",
            ha=args.ha,
        )
    except ServerStartError as exc:
        sys.stderr.write(f"kubus bench: the embedded servers did not start: {exc}\n")
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        return 1
    try:
        async with open_store(cluster.settings) as store:
            failed = await wait_ready(cluster, store, timeout=120 + plan.nodes / 50, since=started)
            for service in failed:
                report_exit(service, restarting=False)
            if failed:
                return 1
            ready_s = time.time() - started
            print(f"ready in {ready_s:.1f}s", file=progress, flush=True)
            result = await _load(cluster, store, args, plan, profiles)
            result["ready_seconds"] = round(ready_s, 2)
            result["plugins_missing"] = missing
            violations = await check_invariants_settled(store)
            result["invariant_violations"] = violations
    finally:
        await cluster.stop()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    _report(result, args, out)
    if args.plot:
        write_throughput_plot(result, Path(args.plot))
        print(f"throughput plot: {args.plot}", file=progress)
    check = result["constraint_check"]
    accounted = result["bound"] + result["unschedulable"] == plan.pods
    ok = accounted and not result["invariant_violations"] and (check is None or check["ok"])
    return 0 if ok else 1


def bound_per_second(bound_at: Sequence[float], start: float) -> list[int]:
    """Pods bound in each second from ``start`` (epoch seconds): throughput over time."""
    if not bound_at:
        return []
    seconds = [max(0, int(t - start)) for t in bound_at]
    counts = [0] * (max(seconds) + 1)
    for s in seconds:
        counts[s] += 1
    return counts


def _matplotlib() -> ModuleType:
    """matplotlib.pyplot on its file-only backend. Raises UsageError when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'kubus[plot]'") from None
    return plt


def write_throughput_plot(result: JSONMapping, path: Path) -> None:
    """A PNG of pods bound per second and in all, over the run (`kubus bench --plot`). Raises
    UsageError when matplotlib is not installed (the `plot` extra)."""
    plt = _matplotlib()
    per_second = result["bound_per_second"]
    fig, rate_axis = plt.subplots(figsize=(8, 4), dpi=100)
    try:
        seconds = list(range(len(per_second)))
        rate_axis.bar(seconds, per_second, width=1.0, align="edge", color="#4c72b0", label="bound per second")
        rate_axis.set_xlabel("seconds from the first submit")
        rate_axis.set_ylabel("pods bound per second")
        total_axis = rate_axis.twinx()
        running, total = 0, [0]
        for n in per_second:
            running += n
            total.append(running)
        total_axis.plot(range(len(total)), total, color="#dd8452", label="bound in all")
        total_axis.set_ylabel("pods bound in all")
        title = f"kubus bench: {result['workload']}, {result['nodes']} nodes, {result['pods']} pods"
        rate = result.get("pods_per_second")
        rate_axis.set_title(title + (f" ({rate} pods/s)" if rate else ""))
        fig.legend(loc="upper left", bbox_to_anchor=(0.1, 0.88))
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _unschedulable(p: PodTimes) -> bool:
    """Reported unschedulable by the queue and not placed since."""
    return p.phase is PodPhase.PENDING and p.reason == _UNSCHEDULABLE and not p.bound


OFFER_TICK = 0.05
"""Seconds between the submits of an offered load (`--rate`): rate × tick pods each time."""


async def _submit_at_rate(
    js: JetStreamContext, manifests: Sequence[SubmitManifest], tracker: PodTracker, rate: float
) -> None:
    """Submit ``manifests`` at ``rate`` pods per second, steadily (a due share every OFFER_TICK,
    catching up after a slow publish), not as fast as JetStream takes them: an offered load."""
    began = time.monotonic()
    sent = 0
    while sent < len(manifests):
        due = min(len(manifests), int((time.monotonic() - began) * rate) + 1)
        if due > sent:
            part = manifests[sent:due]

            def acked(i: int, _dup: bool, _t: float, part: Sequence[SubmitManifest] = part) -> None:
                tracker.submitted(part[i].key)

            await submit(js, part, on_ack=acked)
            sent = due
        await asyncio.sleep(OFFER_TICK)


async def _follow(
    cluster: Cluster,
    js: JetStreamContext,
    tracker: PodTracker,
    manifests: Sequence[SubmitManifest],
    line: LiveLine,
    *,
    deadline: float,
    until_unschedulable: bool,
    label: str = "",
    rate: float | None = None,
) -> float | None:
    """Submit ``manifests`` as fast as JetStream takes them and follow them until each is placed
    (or, ``until_unschedulable``, reported unschedulable), then until the placed ones run: the
    state is quiet only then, and bound -> running gets measured. Services that exit meanwhile
    are started again. Returns when the submitting ended (wall clock), None if it did not."""
    t0 = time.time()
    submit_done: list[float] = []

    async def submit_all() -> None:
        if rate is None:
            await submit(js, manifests, on_ack=lambda i, _dup, _t: tracker.submitted(manifests[i].key))
        else:
            await _submit_at_rate(js, manifests, tracker, rate)
        submit_done.append(time.time())

    def show(counts: Counter[PodPhase | None], unschedulable: int, *, force: bool = False) -> None:
        text = status_line(counts, len(manifests), tracker.rate(), time.time() - t0)
        if unschedulable:
            text = text.replace("  |  ", f" ({unschedulable} unschedulable)  |  ", 1)
        line.show(label + text, force=force)

    submitting = asyncio.create_task(submit_all())
    try:
        counts = await tracker.poll(skip=_SETTLED)
        unschedulable = 0
        confirm_at: float | None = None
        while True:
            if submitting.done() and submitting.exception() is not None:
                raise submitting.exception()  # type: ignore[misc]
            placed = sum(counts.get(p, 0) for p in _PLACED)
            if until_unschedulable:
                unschedulable = sum(1 for p in tracker.pods.values() if _unschedulable(p))
            show(counts, unschedulable)
            if time.monotonic() > deadline:
                break
            if placed + unschedulable >= len(manifests):
                # Every pod is accounted for. An unschedulable one might yet be placed (a refused
                # reservation is retried after its backoff): believe it after a quiet spell only.
                if not unschedulable:
                    break
                if confirm_at is None:
                    confirm_at = time.monotonic() + _CONFIRM_UNSCHEDULABLE
                elif time.monotonic() >= confirm_at:
                    break
            else:
                confirm_at = None
            for service in cluster.group.failed():
                line.done()
                report_exit(service, restarting=True)
                service.start()
            await asyncio.sleep(0.5)
            counts = await tracker.poll(skip=_SETTLED)
        while sum(counts.get(p, 0) for p in _SETTLED) < tracker.placed() and time.monotonic() < deadline:
            show(counts, unschedulable)
            await asyncio.sleep(0.5)
            counts = await tracker.poll(skip=_SETTLED)
        show(counts, unschedulable, force=True)
        line.done()
    finally:
        if not submitting.done():
            submitting.cancel()
    return submit_done[0] if submit_done else None


async def _load(
    cluster: Cluster, store: ClusterState, args: argparse.Namespace, plan: BenchPlan, profiles: Sequence[str]
) -> JSONObject:
    w = plan.constraints
    if w is None:
        objects = mixed_workload(plan.pods, seed=args.seed, namespace="bench", prefix="b", profiles=profiles)
        init_objects: list[JSONObject] = []
    else:
        init_objects, objects = pod_constraint_pods(w, plan.init_pods, plan.pods, profiles=profiles)
    manifests = pod_manifests(objects, source="bench workload")
    init_manifests = pod_manifests(init_objects, source="bench init pods")
    line = LiveLine(sys.stderr if args.output == "json" else sys.stdout)
    pids = _processes(cluster)
    deadline = time.monotonic() + args.timeout
    init: JSONObject | None = None
    init_pods: list[PodTimes] = []
    async with open_bus(cluster.settings, "kubus-bench") as (nc, js):
        if init_manifests:
            init_tracker = PodTracker(store, [(m.key, m.uid) for m in init_manifests])
            await init_tracker.follow_events(nc)
            began = time.time()
            try:
                await _follow(
                    cluster, js, init_tracker, init_manifests, line, deadline=deadline, until_unschedulable=True,
                    label="init pods: ",
                )  # fmt: skip
            finally:
                await init_tracker.close()
            await init_tracker.poll()  # every record once more: the nodes, for the constraint check
            init_pods = list(init_tracker.pods.values())
            init = {
                "pods": len(init_pods),
                "bound": sum(1 for p in init_pods if p.bound),
                "unschedulable": sum(1 for p in init_pods if _unschedulable(p)),
                "seconds": round(time.time() - began, 2),
            }
        tracker = PodTracker(store, [(m.key, m.uid) for m in manifests])
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await tracker.follow_events(nc)
        t0 = time.time()
        try:
            submit_end = await _follow(
                cluster, js, tracker, manifests, line, deadline=deadline, until_unschedulable=w is not None,
                label="measured: " if w is not None else "", rate=args.rate,
            )  # fmt: skip
            cpu = _cpu_used(cpu_before, pids)
            memory = {name: peak for name, pid in pids.items() if (peak := peak_memory(pid)) is not None}
            wall = time.time() - t0
        finally:
            await tracker.close()
    await tracker.poll()  # every record once more, after the measurement: accepted times, nodes, reasons
    pods = list(tracker.pods.values())
    bound_at = [p.bound for p in pods if p.bound]
    first_submit = min((p.submitted for p in pods if p.submitted), default=t0)
    last_bound = max(bound_at, default=time.time())
    span = last_bound - first_submit
    submit_s = (submit_end or time.time()) - t0
    lat = tracker.latencies("submitted", "bound")
    stages = {
        "submit -> accepted": tracker.latencies("submitted", "accepted"),
        "accepted -> bound": tracker.latencies("accepted", "bound"),
        "bound -> running": tracker.latencies("bound", "running"),
    }
    unschedulable = [p for p in pods if _unschedulable(p)] if w is not None else []
    pending = [p for p in pods if p.phase not in _PLACED and not (w is not None and _unschedulable(p))]
    rate = round(len(bound_at) / span, 1) if bound_at and span > 0 else None
    check = None
    if w is not None:
        node_labels = {r.name: r.labels for r in await store.list_nodes()}
        preempted = 0
        if w.plugin == "DefaultPreemption":
            records = await store.get_pods(p.uid for p in init_pods)
            preempted = sum(1 for r in records if r is not None and r.phase is PodPhase.DELETED)
        check = constraint_check(w, init_pods, pods, node_labels, preempted=preempted)
    return {
        "workload": plan.workload,
        "kube_workload": w.kube_name if w else None,
        "nodes": plan.nodes,
        "pods": plan.pods,
        "init_pods": plan.init_pods,
        "init": init,
        "batch_size": args.batch_size,
        "profiles": args.profiles,
        "binders": args.binders,
        "bound": len(bound_at),
        "unschedulable": len(unschedulable),
        "unschedulable_message": unschedulable[0].message if unschedulable else None,
        "seconds": round(span, 3),
        "pods_per_second": rate,
        "offered_pods_per_second": args.rate,
        "bound_per_second": bound_per_second(bound_at, first_submit),
        "kube_pods_per_second": w.kube_pods_per_second if w else None,
        "vs_kube": round(rate / w.kube_pods_per_second, 2) if w and rate else None,
        "submit_seconds": round(submit_s, 3),
        "submit_per_second": round(len(manifests) / submit_s, 1) if submit_s > 0 else None,
        "latency": {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat, default=None)},
        "stages": {name: {"p50": percentile(v, 50), "p99": percentile(v, 99)} for name, v in stages.items()},
        "cpu_seconds": cpu,
        "peak_memory_bytes": memory,
        "cpu_wall_seconds": round(wall, 3),
        "constraint_check": check,
        "not_bound": [
            {"pod": p.key, "phase": str(p.phase), "reason": p.reason, "message": p.message} for p in pending[:20]
        ],
    }


def constraint_check(
    workload: PodConstraintWorkload,
    init_pods: Sequence[PodTimes],
    measured_pods: Sequence[PodTimes],
    node_labels: Mapping[str, Mapping[str, str]],
    *,
    preempted: int = 0,
) -> JSONObject:
    """Whether the pods were placed as kube's constraint says they must be: ``{"ok", "check"}``
    (the check in words, with what was found). ``node_labels``: node name -> its labels;
    ``preempted``: init pods evicted (preemption-basic)."""
    placed_init = [p for p in init_pods if p.bound and p.node]
    placed = [p for p in measured_pods if p.bound and p.node]
    if workload.name == "pod-anti-affinity":
        per_node = Counter(p.node for p in [*placed_init, *placed])
        most = max(per_node.values(), default=0)
        return {"ok": most <= 1, "check": f"at most one color=green pod per node (most on one node: {most})"}
    if workload.name == "preemption-basic":
        # A 3-cpu pod fits a 4-cpu node only once its three 900m pods are gone: with the cluster
        # full of init pods, every measured pod must have evicted three (fewer nodes than init
        # pods / 4 leaves room without preempting: no longer kube's workload).
        return {
            "ok": len(placed) == len(measured_pods) and preempted >= 3 * len(placed),
            "check": f"every high-priority pod bound ({len(placed)}/{len(measured_pods)}) by preempting "
            f"three low-priority pods ({preempted} preempted)",
        }
    if workload.name == "pod-affinity":
        zones = Counter(node_labels.get(p.node, {}).get(ZONE_LABEL) for p in [*placed_init, *placed])
        found = ", ".join(f"{z or '(no zone)'}: {n}" for z, n in sorted(zones.items(), key=lambda kv: str(kv[0])))
        ok = None not in zones and len(zones) <= 1
        return {"ok": ok, "check": f"every color=blue pod in one zone ({found or 'none placed'})"}
    # topology spreading: the measured (color=blue) pods per zone, every zone of the nodes counted
    per_zone: Counter[str | None] = Counter(
        {z: 0 for labels in node_labels.values() if (z := labels.get(ZONE_LABEL)) is not None}
    )
    per_zone.update(node_labels.get(p.node, {}).get(ZONE_LABEL) for p in placed)
    counts = [n for z, n in per_zone.items() if z is not None]
    skew = max(counts) - min(counts) if counts else 0
    found = ", ".join(f"{z or '(no zone)'}: {n}" for z, n in sorted(per_zone.items(), key=lambda kv: str(kv[0])))
    hard = workload.measured.spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    if not hard:
        return {"ok": True, "check": f"color=blue pods per zone, skew {skew} (ScheduleAnyway: not enforced; {found})"}
    ok = None not in per_zone and skew <= _MAX_SKEW
    return {"ok": ok, "check": f"color=blue pods per zone within maxSkew {_MAX_SKEW}: skew {skew} ({found})"}


def _report(result: JSONObject, args: argparse.Namespace, out: TextIO) -> None:
    if args.output == "json":
        out.write(codec.dumps(result, pretty=True).decode() + "\n")
        return
    lat = result["latency"]
    constraints = result["kube_workload"] is not None
    workload = result["workload"] + (f" (scheduler_perf {result['kube_workload']})" if constraints else "")
    rows = [["METRIC", "VALUE"], ["workload", workload], ["nodes", str(result["nodes"])]]
    init = result["init"]
    if init is not None:
        what = f"{init['bound']}/{init['pods']} bound in {init['seconds']:.1f}s"
        if init["unschedulable"]:
            what += f", {init['unschedulable']} unschedulable"
        rows.append(["init pods (not measured)", what])
    rows.append(["pods bound", f"{result['bound']}/{result['pods']}"])
    if constraints:
        rows.append(["pods unschedulable", str(result["unschedulable"])])
        if result["unschedulable_message"]:
            rows.append(["  why (one of them)", result["unschedulable_message"]])
    rate = result["pods_per_second"]
    rows.append(["throughput (first submit -> last bind)", f"{rate} pods/s over {result['seconds']:.1f}s"])
    if constraints:
        kube = result["kube_pods_per_second"]
        ratio = f"kubus {result['vs_kube']:.2f}x" if result["vs_kube"] is not None else "kubus -"
        rows.append(["kube-scheduler (2 cores, scheduler_perf)", f"{kube:g} pods/s; {ratio}"])
    offered = result.get("offered_pods_per_second")
    submitted = "offered load" if offered else "submit rate (JetStream acks)"
    rows += [
        [
            submitted,
            f"{result['submit_per_second']} pods/s over {result['submit_seconds']:.1f}s"
            + (f" (asked for {offered:g})" if offered else ""),
        ],
        ["submit -> bound p50 / p99 / max", f"{_ms(lat['p50'])} / {_ms(lat['p99'])} / {_ms(lat['max'])}"],
    ]
    for name, s in result["stages"].items():
        rows.append([f"  {name} p50 / p99", f"{_ms(s['p50'])} / {_ms(s['p99'])}"])
    rows.append(["cluster start (servers, services, nodes)", f"{result['ready_seconds']:.1f}s"])
    wall = result["cpu_wall_seconds"]
    rows.append([f"CPU seconds over the {wall:.1f}s run (share of one core), peak memory", ""])
    memory = result["peak_memory_bytes"]
    for name, seconds in sorted(result["cpu_seconds"].items(), key=lambda kv: -kv[1]):
        cell = f"{seconds:.1f}s ({seconds / wall:.0%})" if wall > 0 else f"{seconds:.1f}s"
        if name in memory:
            cell += f", {memory[name] / 2**20:.0f} MiB"
        rows.append([f"  {name}", cell])
    rows.append(["  total", f"{sum(result['cpu_seconds'].values()):.1f}s of {wall * (os.cpu_count() or 1):.0f}s"])
    for plugin in result["plugins_missing"]:
        rows.append(["profile lacks", f"{plugin}: the constraints were not enforced"])
    check = result["constraint_check"]
    if check is not None:
        rows.append(["kube's outcome", ("holds: " if check["ok"] else "VIOLATED: ") + check["check"]])
    violations = result["invariant_violations"]
    rows.append(["invariants", "hold" if not violations else f"{len(violations)} VIOLATED"])
    out.write("\n")
    write_table(rows, out)
    for v in violations[:20]:
        out.write(f"  violation: {v}\n")
    for p in result["not_bound"]:
        out.write(f"  not bound: {p['pod']} {p['phase']} {p['reason']} {p['message']}\n")
