"""Child processes that do not outlive kubus: the embedded servers and the services `kubus up`
starts. Each is spawned in its own session with its output to a log file, told to stop when the
thread that started it ends (Linux), killed at interpreter exit until forgotten, and, for a
server, stopped with SIGTERM then SIGKILL and polled without blocking the event loop
(`ServerProcess`)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Protocol

from kubus.core.errors import KubusError
from kubus.runtime.forkserver import die_with

__all__ = [
    "LOG_TAIL_LINES",
    "POLL_INTERVAL",
    "Child",
    "ServerProcess",
    "ServerStartError",
    "forget_child",
    "keep_until_exit",
    "log_tail",
    "spawn_child",
]

LOG_TAIL_LINES = 30
"""Lines of a server's log a `ServerStartError` ends with."""
POLL_INTERVAL = 0.02
"""Seconds between two looks at a starting or stopping server."""


class ServerStartError(KubusError, RuntimeError):
    """An embedded server did not start or did not answer in time; the message ends with its log's tail."""


class Child(Protocol):
    """A child process as a supervisor sees it: a `subprocess.Popen`, or a service forked by the
    fork server (`kubus.cli.embedded.forks.ForkedProcess`)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


# Children still running when the interpreter exits (a test run interrupted, a crash of `kubus
# up`, a forgotten stop()) are killed, so no orphan keeps a port, a data dir or a cluster busy.
_live: set[Child] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_live):
        with contextlib.suppress(OSError):
            proc.kill()
    deadline = time.monotonic() + 2
    for proc in list(_live):
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    _live.clear()


def keep_until_exit(child: Child) -> None:
    """Kill ``child`` at interpreter exit unless `forget_child` is called first (as `spawn_child` does)."""
    _live.add(child)


def spawn_child(
    argv: Sequence[str], *, cwd: Path | None, log: IO[bytes], env: Mapping[str, str] | None = None,
    pipes: bool = False,
) -> subprocess.Popen[bytes]:
    """A child process that does not outlive kubus: stdin closed, stdout and stderr to ``log``
    (``pipes``: stdin and stdout are pipes to talk to it, stderr goes to ``log``),
    its own session (a Ctrl-C in the terminal reaches kubus, which stops its children in order,
    instead of the terminal signalling them all at once), SIGTERM when the thread that started it
    ends even by SIGKILL (Linux, PR_SET_PDEATHSIG; a kubus service then stops within its stop
    timeout, see `kubus.runtime.entrypoint`), and killed at interpreter exit until `forget_child`.
    Call it from the thread that lives as long as the child should (the event loop's)."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
        stdout=subprocess.PIPE if pipes else log,
        stderr=log if pipes else subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=functools.partial(die_with, os.getpid()) if sys.platform.startswith("linux") else None,
    )
    keep_until_exit(proc)
    return proc


def log_tail(path: Path, offset: int, lines: int) -> str:
    """The last ``lines`` lines written to ``path`` after byte ``offset`` ("" if unreadable)."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def forget_child(proc: Child) -> None:
    """``proc`` has ended (or is ending under its owner's watch): no kill at exit."""
    _live.discard(proc)


class ServerProcess:
    """One server child process: started with its output appended to a log file, stopped with
    SIGTERM then SIGKILL, polled without blocking the event loop."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def spawn(self, argv: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> None:
        """Start it (``env``: its environment; None: this process's)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.proc = spawn_child(argv, cwd=cwd, log=log, env=env)

    def exited(self) -> int | None:
        """The exit code if the process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines this run (since the last spawn) wrote to the log."""
        return log_tail(self.log_path, self._log_offset, lines)

    def failure(self, what: str) -> ServerStartError:
        code = self.exited()
        status = f"exited with code {code}" if code is not None else "still running"
        return ServerStartError(
            f"{self.name} {what} ({status}); last lines of {self.log_path}:\n{self.log_tail() or '(empty)'}"
        )

    async def stop(self, timeout: float) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while proc.poll() is None and time.monotonic() < deadline:
                    await asyncio.sleep(POLL_INTERVAL)
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    while proc.poll() is None:
                        await asyncio.sleep(POLL_INTERVAL)
        finally:
            forget_child(proc)
