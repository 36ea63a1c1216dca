"""Client CPU per message fetched from a durable JetStream pull consumer: nats-py's
``PullSubscription.fetch`` against `kubus.bus.pull.PullConsumer` (what the queue, the binder and
the agents fetch with), alternating in one process on uvloop, against an embedded NATS server.

Each round publishes 4 batches of messages of 1.2 kB and fetches them in batches of 64 (the
binder's batch), acking each; only the fetch calls are timed.

    python bench/pull_fetch.py                     # 3 alternations of 60 rounds
    python bench/pull_fetch.py --rounds 100 --alternations 5
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

from kubus.bus import Publication, PullConsumer, publish_durable_many
from kubus.embedded import EmbeddedServers

BATCH = 64
PAYLOAD = b"x" * 1200


async def _cpu_per_message(js: Any, sub: Any, rounds: int, tag: str) -> float:
    spent, fetched = 0.0, 0
    for i in range(rounds):
        messages = [Publication(f"pullbench.{j % 16}", PAYLOAD, f"{tag}-{i}-{j}") for j in range(4 * BATCH)]
        await publish_durable_many(js, messages)
        got = 0
        while got < len(messages):
            began = time.process_time()
            batch = await sub.fetch(BATCH, timeout=5)
            spent += time.process_time() - began
            got += len(batch)
            for msg in batch:
                await msg.ack()
        fetched += got
    return spent / fetched


async def _measure(nats_url: str, rounds: int, alternations: int) -> dict[str, list[float]]:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="PULLBENCH", subjects=["pullbench.>"])
    subs = {
        "nats-py fetch": await js.pull_subscribe("pullbench.>", durable="pullbench"),
        "PullConsumer": await PullConsumer(nc, "PULLBENCH", "pullbench").subscribe(),
    }
    await _cpu_per_message(js, subs["nats-py fetch"], 5, "warm")
    results: dict[str, list[float]] = {name: [] for name in subs}
    for n in range(alternations):
        for name, sub in subs.items():
            results[name].append(await _cpu_per_message(js, sub, rounds, f"{name}-{n}"))
    await subs["PullConsumer"].unsubscribe()
    await js.delete_stream("PULLBENCH")
    await nc.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="rounds of 4 x 64 messages per measurement (60)")
    parser.add_argument("--alternations", type=int, default=3, help="nats-py/PullConsumer pairs (3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kubus-pullbench-") as data:
        servers = EmbeddedServers(data)
        servers.start_sync()
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                results = runner.run(_measure(servers.nats_url, args.rounds, args.alternations))
        finally:
            servers.stop_sync()
    base = statistics.median(results["nats-py fetch"])
    print(f"{'fetch':14} {'us/message (median)':>20} {'runs':>24} {'vs nats-py':>11}")
    for name, values in results.items():
        median = statistics.median(values)
        runs = " ".join(f"{v * 1e6:.1f}" for v in values)
        print(f"{name:14} {median * 1e6:20.1f} {runs:>24} {median / base:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
