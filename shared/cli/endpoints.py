"""Where the cluster commands find NATS and Redis, and what `kubus up` records for them.

Order, first that sets a URL wins: ``--nats``/``--redis`` flags → ``KUBUS_NATS_URL``/``KUBUS_REDIS_URL``
→ the ``--settings`` file → the URLs `kubus up` recorded in ``<data dir>/endpoints.json`` →
kubus.core.settings' defaults. `kubus up`'s data dir is ``--data-dir``, else ``$KUBUS_HOME``, else
``.kubus`` in the current directory. A cluster command finds it from any directory, as kubectl
finds its cluster (`cluster_home`): ``--data-dir``, else ``--cluster NAME`` (a cluster recorded in
the per-user file), else ``$KUBUS_HOME``, else ``./.kubus`` when a `kubus up` runs there, else the
per-user file's current cluster: every `kubus up` records its data dir in ``~/.kubus/config``
(``$KUBUS_CONFIG`` names another file), kubeconfig-style, and makes it the current one.
Credentials and TLS (``nats_creds``, ``redis_tls_ca``, ...) come from the
settings file and the environment exactly as for the services (`kubus.core.settings.load_settings`);
with neither, a `kubus up` with embedded servers lends its ``client`` login
(``<data dir>/access/client.yaml``, readable by its owner only).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubus.access import ACCESS_DIR
from kubus.core import codec
from kubus.core.errors import UsageError
from kubus.core.settings import ENV_PREFIX, ConnectionSettings, load_settings

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_DATA_DIR",
    "ENDPOINTS_FILE",
    "HOME_ENV",
    "ClusterRecord",
    "Endpoints",
    "cluster_home",
    "cluster_settings",
    "data_dir",
    "read_clusters",
    "read_endpoints",
    "record_cluster",
    "remove_endpoints",
    "user_config",
    "write_endpoints",
]

HOME_ENV = "KUBUS_HOME"
"""Environment variable naming the default data dir of `kubus up`."""
DEFAULT_DATA_DIR = ".kubus"
"""The data dir when neither ``--data-dir`` nor ``$KUBUS_HOME`` is given (relative to the cwd)."""
ENDPOINTS_FILE = "endpoints.json"
CONFIG_ENV = "KUBUS_CONFIG"
"""Environment variable naming the per-user file of clusters (default: ``~/.kubus/config``)."""
_USER_CONFIG = Path(".kubus") / "config"


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
    metrics: dict[str, str] = field(default_factory=dict)
    """Service name -> the URL of its /metrics (``http://127.0.0.1:PORT/metrics``); empty when
    `kubus up` runs the services without metrics endpoints."""


def data_dir(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ) -> Path:
    """``explicit``, else ``$KUBUS_HOME``, else ``./.kubus`` (not created here)."""
    if explicit:
        return Path(explicit)
    return Path(env.get(HOME_ENV) or DEFAULT_DATA_DIR)


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """One `kubus up` data dir in the per-user file, under a name (``--cluster NAME``)."""

    name: str
    data_dir: Path


def user_config(env: Mapping[str, str] = os.environ) -> Path:
    """The per-user file of clusters: ``$KUBUS_CONFIG``, else ``~/.kubus/config``."""
    return Path(env.get(CONFIG_ENV) or Path.home() / _USER_CONFIG)


def read_clusters(env: Mapping[str, str] = os.environ) -> tuple[tuple[ClusterRecord, ...], str | None]:
    """(the recorded clusters, the current one's name); nothing for a missing or damaged file
    (it must never keep the other ways of finding a cluster from working)."""
    try:
        raw = yaml.safe_load(user_config(env).read_text())
    except (OSError, yaml.YAMLError):
        return (), None
    if not isinstance(raw, dict):
        return (), None
    records = []
    for item in raw.get("clusters") or ():
        if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("dataDir"), str):
            records.append(ClusterRecord(item["name"], Path(item["dataDir"])))
    current = raw.get("current-cluster")
    return tuple(records), current if isinstance(current, str) else None


def record_cluster(directory: Path, env: Mapping[str, str] = os.environ) -> str:
    """Record ``directory`` (a `kubus up` data dir, absolute) in the per-user file and make it the
    current cluster; returns its name there (the data dir's own name, or its parent's for a
    ``.kubus``, made unique). Idempotent for one directory. Raises OSError when the file cannot
    be written."""
    records, _ = read_clusters(env)
    name = next((r.name for r in records if r.data_dir == directory), None)
    if name is None:
        base = (directory.parent.name if directory.name == DEFAULT_DATA_DIR else directory.name).lstrip(".") or "kubus"
        taken = {r.name for r in records}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        records += (ClusterRecord(name, directory),)
    path = user_config(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "current-cluster": name,
        "clusters": [{"name": r.name, "dataDir": str(r.data_dir)} for r in records],
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        "# Written by kubus up: the data dirs of the clusters it started, as kubectl's kubeconfig lists\n"
        "# clusters. Cluster commands use current-cluster unless --cluster, --data-dir or $KUBUS_HOME say.\n"
        + yaml.safe_dump(body, sort_keys=False)
    )
    tmp.replace(path)
    return name


def cluster_home(
    explicit: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    *,
    cluster: str | None = None,
) -> Path:
    """The data dir whose ``endpoints.json`` a cluster command reads: ``explicit``
    (``--data-dir``), else the per-user file's cluster named ``cluster`` (``--cluster``), else
    ``$KUBUS_HOME``, else ``./.kubus`` when a `kubus up` is recorded there, else the per-user
    file's current cluster, else ``./.kubus``. Raises UsageError for a ``cluster`` not recorded."""
    if explicit:
        return Path(explicit)
    if cluster:
        records, _ = read_clusters(env)
        for r in records:
            if r.name == cluster:
                return r.data_dir
        known = ", ".join(r.name for r in records) or "none"
        raise UsageError(f"--cluster: no cluster {cluster!r} in {user_config(env)} (known: {known})")
    if env.get(HOME_ENV):
        return Path(env[HOME_ENV])
    local = Path(DEFAULT_DATA_DIR)
    if read_endpoints(local) is not None:
        return local
    records, current = read_clusters(env)
    for r in records:
        if r.name == current:
            return r.data_dir
    return local


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
                "metrics": endpoints.metrics,
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
    metrics = raw.get("metrics")
    return Endpoints(
        nats_url=raw["nats_url"],
        redis_url=raw["redis_url"],
        config=config if isinstance(config, str) else None,
        pid=int(raw.get("pid") or 0),
        started_at=float(raw.get("started_at") or 0.0),
        embedded=bool(raw.get("embedded", True)),
        metrics=(
            {str(k): v for k, v in metrics.items() if isinstance(v, str)} if isinstance(metrics, dict) else {}
        ),
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
    cluster: str | None = None,
) -> tuple[ConnectionSettings, Endpoints | None]:
    """Connection settings for a cluster command (see the module docstring for the order), and
    the `kubus up` endpoints record found, if any. Raises SettingsError for a bad settings file,
    variable or value, UsageError for a ``cluster`` not recorded."""
    home = cluster_home(directory, env, cluster=cluster)
    recorded = read_endpoints(home)
    if settings_file is None and recorded is not None and recorded.embedded and not _login_in_env(env):
        # The embedded servers admit only their users: log in as the CLI's (kubus.access).
        client = home / ACCESS_DIR / "client.yaml"
        if client.is_file():
            settings_file = str(client)
    from_file = _file_keys(settings_file)
    overrides: dict[str, str | float | None] = {
        "nats_url": nats,
        "redis_url": redis,
        "connect_timeout": connect_timeout,
    }
    if recorded is not None:
        for name, url in (("nats_url", recorded.nats_url), ("redis_url", recorded.redis_url)):
            if overrides[name] is None and not env.get(ENV_PREFIX + name.upper()) and name not in from_file:
                overrides[name] = url
    settings = load_settings(file=settings_file, env=env, overrides=overrides)
    return settings, recorded
