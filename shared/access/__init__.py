"""Least privilege on the bus and in Redis: the roles (who may do what), the server configs
that enforce them, and the credentials of an installation. See docs/security.md."""

from kubus.access.credentials import (
    ACCESS_DIR,
    DEFAULT_USERS,
    AccessError,
    Credentials,
    ensure_credentials,
    read_credentials,
)
from kubus.access.roles import ADMIN, ROLES, Role, inbox_prefix, node_agent_role, role
from kubus.access.servers import nats_authorization, redis_acl

__all__ = [
    "ACCESS_DIR",
    "ADMIN",
    "DEFAULT_USERS",
    "ROLES",
    "AccessError",
    "Credentials",
    "Role",
    "ensure_credentials",
    "inbox_prefix",
    "nats_authorization",
    "node_agent_role",
    "read_credentials",
    "redis_acl",
    "role",
]
