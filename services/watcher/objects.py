"""The apiserver's Namespaces, PriorityClasses, PodDisruptionBudgets, PodGroups, Services,
ReplicationControllers, ReplicaSets and StatefulSets in the store, where the queue (Priority
admission), the cycles (namespace selectors, preemption's PDBs, Coscheduling, default topology
spreading) read them, as `kubus apply` stores them in the bus mode."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.errors import ManifestError
from kubus.api.manifests import parse_object
from kubus.api.namespaces import Namespace
from kubus.api.podgroups import PodGroup
from kubus.api.priority import PriorityClass, PriorityError
from kubus.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet
from kubus.core import codec
from kubus.kubeapi import (
    NAMESPACES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PRIORITY_CLASSES,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    SERVICES,
    STATEFUL_SETS,
    Resource,
)
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState

__all__ = ["ObjectMirror", "mirrored"]

APISERVER = "apiserver"


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one kind is kept: its key in the store, how to put and delete it, and how to list
    what the store has of it."""

    resource: Resource
    # Any: the kind's own object type (Namespace, PriorityClass, PodGroup, ...), one per kind.
    key: Callable[[Any], str]
    put: Callable[[ClusterState, Any, bytes], Awaitable[bool]]
    delete: Callable[[ClusterState, str], Awaitable[bool]]
    stored: Callable[[ClusterState], Awaitable[set[str]]]
    prefix: str = ""
    """What the store's key has before ``namespace/name`` (a workload's ``Kind/``)."""


async def _stored_namespaces(store: ClusterState) -> set[str]:
    return set(await store.namespaces())


async def _stored_classes(store: ClusterState) -> set[str]:
    return set(await store.priority_classes())


async def _stored_budgets(store: ClusterState) -> set[str]:
    return {b.key for b in await store.pod_disruption_budgets()}


async def _stored_groups(store: ClusterState) -> set[str]:
    return {g.key for g in await store.pod_groups()}


def _workload_kind(resource: Resource) -> _Kind:
    """A Service, ReplicationController, ReplicaSet or StatefulSet: stored under its key
    ``Kind/namespace/name``, with the other workloads (one hash, `ClusterState.workloads`)."""
    kind = resource.kind

    async def stored(store: ClusterState) -> set[str]:
        return {w.key for w in (await store.workloads()).objects if w.kind == kind}

    return _Kind(
        resource,
        lambda w: w.key,
        lambda s, w, _: s.put_workload(w),
        lambda s, k: s.delete_workload(k),
        stored,
        prefix=f"{kind}/",
    )


_KINDS: dict[str, _Kind] = {
    "Namespace": _Kind(
        NAMESPACES,
        lambda ns: ns.name,
        lambda s, ns, _: s.put_namespace(ns),
        lambda s, k: s.delete_namespace(k),
        _stored_namespaces,
    ),
    "PriorityClass": _Kind(
        PRIORITY_CLASSES,
        lambda pc: pc.name,
        lambda s, pc, _: s.put_priority_class(pc),
        lambda s, k: s.delete_priority_class(k),
        _stored_classes,
    ),
    "PodDisruptionBudget": _Kind(
        POD_DISRUPTION_BUDGETS,
        lambda pdb: pdb.key,
        lambda s, pdb, _: s.put_pod_disruption_budget(pdb),
        lambda s, k: s.delete_pod_disruption_budget(k),
        _stored_budgets,
    ),
    "PodGroup": _Kind(
        POD_GROUPS,
        lambda g: g.key,
        lambda s, g, manifest: s.put_pod_group(g, manifest),
        lambda s, k: s.delete_pod_group(k),
        _stored_groups,
    ),
    **{r.kind: _workload_kind(r) for r in (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)},
}


def mirrored() -> dict[str, Resource]:
    """The kinds this mirror keeps, by kind, with their API resources."""
    return {kind: k.resource for kind, k in _KINDS.items()}


class ObjectMirror:
    """Keeps the store's objects of one kind those of the apiserver."""

    def __init__(self, kind: str, *, store: ClusterState, log: StructuredLogger) -> None:
        self.kind = kind
        self._k = _KINDS[kind]
        self.store = store
        self.log = log.bind(part=kind)

    async def replace(self, objects: Sequence[Mapping[str, codec.JSONValue]]) -> None:
        """Every object of the kind the apiserver has now: each put, the store's others deleted."""
        seen: set[str] = set()
        for obj in objects:
            key = await self.changed(obj)
            if key:
                seen.add(key)
        for key in sorted(await self._k.stored(self.store) - seen):
            await self._k.delete(self.store, key)
            self.log.info("deleted", name=key)

    async def changed(self, obj: Mapping[str, codec.JSONValue]) -> str:
        """One object added or changed; its store key ("" when it cannot be read: said, left out)."""
        typed = dict(obj)
        typed.setdefault("kind", self.kind)
        try:
            parsed = parse_object(_scheduling_fields(typed, self._k.resource), source=APISERVER)
        except ManifestError as exc:
            self.log.warning("object unreadable, left out", error=str(exc))
            return ""
        assert isinstance(
            parsed,
            Namespace
            | PriorityClass
            | PodDisruptionBudget
            | PodGroup
            | Service
            | ReplicationController
            | ReplicaSet
            | StatefulSet,
        )
        try:
            await self._k.put(self.store, parsed, codec.dumps(obj))
        except PriorityError as exc:  # the apiserver let it in: what the store had is stale
            self.log.warning("priority class refused", name=self._k.key(parsed), error=str(exc))
            return ""
        return self._k.key(parsed)

    async def deleted(self, obj: Mapping[str, codec.JSONValue]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        key = f"{meta['namespace']}/{name}" if self._k.resource.namespaced and meta.get("namespace") else name
        key = f"{self._k.prefix}{key}" if key else key
        if key and await self._k.delete(self.store, key):
            self.log.info("deleted", name=key)


_WORKLOAD_RESOURCES = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)


def _scheduling_fields(obj: codec.JSONObject, resource: Resource) -> codec.JSONObject:
    """The object without what the apiserver adds that kubus's readers refuse as unknown fields
    (a PodDisruptionBudget's or PodGroup's status); of a workload, only what default spreading
    reads (its selector, an RC's template labels): a field a newer apiserver adds to a Service's
    or a StatefulSet's spec is none of kubus's business."""
    obj.pop("status", None)
    if resource in _WORKLOAD_RESOURCES:
        spec = obj.get("spec")
        if isinstance(spec, dict):
            kept: codec.JSONObject = {k: spec[k] for k in ("selector",) if k in spec}
            template = spec.get("template")
            if resource is REPLICATION_CONTROLLERS and isinstance(template, dict):
                meta = template.get("metadata")
                if isinstance(meta, dict) and "labels" in meta:
                    kept["template"] = {"metadata": {"labels": meta["labels"]}}
            obj["spec"] = kept
    return obj
