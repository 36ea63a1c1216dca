"""Helpers of the end-to-end tests: the CLI as a subprocess, service logs for failure messages."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from kubus.cli.up import Cluster

__all__ = ["CliResult", "StartServices", "run_kubus", "service_logs"]

StartServices = Callable[..., Awaitable[Cluster]]
"""The ``services`` fixture: ``cluster = await services(nodes=20)``."""


@dataclass(frozen=True, slots=True)
class CliResult:
    code: int
    out: str
    err: str


def service_logs(cluster: Cluster, lines: int = 15) -> str:
    """The tail of every service's log, for assertion messages."""
    return "\n".join(f"--- {s.name} (exit {s.returncode()}):\n{s.log_tail(lines)}" for s in cluster.group)


async def run_kubus(
    *args: str, env: dict[str, str], stdin: bytes | None = None, timeout: float = 120.0, cwd: Path | None = None
) -> CliResult:
    """``python -m kubus.cli ARGS`` with ``env`` added to the environment."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubus.cli",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())
