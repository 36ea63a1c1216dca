"""An asyncio client of the Kubernetes API: plain dicts in and out, over aiohttp, decoded with
`kubus.core.codec` (orjson).

bench/kube_client_decode.py chose it over lightkube, kr8s and kubernetes-asyncio, by the client's
CPU per Pod and Node: its decoding ties the cheapest (lightkube's msgspec structs), is 5-100 times
cheaper than the others', and a watch event over aiohttp costs half what it costs over httpx.
kubus builds its own model from the dicts next. The bench's docstring holds the numbers.

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

import enum
import functools
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import aiohttp

from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject
from kubus.kubeapi.config import KubeConfig
from kubus.kubeapi.errors import KubeAPIError, KubeUnreachable, describe_failure
from kubus.kubeapi.lanes import Lanes
from kubus.kubeapi.ratelimit import TokenBucket
from kubus.kubeapi.resources import PODS, KubeObject, Resource
from kubus.kubeapi.watch import Watch

__all__ = ["KubeClient", "ObjectList", "PatchType"]

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
    CPU on both ends; off: inside a cluster the bytes are cheaper than the CPU). ``write_lanes``:
    writes (POST, PUT, PATCH, DELETE) go pipelined over that many connections of their own
    (`kubus.kubeapi.lanes`: a third of the client CPU per write; for a binder or a watcher
    writing per pod); 0: through aiohttp as reads do.
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
        write_lanes: int = 0,
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
        self._lanes: Lanes | None = None
        if write_lanes > 0:
            self._lanes = Lanes(
                config.server,
                config.ssl_context(),
                server_hostname=config.tls_server_name,
                lanes=write_lanes,
                timeout=timeout,
                headers={"Accept": "application/json", "User-Agent": user_agent},
            )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; idempotent. Requests after it raise RuntimeError."""
        self._closed = True
        if self._lanes is not None:
            await self._lanes.close()
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
        # No client-side deadline but the server's own (timeoutSeconds) plus a margin.
        total = None if timeout_seconds is None else timeout_seconds + 60
        opener = functools.partial(
            self._open,
            "GET",
            resource.path(namespace),
            resource,
            "watch",
            namespace=namespace,
            params=params,
            timeout=aiohttp.ClientTimeout(total=total),
        )
        return Watch(opener, server=self.server, resource=resource, namespace=namespace)

    # -- writing ---------------------------------------------------------------------------------

    async def create(
        self,
        resource: Resource,
        obj: JSONMapping,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        answer: bool = True,
    ) -> KubeObject:
        """POST ``obj`` (apiVersion and kind are added when missing) to the collection, or to
        ``name``'s ``subresource`` (pods/binding, serviceaccounts/token). The namespace is
        ``namespace`` or obj's metadata.namespace. Returns the object as stored ({} with
        ``answer=False``: the caller does not read it, and it is not parsed). Raises
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
            answer=answer,
        )

    async def update(
        self,
        resource: Resource,
        obj: JSONMapping,
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
        patch: JSONMapping | Sequence[JSONMapping],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
        subresource: str | None = None,
        field_manager: str | None = None,
        answer: bool = True,
    ) -> KubeObject:
        """PATCH ``name`` (or its ``subresource``, e.g. "status") with ``patch`` in
        ``patch_type``'s format (JSON: a list of operations). Returns the object as stored ({}
        with ``answer=False``, unparsed). Raises KubeAPIError (404, 409 on a failed
        resourceVersion/uid in the patch, 422)."""
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
            answer=answer,
        )

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: JSONMapping,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
        answer: bool = True,
    ) -> KubeObject:
        """PATCH ``name``/status (a pod's conditions, nominatedNodeName; a node's conditions)."""
        return await self.patch(
            resource, name, patch, namespace=namespace, patch_type=patch_type, subresource="status", answer=answer
        )

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
        answer: bool = True,
    ) -> KubeObject:
        """DELETE ``name``; only if its uid (and resourceVersion) are still these, when given
        (else KubeAPIError 409). ``propagation_policy``: "Orphan", "Background", "Foreground".
        Returns what the apiserver answers (the object, or a Status; {} with ``answer=False``,
        unparsed). Raises KubeAPIError (404)."""
        options: JSONObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        path = resource.path(_ns(resource, namespace, None), name)
        return await self._json(
            "DELETE", path, resource, "delete", namespace=namespace, name=name, body=codec.dumps(options),
            answer=answer,
        )  # fmt: skip

    async def bind(self, namespace: str, pod: str, node: str, *, uid: str | None = None) -> None:
        """Bind pod ``namespace/pod`` to ``node`` (POST pods/{pod}/binding, a v1 Binding), as
        kube-scheduler's DefaultBinder does; with ``uid``, only that incarnation of the pod.
        Raises KubeAPIError: 409 when the pod is already bound (to any node) or its uid differs,
        404 when it is gone, 403 without the RBAC permission "create pods/binding"."""
        metadata: JSONObject = {"name": pod, "namespace": namespace}
        if uid is not None:
            metadata["uid"] = uid
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(PODS, binding, namespace=namespace, name=pod, subresource="binding", answer=False)

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
                raise KubeUnreachable(self.server, describe_failure(error, self.timeout)) from None
            break
        if response.status >= 400:
            try:
                data = await response.read()
            except (aiohttp.ClientError, OSError, TimeoutError):
                data = b""
            finally:
                response.release()
            raise _api_error(
                response.status, response.reason, response.headers.get("Retry-After"), data,
                verb, resource, subresource, namespace, name,
            )  # fmt: skip
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
        answer: bool = True,
    ) -> KubeObject:
        """The object the apiserver answers with; {} for an empty answer, or with ``answer=False``
        (a write whose caller does not read it: a preemption's status writes and deletions,
        the binder's bindings and events, each a whole object to parse for nothing)."""
        if self._lanes is not None and method != "GET":
            return await self._pipelined(
                method, path, resource, verb, namespace, name, subresource, params, body, content_type, answer
            )
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
            raise KubeUnreachable(self.server, describe_failure(error, self.timeout)) from None
        finally:
            response.release()
        if not data or not answer:
            return {}
        result: KubeObject = codec.loads(data)
        return result


    async def _pipelined(
        self,
        method: str,
        path: str,
        resource: Resource,
        verb: str,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
        params: Mapping[str, str] | None,
        body: bytes | None,
        content_type: str,
        answer: bool,
    ) -> KubeObject:
        """A write through the pipelined lanes (`kubus.kubeapi.lanes`); raises as `_open`."""
        assert self._lanes is not None
        if self._closed:
            raise RuntimeError("KubeClient is closed")
        await self.limiter.acquire()
        headers = self._auth()
        if body is not None:
            headers["Content-Type"] = content_type
        reply = await self._lanes.request(method, path, params=params, body=body or b"", headers=headers)
        if reply.status >= 400:
            raise _api_error(
                reply.status, reply.reason, reply.retry_after, reply.body,
                verb, resource, subresource, namespace, name,
            )  # fmt: skip
        if not reply.body or not answer:
            return {}
        result: KubeObject = codec.loads(reply.body)
        return result


def _ns(resource: Resource, namespace: str | None, obj: JSONMapping | None) -> str | None:
    """The namespace of a request about one object: required for a namespaced resource."""
    if not resource.namespaced:
        return None
    if namespace is None and obj is not None:
        namespace = (obj.get("metadata") or {}).get("namespace")
    if not namespace:
        raise ValueError(f"{resource} are namespaced: give a namespace")
    return namespace


def _api_error(
    status_code: int,
    reason_phrase: str | None,
    retry_after_header: str | None,
    data: bytes,
    verb: str,
    resource: Resource,
    subresource: str | None,
    namespace: str | None,
    name: str | None,
) -> KubeAPIError:
    """The KubeAPIError of an error response, from its Status body when it has one."""
    reason, message = "", ""
    details: JSONObject = {}
    try:
        status = codec.loads(data) if data else {}
    except codec.DecodeError:
        status = {}
    if isinstance(status, dict) and status.get("kind") == "Status":
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
        details = status.get("details") or {}
    else:
        message = data[:300].decode(errors="replace").strip() or (reason_phrase or "")
    retry_after: float | None = None
    header = retry_after_header
    if header and header.strip().isdigit():
        retry_after = float(header)
    elif isinstance(details, dict) and details.get("retryAfterSeconds"):
        retry_after = float(details["retryAfterSeconds"])
    what = f"{resource}/{subresource}" if subresource else str(resource)
    return KubeAPIError(
        status_code,
        reason,
        message,
        verb=verb,
        resource=what,
        namespace=namespace,
        name=name,
        retry_after=retry_after,
        details=details if isinstance(details, dict) else {},
    )
