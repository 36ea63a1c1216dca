"""The roles of `kubus.access.roles` as the servers read them: a nats-server ``authorization``
block and a Valkey/Redis ACL file.

NATS: user/password per role, with ``permissions`` allow lists and ``allow_responses`` (a role
may answer the requests it received, and nothing else outside its lists). User/password rather
than NKEYs or JWTs: a static server config holds the permissions table as it is, nats-py needs
no extra package, and the passwords never leave files of mode 0600 (deployments on an operator
/JWT setup give ``nats_creds`` instead; see docs/security.md). The file is JSON, which
nats-server's config parser reads as it is (no quoting rules of our own to get wrong).

Redis: ``user default off`` (no anonymous access), one ACL user per role with a SHA-256 of its
password, read and read-write key patterns (``%R~``/``~``) and the commands kubus uses: reads,
writes and the scripts (which run with the caller's rights, checked key by key), never the
dangerous ones (FLUSHALL, CONFIG, KEYS, DEBUG, ...).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from kubus.access.roles import Role, redis_patterns
from kubus.core import codec
from kubus.store.keys import DEFAULT_PREFIX

__all__ = ["REDIS_COMMANDS", "nats_authorization", "nats_user", "redis_acl", "redis_acl_line"]

REDIS_COMMANDS = (
    "-@all +@read +@write +@scripting +@connection +@transaction -@dangerous "
    "-script|flush -script|kill -function -eval_ro -evalsha_ro -fcall -fcall_ro +ping +info"
)
"""The commands of every non-admin role: data reads and writes, Lua scripts, transactions; no
administration, no key enumeration (KEYS), no script or function management beyond loading."""


def nats_user(role: Role, password: str) -> dict[str, object]:
    """One entry of nats-server's ``authorization.users`` for ``role``."""
    entry: dict[str, object] = {"user": role.name, "password": password}
    if not role.admin:
        entry["permissions"] = {
            "publish": {"allow": [*role.publish, f"{role.inbox}.>"]},
            "subscribe": {"allow": [*role.subscribe, f"{role.inbox}.>"]},
            "allow_responses": True,
        }
    return entry


def nats_authorization(users: Iterable[tuple[Role, str]]) -> bytes:
    """A nats-server config file (JSON) with one user per ``(role, password)`` and no
    anonymous access."""
    return codec.dumps({"authorization": {"users": [nats_user(r, p) for r, p in users]}}, pretty=True)


def redis_acl_line(role: Role, password: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The ACL file line of ``role``."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    if role.admin:
        return f"user {role.name} on #{digest} ~* &* +@all"
    reads = " ".join(f"%R~{p}" for p in redis_patterns(role.redis_read, prefix))
    # Read-write patterns (``~``), not write-only ones: Redis needs one pattern to grant every
    # flag a command needs, and a script's declared keys need both.
    writes = " ".join(f"~{p}" for p in redis_patterns(role.redis_write, prefix))
    return f"user {role.name} on #{digest} resetkeys {reads} {writes} resetchannels {REDIS_COMMANDS}"


def redis_acl(users: Iterable[tuple[Role, str]], prefix: str = DEFAULT_PREFIX, *, anonymous_ping: bool = False) -> str:
    """A Valkey/Redis ACL file: the default user off (``anonymous_ping``: on, for PING alone, as
    a chart's liveness probe wants), one user per ``(role, password)``."""
    default = "on nopass" if anonymous_ping else "off"
    lines = [f"user default {default} resetkeys resetchannels -@all" + (" +ping" if anonymous_ping else "")]
    lines += [redis_acl_line(r, p, prefix) for r, p in users]
    return "\n".join(lines) + "\n"
