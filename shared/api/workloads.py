"""Services and the workload controllers (ReplicationControllers, ReplicaSets, StatefulSets), as
far as scheduling reads them: which pods they select.

kube-scheduler reads them for one thing: default topology spreading. A pod without
topologySpreadConstraints of its own is spread (PodTopologySpread's default constraints) over the
pods selected by the Services that select it and by its controller, when that is a
ReplicationController, ReplicaSet or StatefulSet (kube's helper.DefaultSelector). `Workloads` is
the cluster's set of them, indexed the way that lookup reads it (kube's listers): the Services of a
namespace, a controller by kind, namespace and name.

Each object keeps its kind's key (``Kind/namespace/name``), namespace, name, uid and selector:
a map for Services and ReplicationControllers (``spec.selector``; a Service without one selects
no pod), a LabelSelector for ReplicaSets and StatefulSets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from kubus.api.objects import LabelSelector

__all__ = [
    "NO_WORKLOADS",
    "WORKLOAD_KINDS",
    "ReplicaSet",
    "ReplicationController",
    "Service",
    "StatefulSet",
    "Workload",
    "Workloads",
]


@dataclass(frozen=True, slots=True)
class Service:
    """A v1 Service: ``spec.selector``, None when it has none (it selects no pod then; an empty
    map selects every pod of its namespace)."""

    kind: ClassVar[str] = "Service"
    api_version: ClassVar[str] = "v1"
    namespace: str
    name: str
    selector: dict[str, str] | None = None
    uid: str = ""

    @property
    def key(self) -> str:
        """``Service/namespace/name``"""
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ReplicationController:
    """A v1 ReplicationController: ``spec.selector`` (defaulted from the pod template's labels, as
    the apiserver defaults it)."""

    kind: ClassVar[str] = "ReplicationController"
    api_version: ClassVar[str] = "v1"
    namespace: str
    name: str
    selector: dict[str, str] = field(default_factory=dict)
    uid: str = ""

    @property
    def key(self) -> str:
        """``ReplicationController/namespace/name``"""
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """An apps/v1 ReplicaSet: ``spec.selector``."""

    kind: ClassVar[str] = "ReplicaSet"
    api_version: ClassVar[str] = "apps/v1"
    namespace: str
    name: str
    selector: LabelSelector | None = None
    uid: str = ""

    @property
    def key(self) -> str:
        """``ReplicaSet/namespace/name``"""
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class StatefulSet:
    """An apps/v1 StatefulSet: ``spec.selector``."""

    kind: ClassVar[str] = "StatefulSet"
    api_version: ClassVar[str] = "apps/v1"
    namespace: str
    name: str
    selector: LabelSelector | None = None
    uid: str = ""

    @property
    def key(self) -> str:
        """``StatefulSet/namespace/name``"""
        return f"{self.kind}/{self.namespace}/{self.name}"


Workload = Service | ReplicationController | ReplicaSet | StatefulSet
"""An object whose selector default spreading reads."""

WORKLOAD_KINDS: Mapping[str, type[Workload]] = {
    cls.kind: cls for cls in (Service, ReplicationController, ReplicaSet, StatefulSet)
}
"""Kind -> class."""


class Workloads:
    """An immutable set of Services, ReplicationControllers, ReplicaSets and StatefulSets (one
    per key; the last given wins), indexed for `services` and `get`. Equal when they hold equal
    objects. Empty (falsy) in a cluster that has none: readers test that first, and pay
    nothing more."""

    __slots__ = ("_by_key", "_services", "objects")

    def __init__(self, objects: Iterable[Workload] = ()) -> None:
        by_key = {obj.key: obj for obj in objects}
        self.objects: tuple[Workload, ...] = tuple(by_key[k] for k in sorted(by_key))
        """Every object, sorted by key."""
        self._by_key = by_key
        services: dict[str, list[Service]] = {}
        for obj in self.objects:
            if isinstance(obj, Service):
                services.setdefault(obj.namespace, []).append(obj)
        self._services = {ns: tuple(s) for ns, s in services.items()}

    def services(self, namespace: str) -> tuple[Service, ...]:
        """The Services of ``namespace`` (kube's ServiceLister.Services(namespace).List)."""
        return self._services.get(namespace, ())

    def get(self, kind: str, namespace: str, name: str) -> Workload | None:
        """The object of that kind, namespace and name, or None."""
        return self._by_key.get(f"{kind}/{namespace}/{name}")

    def __bool__(self) -> bool:
        return bool(self.objects)

    def __len__(self) -> int:
        return len(self.objects)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        return isinstance(other, Workloads) and self.objects == other.objects

    def __repr__(self) -> str:
        return f"Workloads({list(self.objects)!r})"


NO_WORKLOADS = Workloads()
"""The empty set: a cluster without Services or workload controllers."""
