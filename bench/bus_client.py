"""Client CPU per JetStream message, kubus' bus helpers against nats-py's own, alternating in one
process on uvloop, against an embedded NATS server:

- publish: `kubus.bus.publish_durable_many` (its own ack inbox) against nats-py's
  ``publish_async`` per message with one wait for all acks (what it did before);
- fetch: `kubus.bus.PullConsumer.fetch` (what the queue, the binder and the agents fetch with)
  against nats-py's ``PullSubscription.fetch``.

Each round publishes 256 messages of 1.2 kB (timed as publish) and fetches them in batches of
64, the binder's batch (timed as fetch), acking each (not timed).

    python bench/bus_client.py                     # 3 alternations of 60 rounds
    python bench/bus_client.py --rounds 100 --alternations 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from typing import Any

import nats
import uvloop

from kubus.bus import MSG_ID_HEADER, Publication, PullConsumer, publish_durable_many
from kubus.cli.embedded import EmbeddedServers

BATCH = 64
PAYLOAD = b"x" * 1200


async def _nats_py_publish(js: Any, messages: list[Publication]) -> None:
    futures = [await js.publish_async(m.subject, m.payload, headers={MSG_ID_HEADER: m.msg_id}) for m in messages]
    await asyncio.wait(futures, timeout=5)
    for future in futures:
        future.result()


async def _kubus_publish(js: Any, messages: list[Publication]) -> None:
    await publish_durable_many(js, messages, timeout=5)


async def _cpu_per_message(js: Any, publish: Any, sub: Any, rounds: int, tag: str) -> tuple[float, float]:
    """CPU seconds per message published, and per message fetched."""
    published, fetched, n = 0.0, 0.0, 0
    for i in range(rounds):
        messages = [Publication(f"pullbench.{j % 16}", PAYLOAD, f"{tag}-{i}-{j}") for j in range(4 * BATCH)]
        began = time.process_time()
        await publish(js, messages)
        published += time.process_time() - began
        got = 0
        while got < len(messages):
            began = time.process_time()
            batch = await sub.fetch(BATCH, timeout=5)
            fetched += time.process_time() - began
            got += len(batch)
            for msg in batch:
                await msg.ack()
        n += got
    return published / n, fetched / n


async def _measure(nats_url: str, rounds: int, alternations: int) -> dict[str, list[tuple[float, float]]]:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="PULLBENCH", subjects=["pullbench.>"])
    pull = await PullConsumer(nc, "PULLBENCH", "pullbench").subscribe()
    clients = {
        "nats-py": (_nats_py_publish, await js.pull_subscribe("pullbench.>", durable="pullbench")),
        "kubus.bus": (_kubus_publish, pull),
    }
    await _cpu_per_message(js, _nats_py_publish, clients["nats-py"][1], 5, "warm")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
    for n in range(alternations):
        for name, (publish, sub) in clients.items():
            results[name].append(await _cpu_per_message(js, publish, sub, rounds, f"{name}-{n}"))
    await pull.unsubscribe()
    await js.delete_stream("PULLBENCH")
    await nc.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="rounds of 4 x 64 messages per measurement (60)")
    parser.add_argument("--alternations", type=int, default=3, help="nats-py/kubus.bus pairs (3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kubus-pullbench-") as data:
        servers = EmbeddedServers(data)
        servers.start_sync()
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                results = runner.run(_measure(servers.nats_url, args.rounds, args.alternations))
        finally:
            servers.stop_sync()
    print(f"{'client':10} {'step':8} {'us/message (median)':>20} {'runs':>24} {'vs nats-py':>11}")
    for step, index in (("publish", 0), ("fetch", 1)):
        base = statistics.median(r[index] for r in results["nats-py"])
        for name, values in results.items():
            median = statistics.median(r[index] for r in values)
            runs = " ".join(f"{r[index] * 1e6:.1f}" for r in values)
            print(f"{name:10} {step:8} {median * 1e6:20.1f} {runs:>24} {median / base:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
