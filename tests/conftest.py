"""The one source of NATS and Redis servers for every test, and clients isolated per test.

Servers, in this order (session-scoped, started once, only if a test asks for them):

1. ``KUBUS_NATS_URL`` / ``KUBUS_REDIS_URL`` from the environment, each when set;
2. testcontainers (``nats -js``, ``redis``) when a Docker engine answers;
3. `kubus.cli.embedded.EmbeddedServers` on free ports in a temporary directory, with credentials
   (`kubus.access`): no anonymous access, one user per role. ``nats_url``/``redis_url`` then
   carry the admin login; the e2e services log in as their roles and the CLI as ``client``.

Under ``CI=true`` failing to get a server fails the test; elsewhere it skips, visibly.
Tests wipe the servers (FLUSHALL, every stream deleted): never point ``KUBUS_*_URL`` at data you keep.

Fixtures: ``servers`` (the endpoints), ``nats_url``, ``redis_url`` (strings), and per test
``redis`` (redis.asyncio client, bytes, FLUSHALL first), ``nats`` (connected nats-py client,
every JetStream stream deleted first, drained after), ``js`` (its JetStream context), ``settings``
(ConnectionSettings for services on those emptied servers) and ``state`` (a ClusterState on them). Tests
using any of them are marked ``integration`` automatically.

Cluster mode: ``kube_apiserver`` (session: a real etcd + kube-apiserver from ../shared/kube,
tests/kube_support.py) and per test ``kube`` (a fresh namespace, an admin KubeClient, Nodes
deleted after). No binaries: skipped, saying how to point the tests at some; under ``CI=true``
a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from nats import connect as nats_connect
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from support import ServerEndpoints

from kubus.access import ACCESS_DIR, ensure_credentials
from kubus.cli.embedded import EmbeddedServers
from kubus.core.settings import ConnectionSettings
from kubus.store import ClusterState

if TYPE_CHECKING:  # imported by the kube fixtures only when used: kubus.kubeapi needs aiohttp
    from kube_support import KubeApiServer, KubeTest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Every `kubus up` records its cluster in the per-user file (kubus.cli.endpoints): the tests' own
# clusters go to a file of the test run's, never to the user's ~/.kubus/config.
os.environ.setdefault("KUBUS_CONFIG", os.path.join(tempfile.mkdtemp(prefix="kubus-test-config-"), "config"))

# Timing is not correctness: on a shared, noisy machine example generation and runs may be slow.
settings.register_profile("kubus", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kubus")


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"no test servers (CI=true makes this a failure): {reason}", pytrace=False)
    pytest.skip(f"no test servers: {reason}")


def _docker_answers() -> bool:
    """True when a Docker engine answers a ping within a second; quiet and quick otherwise."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        sock = Path("/var/run/docker.sock")
        if not sock.exists():
            return False
        host = f"unix://{sock}"
    parsed = urlparse(host)
    try:
        if parsed.scheme == "unix":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect(parsed.path)
        elif parsed.scheme in ("tcp", "http", "https"):
            with socket.create_connection((parsed.hostname or "localhost", parsed.port or 2375), timeout=1):
                pass
        else:
            return False
        import docker  # testcontainers' own dependency

        return bool(docker.from_env(timeout=2).ping())
    except Exception:
        return False


@contextlib.contextmanager
def _containers(need_nats: bool, need_redis: bool) -> Iterator[tuple[str | None, str | None]]:
    from testcontainers.community.nats import NatsContainer
    from testcontainers.community.redis import RedisContainer

    with contextlib.ExitStack() as stack:
        nats_url = redis_url = None
        if need_nats:
            nc = stack.enter_context(NatsContainer("nats:2.10", jetstream=True))
            nats_url = nc.nats_uri()
        if need_redis:
            rc = stack.enter_context(RedisContainer("redis:7"))
            redis_url = f"redis://{rc.get_container_host_ip()}:{rc.get_exposed_port(rc.port)}/0"
        yield nats_url, redis_url


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerEndpoints]:
    """Real NATS (JetStream) and Redis for the whole session; see the module docstring."""
    env_nats = os.environ.get("KUBUS_NATS_URL") or None
    env_redis = os.environ.get("KUBUS_REDIS_URL") or None
    if env_nats and env_redis:
        yield ServerEndpoints(env_nats, env_redis, "env")
        return
    if _docker_answers():
        try:
            with _containers(env_nats is None, env_redis is None) as (nats_url, redis_url):
                yield ServerEndpoints(env_nats or nats_url or "", env_redis or redis_url or "", "testcontainers")
            return
        except Exception as exc:  # fall through to embedded servers, which need no Docker
            print(f"testcontainers failed ({exc!r}); using embedded servers")
    directory = tmp_path_factory.mktemp("embedded-servers")
    embedded = EmbeddedServers(directory, credentials=ensure_credentials(directory / ACCESS_DIR))
    try:
        embedded.start_sync()
    except Exception as exc:
        embedded.stop_sync()
        _unavailable(f"embedded servers did not start: {exc}")
    try:
        yield ServerEndpoints(
            env_nats or embedded.nats_url,
            env_redis or embedded.redis_url,
            "embedded",
            None if env_nats or env_redis else embedded.credentials,
        )
    finally:
        embedded.stop_sync()


@pytest.fixture(scope="session")
def nats_url(servers: ServerEndpoints) -> str:
    """URL of the session's NATS server (JetStream enabled), with the admin login if it has users."""
    return servers.login(servers.nats_url)


@pytest.fixture(scope="session")
def redis_url(servers: ServerEndpoints) -> str:
    """URL of the session's Redis-compatible server, with the admin login if it has users."""
    return servers.login(servers.redis_url)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A redis.asyncio client (bytes in, bytes out) on an empty database: FLUSHALL first."""
    # A reply timeout, as services have (REDIS_REPLY_TIMEOUT): a server that stopped answering
    # fails the test with a clear error instead of hanging the run.
    client = aioredis.Redis.from_url(redis_url, decode_responses=False, socket_timeout=60)
    try:
        await client.flushall()
    except Exception as exc:
        await client.aclose()
        _unavailable(f"redis at {redis_url} does not answer: {exc!r}")
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def nats(nats_url: str) -> AsyncIterator[NATS]:
    """A connected nats-py client on a JetStream with no streams (all deleted first); drained after."""
    try:
        client = await nats_connect(nats_url, name="kubus-test", connect_timeout=5, max_reconnect_attempts=3)
    except Exception as exc:
        _unavailable(f"nats at {nats_url} does not answer: {exc!r}")
    js = client.jetstream()
    for info in await js.streams_info():
        await js.delete_stream(info.config.name)
    try:
        yield client
    finally:
        if not client.is_closed:
            with contextlib.suppress(Exception):
                await client.drain()
            await client.close()


@pytest.fixture
def settings(nats: NATS, redis: aioredis.Redis, nats_url: str, redis_url: str) -> ConnectionSettings:
    """Connection settings for services, on servers the ``nats`` and ``redis`` fixtures emptied."""
    return ConnectionSettings(nats_url=nats_url, redis_url=redis_url)


@pytest.fixture
def state(redis: aioredis.Redis) -> ClusterState:
    """The store over the ``redis`` fixture's empty database."""
    return ClusterState(redis)


@pytest.fixture
def js(nats: NATS) -> JetStreamContext:
    """The JetStream context of the ``nats`` fixture's client."""
    return nats.jetstream()


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A real etcd + kube-apiserver for the session (`kube_support.KubeApiServer`: url, kubeconfig,
    token, ca_file, config(), client(), restart_apiserver(), compact_etcd()); about 3 s to start.
    No binaries: a skip saying how to point the tests at some (a failure under CI=true)."""
    from kube_support import KubeApiServer, KubeUnavailable, kube_binaries

    try:
        binaries = kube_binaries()
    except KubeUnavailable as exc:
        if IN_CI:
            pytest.fail(f"no kube-apiserver (CI=true makes this a failure): {exc}", pytrace=False)
        pytest.skip(f"no kube-apiserver: {exc}")
    with KubeApiServer(binaries, tmp_path_factory.mktemp("kube-apiserver")) as server:
        yield server


@pytest.fixture
async def kube(kube_apiserver: KubeApiServer, request: pytest.FixtureRequest) -> AsyncIterator[KubeTest]:
    """The test's share of ``kube_apiserver`` (`kube_support.KubeTest`): a fresh namespace, an admin
    KubeClient, and make_nodes() whose Nodes are deleted after the test."""
    from kube_support import KubeTest

    async with KubeTest(kube_apiserver, request.node.name) as test:
        yield test


_SERVER_FIXTURES = frozenset({"servers", "nats_url", "redis_url", "nats", "redis", "js"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a server fixture as ``integration``."""
    for item in items:
        if _SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(wrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Generator[None, Any, Any]:
    """When pytest-timeout fails a hung test (its SIGALRM handler), print every asyncio task's
    stack first: a test hung on an await shows only the event loop's select in the threads'."""
    result = yield
    fail = signal.getsignal(signal.SIGALRM) if hasattr(signal, "SIGALRM") else None
    if callable(fail):

        def dump_tasks_then_fail(signum: int, frame: Any) -> None:
            loop = asyncio._get_running_loop()
            tasks = asyncio.all_tasks(loop) if loop is not None else set()
            print(f"\n{item.nodeid} timed out with {len(tasks)} asyncio task(s) pending:", file=sys.stderr)
            for task in tasks:
                print(f"--- {task!r}", file=sys.stderr)
                task.print_stack(limit=12, file=sys.stderr)
            fail(signum, frame)

        signal.signal(signal.SIGALRM, dump_tasks_then_fail)
    return result
