"""`kubus up --demo`: a mixed GPU/CPU workload through the running cluster, live, then a summary.

The workload (`kubus.cli.workload.mixed_workload`, plus two pods no node can take) goes into a
fresh namespace ``demo-<random>``, so a demo never collides with an earlier one in the same data
dir. Progress is one status line (pending / reserved / bound / running / finished, pods bound per
second); at the end a table per kind of pod with submit-to-bound latency, and the pending pods
with kube's reason and the command that explains them.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from collections import Counter

from kubus.cli.cluster import pod_manifests, submit, write_table
from kubus.cli.commands import scheduler_config
from kubus.cli.connect import open_bus
from kubus.cli.describe import describe_pod
from kubus.cli.progress import LiveLine, PodTimes, PodTracker, percentile, sleep_or, status_line
from kubus.cli.up import Cluster, report_exit
from kubus.cli.workload import KIND_LABEL, impossible_pods, mixed_workload
from kubus.kernels.backend import NUMPY
from kubus.store.cluster_state import ClusterState
from kubus.store.records import PodPhase

__all__ = ["run_demo"]

_FINISHED = (PodPhase.SUCCEEDED, PodPhase.FAILED)
_PLACED = (PodPhase.BOUND, PodPhase.RUNNING, *_FINISHED)


def _seconds(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


async def run_demo(
    cluster: Cluster,
    store: ClusterState,
    stop: asyncio.Event,
    *,
    pods: int,
    timeout: float = 600.0,
    pods_finish: bool = True,
    pod_duration: float | None = None,
) -> int:
    """Submit the demo workload, show progress until every pod that can run has finished (or
    is running, when ``pods_finish`` is False) and the impossible ones are pending with a
    reason; print the summary. 0 when it completed, 1 on timeout or interrupt."""
    namespace = f"demo-{secrets.token_hex(3)}"
    objects = mixed_workload(pods, seed=int(time.time()), namespace=namespace, prefix="demo", profiles=cluster.profiles)
    objects += impossible_pods(namespace, prefix="demo")
    kinds = {f"{namespace}/{o['metadata']['name']}": o["metadata"]["labels"][KIND_LABEL] for o in objects}
    manifests = pod_manifests(objects, source="demo workload")
    tracker = PodTracker(store, [(m.key, m.uid) for m in manifests])
    line = LiveLine(sys.stdout)
    started = time.time()
    print(
        f"demo: {len(manifests)} pods into namespace {namespace} "
        f"({', '.join(f'{n} {k}' for k, n in sorted(Counter(kinds.values()).items()))})",
        flush=True,
    )
    completed = False
    async with open_bus(cluster.settings, "kubus-demo") as (nc, js):
        await tracker.follow_events(nc)
        submitting = asyncio.create_task(
            submit(js, manifests, on_ack=lambda i, _dup, _t: tracker.submitted(manifests[i].key))
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                counts = await tracker.poll()
                line.show(status_line(counts, len(manifests), tracker.rate(), time.time() - started))
                if submitting.done() and submitting.exception() is not None:
                    raise submitting.exception()  # type: ignore[misc]
                if _settled(tracker, kinds, pods_finish):
                    completed = True
                    break
                for service in cluster.group.failed():
                    line.done()
                    report_exit(service, restarting=True)
                    service.start()
                if time.monotonic() > deadline:
                    line.done()
                    print(f"demo: not finished after {timeout:g}s", file=sys.stderr)
                    break
                if await sleep_or(stop, 0.5):
                    line.done()
                    print("demo: interrupted", file=sys.stderr)
                    break
        finally:
            if not submitting.done():
                submitting.cancel()
            await tracker.close()
        counts = await tracker.poll()
        line.show(status_line(counts, len(manifests), tracker.rate(), time.time() - started), force=True)
        line.done()
    pending = _summary(tracker, kinds, namespace, time.time() - started)
    _bounds(cluster.nodes, pod_duration)
    if pending:
        # The "why is my pod pending" answer, while the cluster still runs.
        name = pending[0].key.partition("/")[2]
        print(f"\n$ kubus describe pod {name} -n {namespace}")
        await describe_pod(
            cluster.settings,
            sys.stdout,
            namespace=namespace,
            name=name,
            config=scheduler_config(cluster.config),
            backend=NUMPY,
        )
    sys.stdout.flush()
    return 0 if completed else 1


def _bounds(nodes: int, pod_duration: float | None) -> None:
    """Say what bounds the demo's throughput, so that it is not read against `kubus bench`."""
    runs = f"{pod_duration:g} s" if pod_duration else "until deleted"
    print(
        f"what bounds this rate: the workload, not the scheduler. Each pod runs {runs} on {nodes} simulated "
        f"nodes of 8 GPUs; the GPU pods wait for GPUs that running pods hold, so pods are bound about as fast "
        "as earlier ones finish. `kubus bench` (no finishing pods, 1,000+ nodes) measures the scheduler: "
        "the README's table."
    )


def _settled(tracker: PodTracker, kinds: dict[str, str], pods_finish: bool) -> bool:
    done = _FINISHED if pods_finish else _PLACED
    for key, pod in tracker.pods.items():
        if kinds[key] == "impossible":
            if pod.phase is not PodPhase.PENDING or not pod.reason:
                return False
        elif pod.phase not in done:
            return False
    return True


def _summary(tracker: PodTracker, kinds: dict[str, str], namespace: str, elapsed: float) -> list[PodTimes]:
    """Print the summary; return the pods still pending."""
    rows = [["KIND", "PODS", "FINISHED", "RUNNING", "BOUND", "PENDING", "SUBMIT->BOUND p50", "p99"]]
    by_kind: dict[str, list[str]] = {}
    for key, kind in kinds.items():
        by_kind.setdefault(kind, []).append(key)
    for kind, keys in [*sorted(by_kind.items()), ("all", list(kinds))]:
        pods = [tracker.pods[k] for k in keys]
        lat = tracker.latencies("submitted", "bound", keys)
        rows.append(
            [
                kind,
                str(len(pods)),
                str(sum(1 for p in pods if p.phase in _FINISHED)),
                str(sum(1 for p in pods if p.phase is PodPhase.RUNNING)),
                str(sum(1 for p in pods if p.phase is PodPhase.BOUND)),
                str(sum(1 for p in pods if p.phase in (PodPhase.PENDING, PodPhase.RESERVED, None))),
                _seconds(percentile(lat, 50)),
                _seconds(percentile(lat, 99)),
            ]
        )
    print(f"\ndemo summary: namespace {namespace}, {len(kinds)} pods, {elapsed:.1f}s")
    write_table(rows, sys.stdout)
    bound_times = [p.bound for p in tracker.pods.values() if p.bound]
    submit_times = [p.submitted for p in tracker.pods.values() if p.submitted]
    if bound_times and submit_times:
        span = max(bound_times) - min(submit_times)
        rate = len(bound_times) / span if span > 0 else float("inf")
        print(f"throughput: {len(bound_times)} pods bound in {span:.1f}s ({rate:.1f} pods/s)")
    pending = [p for p in tracker.pods.values() if p.phase is PodPhase.PENDING]
    if pending:
        print("pending:")
        rows = [[f"  {p.key}", p.reason or "-", p.message or "-"] for p in pending[:10]]
        write_table(rows, sys.stdout)
    sys.stdout.flush()
    return pending
