"""What every ``python -m kubus.<service>`` shares: the connection flags, and running the service
until SIGTERM/SIGINT with one set of exit codes.

    0  after a clean stop;
    1  when the service could not start (NATS or Redis do not answer, the durable consumer is
       someone else's) or a root task died: one line on stderr naming it;
    2  for a mistake in the flags, the scheduler configuration, the settings or a manifest: one line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from kubus.bus import ConsumerConflictError
from kubus.metrics import serve_metrics
from kubus.service import Service, ServiceError, configure_logging, install_signal_handlers
from kubus.settings import ConnectionSettings, load_settings

__all__ = ["EXIT_FAILED", "EXIT_USAGE", "add_service_flags", "run_service", "settings_from_flags"]

EXIT_FAILED = 1
EXIT_USAGE = 2
_FAILURES = (ServiceError, ConsumerConflictError, ConnectionError, OSError)


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    """``--settings``, ``--nats``, ``--redis``, ``--metrics-port`` and ``--log-level``."""
    parser.add_argument("--settings", metavar="FILE", help="connection settings (YAML); see kubus.settings")
    parser.add_argument("--nats", metavar="URL", help="NATS URL (default $KUBUS_NATS_URL or nats://127.0.0.1:4222)")
    parser.add_argument(
        "--redis", metavar="URL", help="Redis URL (default $KUBUS_REDIS_URL or redis://127.0.0.1:6379/0)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="N",
        help="serve /metrics, /healthz and /readyz on this port (0 = none)",
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def settings_from_flags(args: argparse.Namespace) -> ConnectionSettings:
    """The settings file, then ``KUBUS_*`` variables, then ``--nats``/``--redis``. Raises SettingsError."""
    return load_settings(file=args.settings, overrides={"nats_url": args.nats, "redis_url": args.redis})


def run_service(
    prog: str,
    args: argparse.Namespace,
    build: Callable[[argparse.Namespace], Service],
    usage_errors: tuple[type[BaseException], ...] = (ValueError,),
) -> int:
    """Build the service the flags describe (``usage_errors`` from ``build``: exit 2), serve its
    metrics and health, and run it until SIGTERM/SIGINT stops it. Returns the exit status."""
    configure_logging(args.log_level.upper())
    if not 0 <= args.metrics_port <= 65535:
        return _fail(prog, f"--metrics-port: {args.metrics_port} is not a port (0-65535)", EXIT_USAGE)
    try:
        service = build(args)
    except usage_errors as exc:
        return _fail(prog, exc, EXIT_USAGE)

    async def serve() -> None:
        if args.metrics_port:
            serve_metrics(service.metrics, args.metrics_port, health=service)
        install_signal_handlers(service)
        await service.run()

    try:
        asyncio.run(serve())
    except _FAILURES as exc:
        return _fail(prog, exc, EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    return 0


def _fail(prog: str, exc: BaseException | str, status: int) -> int:
    print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)
    return status
