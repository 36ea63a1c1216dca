"""Helpers of the end-to-end tests: the CLI as a subprocess, service logs for failure messages."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from support import eventually

from kubus.cli.up import Cluster

__all__ = [
    "CliResult",
    "KubusUp",
    "StartServices",
    "descendants",
    "process_stat",
    "run_kubus",
    "service_logs",
    "still_alive",
]

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


# -- processes, read from /proc -------------------------------------------------------------------


def process_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state letter, start time in ticks) of a live process; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """Every live process below ``root`` (zombies are not): pid → (start time, command line)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := process_stat(int(entry))) is not None:
            parents.setdefault(stat[0], []).append(int(entry))
    out: dict[int, tuple[int, str]] = {}
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            stat = process_stat(child)
            if stat is not None and stat[1] != "Z":
                out[child] = (stat[2], _cmdline(child))
                todo.append(child)
    return out


def still_alive(processes: dict[int, tuple[int, str]]) -> list[str]:
    """Those of ``processes`` that still run (the same process: same start time; zombies are dead)."""
    alive = []
    for pid, (started, cmdline) in processes.items():
        stat = process_stat(pid)
        if stat is not None and stat[2] == started and stat[1] != "Z":
            alive.append(f"{pid} ({stat[1]}) {cmdline}")
    return alive


class KubusUp:
    """`kubus up` as a child of the test (``--fresh``, its data in ``directory``, ``args`` added),
    with its output in a file."""

    def __init__(self, directory: Path, *args: str, nodes: int = 10) -> None:
        self.directory = directory
        self.output = directory / "up.out"
        argv = ["up", "--nodes", str(nodes), "--fresh", "--data-dir", str(directory), *args]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubus.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=self.output.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBUS_HOME": str(directory)},
        )

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    async def ready(self) -> None:
        def check() -> None:
            assert self.proc.poll() is None, self.text()
            assert "ready in" in self.text(), self.text()

        await eventually(check, timeout=90, interval=0.2)

    def child(self, needle: str) -> int:
        """The one live child whose command line has ``needle`` (AssertionError: none or several)."""
        found = [pid for pid, (_, cmdline) in descendants(self.proc.pid).items() if needle in cmdline]
        assert len(found) == 1, found
        return found[0]

    async def exited(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert self.proc.returncode is not None, f"kubus up still running after {timeout:g}s\n{self.text()}"
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
