"""The client's CPU per write to a real kube-apiserver: aiohttp against the pipelined lanes.

Creates ``--requests`` events.k8s.io Events (a scheduler's per-pod write, with bindings) with
``--concurrency`` in flight, through `KubeClient` with its writes on aiohttp (``write_lanes=0``)
and on `kubus.kubeapi.lanes` (``write_lanes=4``), alternately ``--rounds`` times in one process,
and prints the client's CPU µs per request and the requests per second.

    python bench/kube_requests.py [--requests 5000] [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube_support import KubeApiServer, kube_binaries

from kubus.kubeapi import EVENTS, NAMESPACES, KubeClient


def event(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"p{i}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "eventTime": "2026-11-27T13:00:00.000000Z",
        "type": "Normal",
        "reason": "Scheduled",
        "action": "Scheduling",
        "note": f"Successfully assigned {namespace}/p{i} to node-00001",
        "reportingController": "kubus",
        "reportingInstance": "kubus-bench",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": f"p{i}", "uid": "u"},
    }


async def one_round(client: KubeClient, namespace: str, requests: int, concurrency: int) -> tuple[float, float]:
    slots = asyncio.Semaphore(concurrency)
    bodies = [event(namespace, i) for i in range(requests)]

    async def one(body: dict[str, Any]) -> None:
        async with slots:
            await client.create(EVENTS, body, namespace=namespace)

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*map(one, bodies))
    return (time.process_time() - cpu) / requests, requests / (time.monotonic() - wall)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch, KubeApiServer(kube_binaries(), Path(scratch)) as server:
        results: dict[str, list[tuple[float, float]]] = {"aiohttp": [], "lanes": []}
        clients = {
            "aiohttp": KubeClient(server.config(), qps=0, burst=0),
            "lanes": KubeClient(server.config(), qps=0, burst=0, write_lanes=4),
        }
        await clients["aiohttp"].create(NAMESPACES, {"metadata": {"name": "bench"}})
        for client in clients.values():  # connections open, code warm
            await one_round(client, "bench", 200, args.concurrency)
        for _ in range(args.rounds):
            for name, client in clients.items():
                results[name].append(await one_round(client, "bench", args.requests, args.concurrency))
        for client in clients.values():
            await client.close()
    print(f"{args.requests} event creates, {args.concurrency} in flight, median of {args.rounds} rounds:")
    print("| writes through | client CPU µs/request | requests/s |")
    print("|---|---|---|")
    for name, rows in results.items():
        cpu = statistics.median(r[0] for r in rows)
        rate = statistics.median(r[1] for r in rows)
        print(f"| {name} | {cpu * 1e6:.0f} | {rate:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import uvloop  # as the services run

    uvloop.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
