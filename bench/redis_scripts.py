"""Where Redis spends its time during a `kubus bench`: every command for a few seconds, with
EVALSHA split by kubus' script names (RESERVE, TRANSITION, BIND_MANY, ...).

    kubus bench --nodes 5000 --pods 20000 --data-dir /tmp/b &
    python bench/redis_scripts.py /tmp/b --after 8 --seconds 5

It logs every command in SLOWLOG (slower-than 0) for ``--seconds``, then restores the
server's settings. Durations are wall time inside the server: on a busy machine they include
time the server was descheduled, so read them as shares rather than absolute costs. Commands a
script runs are logged too (HSET, SADD, ...), beside its EVALSHA.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from collections import Counter
from pathlib import Path

import redis

from kubus.access import ACCESS_DIR, ADMIN, read_credentials
from kubus.store import scripts


def _script_names() -> dict[str, str]:
    """sha1 of each script kubus registers -> its name in kubus.store.scripts."""
    return {
        hashlib.sha1(text.encode()).hexdigest(): name
        for name, text in vars(scripts).items()
        if name.isupper() and isinstance(text, str) and "redis.call" in text
    }


def _connect(data_dir: Path, wait: float) -> redis.Redis:
    """The admin client of the bench's Redis, once its access file and log name the port."""
    deadline = time.monotonic() + wait
    while True:
        try:
            credentials = read_credentials(data_dir / ACCESS_DIR)
            ports = re.findall(r"port=(\d+)", (data_dir / "redis.log").read_text())
            if credentials is not None and ports:
                password = credentials.password(ADMIN.name)
                return redis.Redis(port=int(ports[-1]), username=ADMIN.name, password=password)
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            sys.exit(f"no kubus bench Redis in {data_dir} after {wait:g}s (run kubus bench --data-dir {data_dir})")
        time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path, help="the --data-dir of a running kubus bench")
    parser.add_argument("--after", type=float, default=8.0, help="seconds to wait before sampling (default 8)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds to sample (default 5)")
    args = parser.parse_args()
    client = _connect(args.data_dir, wait=30.0)
    time.sleep(args.after)
    before = client.config_get("slowlog-*")
    try:
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        time.sleep(args.seconds)
        entries = client.slowlog_get(1_000_000)
    finally:
        for key, value in before.items():
            client.config_set(key, value)
    names = _script_names()
    micros: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for entry in entries:
        words = entry["command"].decode(errors="replace").split()
        command = words[0].upper() if words else "?"
        if command == "EVALSHA" and len(words) > 1:
            command = f"EVALSHA {names.get(words[1], words[1][:12])}"
        micros[command] += entry["duration"]
        calls[command] += 1
    total = sum(micros.values()) or 1
    print(f"{'command':28} {'calls':>8} {'ms':>9} {'share':>7} {'us/call':>9}")
    for command, us in micros.most_common(25):
        print(f"{command:28} {calls[command]:8d} {us / 1e3:9.1f} {us / total:7.1%} {us / calls[command]:9.1f}")


if __name__ == "__main__":
    main()
