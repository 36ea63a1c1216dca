"""The services of one kubus cluster as child processes: started by module name, logged to one
file each, watched, killed and restarted, stopped in order.

`kubus up`, `kubus bench` and the end-to-end tests start the services exactly the same way,
through `cluster_services` and `ServiceGroup`: ``<python> -m kubus.<service> ...`` with the
connection in the environment (``KUBUS_NATS_URL``, ``KUBUS_REDIS_URL``) and, when one is given,
``--settings FILE`` for credentials and TLS. kubus (the library) never imports a service.

On Linux each service is forked from the group's fork server (`kubus.runtime.forkserver`), which
imports the services once: a service then starts, and restarts, without its half-second of
imports, and runs exactly as ``python -m`` would run it (same command line in ``ps``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kubus.cli.embedded import forget_child, log_tail, spawn_child
from kubus.cli.embedded.children import Child
from kubus.cli.embedded.forks import ForkServer, ForkServerError
from kubus.runtime.entrypoint import DEFAULT_STOP_TIMEOUT, EXIT_GRACE
from kubus.runtime.service import RUNNING_EVENT

__all__ = [
    "DEFAULT_METRICS_BASE",
    "GROUP_STOP_WAIT",
    "SERVICE_STOP_WAIT",
    "STOP_ORDER",
    "ServiceGroup",
    "ServiceProcess",
    "ServiceSpec",
    "cluster_services",
    "free_metrics_ports",
    "port_free",
]

_POLL = 0.05
_RUNNING_MARK = f'event="{RUNNING_EVENT}"'.encode()
"""How `kubus.runtime.service.RUNNING_EVENT` reads in a service's log (its value has a space: quoted)."""
_TAIL_LINES = 20

SERVICE_STOP_WAIT = DEFAULT_STOP_TIMEOUT + EXIT_GRACE
"""Seconds between SIGTERM and SIGKILL for one service: its own stop timeout and grace, so a
service that stops itself in time is never killed."""
GROUP_STOP_WAIT = 30.0
"""Seconds a whole group may take to stop (kubelet's default grace period): with NATS or Redis
gone each role could otherwise take its full stop timeout in turn."""

STOP_ORDER = ("watcher", "cycle", "binder", "queue", "gpu-agent")
"""Roles in the order they are stopped: first the watcher (no new pods from the apiserver), the
cycles (no new decisions), then the binders (finish the binds in flight), the queue, and the
node agents last (running pods stay accounted)."""


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One service process to run."""

    name: str
    """Unique within the cluster: the log file is ``<name>.log`` (``cycle-default-scheduler``)."""
    role: str
    """queue, cycle, binder or gpu-agent (see STOP_ORDER)."""
    module: str
    """Run as ``python -m <module>`` (``kubus.queue``)."""
    args: tuple[str, ...] = ()
    metrics_port: int = 0
    """The port of its /metrics, /healthz and /readyz (0: none)."""

    @property
    def metrics_url(self) -> str | None:
        """Where to scrape it, on this machine; None without a metrics port."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port else None


def cluster_services(
    *,
    profiles: Sequence[str],
    config: str | None,
    nodes: int,
    node_template: str | None,
    binders: int = 1,
    log_level: str = "info",
    settings_file: str | None = None,
    role_settings: Mapping[str, str] | None = None,
    metrics_base: int = 0,
    metrics_ports: Sequence[int] = (),
    pod_duration: float | None = None,
    batch_size: int | None = None,
    kubeconfig: str | None = None,
    standby: bool = False,
    lease_ttl: float | None = None,
) -> list[ServiceSpec]:
    """The processes of a cluster: one queue, one cycle per profile, ``binders`` binders and,
    when ``nodes`` > 0, one gpu-agent simulating ``nodes`` nodes from ``node_template``. With
    ``kubeconfig`` (cluster mode), the watcher of that cluster too, and binders that bind in its
    apiserver. ``standby``: a second queue (``queue-standby``) and a second cycle per profile
    (``cycle-<profile>-standby``), each waiting on its lease to take over. ``lease_ttl``: the
    queue's and the cycles' lease lasts this long (renewed every fifth of it, at most every
    second; default: theirs, 5 s).

    ``metrics_ports`` gives the services their metrics ports, in order (see `free_metrics_ports`);
    else ``metrics_base`` > 0 gives them consecutive ports from it; 0 turns metrics off (several
    services on one machine would otherwise fight over one port). Every service
    gets ``--settings``: its role's file from ``role_settings`` (role -> path), else ``settings_file``.
    """
    common: list[str] = ["--log-level", log_level]
    with_config = ["--config", config] if config else []
    leasing = []
    if lease_ttl is not None:
        leasing = ["--lease-ttl", f"{lease_ttl:g}", "--renew-interval", f"{min(1.0, lease_ttl / 5):g}"]
    replicas = ("", "-standby") if standby else ("",)
    specs: list[ServiceSpec] = [
        ServiceSpec(f"queue{r}", "queue", "kubus.queue", (*with_config, *leasing)) for r in replicas
    ]
    for profile in profiles:
        extra = ["--batch-size", str(batch_size)] if batch_size else []
        args = ("--profile", profile, *with_config, *extra, *leasing)
        specs += [ServiceSpec(f"cycle-{_file_safe(profile)}{r}", "cycle", "kubus.cycle", args) for r in replicas]
    in_cluster = ("--kubeconfig", kubeconfig) if kubeconfig else ()
    for i in range(binders):
        specs.append(
            ServiceSpec(
                "binder" if binders == 1 else f"binder-{i}", "binder", "kubus.binder", (*with_config, *in_cluster)
            )
        )
    if kubeconfig:
        specs.append(ServiceSpec("watcher", "watcher", "kubus.watcher", (*with_config, *in_cluster)))
    if nodes > 0:
        if not node_template:
            raise ValueError("simulated nodes need a node template")
        agent = ["--simulate", str(nodes), "--template", node_template]
        if pod_duration is not None:
            agent += ["--pod-duration", f"{pod_duration:g}"]
        specs.append(ServiceSpec("gpu-agent", "gpu-agent", "kubus.gpu_agent", tuple(agent)))
    if metrics_ports and len(metrics_ports) != len(specs):
        raise ValueError(f"{len(metrics_ports)} metrics ports for {len(specs)} services")
    out = []
    for i, spec in enumerate(specs):
        port = metrics_ports[i] if metrics_ports else metrics_base + i if metrics_base > 0 else 0
        chosen = (role_settings or {}).get(spec.role, settings_file)
        login = ["--settings", chosen] if chosen else []
        args = (*spec.args, *common, *login, "--metrics-port", str(port))
        out.append(ServiceSpec(spec.name, spec.role, spec.module, args, port))
    return out


DEFAULT_METRICS_BASE = 10260
"""Where `kubus up` starts looking for free metrics ports: after kube-scheduler's 10259."""


def port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (all interfaces, as the services listen): a bind
    that succeeds now. Another process may still take it before a service does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as the services' HTTP server does: a port whose last connections are in TIME_WAIT is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_metrics_ports(count: int, start: int = DEFAULT_METRICS_BASE) -> list[int]:
    """``count`` ports free now, the lowest from ``start`` up (skipping those taken). Raises
    OSError when fewer are free below 65536."""
    ports: list[int] = []
    port = start
    while len(ports) < count:
        if port > 65535:
            raise OSError(f"no {count} free ports from {start} up for the metrics endpoints")
        if port_free(port):
            ports.append(port)
        port += 1
    return ports


def _file_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


@dataclass
class ServiceProcess:
    """One service child process and its log file (appended to across restarts)."""

    spec: ServiceSpec
    log_path: Path
    env: Mapping[str, str]
    cwd: Path | None = None
    forks: ForkServer | None = None
    """Where to fork it from; None: a fresh interpreter (or when the fork server fails)."""
    proc: Child | None = None
    started_at: float = 0.0
    restarts: int = 0
    expected_exit: bool = False
    """Set while we stop or kill it on purpose: its exit is not a failure."""
    _log_offset: int = 0
    _started_at_offset: int = -1
    """The log offset of the run that said it runs (-1: none yet)."""
    exits: list[float] = field(default_factory=list)
    """When it exited unexpectedly (monotonic seconds), for restart throttling."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def argv(self) -> list[str]:
        return [sys.executable, "-m", self.spec.module, *self.spec.args]

    def start(self) -> None:
        """Start the process (again). Its output goes to the log file, after a header line."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- kubus: starting {' '.join(self.argv())} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
            log.flush()
            self._log_offset = log.tell()
            self.proc = self._forked(log) or spawn_child(self.argv(), cwd=self.cwd, log=log, env=self.env)
        self.started_at = time.monotonic()
        self.expected_exit = False

    def _forked(self, log: IO[bytes]) -> Child | None:
        if self.forks is None:
            return None
        try:
            return self.forks.spawn(self.spec.module, self.spec.args, env=self.env, cwd=self.cwd,
                                    log_path=self.log_path, title=" ".join(self.argv()))  # fmt: skip
        except ForkServerError as exc:  # said in its log, then started the plain way
            log.write(f"--- kubus: not forked ({exc}); starting a fresh interpreter\n".encode())
            log.flush()
            return None

    def returncode(self) -> int | None:
        """The exit status if the process has ended, else None (also None before start)."""
        return None if self.proc is None else self.proc.poll()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last lines this run of the process wrote."""
        return log_tail(self.log_path, self._log_offset, lines)

    def started(self) -> bool:
        """Whether this run of the service has said it runs (`kubus.runtime.service.RUNNING_EVENT` in its
        log): connected, its work subscribed. Reads the log until it has."""
        if self._started_at_offset == self._log_offset:
            return True
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                said = _RUNNING_MARK in log.read()
        except OSError:
            return False
        if said:
            self._started_at_offset = self._log_offset
        return said

    def kill(self) -> None:
        """SIGKILL, as a crash would (`kill -9`); the exit is expected. Does not wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to end; its exit status or None."""
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            await asyncio.sleep(_POLL)
        return self.returncode()

    async def stop(self, timeout: float = SERVICE_STOP_WAIT) -> int | None:
        """SIGTERM, up to ``timeout`` seconds to exit, then SIGKILL. Idempotent; the exit status."""
        proc = self.proc
        if proc is None:
            return None
        self.expected_exit = True
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            await self.wait(timeout)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                while proc.poll() is None:
                    await asyncio.sleep(_POLL)
        forget_child(proc)
        return proc.returncode


class ServiceGroup:
    """The service processes of one cluster, started together and stopped in STOP_ORDER.

    ``env`` is added to this process's environment for every child (the connection URLs).
    ``fork``: fork the services from a fork server that has imported them (Linux; its log is
    ``forkserver.log``), else start each in a fresh interpreter.
    """

    def __init__(self, specs: Iterable[ServiceSpec], log_dir: Path, env: Mapping[str, str], *,
                 cwd: Path | None = None, fork: bool = True) -> None:  # fmt: skip
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        specs = list(specs)
        self.log_dir = log_dir
        self.forks: ForkServer | None = None
        if fork and sys.platform.startswith("linux"):
            modules = sorted({spec.module for spec in specs})
            self.forks = ForkServer(modules, log_dir / "forkserver.log", env=full_env, cwd=cwd)
        self.services: dict[str, ServiceProcess] = {}
        for spec in specs:
            if spec.name in self.services:
                raise ValueError(f"two services named {spec.name!r}")
            self.services[spec.name] = ServiceProcess(spec, log_dir / f"{spec.name}.log", full_env, cwd, self.forks)

    def __getitem__(self, name: str) -> ServiceProcess:
        return self.services[name]

    def __iter__(self) -> Iterator[ServiceProcess]:
        return iter(self.services.values())

    def by_role(self, role: str) -> list[ServiceProcess]:
        return [s for s in self.services.values() if s.spec.role == role]

    def start(self) -> None:
        """Start every service that is not running."""
        for service in self.services.values():
            if not service.running:
                service.start()

    def failed(self) -> list[ServiceProcess]:
        """Services that exited without being asked to (each reported once: it is then marked)."""
        out = []
        for service in self.services.values():
            code = service.returncode()
            if code is not None and not service.expected_exit:
                service.expected_exit = True
                service.exits.append(time.monotonic())
                out.append(service)
        return out

    async def stop(self, timeout: float = SERVICE_STOP_WAIT, total: float = GROUP_STOP_WAIT) -> dict[str, int | None]:
        """Stop every service, role by role in STOP_ORDER (a role's replicas together): SIGTERM,
        then SIGKILL after ``timeout`` seconds. Idempotent. The whole stop takes at most about
        ``total`` seconds: roles not yet stopped by then are killed (their in-flight work is
        redelivered, as after any crash). Returns each one's exit status."""
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + total
        roles = [*STOP_ORDER, *sorted({s.spec.role for s in self.services.values()} - set(STOP_ORDER))]
        for role in roles:
            group = self.by_role(role)
            wait = min(timeout, max(deadline - time.monotonic(), 0.0))
            results = await asyncio.gather(*(s.stop(wait) for s in group))
            codes.update({s.name: code for s, code in zip(group, results, strict=True)})
        if self.forks is not None:
            self.forks.close()
        return codes

    def kill_all(self) -> None:
        for service in self.services.values():
            service.kill()
