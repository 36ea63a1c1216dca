"""The permissions table and what it renders to (no servers: nats-server checks the config file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubus.access import ADMIN, ROLES, ensure_credentials, inbox_prefix, node_agent_role, role
from kubus.access.servers import redis_acl_line
from kubus.bus.consumers import WATCHER_CONSUMER, agent_consumer
from kubus.bus.subjects import NODE_PODS_ALL, STREAMS, bind, event_subject, node_pods
from kubus.cli.embedded import nats_server_binary
from kubus.core import codec


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
        # What each role's code publishes, and no more.
        ("queue", node_pods("n1"), True),  # the assignment of a pod naming its node
        ("cycle", "kubus.pods.requeue", False),
        ("cycle", event_subject("pod.unreserved", "default/p"), False),
        ("cycle", event_subject("pod.deleted", "default/p"), True),
        ("binder", "kubus.queue.default-scheduler.pop", False),
        ("agent-n1", event_subject("node.deleted", "n1"), False),
        ("agent-n1", event_subject("pod.rejected", "default/p"), False),
        ("client", "$JS.API.CONSUMER.DELETE.KUBUS_EVENTS.x", False),
        ("client", "$JS.API.CONSUMER.CREATE.KUBUS_EVENTS", True),
        ("client", "$JS.API.STREAM.UPDATE.KUBUS_EVENTS", False),
        ("agent-n1", "$JS.API.CONSUMER.INFO.KUBUS_NODES.kubus-agent-n1", False),
    ],
)
def test_who_may_publish_what(user: str, subject: str, allowed: bool) -> None:
    assert may_publish(user, subject) is allowed


_USERS = [*(r for r in ROLES if r != "admin"), "agent-n1"]
"""Every user but admin (one node agent standing for all)."""


def test_only_admin_deletes_or_purges() -> None:
    for user in _USERS:
        for stream in STREAMS:
            for subject in (
                f"$JS.API.STREAM.DELETE.{stream.name}",
                f"$JS.API.STREAM.PURGE.{stream.name}",
                f"$JS.API.STREAM.MSG.DELETE.{stream.name}",
                f"$JS.API.CONSUMER.DELETE.{stream.name}.kubus-queue",
                f"$JS.API.CONSUMER.DELETE.{stream.name}.kubus-binder",
                f"$JS.API.CONSUMER.DELETE.{stream.name}.{agent_consumer('n1')}",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{stream.name}.kubus-queue",
            ):
                assert not may_publish(user, subject), (user, subject)


def test_every_role_creates_the_streams_and_only_the_control_plane_updates_them() -> None:
    for user in _USERS:
        for stream in STREAMS:
            assert may_publish(user, f"$JS.API.STREAM.CREATE.{stream.name}")
            control_plane = ("queue", "cycle", "binder", "watcher")
            assert may_publish(user, f"$JS.API.STREAM.UPDATE.{stream.name}") is (user in control_plane)


@pytest.mark.parametrize(
    ("stream", "durable", "filter_subject", "owner"),
    [
        ("KUBUS_PODS", "kubus-queue", "kubus.pods.>", "queue"),
        ("KUBUS_BIND", "kubus-binder", "kubus.bind.>", "binder"),
        ("KUBUS_NODES", agent_consumer("n1"), node_pods("n1"), "agent-n1"),
        ("KUBUS_NODES", agent_consumer(None), NODE_PODS_ALL, "gpu-agent"),
    ],
)
def test_a_durable_consumer_is_made_by_its_owner_alone(
    stream: str, durable: str, filter_subject: str, owner: str
) -> None:
    """Through the subject that names it (nats-server refuses a request naming another): only its
    owner; through the subject of ephemeral consumers (where a request naming a durable updates
    it): nobody, on its stream."""
    named = f"$JS.API.CONSUMER.CREATE.{stream}.{durable}.{filter_subject}"
    assert {u for u in _USERS if may_publish(u, named)} == {owner}
    assert not any(may_publish(u, f"$JS.API.CONSUMER.CREATE.{stream}") for u in _USERS)
    assert {u for u in _USERS if may_publish(u, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}")} == {owner}


def test_no_durable_consumer_on_the_events_stream_but_the_watchers_own() -> None:
    """The queue and the CLI make ephemeral (ordered) consumers on KUBUS_EVENTS through the subject
    that lets a request name an existing durable and update it: so nobody may make one there but
    the watcher its own, by name (it puts its config back every minute, docs/security.md)."""
    ephemeral = "$JS.API.CONSUMER.CREATE.KUBUS_EVENTS"
    assert {u for u in _USERS if may_publish(u, ephemeral)} == {"queue", "client"}
    assert {u for u in _USERS if may_publish(u, f"{ephemeral}.{WATCHER_CONSUMER}")} == {"watcher"}
    for user in _USERS:
        assert not may_publish(user, f"{ephemeral}.spy"), user
        assert not may_publish(user, f"{ephemeral}.spy.kubus.events.>"), user
        assert not may_publish(user, f"{ephemeral}.spy.kubus.events.pod.bound.default.p"), user


def test_roles_are_named_and_unknown_ones_refused() -> None:
    assert set(ROLES) == {"queue", "cycle", "binder", "gpu-agent", "watcher", "client", "admin"}
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
