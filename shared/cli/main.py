"""`kubus` entry point: argument parsing and dispatch. User mistakes exit 2 with one line; runtime
errors (a server that does not answer, an object not found) exit 1, as kubectl's."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from kubus.api.errors import ManifestError
from kubus.api.manifests import FieldValidation, Manifests, load_manifests
from kubus.cli.access import add_access_command, run_access
from kubus.cli.cluster import NotFoundError
from kubus.cli.commands import add_cluster_commands, add_validate_option, run_cluster_command
from kubus.cli.completion import SHELLS, completion_script
from kubus.cli.connect import Unreachable, UsageError
from kubus.core import codec
from kubus.core.settings import SettingsError
from kubus.framework.config import ConfigError, default_config, load_config
from kubus.framework.registry import RegistryError
from kubus.kernels.backend import BackendUnavailable, select_backend
from kubus.plugins import in_tree_registry

EXIT_USAGE = 2
EXIT_UNREACHABLE = 1
"""A runtime error, as kubectl's exit 1: a server that does not answer, an object not found."""
EXIT_BROKEN_PIPE = 128 + 13
"""stdout's reader went away: the status of a process killed by SIGPIPE, as kubectl is."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit 2), like every other mistake."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kubus", description="Kubernetes scheduling framework on a message bus.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim = sub.add_parser(
        "simulate",
        help="schedule Pod manifests onto Node manifests offline and print where each pod goes",
        description="Read Node and Pod manifests, schedule the pods that name no node in queue "
        "order, in-process, and print the result. Pods with spec.nodeName are already running.",
    )
    sim.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="manifest file (YAML or JSON, multi-document, List); '-' reads stdin; repeatable",
    )
    sim.add_argument(
        "--config", metavar="SCHEDCONFIG", help="KubeSchedulerConfiguration YAML (default: kube's default profile)"
    )
    sim.add_argument("--explain", action="store_true", help="per-node filter reasons and per-plugin scores")
    add_validate_option(sim)
    sim.add_argument("-o", "--output", choices=("table", "json"), default="table")
    sim.add_argument("--seed", type=int, default=0, help="seed of the tie-break among equally scored nodes")
    sim.add_argument(
        "--backend", choices=("auto", "numpy", "cupy"), help="array backend (default: $KUBUS_BACKEND or auto)"
    )
    add_cluster_commands(sub)
    add_access_command(sub)
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script: source <(kubus completion bash)",
        description="Print the completion script for the shell; load it with source <(kubus completion bash) "
        "(or zsh) in your shell's rc file.",
    )
    completion.add_argument("shell", choices=SHELLS)
    return parser


def _read_manifests(paths: Sequence[str], validate: FieldValidation = FieldValidation.STRICT) -> Manifests:
    every = Manifests()
    for path in paths:
        m = load_manifests(path, validate=validate)
        every.warnings.extend(m.warnings)
        every.pods.extend(m.pods)
        every.nodes.extend(m.nodes)
        every.pod_groups += m.pod_groups
        every.namespaces += m.namespaces
        every.priority_classes += m.priority_classes
        every.disruption_budgets += m.disruption_budgets
        every.workloads += m.workloads
    return every


def _simulate(args: argparse.Namespace) -> int:
    from kubus.cli.simulate import print_table, simulate, stderr, to_json

    manifests = _read_manifests(args.filename, args.validate)
    for line in manifests.warnings:
        stderr(f"Warning: {line}")
    registry = in_tree_registry(entry_points=True)
    config = load_config(args.config, registry=registry) if args.config else default_config(registry=registry)
    backend = select_backend(args.backend)
    outcomes, warnings = simulate(
        manifests, config, backend=backend, seed=args.seed, explain=args.explain, registry=registry
    )
    for w in warnings:
        stderr(f"warning: {w}")
    if args.output == "json":
        sys.stdout.write(codec.dumps(to_json(outcomes, explain=args.explain), pretty=True).decode() + "\n")
    else:
        shown = {o.pod.key for o in outcomes}  # a running pod that was preempted has an outcome
        running = sum(1 for pod in manifests.pods if pod.spec.node_name and pod.key not in shown)
        print_table(outcomes, sys.stdout, explain=args.explain, running=running)
    return 0


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "simulate":
        return _simulate(args)
    if args.command == "access":
        return run_access(args)
    if args.command == "completion":
        sys.stdout.write(completion_script(parser, args.shell))
        return 0
    return run_cluster_command(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = _dispatch(parser, args)
        sys.stdout.flush()  # here, where a reader that went away is handled, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`kubus get pods | head`): stop quietly, as kubectl (killed by
        # SIGPIPE) does; what is still buffered for stdout goes nowhere instead of failing again.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (Unreachable, NotFoundError) as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_UNREACHABLE
    except (ManifestError, ConfigError, RegistryError, BackendUnavailable, SettingsError, UsageError, OSError) as e:
        for line in str(e).splitlines():
            sys.stderr.write(f"error: {line}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
