"""``python -m kubus.binder``: run one binder replica until SIGTERM/SIGINT.

Exit status as `kubus.runtime.entrypoint` says: 0 after a clean stop, 1 when it could not start or a root
task died, 2 for bad settings or flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus.binder.apiserver import BIND_CONCURRENCY, ApiBinding
from kubus.binder.service import BinderOptions, BinderService
from kubus.framework.config import default_config, load_config
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.kubeapi import KubeClient, KubeConfigError
from kubus.kubeapi import load_config as load_kube_config
from kubus.plugins import in_tree_registry
from kubus.runtime.entrypoint import add_kube_pace_flags, add_service_flags, run_service, settings_from_flags

PROG = "kubus.binder"
KUBE_QPS, KUBE_BURST = 200.0, 400
"""The binder's pace against the apiserver unless the configuration or flags say otherwise."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = BinderOptions()
    p = argparse.ArgumentParser(prog="python -m kubus.binder", description="kubus binder: binds reserved pods.")
    add_service_flags(p)
    p.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration: each profile's PreBind, Bind, PostBind, Permit and Reserve plugins "
        "(default: kube's default profile)",
    )
    p.add_argument(
        "--permit-timeout",
        type=float,
        default=defaults.permit_timeout,
        metavar="SECONDS",
        help=f"longest WaitOnPermit before the pod is handed back (default {defaults.permit_timeout:g})",
    )
    p.add_argument(
        "--max-failures",
        type=int,
        default=defaults.max_failures,
        metavar="N",
        help=f"failed tries of a request at most (a server outage not counted); the last hands the pod back "
        f"({defaults.max_failures})",
    )
    p.add_argument(
        "--batch", type=int, default=defaults.batch, metavar="N", help=f"requests at once ({defaults.batch})"
    )
    p.add_argument(
        "--apiserver",
        action="store_true",
        help="cluster mode: bind in the Kubernetes API (pods/binding) first, found as kubectl finds it "
        "(--kubeconfig, KUBECONFIG, ~/.kube/config, the in-cluster service account)",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="the cluster to bind in (implies --apiserver)")
    p.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current-context)")
    add_kube_pace_flags(p, KUBE_QPS, KUBE_BURST)
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> BinderService:
    """The binder the flags describe. Raises ValueError (SettingsError, ConfigError and
    RegistryError included) for bad input."""
    options = BinderOptions(permit_timeout=args.permit_timeout, max_failures=args.max_failures, batch=args.batch)
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry)
    frameworks = {
        profile.scheduler_name: Framework.from_profile(profile, registry, handle=WaitingPods())
        for profile in config.profiles
    }
    apiserver = None
    if args.apiserver or args.kubeconfig:
        kube = load_kube_config(args.kubeconfig or config.client_connection.kubeconfig, context=args.context)
        qps, burst = config.client_connection.pace(
            args.kube_qps, args.kube_burst, default_qps=KUBE_QPS, default_burst=KUBE_BURST
        )
        apiserver = ApiBinding(KubeClient(kube, qps=qps, burst=burst, write_lanes=BIND_CONCURRENCY))
    return BinderService(settings_from_flags(args), options, frameworks=frameworks, apiserver=apiserver)


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build, usage_errors=(ValueError, KubeConfigError))


if __name__ == "__main__":
    sys.exit(main())
