"""The objects `kubus apply` stores whole: Namespaces, PriorityClasses, PodDisruptionBudgets and
the workloads default spreading reads (Services, ReplicationControllers, ReplicaSets,
StatefulSets: one hash for the four kinds, keyed ``Kind/namespace/name``).

One hash per kind, each object's JSON under its name (kubus.store.keys), and a version counter
that every change of the hash bumps: a reader that caches a kind (the cycle its namespaces, the
queue its PriorityClasses) pays one GET to know its copy is current, and reads the hash again
only when it is not. A write stored before a read began is seen by that read.

Writes are optimistic transactions (WATCH, then MULTI/EXEC, retried when the hash changed under
them): they are rare (`kubus apply`), and a PriorityClass's checks against the other classes
(one globalDefault; value and preemptionPolicy immutable) are kube's, in Python
(`kubus.api.priority.check_priority_class`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from redis.exceptions import WatchError

from kubus.api.disruption import IntOrPercent, PodDisruptionBudget
from kubus.api.namespaces import Namespace
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, PreemptionPolicy, SelectorOperator
from kubus.api.priority import PriorityClass, check_priority_class
from kubus.api.workloads import (
    NO_WORKLOADS,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
    Workload,
    Workloads,
)
from kubus.core import codec
from kubus.core.codec import JSONObject, JSONValue, text
from kubus.store._core import StoreCore

__all__ = [
    "ObjectStore",
    "budget_from_json",
    "budget_to_json",
    "class_from_json",
    "class_to_json",
    "namespace_from_json",
    "namespace_to_json",
    "workload_from_json",
    "workload_to_json",
]


# ---- encodings (keys sorted, so equal objects encode equally) ------------------------------------


def namespace_to_json(namespace: Namespace) -> bytes:
    return codec.dumps({"labels": dict(sorted(namespace.labels.items())), "name": namespace.name})


def namespace_from_json(data: bytes | str) -> Namespace:
    """Raises ValueError (DecodeError) or KeyError when malformed."""
    raw = codec.loads(data)
    return Namespace(name=str(raw["name"]), labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()})


def class_to_json(pc: PriorityClass) -> bytes:
    return codec.dumps(
        {
            "description": pc.description,
            "globalDefault": pc.global_default,
            "name": pc.name,
            "preemptionPolicy": pc.preemption_policy.value,
            "value": pc.value,
        }
    )


def class_from_json(data: bytes | str) -> PriorityClass:
    """Raises ValueError (DecodeError, an unknown policy) or KeyError when malformed."""
    raw = codec.loads(data)
    return PriorityClass(
        name=str(raw["name"]),
        value=int(raw["value"]),
        global_default=bool(raw.get("globalDefault")),
        preemption_policy=PreemptionPolicy(raw.get("preemptionPolicy") or PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
        description=str(raw.get("description") or ""),
    )


def _selector_to_json(selector: LabelSelector | None) -> JSONObject | None:
    if selector is None:
        return None
    return {
        "matchExpressions": [
            {"key": r.key, "operator": r.operator.value, "values": list(r.values)} for r in selector.match_expressions
        ],
        "matchLabels": dict(sorted(selector.match_labels.items())),
    }


def _selector_from_json(raw: JSONValue) -> LabelSelector | None:
    if raw is None:
        return None
    return LabelSelector(
        match_labels={str(k): str(v) for k, v in (raw.get("matchLabels") or {}).items()},
        match_expressions=tuple(
            LabelSelectorRequirement(str(r["key"]), SelectorOperator(r["operator"]), tuple(map(str, r["values"])))
            for r in raw.get("matchExpressions") or ()
        ),
    )


def _int_or_percent(raw: JSONValue) -> IntOrPercent | None:
    return raw if raw is None or isinstance(raw, str) else int(raw)


def budget_to_json(pdb: PodDisruptionBudget) -> bytes:
    return codec.dumps(
        {
            "maxUnavailable": pdb.max_unavailable,
            "minAvailable": pdb.min_available,
            "name": pdb.name,
            "namespace": pdb.namespace,
            "selector": _selector_to_json(pdb.selector),
            "unhealthyPodEvictionPolicy": pdb.unhealthy_pod_eviction_policy,
        }
    )


def budget_from_json(data: bytes | str) -> PodDisruptionBudget:
    """Raises ValueError (DecodeError, an unknown operator) or KeyError when malformed."""
    raw = codec.loads(data)
    policy = raw.get("unhealthyPodEvictionPolicy")
    return PodDisruptionBudget(
        namespace=str(raw["namespace"]),
        name=str(raw["name"]),
        selector=_selector_from_json(raw.get("selector")),
        min_available=_int_or_percent(raw.get("minAvailable")),
        max_unavailable=_int_or_percent(raw.get("maxUnavailable")),
        unhealthy_pod_eviction_policy=None if policy is None else str(policy),
    )


def workload_to_json(obj: Workload) -> bytes:
    selector: JSONValue
    if isinstance(obj, ReplicaSet | StatefulSet):
        selector = _selector_to_json(obj.selector)
    else:
        selector = None if obj.selector is None else dict(sorted(obj.selector.items()))
    return codec.dumps(
        {"kind": obj.kind, "name": obj.name, "namespace": obj.namespace, "selector": selector, "uid": obj.uid}
    )


def workload_from_json(data: bytes | str) -> Workload:
    """Raises ValueError (DecodeError, an unknown kind or operator) or KeyError when malformed."""
    raw = codec.loads(data)
    kind, namespace, name, uid = str(raw["kind"]), str(raw["namespace"]), str(raw["name"]), str(raw.get("uid") or "")
    selector = raw.get("selector")
    if kind in ("ReplicaSet", "StatefulSet"):
        cls = ReplicaSet if kind == "ReplicaSet" else StatefulSet
        return cls(namespace=namespace, name=name, selector=_selector_from_json(selector), uid=uid)
    labels = None if selector is None else {str(k): str(v) for k, v in selector.items()}
    if kind == "Service":
        return Service(namespace=namespace, name=name, selector=labels, uid=uid)
    if kind == "ReplicationController":
        return ReplicationController(namespace=namespace, name=name, selector=labels or {}, uid=uid)
    raise ValueError(f"unknown workload kind {kind!r}")


# ---- the store ----------------------------------------------------------------------------------


class ObjectStore(StoreCore):
    """Namespaces, PriorityClasses, PodDisruptionBudgets and workloads: `ClusterState` is one."""

    _namespaces_read: tuple[int, dict[str, dict[str, str]]] | None = None
    """(version, namespaces) as last read; set per instance."""
    _classes_read: tuple[int, Mapping[str, PriorityClass]] | None = None
    """(version, classes) as last read; set per instance."""
    _workloads_read: tuple[int, Workloads] | None = None
    """(version, workloads) as last read; set per instance."""

    async def put_namespace(self, namespace: Namespace) -> bool:
        """Insert or replace the namespace. True when it changed (new, or other labels), False
        when stored as is. Idempotent."""
        return await self._put(self.keys.namespaces(), namespace.name, namespace_to_json(namespace))

    async def namespaces(self) -> dict[str, dict[str, str]]:
        """Every stored namespace's labels, by name (each with ``kubernetes.io/metadata.name``;
        read them with `kubus.api.namespaces.namespace_labels`, which knows the others too): the
        node table's `namespaces`. Shared, not to be changed: the same object while nothing
        changed, at the cost of one GET (two round trips when something did)."""
        version = await self._version(self.keys.namespaces())
        if self._namespaces_read is not None and self._namespaces_read[0] == version:
            return self._namespaces_read[1]
        version, raw = await self._read_all(self.keys.namespaces())
        namespaces = {ns.name: ns.labels for ns in map(namespace_from_json, raw.values())}
        self._namespaces_read = (version, namespaces)
        return namespaces

    async def put_priority_class(self, pc: PriorityClass) -> bool:
        """Insert or replace the class. True when it changed, False when stored as is.
        Idempotent. Raises PriorityError, storing nothing, for a second globalDefault class or
        a changed value or preemptionPolicy (`kubus.api.priority.check_priority_class`)."""

        def check(stored: Mapping[str, bytes | str]) -> None:
            check_priority_class(pc, map(class_from_json, stored.values()))

        return await self._put(self.keys.priority_classes(), pc.name, class_to_json(pc), check)

    async def priority_classes(self) -> Mapping[str, PriorityClass]:
        """Every stored class by name (not kube's system classes, which are never stored), as
        `kubus.api.priority.resolve_priority` takes them. Read-only; the same object while
        nothing changed, at the cost of one GET (two round trips when something did)."""
        version = await self._version(self.keys.priority_classes())
        if self._classes_read is not None and self._classes_read[0] == version:
            return self._classes_read[1]
        version, raw = await self._read_all(self.keys.priority_classes())
        classes = MappingProxyType({pc.name: pc for pc in map(class_from_json, raw.values())})
        self._classes_read = (version, classes)
        return classes

    async def put_pod_disruption_budget(self, pdb: PodDisruptionBudget) -> bool:
        """Insert or replace the budget (keyed ``namespace/name``). True when it changed, False
        when stored as is. Idempotent."""
        return await self._put(self.keys.disruption_budgets(), pdb.key, budget_to_json(pdb))

    async def pod_disruption_budgets(self, namespace: str | None = None) -> list[PodDisruptionBudget]:
        """The stored budgets of one namespace (every one for None), sorted by key. One round trip."""
        raw = await self.redis.hgetall(self.keys.disruption_budgets())
        budgets = sorted(map(budget_from_json, raw.values()), key=lambda b: b.key)
        return [b for b in budgets if namespace is None or b.namespace == namespace]

    async def put_workload(self, obj: Workload) -> bool:
        """Insert or replace the Service, ReplicationController, ReplicaSet or StatefulSet (keyed
        ``Kind/namespace/name``). True when it changed, False when stored as is. Idempotent."""
        return await self._put(self.keys.workloads(), obj.key, workload_to_json(obj))

    async def workloads(self) -> Workloads:
        """Every stored workload: the node table's `workloads`. Immutable; the same object while
        nothing changed, at the cost of one GET (two round trips when something did)."""
        version = await self._version(self.keys.workloads())
        if self._workloads_read is not None and self._workloads_read[0] == version:
            return self._workloads_read[1]
        version, raw = await self._read_all(self.keys.workloads())
        workloads = Workloads(map(workload_from_json, raw.values())) if raw else NO_WORKLOADS
        self._workloads_read = (version, workloads)
        return workloads

    async def delete_workload(self, key: str) -> bool:
        """Forget the workload ``Kind/namespace/name``. True when it was stored. Idempotent."""
        return await self._delete(self.keys.workloads(), key)

    async def delete_namespace(self, name: str) -> bool:
        """Forget the namespace. True when it was stored. Idempotent."""
        return await self._delete(self.keys.namespaces(), name)

    async def delete_priority_class(self, name: str) -> bool:
        """Forget the class. True when it was stored. Idempotent."""
        return await self._delete(self.keys.priority_classes(), name)

    async def delete_pod_disruption_budget(self, key: str) -> bool:
        """Forget the budget ``namespace/name``. True when it was stored. Idempotent."""
        return await self._delete(self.keys.disruption_budgets(), key)

    # ---- the parts they share ---------------------------------------------------------------------

    async def _delete(self, objects: str, name: str) -> bool:
        """Remove ``name`` from the hash ``objects`` and bump its version when it was there."""
        pipe = self._pipeline()
        pipe.hdel(objects, name)
        pipe.incr(self.keys.version_of(objects))
        removed, _ = await pipe.execute()
        return bool(removed)

    async def _version(self, objects: str) -> int:
        return int(text(await self.redis.get(self.keys.version_of(objects))) or 0)

    async def _read_all(self, objects: str) -> tuple[int, dict[str, bytes]]:
        """(version, field -> JSON) of one hash, read together (MULTI/EXEC)."""
        pipe = self._pipeline()
        pipe.get(self.keys.version_of(objects))
        pipe.hgetall(objects)
        version, raw = await pipe.execute()
        return int(text(version) or 0), {text(k): v for k, v in raw.items()}

    async def _put(
        self, objects: str, name: str, record: bytes, check: Callable[[Mapping[str, bytes | str]], None] | None = None
    ) -> bool:
        """Store ``record`` under ``name`` in the hash ``objects`` and bump its version, unless it
        is there as is (False). ``check`` sees the hash as it is (field -> JSON) and raises to
        refuse; the write happens only if the hash did not change since (else it is read and
        checked again)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(objects)
                    stored: Mapping[str, bytes | str | None]
                    if check is None:
                        stored = {name: await pipe.hget(objects, name)}
                    else:
                        stored = fields = {text(k): v for k, v in (await pipe.hgetall(objects)).items()}
                    if text(stored.get(name)) == record.decode():
                        return False
                    if check is not None:
                        check(fields)
                    pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves Pipeline.multi unannotated
                    pipe.hset(objects, name, record)
                    pipe.incr(self.keys.version_of(objects))
                    await pipe.execute()
                    return True
                except WatchError:
                    continue
