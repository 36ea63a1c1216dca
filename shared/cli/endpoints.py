"""Where the cluster commands find NATS and Redis, and what `kubus up` records for them.

Order, first that sets a URL wins: ``--nats``/``--redis`` flags → ``KUBUS_NATS_URL``/``KUBUS_REDIS_URL``
→ the ``--settings`` file → the URLs `kubus up` recorded in ``<data dir>/endpoints.json`` →
kubus.settings' defaults. The data dir is ``--data-dir``, else ``$KUBUS_HOME``, else ``.kubus`` in
the current directory. Credentials and TLS (``nats_creds``, ``redis_tls_ca``, ...) come from the
settings file and the environment exactly as for the services (`kubus.settings.load_settings`);
with neither, a `kubus up` with embedded servers lends its ``client`` login
(``<data dir>/access/client.yaml``, readable by its owner only).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubus import codec
from kubus.access import ACCESS_DIR
from kubus.settings import ENV_PREFIX, ConnectionSettings, load_settings

__all__ = [
    "DEFAULT_DATA_DIR",
    "ENDPOINTS_FILE",
    "HOME_ENV",
    "Endpoints",
    "cluster_settings",
    "data_dir",
    "read_endpoints",
    "remove_endpoints",
    "write_endpoints",
]

HOME_ENV = "KUBUS_HOME"
"""Environment variable naming the default data dir of `kubus up`."""
DEFAULT_DATA_DIR = ".kubus"
"""The data dir when neither ``--data-dir`` nor ``$KUBUS_HOME`` is given (relative to the cwd)."""
ENDPOINTS_FILE = "endpoints.json"


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What a running `kubus up` tells the other commands (``<data dir>/endpoints.json``)."""

    nats_url: str
    redis_url: str
    config: str | None = None
    """Absolute path of the KubeSchedulerConfiguration the cycles run (None: kube's default)."""
    pid: int = 0
    """The `kubus up` process."""
    started_at: float = 0.0
    embedded: bool = True
    """True when `kubus up` runs the servers itself (they stop with it)."""


def data_dir(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """``explicit``, else ``$KUBUS_HOME``, else ``./.kubus`` (not created here)."""
    if explicit:
        return Path(explicit)
    return Path(env.get(HOME_ENV) or DEFAULT_DATA_DIR)


def write_endpoints(directory: Path, endpoints: Endpoints) -> Path:
    """Write ``endpoints.json`` atomically (temp file + rename). Returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ENDPOINTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(
        codec.dumps(
            {
                "nats_url": endpoints.nats_url,
                "redis_url": endpoints.redis_url,
                "config": endpoints.config,
                "pid": endpoints.pid,
                "started_at": endpoints.started_at or time.time(),
                "embedded": endpoints.embedded,
            },
            pretty=True,
        )
    )
    tmp.replace(path)
    return path


def read_endpoints(directory: Path) -> Endpoints | None:
    """The recorded endpoints, or None when there are none or the file is not ours (unreadable,
    malformed): a stale or damaged file must never keep the other ways of connecting from working."""
    try:
        raw = codec.loads((directory / ENDPOINTS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("nats_url"), str)
        or not isinstance(raw.get("redis_url"), str)
    ):
        return None
    config = raw.get("config")
    return Endpoints(
        nats_url=raw["nats_url"],
        redis_url=raw["redis_url"],
        config=config if isinstance(config, str) else None,
        pid=int(raw.get("pid") or 0),
        started_at=float(raw.get("started_at") or 0.0),
        embedded=bool(raw.get("embedded", True)),
    )


def remove_endpoints(directory: Path, pid: int) -> None:
    """Remove ``endpoints.json`` if process ``pid`` wrote it (a newer `kubus up` keeps its own)."""
    recorded = read_endpoints(directory)
    if recorded is not None and recorded.pid == pid:
        with contextlib.suppress(OSError):
            (directory / ENDPOINTS_FILE).unlink()


def _file_keys(path: str | None) -> set[str]:
    if path is None:
        return set()
    with contextlib.suppress(OSError, yaml.YAMLError):
        data = yaml.safe_load(Path(path).read_text())
        if isinstance(data, dict):
            return {str(k) for k in data}
    return set()


def _login_in_env(env: Mapping[str, str]) -> bool:
    return any(env.get(ENV_PREFIX + name) for name in ("NATS_USER", "NATS_CREDS", "NATS_TOKEN", "REDIS_USERNAME"))


def cluster_settings(
    *,
    nats: str | None = None,
    redis: str | None = None,
    settings_file: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    connect_timeout: float | None = None,
) -> tuple[ConnectionSettings, Endpoints | None]:
    """Connection settings for a cluster command (see the module docstring for the order), and
    the `kubus up` endpoints record found, if any. Raises SettingsError for a bad settings file,
    variable or value."""
    home = data_dir(directory, env)
    recorded = read_endpoints(home)
    if settings_file is None and recorded is not None and recorded.embedded and not _login_in_env(env):
        # The embedded servers admit only their users: log in as the CLI's (kubus.access).
        client = home / ACCESS_DIR / "client.yaml"
        if client.is_file():
            settings_file = str(client)
    from_file = _file_keys(settings_file)
    overrides: dict[str, Any] = {"nats_url": nats, "redis_url": redis, "connect_timeout": connect_timeout}
    if recorded is not None:
        for name, url in (("nats_url", recorded.nats_url), ("redis_url", recorded.redis_url)):
            if overrides[name] is None and not env.get(ENV_PREFIX + name.upper()) and name not in from_file:
                overrides[name] = url
    settings = load_settings(file=settings_file, env=env, overrides=overrides)
    return settings, recorded
