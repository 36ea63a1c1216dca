"""Child processes that do not outlive kubus: the embedded servers and the services `kubus up`
starts. Each is spawned in its own session with its output to a log file, told to stop when the
thread that started it ends (Linux), killed at interpreter exit until forgotten, and, for a
server, stopped with SIGTERM then SIGKILL and polled without blocking the event loop
(`ServerProcess`)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from kubus.core.errors import KubusError

__all__ = ["POLL_INTERVAL", "ServerProcess", "ServerStartError", "forget_child", "log_tail", "spawn_child"]

LOG_TAIL_LINES = 30
"""Lines of a server's log a `ServerStartError` ends with."""
POLL_INTERVAL = 0.02
"""Seconds between two looks at a starting or stopping server."""


class ServerStartError(KubusError, RuntimeError):
    """An embedded server did not start or did not answer in time; the message ends with its log's tail."""


# Children still running when the interpreter exits (a test run interrupted, a crash of `kubus
# up`, a forgotten stop()) are killed, so no orphan keeps a port, a data dir or a cluster busy.
_live: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_live):
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    _live.clear()


def _die_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        # The parent may have died between fork and prctl: then no signal would ever come.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent


def spawn_child(
    argv: Sequence[str], *, cwd: Path | None, log: IO[bytes], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A child process that does not outlive kubus: stdin closed, stdout and stderr to ``log``,
    its own session (a Ctrl-C in the terminal reaches kubus, which stops its children in order,
    instead of the terminal signalling them all at once), SIGTERM when the thread that started it
    ends even by SIGKILL (Linux, PR_SET_PDEATHSIG; a kubus service then stops within its stop
    timeout, see `kubus.runtime.entrypoint`), and killed at interpreter exit until `forget_child`.
    Call it from the thread that lives as long as the child should (the event loop's)."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with(os.getpid()) if sys.platform.startswith("linux") else None,
    )
    _live.add(proc)
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


def forget_child(proc: subprocess.Popen[bytes]) -> None:
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

    def spawn(self, argv: list[str], cwd: Path) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.proc = spawn_child(argv, cwd=cwd, log=log)

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
