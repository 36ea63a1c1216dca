"""kubus.kubeapi against a real kube-apiserver v1.28.4 + etcd (the ``kube_apiserver`` fixture):
finding the cluster as kubectl does, the client's requests and typed errors, and the Reflector
through watch ends, 410 Gone, outages, restarts and bookmarks."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from kube_support import KubeApiServer, KubeTest, TcpGate, mint_token, pod_manifest
from support import eventually

from kubus.kubeapi import (
    CONFIG_MAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    Backoff,
    EventType,
    KubeAPIError,
    KubeClient,
    KubeConfig,
    KubeConfigError,
    KubeUnreachable,
    PatchType,
    Reflector,
    Replaced,
    WatchEvent,
    load_config,
)

pytestmark = pytest.mark.kube

FAST = Backoff(initial=0.05, cap=0.2, jitter=0.0)


# -- finding the cluster -------------------------------------------------------------------------


def _kubeconfig(path: Path, **document: Any) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **document}))
    return path


def _cluster(name: str, server: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **fields}}


def _context(name: str, cluster: str, user: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "context": {"cluster": cluster, "user": user, **fields}}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_kubeconfig_token_relative_ca_and_context_namespace(tmp_path: Path, ca: trustme.CA) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    path = _kubeconfig(
        tmp_path / "config",
        clusters=[_cluster("c", "https://10.0.0.1:6443/", **{"certificate-authority": "ca.crt"})],
        users=[{"name": "u", "user": {"token": "s3cret"}}],
        contexts=[_context("ctx", "c", "u", namespace="team")],
        **{"current-context": "ctx"},
    )
    config = load_config(path)
    assert config.server == "https://10.0.0.1:6443"
    assert config.token == "s3cret" and config.bearer_token() == "s3cret"
    assert config.ca_data == ca.cert_pem.bytes()
    assert config.namespace == "team" and config.context == "ctx"
    assert str(path) in config.source and "s3cret" not in repr(config)


def test_kubeconfig_merged_from_KUBECONFIG_as_kubectl_merges(tmp_path: Path, ca: trustme.CA) -> None:
    cert = ca.issue_cert("kubus-user")
    first = _kubeconfig(
        tmp_path / "first",
        clusters=[_cluster("shared", "https://first:6443", **{"insecure-skip-tls-verify": True})],
        users=[{"name": "alice", "user": {"tokenFile": "alice.token"}}],
        contexts=[_context("a", "shared", "alice")],
        **{"current-context": "a"},
    )
    (tmp_path / "alice.token").write_text("token-of-alice\n")
    second = _kubeconfig(
        tmp_path / "second",
        clusters=[_cluster("shared", "https://second:6443"), _cluster("other", "https://other:6443")],
        users=[
            {
                "name": "bob",
                "user": {
                    "client-certificate-data": base64.b64encode(cert.cert_chain_pems[0].bytes()).decode(),
                    "client-key-data": base64.b64encode(cert.private_key_pem.bytes()).decode(),
                },
            }
        ],
        contexts=[_context("a", "other", "bob"), _context("b", "shared", "bob")],
        **{"current-context": "b"},
    )
    environ = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
    chosen = load_config(environ=environ)
    # The first file to set current-context wins, and the first to define a name.
    assert (chosen.context, chosen.server, chosen.insecure_skip_tls_verify) == ("a", "https://first:6443", True)
    assert chosen.token_file == str(tmp_path / "alice.token") and chosen.bearer_token() == "token-of-alice"
    bob = load_config(environ=environ, context="b")
    assert bob.server == "https://first:6443"  # cluster "shared" as the first file defines it
    assert bob.client_cert_data == cert.cert_chain_pems[0].bytes()
    assert bob.ssl_context() is not None  # the key pair loads


def test_default_kubeconfig_then_in_cluster(tmp_path: Path, ca: trustme.CA) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(
        home / ".kube" / "config",
        clusters=[_cluster("c", "http://127.0.0.1:8080")],
        contexts=[_context("ctx", "c", "")],
        **{"current-context": "ctx"},
    )
    assert load_config(environ={}, home=home).server == "http://127.0.0.1:8080"

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    ca.cert_pem.write_to_path(str(account / "ca.crt"))
    (account / "namespace").write_text("kubus-system")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    for config in (
        load_config(in_cluster=True, environ=environ, service_account_dir=account),
        load_config(environ=environ, home=tmp_path / "nobody", service_account_dir=account),  # nothing else found
    ):
        assert config.server == "https://10.96.0.1:443" and config.namespace == "kubus-system"
        assert config.bearer_token() == "pod-token" and config.ca_data == ca.cert_pem.bytes()
    with pytest.raises(KubeConfigError, match="no kubeconfig"):
        load_config(environ=environ, home=tmp_path / "nobody", service_account_dir=account, in_cluster=False)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing file", "no such file: pass the path of an existing kubeconfig"),
        ("no current context", "no current-context is set: run `kubectl config use-context NAME`"),
        ("unknown context", "context 'nope' is not defined (contexts: ctx)"),
        ("unreadable certificate", "client-certificate {dir}/gone.crt: cannot read: No such file or directory"),
        ("exec plugin", "uses an exec credential plugin, which kubus does not support"),
        ("undefined cluster", "the context's cluster 'elsewhere' is not defined under clusters"),
        ("bad base64", "certificate-authority-data is not valid base64"),
        ("not yaml", "not valid YAML at line 2 (expected ',' or ']', but got '<stream end>'): fix the file"),
        (
            "in-cluster without env",
            "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set",
        ),
        ("in-cluster without token", "serviceaccount/token: cannot read: No such file or directory"),
    ],
)
def test_bad_config_is_one_line_naming_the_file(tmp_path: Path, case: str, expected: str) -> None:
    path = tmp_path / "config"
    cluster = _cluster("c", "https://10.0.0.1:6443")
    user: dict[str, Any] = {"token": "t"}
    context = _context("ctx", "c", "u")
    current = {"current-context": "ctx"}
    kwargs: dict[str, Any] = {}
    if case == "no current context":
        current = {}
    elif case == "unknown context":
        kwargs["context"] = "nope"
    elif case == "unreadable certificate":
        user = {"client-certificate": "gone.crt", "client-key": "gone.key"}
    elif case == "exec plugin":
        user = {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}
    elif case == "undefined cluster":
        context = _context("ctx", "elsewhere", "u")
    elif case == "bad base64":
        cluster = _cluster("c", "https://10.0.0.1:6443", **{"certificate-authority-data": "%%%"})
    elif case.startswith("in-cluster"):
        kwargs.update(in_cluster=True, service_account_dir=tmp_path / "serviceaccount")
        kwargs["environ"] = (
            {} if case.endswith("env") else {"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}
        )
    if case != "missing file":
        _kubeconfig(path, clusters=[cluster], users=[{"name": "u", "user": user}], contexts=[context], **current)
    if case == "not yaml":
        path.write_text("clusters: [unclosed\n")
    with pytest.raises(KubeConfigError) as raised:
        load_config(path, **kwargs)
    message = str(raised.value)
    assert "\n" not in message
    assert expected.format(dir=tmp_path) in message
    if not case.startswith("in-cluster"):
        assert str(path) in message


# -- the client ------------------------------------------------------------------------------------


@pytest.fixture(params=["aiohttp", "lanes"])
async def writer(request: pytest.FixtureRequest, kube: KubeTest) -> AsyncIterator[KubeClient]:
    """The test's client, its writes through aiohttp, then through the pipelined lanes (the
    binder's and watcher's): the same tests hold for both."""
    if request.param == "aiohttp":
        yield kube.client
        return
    async with KubeClient(kube.server.config(), write_lanes=4) as client:
        yield client


async def test_crud_paging_patches_and_preconditions(kube: KubeTest, writer: KubeClient) -> None:
    client, ns = writer, kube.namespace
    for i in range(7):
        await client.create(PODS, pod_manifest(f"p{i}"), namespace=ns)
    pages = [page async for page in client.pages(PODS, namespace=ns, limit=3)]
    assert [len(page["items"]) for page in pages] == [3, 3, 1]
    listed = await client.list(PODS, namespace=ns, limit=3)
    assert sorted(pod["metadata"]["name"] for pod in listed.items) == [f"p{i}" for i in range(7)]
    assert int(listed.resource_version) > 0
    assert len((await client.list(PODS, namespace=ns, label_selector="app=kubus-test,nope=1")).items) == 0

    pod = await client.patch(PODS, "p0", {"metadata": {"labels": {"tier": "a"}}}, namespace=ns)
    pod = await client.patch(
        PODS, "p0", {"metadata": {"annotations": {"x": "1"}}}, namespace=ns, patch_type=PatchType.MERGE
    )
    pod = await client.patch(
        PODS,
        "p0",
        [{"op": "add", "path": "/metadata/labels/json", "value": "yes"}],
        namespace=ns,
        patch_type=PatchType.JSON,
    )
    assert pod["metadata"]["labels"] == {"app": "kubus-test", "tier": "a", "json": "yes"}
    assert pod["metadata"]["annotations"] == {"x": "1"}
    # A write whose answer the caller does not read: made all the same, its answer not parsed,
    # its refusal an error as ever.
    assert await client.patch_status(PODS, "p1", {"status": {"nominatedNodeName": "n9"}}, namespace=ns,
                                     answer=False) == {}  # fmt: skip
    assert (await client.get(PODS, "p1", namespace=ns))["status"]["nominatedNodeName"] == "n9"
    with pytest.raises(KubeAPIError) as refused:
        await client.patch(PODS, "nope", {"metadata": {"labels": {"a": "b"}}}, namespace=ns, answer=False)
    assert refused.value.not_found
    assert await client.delete(PODS, "p6", namespace=ns, grace_period_seconds=0, answer=False) == {}
    with pytest.raises(KubeAPIError) as deleted:
        await client.get(PODS, "p6", namespace=ns)
    assert deleted.value.not_found

    stale = dict(pod, metadata={**pod["metadata"], "resourceVersion": listed.resource_version})
    with pytest.raises(KubeAPIError) as conflict:
        await client.update(PODS, stale, namespace=ns)
    assert conflict.value.conflict and conflict.value.reason == "Conflict"
    with pytest.raises(KubeAPIError) as exists:
        await client.create(PODS, pod_manifest("p1"), namespace=ns)
    assert exists.value.already_exists
    assert str(exists.value).startswith(f"create pods in namespace {ns}: AlreadyExists (409): ")

    with pytest.raises(KubeAPIError) as wrong_uid:
        await client.delete(PODS, "p0", namespace=ns, uid="00000000-0000-0000-0000-000000000000")
    assert (
        wrong_uid.value.conflict
        and "the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match"
        in wrong_uid.value.message
    )
    await client.delete(PODS, "p0", namespace=ns, uid=pod["metadata"]["uid"], grace_period_seconds=0)
    with pytest.raises(KubeAPIError) as missing:
        await client.get(PODS, "p0", namespace=ns)
    assert missing.value.not_found
    assert str(missing.value) == f'get pods {ns}/p0: NotFound (404): pods "p0" not found'


async def test_binding_status_and_events(kube: KubeTest, writer: KubeClient) -> None:
    client, ns = writer, kube.namespace
    first, second = (node["metadata"]["name"] for node in await kube.make_nodes(2, cpu="8"))
    node = await client.get(NODES, first)
    assert node["status"]["conditions"][0]["type"] == "Ready" and not node["spec"].get("taints")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == first
    pod = await client.create(PODS, pod_manifest("web"), namespace=ns)
    uid = pod["metadata"]["uid"]

    with pytest.raises(KubeAPIError) as other_uid:
        await client.bind(ns, "web", first, uid="00000000-0000-0000-0000-000000000000")
    assert other_uid.value.conflict
    await client.bind(ns, "web", first, uid=uid)
    assert (await client.get(PODS, "web", namespace=ns))["spec"]["nodeName"] == first
    with pytest.raises(KubeAPIError) as bound:
        await client.bind(ns, "web", second, uid=uid)
    assert bound.value.conflict and bound.value.resource == "pods/binding"
    assert f'pod web is already assigned to node "{first}"' in str(bound.value)

    pending = await client.create(PODS, pod_manifest("big", cpu="64"), namespace=ns)
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient cpu.",
    }
    patched = await client.patch_status(
        PODS, "big", {"status": {"conditions": [condition], "nominatedNodeName": second}}, namespace=ns
    )
    assert patched["status"]["nominatedNodeName"] == second
    assert patched["status"]["conditions"][0]["reason"] == "Unschedulable"

    event = await client.create(
        EVENTS,
        {
            "metadata": {"generateName": "big-"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "kubus.io/scheduler",
            "reportingInstance": "kubus-cycle-0",
            "action": "Scheduling",
            "reason": "FailedScheduling",
            "note": condition["message"],
            "type": "Warning",
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "big",
                "namespace": ns,
                "uid": pending["metadata"]["uid"],
            },
        },
        namespace=ns,
    )
    series = {"series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:10.000000Z"}}
    patched_event = await client.patch(
        EVENTS, event["metadata"]["name"], series, namespace=ns, patch_type=PatchType.MERGE
    )
    assert patched_event["series"]["count"] == 2 and patched_event["regarding"]["name"] == "big"


async def test_lanes_carry_large_answers_and_survive_an_apiserver_restart(
    kube: KubeTest, kube_apiserver: KubeApiServer
) -> None:
    """Through the lanes: an answer of 300 KiB (whatever its framing), many writes at once on
    few connections, and a write after the apiserver restarted under the idle lanes."""
    ns = kube.namespace
    async with KubeClient(kube.server.config(), write_lanes=2) as client:
        big = {"metadata": {"name": "big"}, "data": {"blob": "x" * 300_000}}
        created = await client.create(CONFIG_MAPS, big, namespace=ns)
        assert len(created["data"]["blob"]) == 300_000
        names = [f"cm-{i}" for i in range(200)]
        await asyncio.gather(*(client.create(CONFIG_MAPS, {"metadata": {"name": n}}, namespace=ns) for n in names))
        listed = await kube.client.list(CONFIG_MAPS, namespace=ns)
        assert {c["metadata"]["name"] for c in listed.items} >= set(names)
        await asyncio.to_thread(kube_apiserver.restart_apiserver)
        await client.create(CONFIG_MAPS, {"metadata": {"name": "after"}}, namespace=ns)
        with pytest.raises(KubeAPIError) as exists:
            await client.create(CONFIG_MAPS, {"metadata": {"name": "after"}}, namespace=ns)
        assert exists.value.already_exists


async def test_refusals_are_typed_errors_naming_what_is_missing(kube: KubeTest) -> None:
    ns = kube.namespace
    await kube.client.create(PODS, pod_manifest("web"), namespace=ns)
    token = await mint_token(kube.client, namespace=ns, name="nobody", cluster_role=None)
    async with KubeClient(kube.config(token=token)) as nobody:
        with pytest.raises(KubeAPIError) as forbidden:
            await nobody.bind(ns, "web", "node-0")
        error = forbidden.value
        assert error.forbidden and error.missing_permission == "create pods/binding"
        assert f"create pods/binding {ns}/web: Forbidden (403): missing RBAC permission: create pods/binding: " in str(
            error
        )
        assert f'User "system:serviceaccount:{ns}:nobody" cannot create resource "pods/binding"' in str(error)

    # kube-scheduler's own bootstrap role (no controller-manager here fills the aggregated ones).
    scheduler_token = await mint_token(kube.client, namespace=ns, name="sched", cluster_role="system:kube-scheduler")
    async with KubeClient(kube.config(token=scheduler_token)) as scheduler:

        async def can_read() -> None:
            try:
                await scheduler.get(PODS, "web", namespace=ns)
            except KubeAPIError as error:  # until the apiserver's RBAC cache has the binding
                raise AssertionError(str(error)) from None

        await eventually(can_read)
        with pytest.raises(KubeAPIError, match="missing RBAC permission: create nodes"):
            await scheduler.create(NODES, {"metadata": {"name": f"{ns}-sneaky"}})

    async with KubeClient(kube.config(token="not-a-token")) as stranger:
        with pytest.raises(KubeAPIError) as unauthorized:
            await stranger.get(PODS, "web", namespace=ns)
        assert unauthorized.value.unauthorized
        assert "Unauthorized (401): token expired or invalid" in str(unauthorized.value)


async def test_unreachable_and_untrusted_servers_name_the_url(kube: KubeTest, ca: trustme.CA) -> None:
    closed = kube.config(server="https://127.0.0.1:1")
    async with KubeClient(closed) as client:
        with pytest.raises(KubeUnreachable, match=r"cannot reach the Kubernetes API at https://127\.0\.0\.1:1: "):
            await client.get(NODES, "x")
    untrusted = KubeConfig(server=kube.server.url, source="test", ca_data=ca.cert_pem.bytes(), token="t")
    async with KubeClient(untrusted) as client:
        with pytest.raises(KubeUnreachable) as raised:
            await client.get(NODES, "x")
    assert kube.server.url in str(raised.value) and "certificate" in str(raised.value)


async def test_client_side_rate_limit(kube: KubeTest) -> None:
    async with kube.server.client(qps=20, burst=2) as client:
        start = time.monotonic()
        for _ in range(6):
            with contextlib.suppress(KubeAPIError):
                await client.get(PODS, "absent", namespace=kube.namespace)
        assert time.monotonic() - start >= (6 - 2) / 20 * 0.9
    async with kube.server.client() as closing:
        await closing.close()
        await closing.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            await closing.get(NODES, "x")


# -- the reflector ---------------------------------------------------------------------------------


class Mirror:
    """Consumes a Reflector as a caller would: the objects by name, and a log of what came."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector
        self.objects: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []
        self.task = asyncio.create_task(self._consume(), name="mirror")

    async def _consume(self) -> None:
        async with self.reflector:
            async for event in self.reflector:
                match event:
                    case Replaced(objects=objects, initial=initial):
                        self.objects = {o["metadata"]["name"]: o for o in objects}
                        self.log.append(("INITIAL" if initial else "RELISTED", ",".join(sorted(self.objects))))
                    case WatchEvent(type=EventType.BOOKMARK):
                        self.log.append(("BOOKMARK", event.resource_version))
                    case WatchEvent(type=EventType.DELETED, object=obj):
                        self.objects.pop(obj["metadata"]["name"], None)
                        self.log.append(("DELETED", obj["metadata"]["name"]))
                    case WatchEvent(type=kind, object=obj):
                        self.objects[obj["metadata"]["name"]] = obj
                        self.log.append((kind.value, obj["metadata"]["name"]))

    def changes(self) -> list[tuple[str, str]]:
        return [entry for entry in self.log if entry[0] != "BOOKMARK"]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


async def test_reflector_lists_then_watches_in_order(kube: KubeTest) -> None:
    client, ns = kube.client, kube.namespace
    await client.create(PODS, pod_manifest("before"), namespace=ns)
    mirror = Mirror(Reflector(client, PODS, namespace=ns, backoff=FAST))
    await asyncio.wait_for(mirror.reflector.synced(), 10)
    assert mirror.log == [("INITIAL", "before")]
    await client.create(PODS, pod_manifest("web"), namespace=ns)
    last = await client.patch(PODS, "web", {"metadata": {"labels": {"v": "2"}}}, namespace=ns)
    await client.delete(PODS, "before", namespace=ns, grace_period_seconds=0)

    def caught_up() -> None:
        # A pod's deletion is two writes: its deletionTimestamp, then its removal.
        assert mirror.changes() == [
            ("INITIAL", "before"),
            ("ADDED", "web"),
            ("MODIFIED", "web"),
            ("MODIFIED", "before"),
            ("DELETED", "before"),
        ]

    await eventually(caught_up)
    assert _labels(mirror.objects["web"])["v"] == "2" and list(mirror.objects) == ["web"]
    assert int(mirror.reflector.resource_version) > int(last["metadata"]["resourceVersion"])
    await mirror.stop()
    assert mirror.task.cancelled() and mirror.reflector.relists == 0


async def test_reflector_first_list_is_served_from_the_watch_cache(kube: KubeTest) -> None:
    """The first list reads the apiserver's watch cache (resourceVersion 0, as client-go's
    informers), not etcd: a scheduler starting against 100,000 pods costs etcd nothing."""
    client, ns = kube.client, kube.namespace
    await client.create(PODS, pod_manifest("cached"), namespace=ns)
    served = kube.server.metric_sum("apiserver_cache_list_total", resource_prefix="/pods")
    mirror = Mirror(Reflector(client, PODS, namespace=ns, backoff=FAST))
    await asyncio.wait_for(mirror.reflector.synced(), 10)
    assert mirror.log == [("INITIAL", "cached")]
    assert kube.server.metric_sum("apiserver_cache_list_total", resource_prefix="/pods") == served + 1
    await mirror.stop()


async def test_reflector_resumes_from_its_resource_version_after_the_connection_ends(
    kube: KubeTest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubus.kubeapi.reflector")
    client, ns = kube.client, kube.namespace
    async with TcpGate(("127.0.0.1", kube.server.port)) as gate, KubeClient(kube.config(server=gate.url)) as cut_off:
        mirror = Mirror(Reflector(cut_off, PODS, namespace=ns, backoff=FAST))
        await asyncio.wait_for(mirror.reflector.synced(), 10)
        await gate.close()  # the watch connection ends; new ones are refused
        await client.create(PODS, pod_manifest("while-away"), namespace=ns)
        await client.patch(PODS, "while-away", {"metadata": {"labels": {"v": "2"}}}, namespace=ns)
        await eventually(lambda: _assert("kube reflector failing" in caplog.text))
        await gate.open()

        def caught_up() -> None:
            assert mirror.changes() == [("INITIAL", ""), ("ADDED", "while-away"), ("MODIFIED", "while-away")]

        await eventually(caught_up)
        assert mirror.reflector.relists == 0  # resumed: no list again
        messages = [record.getMessage() for record in caplog.records]
        assert sum("kube reflector failing" in m for m in messages) == 1
        assert sum("kube reflector recovered" in m for m in messages) == 1
        await mirror.stop()


async def test_reflector_relists_on_410_gone_and_reports_the_reconciled_state(
    kube: KubeTest, caplog: pytest.LogCaptureFixture
) -> None:
    # ConfigMaps bypass the watch cache (kube_support's --watch-cache-sizes=configmaps#0): a
    # watch from a compacted revision is answered 410 Gone by etcd, every time.
    caplog.set_level(logging.INFO, logger="kubus.kubeapi.reflector")
    client, ns = kube.client, kube.namespace
    for name in ("keep", "drop"):
        await client.create(CONFIG_MAPS, {"metadata": {"name": name}, "data": {"v": "1"}}, namespace=ns)
    async with TcpGate(("127.0.0.1", kube.server.port)) as gate, KubeClient(kube.config(server=gate.url)) as cut_off:
        mirror = Mirror(Reflector(cut_off, CONFIG_MAPS, namespace=ns, backoff=FAST))
        await asyncio.wait_for(mirror.reflector.synced(), 10)
        held = mirror.reflector.resource_version
        await gate.close()
        await client.delete(CONFIG_MAPS, "drop", namespace=ns)
        await client.create(CONFIG_MAPS, {"metadata": {"name": "new"}}, namespace=ns)
        await client.patch(CONFIG_MAPS, "keep", {"data": {"v": "2"}}, namespace=ns)
        assert kube.server.compact_etcd() > int(held)
        with pytest.raises(KubeAPIError) as gone:  # what the reflector will meet
            async with client.watch(CONFIG_MAPS, namespace=ns, resource_version=held) as events:
                async for _ in events:
                    pass
        assert gone.value.gone
        await gate.open()

        def reconciled() -> None:
            assert mirror.changes() == [("INITIAL", "drop,keep"), ("RELISTED", "keep,new")]

        await eventually(reconciled)
        assert mirror.objects["keep"]["data"] == {"v": "2"} and mirror.reflector.relists == 1
        assert "kube reflector relisting" in caplog.text
        await client.create(CONFIG_MAPS, {"metadata": {"name": "after"}}, namespace=ns)
        await eventually(lambda: _assert(mirror.changes()[-1] == ("ADDED", "after")))
        await mirror.stop()


async def test_reflector_survives_an_apiserver_restart(
    kube: KubeTest, kube_apiserver: KubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubus.kubeapi.reflector")
    client, ns = kube.client, kube.namespace
    await client.create(PODS, pod_manifest("before"), namespace=ns)
    async with kube_apiserver.client() as watching:
        mirror = Mirror(Reflector(watching, PODS, namespace=ns, backoff=FAST))
        await asyncio.wait_for(mirror.reflector.synced(), 10)
        await asyncio.to_thread(kube_apiserver.restart_apiserver)
        async with kube_apiserver.client() as fresh:
            await fresh.create(PODS, pod_manifest("after"), namespace=ns)
            await fresh.delete(PODS, "before", namespace=ns, grace_period_seconds=0)
        await eventually(lambda: _assert(sorted(mirror.objects) == ["after"]), timeout=30)
        assert not mirror.task.done()
        # Refused while it was down, said once; whether it resumed or relisted is the new
        # watch cache's call (a revision older than its first list is 410 Gone).
        messages = [record.getMessage() for record in caplog.records]
        assert sum("kube reflector failing" in m for m in messages) == 1
        assert sum("kube reflector recovered" in m for m in messages) == 1
        await mirror.stop()


async def test_bookmarks_advance_the_resource_version(kube: KubeTest) -> None:
    client, ns = kube.client, kube.namespace
    # The apiserver sends a bookmark 2 s before a watch's timeout, late by up to two ticks of its
    # one-second bookmark timer, and none to a watch of 2 s or less: watches of 5-10 s.
    mirror = Mirror(Reflector(client, PODS, namespace=ns, watch_timeout=5, backoff=FAST))
    await asyncio.wait_for(mirror.reflector.synced(), 10)
    elsewhere = f"{ns}-other"
    await client.create(NAMESPACES, {"metadata": {"name": elsewhere}})
    try:
        other = await client.create(PODS, pod_manifest("elsewhere"), namespace=elsewhere)
        moved = other["metadata"]["resourceVersion"]

        def bookmarked() -> None:
            assert any(kind == "BOOKMARK" and int(version) >= int(moved) for kind, version in mirror.log)

        await eventually(bookmarked, timeout=15)
        assert int(mirror.reflector.resource_version) >= int(moved) and mirror.changes() == [("INITIAL", "")]
    finally:
        await mirror.stop()
        await client.delete(NAMESPACES, elsewhere)


def _assert(condition: bool) -> None:
    assert condition
