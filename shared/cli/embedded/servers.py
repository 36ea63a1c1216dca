"""`EmbeddedServers`: one NATS server with JetStream and one Valkey (Redis-compatible) server on
127.0.0.1, their data and logs under one folder, so a restart keeps every stream, message and key."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import nats
import nats.errors
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from kubus.access import Credentials
from kubus.cli.embedded.children import POLL_INTERVAL, ServerProcess, ServerStartError
from kubus.cli.embedded.host import HOST, free_port, nats_server_binary, nats_server_environment, valkey_server_binary

__all__ = ["EmbeddedServers"]


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
        self._nats = ServerProcess("nats-server", self.data_dir / "nats.log")
        self._redis = ServerProcess("valkey-server", self.data_dir / "redis.log")
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

    def names(self) -> tuple[str, ...]:
        """Every server's name, as `exited`, `restart` and `pids` use them."""
        return (self._nats.name, self._redis.name)

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
        self._nats.spawn(argv, cwd=self.data_dir, env=nats_server_environment())
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
            await asyncio.sleep(POLL_INTERVAL)
        while not await self._nats_answers():
            if self._nats.exited() is not None:
                raise self._nats.failure("exited during startup")
            if time.monotonic() > deadline:
                raise self._nats.failure("did not answer (connect + JetStream account info) in time")
            await asyncio.sleep(POLL_INTERVAL)

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
                await asyncio.sleep(POLL_INTERVAL)
        finally:
            await client.aclose()
