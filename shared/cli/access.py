"""`kubus access init DIR`: the credentials of a deployment (`kubus.access`), made or completed.

Writes a random password per role (and per node agent named with ``--node``), the nats-server
``authorization`` block (``nats.conf``, for ``include`` in the server's config), the Valkey/Redis
ACL file (``users.acl``, for ``aclfile``) and one kubus settings file per user (``<user>.yaml``,
for ``--settings``, or as a Secret the Helm chart mounts). Passwords already there are kept, so
running it again with another ``--node`` adds that node's agent without logging anyone out.
"""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from kubus.access import ensure_credentials
from kubus.access.credentials import AccessError
from kubus.cli.connect import UsageError

__all__ = ["add_access_command", "run_access"]

P = TypeVar("P", bound=argparse.ArgumentParser)


def add_access_command(sub: argparse._SubParsersAction[P]) -> None:
    access = sub.add_parser(
        "access",
        help="make the credentials of a deployment: users, server configs, settings files",
        description="Least privilege on NATS and Redis (docs/security.md): one user per role.",
    )
    verbs = access.add_subparsers(dest="verb", required=True, metavar="VERB")
    init = verbs.add_parser(
        "init",
        help="write (or complete) the credentials into DIR, mode 0600",
        description="Write passwords.json, nats.conf, users.acl and <user>.yaml for every role into DIR; "
        "passwords already there are kept.",
    )
    init.add_argument("directory", metavar="DIR")
    init.add_argument(
        "--node", action="append", default=[], metavar="NAME", help="add the agent of this node (user agent-NAME)"
    )
    init.add_argument("--key-prefix", default="kubus", help="the Redis key prefix of the cluster (default: kubus)")
    init.add_argument(
        "--anonymous-ping",
        action="store_true",
        help="let clients without a login send Redis PING, and nothing else (a Valkey chart's health probes)",
    )


def run_access(args: argparse.Namespace) -> int:
    try:
        creds = ensure_credentials(
            args.directory, nodes=args.node, key_prefix=args.key_prefix, anonymous_ping=args.anonymous_ping
        )
    except (AccessError, KeyError) as exc:
        raise UsageError(str(exc).strip("'\"")) from exc
    out = sys.stdout
    out.write(f"{creds.directory}: {len(creds.passwords)} users ({', '.join(creds.passwords)})\n")
    out.write(f"  nats-server: include {creds.nats_config}\n")
    out.write(f"  valkey/redis: aclfile {creds.redis_acl}\n")
    out.write("  each service: --settings <DIR>/<role>.yaml (queue, cycle, binder, gpu-agent; the CLI: client)\n")
    return 0
