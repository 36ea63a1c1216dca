"""Metrics out of the box: `kubus up` serves every service's /metrics on ports it prints and
records, skipping ports something else holds; a service given a taken port says which, in one line."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from cluster_support import KubusUp
from support import eventually, http_get

from kubus.cli.endpoints import read_endpoints
from kubus.cli.processes import DEFAULT_METRICS_BASE, GROUP_STOP_WAIT, port_free

_ROLES = {"queue": "queue", "cycle-default-scheduler": "cycle", "binder": "binder", "gpu-agent": "gpu-agent"}


async def test_kubus_up_serves_metrics_on_the_ports_it_prints(tmp_path: Path) -> None:
    with contextlib.ExitStack() as held:
        if port_free(DEFAULT_METRICS_BASE):  # something else on the first port: kubus up goes around it
            blocker = held.enter_context(socket.socket())
            blocker.bind(("0.0.0.0", DEFAULT_METRICS_BASE))
            blocker.listen()
        up = KubusUp(tmp_path, nodes=1)
        try:
            await up.ready()
            [line] = [t for t in up.text().splitlines() if t.strip().startswith("metrics:")]
            urls = dict(re.findall(r"([\w.-]+) (http://127\.0\.0\.1:\d+/metrics)", line))
            assert set(urls) == set(_ROLES), line
            assert f":{DEFAULT_METRICS_BASE}/" not in line
            recorded = read_endpoints(tmp_path)
            assert recorded is not None and recorded.metrics == urls
            bodies = {}
            for name, url in urls.items():
                status, bodies[name] = await asyncio.to_thread(http_get, url)
                assert status == 200, (name, bodies[name])
                assert f'service="{_ROLES[name]}"' in bodies[name]
                assert "process_resident_memory_bytes " in bodies[name]
            assert "scheduler_pending_pods{" in bodies["queue"]
            assert "scheduler_schedule_attempts_total" not in bodies["queue"]
            assert "scheduler_pending_pods" not in bodies["cycle-default-scheduler"]
            assert 'scheduler_goroutines{operation="scheduling loop"} 1.0' in bodies["cycle-default-scheduler"]

            async def cache_holds_the_node() -> None:
                body = (await asyncio.to_thread(http_get, urls["cycle-default-scheduler"]))[1]
                assert 'scheduler_cache_size{type="nodes"} 1.0' in body

            await eventually(cache_holds_the_node, timeout=20)
            up.proc.send_signal(signal.SIGTERM)
            await up.exited(GROUP_STOP_WAIT + 15)
        finally:
            up.kill()


def test_a_service_given_a_taken_port_says_which_and_exits() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "kubus.binder", "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"kubus.binder: metrics port {port} on 0.0.0.0: already in use (another process listens there; "
        "pick another --metrics-port, or 0 for none)"
    ]
