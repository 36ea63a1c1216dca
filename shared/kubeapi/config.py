"""Where the Kubernetes cluster is and how to log in to it, found as kubectl and client-go find it.

`load_config` looks, in this order:

1. ``in_cluster=True``: the pod's service account (`load_in_cluster`);
2. an explicit ``kubeconfig`` path (kubectl's ``--kubeconfig``): that one file, which must exist;
3. ``$KUBECONFIG``: a colon-separated list of files, merged as kubectl merges them (files that do
   not exist are skipped; the first file to define a cluster, user or context by a name wins, and
   the first to set current-context wins; relative paths resolve against the file that holds them);
4. ``~/.kube/config``;
5. nothing found: the service account when the process runs in a pod (KUBERNETES_SERVICE_HOST is
   set), as client-go falls back to it; else `KubeConfigError`.

A context is the one named by ``context`` (kubectl's ``--context``) or the current-context.
Credentials understood: bearer ``token``, ``tokenFile`` (re-read as it rotates), client
certificate and key (files or ``-data``), the CA (file or ``-data``, else the system's CAs),
``insecure-skip-tls-verify`` and ``tls-server-name``. Exec credential plugins, auth-provider
plugins, basic auth, impersonation and proxy-url are refused with a `KubeConfigError` saying so.

Every error is a `KubeConfigError` whose str() is one line naming the file and what to fix. Files
a config names (CA, certificates, keys) are read, and the TLS context is built, while loading: a
`KubeConfig` that `load_config` returns builds its `ssl_context()` without error.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubus.core.codec import JSONMapping, JSONObject
from kubus.kubeapi.errors import KubeError

__all__ = ["SERVICE_ACCOUNT_DIR", "KubeConfig", "KubeConfigError", "load_config", "load_in_cluster", "load_kubeconfig"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod's service account token, CA and namespace are mounted."""

_UNSUPPORTED_USER_FIELDS = {
    "exec": "an exec credential plugin",
    "auth-provider": "an auth-provider plugin",
    "username": "basic auth (username/password)",
    "password": "basic auth (username/password)",
    "as": "impersonation (as)",
    "as-groups": "impersonation (as-groups)",
    "as-uid": "impersonation (as-uid)",
}


class KubeConfigError(KubeError):
    """A kubeconfig or in-cluster setup kubus cannot use; str() is one line naming the file and
    what to fix."""


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """One cluster and one user's credentials: what a `KubeClient` needs to connect.

    Certificates and keys are held as PEM bytes (read from their files while loading), so the
    config does not change when files move; ``token_file`` is the exception, re-read by the
    client as the kubelet rotates it.
    """

    server: str
    """The apiserver's base URL, "https://host:port" (no trailing slash)."""
    source: str
    """Where this came from, for messages: "kubeconfig /home/u/.kube/config (context prod)"."""
    namespace: str = "default"
    """The context's namespace (the pod's own, in-cluster); kubectl's default namespace."""
    context: str | None = None
    ca_data: bytes | None = field(default=None, repr=False)
    """PEM of the CAs to trust; None: the system's CAs."""
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    """The name to check the serving certificate against, when not the server URL's host."""
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    """A file holding the bearer token, re-read as it rotates; wins over ``token`` (client-go)."""
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)

    def bearer_token(self) -> str | None:
        """The bearer token now: ``token_file``'s content if set, else ``token``. Raises
        KubeConfigError when the token file cannot be read."""
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError as error:
                raise KubeConfigError(
                    f"{self.source}: tokenFile {self.token_file}: cannot read: {error.strerror}"
                ) from None
        return self.token

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the server (None for an http:// server). Raises KubeConfigError
        when the CA or the client certificate and key do not load."""
        if not self.server.startswith("https://"):
            return None
        try:
            context = ssl.create_default_context(cadata=self.ca_data.decode() if self.ca_data else None)
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as error:
            raise KubeConfigError(f"{self.source}: certificate-authority does not load as PEM: {error}") from None
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_data or self.client_key_data:
            if not (self.client_cert_data and self.client_key_data):
                raise KubeConfigError(
                    f"{self.source}: a client certificate needs both client-certificate and client-key"
                )
            _load_cert_chain(context, self.client_cert_data, self.client_key_data, self.source)
        return context


def _load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes, source: str) -> None:
    # ssl loads a certificate chain only from files: a private folder, gone once loaded.
    with tempfile.TemporaryDirectory(prefix="kubus-tls-") as folder:
        cert_path, key_path = Path(folder, "client.crt"), Path(folder, "client.key")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        try:
            context.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, ValueError) as error:
            raise KubeConfigError(
                f"{source}: client-certificate and client-key do not load as a PEM pair: {error}"
            ) from None


# -- kubeconfig files ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    """A named cluster, user or context, with the file that defined it."""

    name: str
    body: JSONMapping
    file: Path


def _read_file(path: Path) -> JSONObject:
    try:
        text = path.read_text()
    except OSError as error:
        raise KubeConfigError(f"kubeconfig {path}: cannot read: {error.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None)
        what = f" ({problem})" if problem else ""
        raise KubeConfigError(f"kubeconfig {path}: not valid YAML{where}{what}: fix the file") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, users, contexts)")
    return document


def _entries(documents: list[tuple[Path, JSONObject]], key: str, inner: str) -> dict[str, _Entry]:
    merged: dict[str, _Entry] = {}
    for path, document in documents:
        items = document.get(key) or []
        if not isinstance(items, list):
            raise KubeConfigError(f"kubeconfig {path}: {key} must be a list")
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise KubeConfigError(f"kubeconfig {path}: every entry of {key} needs a name")
            body = item.get(inner) or {}
            if not isinstance(body, dict):
                raise KubeConfigError(f"kubeconfig {path}: {key} entry {item['name']!r}: {inner} must be a mapping")
            merged.setdefault(item["name"], _Entry(item["name"], body, path))  # the first file wins
    return merged


def load_kubeconfig(paths: list[Path], *, context: str | None = None) -> KubeConfig:
    """Merge the kubeconfig files ``paths`` (all must exist) and resolve ``context`` (default:
    the current-context). Raises KubeConfigError (see the module docstring)."""
    documents = [(path, _read_file(path)) for path in paths]
    files = ":".join(str(path) for path in paths)
    where = f"kubeconfig {files}"
    clusters = _entries(documents, "clusters", "cluster")
    users = _entries(documents, "users", "user")
    contexts = _entries(documents, "contexts", "context")
    name = context
    if name is None:
        name = next((doc.get("current-context") for _, doc in documents if doc.get("current-context")), None)
        if not name:
            raise KubeConfigError(
                f"{where}: no current-context is set: run `kubectl config use-context NAME` or name a context"
            )
    chosen = contexts.get(str(name))
    if chosen is None:
        known = ", ".join(sorted(contexts)) or "none"
        raise KubeConfigError(f"{where}: context {name!r} is not defined (contexts: {known})")
    where = f"kubeconfig {chosen.file} (context {chosen.name})"
    cluster_name, user_name = chosen.body.get("cluster"), chosen.body.get("user")
    cluster = clusters.get(str(cluster_name)) if cluster_name else None
    if cluster is None:
        raise KubeConfigError(f"{where}: the context's cluster {cluster_name!r} is not defined under clusters")
    user = users.get(str(user_name)) if user_name else None
    if user_name and user is None:
        raise KubeConfigError(f"{where}: the context's user {user_name!r} is not defined under users")
    server = cluster.body.get("server")
    if not isinstance(server, str) or not server:
        raise KubeConfigError(f"kubeconfig {cluster.file}: cluster {cluster.name!r} has no server URL")
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(
            f"kubeconfig {cluster.file}: cluster {cluster.name!r}: server {server!r} is not an http(s) URL"
        )
    if cluster.body.get("proxy-url"):
        raise KubeConfigError(
            f"kubeconfig {cluster.file}: cluster {cluster.name!r}: proxy-url is not supported by kubus"
        )
    cluster_where = f"kubeconfig {cluster.file}: cluster {cluster.name!r}"
    ca = _pem(cluster, "certificate-authority", cluster_where)
    token = token_file = cert = key = None
    if user is not None:
        user_where = f"kubeconfig {user.file}: user {user.name!r}"
        for key_name, what in _UNSUPPORTED_USER_FIELDS.items():
            if user.body.get(key_name):
                raise KubeConfigError(
                    f"{user_where} uses {what}, which kubus does not support: give the user a token, "
                    "tokenFile or client certificate"
                )
        token = user.body.get("token") or None
        if user.body.get("tokenFile"):
            token_file = str(_resolve(user.file, str(user.body["tokenFile"])))
            try:
                Path(token_file).read_bytes()
            except OSError as error:
                raise KubeConfigError(f"{user_where}: tokenFile {token_file}: cannot read: {error.strerror}") from None
        cert = _pem(user, "client-certificate", user_where)
        key = _pem(user, "client-key", user_where)
    namespace = chosen.body.get("namespace") or "default"
    config = KubeConfig(
        server=server.rstrip("/"),
        source=where,
        namespace=str(namespace),
        context=chosen.name,
        ca_data=ca,
        insecure_skip_tls_verify=bool(cluster.body.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.body.get("tls-server-name") or None,
        token=str(token) if token else None,
        token_file=token_file,
        client_cert_data=cert,
        client_key_data=key,
    )
    config.ssl_context()  # certificates that do not load fail here, naming the file
    return config


def _resolve(file: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else file.parent / path


def _pem(entry: _Entry, key: str, where: str) -> bytes | None:
    """The PEM of ``key`` (a file path) or ``key-data`` (base64) of ``entry``; None if neither."""
    data = entry.body.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeConfigError(f"{where}: {key}-data is not valid base64") from None
    value = entry.body.get(key)
    if not value:
        return None
    path = _resolve(entry.file, str(value))
    try:
        return path.read_bytes()
    except OSError as error:
        raise KubeConfigError(f"{where}: {key} {path}: cannot read: {error.strerror}") from None


# -- in-cluster --------------------------------------------------------------------------------


def _in_cluster_possible(environ: Mapping[str, str], folder: Path) -> bool:
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and (folder / "token").exists()


def load_in_cluster(*, environ: Mapping[str, str] | None = None, folder: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    """The pod's service account: KUBERNETES_SERVICE_HOST/PORT, ``folder``/token (re-read as it
    rotates), ca.crt and namespace. Raises KubeConfigError naming what is missing."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError(
            "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: "
            "run kubus in a pod, or give it a kubeconfig"
        )
    where = f"in-cluster config ({folder})"
    token_file = folder / "token"
    try:
        token_file.read_bytes()
    except OSError as error:
        raise KubeConfigError(
            f"{where}: {token_file}: cannot read: {error.strerror}: mount the pod's service account token"
        ) from None
    try:
        ca = (folder / "ca.crt").read_bytes()
    except OSError as error:
        raise KubeConfigError(f"{where}: {folder / 'ca.crt'}: cannot read: {error.strerror}") from None
    try:
        namespace = (folder / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    config = KubeConfig(
        server=f"https://{host}:{port}",
        source=where,
        namespace=namespace,
        ca_data=ca,
        token_file=str(token_file),
    )
    config.ssl_context()
    return config


# -- the search order ----------------------------------------------------------------------------


def load_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    in_cluster: bool | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> KubeConfig:
    """The cluster and credentials to use, searched as kubectl and client-go search (see the
    module docstring). ``in_cluster``: True forces the service account, False forbids falling
    back to it, None (default) falls back when no kubeconfig is found. ``environ`` and ``home``
    stand in for os.environ and the user's home (tests). Raises KubeConfigError."""
    env = os.environ if environ is None else environ
    if in_cluster:
        return load_in_cluster(environ=env, folder=service_account_dir)
    if kubeconfig is not None and str(kubeconfig):
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise KubeConfigError(f"kubeconfig {path}: no such file: pass the path of an existing kubeconfig")
        return load_kubeconfig([path], context=context)
    searched: str
    if env.get("KUBECONFIG"):
        listed = [Path(part).expanduser() for part in env["KUBECONFIG"].split(os.pathsep) if part]
        paths = list(dict.fromkeys(path for path in listed if path.is_file()))
        searched = f"KUBECONFIG={env['KUBECONFIG']}"
    else:
        default = (home or Path.home()) / ".kube" / "config"
        paths = [default] if default.is_file() else []
        searched = str(default)
    if paths:
        return load_kubeconfig(paths, context=context)
    if in_cluster is None and _in_cluster_possible(env, service_account_dir):
        return load_in_cluster(environ=env, folder=service_account_dir)
    raise KubeConfigError(
        f"no kubeconfig: {searched} names no existing file and this is not a pod with a service account: "
        "pass --kubeconfig PATH or set KUBECONFIG"
    )
