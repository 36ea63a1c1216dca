"""Resource names as kube-scheduler classifies them, and kube's `framework.Resource` for one node.

kube keeps cpu, memory, ephemeral-storage and the pod count in fields of their own and every
other *scalar* resource (extended, hugepages-*, *kubernetes.io/*, attachable-volumes-*) in a map;
a name that is none of these (say `foo`) is dropped when a ResourceList is added up, so it is
neither checked by NodeResourcesFit nor scored. These helpers reproduce that, from
`pkg/scheduler/util/utils.go` (the name rules themselves are kubus.api.resource_names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from kubus.api.objects import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from kubus.api.resource_names import (
    is_attachable_volume_resource_name,
    is_extended_resource_name,
    is_hugepage_resource_name,
    is_prefixed_native_resource,
)


@lru_cache(maxsize=4096)
def is_scalar_resource_name(name: str) -> bool:
    """schedutil.IsScalarResourceName: the names kube keeps in Resource.ScalarResources."""
    return (
        is_extended_resource_name(name)
        or is_hugepage_resource_name(name)
        or is_prefixed_native_resource(name)
        or is_attachable_volume_resource_name(name)
    )


@dataclass(slots=True)
class Resource:
    """kube's framework.Resource: the named fields plus the scalar map (absent == 0)."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, resources: Mapping[str, int]) -> Resource:
        """Resource.Add over a ResourceList: unknown non-scalar names are dropped."""
        r = cls()
        for name, value in resources.items():
            if name == CPU:
                r.milli_cpu += value
            elif name == MEMORY:
                r.memory += value
            elif name == PODS:
                r.allowed_pod_number += value
            elif name == EPHEMERAL_STORAGE:
                r.ephemeral_storage += value
            elif is_scalar_resource_name(name):
                r.scalar[name] = r.scalar.get(name, 0) + value
        return r

    @classmethod
    def max_of(cls, resources: Mapping[str, int]) -> Resource:
        """An empty Resource after SetMaxResource(resources): each value floored at 0, `pods`
        and unknown non-scalar names ignored."""
        r = cls()
        for name, value in resources.items():
            if name == MEMORY:
                r.memory = max(r.memory, value)
            elif name == CPU:
                r.milli_cpu = max(r.milli_cpu, value)
            elif name == EPHEMERAL_STORAGE:
                r.ephemeral_storage = max(r.ephemeral_storage, value)
            elif name != PODS and is_scalar_resource_name(name):
                r.scalar[name] = max(r.scalar.get(name, 0), value)
        return r
