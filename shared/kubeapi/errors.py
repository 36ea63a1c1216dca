"""What goes wrong talking to a kube-apiserver: the server refused (`KubeAPIError`, with kube's
Status), or could not be reached at all (`KubeUnreachable`). Both are `KubeError`s, KubusErrors."""

from __future__ import annotations

import asyncio
import os
import ssl

import aiohttp

from kubus.core.codec import JSONObject
from kubus.core.errors import KubusError

__all__ = ["KubeAPIError", "KubeError", "KubeUnreachable", "describe_failure"]


class KubeError(KubusError):
    """The base of the errors of `kubus.kubeapi` (configuration, reachability, the API's refusals)."""


class KubeUnreachable(KubeError):
    """No answer from the apiserver at ``server``: connection refused or reset, a name that does
    not resolve, a TLS handshake that failed, or no answer in time. Transient as far as a caller
    can tell: retry with backoff. str() is one line naming the server."""

    transient = True
    """As `KubeAPIError.transient` (`kubus.runtime.service.is_transient` reads it)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"cannot reach the Kubernetes API at {server}: {reason}")
        self.server = server
        self.reason = reason


class KubeAPIError(KubeError):
    """The apiserver answered a request with an error status.

    ``status`` is the HTTP code, ``reason`` the Status object's reason ("NotFound", "Conflict",
    "AlreadyExists", "Forbidden", "Expired", ...; "" when the body was no Status), ``message``
    the apiserver's message. ``verb`` ("get", "list", "watch", "create", "update", "patch",
    "delete") and ``resource`` ("pods", "pods/binding", "events.events.k8s.io") name what was
    asked, so a refusal reads as the RBAC permission it lacks. ``retry_after`` is the seconds the
    apiserver asked to wait (429, some 5xx), else None. str() is one line.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        verb: str = "",
        resource: str = "",
        namespace: str | None = None,
        name: str | None = None,
        retry_after: float | None = None,
        details: JSONObject | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.retry_after = retry_after
        self.details = details or {}
        super().__init__(self._line())

    @property
    def not_found(self) -> bool:
        """404: the object (or the resource: a CRD not installed) does not exist."""
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: already exists, a resourceVersion/uid precondition failed, a pod already bound."""
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        """409 because the name is taken (create)."""
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        """410: the resourceVersion (watch) or continue token (list) is too old: list again."""
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        """403: RBAC (or an admission plugin) refuses; see `missing_permission`."""
        return self.status == 403

    @property
    def unauthorized(self) -> bool:
        """401: the credentials were not accepted (token expired or invalid)."""
        return self.status == 401

    @property
    def too_many_requests(self) -> bool:
        """429: the apiserver sheds load (API priority and fairness); wait `retry_after`."""
        return self.status == 429

    @property
    def server_error(self) -> bool:
        """5xx: the apiserver (or etcd behind it) failed; retry with backoff."""
        return self.status >= 500

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later unchanged: 429, 5xx."""
        return self.too_many_requests or self.server_error

    @property
    def missing_permission(self) -> str:
        """The permission a 403 asked for, as "create pods/binding" ("" when not forbidden)."""
        return f"{self.verb} {self.resource}".strip() if self.forbidden else ""

    def _line(self) -> str:
        target = f"{self.verb} {self.resource}".strip()
        if self.name:
            target = f"{target} {self.namespace}/{self.name}" if self.namespace else f"{target} {self.name}"
        elif self.namespace:
            target = f"{target} in namespace {self.namespace}"
        what = f"{self.reason or 'HTTP'} ({self.status})"
        if self.forbidden:
            what = f"{what}: missing RBAC permission: {self.missing_permission}"
        elif self.unauthorized:
            what = f"{what}: token expired or invalid"
        elif self.too_many_requests and self.retry_after is not None:
            what = f"{what}: retry after {self.retry_after:g} s"
        message = " ".join(self.message.split())
        return f"{target}: {what}: {message}" if message else f"{target}: {what}"


def describe_failure(error: BaseException, timeout: float | None) -> str:
    """Why a request got no answer, in a few words for `KubeUnreachable`: refused, TLS (an
    untrusted certificate says to check certificate-authority), no answer within ``timeout``."""
    if isinstance(error, TimeoutError | asyncio.TimeoutError):
        return f"no answer within {timeout:g} s" if timeout else "timed out"
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return f"TLS: the server's certificate is not trusted ({error.certificate_error}): check certificate-authority"
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        return f"TLS handshake failed: {error}"
    if isinstance(error, aiohttp.ClientConnectorError):
        return f"{error.os_error.strerror or error.os_error}" if error.os_error else str(error)
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno)  # "Connection refused", as aiohttp's says it
    return str(error) or type(error).__name__
