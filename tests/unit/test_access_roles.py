"""The permissions table and what it renders to (no servers: nats-server checks the config file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubus import codec
from kubus.access import ADMIN, ROLES, ensure_credentials, inbox_prefix, node_agent_role, role
from kubus.access.servers import redis_acl_line
from kubus.bus.subjects import bind, event_subject, node_pods
from kubus.embedded import nats_server_binary


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def may_publish(user: str, subject: str) -> bool:
    r = role(user)
    return r.admin or any(_matches(p, subject) for p in (*r.publish, f"{r.inbox}.>"))


@pytest.mark.parametrize(
    ("user", "subject", "allowed"),
    [
        ("cycle", bind("default-scheduler"), True),
        ("gpu-agent", bind("default-scheduler"), False),
        ("agent-n1", bind("default-scheduler"), False),
        ("client", bind("default-scheduler"), False),
        ("binder", node_pods("n1"), True),
        ("cycle", node_pods("n1"), False),
        ("agent-n1", event_subject("node.updated", "n1"), True),
        ("agent-n1", event_subject("node.updated", "n2"), False),
        ("agent-n1", event_subject("pod.bound", "default/p"), False),
        ("gpu-agent", event_subject("node.updated", "any"), True),
        ("client", "kubus.pods.submit", True),
        ("client", "kubus.pods.requeue", False),
        ("agent-n1", "$JS.API.STREAM.UPDATE.KUBUS_NODES", False),
        ("agent-n1", "$JS.API.STREAM.DELETE.KUBUS_NODES", False),
        ("queue", "$JS.API.STREAM.DELETE.KUBUS_PODS", False),
        ("agent-n1", "$JS.API.CONSUMER.CREATE.KUBUS_NODES.kubus-agent-n1.kubus.node.n1.pods", True),
        ("agent-n1", "$JS.API.CONSUMER.CREATE.KUBUS_NODES.kubus-agent-n1.kubus.node.n2.pods", False),
        ("agent-n1", f"{inbox_prefix('queue')}.x", False),
        ("admin", "$JS.API.STREAM.DELETE.KUBUS_PODS", True),
    ],
)
def test_who_may_publish_what(user: str, subject: str, allowed: bool) -> None:
    assert may_publish(user, subject) is allowed


def test_roles_are_named_and_unknown_ones_refused() -> None:
    assert set(ROLES) == {"queue", "cycle", "binder", "gpu-agent", "client", "admin"}
    assert role("agent-gpu-7") == node_agent_role("gpu-7")
    with pytest.raises(KeyError, match="unknown role 'scheduler'"):
        role("scheduler")
    with pytest.raises(KeyError):
        role("agent-")


def test_redis_lines() -> None:
    agent = redis_acl_line(node_agent_role("n.1"), "pw")
    assert "~kubus:{node:n.1}:*" in agent and "~kubus:{node:*}" not in agent
    assert "-@dangerous" in agent and "resetchannels" in agent and "pw" not in agent
    assert redis_acl_line(ADMIN, "pw").endswith("~* &* +@all")
    assert "~other:{pod:*}:*" in redis_acl_line(ROLES["cycle"], "pw", prefix="other")


def test_the_rendered_configs_are_valid_for_the_servers(tmp_path: Path) -> None:
    creds = ensure_credentials(tmp_path / "access", nodes=["gpu-1.example.com"])
    check = subprocess.run([str(nats_server_binary()), "-t", "-c", str(creds.nats_config)], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    users = codec.loads(creds.nats_config.read_bytes())["authorization"]["users"]
    assert {u["user"] for u in users} == {*ROLES, "agent-gpu-1.example.com"}
    assert all(("permissions" in u) != (u["user"] == "admin") for u in users)
    settings = creds.settings_file("agent-gpu-1.example.com").read_text()
    assert "nats_inbox_prefix: _INBOX_agent-gpu-1_example_com" in settings
    with pytest.raises(KeyError):
        ensure_credentials(tmp_path / "access", users=["nobody"])


def test_the_default_user_is_off_unless_it_may_only_ping(tmp_path: Path) -> None:
    off = ensure_credentials(tmp_path / "a").redis_acl.read_text().splitlines()[0]
    assert off == "user default off resetkeys resetchannels -@all"
    ping = ensure_credentials(tmp_path / "b", anonymous_ping=True).redis_acl.read_text().splitlines()[0]
    assert ping == "user default on nopass resetkeys resetchannels -@all +ping"
