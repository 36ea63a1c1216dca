"""deploy/compose.yaml: every kubus service's command is one its entry point accepts, with the files
compose mounts and the servers compose starts; startup waits on health, not on luck."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import DEPLOY, check_service_command

from kubus.framework.config import load_config
from kubus.plugins import in_tree_registry

COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
KUBUS = {name: s for name, s in SERVICES.items() if s.get("command", [None])[:2] == ["python", "-m"]}


def _binds(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> file on this machine, for the service's bind mounts."""
    binds = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            binds[target] = (DEPLOY / source).resolve()
    return binds


def test_servers_are_nats_with_jetstream_and_a_redis() -> None:
    assert SERVICES["nats"]["image"].startswith("nats:2.10")
    assert "-js" in SERVICES["nats"]["command"]
    assert SERVICES["valkey"]["image"].startswith("valkey/valkey:")
    assert set(KUBUS) == {"queue", "cycle-default-scheduler", "cycle-gpu-binpack", "binder", "gpu-agent"}


@pytest.mark.parametrize("name", sorted(KUBUS))
def test_command_is_what_the_service_accepts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = KUBUS[name]
    binds = _binds(service)
    for target, source in binds.items():
        assert source.is_file(), f"{name}: mounts {source}, which does not exist"
        (tmp_path / target.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target.lstrip("/")).write_text(source.read_text())
    env = service["environment"]
    for var, server, port in [("KUBUS_NATS_URL", "nats", 4222), ("KUBUS_REDIS_URL", "valkey", 6379)]:
        url = urlparse(env[var])
        assert (url.hostname, url.port) == (server, port), f"{name}: {var}={env[var]} is not the compose {server}"
    check_service_command(service["command"], env, tmp_path, monkeypatch)


def test_one_cycle_per_profile_of_the_mounted_config() -> None:
    config = load_config(_binds(KUBUS["queue"])["/etc/kubus/scheduler-config.yaml"], registry=in_tree_registry())
    cycles = {next(a.split("=", 1)[1] for a in s["command"] if a.startswith("--profile="))
              for s in KUBUS.values() if "kubus.cycle" in s["command"]}  # fmt: skip
    assert cycles == {p.scheduler_name for p in config.profiles}


def test_startup_waits_for_healthy_dependencies() -> None:
    for name, service in KUBUS.items():
        depends = service["depends_on"]
        assert {"nats", "valkey"} <= depends.keys(), name
        for dependency, how in depends.items():
            assert how == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            assert "healthcheck" in SERVICES[dependency], f"{dependency} has no healthcheck to wait on"
        port = next(a.split("=", 1)[1] for a in service["command"] if a.startswith("--metrics-port="))
        assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"]), name


def test_kubus_containers_are_hardened() -> None:
    for name, service in KUBUS.items():
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"], name
        assert service["user"] == "10001:10001", f"{name}: the image's non-root user"
        assert "no-new-privileges:true" in service["security_opt"], name
