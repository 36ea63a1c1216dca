"""``python -m kubus.gpu_agent``: run the agent of one node, or simulate many, until SIGTERM/SIGINT.

    python -m kubus.gpu_agent --node NAME [--manifest node.yaml]
    python -m kubus.gpu_agent --simulate N --template node.yaml [--name-prefix sim-]
                              [--pod-duration 30] [--pod-duration-jitter 0.5]

``--node`` defaults to ``$NODE_NAME`` (a DaemonSet passes it with the downward API). A
simulation owns the KUBUS_NODES stream: run it against a NATS without per-node agents.
Exit status as `kubus.runtime.entrypoint` says: 0 after a clean stop, 1 when it could not start or a root
task died, 2 for bad settings, flags or manifests.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kubus.api.errors import ManifestError
from kubus.gpu_agent.inventory import NodeInventory, load_node_template
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.service import AgentService
from kubus.runtime.entrypoint import add_service_flags, run_service, settings_from_flags

PROG = "kubus.gpu_agent"
_SIMULATED_POD_DURATION = 30.0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = AgentOptions()
    p = argparse.ArgumentParser(
        prog="python -m kubus.gpu_agent", description="kubus node agent: one real node, or N simulated ones."
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--node", metavar="NAME", help="run the agent of this node (default $NODE_NAME)")
    mode.add_argument("--simulate", type=int, metavar="N", help="simulate N nodes cloned from --template")
    p.add_argument("--manifest", metavar="FILE", help="with --node: the Node manifest (default: this host's facts)")
    p.add_argument("--template", metavar="FILE", help="with --simulate: the Node manifest every node is cloned from")
    p.add_argument("--name-prefix", default="sim-", help="with --simulate: node i is <prefix><i:05d> (default sim-)")
    p.add_argument(
        "--pod-duration",
        type=float,
        metavar="SECONDS",
        help=f"seconds a pod runs before it succeeds, 0 = until deleted (default: {_SIMULATED_POD_DURATION:g} "
        "simulated, 0 for a real node)",
    )
    p.add_argument(
        "--pod-duration-jitter",
        type=float,
        default=defaults.pod_duration_jitter,
        metavar="FRACTION",
        help="each pod runs duration × [1 - f, 1 + f], drawn from its uid (default 0)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=defaults.heartbeat_interval,
        metavar="SECONDS",
        help=f"seconds between heartbeats (default {defaults.heartbeat_interval:g})",
    )
    add_service_flags(p)
    args = p.parse_args(argv)
    if args.simulate is not None:
        if args.template is None:
            p.error("--simulate needs --template FILE (the Node every simulated node is cloned from)")
        if args.manifest is not None:
            p.error("--manifest goes with --node; a simulation takes --template")
    else:
        args.node = args.node or os.environ.get("NODE_NAME")
        if not args.node:
            p.error("give --node NAME (or set $NODE_NAME), or --simulate N --template FILE")
        if args.template is not None:
            p.error("--template goes with --simulate; a real node takes --manifest")
    return args


def build(args: argparse.Namespace) -> AgentService:
    """The agent the flags describe (settings loaded, manifests read). Raises SettingsError,
    ManifestError or ValueError for bad input."""
    settings = settings_from_flags(args)
    duration = args.pod_duration
    if duration is None:
        duration = _SIMULATED_POD_DURATION if args.simulate is not None else 0.0
    options = AgentOptions(
        heartbeat_interval=args.heartbeat_interval,
        pod_duration=duration,
        pod_duration_jitter=args.pod_duration_jitter,
    )
    if args.simulate is not None:
        template = load_node_template(args.template)
        return AgentService.simulating(settings, template, args.simulate, options, prefix=args.name_prefix)
    return AgentService.for_node(settings, NodeInventory.discover(args.node, args.manifest), options)


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(PROG, parse_args(argv), build, usage_errors=(ValueError, ManifestError))


if __name__ == "__main__":
    sys.exit(main())
