"""How a service reaches NATS and Redis: the settings, their load order, and the clients they make.

Load order, later wins: defaults → YAML file (keys are the field names) → environment
(``KUBUS_`` + the field name in upper case, e.g. ``KUBUS_NATS_URL``) → overrides (flags).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis.asyncio as aioredis
import yaml

from kubus.core.codec import JSONValue
from kubus.core.errors import KubusError
from kubus.core.redis_connection import KubusRedis, fast_connection, sentinel_client

__all__ = [
    "ENV_PREFIX",
    "ConnectionSettings",
    "SettingsError",
    "load_settings",
    "nats_connect_options",
    "redis_client",
    "sentinel_addresses",
]

ENV_PREFIX = "KUBUS_"

REDIS_POOL_SIZE = 32
"""Redis connections one client opens at most. Commands beyond that wait for a free connection
(a bounded pool that blocks, never "too many connections"), so a burst of work queues up instead
of failing."""
REDIS_POOL_WAIT = 30.0
"""Seconds a command waits for a free pooled connection before raising."""
REDIS_REPLY_TIMEOUT = 30.0
"""Seconds a command waits for Redis's reply before raising redis' TimeoutError (a transient
error: the step is retried or left to the janitor). Without it a Redis that stopped answering
(a stopped process, a partition that sends no reset) holds the service forever. kubus sends no
blocking commands, and its longest script call takes milliseconds."""


class SettingsError(KubusError, ValueError):
    """A settings file, variable or flag is wrong; the message names where and which key."""


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Where NATS and Redis are and how to authenticate to them. Paths are files on this machine."""

    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server URL(s), comma-separated for a cluster; ``tls://`` requires TLS."""
    nats_creds: str | None = None
    """Path of a NATS credentials file (JWT + NKey seed), as ``nats context`` writes them."""
    nats_user: str | None = None
    """NATS user name (user/password authentication)."""
    nats_password: str | None = None
    """NATS password for ``nats_user``."""
    nats_token: str | None = None
    """NATS authentication token."""
    nats_inbox_prefix: str | None = None
    """Prefix of this client's reply subjects (nats-py's ``_INBOX`` when unset). A user whose
    permissions allow only its own inboxes (``_INBOX_<user>.>``, see kubus.access) needs it."""
    nats_tls_ca: str | None = None
    """Path of the CA bundle (PEM) that verifies the NATS server; setting any nats_tls_* enables TLS."""
    nats_tls_cert: str | None = None
    """Path of this client's certificate (PEM) for NATS mutual TLS; needs ``nats_tls_key``."""
    nats_tls_key: str | None = None
    """Path of the private key (PEM) of ``nats_tls_cert``."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis URL; ``rediss://`` for TLS. Credentials in the URL work too."""
    redis_username: str | None = None
    """Redis ACL user name (``AUTH username password``)."""
    redis_password: str | None = None
    """Redis password (``requirepass`` or the ACL user's)."""
    redis_tls_ca: str | None = None
    """Path of the CA bundle (PEM) that verifies the Redis server; needs a ``rediss://`` URL."""
    redis_tls_cert: str | None = None
    """Path of this client's certificate (PEM) for Redis mutual TLS; needs ``redis_tls_key``."""
    redis_tls_key: str | None = None
    """Path of the private key (PEM) of ``redis_tls_cert``."""
    connect_timeout: float = 5.0
    """Seconds to wait for each connection attempt to NATS or Redis."""
    stream_replicas: int = 1
    """Copies JetStream keeps of every kubus stream (and its consumers): 1 on a single server,
    3 on a NATS cluster of three or more, so losing one server loses no message and no ack."""
    redis_sentinels: str | None = None
    """Sentinels (``host:port``, comma-separated) that say which Redis is the primary: set, the
    services find the primary through them and follow a failover; ``redis_url`` then gives only
    the database number and TLS (``rediss://``), its host is not used."""
    redis_master: str = "kubus"
    """The name the sentinels monitor the primary under (``sentinel monitor <name> ...``)."""
    redis_sentinel_username: str | None = None
    """User name for the sentinels, when they require a login (``requirepass``/ACL)."""
    redis_sentinel_password: str | None = None
    """Password for the sentinels, when they require one."""
    redis_wait_replicas: int = 0
    """Replicas a write that must survive a failover waits for (WAIT) before it counts as done:
    an accepted submission, a binding, a deletion. 0 (the default): none."""
    redis_wait_timeout: float = 1.0
    """Seconds such a write waits for ``redis_wait_replicas``; then the step is retried."""

    def __post_init__(self) -> None:
        if not self.connect_timeout > 0:
            raise SettingsError(f"connect_timeout: must be a positive number of seconds, got {self.connect_timeout!r}")
        if not self.redis_wait_timeout > 0:
            raise SettingsError(
                f"redis_wait_timeout: must be a positive number of seconds, got {self.redis_wait_timeout!r}"
            )
        if not 1 <= self.stream_replicas <= 5:
            raise SettingsError(f"stream_replicas: JetStream keeps 1 to 5 copies, got {self.stream_replicas!r}")
        if self.redis_wait_replicas < 0:
            raise SettingsError(f"redis_wait_replicas: expected 0 or more, got {self.redis_wait_replicas!r}")
        if self.redis_sentinels is not None:
            sentinel_addresses(self.redis_sentinels)  # SettingsError for a bad one
        for prefix in ("nats", "redis"):
            cert, key = getattr(self, f"{prefix}_tls_cert"), getattr(self, f"{prefix}_tls_key")
            if (cert is None) != (key is None):
                raise SettingsError(f"{prefix}_tls_cert and {prefix}_tls_key: set both or neither")


_FIELDS = {f.name: f for f in fields(ConnectionSettings)}
_INT_FIELDS = frozenset({"stream_replicas", "redis_wait_replicas"})


def sentinel_addresses(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` as pairs. Raises SettingsError naming the entry that is not one."""
    out: list[tuple[str, int]] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(f"redis_sentinels: {entry!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise SettingsError("redis_sentinels: no host:port given")
    return out


# Any: a keyword argument of ConnectionSettings, of the type of the field it is for (many types).
def _coerce(name: str, value: JSONValue, source: str) -> Any:
    """The value converted to the field's type; SettingsError naming ``source`` and ``name`` if it can't be."""
    if value is None:
        return None
    if name in ("connect_timeout", "redis_wait_timeout"):
        if isinstance(value, bool):
            raise SettingsError(f"{source}: {name}: expected a number of seconds, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise SettingsError(f"{source}: {name}: expected a number of seconds, got {value!r}") from None
    if name in _INT_FIELDS:
        if isinstance(value, bool | float):
            raise SettingsError(f"{source}: {name}: expected a whole number, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SettingsError(f"{source}: {name}: expected a whole number, got {value!r}") from None
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    raise SettingsError(f"{source}: {name}: expected a string, got {type(value).__name__} {value!r}")


def _read_file(path: Path) -> dict[str, Any]:  # Any: ConnectionSettings' keyword arguments
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read settings file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of setting names to values, got {type(data).__name__}")
    values: dict[str, Any] = {}  # Any: as above
    for key, value in data.items():
        if key not in _FIELDS:
            raise SettingsError(f"{path}: unknown key {key!r} (known: {', '.join(_FIELDS)})")
        values[key] = _coerce(key, value, str(path))
    return values


def load_settings(
    *,
    file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, object] | None = None,
) -> ConnectionSettings:
    """Settings from defaults, then ``file`` (YAML), then ``env`` (``KUBUS_<FIELD>``), then ``overrides``.

    Empty environment variables and overrides whose value is None count as unset, so optional
    flags and optional secrets can be passed through as they are. Raises SettingsError for an
    unreadable file, an unknown key in the file or in ``overrides``, or a value of the wrong type.
    """
    values: dict[str, Any] = {}  # Any: ConnectionSettings' keyword arguments, each of its field's type
    if file is not None:
        values.update(_read_file(Path(file)))
    for name in _FIELDS:
        var = ENV_PREFIX + name.upper()
        raw = env.get(var)
        if raw:
            values[name] = _coerce(name, raw, f"${var}")
    for name, value in (overrides or {}).items():
        if name not in _FIELDS:
            raise SettingsError(f"override {name!r}: unknown setting (known: {', '.join(_FIELDS)})")
        if value is not None:
            values[name] = _coerce(name, value, f"override {name!r}")
    return ConnectionSettings(**values)


def _ssl_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def nats_connect_options(settings: ConnectionSettings) -> dict[str, Any]:  # Any: nats.connect's keywords
    """Keyword arguments for ``nats.connect``: servers, timeout, credentials and TLS.

    A TLS context is made (reading the files now) when any ``nats_tls_*`` is set; otherwise a
    ``tls://`` URL gets nats-py's default verification. Raises OSError/ssl.SSLError for
    unreadable certificate files.
    """
    options: dict[str, Any] = {  # Any: as above
        "servers": [url.strip() for url in settings.nats_url.split(",") if url.strip()],
        "connect_timeout": settings.connect_timeout,
    }
    if settings.nats_creds:
        options["user_credentials"] = settings.nats_creds
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
    if settings.nats_password is not None:
        options["password"] = settings.nats_password
    if settings.nats_token is not None:
        options["token"] = settings.nats_token
    if settings.nats_inbox_prefix:
        options["inbox_prefix"] = settings.nats_inbox_prefix
    if settings.nats_tls_ca or settings.nats_tls_cert:
        options["tls"] = _ssl_context(settings.nats_tls_ca, settings.nats_tls_cert, settings.nats_tls_key)
    return options


# Any: keyword arguments of redis-py's client and connections, of their own types, passed on.
def redis_client(settings: ConnectionSettings, **kwargs: Any) -> KubusRedis:
    """A redis.asyncio client for ``settings`` (bytes responses unless ``kwargs`` say otherwise).

    No connection is made until the first command; at most `REDIS_POOL_SIZE` at once. With
    ``redis_sentinels``, the primary the sentinels name (`kubus.core.redis_connection.sentinel_client`),
    followed through failovers. ``redis_wait_replicas``/``redis_wait_timeout`` go to the client
    (`KubusRedis.confirm_replicated`). Raises SettingsError when TLS files are set but the URL is
    not ``rediss://``.
    """
    options: dict[str, Any] = {  # Any: as above
        "socket_connect_timeout": settings.connect_timeout,
        "socket_timeout": REDIS_REPLY_TIMEOUT,
        "decode_responses": False,
    }
    if settings.redis_username is not None:
        options["username"] = settings.redis_username
    if settings.redis_password is not None:
        options["password"] = settings.redis_password
    if settings.redis_tls_ca or settings.redis_tls_cert:
        if urlparse(settings.redis_url).scheme != "rediss":
            raise SettingsError(
                f"redis_url: {settings.redis_url!r} is not TLS but redis_tls_* is set; use a rediss:// URL"
            )
        options["ssl_ca_certs"] = settings.redis_tls_ca
        options["ssl_certfile"] = settings.redis_tls_cert
        options["ssl_keyfile"] = settings.redis_tls_key
    options.setdefault("max_connections", REDIS_POOL_SIZE)
    options.setdefault("timeout", REDIS_POOL_WAIT)
    options.update(kwargs)
    client: KubusRedis
    if settings.redis_sentinels:
        url = urlparse(settings.redis_url)
        if url.scheme == "rediss":
            options["ssl"] = True
        if url.username and "username" not in options:
            options["username"] = url.username
        if url.password and "password" not in options:
            options["password"] = url.password
        options["db"] = int(url.path.strip("/") or 0)
        sentinel_options: dict[str, str | float | None] = {
            "socket_connect_timeout": settings.connect_timeout,
            "socket_timeout": settings.connect_timeout,
        }
        if settings.redis_sentinel_username is not None:
            sentinel_options["username"] = settings.redis_sentinel_username
        if settings.redis_sentinel_password is not None:
            sentinel_options["password"] = settings.redis_sentinel_password
        client = sentinel_client(
            sentinel_addresses(settings.redis_sentinels),
            settings.redis_master,
            sentinel_options=sentinel_options,
            **options,
        )
    else:
        pool = aioredis.BlockingConnectionPool.from_url(settings.redis_url, **options)
        pool.connection_class = fast_connection(pool.connection_class)
        client = KubusRedis.from_pool(pool)  # type: ignore[assignment]  # from_pool returns its cls
    client.wait_replicas = settings.redis_wait_replicas
    client.wait_timeout = settings.redis_wait_timeout
    return client
