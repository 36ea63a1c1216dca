"""kubus.store's Namespaces, PriorityClasses, PodDisruptionBudgets and workloads (Services,
ReplicationControllers, ReplicaSets, StatefulSets) against a real Redis: put and read back,
unchanged puts, the version counters readers cache on, and kube's PriorityClass checks."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.namespaces import NAMESPACE_NAME_LABEL, Namespace
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, PreemptionPolicy, SelectorOperator
from kubus.api.priority import PriorityClass, PriorityError
from kubus.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet, Workloads
from kubus.cli.cluster import apply
from kubus.core.settings import ConnectionSettings
from kubus.store import ClusterState

HIGH = PriorityClass("high", 1000, preemption_policy=PreemptionPolicy.NEVER, description="batch")
LOW = PriorityClass("low", -5, global_default=True)
EXISTS = SelectorOperator.EXISTS


async def test_namespaces_are_put_and_read_back_with_the_name_label(state: ClusterState) -> None:
    assert await state.namespaces() == {}
    assert await state.put_namespace(Namespace("ml", {"team": "a"}))
    assert await state.put_namespace(Namespace("web"))
    assert not await state.put_namespace(Namespace("ml", {"team": "a"}))  # the same: unchanged
    assert await state.namespaces() == {
        "ml": {"team": "a", NAMESPACE_NAME_LABEL: "ml"},
        "web": {NAMESPACE_NAME_LABEL: "web"},
    }
    assert await state.put_namespace(Namespace("ml", {"team": "b"}))  # relabeled
    assert (await state.namespaces())["ml"]["team"] == "b"


async def test_a_reader_reads_again_only_when_the_version_moved(state: ClusterState, redis: aioredis.Redis) -> None:
    await state.put_namespace(Namespace("ml"))
    first = await state.namespaces()
    assert await state.namespaces() is first  # nothing changed: the same object
    other = ClusterState(redis)  # another process
    await other.put_namespace(Namespace("web"))
    second = await state.namespaces()
    assert second is not first and set(second) == {"ml", "web"}
    assert int(await redis.get(state.keys.version_of(state.keys.namespaces()))) == 2
    assert not await other.put_namespace(Namespace("web"))  # unchanged: no version bump
    assert await state.namespaces() is second


async def test_priority_classes_round_trip_and_are_cached(state: ClusterState, redis: aioredis.Redis) -> None:
    assert await state.priority_classes() == {}
    assert await state.put_priority_class(HIGH)
    assert await state.put_priority_class(LOW)
    classes = await state.priority_classes()
    assert classes == {"high": HIGH, "low": LOW}
    assert await state.priority_classes() is classes
    assert not await state.put_priority_class(HIGH)
    described = PriorityClass("high", 1000, preemption_policy=PreemptionPolicy.NEVER, description="other")
    assert await state.put_priority_class(described)  # the description may change
    assert (await ClusterState(redis).priority_classes())["high"] == described


async def test_priority_classes_are_checked_as_kube_admits_them(state: ClusterState) -> None:
    assert await state.put_priority_class(LOW)
    with pytest.raises(PriorityError, match="PriorityClass low is already marked as default") as info:
        await state.put_priority_class(PriorityClass("other", 1, global_default=True))
    assert info.value.field == "globalDefault"
    with pytest.raises(PriorityError, match="may not be changed") as info:
        await state.put_priority_class(PriorityClass("low", 7, global_default=True))
    assert info.value.field == "value"
    with pytest.raises(PriorityError, match="immutable"):
        await state.put_priority_class(PriorityClass("low", -5, True, PreemptionPolicy.NEVER))
    assert await state.priority_classes() == {"low": LOW}  # nothing stored by the refusals
    assert await state.put_priority_class(PriorityClass("low", -5))  # no longer the default
    assert await state.put_priority_class(PriorityClass("other", 1, global_default=True))


async def test_two_racing_defaults_store_one(redis: aioredis.Redis) -> None:
    a, b = ClusterState(redis), ClusterState(redis)
    results = await asyncio.gather(
        a.put_priority_class(PriorityClass("a", 1, global_default=True)),
        b.put_priority_class(PriorityClass("b", 2, global_default=True)),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["PriorityError", "bool"]
    assert len(await a.priority_classes()) == 1


async def test_budgets_round_trip_per_namespace(state: ClusterState) -> None:
    web = PodDisruptionBudget(
        "web",
        "front",
        LabelSelector({"app": "web"}, (LabelSelectorRequirement("tier", SelectorOperator.IN, ("a", "b")),)),
        min_available="50%",
    )
    everything = PodDisruptionBudget(
        "ml", "all", LabelSelector(), max_unavailable=1, unhealthy_pod_eviction_policy="AlwaysAllow"
    )
    nothing = PodDisruptionBudget("ml", "none", None, min_available=2)
    for pdb in (web, everything, nothing):
        assert await state.put_pod_disruption_budget(pdb)
    assert not await state.put_pod_disruption_budget(web)
    assert await state.pod_disruption_budgets() == [everything, nothing, web]
    assert await state.pod_disruption_budgets("ml") == [everything, nothing]
    assert await state.pod_disruption_budgets("none") == []


async def test_apply_stores_namespaces_and_budgets(
    settings: ConnectionSettings, state: ClusterState, tmp_path: Path
) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: a}}\n---\n"
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: ml}\n"
        "spec: {maxUnavailable: 25%, selector: {matchLabels: {app: web}}}\n"
    )
    out = io.StringIO()
    assert await apply(settings, [str(path)], out) == 0
    assert out.getvalue().splitlines() == ["namespace/ml created", "poddisruptionbudget/web created"]
    assert await state.namespaces() == {"ml": {"team": "a", NAMESPACE_NAME_LABEL: "ml"}}
    assert await state.pod_disruption_budgets() == [
        PodDisruptionBudget("ml", "web", LabelSelector({"app": "web"}), max_unavailable="25%")
    ]
    out = io.StringIO()
    assert await apply(settings, [str(path)], out, quiet=True) == 0
    assert out.getvalue() == "2 objects: 2 unchanged\n"
    path.write_text(path.read_text().replace("team: a", "team: b"))  # relabeled: kubectl's configured
    out = io.StringIO()
    assert await apply(settings, [str(path)], out) == 0
    assert out.getvalue().splitlines() == ["namespace/ml configured", "poddisruptionbudget/web unchanged"]
    out = io.StringIO()
    path.write_text(path.read_text().replace("team: b", "team: c"))
    assert await apply(settings, [str(path)], out, quiet=True) == 0
    assert out.getvalue() == "2 objects: 1 configured, 1 unchanged\n"


async def test_workloads_round_trip_one_hash_for_the_four_kinds(state: ClusterState, redis: aioredis.Redis) -> None:
    assert not await state.workloads()
    web = Service("ml", "web", {"app": "web"}, uid="s-1")
    headless = Service("ml", "none")  # no selector: selects no pod
    rc = ReplicationController("ml", "rc", {"app": "old"})
    rs = ReplicaSet("ml", "web-1", LabelSelector({"app": "web"}, (LabelSelectorRequirement("tier", EXISTS),)))
    ss = StatefulSet("db", "db", LabelSelector({"app": "db"}))
    for obj in (web, headless, rc, rs, ss):
        assert await state.put_workload(obj)
    assert not await state.put_workload(web)  # the same: unchanged
    workloads = await state.workloads()
    assert workloads == Workloads([web, headless, rc, rs, ss])
    assert workloads.services("ml") == (headless, web) and workloads.get("ReplicaSet", "ml", "web-1") == rs
    # read again only when the version moved: the same object meanwhile
    assert await state.workloads() is workloads
    assert await redis.exists("kubus:{idx}:workloads:version")
    assert await state.delete_workload("Service/ml/web")
    assert not await state.delete_workload("Service/ml/web")
    assert await state.workloads() == Workloads([headless, rc, rs, ss])


async def test_apply_stores_workloads(settings: ConnectionSettings, state: ClusterState, tmp_path: Path) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n"
        "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\n"
        "spec: {selector: {matchLabels: {app: db}}, serviceName: db, template: {metadata: {labels: {app: db}}}}\n"
    )
    out = io.StringIO()
    assert await apply(settings, [str(path)], out) == 0
    assert out.getvalue().splitlines() == ["service/web created", "statefulset/db created"]
    workloads = await state.workloads()
    assert [w.key for w in workloads.objects] == ["Service/default/web", "StatefulSet/default/db"]
    assert workloads.services("default")[0].selector == {"app": "web"}
    # a new selector is configured; a ReplicaSet named as the stored Service is another object
    path.write_text(
        path.read_text().replace("{app: web}, ports", "{app: shop}, ports")
        + "---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web}\n"
        "spec: {selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}}}\n"
    )
    out = io.StringIO()
    assert await apply(settings, [str(path)], out) == 0
    assert out.getvalue().splitlines() == [
        "service/web configured",
        "statefulset/db unchanged",
        "replicaset/web created",
    ]
