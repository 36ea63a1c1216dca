"""``python -m kubus.cycle --profile NAME``: run one scheduling-cycle replica until SIGTERM/SIGINT.

Exits 0 after a clean stop, 1 with one line naming the failed task when a root task dies (or
NATS/Redis do not answer), 2 with one line for a bad config, an unknown profile, bad settings
or flags.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from kubus.cycle.service import CycleOptions, CycleService
from kubus.framework.config import default_config, load_config
from kubus.framework.runtime import Framework
from kubus.kernels.backend import BACKENDS, BackendUnavailable
from kubus.metrics import serve_metrics
from kubus.plugins import in_tree_registry
from kubus.service import ServiceError, configure_logging, install_signal_handlers
from kubus.settings import load_settings

PROG = "kubus.cycle"


class UsageError(Exception):
    """A mistake in the flags, the config or the settings: one line, exit 2."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = CycleOptions()
    p = argparse.ArgumentParser(
        prog="python -m kubus.cycle", description="kubus scheduling cycle: schedules one profile's pods."
    )
    p.add_argument("--profile", required=True, metavar="NAME", help="the profile (schedulerName) to schedule")
    p.add_argument(
        "--config", metavar="SCHED.yaml", help="KubeSchedulerConfiguration (default: kube's default profile)"
    )
    p.add_argument("--settings", metavar="FILE", help="connection settings (YAML); see kubus.settings")
    p.add_argument("--nats", metavar="URL", help="NATS URL (default $KUBUS_NATS_URL or nats://127.0.0.1:4222)")
    p.add_argument("--redis", metavar="URL", help="Redis URL (default $KUBUS_REDIS_URL or redis://127.0.0.1:6379/0)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=defaults.batch_size,
        metavar="N",
        help=f"pods popped and scheduled at a time (default {defaults.batch_size})",
    )
    p.add_argument("--metrics-port", type=int, default=0, metavar="N", help="serve /metrics on this port (0 = none)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--backend",
        default=defaults.backend,
        choices=BACKENDS,
        help=f"array backend of the node table (default {defaults.backend})",
    )
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> CycleService:
    """The service the flags describe. Raises UsageError (one line) for any mistake in them."""
    if args.batch_size < 1:
        raise UsageError(f"--batch-size: must be at least 1, got {args.batch_size}")
    try:
        settings = load_settings(file=args.settings, overrides={"nats_url": args.nats, "redis_url": args.redis})
        registry = in_tree_registry(entry_points=True)
        config = load_config(args.config, registry=registry) if args.config else default_config(registry)
        try:
            profile = config.profile(args.profile)
        except KeyError as exc:
            raise UsageError(f"--profile: {exc.args[0]}") from None
        framework = Framework.from_profile(
            profile, registry, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score
        )
        options = CycleOptions(batch_size=args.batch_size, backend=args.backend)
        return CycleService(settings, framework, options)
    except (ValueError, BackendUnavailable) as exc:  # ConfigError, SettingsError, RegistryError are ValueErrors
        raise UsageError(" ".join(str(exc).split("\n"))) from None


async def _run(service: CycleService, metrics_port: int) -> int:
    if metrics_port:
        serve_metrics(service.metrics, metrics_port, health=service)
    install_signal_handlers(service)
    await service.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level.upper())
    try:
        service = build(args)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(service, args.metrics_port))
    except (ServiceError, ConnectionError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
