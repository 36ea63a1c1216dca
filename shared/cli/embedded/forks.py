"""The supervisor's side of the fork server (`kubus.runtime.forkserver`): services started as
forks of one process that has imported them, instead of one fresh interpreter each.

`ForkServer` starts the server at its first `ForkServer.spawn` (its imports take about a second,
once) and again at the next spawn after it died; `ForkedProcess` is a child as much as a
`subprocess.Popen` is to a supervisor (pid, poll, send_signal, kill). Both are killed at
interpreter exit like every child of kubus (`kubus.cli.embedded.children`). Not thread-safe: the
thread that supervises calls them (the event loop's).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubus.cli.embedded.children import LOG_TAIL_LINES, forget_child, keep_until_exit, log_tail, spawn_child
from kubus.runtime.forkserver import FORKSERVER_MODULE

__all__ = ["ForkServer", "ForkServerError", "ForkedProcess"]

_READY_TIMEOUT = 60.0
"""Seconds the first spawn waits for the server to import its modules (about one here)."""
_REPLY_TIMEOUT = 10.0
"""Seconds a later spawn waits for its pid (a fork takes milliseconds)."""
LOST_EXIT = -signal.SIGTERM
"""The exit status of a child whose fork server died before saying how it ended: the kernel
sent it SIGTERM then (PR_SET_PDEATHSIG), and init reaped it."""


class ForkServerError(RuntimeError):
    """The fork server did not start, died, or did not answer in time; the message ends with
    its log's tail."""


class ForkedProcess:
    """A service forked by a `ForkServer`."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status once the process has ended (as `subprocess.Popen.returncode`), else None."""
        if self.returncode is None:
            self._server.poll()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the process while it runs: never a pid the server has reaped (it may be reused)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} returncode={self.returncode}>"


class ForkServer:
    """One fork server for ``modules``, started with ``env`` in ``cwd``, logging to ``log_path``."""

    def __init__(self, modules: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:  # fmt: skip
        self.modules = tuple(modules)
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._buffer = b""
        self._replies: list[dict[str, Any]] = []
        self._children: dict[int, ForkedProcess] = {}
        self._orphans: dict[int, ForkedProcess] = {}
        """Children of a server that died: gone once their pid is."""
        self._abandoned = 0
        """Requests given up waiting for (the caller started the service otherwise): the next
        answers are theirs, and a child forked that late is killed."""

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def spawn(self, module: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path | None,
              log_path: Path, title: str) -> ForkedProcess:  # fmt: skip
        """Fork ``python -m module args`` with this environment and working directory, its output
        appended to ``log_path`` and ``title`` as its command line. Raises ForkServerError."""
        first = self._proc is None or self._proc.poll() is not None
        if first:
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd) if cwd else None,
                   "log": str(log_path), "title": title}  # fmt: skip
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc}); {self._tail()}") from exc
        try:
            reply = self._next_reply(("pid", "error"), _READY_TIMEOUT if first else _REPLY_TIMEOUT)
        except ForkServerError:
            self._abandoned += 1  # its answer, if it comes, is not the next request's
            raise
        if "error" in reply:
            raise ForkServerError(f"the fork server could not start {module}: {reply['error']}")
        child = ForkedProcess(self, int(reply["pid"]))
        self._children[child.pid] = child
        keep_until_exit(child)
        return child

    def poll(self) -> None:
        """Read what the server has said, without waiting, and mark the children that ended."""
        if not self._read(0.0) or (self._proc is not None and self._proc.poll() is not None):
            self._forget_server()
        self._mark_exits()

    def close(self, timeout: float = 5.0) -> None:
        """Close the server's stdin (it then exits), wait up to ``timeout`` seconds, then kill it.
        Idempotent. Stop the children first: the kernel sends them SIGTERM when it ends."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self._forget_server()

    # -- inside --

    def _start(self) -> None:
        if self._proc is not None:  # it died: read its last words, account for its children
            self._forget_server()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            header = f"--- kubus: fork server for {' '.join(self.modules)} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
            log.write(header.encode())
            log.flush()
            self._log_offset = log.tell()
            self._proc = spawn_child([sys.executable, "-m", FORKSERVER_MODULE, *self.modules],
                                     cwd=self.cwd, log=log, env=self.env, pipes=True)  # fmt: skip
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._next_reply(("ready",), _READY_TIMEOUT)

    def _forget_server(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdout is not None:
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(proc.stdout.fileno(), True)
                self._take(proc.stdout.read() + b"\n")
                proc.stdout.close()
        proc.wait()
        forget_child(proc)
        self._buffer = b""
        self._abandoned = 0  # a new server owes nothing
        self._mark_exits(server_gone=True)

    def _next_reply(self, kinds: tuple[str, ...], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, reply in enumerate(self._replies):
                if any(kind in reply for kind in kinds):
                    del self._replies[i]
                    return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"no answer from the fork server in {timeout:g}s; {self._tail()}")
            if not self._read(left):
                raise ForkServerError(f"the fork server exited; {self._tail()}")

    def _kill_late(self, reply: dict[str, Any]) -> None:
        """A fork whose request was given up: its service was started another way."""
        if "pid" in reply:
            child = ForkedProcess(self, int(reply["pid"]))
            self._children[child.pid] = child  # its exit is read as any other's
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)

    def _read(self, timeout: float) -> bool:
        """Take the replies that arrive within ``timeout`` seconds; False once the server is gone."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return False
        fd = proc.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], timeout)
        if not readable:
            return True
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            return False
        self._take(data)
        return True

    def _take(self, data: bytes) -> None:
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if self._abandoned and ("pid" in reply or "error" in reply):
                self._abandoned -= 1  # answers come in order: the oldest request's, given up
                self._kill_late(reply)
            else:
                self._replies.append(reply)

    def _mark_exits(self, *, server_gone: bool = False) -> None:
        kept = []
        for reply in self._replies:
            if "exited" not in reply:
                kept.append(reply)
            elif (child := self._children.pop(int(reply["exited"]), None)) is not None:
                self._ended(child, int(reply["code"]))
        self._replies = kept
        if server_gone:  # nobody will say how these end: the kernel sent them SIGTERM, init reaps them
            self._orphans.update(self._children)
            self._children.clear()
        for pid, child in list(self._orphans.items()):
            if not _alive(pid):
                del self._orphans[pid]
                self._ended(child, LOST_EXIT)

    @staticmethod
    def _ended(child: ForkedProcess, code: int) -> None:
        child.returncode = code
        forget_child(child)

    def _tail(self) -> str:
        text = log_tail(self.log_path, self._log_offset, LOG_TAIL_LINES)
        return f"last lines of {self.log_path}:\n{text or '(empty)'}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended (init may be slow to reap it, or never, in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc to read: ask the kernel
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
