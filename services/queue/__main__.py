"""``python -m kubus.queue``: run the queue service until SIGTERM or SIGINT.

    python -m kubus.queue --config SCHED.yaml [--settings FILE] [--nats URL] [--redis URL]
                          [--metrics-port N] [--log-level info]

Exit status as `kubus.entrypoint` says: 0 after a clean stop, 1 when it could not start or a root
task died, 2 for a bad command line, configuration or settings (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus.entrypoint import add_service_flags, run_service, settings_from_flags, warn_ignored
from kubus.framework.config import default_config, load_config
from kubus.plugins import in_tree_registry
from kubus.queue.service import QueueService

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
    return parser.parse_args(argv)


def build(args: argparse.Namespace) -> QueueService:
    """The queue the flags describe. Raises ValueError (ConfigError, SettingsError, RegistryError)."""
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry)
    warn_ignored(PROG, config)  # the one service every deployment runs once
    return QueueService(settings_from_flags(args), config, registry=registry)


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build)


if __name__ == "__main__":
    sys.exit(main())
