"""The fork server: service processes forked from one process that has already imported them.

Importing a service (kubus, numpy, redis-py, nats-py, aiohttp) costs about half a CPU-second,
and `kubus up` starts four or more of them, again at each restart. A fork server pays it once:
``python -m kubus.runtime.forkserver MODULE...`` imports the service modules, then forks a child
per request, and each child runs ``python -m MODULE ARGS`` as a fresh interpreter would: its own
session, its own environment and working directory, stdin closed, stdout and stderr to its log,
SIGTERM when the fork server ends (Linux), and its process title (`setproctitle`) the command
line it would have had, so ``ps``, ``pgrep -f kubus.queue`` and py-spy see the same processes.
gunicorn's ``--preload`` and Python's own ``multiprocessing`` forkserver do the same; that one
is not used because each of its children imports the parent's ``__main__`` again.

The protocol is JSON, one object per line: requests on the server's stdin
(``{"module", "args", "env", "cwd", "log", "title"}``), replies on its stdout: ``{"ready": [...]}``
once the modules are imported, ``{"pid": N}`` or ``{"error": "..."}`` per request in order, and
``{"exited": N, "code": C}`` when a child ends (C as `subprocess.Popen.returncode`: -N for signal
N). When its stdin closes the server exits and leaves its children running; they get SIGTERM
from the kernel then, so the supervisor stops them first. The supervisor's side is
`kubus.cli.embedded.forks`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import setproctitle

__all__ = ["FORKSERVER_MODULE", "die_with", "main"]

FORKSERVER_MODULE = "kubus.runtime.forkserver"


# -- the server ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kubus.runtime.forkserver MODULE...``: import the modules, then serve forks."""
    modules = list(sys.argv[1:] if argv is None else argv)
    # `pgrep -f kubus.queue` finds the queue, not this process that imported it too.
    setproctitle.setproctitle(f"{sys.executable} -m {FORKSERVER_MODULE}")
    ready = []
    for module in modules:
        try:
            importlib.import_module(module)
            importlib.import_module(f"{module}.__main__")
        except Exception:  # the child will import it again and fail in its own log, as python -m would
            traceback.print_exc()
            continue
        # Run later as __main__: runpy warns when the module is already imported under its name.
        sys.modules.pop(f"{module}.__main__", None)
        ready.append(module)
    if threading.active_count() > 1:
        # fork() copies only the calling thread: a lock another thread holds would stay held.
        print(f"kubus forkserver: importing {modules} started threads; not forking", file=sys.stderr)
        return 1
    gc.collect()
    gc.freeze()  # what was imported stays out of every child's collections (and shared, not copied)
    return _Server().serve(ready)


class _Server:
    def __init__(self) -> None:
        self.out = sys.stdout
        self.children: set[int] = set()

    def reply(self, message: Mapping[str, Any]) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def serve(self, ready: list[str]) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of exits
        selector = selectors.DefaultSelector()
        selector.register(wake_r, selectors.EVENT_READ)
        selector.register(0, selectors.EVENT_READ)
        self.reply({"ready": ready})
        pending = b""
        while True:
            for key, _ in selector.select():
                if key.fd == wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_r, 512):
                            pass
                    continue
                data = os.read(0, 65536)
                if not data:
                    self.reap()
                    return 0
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        self.fork(line, (selector, wake_r, wake_w))
            self.reap()

    def fork(self, line: bytes, server_fds: tuple[selectors.BaseSelector, int, int]) -> None:
        try:
            request = json.loads(line)
            module, args = str(request["module"]), [str(a) for a in request["args"]]
            env = {str(k): str(v) for k, v in request["env"].items()}
            cwd, log, title = request.get("cwd"), str(request["log"]), str(request.get("title") or "")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.reply({"error": f"bad request: {exc!r}"})
            return
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            self.reply({"error": f"fork: {exc}"})
            return
        if pid == 0:  # pragma: no cover - the child; its behaviour is tested from outside
            selector, wake_r, wake_w = server_fds
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
            _become(server, module, args, env, cwd, log, title)
        self.children.add(pid)
        self.reply({"pid": pid})

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _become(server: int, module: str, args: list[str], env: dict[str, str], cwd: str | None, log: str,
            title: str) -> NoReturn:  # fmt: skip  # pragma: no cover - runs in the child
    """Turn this fresh fork into ``python -m module args``; never returns."""
    code: int = 1
    try:
        os.setsid()  # a Ctrl-C in a terminal reaches the supervisor only, as with spawn_child
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        die_with(server)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        if title:
            setproctitle.setproctitle(title)
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_code(code: object) -> int:
    """As the interpreter turns ``sys.exit(code)`` into a status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def die_with(parent: int) -> None:  # pragma: no cover - runs in a child, before it runs anything else
    """Ask the kernel for SIGTERM when ``parent`` (the thread that forked this process) ends
    (Linux, PR_SET_PDEATHSIG), even by SIGKILL; a kubus service then stops within its stop
    timeout. If ``parent`` died already, no signal would ever come: this process kills itself."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before prctl: no signal would ever come
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
