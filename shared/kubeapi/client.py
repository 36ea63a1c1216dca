"""An asyncio client of the Kubernetes API: plain dicts in and out, over aiohttp, decoded with
`kubus.codec` (orjson).

bench/kube_client_decode.py chose it over lightkube, kr8s and kubernetes-asyncio: the client's
CPU per object of a LIST or a WATCH is the JSON decode alone, with no object model built on it
(kubus decodes into its own model next). Its docstring holds the numbers.

    async with KubeClient(load_config()) as kube:
        pods = await kube.list(PODS, namespace="default")
        async with kube.watch(PODS, resource_version=pods.resource_version) as events:
            async for event in events:
                ...

Every request waits for the client's token bucket (qps/burst, as client-go's), then raises, on
failure, `KubeAPIError` (the apiserver answered with an error Status) or `KubeUnreachable` (no
answer: refused, reset, TLS, DNS, timeout). Nothing is retried here, except a GET or watch whose
pooled connection turns out dead (the apiserver restarted), once, at once: callers decide.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import aiohttp

from kubus import codec
from kubus.kubeapi.config import KubeConfig
from kubus.kubeapi.errors import KubeAPIError, KubeUnreachable
from kubus.kubeapi.ratelimit import TokenBucket
from kubus.kubeapi.resources import PODS, Resource

__all__ = ["EventType", "KubeClient", "KubeObject", "ObjectList", "PatchType", "Watch", "WatchEvent"]

KubeObject = dict[str, Any]
"""An object of the API as decoded JSON (Any: JSON values are of any type)."""

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_TOKEN_FILE_REFRESH = 60.0
"""Seconds a token read from tokenFile is used before reading the file again (client-go: 1 min)."""


class PatchType(enum.Enum):
    """The patch formats the apiserver takes, as their content types."""

    STRATEGIC = "application/strategic-merge-patch+json"
    """Strategic merge: lists merge by their key (built-in kinds only; CRDs answer 415)."""
    MERGE = "application/merge-patch+json"
    """RFC 7386 merge patch: maps merge, lists are replaced."""
    JSON = "application/json-patch+json"
    """RFC 6902 JSON patch: a list of operations."""


class EventType(enum.Enum):
    """The type of a watch event, as the apiserver names it."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"
    """No change: the object holds only the resourceVersion the watch has reached."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: its type and the object (for DELETED, its last state)."""

    type: EventType
    object: KubeObject

    @property
    def resource_version(self) -> str:
        """The object's metadata.resourceVersion: where a new watch resumes after this event."""
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of a LIST (every page) and the resourceVersion of the snapshot they are."""

    items: list[KubeObject]
    resource_version: str


class KubeClient:
    """An asyncio client of one apiserver with one user's credentials (`KubeConfig`).

    An async context manager; ``close()`` is idempotent. ``qps``/``burst``: the token bucket
    every request waits for (qps <= 0: none; client-go's defaults are 5/10, kube-scheduler's
    50/100, these suit a scheduler of 100,000 nodes). ``timeout``: seconds a request (not a
    watch) may take in all. ``compression``: ask for gzip (a large LIST is a tenth the bytes, for
    CPU on both ends; off: inside a cluster the bytes are cheaper than the CPU).
    """

    def __init__(
        self,
        config: KubeConfig,
        *,
        qps: float = 200.0,
        burst: int = 400,
        timeout: float = 60.0,
        max_connections: int = 100,
        compression: bool = False,
        user_agent: str = "kubus/0.1",
    ) -> None:
        self.config = config
        self.server = config.server
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self._ssl: ssl.SSLContext | bool = config.ssl_context() or False
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        if not compression:
            self._headers["Accept-Encoding"] = "identity"
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._token: str | None = None
        self._token_read = -float("inf")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; idempotent. Requests after it raise RuntimeError."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # -- reading ---------------------------------------------------------------------------------

    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None, subresource: str | None = None
    ) -> KubeObject:
        """The object ``name`` (or its ``subresource``). Raises KubeAPIError (404: not_found)."""
        path = resource.path(_ns(resource, namespace, None), name, subresource)
        return await self._json("GET", path, resource, "get", namespace=namespace, name=name, subresource=subresource)

    async def pages(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = 500,
        resource_version: str | None = None,
    ) -> AsyncIterator[KubeObject]:
        """Each page of a LIST as the apiserver sent it (a dict with ``items``, ``metadata``),
        following ``continue`` tokens; ``limit`` None or 0: one unpaged list. A token that expires
        between pages raises KubeAPIError (410: gone): list again from the start."""
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        path = resource.path(namespace)
        while True:
            page = await self._json("GET", path, resource, "list", namespace=namespace, params=params)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params = {k: v for k, v in params.items() if k != "resourceVersion"}
            params["continue"] = token

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = 500,
        resource_version: str | None = None,
    ) -> ObjectList:
        """Every object of ``resource`` (in ``namespace``, or all namespaces), in pages of
        ``limit``; with the resourceVersion to watch from. Raises KubeAPIError (410 when a
        continue token expires), KubeUnreachable."""
        items: list[KubeObject] = []
        version = ""
        async for page in self.pages(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            resource_version=resource_version,
        ):
            items.extend(page.get("items") or ())
            version = str((page.get("metadata") or {}).get("resourceVersion", version))
        return ObjectList(items, version)

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
    ) -> Watch:
        """A watch of ``resource`` from ``resource_version`` (None: from now, with the current
        objects first as ADDED; "0": the same, from the watch cache). Use as
        ``async with client.watch(...) as events: async for event in events``. The apiserver
        ends it after ``timeout_seconds`` (None: its own --min-request-timeout, randomized)."""
        params = {"watch": "true"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        return Watch(self, resource, namespace, params, timeout_seconds)

    # -- writing ---------------------------------------------------------------------------------

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> KubeObject:
        """POST ``obj`` (apiVersion and kind are added when missing) to the collection, or to
        ``name``'s ``subresource`` (pods/binding, serviceaccounts/token). The namespace is
        ``namespace`` or obj's metadata.namespace. Returns the object as stored. Raises
        KubeAPIError (409: already_exists), KubeUnreachable; not idempotent."""
        namespace = _ns(resource, namespace, obj)
        body = dict(obj) if subresource else {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        params = {"fieldManager": field_manager} if field_manager else None
        path = resource.path(namespace, name, subresource)
        return await self._json(
            "POST",
            path,
            resource,
            "create",
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=params,
            body=codec.dumps(body),
        )

    async def update(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> KubeObject:
        """PUT ``obj`` over the stored object of its name; with metadata.resourceVersion set, a
        stale ``obj`` raises KubeAPIError 409 (conflict) instead of overwriting a newer one."""
        namespace = _ns(resource, namespace, obj)
        name = str(obj["metadata"]["name"])
        body = {"apiVersion": resource.api_version, "kind": resource.kind, **obj}
        path = resource.path(namespace, name, subresource)
        return await self._json(
            "PUT",
            path,
            resource,
            "update",
            namespace=namespace,
            name=name,
            subresource=subresource,
            body=codec.dumps(body),
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> KubeObject:
        """PATCH ``name`` (or its ``subresource``, e.g. "status") with ``patch`` in
        ``patch_type``'s format (JSON: a list of operations). Returns the object as stored.
        Raises KubeAPIError (404, 409 on a failed resourceVersion/uid in the patch, 422)."""
        params = {"fieldManager": field_manager} if field_manager else None
        path = resource.path(_ns(resource, namespace, None), name, subresource)
        return await self._json(
            "PATCH",
            path,
            resource,
            "patch",
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=params,
            body=codec.dumps(patch),
            content_type=patch_type.value,
        )

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
    ) -> KubeObject:
        """PATCH ``name``/status (a pod's conditions, nominatedNodeName; a node's conditions)."""
        return await self.patch(resource, name, patch, namespace=namespace, patch_type=patch_type, subresource="status")

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> KubeObject:
        """DELETE ``name``; only if its uid (and resourceVersion) are still these, when given
        (else KubeAPIError 409). ``propagation_policy``: "Orphan", "Background", "Foreground".
        Returns what the apiserver answers (the object, or a Status). Raises KubeAPIError (404)."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        path = resource.path(_ns(resource, namespace, None), name)
        return await self._json(
            "DELETE", path, resource, "delete", namespace=namespace, name=name, body=codec.dumps(options)
        )

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str | None = None) -> None:
        """Bind pod ``namespace/pod`` to ``node`` (POST pods/{pod}/binding, a v1 Binding), as
        kube-scheduler's DefaultBinder does; with ``uid``, only that incarnation of the pod.
        Raises KubeAPIError: 409 when the pod is already bound (to any node) or its uid differs,
        404 when it is gone, 403 without the RBAC permission "create pods/binding"."""
        metadata: dict[str, Any] = {"name": pod, "namespace": namespace}
        if uid is not None:
            metadata["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(PODS, binding, namespace=namespace, name=pod, subresource="binding")

    # -- the wire --------------------------------------------------------------------------------

    def _session_now(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("KubeClient is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl, limit=self._max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, auto_decompress=True, skip_auto_headers=()
            )
        return self._session

    def _auth(self) -> dict[str, str]:
        if self.config.token_file:
            now = time.monotonic()
            if now - self._token_read > _TOKEN_FILE_REFRESH:
                self._token, self._token_read = self.config.bearer_token(), now
        else:
            self._token = self.config.token
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    async def _open(
        self,
        method: str,
        path: str,
        resource: Resource,
        verb: str,
        *,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request; the response of a success (the caller releases it). Raises
        KubeAPIError for an error status, KubeUnreachable for no answer."""
        await self.limiter.acquire()
        headers = self._auth()
        if body is not None:
            headers["Content-Type"] = content_type
        url = self.server + path
        attempts = 2 if method == "GET" else 1
        for attempt in range(attempts):
            try:
                response = await self._session_now().request(
                    method,
                    url,
                    params=params,
                    data=body,
                    headers=headers,
                    timeout=timeout or aiohttp.ClientTimeout(total=self.timeout),
                    server_hostname=self.config.tls_server_name,
                )
            except aiohttp.ServerDisconnectedError as error:
                # A pooled connection the apiserver closed (a restart): a GET may go again.
                if attempt + 1 < attempts:
                    continue
                raise KubeUnreachable(self.server, f"connection closed: {error}") from None
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                raise KubeUnreachable(self.server, _describe(error, self.timeout)) from None
            break
        if response.status >= 400:
            try:
                data = await response.read()
            except (aiohttp.ClientError, OSError, TimeoutError):
                data = b""
            finally:
                response.release()
            raise _api_error(response, data, verb, resource, subresource, namespace, name)
        return response

    async def _json(
        self,
        method: str,
        path: str,
        resource: Resource,
        verb: str,
        *,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> KubeObject:
        response = await self._open(
            method,
            path,
            resource,
            verb,
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=params,
            body=body,
            content_type=content_type,
        )
        try:
            data = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise KubeUnreachable(self.server, _describe(error, self.timeout)) from None
        finally:
            response.release()
        if not data:
            return {}
        result: KubeObject = codec.loads(data)
        return result


class Watch:
    """A watch stream: ``async with`` opens it (raising KubeAPIError, KubeUnreachable) and closes
    it; ``async for`` yields `WatchEvent`s until the apiserver ends it (timeoutSeconds).

    An ERROR event raises KubeAPIError from the iteration (410 ``gone``: the resourceVersion is
    too old, list again); a connection lost mid-stream raises KubeUnreachable. Iterating without
    ``async with`` opens it on the first event (close it with ``aclose()``).
    """

    def __init__(
        self, client: KubeClient, resource: Resource, namespace: str | None, params: dict[str, str], timeout: int | None
    ) -> None:
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._params = params
        self._timeout = timeout
        self._response: aiohttp.ClientResponse | None = None
        self._lines: deque[bytes] = deque()
        self._partial = b""
        self._ended = False

    async def open(self) -> None:
        """Open the stream (idempotent)."""
        if self._response is None and not self._ended:
            # No client-side deadline but the server's own (timeoutSeconds) plus a margin.
            total = None if self._timeout is None else self._timeout + 60
            self._response = await self._client._open(
                "GET",
                self._resource.path(self._namespace),
                self._resource,
                "watch",
                namespace=self._namespace,
                params=self._params,
                timeout=aiohttp.ClientTimeout(total=total),
            )

    async def aclose(self) -> None:
        """Close the stream; idempotent."""
        self._ended = True
        if self._response is not None:
            self._response.close()
            self._response = None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._lines:
            if self._ended:
                raise StopAsyncIteration
            await self.open()
            assert self._response is not None
            try:
                chunk = await self._response.content.readany()
            except (aiohttp.ClientError, OSError, TimeoutError) as error:
                await self.aclose()
                raise KubeUnreachable(
                    self._client.server, f"watch of {self._resource} lost: {_describe(error, None)}"
                ) from None
            if not chunk:
                await self.aclose()
                if self._partial.strip():
                    self._lines.append(self._partial)
                self._partial = b""
                continue
            # One JSON document per line; a chunk holds many, or part of one.
            lines = (self._partial + chunk).split(b"\n") if self._partial else chunk.split(b"\n")
            self._partial = lines.pop()
            self._lines.extend(line for line in lines if line)
        return self._event(self._lines.popleft())

    def _event(self, line: bytes) -> WatchEvent:
        try:
            data = codec.loads(line)
            kind, obj = data["type"], data["object"]
        except (codec.DecodeError, KeyError, TypeError) as error:
            raise KubeAPIError(
                500, "BadWatchEvent", f"undecodable watch event: {error}", verb="watch", resource=str(self._resource)
            ) from None
        if kind == "ERROR":
            raise KubeAPIError(
                int(obj.get("code") or 500),
                str(obj.get("reason") or ""),
                str(obj.get("message") or ""),
                verb="watch",
                resource=str(self._resource),
                namespace=self._namespace,
                details=obj.get("details"),
            )
        return WatchEvent(EventType(kind), obj)


def _ns(resource: Resource, namespace: str | None, obj: Mapping[str, Any] | None) -> str | None:
    """The namespace of a request about one object: required for a namespaced resource."""
    if not resource.namespaced:
        return None
    if namespace is None and obj is not None:
        namespace = (obj.get("metadata") or {}).get("namespace")
    if not namespace:
        raise ValueError(f"{resource} are namespaced: give a namespace")
    return namespace


def _describe(error: BaseException, timeout: float | None) -> str:
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return f"no answer within {timeout:g} s" if timeout else "timed out"
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return f"TLS: the server's certificate is not trusted ({error.certificate_error}): check certificate-authority"
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        return f"TLS handshake failed: {error}"
    if isinstance(error, aiohttp.ClientConnectorError):
        return f"{error.os_error.strerror or error.os_error}" if error.os_error else str(error)
    return str(error) or type(error).__name__


def _api_error(
    response: aiohttp.ClientResponse,
    data: bytes,
    verb: str,
    resource: Resource,
    subresource: str | None,
    namespace: str | None,
    name: str | None,
) -> KubeAPIError:
    """The KubeAPIError of an error response, from its Status body when it has one."""
    reason, message = "", ""
    details: dict[str, Any] = {}
    try:
        status = codec.loads(data) if data else {}
    except codec.DecodeError:
        status = {}
    if isinstance(status, dict) and status.get("kind") == "Status":
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        details = status.get("details") or {}
    else:
        message = data[:300].decode(errors="replace").strip() or (response.reason or "")
    retry_after: float | None = None
    header = response.headers.get("Retry-After")
    if header and header.strip().isdigit():
        retry_after = float(header)
    elif isinstance(details, dict) and details.get("retryAfterSeconds"):
        retry_after = float(details["retryAfterSeconds"])
    what = f"{resource}/{subresource}" if subresource else str(resource)
    return KubeAPIError(
        response.status,
        reason,
        message,
        verb=verb,
        resource=what,
        namespace=namespace,
        name=name,
        retry_after=retry_after,
        details=details if isinstance(details, dict) else {},
    )
