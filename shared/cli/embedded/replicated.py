"""`ReplicatedServers`: the embedded servers with no single point of failure, on 127.0.0.1 from
the same binaries: a NATS cluster of three, a Valkey primary with two replicas, and three
sentinels that promote a replica when the primary is lost."""

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

from kubus.access import ADMIN, Credentials
from kubus.cli.embedded.children import POLL_INTERVAL, ServerProcess, ServerStartError
from kubus.cli.embedded.host import HOST, free_port, nats_server_binary, nats_server_environment, valkey_server_binary

__all__ = ["HA_DIR", "SENTINEL_MASTER", "ReplicatedServers"]

HA_DIR = "ha"
"""The folder of `ReplicatedServers` inside a data dir: ports, configs, stores and logs."""
SENTINEL_MASTER = "kubus"
"""The name the embedded sentinels monitor the primary under."""
_NATS_NODES = 3
_SENTINELS = 3
_SENTINEL_DOWN_AFTER_MS = 1000
_VALKEY_INSTANCES = 3
"""A primary and two replicas: a write waits for one replica (WAIT 1), so after the primary is
lost the other replica still confirms writes, and the services go on before the old primary is
back (with one replica they would wait for it)."""


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


class ReplicatedServers:
    """The embedded servers with no single point of failure, all on 127.0.0.1 from the same
    binaries as `EmbeddedServers`: three nats-servers in one cluster (routes between them,
    JetStream on each with its own store, streams kept in three copies), a Valkey primary and
    two replicas, and three Valkey sentinels (quorum 2) that promote the most advanced replica
    when the primary is gone for `_SENTINEL_DOWN_AFTER_MS`.

    Everything lives under ``<data_dir>/ha``: ``ports.json`` (chosen on the first start, kept,
    so a restart serves the same URLs and the sentinels find their instances), one store and
    one log per server. Each Valkey instance runs from a config file it owns: the sentinels
    rewrite it on a failover (``CONFIG REWRITE``), so an instance started again keeps the role
    it had, and a primary that comes back after a failover is turned into a replica by the
    sentinels instead of serving stale data. Same interface as `EmbeddedServers` (what `kubus
    up` supervises), plus `settings` (the connection settings the clients need: every NATS URL,
    the sentinels, the replica counts) and `pid` (tests kill one server by name).
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, credentials: Credentials | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.home = self.data_dir / HA_DIR
        self.credentials = credentials
        self._ports: dict[str, int] = {}
        self._nats = [ServerProcess(f"nats-server-{i}", self.home / f"nats-{i}.log") for i in range(1, _NATS_NODES + 1)]
        self._valkey = [
            ServerProcess(f"valkey-server-{i}", self.home / f"valkey-{i}.log") for i in range(1, _VALKEY_INSTANCES + 1)
        ]
        self._sentinels = [
            ServerProcess(f"valkey-sentinel-{i}", self.home / f"sentinel-{i}.log") for i in range(1, _SENTINELS + 1)
        ]
        self._running = False

    # -- addresses ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between a successful start() and the next stop()."""
        return self._running

    def _port(self, name: str) -> int:
        if name not in self._ports:
            raise RuntimeError("ReplicatedServers: not started yet")
        return self._ports[name]

    @property
    def nats_url(self) -> str:
        """Every NATS node's URL, comma-separated (what ``nats_url`` takes for a cluster)."""
        return ",".join(f"nats://{HOST}:{self._port(p.name)}" for p in self._nats)

    @property
    def redis_url(self) -> str:
        """The first Valkey instance's URL (the primary until a failover; clients go through the
        sentinels, this URL gives them the database number)."""
        return f"redis://{HOST}:{self._port(self._valkey[0].name)}/0"

    @property
    def sentinels(self) -> str:
        """The sentinels as ``host:port,...`` (``redis_sentinels``)."""
        return ",".join(f"{HOST}:{self._port(p.name)}" for p in self._sentinels)

    def settings(self) -> dict[str, object]:
        """The connection settings a client of these servers needs besides its login."""
        return {
            "nats_url": self.nats_url,
            "redis_url": self.redis_url,
            "redis_sentinels": self.sentinels,
            "redis_master": SENTINEL_MASTER,
            "stream_replicas": _NATS_NODES,
            "redis_wait_replicas": 1,
        }

    @property
    def nats_log(self) -> Path:
        """The first NATS node's log (the others are next to it)."""
        return self._nats[0].log_path

    @property
    def redis_log(self) -> Path:
        """The first Valkey instance's log (the others and the sentinels' are next to it)."""
        return self._valkey[0].log_path

    def admin_url(self, url: str) -> str:
        """``url`` with the admin login in it when the servers have credentials, else as it is."""
        return url if self.credentials is None else self.credentials.url(url)

    def _all(self) -> list[ServerProcess]:
        return [*self._nats, *self._valkey, *self._sentinels]

    def names(self) -> tuple[str, ...]:
        """Every server's name, as `exited`, `restart` and `pids` use them."""
        return tuple(p.name for p in self._all())

    def exited(self) -> dict[str, int]:
        """The servers that ended although started and not stopped: name -> exit status."""
        if not self._running:
            return {}
        return {p.name: code for p in self._all() if (code := p.exited()) is not None}

    def pids(self) -> dict[str, int]:
        """Process ids of the running servers, by name."""
        return {p.name: p.proc.pid for p in self._all() if p.proc is not None and p.proc.poll() is None}

    def pid(self, name: str) -> int:
        """The pid of the running server ``name``. KeyError when it does not run."""
        return self.pids()[name]

    async def primary(self) -> str:
        """The name of the Valkey instance the sentinels now call the primary."""
        host, port = await self._master_address()
        for p in self._valkey:
            if self._ports[p.name] == port:
                return p.name
        raise ServerStartError(f"the sentinels name {host}:{port}, none of ours")

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, timeout: float = 60.0) -> None:
        """Start every server and return once the NATS cluster has JetStream (a meta leader),
        the replicas follow the primary and every sentinel sees the primary, the replicas and
        the other sentinels (so a failover can happen from then on). Does nothing if
        running. Raises ServerStartError (with the tail of the server's log) or
        FileNotFoundError as `EmbeddedServers.start`; on failure nothing is left running."""
        if self._running:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        self.home.chmod(0o700)
        self._choose_ports()
        deadline = time.monotonic() + timeout
        try:
            await asyncio.gather(self._start_nats_cluster(deadline), self._start_valkey(deadline))
        except BaseException:
            await self.stop(timeout=2)
            raise
        self._running = True

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop every server (SIGTERM, SIGKILL after ``timeout``). Idempotent."""
        self._running = False
        await asyncio.gather(*(p.stop(timeout) for p in self._all()))

    def start_sync(self, timeout: float = 60.0) -> None:
        """start() for synchronous callers."""
        asyncio.run(self.start(timeout))

    def stop_sync(self, timeout: float = 10.0) -> None:
        """stop() for synchronous callers."""
        asyncio.run(self.stop(timeout))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await self.stop()

    async def restart(self, name: str, timeout: float = 20.0) -> None:
        """Start the server ``name`` again after it ended: the same port, store and config, so
        it rejoins (a NATS node catches its streams up; a Valkey instance comes back in the
        role its config file says, and the sentinels make it a replica if the primary moved)."""
        deadline = time.monotonic() + timeout
        process = {p.name: p for p in self._all()}[name]
        await process.stop(timeout=1)
        if process in self._nats:
            self._spawn_nats(self._nats.index(process))
            await self._wait_nats_node(process, deadline, jetstream=False)
        elif process in self._valkey:
            self._spawn_valkey(self._valkey.index(process))
            await self._wait_ping(process, self._ports[name], deadline, admin=True)
        else:
            self._spawn_sentinel(self._sentinels.index(process))
            await self._wait_ping(process, self._ports[name], deadline, admin=False)

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<ReplicatedServers {state} dir={self.home}>"

    # -- ports -------------------------------------------------------------------------------

    def _choose_ports(self) -> None:
        path = self.home / "ports.json"
        known: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(path.read_text())
            if isinstance(raw, dict):
                known = {str(k): int(v) for k, v in raw.items()}
        names = [*(p.name for p in self._all()), *(f"{p.name}-cluster" for p in self._nats)]
        taken = set(known.values())
        for name in names:
            if name not in known:
                port = free_port()
                while port in taken:
                    port = free_port()
                known[name] = port
                taken.add(port)
        self._ports = known
        path.write_text(json.dumps(known, indent=2))

    # -- NATS --------------------------------------------------------------------------------

    def _spawn_nats(self, index: int) -> None:
        process = self._nats[index]
        routes = ",".join(
            f"nats://{HOST}:{self._ports[p.name + '-cluster']}" for i, p in enumerate(self._nats) if i != index
        )
        argv = [
            str(nats_server_binary()),
            "--addr", HOST,
            "--port", str(self._ports[process.name]),
            "--server_name", f"kubus-{index + 1}",
            "--cluster_name", "kubus",
            "--cluster", f"nats://{HOST}:{self._ports[process.name + '-cluster']}",
            "--routes", routes,
            "--jetstream",
            "--store_dir", str(self.home / f"nats-{index + 1}"),
        ]  # fmt: skip
        if self.credentials is not None:
            argv += ["--config", str(self.credentials.nats_config)]
        process.spawn(argv, cwd=self.home, env=nats_server_environment())

    async def _start_nats_cluster(self, deadline: float) -> None:
        for index in range(len(self._nats)):
            self._spawn_nats(index)
        for process in self._nats:
            await self._wait_nats_node(process, deadline, jetstream=False)
        # JetStream answers once the three have elected a meta leader.
        await self._wait_nats_node(self._nats[0], deadline, jetstream=True)

    async def _wait_nats_node(self, process: ServerProcess, deadline: float, *, jetstream: bool) -> None:
        url = self.admin_url(f"nats://{HOST}:{self._ports[process.name]}")
        while not await _nats_answers(url, jetstream=jetstream):
            if process.exited() is not None:
                raise process.failure("exited during startup")
            if time.monotonic() > deadline:
                raise process.failure("did not answer in time" + (" (JetStream account info)" if jetstream else ""))
            await asyncio.sleep(0.1)

    # -- Valkey ------------------------------------------------------------------------------

    def _admin(self) -> tuple[str, str] | None:
        if self.credentials is None:
            return None
        return ADMIN.name, self.credentials.password(ADMIN.name)

    def _spawn_valkey(self, index: int) -> None:
        process = self._valkey[index]
        conf = self.home / f"valkey-{index + 1}.conf"
        if not conf.exists():  # written once: from then on the instance (and the sentinels) own it
            store = self.home / f"valkey-{index + 1}"
            store.mkdir(parents=True, exist_ok=True)
            lines = [
                f"bind {HOST}",
                f"port {self._ports[process.name]}",
                f'dir "{store}"',
                "appendonly yes",
                "appendfsync everysec",
                'save ""',
                "protected-mode yes",
                "daemonize no",
                'logfile ""',
                "replica-serve-stale-data yes",
                # A replica (a new one, or an old primary turned replica) syncs at once, not after
                # the 5 s the server waits by default for more replicas to share the transfer.
                "repl-diskless-sync-delay 0",
            ]
            if index > 0:
                lines.append(f"replicaof {HOST} {self._ports[self._valkey[0].name]}")
            admin = self._admin()
            if admin is not None and self.credentials is not None:
                lines += [f"aclfile {self.credentials.redis_acl}", f"masteruser {admin[0]}", f"masterauth {admin[1]}"]
            _write_private(conf, "\n".join(lines) + "\n")
        process.spawn([str(valkey_server_binary()), str(conf)], cwd=self.home)

    def _spawn_sentinel(self, index: int) -> None:
        process = self._sentinels[index]
        conf = self.home / f"sentinel-{index + 1}.conf"
        if not conf.exists():  # the sentinel rewrites it with what it learns (primary, epoch, peers)
            work = self.home / f"sentinel-{index + 1}"
            work.mkdir(parents=True, exist_ok=True)
            primary = self._ports[self._valkey[0].name]
            lines = [
                f"bind {HOST}",
                f"port {self._ports[process.name]}",
                f'dir "{work}"',
                "daemonize no",
                'logfile ""',
                f"sentinel monitor {SENTINEL_MASTER} {HOST} {primary} 2",
                f"sentinel down-after-milliseconds {SENTINEL_MASTER} {_SENTINEL_DOWN_AFTER_MS}",
                f"sentinel failover-timeout {SENTINEL_MASTER} 10000",
                f"sentinel parallel-syncs {SENTINEL_MASTER} 1",
            ]
            admin = self._admin()
            if admin is not None:
                lines += [
                    f"sentinel auth-user {SENTINEL_MASTER} {admin[0]}",
                    f"sentinel auth-pass {SENTINEL_MASTER} {admin[1]}",
                ]
            _write_private(conf, "\n".join(lines) + "\n")
        process.spawn([str(valkey_server_binary()), str(conf), "--sentinel"], cwd=self.home)

    async def _start_valkey(self, deadline: float) -> None:
        for index, process in enumerate(self._valkey):
            self._spawn_valkey(index)
            await self._wait_ping(process, self._ports[process.name], deadline, admin=True)
        await self._wait_replication(deadline)
        for index, process in enumerate(self._sentinels):
            self._spawn_sentinel(index)
            await self._wait_ping(process, self._ports[process.name], deadline, admin=False)
        await self._wait_sentinels(deadline)

    def _client(self, port: int, *, admin: bool) -> aioredis.Redis:
        url = f"redis://{HOST}:{port}/0"
        return aioredis.Redis.from_url(
            self.admin_url(url) if admin else url,
            socket_connect_timeout=0.5,
            socket_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
            decode_responses=True,
        )

    async def _wait_ping(self, process: ServerProcess, port: int, deadline: float, *, admin: bool) -> None:
        pid = process.proc.pid if process.proc else 0
        client = self._client(port, admin=admin)
        try:
            while True:
                if process.exited() is not None:
                    raise process.failure("exited during startup")
                with contextlib.suppress(OSError, aioredis.RedisError):
                    if await client.ping() and int((await client.info("server")).get("process_id", 0)) == pid:
                        return
                if time.monotonic() > deadline:
                    raise process.failure("did not answer PING in time")
                await asyncio.sleep(POLL_INTERVAL * 5)
        finally:
            await client.aclose()

    async def _wait_replication(self, deadline: float) -> None:
        """Until some instance is a primary whose replicas have all synced (``online``)."""
        while True:
            for process in self._valkey:
                client = self._client(self._ports[process.name], admin=True)
                try:
                    info = await client.info("replication")
                    replicas = [info.get(f"slave{i}") for i in range(_VALKEY_INSTANCES - 1)]
                    online = [r for r in replicas if isinstance(r, dict) and r.get("state") == "online"]
                    if info.get("role") == "master" and len(online) == _VALKEY_INSTANCES - 1:
                        return
                except (OSError, aioredis.RedisError):
                    pass
                finally:
                    await client.aclose()
            if time.monotonic() > deadline:
                raise self._valkey[1].failure("did not replicate the primary in time")
            await asyncio.sleep(0.1)

    async def _master_address(self) -> tuple[str, int]:
        for process in self._sentinels:
            client = self._client(self._ports[process.name], admin=False)
            try:
                reply = await client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER
                )
                if reply:
                    return str(reply[0]), int(reply[1])
            except (OSError, aioredis.RedisError):
                continue
            finally:
                await client.aclose()
        raise ServerStartError("no sentinel answers")

    async def _wait_sentinels(self, deadline: float) -> None:
        """Until every sentinel knows the primary, its replicas and the other sentinels."""
        for process in self._sentinels:
            client = self._client(self._ports[process.name], admin=False)
            try:
                while True:
                    with contextlib.suppress(OSError, aioredis.RedisError):
                        state = await client.execute_command("SENTINEL", "MASTER", SENTINEL_MASTER)  # type: ignore[no-untyped-call]
                        fields = dict(zip(state[::2], state[1::2], strict=False)) if isinstance(state, list) else state
                        peers = int(fields.get("num-other-sentinels", 0))
                        if int(fields.get("num-slaves", 0)) >= _VALKEY_INSTANCES - 1 and peers >= _SENTINELS - 1:
                            break
                    if process.exited() is not None:
                        raise process.failure("exited during startup")
                    if time.monotonic() > deadline:
                        raise process.failure("did not see the primary, its replica and the other sentinels in time")
                    await asyncio.sleep(0.1)
            finally:
                await client.aclose()


async def _nats_answers(url: str, *, jetstream: bool) -> bool:
    async def quiet(_: Exception) -> None:
        return None

    try:
        nc = await nats.connect(url, connect_timeout=1, allow_reconnect=False, max_reconnect_attempts=0, error_cb=quiet)
    except (OSError, TimeoutError, nats.errors.Error):
        return False
    try:
        if jetstream:
            await nc.jetstream(timeout=2).account_info()
        return True
    except (TimeoutError, nats.errors.Error):
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
