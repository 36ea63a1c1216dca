"""``python -m kubus.binder``: run one binder replica until SIGTERM/SIGINT.

Exits 0 after a clean stop, 1 with one line naming the failed task when a root task dies, 2 for
bad settings or flags.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from kubus.binder.service import BinderOptions, BinderService
from kubus.metrics import serve_metrics
from kubus.service import ServiceError, configure_logging, install_signal_handlers
from kubus.settings import SettingsError, load_settings


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = BinderOptions()
    p = argparse.ArgumentParser(prog="python -m kubus.binder", description="kubus binder: binds reserved pods.")
    p.add_argument("--settings", metavar="FILE", help="connection settings (YAML); see kubus.settings")
    p.add_argument("--nats", metavar="URL", help="NATS URL (default $KUBUS_NATS_URL or nats://127.0.0.1:4222)")
    p.add_argument("--redis", metavar="URL", help="Redis URL (default $KUBUS_REDIS_URL or redis://127.0.0.1:6379/0)")
    p.add_argument(
        "--permit-timeout",
        type=float,
        default=defaults.permit_timeout,
        metavar="SECONDS",
        help=f"longest WaitOnPermit before the pod is handed back (default {defaults.permit_timeout:g})",
    )
    p.add_argument(
        "--max-deliver",
        type=int,
        default=defaults.max_deliver,
        metavar="N",
        help=f"deliveries of a request at most; the last failing one hands the pod back ({defaults.max_deliver})",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=defaults.batch,
        metavar="N",
        help=f"requests at once (default {defaults.batch})",
    )
    p.add_argument("--metrics-port", type=int, default=0, metavar="N", help="serve /metrics on this port (0 = none)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p.parse_args(argv)


async def _run(args: argparse.Namespace) -> int:
    settings = load_settings(file=args.settings, overrides={"nats_url": args.nats, "redis_url": args.redis})
    options = BinderOptions(permit_timeout=args.permit_timeout, max_deliver=args.max_deliver, batch=args.batch)
    binder = BinderService(settings, options)
    if args.metrics_port:
        serve_metrics(binder.metrics, args.metrics_port, health=binder)
    install_signal_handlers(binder)
    await binder.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level.upper())
    try:
        return asyncio.run(_run(args))
    except (SettingsError, ValueError) as exc:
        print(f"kubus.binder: {exc}", file=sys.stderr)
        return 2
    except ServiceError as exc:
        print(f"kubus.binder: {exc}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError) as exc:
        print(f"kubus.binder: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
