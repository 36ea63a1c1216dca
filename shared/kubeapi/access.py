"""Whether kubus can work with an apiserver before it starts: reachable, the credentials taken,
every resource it reads listable, and which custom resources are not served (a CRD not
installed). One line saying what to fix when not: kubus exits at start rather than retry a
mistake."""

from __future__ import annotations

from collections.abc import Iterable

from kubus.kubeapi.client import KubeClient
from kubus.kubeapi.errors import KubeAPIError, KubeError, KubeUnreachable
from kubus.kubeapi.resources import Resource

__all__ = ["KubeAccessError", "check_access"]

_BUILT_IN_GROUPS = frozenset({"", "apps", "policy", "scheduling.k8s.io", "events.k8s.io", "coordination.k8s.io"})


class KubeAccessError(KubeError):
    """kubus cannot work with this apiserver as configured (unreachable, the token refused, a
    permission missing); str() is one line naming what to fix."""


async def check_access(client: KubeClient, resources: Iterable[Resource], *, fix_rbac: str) -> set[Resource]:
    """List one object of each of ``resources``; the custom ones not served (their CRD not
    installed). Raises KubeAccessError: the apiserver unreachable, the token refused, a
    permission missing (``fix_rbac`` says where the ClusterRole kubus needs is)."""
    missing: set[Resource] = set()
    for resource in resources:
        try:
            pages = client.pages(resource, limit=1)
            await anext(pages)  # the first page only
            await pages.aclose()  # type: ignore[attr-defined]
        except KubeUnreachable as exc:
            raise KubeAccessError(f"{exc}; is it the right cluster, and is it up?") from None
        except KubeAPIError as exc:
            if exc.not_found and resource.group not in _BUILT_IN_GROUPS:
                missing.add(resource)
                continue
            if exc.unauthorized:
                raise KubeAccessError(f"{client.server}: {exc} (renew the credentials in the kubeconfig)") from None
            if exc.forbidden:
                permission = exc.missing_permission
                raise KubeAccessError(f"{client.server}: missing RBAC permission: {permission} ({fix_rbac})") from None
            raise KubeAccessError(f"{client.server}: {exc}") from None
    return missing
