"""Credentials for a kubus installation: a random password per user, and every file that uses them.

`ensure_credentials(directory)` keeps, under ``directory`` (mode 0700; every file 0600, so
another local user can neither read a password nor connect):

==================  ============================================================================
``passwords.json``  user -> password; kept across restarts (new users are added, none changed)
``nats.conf``       nats-server ``authorization`` block (`kubus.access.servers.nats_authorization`)
``users.acl``       Valkey/Redis ACL file, default user off (`kubus.access.servers.redis_acl`)
``<user>.yaml``     a kubus settings file (``--settings``) that logs in as ``<user>``
==================  ============================================================================

`kubus up` makes them in ``<data dir>/access`` for its embedded servers and services, the CLI
finds ``client.yaml`` there through ``$KUBUS_HOME``; ``kubus access init DIR`` makes them for a
deployment (server configs to mount, settings files to turn into Secrets).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubus.access.roles import ADMIN, ROLES, Role, node_agent_role, role
from kubus.access.servers import nats_authorization, redis_acl
from kubus.core import codec
from kubus.core.errors import KubusError
from kubus.store.keys import DEFAULT_PREFIX

__all__ = [
    "ACCESS_DIR",
    "DEFAULT_USERS",
    "AccessError",
    "Credentials",
    "ensure_credentials",
    "read_credentials",
]

ACCESS_DIR = "access"
"""The credentials' folder inside a `kubus up` data dir."""
DEFAULT_USERS = tuple(ROLES)
"""The users `ensure_credentials` makes unless told otherwise: one per fixed role."""
_PASSWORDS = "passwords.json"
_PASSWORD_BYTES = 24


class AccessError(KubusError, ValueError):
    """A credentials folder is unreadable or not ours; the message names the file."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """The users of one installation and where their files are."""

    directory: Path
    passwords: dict[str, str] = field(default_factory=dict)
    """user -> password."""

    @property
    def nats_config(self) -> Path:
        """The nats-server config file (``-c``) holding the users and their permissions."""
        return self.directory / "nats.conf"

    @property
    def redis_acl(self) -> Path:
        """The Valkey/Redis ACL file (``--aclfile``)."""
        return self.directory / "users.acl"

    def settings_file(self, user: str) -> Path:
        """The kubus settings file that logs in as ``user``. KeyError for an unknown user."""
        if user not in self.passwords:
            raise KeyError(f"no credentials for user {user!r} in {self.directory}")
        return self.directory / f"{user}.yaml"

    def password(self, user: str) -> str:
        """``user``'s password. KeyError for an unknown user."""
        return self.passwords[user]

    def users(self) -> list[tuple[Role, str]]:
        """``(role, password)`` of every user."""
        return [(role(user), password) for user, password in self.passwords.items()]

    def url(self, url: str, user: str = ADMIN.name) -> str:
        """``url`` (``nats://host:port`` or ``redis://host:port/db``) with ``user``'s login in it."""
        scheme, rest = url.split("://", 1)
        rest = rest.rsplit("@", 1)[-1]
        return f"{scheme}://{user}:{self.passwords[user]}@{rest}"


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 from the first byte (temp file + rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


def read_credentials(directory: str | os.PathLike[str]) -> Credentials | None:
    """The credentials kept in ``directory``, or None when it has none. Raises AccessError for a
    passwords file that is unreadable or not ours."""
    path = Path(directory) / _PASSWORDS
    try:
        raw = codec.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise AccessError(f"{path}: cannot read credentials: {exc}") from exc
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise AccessError(f"{path}: expected an object of user names to passwords")
    return Credentials(Path(directory), dict(raw))


def ensure_credentials(
    directory: str | os.PathLike[str],
    *,
    users: Iterable[str] = DEFAULT_USERS,
    nodes: Iterable[str] = (),
    key_prefix: str = DEFAULT_PREFIX,
    anonymous_ping: bool = False,
    settings: Mapping[str, object] | None = None,
) -> Credentials:
    """The credentials in ``directory``, made or completed: a random password for each of
    ``users`` and for the agent of each of ``nodes`` (user ``agent-<node>``) that has none yet,
    then every file of the module docstring written again (mode 0600, the folder 0700).
    ``anonymous_ping`` lets a client without a login send PING to Redis and nothing else (the
    health probes of a Valkey chart); off, the default user is disabled. ``settings``: more
    `kubus.core.settings` keys written into every user's settings file (the sentinels and replica
    counts of ``kubus up --ha``, so the services and the CLI find the primary after a failover).
    Raises AccessError for a damaged passwords file, KeyError for an unknown user."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    existing = read_credentials(folder)
    passwords = dict(existing.passwords) if existing else {}
    wanted = [*users, *(node_agent_role(n).name for n in nodes)]
    for user in wanted:
        role(user)  # KeyError for a user that is no role
        passwords.setdefault(user, secrets.token_urlsafe(_PASSWORD_BYTES))
    creds = Credentials(folder, passwords)
    extra = dict(settings or {})
    _write_private(folder / _PASSWORDS, codec.dumps(passwords, pretty=True))
    _write_private(creds.nats_config, nats_authorization(creds.users()))
    _write_private(creds.redis_acl, redis_acl(creds.users(), key_prefix, anonymous_ping=anonymous_ping).encode())
    for user, password in passwords.items():
        login: dict[str, object] = {
            "nats_user": user,
            "nats_password": password,
            "nats_inbox_prefix": role(user).inbox,
            "redis_username": user,
            "redis_password": password,
            **extra,
        }
        _write_private(creds.settings_file(user), yaml.safe_dump(login, sort_keys=False).encode())
    return creds
