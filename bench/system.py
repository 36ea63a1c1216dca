"""Whole-system benchmark: `kubus bench` at several sizes, one line each.

Each row is one `kubus bench -o json` run in a fresh process (embedded NATS and Redis, every
service as its own process, simulated nodes whose pods run until deleted): pods bound per second
from the first submit to the last bind, submit-to-bound latency, where the time goes (submit ->
accepted by the queue -> bound -> running), and whether the invariants held at the end.

    python bench/system.py             # 1k nodes/2k pods, 5k/10k, 5k/10k with 2 profiles
    python bench/system.py --quick     # 200 nodes / 1,000 pods, a smoke run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

SIZES = [
    {"nodes": 1000, "pods": 2000, "profiles": 1},
    {"nodes": 5000, "pods": 10000, "profiles": 1},
    {"nodes": 5000, "pods": 10000, "profiles": 2},
]
QUICK = [{"nodes": 200, "pods": 1000, "profiles": 1}]


def run(nodes: int, pods: int, profiles: int, batch: int) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "kubus.cli",
        "bench",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--profiles",
        str(profiles),
        "--binders",
        str(profiles),
        "--batch-size",
        str(batch),
        "-o",
        "json",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if not result.stdout.strip():
        raise SystemExit(f"kubus bench failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    header = (
        "NODES",
        "PODS",
        "PROFILES",
        "PODS/S",
        "P50",
        "P99",
        "SUBMIT->ACCEPTED p50",
        "ACCEPTED->BOUND p50",
        "INVARIANTS",
    )
    rows = [header]
    for size in QUICK if args.quick else SIZES:
        print(f"running kubus bench {size} ...", file=sys.stderr, flush=True)
        r = run(size["nodes"], size["pods"], size["profiles"], args.batch_size)
        stages = r["stages"]
        rows.append(
            (
                str(r["nodes"]),
                f"{r['bound']}/{r['pods']}",
                str(r["profiles"]),
                str(r["pods_per_second"]),
                _s(r["latency"]["p50"]),
                _s(r["latency"]["p99"]),
                _s(stages["submit -> accepted"]["p50"]),
                _s(stages["accepted -> bound"]["p50"]),
                "hold" if not r["invariant_violations"] else f"{len(r['invariant_violations'])} violated",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
