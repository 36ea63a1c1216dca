"""Connection settings: load order, errors that name their source, the clients they configure."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import redis.exceptions

from kubus.core.settings import (
    REDIS_REPLY_TIMEOUT,
    ConnectionSettings,
    SettingsError,
    load_settings,
    nats_connect_options,
    redis_client,
)


def test_defaults() -> None:
    settings = load_settings(env={})
    assert settings == ConnectionSettings()
    assert settings.nats_url == "nats://127.0.0.1:4222"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.connect_timeout == 5.0


def test_every_field_is_documented() -> None:
    source = Path(__import__("kubus.core.settings").core.settings.__file__).read_text()
    for name in ConnectionSettings.__dataclass_fields__:
        line = next(i for i, text in enumerate(source.splitlines()) if text.strip().startswith(f"{name}:"))
        assert source.splitlines()[line + 1].strip().startswith('"""'), f"{name} has no docstring"


def test_order_defaults_file_env_overrides(tmp_path: Path) -> None:
    file = tmp_path / "kubus.yaml"
    file.write_text(
        "nats_url: nats://file:4222\nredis_url: redis://file:6379/0\nnats_token: from-file\nconnect_timeout: 2\n"
    )
    env = {"KUBUS_REDIS_URL": "redis://env:6379/1", "KUBUS_NATS_TOKEN": "from-env", "KUBUS_CONNECT_TIMEOUT": "3.5"}
    settings = load_settings(file=file, env=env, overrides={"nats_token": "from-flag", "nats_user": None})
    assert settings.nats_url == "nats://file:4222"  # file only
    assert settings.redis_url == "redis://env:6379/1"  # env beats file
    assert settings.nats_token == "from-flag"  # flags beat env
    assert settings.connect_timeout == 3.5
    assert settings.nats_user is None  # a None override is "flag not given"


def test_empty_environment_variables_are_unset() -> None:
    assert load_settings(env={"KUBUS_NATS_URL": ""}).nats_url == "nats://127.0.0.1:4222"


def test_unknown_key_in_file_names_file_and_key(tmp_path: Path) -> None:
    file = tmp_path / "kubus.yaml"
    file.write_text("nats_url: nats://x:4222\nnats_ulr: typo\n")
    with pytest.raises(SettingsError, match=r"kubus\.yaml: unknown key 'nats_ulr'"):
        load_settings(file=file, env={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "expected a mapping"),
        ("nats_url: [a, b]\n", "nats_url: expected a string"),
        ("connect_timeout: soon\n", "connect_timeout: expected a number"),
        ("connect_timeout: -1\n", "connect_timeout: must be a positive"),
        ("nats_url: 'unclosed\n", "not valid YAML"),
    ],
)
def test_bad_file_values_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "kubus.yaml"
    file.write_text(text)
    with pytest.raises(SettingsError, match=message):
        load_settings(file=file, env={})


def test_missing_file_and_bad_env_and_unknown_override(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(file=tmp_path / "absent.yaml", env={})
    with pytest.raises(SettingsError, match=r"\$KUBUS_CONNECT_TIMEOUT: connect_timeout"):
        load_settings(env={"KUBUS_CONNECT_TIMEOUT": "fast"})
    with pytest.raises(SettingsError, match="override 'nats_uri': unknown setting"):
        load_settings(env={}, overrides={"nats_uri": "nats://x"})


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    file = tmp_path / "kubus.yaml"
    file.write_text("")
    assert load_settings(file=file, env={}) == ConnectionSettings()


def test_tls_cert_needs_key() -> None:
    with pytest.raises(SettingsError, match="nats_tls_cert and nats_tls_key"):
        ConnectionSettings(nats_tls_cert="/c.pem")


def test_nats_connect_options() -> None:
    settings = ConnectionSettings(
        nats_url="nats://a:4222, nats://b:4222",
        nats_creds="/etc/kubus/user.creds",
        nats_user="u",
        nats_password="p",
        connect_timeout=2,
    )
    options = nats_connect_options(settings)
    assert options == {
        "servers": ["nats://a:4222", "nats://b:4222"],
        "connect_timeout": 2,
        "user_credentials": "/etc/kubus/user.creds",
        "user": "u",
        "password": "p",
    }
    assert "tls" not in options


def test_nats_tls_makes_a_verifying_context() -> None:
    ca = ssl.get_default_verify_paths().cafile
    if ca is None:
        pytest.skip("no system CA bundle file to load")
    options = nats_connect_options(ConnectionSettings(nats_url="tls://a:4222", nats_tls_ca=ca))
    context = options["tls"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED


async def test_redis_client_passes_credentials_and_timeout() -> None:
    client = redis_client(
        ConnectionSettings(redis_url="redis://h:6380/2", redis_username="kubus", redis_password="s", connect_timeout=3)
    )
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6380, 2)
        assert (kwargs["username"], kwargs["password"]) == ("kubus", "s")
        assert kwargs["socket_connect_timeout"] == 3
        assert kwargs["socket_timeout"] == REDIS_REPLY_TIMEOUT
        assert client.get_encoder().decode_responses is False
    finally:
        await client.aclose()


async def test_a_redis_that_stops_answering_is_a_timeout_not_a_hang() -> None:
    """A server that accepts and never replies (a stopped Redis, a silent partition)."""
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = redis_client(ConnectionSettings(redis_url=f"redis://127.0.0.1:{port}/0"), socket_timeout=0.3)
    try:
        with pytest.raises(redis.exceptions.TimeoutError):
            async with asyncio.timeout(10):  # the test's own guard: without socket_timeout this hangs
                await client.ping()
    finally:
        await client.aclose()
        server.close()


async def test_redis_tls_needs_a_rediss_url() -> None:
    with pytest.raises(SettingsError, match="rediss://"):
        redis_client(ConnectionSettings(redis_tls_ca="/ca.pem"))
    client = redis_client(ConnectionSettings(redis_url="rediss://h:6380/0", redis_tls_ca="/ca.pem"))
    try:
        assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"
    finally:
        await client.aclose()
