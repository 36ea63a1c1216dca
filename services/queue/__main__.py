"""``python -m kubus.queue``: run the queue service until SIGTERM or SIGINT.

    python -m kubus.queue --config SCHED.yaml [--settings FILE] [--nats URL] [--redis URL]
                          [--metrics-port N] [--log-level info]

Exit status: 0 after a clean stop; 1 when the service could not start or a root task died
(one line on stderr naming it); 2 for a bad command line, configuration or settings (one line).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from kubus.framework.config import ConfigError, SchedulerConfiguration, default_config, load_config
from kubus.framework.registry import Registry, RegistryError
from kubus.metrics import serve_metrics
from kubus.plugins import in_tree_registry
from kubus.queue.service import QueueService
from kubus.service import ServiceError, configure_logging, install_signal_handlers
from kubus.settings import ConnectionSettings, SettingsError, load_settings

PROG = "python -m kubus.queue"
_LOG_LEVELS = ("debug", "info", "warning", "error")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The kubus scheduling queue: takes submitted pods from NATS, keeps every profile's "
        "activeQ/backoffQ/unschedulable set, and hands pods to the scheduling cycles.",
    )
    parser.add_argument(
        "--config", metavar="SCHED.yaml", help="KubeSchedulerConfiguration (default: one default-scheduler profile)"
    )
    parser.add_argument("--settings", metavar="FILE", help="connection settings YAML (see kubus.settings)")
    parser.add_argument("--nats", metavar="URL", help="NATS URL (overrides settings and KUBUS_NATS_URL)")
    parser.add_argument("--redis", metavar="URL", help="Redis URL (overrides settings and KUBUS_REDIS_URL)")
    parser.add_argument("--metrics-port", type=int, default=0, metavar="N", help="serve /metrics on N (0: none)")
    parser.add_argument("--log-level", default="info", choices=_LOG_LEVELS, help="default: info")
    return parser


def _load(args: argparse.Namespace) -> tuple[SchedulerConfiguration, ConnectionSettings, Registry]:
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry)
    settings = load_settings(file=args.settings, overrides={"nats_url": args.nats, "redis_url": args.redis})
    return config, settings, registry


async def _serve(
    config: SchedulerConfiguration, settings: ConnectionSettings, registry: Registry, metrics_port: int
) -> int:
    service = QueueService(settings, config, registry=registry)
    install_signal_handlers(service)
    if metrics_port:
        serve_metrics(service.metrics, metrics_port, health=service)
    try:
        await service.run()
    except ServiceError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError) as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.metrics_port < 0 or args.metrics_port > 65535:
        print(f"{PROG}: --metrics-port: {args.metrics_port} is not a port (0-65535)", file=sys.stderr)
        return 2
    try:
        config, settings, registry = _load(args)
    except (ConfigError, SettingsError, RegistryError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level.upper())
    try:
        return asyncio.run(_serve(config, settings, registry, args.metrics_port))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
