"""Resource names as kube classifies them (`pkg/apis/core/v1/helper/helpers.go`).

A resource name is *native* when it has no domain (`cpu`, `hugepages-2Mi`) or lies in the
`kubernetes.io/` namespace, and *extended* when it is a valid domain-qualified name outside it
that is not a quota name (`requests.*`): `nvidia.com/gpu`, `example.com/foo`.
"""

from __future__ import annotations

from functools import lru_cache

from kubus.api.names import is_qualified_name

DEFAULT_NAMESPACE_PREFIX = "kubernetes.io/"
REQUESTS_PREFIX = "requests."
HUGEPAGES_PREFIX = "hugepages-"
ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"


def is_prefixed_native_resource(name: str) -> bool:
    """v1helper.IsPrefixedNativeResource: in the kubernetes.io/ namespace."""
    return DEFAULT_NAMESPACE_PREFIX in name


def is_native_resource(name: str) -> bool:
    """v1helper.IsNativeResource: no domain, or the kubernetes.io/ namespace."""
    return "/" not in name or is_prefixed_native_resource(name)


@lru_cache(maxsize=4096)
def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified `domain/name` outside kubernetes.io/ that is
    not a quota name (`requests.*`)."""
    if is_native_resource(name) or name.startswith(REQUESTS_PREFIX):
        return False
    return is_qualified_name(REQUESTS_PREFIX + name)


def is_hugepage_resource_name(name: str) -> bool:
    """v1helper.IsHugePageResourceName."""
    return name.startswith(HUGEPAGES_PREFIX)


def is_attachable_volume_resource_name(name: str) -> bool:
    """v1helper.IsAttachableVolumeResourceName."""
    return name.startswith(ATTACHABLE_VOLUMES_PREFIX)


def is_overcommit_allowed(name: str) -> bool:
    """v1helper.IsOvercommitAllowed: a container may request less than its limit (native
    resources other than hugepages; extended resources need request == limit)."""
    return is_native_resource(name) and not is_hugepage_resource_name(name)


__all__ = [
    "ATTACHABLE_VOLUMES_PREFIX",
    "DEFAULT_NAMESPACE_PREFIX",
    "HUGEPAGES_PREFIX",
    "REQUESTS_PREFIX",
    "is_attachable_volume_resource_name",
    "is_extended_resource_name",
    "is_hugepage_resource_name",
    "is_native_resource",
    "is_overcommit_allowed",
    "is_prefixed_native_resource",
]
