"""The cluster commands' arguments and dispatch: up, apply, get, describe, delete, bench.

Every command that talks to a cluster takes the same connection options (`add_connection_options`);
see `kubus.cli.endpoints` for the order in which they, the environment, a settings file and a
running `kubus up` decide where NATS and Redis are.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO, TypeVar

import nats.errors
import redis.exceptions

from kubus.api.label_selectors import LabelSelectorSyntaxError, parse_label_selector
from kubus.api.manifests import FieldValidation
from kubus.api.objects import LabelSelector
from kubus.cli.cluster import APPLY_TIMEOUT
from kubus.cli.connect import Unreachable, UsageError
from kubus.cli.endpoints import (
    DEFAULT_DATA_DIR,
    HOME_ENV,
    Endpoints,
    cluster_home,
    cluster_settings,
    read_endpoints,
    user_config,
)
from kubus.cli.output import OUTPUT_FORMATS, output_formats, output_of
from kubus.cli.resources import manifest_paths, objects_in_files, resource_choices, targets
from kubus.cli.workload import BENCH_WORKLOADS
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import SchedulerConfiguration, default_config, load_config
from kubus.plugins import in_tree_registry

_P = TypeVar("_P", bound=argparse.ArgumentParser)

__all__ = ["add_cluster_commands", "add_connection_options", "add_validate_option", "run_cluster_command"]


def add_connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (default: $KUBUS_NATS_URL/$KUBUS_REDIS_URL, else the running `kubus up`)")
    g.add_argument("--nats", metavar="URL", help="NATS server URL (nats://host:4222; tls://... for TLS)")
    g.add_argument("--redis", metavar="URL", help="Redis URL (redis://host:6379/0; rediss://... for TLS)")
    g.add_argument(
        "--settings",
        metavar="FILE",
        help="connection settings YAML (kubus.core.settings: URLs, NATS creds/user/token, TLS files, Redis auth)",
    )
    g.add_argument(
        "--data-dir",
        "--kubus-home",
        dest="data_dir",
        metavar="DIR",
        help=f"the `kubus up` data dir whose endpoints.json to use (default: --cluster, else ${HOME_ENV}, else "
        f"./{DEFAULT_DATA_DIR} when a kubus up runs there, else the current cluster of ~/.kubus/config)",
    )
    g.add_argument(
        "--cluster",
        metavar="NAME",
        help="a cluster kubus up recorded in ~/.kubus/config ($KUBUS_CONFIG), by name, as kubectl's --context",
    )


def add_validate_option(p: argparse.ArgumentParser) -> None:
    """kubectl's ``--validate``: what an unknown or duplicate field of a manifest is."""

    def parse(value: str) -> FieldValidation:
        try:
            return FieldValidation.parse(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("--validate: ")) from None

    p.add_argument(
        "--validate",
        type=parse,
        default=FieldValidation.STRICT,
        metavar="MODE",
        help="a field the object's Kubernetes schema lacks, or a field given twice: strict (or true, the "
        "default) refuses it, warn accepts it with a warning, ignore (or false) accepts it silently",
    )


def _namespace_options(p: argparse.ArgumentParser, *, all_namespaces: bool) -> None:
    p.add_argument("-n", "--namespace", default=None, help='namespace (default: "default")')
    if all_namespaces:
        p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def _output_options(p: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """kubectl's -o (with jsonpath=, jsonpath-file= and custom-columns= templates), --no-headers
    and --sort-by."""
    p.add_argument(
        "-o",
        "--output",
        choices=output_formats(*formats),
        default="table",
        metavar="FORMAT",
        help="table (default), wide, json, yaml, name, jsonpath=TEMPLATE, jsonpath-file=FILE or "
        "custom-columns=NAME:.field.path,... (as kubectl's: {.items[*].metadata.name}, "
        '{range .items[*]}{.metadata.name}{"\\t"}{.spec.nodeName}{"\\n"}{end})',
    )
    p.add_argument("--no-headers", action="store_true", help="tables without their header line")
    p.add_argument(
        "--sort-by",
        metavar="JSONPATH",
        help="order by this field of the objects, as kubectl's: .metadata.name, .metadata.creationTimestamp, "
        ".spec.nodeName",
    )


def _intermixed(p: argparse.ArgumentParser) -> None:
    """Let names follow options, as kubectl's ``get pods -n shop web`` (argparse alone stops
    taking positionals after the first option)."""
    base = type(p)

    class Intermixed(base):  # type: ignore[valid-type,misc]  # a subclass of the parser's own class
        _mixing = False

        # Any: argparse's own signature, overloaded on ``namespace``, passed through as it is.
        def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
            if self._mixing:
                return super().parse_known_args(args, namespace)
            self._mixing = True
            try:
                return self.parse_known_intermixed_args(args, namespace)
            finally:
                self._mixing = False

    p.__class__ = Intermixed


def _selector(args: argparse.Namespace) -> LabelSelector:
    """`-l`: kubectl's label selector syntax. Raises UsageError for one that does not parse."""
    try:
        return parse_label_selector(args.selector)
    except LabelSelectorSyntaxError as e:
        raise UsageError(str(e)) from None


def add_cluster_commands(sub: argparse._SubParsersAction[_P]) -> None:
    """Add up, apply, get, top, describe, delete and bench to the `kubus` subcommands."""
    up = sub.add_parser(
        "up",
        help="run kubus on this machine: NATS, Redis, every service and simulated GPU nodes",
        description="Start embedded NATS (JetStream) and Redis-compatible servers (unless --nats and --redis "
        "are given), then the services as child processes: the queue, one cycle per scheduler profile, binders "
        "and a gpu-agent simulating --nodes nodes. Runs until Ctrl-C or SIGTERM, then stops everything in order.",
    )
    up.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"servers' data, logs, endpoints.json (default: ${HOME_ENV}, else ./{DEFAULT_DATA_DIR})",
    )
    up.add_argument(
        "--nodes", type=int, metavar="N", help="simulated nodes (default: 10, none with --kubeconfig; 0 for none)"
    )
    up.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="cluster mode: schedule this Kubernetes cluster's pods (its nodes, no simulated ones; the watcher "
        "and binders talk to its apiserver). The default profile is then 'kubus' (spec.schedulerName: kubus)",
    )
    up.add_argument("--context", metavar="NAME", help="the --kubeconfig context (default: its current-context)")
    up.add_argument(
        "--node-template",
        metavar="FILE",
        help="Node manifest the simulated nodes are made from "
        "(default: an 8 x H100 node, as deploy/examples/node-template.yaml)",
    )
    up.add_argument(
        "--config",
        metavar="SCHEDCONFIG",
        help="KubeSchedulerConfiguration YAML (default: kube's default profile plus GPUFit)",
    )
    up.add_argument("--binders", type=int, default=1, metavar="K", help="binder processes (default: 1)")
    up.add_argument(
        "--standby",
        action="store_true",
        help="run a standby queue and a standby cycle per profile too: each waits on its lease and takes over "
        "when the active one dies (its node table kept current meanwhile)",
    )
    up.add_argument(
        "--ha",
        action="store_true",
        help="embedded servers with no single point of failure: a 3-node NATS cluster (streams in 3 copies), "
        "a Valkey primary, 2 replicas and 3 sentinels; writes that must survive a failover wait for a replica",
    )
    up.add_argument(
        "--no-fork",
        dest="fork",
        action="store_false",
        help="start each service in a fresh Python interpreter, instead of forking it from a process that has "
        "imported the services once (Linux; saves each start and restart about half a CPU-second)",
    )
    up.add_argument("--nats", metavar="URL", help="use this NATS server instead of an embedded one (needs --redis)")
    up.add_argument("--redis", metavar="URL", help="use this Redis instead of an embedded one (needs --nats)")
    up.add_argument("--settings", metavar="FILE", help="connection settings YAML for external servers (creds, TLS)")
    up.add_argument(
        "--demo",
        action="store_true",
        help="also run a mixed GPU/CPU sample workload, show its progress and a summary, then stop everything",
    )
    up.add_argument(
        "--demo-pods", type=int, default=300, metavar="P", help="pods in the --demo workload (default: 300)"
    )
    up.add_argument(
        "--pod-duration",
        type=float,
        metavar="S",
        help="seconds a simulated pod runs before it succeeds (default: the gpu-agent's; 5 with --demo)",
    )
    up.add_argument(
        "--fresh", action="store_true", help="delete the embedded servers' data and credentials first (a clean cluster)"
    )
    up.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    up.add_argument(
        "--metrics-base",
        type=int,
        default=None,
        metavar="PORT",
        help="give the services metrics ports PORT, PORT+1, ... (default: free ports from 10260 up, "
        "printed and recorded in the data dir's endpoints.json; 0: no metrics endpoints)",
    )
    up.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait for the services and nodes to be ready (default: 120)",
    )

    apply = sub.add_parser(
        "apply",
        help="submit Pod manifests (and Namespaces, PriorityClasses, PodDisruptionBudgets, Services, "
        "ReplicationControllers, ReplicaSets, StatefulSets, PodGroups) to the cluster",
        description="Validate every manifest locally (nothing is sent if one is wrong), store the Namespaces, "
        "PriorityClasses, PodDisruptionBudgets, Services, ReplicationControllers, ReplicaSets, StatefulSets "
        "and PodGroups in Redis, then publish each pod to "
        "kubus.pods.submit. The same manifest submitted twice is stored once.",
    )
    apply.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="manifests (YAML or JSON, multi-document, List); '-' reads stdin; repeatable",
    )
    apply.add_argument("-q", "--quiet", action="store_true", help="one summary line instead of one line per pod")
    apply.add_argument(
        "--timeout",
        type=float,
        default=APPLY_TIMEOUT,
        metavar="S",
        help="seconds to wait for the queue to confirm the pods are stored; not stored by then: exit 1, "
        f"naming them (default: {APPLY_TIMEOUT:g})",
    )
    apply.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the bus has accepted the pods, without waiting for the queue to store them",
    )
    add_validate_option(apply)
    add_connection_options(apply)

    get = sub.add_parser(
        "get",
        help="list pods, nodes or events (kubectl's forms: get pods, get pod NAME..., get pod/NAME...)",
        description="List pods, nodes or pod events as Redis has them now: a table, or v1 objects with "
        "-o json|yaml (one object for one NAME, else a v1 List), -o name, -o jsonpath=TEMPLATE, "
        "-o custom-columns=NAME:.field,...",
    )
    get.add_argument(
        "resource",
        choices=resource_choices("pods", "nodes", "events"),
        metavar="{pods,nodes,events}[/NAME]",
    )
    get.add_argument("names", nargs="*", metavar="NAME", help="only these (a name not found: exit 1)")
    get.add_argument("--for", dest="for_object", metavar="pod/NAME", help="events: only those of this pod")
    get.add_argument("-w", "--watch", action="store_true", help="pods: after the list, a line per change, until Ctrl-C")
    _namespace_options(get, all_namespaces=True)
    _output_options(get, OUTPUT_FORMATS)
    get.add_argument("--show-deleted", action="store_true", help="include pods that were deleted")
    get.add_argument(
        "-l",
        "--selector",
        default="",
        metavar="SELECTOR",
        help="only pods (or nodes) whose labels match, as kubectl's -l: app=web,tier!=db,env in (a,b),gpu,!spot",
    )
    add_connection_options(get)
    _intermixed(get)

    top = sub.add_parser(
        "top",
        help="requests per node or pod (kubus has no usage metrics); --gpus draws each GPU's memory",
        description="kubus has no usage metrics: top shows what is requested, which is what kubus accounts. "
        "Per node: requested cpu and memory against allocatable (percent), GPUs in use, GPU memory in use; "
        "with --gpus one line per GPU with its memory as a bar. Per pod (those holding room on a node): "
        "requested cpu, memory, GPUs and GPU memory, and the node.",
    )
    top.add_argument("resource", choices=resource_choices("pods", "nodes"), metavar="{nodes,pods}")
    top.add_argument("names", nargs="*", metavar="NAME", help="only these (a name not found: exit 1)")
    top.add_argument("--gpus", action="store_true", help="nodes: one line per GPU: memory used as a bar, pods, model")
    top.add_argument("-l", "--selector", default="", metavar="SELECTOR", help="only those whose labels match")
    _namespace_options(top, all_namespaces=True)
    top.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    top.add_argument("--no-headers", action="store_true", help="tables without their header line")
    top.add_argument("--sort-by", choices=("cpu", "memory"), help="pods: by requested cpu or memory, largest first")
    add_connection_options(top)
    _intermixed(top)

    describe = sub.add_parser(
        "describe",
        help="show a pod's state, events and why it is pending; a node's capacity, GPUs and pods",
        description="Show a pod's phase, node, GPU devices and events; for a pending pod also the last "
        "scheduling summary and a per-plugin, per-node breakdown evaluated now against the cluster in Redis. "
        "Show a node's labels, taints, conditions, capacity, GPUs and the pods holding room on it. "
        "Without a NAME: every pod (node) that matches.",
    )
    describe.add_argument("resource", choices=resource_choices("pods", "nodes"), metavar="{pods,nodes}[/NAME]")
    describe.add_argument("names", nargs="*", metavar="NAME", help="these (a name not found: exit 1); default all")
    _namespace_options(describe, all_namespaces=True)
    describe.add_argument("-l", "--selector", default="", metavar="SELECTOR", help="only those whose labels match")
    describe.add_argument(
        "--config",
        metavar="SCHEDCONFIG",
        help="KubeSchedulerConfiguration the cycles run "
        "(default: the running `kubus up`'s, else kube's default profile)",
    )
    describe.add_argument(
        "--backend", choices=("auto", "numpy", "cupy"), default="numpy", help="array backend (default: numpy)"
    )
    add_connection_options(describe)
    _intermixed(describe)

    delete = sub.add_parser(
        "delete",
        help="delete pods (by name, pod/NAME, or the objects of -f FILE|DIR)",
        description="Ask the queue to delete pods, then wait until each is deleted. With -f, every object of "
        "the manifests: pods as above; Namespaces, PriorityClasses, PodDisruptionBudgets, PodGroups and "
        "workloads are forgotten by the store. A name not found: exit 1 (unless --ignore-not-found).",
    )
    delete.add_argument(
        "resource", nargs="?", choices=resource_choices("pods"), metavar="{pods}[/NAME]", help="omit with -f"
    )
    delete.add_argument("names", nargs="*", metavar="NAME")
    delete.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE",
        help="delete the objects of these manifests (a file, a directory's .yaml/.yml/.json, '-' for stdin)",
    )
    delete.add_argument("-R", "--recursive", action="store_true", help="-f DIR: its subdirectories too")
    _namespace_options(delete, all_namespaces=False)
    delete.add_argument("--ignore-not-found", action="store_true", help="a pod not there is not an error")
    delete.add_argument("-o", "--output", choices=("name",), help="name: pod/NAME per deleted pod")
    delete.add_argument("--no-wait", action="store_true", help="return once the deletion is submitted")
    delete.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait (default: 30)")
    add_connection_options(delete)
    _intermixed(delete)

    bench = sub.add_parser(
        "bench",
        help="measure the whole system: pods bound per second and submit-to-bound latency",
        description="Start embedded servers, every service and N simulated nodes; submit P pods as fast as "
        "possible; report pods bound per second, latency percentiles and time per stage; check the invariants. "
        "The pod-constraint workloads are kube scheduler_perf's SchedulingPodAffinity, SchedulingPodAntiAffinity, "
        "TopologySpreading and PreferredTopologySpreading on 4-cpu nodes: init pods first, unmeasured.",
    )
    bench.add_argument(
        "--workload",
        choices=BENCH_WORKLOADS,
        default="mixed",
        help="what to submit (default: mixed, GPU and CPU pods on 8 x H100 nodes)",
    )
    bench.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="simulated nodes (default: the workload's, 5000; 500 for preemption-basic as in scheduler_perf)",
    )
    bench.add_argument(
        "--pods",
        type=int,
        metavar="P",
        help="measured pods (default: 10000 mixed; the workload's own: 1000, 1000, 2000, 2000)",
    )
    bench.add_argument(
        "--init-pods",
        type=int,
        metavar="I",
        help="pods placed before the measurement, pod-constraint workloads (default: 5000, 1000, 5000, 5000)",
    )
    bench.add_argument("--batch-size", type=int, default=256, metavar="B", help="pods per cycle batch (default: 256)")
    bench.add_argument(
        "--profiles", type=int, default=1, metavar="K", help="scheduler profiles, one cycle each (default: 1)"
    )
    bench.add_argument("--binders", type=int, default=1, metavar="K", help="binder processes (default: 1)")
    bench.add_argument(
        "--ha", action="store_true", help="the embedded servers of `kubus up --ha` (NATS cluster, Valkey + Sentinel)"
    )
    bench.add_argument(
        "--node-template", metavar="FILE", help="Node manifest of the simulated nodes (default: 8 x H100)"
    )
    bench.add_argument("--data-dir", metavar="DIR", help="keep servers' data and logs here (default: a temporary dir)")
    bench.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="give up after S seconds (default: 600)"
    )
    bench.add_argument("-o", "--output", choices=("table", "json"), default="table")
    bench.add_argument(
        "--rate",
        type=float,
        metavar="PODS/S",
        help="offer the measured pods at this steady rate instead of all at once: latency under load, not backlog",
    )
    bench.add_argument(
        "--plot", metavar="FILE.png", help="also draw pods bound per second over the run (needs kubus[plot])"
    )
    bench.add_argument("--seed", type=int, default=0, help="seed of the generated workload")


def _settings(args: argparse.Namespace) -> tuple[ConnectionSettings, Endpoints | None]:
    return cluster_settings(
        nats=args.nats, redis=args.redis, settings_file=args.settings, directory=args.data_dir, cluster=args.cluster
    )


def _explicit(args: argparse.Namespace) -> bool:
    """Whether the user said where the servers are (flags, environment, settings file, kubus up)."""
    if args.nats or args.redis or args.settings:
        return True
    if os.environ.get("KUBUS_NATS_URL") or os.environ.get("KUBUS_REDIS_URL"):
        return True
    return read_endpoints(cluster_home(args.data_dir, cluster=args.cluster)) is not None


def _namespace(args: argparse.Namespace) -> str | None:
    if getattr(args, "all_namespaces", False):
        if args.namespace:
            raise UsageError("give -n NAMESPACE or -A, not both")
        return None
    return args.namespace or "default"


def scheduler_config(path: str | None) -> SchedulerConfiguration:
    """The KubeSchedulerConfiguration at ``path``, or kube's default, validated against the
    in-tree and installed out-of-tree plugins. Raises ConfigError, RegistryError."""
    registry = in_tree_registry(entry_points=True)
    return load_config(path, registry=registry) if path else default_config(registry=registry)


def run_cluster_command(args: argparse.Namespace) -> int:
    """Run a cluster command. Raises UsageError, Unreachable, ManifestError, ConfigError,
    SettingsError as main() reports them."""
    if args.command not in ("up", "bench"):
        # The bus helpers log every failed connection attempt; the command reports the failure
        # itself, in one line.
        logging.getLogger("kubus").setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_run(args))
    except Unreachable as exc:
        if args.command in ("up", "bench") or _explicit(args):
            raise
        where = cluster_home(args.data_dir, cluster=args.cluster)
        raise Unreachable(
            f"{exc} (no running `kubus up` recorded in {where}/ nor in {user_config()}; start one, or give "
            "--nats and --redis)"
        ) from None
    except (nats.errors.Error, TimeoutError) as exc:  # the connection was lost mid-command
        raise Unreachable(f"NATS: {str(exc) or type(exc).__name__}") from None
    except redis.exceptions.ConnectionError as exc:
        raise Unreachable(f"Redis: {exc}") from None


async def _run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.command == "up":
        from kubus.cli.up import run_up

        return await run_up(args)
    if args.command == "bench":
        from kubus.cli.bench import run_bench

        return await run_bench(args)
    settings, recorded = _settings(args)
    if args.command == "apply":
        from kubus.cli.cluster import apply

        if not args.timeout > 0:
            raise UsageError(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
        timeout = None if args.no_wait else args.timeout
        paths = manifest_paths(args.filename)  # a directory: its manifests, as kubectl's -f DIR
        return await apply(settings, paths, out, quiet=args.quiet, timeout=timeout, validate=args.validate)
    if args.command == "get":
        return await _get(args, settings, out)
    if args.command == "top":
        from kubus.cli.cluster import top_nodes, top_pods

        [(plural, names)] = targets(args.resource, args.names)
        if plural == "nodes":
            if args.namespace or args.all_namespaces or args.sort_by:
                raise UsageError("top nodes takes no -n/-A nor --sort-by")
            return await top_nodes(
                settings,
                out,
                output=args.output,
                gpus=args.gpus,
                selector=_selector(args),
                names=names,
                headers=not args.no_headers,
            )
        if args.gpus:
            raise UsageError("--gpus is for top nodes")
        return await top_pods(
            settings,
            out,
            namespace=_namespace(args),
            output=args.output,
            selector=_selector(args),
            names=names,
            headers=not args.no_headers,
            sort_by=args.sort_by,
        )
    if args.command == "describe":
        from kubus.cli.describe import describe_nodes, describe_pods
        from kubus.kernels.backend import select_backend

        code = 0
        for plural, names in targets(args.resource, args.names):
            if plural == "nodes":
                code |= await describe_nodes(settings, out, names=names, selector=_selector(args))
                continue
            if names and args.all_namespaces:
                raise UsageError("a pod cannot be described by name across all namespaces; give -n NAMESPACE")
            config = scheduler_config(args.config or (recorded.config if recorded else None))
            code |= await describe_pods(
                settings,
                out,
                namespace=_namespace(args),
                names=names,
                config=config,
                backend=select_backend(args.backend),
                selector=_selector(args),
            )
        return code
    if args.command == "delete":
        from kubus.cli.cluster import delete_objects, delete_pods

        wait = None if args.no_wait else args.timeout
        if args.filename:
            if args.resource:
                raise UsageError("give -f FILE or a pod's name, not both")
            objects = objects_in_files(manifest_paths(args.filename, recursive=args.recursive))
            if args.namespace:
                objects = [(k, args.namespace if ns and ns == "default" else ns, n) for k, ns, n in objects]
            return await delete_objects(
                settings, out, objects, wait=wait, ignore_not_found=args.ignore_not_found, output=args.output or ""
            )
        if not args.resource:
            raise UsageError("give a pod's name (delete pod NAME, delete pod/NAME) or -f FILE")
        [(_, names)] = targets(args.resource, args.names)
        if not names:
            raise UsageError("give the name of the pod to delete (kubus deletes pods by name)")
        return await delete_pods(
            settings,
            out,
            namespace=_namespace(args) or "default",
            names=names,
            wait=wait,
            ignore_not_found=args.ignore_not_found,
            output=args.output or "",
        )
    raise UsageError(f"unknown command {args.command!r}")


async def _get(args: argparse.Namespace, settings: ConnectionSettings, out: TextIO) -> int:
    """`kubus get`: its forms checked (UsageError), then the listings printed."""
    from kubus.cli.cluster import get_events, get_resources, watch_pods

    selector = _selector(args)
    output = output_of(args.output, no_headers=args.no_headers, sort_by=args.sort_by)
    groups = targets(args.resource, args.names)
    plurals = [plural for plural, _ in groups]
    named = any(names for _, names in groups)
    if named and args.all_namespaces and "nodes" not in plurals:
        raise UsageError("a resource cannot be retrieved by name across all namespaces; give -n NAMESPACE")
    if plurals == ["events"]:
        if args.selector or args.show_deleted or args.watch:
            raise UsageError("events take -n/-A, --for pod/NAME, NAME and -o only")
        pod = None
        if args.for_object:
            kind, sep, pod = args.for_object.rpartition("/")
            if (sep and kind not in ("pod", "pods", "po")) or not pod:
                raise UsageError(f"--for: expected pod/NAME, got {args.for_object!r}")
        names = groups[0][1]
        return await get_events(settings, out, namespace=_namespace(args), pod=pod, output=output, names=names)
    if args.for_object:
        raise UsageError("--for is for events")
    if args.watch:
        if plurals != ["pods"] or named or args.show_deleted:
            raise UsageError("--watch follows pods (without NAME or --show-deleted)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)  # Ctrl-C ends the watch: exit 0
        return await watch_pods(settings, out, namespace=_namespace(args), output=output, selector=selector, stop=stop)
    if plurals == ["nodes"] and (args.namespace or args.all_namespaces):
        raise UsageError("nodes have no namespace; drop -n/-A")
    namespace = _namespace(args)
    if len(groups) == 1:
        from kubus.cli.cluster import get_nodes, get_pods

        plural, names = groups[0]
        if plural == "pods":
            return await get_pods(
                settings,
                out,
                namespace=namespace,
                output=output,
                show_deleted=args.show_deleted,
                selector=selector,
                names=names,
            )
        return await get_nodes(settings, out, output=output, selector=selector, names=names)
    return await get_resources(
        settings, out, groups, namespace=namespace, output=output, show_deleted=args.show_deleted, selector=selector
    )
