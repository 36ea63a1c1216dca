"""``python -m kubus.cycle --profile NAME``: run one scheduling-cycle replica until SIGTERM/SIGINT.

Exit status as `kubus.runtime.entrypoint` says: 0 after a clean stop, 1 when it could not start or a root
task died, 2 with one line for a bad config, an unknown profile, bad settings or flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubus.core.errors import UsageError
from kubus.cycle.options import CycleOptions
from kubus.cycle.service import CycleService
from kubus.framework.config import default_config, load_config
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.kernels.backend import BACKENDS, BackendUnavailable
from kubus.plugins import in_tree_registry
from kubus.runtime.entrypoint import add_service_flags, run_service, settings_from_flags

PROG = "kubus.cycle"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = CycleOptions()
    p = argparse.ArgumentParser(
        prog="python -m kubus.cycle", description="kubus scheduling cycle: schedules one profile's pods."
    )
    p.add_argument("--profile", required=True, metavar="NAME", help="the profile (schedulerName) to schedule")
    p.add_argument(
        "--config", metavar="SCHED.yaml", help="KubeSchedulerConfiguration (default: kube's default profile)"
    )
    add_service_flags(p)
    p.add_argument(
        "--batch-size",
        type=int,
        default=defaults.batch_size,
        metavar="N",
        help=f"pods popped and scheduled at a time (default {defaults.batch_size})",
    )
    p.add_argument(
        "--backend",
        default=defaults.backend,
        choices=BACKENDS,
        help=f"array backend of the node table (default {defaults.backend})",
    )
    p.add_argument(
        "--cold-standby",
        action="store_true",
        help="while standing by, do not keep the node table current: load it on taking the lease "
        "(less memory for a standby; a slower takeover on a large cluster)",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=defaults.lease_ttl,
        metavar="SECONDS",
        help=f"the lease cycle/<profile> lasts this long unrenewed: a standby takes over this long after "
        f"a crash (default {defaults.lease_ttl:g})",
    )
    p.add_argument(
        "--renew-interval",
        type=float,
        default=defaults.renew_interval,
        metavar="SECONDS",
        help=f"seconds between lease renewals, below --lease-ttl (default {defaults.renew_interval:g})",
    )
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> CycleService:
    """The service the flags describe. Raises UsageError (one line) for any mistake in them."""
    if args.batch_size < 1:
        raise UsageError(f"--batch-size: must be at least 1, got {args.batch_size}")
    try:
        settings = settings_from_flags(args)
        registry = in_tree_registry(entry_points=True)
        config = load_config(args.config, registry=registry) if args.config else default_config(registry)
        try:
            profile = config.profile(args.profile)
        except KeyError as exc:
            raise UsageError(f"--profile: {exc.args[0]}") from None
        waiting = WaitingPods()  # the handle plugins see waiting pods through
        framework = Framework.from_profile(
            profile, registry, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score, handle=waiting
        )
        options = CycleOptions(
            batch_size=args.batch_size,
            backend=args.backend,
            warm_standby=not args.cold_standby,
            lease_ttl=args.lease_ttl,
            renew_interval=args.renew_interval,
        )
        return CycleService(settings, framework, options, waiting=waiting)
    except (ValueError, BackendUnavailable) as exc:  # ConfigError, SettingsError, RegistryError are ValueErrors
        raise UsageError(" ".join(str(exc).split("\n"))) from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build, usage_errors=(UsageError,))


if __name__ == "__main__":
    sys.exit(main())
