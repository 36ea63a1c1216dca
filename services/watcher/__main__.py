"""``python -m kubus.watcher --kubeconfig FILE``: run the watcher until SIGTERM/SIGINT.

Exit status as `kubus.runtime.entrypoint` says: 0 after a clean stop, 1 when it could not start (the
apiserver unreachable, the token refused, a permission missing: one line) or a root task died,
2 for bad flags, settings, configuration or kubeconfig.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus.framework.config import default_config, load_config
from kubus.kubeapi import KubeConfigError
from kubus.kubeapi import load_config as load_kube_config
from kubus.plugins import in_tree_registry
from kubus.runtime.entrypoint import (
    add_kube_pace_flags,
    add_service_flags,
    run_service,
    settings_from_flags,
    warn_ignored,
)
from kubus.watcher.options import WatcherOptions
from kubus.watcher.service import WatcherService

PROG = "kubus.watcher"
_DEFAULTS = WatcherOptions()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kubus.watcher",
        description="kubus's bridge to a kube-apiserver: watches its nodes, pods and the objects scheduling "
        "reads, keeps kubus in step with them, and reports what kubus decides back as kube-scheduler does.",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="the cluster (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)",
    )
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context (default: its current-context)")
    parser.add_argument(
        "--config", metavar="SCHED.yaml", help="KubeSchedulerConfiguration: the profiles whose pods kubus schedules"
    )
    add_kube_pace_flags(parser, _DEFAULTS.qps, _DEFAULTS.burst)
    add_service_flags(parser)
    return parser.parse_args(argv)


def build(args: argparse.Namespace) -> WatcherService:
    """The watcher the flags describe. Raises ValueError (ConfigError, SettingsError,
    RegistryError) or KubeConfigError for bad input."""
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry)
    warn_ignored(PROG, config)
    kube = load_kube_config(args.kubeconfig or config.client_connection.kubeconfig, context=args.context)
    qps, burst = config.client_connection.pace(
        args.kube_qps, args.kube_burst, default_qps=_DEFAULTS.qps, default_burst=_DEFAULTS.burst
    )
    return WatcherService(settings_from_flags(args), kube, config, WatcherOptions(qps=qps, burst=burst))


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build, usage_errors=(ValueError, KubeConfigError))


if __name__ == "__main__":
    sys.exit(main())
