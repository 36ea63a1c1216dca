"""What every ``python -m kubus.<service>`` shares: the connection flags, and running the service
until SIGTERM/SIGINT with one set of exit codes.

    0  after a clean stop;
    1  when the service could not start (NATS or Redis do not answer, the durable consumer is
       someone else's), a root task died, or the stop had to abandon work (NATS or Redis gone,
       in-flight work left for redelivery): one line on stderr saying which; also when the stop
       did not end within ``--stop-timeout`` plus `EXIT_GRACE` seconds and the process ended itself;
    2  for a mistake in the flags, the scheduler configuration, the settings or a manifest: one line;
    128+N  a second signal N (SIGTERM, SIGINT) while stopping: the process exits at once.

Every wait on the way out is bounded, so SIGTERM ends the process within ``--stop-timeout`` plus
a few seconds whatever state its connections are in: as kubelet expects before its SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from kubus.bus import ConsumerConflictError
from kubus.core.metrics import serve_metrics
from kubus.core.settings import ConnectionSettings, load_settings
from kubus.framework.config import SchedulerConfiguration, ignored_warnings
from kubus.runtime.service import Service, ServiceError, configure_logging, install_signal_handlers, logger

__all__ = [
    "DEFAULT_STOP_TIMEOUT",
    "EVENT_LOOPS",
    "EXIT_FAILED",
    "EXIT_GRACE",
    "EXIT_USAGE",
    "GC_GEN0_THRESHOLD",
    "PROFILE_DIR_ENV",
    "add_kube_pace_flags",
    "add_service_flags",
    "default_event_loop",
    "run_service",
    "settings_from_flags",
    "tune_gc",
    "warn_ignored",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_STOP_TIMEOUT = 10.0
"""Seconds a service has after SIGTERM to finish or hand back its in-flight work (``--stop-timeout``)."""
EXIT_GRACE = 5.0
"""Seconds after the stop timeout before a process whose stop is stuck ends itself (os._exit)."""
_FAILURES = (ServiceError, ConsumerConflictError, ConnectionError, OSError)
EVENT_LOOPS = ("uvloop", "asyncio")
"""``--event-loop``: uvloop (libuv) or asyncio's own selector loop."""


def default_event_loop() -> str:
    """uvloop where it is installed (a dependency on Linux and macOS), else asyncio's own loop.
    uvloop runs the services' NATS and Redis traffic with about a tenth less CPU (kubus bench)."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for ``--event-loop name`` (None: asyncio's default). Raises
    ValueError when uvloop is asked for and not installed."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        raise ValueError(
            "--event-loop uvloop: uvloop is not installed (pip install uvloop); or use --event-loop asyncio"
        ) from None
    return uvloop.new_event_loop


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    """``--settings``, ``--nats``, ``--redis``, ``--metrics-port`` and ``--log-level``."""
    parser.add_argument("--settings", metavar="FILE", help="connection settings (YAML); see kubus.core.settings")
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
    loop = default_event_loop()
    parser.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=loop,
        help=f"the asyncio event loop to run on (default here: {loop}; uvloop where installed)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=DEFAULT_STOP_TIMEOUT,
        metavar="SECONDS",
        help=f"after SIGTERM, time to finish or hand back in-flight work (default {DEFAULT_STOP_TIMEOUT:g}); "
        f"the process exits at most {EXIT_GRACE:g}s later whatever happens",
    )


def add_kube_pace_flags(parser: argparse.ArgumentParser, default_qps: float, default_burst: int) -> None:
    """``--kube-qps`` and ``--kube-burst``: a cluster-mode service's pace against the apiserver
    (over the configuration's clientConnection; `ClientConnection.pace`)."""
    parser.add_argument(
        "--kube-qps", type=float, metavar="N",
        help=f"requests per second to the apiserver at most, after --kube-burst (default: the configuration's "
        f"clientConnection.qps, else {default_qps:g}; below 0: no limit)",
    )  # fmt: skip
    parser.add_argument(
        "--kube-burst", type=int, metavar="N",
        help=f"(default: clientConnection.burst, else {default_burst})",
    )  # fmt: skip


def warn_ignored(prog: str, config: SchedulerConfiguration) -> None:
    """Log, once at start, each configuration field the service accepts without honouring it."""
    log = logger(prog)
    for line in ignored_warnings(config):
        log.warning(line)


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
    if not 0 < args.stop_timeout <= 3600:
        return _fail(prog, f"--stop-timeout: expected seconds in (0, 3600], got {args.stop_timeout:g}", EXIT_USAGE)
    try:
        loop_factory = _loop_factory(args.event_loop)
    except ValueError as exc:
        return _fail(prog, exc, EXIT_USAGE)
    try:
        service = build(args)
    except usage_errors as exc:
        return _fail(prog, exc, EXIT_USAGE)

    def exit_now(sig: signal.Signals) -> None:
        _exit_now(prog, f"{sig.name} again while stopping: exiting now", 128 + sig.value)

    async def serve() -> None:
        if args.metrics_port:
            serve_metrics(service.metrics, args.metrics_port, health=service)
        install_signal_handlers(service, timeout=args.stop_timeout, on_repeat=exit_now)
        # Armed when the stop begins, for whatever reason: ends the process if anything on the
        # way out (a hook, a close, the event loop's own teardown) outlasts the stop timeout.
        watchdog = asyncio.create_task(_watch_stop(service, prog, args.stop_timeout + EXIT_GRACE),
                                       name=f"{service.name}: stop watchdog")  # fmt: skip
        try:
            await service.run()
        finally:
            if not service.stopping.is_set():
                watchdog.cancel()

    tune_gc()
    try:
        with _profiled(prog), asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve())
    except _FAILURES as exc:
        return _fail(prog, exc, EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    if service.abandoned:
        return _fail(prog, f"stopped, abandoning: {'; '.join(service.abandoned)}", EXIT_FAILED)
    return 0


GC_GEN0_THRESHOLD = 50_000
"""Allocations between two collections of the youngest generation (Python's default: 700)."""


def tune_gc() -> None:
    """Collect cyclic garbage less often, and never look at what was loaded to start with.

    A service allocates a few objects per message, request and pod, nearly all freed at once by
    reference counting; at Python's default threshold the cyclic collector ran every 700
    allocations and took a tenth of the CPU of a binder or watcher talking to an apiserver
    (py-spy). `gc.freeze` moves what exists now (modules, configuration, the framework) out of
    the collector's sight; a higher first threshold makes each collection rarer, for little
    more memory (the cycles among 50,000 allocations at most).
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


PROFILE_DIR_ENV = "KUBUS_PROFILE_DIR"
"""Where to find the CPU: set it (`kubus up` and `kubus bench` pass their environment on) and every
service runs under cProfile and writes ``<dir>/<service>-<pid>.prof`` when it stops; read one with
``python -m pstats FILE`` (``sort tottime``, ``stats 30``). Costs the service about a third more CPU.
Times are wall time: on a machine with every core busy, a socket write that wakes its reader is
charged the wait for a core that follows (bench/README.md, "Where the CPU goes")."""


@contextlib.contextmanager
def _profiled(prog: str) -> Iterator[None]:
    directory = os.environ.get(PROFILE_DIR_ENV)
    if not directory:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        path = Path(directory) / f"{prog.rsplit('.', 1)[-1]}-{os.getpid()}.prof"
        path.parent.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(path)


async def _watch_stop(service: Service, prog: str, seconds: float) -> None:
    await service.stopping.wait()
    # A thread, not a task: it must fire even if the event loop never gets to run it again.
    timer = threading.Timer(seconds, _exit_now, (prog, f"did not stop within {seconds:g}s: exiting now", EXIT_FAILED))
    timer.daemon = True
    timer.start()


def _exit_now(prog: str, why: str, status: int) -> None:
    """End the process at once (no cleanup: what is in flight is redelivered to another replica)."""
    print(f"{prog}: {why}", file=sys.stderr, flush=True)
    os._exit(status)


def _fail(prog: str, exc: BaseException | str, status: int) -> int:
    print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)
    return status
