"""``python -m kubus.queue``: run the queue service until SIGTERM or SIGINT.

    python -m kubus.queue --config SCHED.yaml [--settings FILE] [--nats URL] [--redis URL]
                          [--metrics-port N] [--log-level info] [--lease-ttl S] [--renew-interval S]

Several may run: one holds the lease ``queue`` and serves, the others stand by.

Exit status as `kubus.runtime.entrypoint` says: 0 after a clean stop, 1 when it could not start or a root
task died, 2 for a bad command line, configuration or settings (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus.framework.config import default_config, load_config
from kubus.plugins import in_tree_registry
from kubus.queue.service import QueueOptions, QueueService
from kubus.runtime.entrypoint import add_service_flags, run_service, settings_from_flags, warn_ignored

PROG = "kubus.queue"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kubus.queue",
        description="The kubus scheduling queue: takes submitted pods from NATS, keeps every profile's "
        "activeQ/backoffQ/unschedulable set, and hands pods to the scheduling cycles.",
    )
    parser.add_argument(
        "--config", metavar="SCHED.yaml", help="KubeSchedulerConfiguration (default: one default-scheduler profile)"
    )
    add_service_flags(parser)
    defaults = QueueOptions()
    parser.add_argument(
        "--lease-ttl",
        type=float,
        default=defaults.lease_ttl,
        metavar="SECONDS",
        help=f"the lease 'queue' lasts this long unrenewed: a standby queue takes over this long after "
        f"a crash (default {defaults.lease_ttl:g})",
    )
    parser.add_argument(
        "--renew-interval",
        type=float,
        default=defaults.renew_interval,
        metavar="SECONDS",
        help=f"seconds between lease renewals, below --lease-ttl (default {defaults.renew_interval:g})",
    )
    return parser.parse_args(argv)


def build(args: argparse.Namespace) -> QueueService:
    """The queue the flags describe. Raises ValueError (ConfigError, SettingsError, RegistryError)."""
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry)
    warn_ignored(PROG, config)  # the one service every deployment runs once
    options = QueueOptions(lease_ttl=args.lease_ttl, renew_interval=args.renew_interval)
    return QueueService(settings_from_flags(args), config, options, registry=registry)


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build)


if __name__ == "__main__":
    sys.exit(main())
