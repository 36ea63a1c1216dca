"""A real etcd + kube-apiserver (v1.28.4, from ../shared/kube) for tests and benches, and the
builders cluster-mode tests need: Nodes made as kwok and kube's scheduler_perf make them, a token
of a ServiceAccount bound to a ClusterRole, and a TCP gate to cut a client off the apiserver.

Where the binaries come from, in this order:

1. ``KUBUS_KUBE_BIN_DIR``: a folder holding the unpacked ``etcd`` and ``kube-apiserver``;
2. ``KUBUS_KUBE_DIR``: a folder holding ``etcd.xz``, ``kube-apiserver.xz`` and ``unpack.py`` (like
   ../shared/kube); its unpack.py writes the binaries into <repo>/.kube-bin/ (checked by sha256,
   skipped when already there);
3. <repo>/../shared/kube, as in 2.

None there: `KubeUnavailable`, whose message says how to point the tests at the binaries.

The apiserver is started as ../shared/kube/start-apiserver.sh starts it (static admin token in
system:masters, RBAC, a self-signed serving certificate, one service-account key), and further:
- ``--disable-admission-plugins=ServiceAccount,TaintNodesByCondition``: no controller-manager
  makes "default" ServiceAccounts, and new Nodes are not tainted not-ready;
- ``--watch-cache-sizes=configmaps#0``: ConfigMaps are watched straight from etcd, so a watch
  from a revision that `KubeApiServer.compact_etcd` compacted answers 410 Gone, every time (the
  watch cache of the other resources serves any revision it still holds, and grows its window
  while events are fresh, so it gives no reliable 410);
- ``--etcd-compaction-interval=0``: etcd is compacted only when a test says so;
- ``--shutdown-watch-termination-grace-period=1s``: a stop (SIGTERM) with watches open takes a
  second, not the minute it otherwise waits for them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from kubus.kubeapi import (
    CLUSTER_ROLE_BINDINGS,
    NAMESPACES,
    NODES,
    SERVICE_ACCOUNTS,
    KubeAPIError,
    KubeClient,
    KubeConfig,
    PatchType,
    Resource,
    load_config,
)

__all__ = [
    "HOW_TO_POINT",
    "KubeApiServer",
    "KubeTest",
    "KubeUnavailable",
    "TcpGate",
    "ensure_namespace",
    "free_port",
    "install_pod_group_crd",
    "kube_binaries",
    "make_nodes",
    "mint_token",
    "node_manifest",
    "pod_manifest",
]

REPO = Path(__file__).resolve().parents[1]
BIN_CACHE = REPO / ".kube-bin"
KUBE_DIR_ENV = "KUBUS_KUBE_DIR"
KUBE_BIN_DIR_ENV = "KUBUS_KUBE_BIN_DIR"
HOW_TO_POINT = (
    f"set {KUBE_BIN_DIR_ENV} to a folder holding the unpacked etcd and kube-apiserver binaries, or "
    f"{KUBE_DIR_ENV} to a folder holding etcd.xz, kube-apiserver.xz and unpack.py (like ../shared/kube, "
    f"the default: {REPO.parent / 'shared' / 'kube'})"
)
BINARIES = ("etcd", "kube-apiserver")
POD_GROUP_CRD = REPO / "deploy" / "helm" / "kubus" / "crds" / "podgroups.yaml"
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")


class KubeUnavailable(Exception):
    """No kube-apiserver to run here; str() says why and how to point the tests at one."""


def kube_binaries() -> Path:
    """The folder holding executable ``etcd`` and ``kube-apiserver`` (see the module docstring).

    Unpacks them into <repo>/.kube-bin/ when needed (a second or two, once). Raises
    `KubeUnavailable` when no folder has them or unpacking fails.
    """
    bin_dir = os.environ.get(KUBE_BIN_DIR_ENV)
    if bin_dir:
        missing = [name for name in BINARIES if not os.access(Path(bin_dir, name), os.X_OK)]
        if missing:
            raise KubeUnavailable(
                f"{KUBE_BIN_DIR_ENV}={bin_dir} has no executable {', '.join(missing)}; {HOW_TO_POINT}"
            )
        return Path(bin_dir)
    kube_dir = Path(os.environ.get(KUBE_DIR_ENV) or REPO.parent / "shared" / "kube")
    unpack = kube_dir / "unpack.py"
    if not unpack.is_file():
        raise KubeUnavailable(f"no kube-apiserver binaries: {unpack} does not exist; {HOW_TO_POINT}")
    done = subprocess.run([sys.executable, str(unpack), str(BIN_CACHE)], capture_output=True, text=True)
    if done.returncode != 0:
        raise KubeUnavailable(f"{unpack} {BIN_CACHE} failed: {done.stderr.strip()}; {HOW_TO_POINT}")
    return BIN_CACHE


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_port_pair() -> int:
    """A port P with P+1 free too (etcd's client and peer ports)."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports on 127.0.0.1")


_live: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_orphans() -> None:
    for process in list(_live):
        with contextlib.suppress(OSError):
            process.kill()


def _stop(process: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    if process is None:
        return
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _live.discard(process)


class KubeApiServer:
    """etcd and kube-apiserver on free loopback ports, all state under ``data_dir``.

    ``start()`` returns once /readyz answers (about 3 s); ``stop()`` is idempotent. The serving
    certificate, the token and the ports outlive ``restart_apiserver()``, so clients and
    kubeconfigs stay valid across it.
    """

    def __init__(self, bin_dir: Path, data_dir: Path, *, extra_flags: Sequence[str] = ()) -> None:
        self.bin_dir = bin_dir
        self.data_dir = data_dir
        self.extra_flags = tuple(extra_flags)
        self.etcd_port = _free_port_pair()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.token = secrets.token_hex(16)
        self.ca_file = data_dir / "certs" / "apiserver.crt"
        self.kubeconfig = data_dir / "admin.kubeconfig"
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start etcd, then the apiserver; write the admin kubeconfig. Raises RuntimeError with
        the last log lines when either does not come up within ``timeout`` seconds."""
        for folder in ("etcd", "certs", "logs"):
            (self.data_dir / folder).mkdir(parents=True, exist_ok=True)
        (self.data_dir / "token.csv").write_text(f"{self.token},admin,admin-uid,system:masters\n")
        key = self.data_dir / "sa.key"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        self._start_etcd(timeout)
        self.start_apiserver(timeout)
        self.write_kubeconfig(self.kubeconfig, token=self.token)

    def _start_etcd(self, timeout: float) -> None:
        peer = f"http://127.0.0.1:{self.etcd_port + 1}"
        self._etcd = self._spawn(
            "etcd",
            [
                "--name=kube-peer",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=kube-peer={peer}",
                "--log-level=warn",
                "--logger=zap",
            ],
        )
        self._wait(self._etcd, "etcd", lambda: _http_ok(f"{self.etcd_url}/health"), timeout)

    def start_apiserver(self, timeout: float = 60.0) -> None:
        """Start the apiserver (again) on the same port, certificate and token."""
        self._apiserver = self._spawn(
            "kube-apiserver",
            [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--etcd-servers={self.etcd_url}",
                f"--cert-dir={self.data_dir / 'certs'}",
                f"--token-auth-file={self.data_dir / 'token.csv'}",
                "--anonymous-auth=false",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.data_dir / 'sa.key'}",
                f"--service-account-signing-key-file={self.data_dir / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                "--watch-cache-sizes=configmaps#0",
                "--etcd-compaction-interval=0",
                # Open watches would hold a SIGTERM's graceful shutdown for its full minute.
                "--shutdown-watch-termination-grace-period=1s",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self.extra_flags,
            ],
        )
        self._wait(self._apiserver, "kube-apiserver", self.ready, timeout)

    def stop_apiserver(self) -> None:
        """Stop the apiserver (SIGTERM, as a rolling restart does); etcd keeps running."""
        _stop(self._apiserver)
        self._apiserver = None

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop the apiserver and start it again; returns once it is ready."""
        self.stop_apiserver()
        self.start_apiserver(timeout)

    def stop(self) -> None:
        """Stop the apiserver, then etcd. Idempotent."""
        self.stop_apiserver()
        _stop(self._etcd)
        self._etcd = None

    def __enter__(self) -> KubeApiServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what clients need -----------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, *, token: str, user: str = "admin", namespace: str | None = None) -> Path:
        """A kubeconfig at ``path`` naming this server, its CA file and ``token``."""
        context: dict[str, Any] = {"cluster": "kubus-test", "user": user}
        if namespace:
            context["namespace"] = namespace
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kubus-test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "kubus-test", "context": context}],
            "current-context": "kubus-test",
        }
        path.write_text(json.dumps(document, indent=2))  # JSON is YAML
        return path

    def config(self) -> KubeConfig:
        """The admin's `KubeConfig`, loaded from the admin kubeconfig as a user's would be."""
        return load_config(str(self.kubeconfig))

    def client(self, **options: Any) -> KubeClient:
        """A `KubeClient` of the admin (system:masters); ``options`` go to KubeClient."""
        return KubeClient(self.config(), **options)

    def metrics(self) -> str:
        """The apiserver's /metrics now (Prometheus text), read as the admin."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return str(response.read().decode())

    def metric_sum(self, name: str, **labels: str) -> float:
        """The sum of metric ``name`` over its series whose labels include ``labels``."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{"):
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def pids(self) -> dict[str, int]:
        """name -> pid of the running etcd and kube-apiserver (for their CPU, in benchmarks)."""
        running = (("etcd", self._etcd), ("kube-apiserver", self._apiserver))
        return {name: process.pid for name, process in running if process is not None and process.poll() is None}

    def ready(self) -> bool:
        """Whether /readyz answers 200 now."""
        if not self.ca_file.exists():
            return False
        context = ssl.create_default_context(cafile=str(self.ca_file))
        return _http_ok(f"{self.url}/readyz", context=context, token=self.token)

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision (physically); return that revision. A watch
        of ConfigMaps from an older resourceVersion then answers 410 Gone."""
        header = _etcd_post(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="})["header"]
        revision = int(header["revision"])
        _etcd_post(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def log_tail(self, name: str = "kube-apiserver", lines: int = 20) -> str:
        """The last ``lines`` lines of ``name``'s log."""
        path = self.data_dir / "logs" / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _spawn(self, name: str, flags: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.data_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it)
        try:
            process = subprocess.Popen([str(self.bin_dir / name), *flags], stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        _live.add(process)
        return process

    def _wait(self, process: subprocess.Popen[bytes], name: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}); last log lines:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout:.0f} s; last log lines:\n{self.log_tail(name)}")
            time.sleep(0.05)


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _etcd_post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


# -- objects ---------------------------------------------------------------------------------------


def node_manifest(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    zone: str = "zone-a",
    labels: dict[str, str] | None = None,
    extra_resources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as kwok and scheduler_perf write one: capacity = allocatable, the hostname, zone
    and region labels, and a fake kwok provider. Its Ready condition is set by `make_nodes`
    through nodes/status, as a kubelet would."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra_resources or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "region-1",
                "type": "kwok",
                **(labels or {}),
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"providerID": f"kwok://{name}"},
        "status": {"capacity": resources, "allocatable": resources},
    }


def _ready_status() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {"status": {"conditions": [condition], "phase": "Running"}}


async def make_nodes(
    client: KubeClient,
    names: Iterable[str],
    *,
    zones: Sequence[str] = ("zone-a", "zone-b", "zone-c"),
    concurrency: int = 32,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Create one Node per name (`node_manifest` with ``fields``, zones in turn) and set each
    Ready through nodes/status; return the Nodes as the apiserver answered the status patch.
    Not idempotent: an existing name raises KubeAPIError (409)."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(index: int, name: str) -> dict[str, Any]:
        async with semaphore:
            await client.create(NODES, node_manifest(name, zone=zones[index % len(zones)], **fields))
            return await client.patch(NODES, name, _ready_status(), subresource="status", patch_type=PatchType.MERGE)

    return list(await asyncio.gather(*(one(i, name) for i, name in enumerate(names))))


def pod_manifest(
    name: str, *, cpu: str = "100m", memory: str = "128Mi", scheduler: str = "kubus", **spec: Any
) -> dict[str, Any]:
    """A pending Pod of one container (pause image) requesting ``cpu`` and ``memory``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kubus-test"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            **spec,
        },
    }


async def mint_token(client: KubeClient, *, namespace: str, name: str, cluster_role: str | None) -> str:
    """A bearer token (TokenRequest, one hour) of ServiceAccount ``namespace/name``, created when
    missing, bound to ``cluster_role`` by a ClusterRoleBinding ``<namespace>-<name>`` (None: no
    binding, a user RBAC refuses everything). The namespace must exist. A new binding takes effect
    a moment later (the apiserver's RBAC cache): wait for its first allowed request with
    ``eventually``."""
    with contextlib.suppress(KubeAPIError):
        await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace=namespace)
    if cluster_role is not None:
        binding = {
            "metadata": {"name": f"{namespace}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        try:
            await client.create(CLUSTER_ROLE_BINDINGS, binding)
        except KubeAPIError as error:
            if not error.conflict:
                raise
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await client.create(SERVICE_ACCOUNTS, request, namespace=namespace, name=name, subresource="token")
    return str(answer["status"]["token"])


async def ensure_namespace(client: KubeClient, name: str) -> None:
    """Create namespace ``name`` unless it exists."""
    try:
        await client.create(NAMESPACES, {"metadata": {"name": name}})
    except KubeAPIError as error:
        if not error.conflict:
            raise


# -- cutting a client off --------------------------------------------------------------------------


async def install_pod_group_crd(client: KubeClient, *, timeout: float = 30.0) -> None:
    """The chart's PodGroup CRD, once per apiserver, served before this returns, so that the
    watcher's check lists PodGroups rather than finding them not served."""
    crd = yaml.safe_load(POD_GROUP_CRD.read_text())
    with contextlib.suppress(KubeAPIError):  # made by an earlier test
        await client.create(CRDS, crd)
    deadline = time.monotonic() + timeout
    while True:
        got = await client.get(CRDS, crd["metadata"]["name"])
        conditions = (got.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the PodGroup CRD is not served after {timeout:.0f}s: {got.get('status')}")
        await asyncio.sleep(0.2)


class TcpGate:
    """A TCP forwarder on 127.0.0.1 in front of ``target`` (host, port), in this event loop.

    ``close()`` drops every connection through it and refuses new ones until ``open()``: the
    client behind it sees the apiserver go away while the apiserver itself, and clients that do
    not go through the gate, carry on. It forwards bytes and nothing else (TLS passes through).
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def open(self) -> None:
        """Accept connections (again) on the same port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        """Stop accepting and cut every connection through the gate. Idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def __aenter__(self) -> TcpGate:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        self.connections += 1
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await asyncio.open_connection(*self.target)
            await asyncio.gather(_pump(reader, upstream), _pump(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._pipes.discard(task)
            for w in (writer, upstream):
                if w is not None:
                    w.transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1 << 16):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


# -- one test's share of the session's apiserver ---------------------------------------------------


class KubeTest:
    """What the ``kube`` fixture gives a test: its own namespace (created, deleted after), an admin
    `KubeClient`, and Nodes made through it (cluster-scoped: named after the namespace, deleted
    after). Use as ``async with KubeTest(server, name)``.

    No controller-manager runs, so a deleted namespace stays Terminating with its objects in it:
    watch and list within ``namespace``, never across all namespaces.
    """

    def __init__(self, server: KubeApiServer, test_name: str) -> None:
        self.server = server
        slug = "".join(c if c.isalnum() else "-" for c in test_name.lower()).strip("-")[:40].strip("-")
        self.namespace = f"{slug}-{secrets.token_hex(3)}"
        self.client = server.client()
        self.nodes: list[str] = []

    async def __aenter__(self) -> KubeTest:
        await self.client.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        return self

    async def __aexit__(self, *exc: object) -> None:
        # A fresh client: the test may have restarted the apiserver under the old one's connections.
        async with self.server.client() as kube:
            for name in self.nodes:
                with contextlib.suppress(KubeAPIError):
                    await kube.delete(NODES, name)
            with contextlib.suppress(KubeAPIError):
                await kube.delete(NAMESPACES, self.namespace)
        await self.client.close()

    def node_name(self, index: int) -> str:
        """The name of this test's node ``index`` (unique across the session's tests)."""
        return f"{self.namespace}-node-{index}"

    async def make_nodes(self, count: int, **fields: Any) -> list[dict[str, Any]]:
        """``count`` Ready Nodes (`make_nodes`, named by `node_name`), deleted after the test."""
        names = [self.node_name(len(self.nodes) + i) for i in range(count)]
        self.nodes.extend(names)
        return await make_nodes(self.client, names, **fields)

    def config(self, *, server: str | None = None, token: str | None = None) -> KubeConfig:
        """The admin's config, or another ``token``'s, through ``server`` (a `TcpGate`'s URL)
        when given; the serving certificate is checked as for the apiserver's own URL."""
        admin = self.server.config()
        return dataclasses.replace(
            admin, server=server or admin.server, token=token or admin.token, source="kubus test", token_file=None
        )
