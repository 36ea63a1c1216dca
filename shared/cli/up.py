"""`kubus up`: the whole system on this machine, as child processes, until Ctrl-C.

Order of things: check the arguments (a mistake stops here, exit 2) → start the embedded NATS
and Redis-compatible servers (unless external URLs are given) → record the URLs in
``<data dir>/endpoints.json`` for the other commands → start the services (`kubus.cli.processes`)
→ wait until every simulated node heartbeats and every profile's cycle holds its lease → run
(or, with --demo, run the sample workload) → on Ctrl-C/SIGTERM stop the services in order, then
the servers. A service that exits on its own is reported with the tail of its log and started
again, after a backoff (`RestartBackoff`: 0.5 s, doubling with each exit that comes soon after
its start, at most 30 s), for as long as it takes: a full disk or a store that is away for
minutes degrades the cluster, never stops it. So is an embedded server that dies, on the same
port and data directory. kubus up gives up (and stops everything, exit 1) only on a process that
cannot start at all: a service that refuses its flags or configuration (exit 2), a server
binary that is missing; it says which and why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubus.access import ACCESS_DIR, ADMIN, ROLES, Credentials, ensure_credentials
from kubus.api.manifests import load_manifests
from kubus.cli.commands import scheduler_config
from kubus.cli.connect import Unreachable, UsageError, open_store, safe_url
from kubus.cli.embedded import HA_DIR, EmbeddedServers, ReplicatedServers, ServerStartError
from kubus.cli.endpoints import (
    Endpoints,
    data_dir,
    read_endpoints,
    record_cluster,
    remove_endpoints,
    user_config,
    write_endpoints,
)
from kubus.cli.processes import (
    DEFAULT_METRICS_BASE,
    SERVICE_STOP_WAIT,
    ServiceGroup,
    ServiceProcess,
    cluster_services,
    free_metrics_ports,
    port_free,
)
from kubus.cli.progress import sleep_or
from kubus.cli.workload import NODE_TEMPLATE, gpu_scheduler_config
from kubus.core.settings import ConnectionSettings, load_settings
from kubus.framework.config import ignored_warnings
from kubus.runtime.entrypoint import EXIT_USAGE
from kubus.store import ClusterState, cycle_lease, queue_lease

__all__ = ["Cluster", "RestartBackoff", "run_up", "start_cluster", "wait_ready"]


@dataclass(slots=True)
class RestartBackoff:
    """How long to wait before starting a process that exited on its own again: ``first``
    seconds, doubling with each exit that came less than ``steady`` seconds after its start (a
    process that ran that long starts over from ``first``), at most ``cap``."""

    first: float = 0.5
    cap: float = 30.0
    steady: float = 60.0
    failures: int = 0
    """Exits in a row, each soon after its start."""

    def delay(self, ran_for: float) -> float:
        """Count an exit after ``ran_for`` seconds of running; the seconds to wait before the restart."""
        self.failures = 1 if ran_for >= self.steady else self.failures + 1
        return min(self.cap, self.first * 2.0 ** (self.failures - 1))


def _err(text: str) -> None:
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Cluster:
    """A running cluster: its servers (None when external), connection and service processes."""

    directory: Path
    settings: ConnectionSettings
    servers: EmbeddedServers | ReplicatedServers | None
    group: ServiceGroup
    profiles: tuple[str, ...]
    nodes: int
    config: str | None

    async def stop(self, timeout: float = SERVICE_STOP_WAIT) -> dict[str, int | None]:
        """Services in order (SIGTERM, SIGKILL after ``timeout``; all of them within
        `GROUP_STOP_WAIT`), then the servers. Idempotent."""
        codes = await self.group.stop(timeout)
        if self.servers is not None:
            await self.servers.stop()
        return codes


def default_config_file(directory: Path, profiles: Sequence[str] = ("default-scheduler",)) -> str:
    """Write the default configuration of a simulated GPU cluster (kube's default profile plus
    GPUFit, see `gpu_scheduler_config`) into the data dir; return its absolute path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "scheduler-config.yaml"
    target.write_text(gpu_scheduler_config(profiles))
    return str(target.resolve())


def check_template(path: str | None, directory: Path, nodes: int) -> str | None:
    """The absolute path of the node template to simulate from (the built-in one written to the
    data dir when none is given); None without simulated nodes. Raises UsageError/ManifestError."""
    if nodes <= 0:
        return None
    if path is None:
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / "node-template.yaml"
        target.write_text(NODE_TEMPLATE)
        return str(target.resolve())
    manifests = load_manifests(path)
    if len(manifests.nodes) != 1 or manifests.pods:
        raise UsageError(
            f"{path}: a node template is exactly one Node manifest, found "
            f"{len(manifests.nodes)} Node(s) and {len(manifests.pods)} Pod(s)"
        )
    return str(Path(path).resolve())


async def start_cluster(
    directory: Path,
    *,
    config: str | None,
    profiles: Sequence[str],
    nodes: int,
    node_template: str | None,
    binders: int = 1,
    nats: str | None = None,
    redis: str | None = None,
    settings_file: str | None = None,
    credentials: Credentials | None = None,
    log_level: str = "info",
    metrics_base: int = 0,
    metrics_ports: Sequence[int] = (),
    pod_duration: float | None = None,
    batch_size: int | None = None,
    kubeconfig: str | None = None,
    standby: bool = False,
    lease_ttl: float | None = None,
    ha: bool = False,
    fork: bool = True,
) -> Cluster:
    """Start servers (embedded unless ``nats`` and ``redis`` are given) and the services.
    Returns once the processes are started (not yet ready: see `wait_ready`).

    Embedded servers admit only the users of ``<directory>/access`` (made on the first start,
    kept after; `kubus.access`): each service logs in as its role, kubus up itself as admin.
    External servers take ``settings_file`` for every service, or, with ``credentials`` (whose
    users those servers know), each role's own login. ``kubeconfig``: cluster mode (the watcher,
    binders binding in its apiserver; `cluster_services`). ``standby``: a standby queue and a
    standby cycle per profile; ``lease_ttl``: their leases' ttl (`cluster_services`). ``ha``:
    embedded servers with no single point of failure (`ReplicatedServers`); every login's
    settings file then names the sentinels and the replica counts. ``fork``: fork the services
    from a fork server (`ServiceGroup`).

    Raises Unreachable when an external server does not answer, ServerStartError when an
    embedded one does not start (nothing is left running then).
    """
    servers: EmbeddedServers | ReplicatedServers | None = None
    if nats and redis:
        urls = {"nats_url": nats, "redis_url": redis}
    elif ha:
        credentials = ensure_credentials(directory / ACCESS_DIR)
        servers = ReplicatedServers(directory, credentials=credentials)
        await servers.start()
        urls = {"nats_url": servers.nats_url, "redis_url": servers.redis_url}
        # Every login (the services', the CLI's) finds the primary through the sentinels.
        ha_settings = {k: v for k, v in servers.settings().items() if k not in urls}
        credentials = ensure_credentials(directory / ACCESS_DIR, settings=ha_settings)
    else:
        credentials = ensure_credentials(directory / ACCESS_DIR)
        servers = EmbeddedServers(directory, credentials=credentials)
        await servers.start()
        urls = {"nats_url": servers.nats_url, "redis_url": servers.redis_url}
    if credentials is not None:
        settings = load_settings(file=credentials.settings_file(ADMIN.name), overrides=urls)
    else:
        settings = load_settings(file=settings_file, overrides=urls)
    if servers is None:
        async with open_store(settings):
            pass  # answers, or Unreachable names the URL
    role_settings: dict[str, str] | None = None
    if credentials is not None:
        role_settings = {r: str(credentials.settings_file(r).resolve()) for r in ROLES if r in credentials.passwords}
    specs = cluster_services(
        profiles=profiles,
        config=config,
        nodes=nodes,
        node_template=node_template,
        binders=binders,
        log_level=log_level,
        settings_file=str(Path(settings_file).resolve()) if settings_file and credentials is None else None,
        role_settings=role_settings,
        metrics_base=metrics_base,
        metrics_ports=metrics_ports,
        pod_duration=pod_duration,
        batch_size=batch_size,
        kubeconfig=kubeconfig,
        standby=standby,
        lease_ttl=lease_ttl,
    )
    env = {"KUBUS_NATS_URL": settings.nats_url, "KUBUS_REDIS_URL": settings.redis_url}
    group = ServiceGroup(specs, directory / "logs", env, fork=fork)
    group.start()
    return Cluster(directory, settings, servers, group, tuple(profiles), nodes, config)


async def wait_ready(
    cluster: Cluster, store: ClusterState, *, timeout: float, since: float, stop: asyncio.Event | None = None
) -> list[ServiceProcess]:
    """Wait until every service says it runs (`ServiceProcess.started`), ``cluster.nodes`` nodes
    have heartbeaten since ``since`` (wall clock) and every profile's cycle holds its lease.
    Returns [] when ready, the services that exited meanwhile otherwise. Raises TimeoutError
    after ``timeout`` seconds (the message says what is missing)."""
    deadline = time.monotonic() + timeout
    missing = ""
    while True:
        failed = cluster.group.failed()
        if failed:
            return failed
        if stop is not None and stop.is_set():
            return []
        fresh = (
            sum(
                1
                for r in await store.list_nodes()
                if r.heartbeat is not None and r.heartbeat >= since - 1 and not r.unreachable
            )
            if cluster.nodes
            else 0
        )
        leases = await store.get_leases(queue_lease(), *(cycle_lease(p) for p in cluster.profiles))
        leaderless = [name for name, lease in zip(("queue", *cluster.profiles), leases, strict=True) if lease is None]
        starting = [s.name for s in cluster.group if not s.started()]
        if fresh >= cluster.nodes and not leaderless and not starting:
            return []
        missing = f"{fresh}/{cluster.nodes} nodes heartbeating"
        if leaderless:
            missing += f", no active queue or cycle for {', '.join(leaderless)}"
        if starting:
            missing += f", not running yet: {', '.join(starting)}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"not ready after {timeout:g}s: {missing}")
        await asyncio.sleep(0.25)


def report_exit(service: ServiceProcess, *, restarting: bool, after: float = 0.0) -> None:
    code = service.returncode()
    what = f"exited with code {code}" if code is not None and code >= 0 else f"was killed by signal {-(code or 0)}"
    then = f"; starting it again in {after:g}s" if restarting else ""
    tail = service.log_tail() or "(its log is empty)"
    indented = "\n".join("    " + line for line in tail.splitlines())
    _err(f"kubus up: service {service.name} {what}{then}. Last lines of {service.log_path}:\n{indented}")


async def _redis_problem(store: ClusterState) -> str | None:
    """Why Redis cannot serve the services now (down, LOADING, refusing writes for a full disk:
    its PING is refused then), one line; None when it answers."""
    try:
        async with asyncio.timeout(2.0):
            await store.redis.ping()
    except Exception as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split()) or type(exc).__name__
    return None


async def supervise(cluster: Cluster, stop: asyncio.Event, store: ClusterState | None = None) -> int:
    """Run until ``stop`` is set (0), restarting the embedded servers and the services that
    exit, each after its `RestartBackoff`, however often; 1 when one cannot start at all (a
    service that exits with the usage status 2, a server binary that is missing). With
    ``store``, Redis is asked every few seconds, and a Redis that cannot serve (down, a full
    disk) is said once, and once more when it serves again: the services wait meanwhile, not
    ready, and lose nothing."""
    redis_down: str | None = None
    next_redis_check = 0.0
    backoffs: dict[str, RestartBackoff] = {}
    due: dict[str, float] = {}
    """Process name -> when to start it again (monotonic)."""
    server_since: dict[str, float] = {}
    """Server name -> when it was last started (monotonic)."""
    started = time.monotonic()
    while not await sleep_or(stop, 0.25):
        now = time.monotonic()
        if store is not None and now >= next_redis_check:
            next_redis_check = now + 3.0
            problem = await _redis_problem(store)
            if problem is not None and redis_down is None:
                _err(f"kubus up: Redis cannot serve the services ({problem}); they wait, not ready, and lose nothing")
            elif problem is None and redis_down is not None:
                _say("kubus up: Redis serves again; the services go on")
            redis_down = problem
        if cluster.servers is not None:
            for name, code in cluster.servers.exited().items():
                if name in due:
                    continue
                how = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
                wait = backoffs.setdefault(name, RestartBackoff()).delay(now - server_since.get(name, started))
                _err(f"kubus up: {name} {how}; starting it again on the same port and data dir in {wait:g}s")
                due[name] = now + wait
            for name in [n for n in cluster.servers.names() if n in due and due[n] <= now]:
                del due[name]
                try:
                    await cluster.servers.restart(name)
                except FileNotFoundError as exc:
                    _err(f"kubus up: {name} cannot start: {exc}; giving up")
                    return 1
                except ServerStartError as exc:
                    wait = backoffs.setdefault(name, RestartBackoff()).delay(0.0)
                    _err(f"kubus up: {name} did not start again ({exc}); trying again in {wait:g}s")
                    due[name] = time.monotonic() + wait
                    continue
                server_since[name] = time.monotonic()
                _say(f"kubus up: {name} is back")
        for service in cluster.group.failed():
            if service.returncode() == EXIT_USAGE:  # refused its flags or configuration: it never will start
                report_exit(service, restarting=False)
                _err(f"kubus up: {service.name} cannot start as configured (exit {EXIT_USAGE}); giving up")
                return 1
            wait = backoffs.setdefault(service.name, RestartBackoff()).delay(now - service.started_at)
            report_exit(service, restarting=True, after=wait)
            due[service.name] = now + wait
        for service in cluster.group.services.values():
            if service.name in due and due[service.name] <= now and not service.running:
                del due[service.name]
                service.restarts += 1
                service.start()
    return 0


def _install_signals(stop: asyncio.Event, cluster_ref: list[Cluster]) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set() and cluster_ref:
            _err("kubus up: second interrupt; killing the services")
            cluster_ref[0].group.kill_all()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)


CLUSTER_PROFILE = "kubus"
"""The profile `kubus up --kubeconfig` schedules without --config: a name of its own, so that the
cluster's kube-scheduler keeps the pods that name none (default-scheduler)."""


async def _cluster_kubeconfig(args: argparse.Namespace) -> str | None:
    """Cluster mode (--kubeconfig): the kubeconfig's absolute path, once the cluster was found to
    answer and let kubus read and bind what it must; None in the bus mode. Raises UsageError for
    a kubeconfig that cannot be used (exit 2), Unreachable for an apiserver that cannot (exit 1)."""
    if args.kubeconfig is None:
        if args.context:
            raise UsageError("--context names a context of --kubeconfig: give --kubeconfig too")
        return None
    from kubus.kubeapi import NODES, PODS, KubeAccessError, KubeClient, KubeConfigError, check_access
    from kubus.kubeapi import load_config as load_kube_config

    try:
        kube = load_kube_config(args.kubeconfig, context=args.context)
    except KubeConfigError as exc:
        raise UsageError(str(exc)) from None
    async with KubeClient(kube) as client:
        try:
            await check_access(client, (NODES, PODS), fix_rbac="see deploy/helm/kubus/templates/rbac.yaml")
        except KubeAccessError as exc:
            raise Unreachable(str(exc)) from None
    return str(Path(args.kubeconfig).expanduser().resolve())


async def run_up(args: argparse.Namespace) -> int:
    """`kubus up`; see the module docstring. Raises UsageError (exit 2) and Unreachable (exit 1)."""
    kubeconfig = await _cluster_kubeconfig(args)
    if args.nodes is None:
        args.nodes = 0 if kubeconfig else 10
    elif kubeconfig and args.nodes:
        raise UsageError("--nodes simulates nodes in the bus mode; with --kubeconfig the cluster's nodes are used")
    if args.nodes < 0:
        raise UsageError(f"--nodes: expected 0 or more, got {args.nodes}")
    if args.binders < 1:
        raise UsageError(f"--binders: expected 1 or more, got {args.binders}")
    if (args.nats is None) != (args.redis is None):
        raise UsageError("give both --nats and --redis (external servers), or neither (embedded servers)")
    if args.fresh and args.nats:
        raise UsageError("--fresh deletes the embedded servers' data; it does not apply to --nats/--redis")
    if args.ha and args.nats:
        raise UsageError("--ha starts replicated embedded servers; for --nats/--redis give the settings (--settings)")
    if args.demo and args.nodes == 0:
        raise UsageError("--demo needs simulated nodes (--nodes 1 or more)")
    if args.pod_duration is not None and args.pod_duration < 0:
        raise UsageError(f"--pod-duration: expected seconds >= 0, got {args.pod_duration:g}")
    directory = data_dir(args.data_dir).resolve()
    running = read_endpoints(directory)
    if running is not None and _pid_alive(running.pid):
        raise UsageError(f"kubus up is already running with data dir {directory} (pid {running.pid})")
    if args.config:
        config_path = str(Path(args.config).resolve())
    else:
        config_path = default_config_file(directory, (CLUSTER_PROFILE,) if kubeconfig else ("default-scheduler",))
    config = scheduler_config(config_path)
    for line in ignored_warnings(config):
        print(f"kubus up: warning: {line}", file=sys.stderr)
    profiles = tuple(p.scheduler_name for p in config.profiles)
    template = check_template(args.node_template, directory, args.nodes)
    if args.fresh:
        for sub in ("nats", "redis", "nats-ports", HA_DIR, ACCESS_DIR):
            shutil.rmtree(directory / sub, ignore_errors=True)
    pod_duration = args.pod_duration if args.pod_duration is not None else (5.0 if args.demo else None)
    metrics_ports = _metrics_ports(args, profiles, kubeconfig)

    stop = asyncio.Event()
    cluster_ref: list[Cluster] = []
    _install_signals(stop, cluster_ref)
    started = time.time()
    try:
        cluster = await start_cluster(
            directory,
            config=config_path,
            profiles=profiles,
            nodes=args.nodes,
            node_template=template,
            binders=args.binders,
            nats=args.nats,
            redis=args.redis,
            settings_file=args.settings,
            log_level=args.log_level,
            metrics_ports=metrics_ports,
            pod_duration=pod_duration,
            kubeconfig=kubeconfig,
            standby=args.standby,
            ha=args.ha,
            fork=args.fork,
        )
    except ServerStartError as exc:
        _err(f"kubus up: the embedded servers did not start: {exc}")
        return 1
    cluster_ref.append(cluster)
    embedded = cluster.servers is not None
    write_endpoints(
        directory,
        Endpoints(
            cluster.settings.nats_url,
            cluster.settings.redis_url,
            config_path,
            os.getpid(),
            started,
            embedded,
            metrics={s.name: url for s in cluster.group if (url := s.spec.metrics_url)},
        ),
    )
    try:  # so that the cluster commands find it from any directory, as kubectl its kubeconfig's
        cluster_name: str | None = record_cluster(directory)
    except OSError as exc:
        cluster_name = None
        _err(f"kubus up: warning: cannot record the cluster in {user_config()}: {exc}")
    try:
        _print_banner(cluster, args)
        async with open_store(cluster.settings) as store:
            _say(f"waiting for {args.nodes} nodes and the cycles of {', '.join(profiles)} ...")
            try:
                failed = await wait_ready(cluster, store, timeout=args.ready_timeout, since=started, stop=stop)
            except TimeoutError as exc:
                _err(f"kubus up: {exc}; see the logs in {directory / 'logs'}")
                return 1
            if failed:
                for service in failed:
                    report_exit(service, restarting=False)
                _err("kubus up: a service failed to start; stopping")
                return 1
            if stop.is_set():
                return 0
            _say(f"ready in {time.time() - started:.1f}s: {args.nodes} nodes, profiles {', '.join(profiles)}")
            if args.demo:
                from kubus.cli.demo import run_demo

                return await run_demo(cluster, store, stop, pods=args.demo_pods, pod_duration=pod_duration)
            if kubeconfig:
                _say(f"kubus schedules the pods of {kubeconfig} whose spec.schedulerName is {', '.join(profiles)}")
            else:
                _print_try(directory, cluster_name)
            return await supervise(cluster, stop, store)
    except Unreachable as exc:
        _err(f"kubus up: {exc}")
        return 1
    finally:
        _say("kubus up: stopping the services ...")
        codes = await cluster.stop()
        remove_endpoints(directory, os.getpid())
        unclean = {n: c for n, c in codes.items() if c not in (0, None, -signal.SIGTERM)}
        if unclean:
            _err("kubus up: " + ", ".join(f"{n} exited with {c}" for n, c in unclean.items()))
        _say("kubus up: stopped")


def _print_banner(cluster: Cluster, args: argparse.Namespace) -> None:
    d = cluster.directory
    lines = [f"kubus up: data dir {d}"]
    if cluster.servers is not None:
        lines.append(f"  NATS   {cluster.settings.nats_url}   (log {cluster.servers.nats_log})")
        lines.append(f"  Redis  {cluster.settings.redis_url}   (log {cluster.servers.redis_log})")
        if isinstance(cluster.servers, ReplicatedServers):
            lines.append(
                f"  HA     3 NATS nodes, streams x{cluster.settings.stream_replicas}; Valkey primary + 2 replicas, "
                f"sentinels {cluster.servers.sentinels}   (logs in {cluster.servers.home})"
            )
    else:
        lines.append(f"  NATS   {safe_url(cluster.settings.nats_url)}   (external)")
        lines.append(f"  Redis  {safe_url(cluster.settings.redis_url)}   (external)")
    lines.append(f"  services ({len(cluster.group.services)}), one log each in {d / 'logs'}:")
    for s in cluster.group:
        lines.append(f"    {s.name:<28} pid {s.pid:<8} {s.log_path.name}")
    urls = [f"{s.name} {url}" for s in cluster.group if (url := s.spec.metrics_url)]
    lines.append(f"  metrics: {', '.join(urls)}" if urls else "  metrics: off (--metrics-base 0)")
    _say("\n".join(lines))


def _metrics_ports(args: argparse.Namespace, profiles: Sequence[str], kubeconfig: str | None) -> list[int]:
    """The services' metrics ports, in `cluster_services` order: none with ``--metrics-base 0``;
    consecutive from ``--metrics-base PORT``, each of which must be free (UsageError naming the
    one taken); else ports free now from `DEFAULT_METRICS_BASE` up (none, with a warning, when
    there are not enough: metrics never keep a cluster from starting)."""
    if args.metrics_base == 0:
        return []
    count = len(
        cluster_services(
            profiles=profiles, config=None, nodes=args.nodes, node_template="-", binders=args.binders,
            kubeconfig=kubeconfig, standby=args.standby,
        )
    )  # fmt: skip
    if args.metrics_base is None:
        try:
            return free_metrics_ports(count, DEFAULT_METRICS_BASE)
        except OSError as exc:
            _err(f"kubus up: warning: {exc}; the services run without metrics endpoints")
            return []
    base = args.metrics_base
    if not 0 < base <= 65536 - count:
        raise UsageError(f"--metrics-base: {base} is not a port with {count - 1} more after it (1-65535); 0 for none")
    for port in range(base, base + count):
        if not port_free(port):
            raise UsageError(
                f"--metrics-base {base}: port {port} is already in use (the services need {base}-{base + count - 1}); "
                "give another base, or leave --metrics-base out and kubus up picks free ports"
            )
    return list(range(base, base + count))


def _print_try(directory: Path, cluster_name: str | None) -> None:
    if cluster_name is not None:
        where = f"   (from any directory: this is the current cluster, {cluster_name!r}, of {user_config()})\n"
    else:
        where = f"   (other shells: export KUBUS_HOME={directory})\n"
    _say(
        "Try, in another shell:\n"
        "  kubus apply -f deploy/examples/up-pods.yaml\n"
        "  kubus get pods -A\n"
        "  kubus get nodes\n"
        "  kubus describe pod too-big-1\n"
        f"{where}"
        "Ctrl-C stops everything."
    )
