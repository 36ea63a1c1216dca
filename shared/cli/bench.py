"""`kubus bench`: the whole system under load, measured from the outside.

Embedded servers, every service as its own process (as `kubus up` runs them) and N simulated
nodes whose pods run until deleted (so the end state is quiet and checkable). P pods of the mixed
workload are submitted as fast as JetStream takes them; the bench follows them until every one
is bound, then reports:

- throughput: pods bound per second, first submit to last bind, and the submit rate alone;
- submit-to-bound latency (p50, p99, max) per pod: its JetStream ack to its pod.bound event;
- time per stage: submit → accepted (the queue stored it: the record's created_at), accepted
  → bound, bound → running (the agent started it);
- CPU seconds each process spent while the pods flowed (services, servers and the bench
  itself, which shares the machine): where the time goes;
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubus import codec
from kubus.cli.cluster import pod_manifests, submit, write_table
from kubus.cli.connect import UsageError, open_bus, open_state
from kubus.cli.progress import LiveLine, PodTracker, percentile, status_line
from kubus.cli.up import check_template, report_exit, start_cluster, wait_ready
from kubus.cli.workload import gpu_scheduler_config, mixed_workload
from kubus.embedded import ServerStartError
from kubus.store.cluster_state import ClusterState
from kubus.store.invariants import check_invariants
from kubus.store.records import PodPhase

__all__ = ["check_invariants_settled", "profile_names", "run_bench"]

_PLACED = (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED)
_SETTLED = frozenset({PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED})
"""Phases a bench pod (which runs until deleted) does not leave: not read again once seen."""


def profile_names(count: int) -> list[str]:
    """``default-scheduler`` then ``profile-1`` ... ``profile-<count-1>``."""
    return ["default-scheduler", *(f"profile-{i}" for i in range(1, count))]


async def check_invariants_settled(state: ClusterState, timeout: float = 15.0) -> list[str]:
    """check_invariants until it comes back clean or ``timeout`` passes; the last violations.

    A step between two scripts (a pod finished but its reservation not yet released) reads as a
    violation for a moment; a real violation stays."""
    deadline = time.monotonic() + timeout
    while True:
        violations = await check_invariants(state)
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


def _processes(cluster: Any) -> dict[str, int]:
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


async def run_bench(args: argparse.Namespace) -> int:
    """`kubus bench`; see the module docstring. 0 when every pod was bound and the invariants
    hold, 1 otherwise."""
    for flag, value in (
        ("--nodes", args.nodes),
        ("--pods", args.pods),
        ("--batch-size", args.batch_size),
        ("--profiles", args.profiles),
        ("--binders", args.binders),
    ):
        if value < 1:
            raise UsageError(f"{flag}: expected 1 or more, got {value}")
    if args.node_template:
        check_template(args.node_template, Path("."), args.nodes)  # a bad template: exit 2, nothing made
    keep = args.data_dir is not None
    directory = Path(args.data_dir).resolve() if keep else Path(tempfile.mkdtemp(prefix="kubus-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    profiles = profile_names(args.profiles)
    config_path = directory / "scheduler-config.yaml"
    config_path.write_text(gpu_scheduler_config(profiles))
    template = check_template(args.node_template, directory, args.nodes)
    out = sys.stdout
    # Progress goes to stderr with -o json, so stdout is the JSON document alone.
    progress = sys.stderr if args.output == "json" else sys.stdout
    print(
        f"kubus bench: {args.nodes} nodes, {args.pods} pods, batch {args.batch_size}, "
        f"{args.profiles} profile(s), {args.binders} binder(s), {os.cpu_count()} CPUs; data in {directory}",
        file=progress,
        flush=True,
    )
    started = time.time()
    try:
        cluster = await start_cluster(
            directory,
            config=str(config_path),
            profiles=profiles,
            nodes=args.nodes,
            node_template=template,
            binders=args.binders,
            pod_duration=0.0,
            batch_size=args.batch_size,
            log_level="warning",
        )
    except ServerStartError as exc:
        sys.stderr.write(f"kubus bench: the embedded servers did not start: {exc}\n")
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        return 1
    try:
        async with open_state(cluster.settings) as state:
            failed = await wait_ready(cluster, state, timeout=120 + args.nodes / 50, since=started)
            for service in failed:
                report_exit(service, restarting=False)
            if failed:
                return 1
            ready_s = time.time() - started
            print(f"ready in {ready_s:.1f}s", file=progress, flush=True)
            result = await _load(cluster, state, args, profiles)
            result["ready_seconds"] = round(ready_s, 2)
            violations = await check_invariants_settled(state)
            result["invariant_violations"] = violations
    finally:
        await cluster.stop()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    _report(result, args, out)
    ok = result["bound"] == args.pods and not result["invariant_violations"]
    return 0 if ok else 1


async def _load(cluster: Any, state: ClusterState, args: argparse.Namespace, profiles: Sequence[str]) -> dict[str, Any]:
    objects = mixed_workload(args.pods, seed=args.seed, namespace="bench", prefix="b", profiles=profiles)
    manifests = pod_manifests(objects, source="bench workload")
    tracker = PodTracker(state, [(m.key, m.uid) for m in manifests])
    line = LiveLine(sys.stderr if args.output == "json" else sys.stdout)
    pids = _processes(cluster)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    async with open_bus(cluster.settings, "kubus-bench") as (nc, js):
        await tracker.follow_events(nc)
        t0 = time.time()
        submit_done: list[float] = []

        async def submit_all() -> None:
            await submit(js, manifests, on_ack=lambda i, _dup, _t: tracker.submitted(manifests[i].key))
            submit_done.append(time.time())

        submitting = asyncio.create_task(submit_all())
        deadline = time.monotonic() + args.timeout
        counts = await tracker.poll(skip=_SETTLED)
        try:
            while True:
                if submitting.done() and submitting.exception() is not None:
                    raise submitting.exception()  # type: ignore[misc]
                placed = sum(counts.get(p, 0) for p in _PLACED)
                line.show(status_line(counts, len(manifests), tracker.rate(), time.time() - t0))
                if placed == len(manifests) or time.monotonic() > deadline:
                    break
                for service in cluster.group.failed():
                    line.done()
                    report_exit(service, restarting=True)
                    service.start()
                await asyncio.sleep(0.5)
                counts = await tracker.poll(skip=_SETTLED)
            # Then until the agents have started them all: the state is quiet only then (the
            # invariants are read while nothing moves), and bound -> running gets measured.
            while sum(counts.get(p, 0) for p in _SETTLED) < len(manifests) and time.monotonic() < deadline:
                line.show(status_line(counts, len(manifests), tracker.rate(), time.time() - t0))
                await asyncio.sleep(0.5)
                counts = await tracker.poll(skip=_SETTLED)
            line.show(status_line(counts, len(manifests), tracker.rate(), time.time() - t0), force=True)
            line.done()
            cpu = _cpu_used(cpu_before, pids)
            wall = time.time() - t0
        finally:
            if not submitting.done():
                submitting.cancel()
            await tracker.close()
    pods = list(tracker.pods.values())
    bound_at = [p.bound for p in pods if p.bound]
    first_submit = min((p.submitted for p in pods if p.submitted), default=t0)
    last_bound = max(bound_at, default=time.time())
    span = last_bound - first_submit
    submit_s = (submit_done[0] if submit_done else time.time()) - t0
    lat = tracker.latencies("submitted", "bound")
    stages = {
        "submit -> accepted": tracker.latencies("submitted", "accepted"),
        "accepted -> bound": tracker.latencies("accepted", "bound"),
        "bound -> running": tracker.latencies("bound", "running"),
    }
    pending = [p for p in pods if p.phase not in _PLACED]
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "batch_size": args.batch_size,
        "profiles": args.profiles,
        "binders": args.binders,
        "bound": len(bound_at),
        "seconds": round(span, 3),
        "pods_per_second": round(len(bound_at) / span, 1) if span > 0 else None,
        "submit_seconds": round(submit_s, 3),
        "submit_per_second": round(len(manifests) / submit_s, 1) if submit_s > 0 else None,
        "latency": {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat, default=None)},
        "stages": {name: {"p50": percentile(v, 50), "p99": percentile(v, 99)} for name, v in stages.items()},
        "cpu_seconds": cpu,
        "cpu_wall_seconds": round(wall, 3),
        "not_bound": [
            {"pod": p.key, "phase": str(p.phase), "reason": p.reason, "message": p.message} for p in pending[:20]
        ],
    }


def _report(result: dict[str, Any], args: argparse.Namespace, out: Any) -> None:
    if args.output == "json":
        out.write(codec.dumps(result, pretty=True).decode() + "\n")
        return
    lat = result["latency"]
    rows = [
        ["METRIC", "VALUE"],
        ["pods bound", f"{result['bound']}/{result['pods']}"],
        ["throughput (first submit -> last bind)", f"{result['pods_per_second']} pods/s over {result['seconds']:.1f}s"],
        ["submit rate (JetStream acks)", f"{result['submit_per_second']} pods/s over {result['submit_seconds']:.1f}s"],
        ["submit -> bound p50 / p99 / max", f"{_ms(lat['p50'])} / {_ms(lat['p99'])} / {_ms(lat['max'])}"],
    ]
    for name, s in result["stages"].items():
        rows.append([f"  {name} p50 / p99", f"{_ms(s['p50'])} / {_ms(s['p99'])}"])
    rows.append(["cluster start (servers, services, nodes)", f"{result['ready_seconds']:.1f}s"])
    wall = result["cpu_wall_seconds"]
    rows.append([f"CPU seconds over the {wall:.1f}s run (share of one core)", ""])
    for name, seconds in sorted(result["cpu_seconds"].items(), key=lambda kv: -kv[1]):
        rows.append([f"  {name}", f"{seconds:.1f}s ({seconds / wall:.0%})" if wall > 0 else f"{seconds:.1f}s"])
    rows.append(["  total", f"{sum(result['cpu_seconds'].values()):.1f}s of {wall * (os.cpu_count() or 1):.0f}s"])
    violations = result["invariant_violations"]
    rows.append(["invariants", "hold" if not violations else f"{len(violations)} VIOLATED"])
    out.write("\n")
    write_table(rows, out)
    for v in violations[:20]:
        out.write(f"  violation: {v}\n")
    for p in result["not_bound"]:
        out.write(f"  not bound: {p['pod']} {p['phase']} {p['reason']} {p['message']}\n")
