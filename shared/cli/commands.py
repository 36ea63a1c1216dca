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
from typing import Any

import nats.errors
import redis.exceptions

from kubus.api.label_selectors import LabelSelectorSyntaxError, parse_label_selector
from kubus.api.objects import LabelSelector
from kubus.cli.cluster import APPLY_TIMEOUT
from kubus.cli.connect import Unreachable, UsageError
from kubus.cli.endpoints import DEFAULT_DATA_DIR, HOME_ENV, Endpoints, cluster_settings, data_dir, read_endpoints
from kubus.cli.workload import BENCH_WORKLOADS
from kubus.framework.config import SchedulerConfiguration, default_config, load_config
from kubus.plugins import in_tree_registry
from kubus.settings import ConnectionSettings

__all__ = ["add_cluster_commands", "add_connection_options", "run_cluster_command"]


def add_connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (default: $KUBUS_NATS_URL/$KUBUS_REDIS_URL, else the running `kubus up`)")
    g.add_argument("--nats", metavar="URL", help="NATS server URL (nats://host:4222; tls://... for TLS)")
    g.add_argument("--redis", metavar="URL", help="Redis URL (redis://host:6379/0; rediss://... for TLS)")
    g.add_argument(
        "--settings",
        metavar="FILE",
        help="connection settings YAML (kubus.settings: URLs, NATS creds/user/token, TLS files, Redis auth)",
    )
    g.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"the `kubus up` data dir whose endpoints.json to use (default: ${HOME_ENV}, else ./{DEFAULT_DATA_DIR})",
    )


def _namespace_options(p: argparse.ArgumentParser, *, all_namespaces: bool) -> None:
    p.add_argument("-n", "--namespace", default=None, help='namespace (default: "default")')
    if all_namespaces:
        p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")


def _selector(args: argparse.Namespace) -> LabelSelector:
    """`-l`: kubectl's label selector syntax. Raises UsageError for one that does not parse."""
    try:
        return parse_label_selector(args.selector)
    except LabelSelectorSyntaxError as e:
        raise UsageError(str(e)) from None


def add_cluster_commands(sub: Any) -> None:
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
        default=0,
        metavar="PORT",
        help="give the services metrics ports PORT, PORT+1, ... (default: 0, no metrics endpoints)",
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
    add_connection_options(apply)

    get = sub.add_parser(
        "get", help="list pods, nodes or events", description="List pods, nodes or pod events as Redis has them now."
    )
    get.add_argument(
        "resource",
        choices=("pods", "pod", "po", "nodes", "node", "no", "events", "event", "ev"),
        metavar="{pods,nodes,events}",
    )
    get.add_argument("--for", dest="for_object", metavar="pod/NAME", help="events: only those of this pod")
    get.add_argument("-w", "--watch", action="store_true", help="pods: after the list, a line per change, until Ctrl-C")
    _namespace_options(get, all_namespaces=True)
    get.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    get.add_argument("--show-deleted", action="store_true", help="include pods that were deleted")
    get.add_argument(
        "-l",
        "--selector",
        default="",
        metavar="SELECTOR",
        help="only pods (or nodes) whose labels match, as kubectl's -l: app=web,tier!=db,env in (a,b),gpu,!spot",
    )
    add_connection_options(get)

    top = sub.add_parser(
        "top",
        help="requested against allocatable per node; --gpus draws each GPU's memory",
        description="Per node: requested cpu and memory against allocatable (percent), GPUs in use, GPU memory "
        "in use; with --gpus one line per GPU with its memory as a bar.",
    )
    top.add_argument("resource", choices=("nodes", "node", "no"), metavar="nodes")
    top.add_argument("--gpus", action="store_true", help="one line per GPU: memory used as a bar, pods, model")
    top.add_argument("-l", "--selector", default="", metavar="SELECTOR", help="only nodes whose labels match")
    top.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    add_connection_options(top)

    describe = sub.add_parser(
        "describe",
        help="show a pod's state, events, and why it is pending",
        description="Show a pod's phase, node, GPU devices and events; for a pending pod also the last "
        "scheduling summary and a per-plugin, per-node breakdown evaluated now against the cluster in Redis.",
    )
    describe.add_argument("resource", choices=("pod", "pods", "po"), metavar="pod")
    describe.add_argument("name")
    _namespace_options(describe, all_namespaces=False)
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

    delete = sub.add_parser(
        "delete", help="delete a pod", description="Ask the queue to delete a pod, then wait until it is deleted."
    )
    delete.add_argument("resource", choices=("pod", "pods", "po"), metavar="pod")
    delete.add_argument("name")
    _namespace_options(delete, all_namespaces=False)
    delete.add_argument("--no-wait", action="store_true", help="return once the deletion is submitted")
    delete.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait (default: 30)")
    add_connection_options(delete)

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
    return cluster_settings(nats=args.nats, redis=args.redis, settings_file=args.settings, directory=args.data_dir)


def _explicit(args: argparse.Namespace) -> bool:
    """Whether the user said where the servers are (flags, environment, settings file, kubus up)."""
    if args.nats or args.redis or args.settings:
        return True
    if os.environ.get("KUBUS_NATS_URL") or os.environ.get("KUBUS_REDIS_URL"):
        return True
    return read_endpoints(data_dir(args.data_dir)) is not None


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
        where = data_dir(args.data_dir)
        raise Unreachable(
            f"{exc} (no running `kubus up` recorded in {where}/; start one, or give --nats and --redis)"
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
        return await apply(settings, args.filename, out, quiet=args.quiet, timeout=timeout)
    if args.command == "get":
        from kubus.cli.cluster import get_events, get_nodes, get_pods, watch_pods

        selector = _selector(args)
        if args.resource in ("events", "event", "ev"):
            if args.selector or args.output == "wide" or args.show_deleted or args.watch:
                raise UsageError("events take -n/-A, --for pod/NAME and -o json|yaml only")
            pod = None
            if args.for_object:
                kind, sep, pod = args.for_object.rpartition("/")
                if (sep and kind not in ("pod", "pods", "po")) or not pod:
                    raise UsageError(f"--for: expected pod/NAME, got {args.for_object!r}")
            return await get_events(settings, out, namespace=_namespace(args), pod=pod, output=args.output)
        if args.for_object:
            raise UsageError("--for is for events")
        is_pods = args.resource in ("pods", "pod", "po")
        if args.watch:
            if not is_pods or args.show_deleted:
                raise UsageError("--watch follows pods (without --show-deleted)")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)  # Ctrl-C ends the watch: exit 0
            return await watch_pods(
                settings, out, namespace=_namespace(args), output=args.output, selector=selector, stop=stop
            )
        if is_pods:
            return await get_pods(
                settings,
                out,
                namespace=_namespace(args),
                output=args.output,
                show_deleted=args.show_deleted,
                selector=selector,
            )
        if args.namespace or args.all_namespaces:
            raise UsageError("nodes have no namespace; drop -n/-A")
        return await get_nodes(settings, out, output=args.output, selector=selector)
    if args.command == "top":
        from kubus.cli.cluster import top_nodes

        return await top_nodes(settings, out, output=args.output, gpus=args.gpus, selector=_selector(args))
    if args.command == "describe":
        from kubus.cli.describe import describe_pod
        from kubus.kernels.backend import select_backend

        config = scheduler_config(args.config or (recorded.config if recorded else None))
        return await describe_pod(
            settings,
            out,
            namespace=_namespace(args) or "default",
            name=args.name,
            config=config,
            backend=select_backend(args.backend),
        )
    if args.command == "delete":
        from kubus.cli.cluster import delete_pod

        return await delete_pod(
            settings,
            out,
            namespace=_namespace(args) or "default",
            name=args.name,
            wait=None if args.no_wait else args.timeout,
        )
    raise UsageError(f"unknown command {args.command!r}")
