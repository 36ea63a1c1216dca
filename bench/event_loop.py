"""The services' client-side traffic on asyncio's own event loop against uvloop: CPU of this
process (not of the servers) per message, the two loops alternating in one process.

One round is what a service does per batch: JetStream publishes of 256 messages
(`publish_durable_many`), a pull fetch of them and an ack each, then a pipeline of 256 Redis
commands (a small Lua script per message, as the agents and the cycle run). Embedded NATS and
Valkey servers on free ports.

    python bench/event_loop.py                  # 3 alternations of 40 rounds per loop
    python bench/event_loop.py --rounds 80 --alternations 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import nats
import redis.asyncio as aioredis
import uvloop

from kubus.bus.connection import Publication, publish_durable_many
from kubus.cli.embedded import EmbeddedServers

BATCH = 256
_SCRIPT = "redis.call('HSET', KEYS[1], 'phase', ARGV[1], 'at', ARGV[2]) return redis.call('HINCRBY', KEYS[1], 'v', 1)"


async def _rounds(nats_url: str, redis_url: str, rounds: int) -> float:
    """CPU seconds of this process per message over ``rounds`` batches."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="LOOPBENCH", subjects=["loopbench.>"])
    sub = await js.pull_subscribe("loopbench.>", durable="loopbench")
    r = aioredis.from_url(redis_url)
    script = r.register_script(_SCRIPT)
    payload = b"x" * 600
    begin = time.process_time()
    for i in range(rounds):
        await publish_durable_many(
            js, [Publication(f"loopbench.{j % 16}", payload, f"{time.time_ns()}-{i}-{j}") for j in range(BATCH)]
        )
        got = 0
        while got < BATCH:
            for msg in await sub.fetch(BATCH - got, timeout=5):
                await msg.ack()
                got += 1
        pipe = r.pipeline(transaction=False)
        for j in range(BATCH):
            await script(keys=[f"pod:{j}"], args=["Running", str(i)], client=pipe)
        await pipe.execute()
    spent = time.process_time() - begin
    await js.delete_stream("LOOPBENCH")
    await r.aclose()
    await nc.drain()
    return spent / (rounds * BATCH)


def _run(factory: Callable[[], asyncio.AbstractEventLoop] | None, nats_url: str, redis_url: str, rounds: int) -> float:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_rounds(nats_url, redis_url, rounds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="batches of 256 messages per measurement (40)")
    parser.add_argument("--alternations", type=int, default=3, help="asyncio/uvloop pairs (3)")
    args = parser.parse_args(argv)
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop] | None] = {
        "asyncio": None,
        "uvloop": uvloop.new_event_loop,
    }
    results: dict[str, list[float]] = {name: [] for name in loops}
    with tempfile.TemporaryDirectory(prefix="kubus-loopbench-") as data:
        servers = EmbeddedServers(data)
        servers.start_sync()
        try:
            for _ in range(args.alternations):
                for name, factory in loops.items():
                    results[name].append(_run(factory, servers.nats_url, servers.redis_url, args.rounds))
        finally:
            servers.stop_sync()
    base = statistics.median(results["asyncio"])
    print(f"{'loop':10} {'us/message (median)':>20} {'runs':>30} {'vs asyncio':>11}")
    for name, values in results.items():
        median = statistics.median(values)
        runs = " ".join(f"{v * 1e6:.1f}" for v in values)
        print(f"{name:10} {median * 1e6:20.1f} {runs:>30} {median / base:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
