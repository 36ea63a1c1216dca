"""kubus as the scheduler of a real kube-apiserver (cluster mode): the watcher, queue, cycle and
binder in this process, over the test's NATS and Redis, against the session's etcd +
kube-apiserver. Pods are created through the API with the test's own schedulerName, and what
kubus does is read back from the API: spec.nodeName, conditions, events."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from kube_support import KubeTest, install_pod_group_crd, pod_manifest
from support import eventually

from kubus.api.manifests import parse_manifests
from kubus.api.podgroups import POD_GROUP_LABEL
from kubus.binder import BinderOptions, BinderService
from kubus.binder.apiserver import ApiBinding
from kubus.cli.simulate import simulate
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.cycle import CycleOptions, CycleService
from kubus.framework.config import SchedulerConfiguration, load_config
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.kernels.backend import select_backend
from kubus.kubeapi import (
    EVENTS,
    NODES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    REPLICA_SETS,
    SERVICES,
    KubeAPIError,
    KubeClient,
    PatchType,
)
from kubus.plugins import in_tree_registry
from kubus.queue import QueueOptions, QueueService
from kubus.runtime.service import Service, ServiceState
from kubus.store import ClusterState, PodPhase, check_invariants
from kubus.watcher import WatcherOptions, WatcherService, WatcherStartError

pytestmark = [pytest.mark.integration, pytest.mark.kube]


GANG_PLUGINS = """
  plugins:
    queueSort: {enabled: [{name: Coscheduling}], disabled: [{name: "*"}]}
    preFilter: {enabled: [{name: Coscheduling}]}
    postFilter: {enabled: [{name: Coscheduling}]}
    permit: {enabled: [{name: Coscheduling}]}
    reserve: {enabled: [{name: Coscheduling}]}
"""


def scheduler_config(profile: str, plugins: str = "") -> SchedulerConfiguration:
    text = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {profile}
{plugins}"""
    return load_config(text, registry=in_tree_registry())


@contextlib.asynccontextmanager
async def cluster_mode(
    settings: ConnectionSettings, kube: KubeTest, profile: str, plugins: str = "", *, victim_poll: float = 1.0
) -> AsyncIterator[list[Service]]:
    """The watcher, queue, one cycle and one binder for ``profile`` (with ``plugins``, YAML
    under the profile), bound to the test's apiserver; stopped after. ``victim_poll``: the
    binder's `ApiBinding.victim_poll`."""
    config = scheduler_config(profile, plugins)
    registry = in_tree_registry()
    waiting = WaitingPods()
    framework = Framework.from_profile(config.profile(profile), registry, handle=waiting)
    binder_client = KubeClient(kube.config())
    services: list[Service] = [
        WatcherService(settings, kube.config(), config, WatcherOptions(heartbeat_interval=1.0)),
        QueueService(settings, config, QueueOptions(flush_interval=0.05, in_flight_interval=0.05), registry=registry),
        CycleService(
            settings,
            framework,
            CycleOptions(lease_ttl=1.0, renew_interval=0.1, pop_wait_ms=50, request_timeout=1.0, backend="numpy"),
            waiting=waiting,
            name=f"cycle-{profile}",
        ),
        BinderService(
            settings,
            BinderOptions(fetch_timeout=0.2, permit_poll=0.02),
            frameworks={profile: framework},
            apiserver=ApiBinding(binder_client, victim_poll=victim_poll),
        ),
    ]
    try:
        for service in services:
            await service.start()
        watcher = services[0]
        assert isinstance(watcher, WatcherService)
        await asyncio.wait_for(watcher.synced(), 30)

        async def collecting() -> None:  # paused while the first lists came in, and back now
            assert gc.isenabled()

        await eventually(collecting, timeout=5)
        yield services
    finally:
        for service in reversed(services):
            with contextlib.suppress(Exception):
                await service.stop(timeout=5)
        await binder_client.close()


async def api_pods(kube: KubeTest) -> dict[str, dict[str, Any]]:
    listed = await kube.client.list(PODS, namespace=kube.namespace)
    return {p["metadata"]["name"]: p for p in listed.items}


async def create_pods(kube: KubeTest, pods: Sequence[dict[str, Any]]) -> None:
    for pod in pods:
        await kube.client.create(PODS, pod, namespace=kube.namespace)


async def test_pods_of_a_kubus_profile_are_bound_through_the_apiserver_and_others_left_alone(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    profile = f"kubus-{kube.namespace}"
    nodes = [n["metadata"]["name"] for n in await kube.make_nodes(5, cpu="4")]
    mine = [pod_manifest(f"p{i}", cpu="500m", scheduler=profile) for i in range(20)]
    theirs = pod_manifest("default-one", scheduler="default-scheduler")
    await create_pods(kube, [*mine, theirs])
    async with cluster_mode(settings, kube, profile):

        async def all_bound() -> dict[str, dict[str, Any]]:
            pods = await api_pods(kube)
            unbound = [n for n, p in pods.items() if n != "default-one" and not p["spec"].get("nodeName")]
            assert not unbound, unbound
            return pods

        pods = await eventually(all_bound, timeout=60, interval=0.2)
    assert {p["spec"]["nodeName"] for n, p in pods.items() if n != "default-one"} <= set(nodes)
    assert not pods["default-one"]["spec"].get("nodeName")  # another scheduler's: untouched
    for name, pod in pods.items():
        if name == "default-one":
            continue
        scheduled = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "True", pod["status"]
        record = await state.get_pod(pod["metadata"]["uid"])
        assert record is not None and record.phase is PodPhase.BOUND and record.node == pod["spec"]["nodeName"]
        assert record.bindings == 1

    async def scheduled_events() -> None:
        events = (await kube.client.list(EVENTS, namespace=kube.namespace)).items
        scheduled = [e for e in events if e["reason"] == "Scheduled"]
        assert sorted(e["regarding"]["name"] for e in scheduled) == sorted(p["metadata"]["name"] for p in mine)
        for e in scheduled:  # as kube-scheduler's binding cycle records it, by the binder
            name, node = e["regarding"]["name"], pods[e["regarding"]["name"]]["spec"]["nodeName"]
            assert (e["type"], e["action"], e["reportingController"]) == ("Normal", "Binding", profile), e
            assert e["note"] == f"Successfully assigned {kube.namespace}/{name} to {node}", e

    await eventually(scheduled_events, timeout=20)
    assert await check_invariants(state) == []


async def events_of(kube: KubeTest, pod: str) -> list[dict[str, Any]]:
    events = (await kube.client.list(EVENTS, namespace=kube.namespace)).items
    return [e for e in events if e["regarding"]["name"] == pod]


def condition(pod: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions", []) if c["type"] == type_), None)


async def test_an_unschedulable_pod_says_why_in_the_api_and_a_gate_removed_through_it_lets_it_go(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    profile = f"kubus-{kube.namespace}"
    await kube.make_nodes(3, cpu="4")
    huge = pod_manifest("huge", cpu="100", scheduler=profile)
    gated = pod_manifest("gated", scheduler=profile, schedulingGates=[{"name": "example.com/wait"}])
    await create_pods(kube, [huge, gated])
    async with cluster_mode(settings, kube, profile):

        async def says_why() -> None:
            pod = (await api_pods(kube))["huge"]
            scheduled = condition(pod, "PodScheduled")
            assert scheduled is not None and scheduled["status"] == "False", pod["status"]
            assert scheduled["reason"] == "Unschedulable"
            assert scheduled["message"] == (  # kube's words, preemption's part (and its double stop) included
                "0/3 nodes are available: 3 Insufficient cpu. "
                "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
            ), scheduled
            failed = [e for e in await events_of(kube, "huge") if e["reason"] == "FailedScheduling"]
            assert failed and failed[0]["type"] == "Warning" and failed[0]["note"] == scheduled["message"]
            assert failed[0]["reportingController"] == profile

        await eventually(says_why, timeout=30, interval=0.2)
        assert not (await api_pods(kube))["gated"]["spec"].get("nodeName")
        await kube.client.patch(
            PODS, "gated", {"spec": {"schedulingGates": None}}, namespace=kube.namespace, patch_type=PatchType.MERGE
        )

        async def bound() -> None:
            assert (await api_pods(kube))["gated"]["spec"].get("nodeName")

        await eventually(bound, timeout=30, interval=0.2)
    assert await check_invariants(state) == []


async def test_pods_bound_by_others_take_room_and_a_deleted_pod_gives_it_back(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """A pod created bound to a node (another scheduler's, or a static pod's) counts there, as in
    kube-scheduler's cache; deleting a pod through the API gives its room back to kubus's pods."""
    profile = f"kubus-{kube.namespace}"
    [node] = [n["metadata"]["name"] for n in await kube.make_nodes(1, cpu="4")]
    squatter = pod_manifest("squatter", cpu="3500m", scheduler="default-scheduler", nodeName=node)
    await create_pods(kube, [squatter])
    async with cluster_mode(settings, kube, profile):
        await create_pods(kube, [pod_manifest("mine", cpu="1", scheduler=profile)])

        async def waits_for_room() -> None:
            pod = (await api_pods(kube))["mine"]
            scheduled = condition(pod, "PodScheduled")
            assert scheduled is not None and "Insufficient cpu" in scheduled["message"], pod["status"]

        await eventually(waits_for_room, timeout=30, interval=0.2)
        squatter_uid = (await api_pods(kube))["squatter"]["metadata"]["uid"]
        record = await state.get_pod(squatter_uid)
        assert record is not None and record.phase is PodPhase.BOUND and record.node == node
        await kube.client.delete(PODS, "squatter", namespace=kube.namespace, grace_period_seconds=0)

        async def bound() -> None:
            assert (await api_pods(kube))["mine"]["spec"].get("nodeName") == node

        await eventually(bound, timeout=30, interval=0.2)
        gone = await state.get_pod(squatter_uid)
        assert gone is not None and gone.phase is PodPhase.DELETED
    assert await check_invariants(state) == []


async def test_preemption_through_the_api_deletes_the_victim_respects_its_budget_and_nominates(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """Two low-priority pods fill the node; one is protected by a PodDisruptionBudget. A
    high-priority pod preempts the other, as kube does: DisruptionTarget on the victim, its
    Preempted event, the victim deleted, the preemptor nominated to the node, then bound there."""
    profile = f"kubus-{kube.namespace}"
    [node] = [n["metadata"]["name"] for n in await kube.make_nodes(1, cpu="4")]
    low, high = f"low-{kube.namespace}", f"high-{kube.namespace}"
    for name, value in ((low, 10), (high, 1000)):
        await kube.client.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
    protected = pod_manifest("protected", cpu="2", scheduler=profile, priorityClassName=low)
    protected["metadata"]["labels"] = {"app": "protected"}
    victim = pod_manifest("victim", cpu="2", scheduler=profile, priorityClassName=low, terminationGracePeriodSeconds=0)
    budget = {
        "metadata": {"name": "keep-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}},
    }
    await kube.client.create(POD_DISRUPTION_BUDGETS, budget, namespace=kube.namespace)
    try:
        async with cluster_mode(settings, kube, profile):
            await create_pods(kube, [protected, victim])

            async def both_bound() -> None:
                pods = await api_pods(kube)
                assert all(pods[n]["spec"].get("nodeName") == node for n in ("protected", "victim")), pods

            await eventually(both_bound, timeout=30, interval=0.2)
            victim_uid = (await api_pods(kube))["victim"]["metadata"]["uid"]
            await create_pods(kube, [pod_manifest("urgent", cpu="2", scheduler=profile, priorityClassName=high)])

            async def preempted() -> None:
                pods = await api_pods(kube)
                assert pods["urgent"]["spec"].get("nodeName") == node, pods["urgent"]["status"]
                assert pods["urgent"]["status"].get("nominatedNodeName") == node, pods["urgent"]["status"]
                assert "victim" not in pods or pods["victim"]["metadata"]["uid"] != victim_uid
                assert pods["protected"]["spec"].get("nodeName") == node  # its budget kept it
                reasons = [e["reason"] for e in await events_of(kube, "victim")]
                assert "Preempted" in reasons, reasons

            await eventually(preempted, timeout=30, interval=0.2)
            record = await state.get_pod(victim_uid)
            assert record is not None and record.phase is PodPhase.DELETED and record.reason == "Preempted"
        assert await check_invariants(state) == []
    finally:
        for name in (low, high):
            with contextlib.suppress(KubeAPIError):
                await kube.client.delete(PRIORITY_CLASSES, name)


async def test_a_pod_group_from_the_api_is_placed_all_together_or_not_at_all(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """A PodGroup (scheduler-plugins' CRD, from the chart) of three: with room for two, none is
    bound; once a node more joins, all three are."""
    await install_pod_group_crd(kube.client)
    profile = f"kubus-{kube.namespace}"
    await kube.make_nodes(2, cpu="2")
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "train"},
             "spec": {"minMember": 3, "scheduleTimeoutSeconds": 5}}  # fmt: skip
    await kube.client.create(POD_GROUPS, group, namespace=kube.namespace)
    members = []
    for i in range(3):
        member = pod_manifest(f"worker-{i}", cpu="1500m", scheduler=profile)
        member["metadata"]["labels"][POD_GROUP_LABEL] = "train"
        members.append(member)
    async with cluster_mode(settings, kube, profile, GANG_PLUGINS):
        await create_pods(kube, members)

        async def all_waiting() -> None:
            pods = await api_pods(kube)
            for name in ("worker-0", "worker-1", "worker-2"):
                scheduled = condition(pods[name], "PodScheduled")
                assert scheduled is not None and scheduled["status"] == "False", pods[name]["status"]

        await eventually(all_waiting, timeout=30, interval=0.2)
        await asyncio.sleep(2)  # a member placed alone would be bound by now
        assert not any(p["spec"].get("nodeName") for p in (await api_pods(kube)).values())
        await kube.make_nodes(1, cpu="2")

        async def all_bound() -> None:
            pods = await api_pods(kube)
            assert all(pods[f"worker-{i}"]["spec"].get("nodeName") for i in range(3)), pods

        await eventually(all_bound, timeout=60, interval=0.2)
    assert await check_invariants(state) == []


async def test_the_pods_of_a_service_are_spread_by_the_system_default_constraints(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """A Service of the apiserver reaches the cycle: its six pods, on one big node and two small
    ones in three zones, are spread 2/2/2 by PodTopologySpread's system defaults (without it,
    the big node takes most), as kube-scheduler spreads them. The Service deleted, the store
    forgets it."""
    profile = f"kubus-{kube.namespace}"
    [big] = await kube.make_nodes(1, cpu="64")
    small = await kube.make_nodes(2, cpu="16", zones=("zone-b", "zone-c"))
    service = {"metadata": {"name": "web"}, "spec": {"clusterIP": "None", "selector": {"app": "web"}}}
    await kube.client.create(SERVICES, service, namespace=kube.namespace)
    replica_set = {
        "metadata": {"name": "web-1"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_manifest("t")["spec"]},
        },
    }
    await kube.client.create(REPLICA_SETS, {**replica_set, "spec": {**replica_set["spec"], "replicas": 0}},
                             namespace=kube.namespace)  # fmt: skip
    pods = []
    for i in range(6):
        p = pod_manifest(f"web-{i}", cpu="500m", memory="1Gi", scheduler=profile)
        p["metadata"]["labels"] = {"app": "web"}
        pods.append(p)
    async with cluster_mode(settings, kube, profile):

        async def stored() -> None:
            keys = {w.key for w in (await state.workloads()).objects}
            assert {f"Service/{kube.namespace}/web", f"ReplicaSet/{kube.namespace}/web-1"} <= keys, keys

        await eventually(stored, timeout=30, interval=0.2)
        for p in pods:  # one by one: each pod's spreading sees the ones before it
            await create_pods(kube, [p])

            async def bound(name: str = p["metadata"]["name"]) -> None:
                assert (await api_pods(kube))[name]["spec"].get("nodeName")

            await eventually(bound, timeout=30, interval=0.1)
        placed = [p["spec"]["nodeName"] for p in (await api_pods(kube)).values()]
        nodes = [big["metadata"]["name"], *(n["metadata"]["name"] for n in small)]
        assert sorted(placed.count(n) for n in nodes) == [2, 2, 2], placed
        await kube.client.delete(SERVICES, "web", namespace=kube.namespace)

        async def forgotten() -> None:
            keys = {w.key for w in (await state.workloads()).objects}
            assert f"Service/{kube.namespace}/web" not in keys, keys

        await eventually(forgotten, timeout=30, interval=0.2)
    assert await check_invariants(state) == []


async def test_a_pod_kubus_cannot_read_gets_a_failed_scheduling_event_naming_the_field(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """The apiserver lets in what kubus refuses (a kubus.io annotation that is not a quantity):
    the pod gets a FailedScheduling event naming the field, and the watch goes on (the next pod
    is bound)."""
    profile = f"kubus-{kube.namespace}"
    await kube.make_nodes(1, cpu="4")
    bad = pod_manifest("bad", scheduler=profile)
    bad["metadata"]["annotations"] = {"kubus.io/gpu-memory": "lots"}
    async with cluster_mode(settings, kube, profile):
        await create_pods(kube, [bad, pod_manifest("good", scheduler=profile)])

        async def reported() -> None:
            failed = [e for e in await events_of(kube, "bad") if e["reason"] == "FailedScheduling"]
            assert failed and "kubus.io/gpu-memory" in failed[0]["note"], failed
            assert (await api_pods(kube))["good"]["spec"].get("nodeName")

        await eventually(reported, timeout=30, interval=0.2)
    assert await check_invariants(state) == []


async def test_a_thousand_pods_on_500_nodes_are_bound_where_kubus_simulate_places_them(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """1,000 pods of mixed sizes on 500 nodes of three sizes, all through the apiserver: every pod
    bound, each to the node `kubus simulate` gives it for the same manifests (the queue holds them
    all before the cycle starts, so both schedule them in the same order)."""
    profile = f"kubus-{kube.namespace}"
    for cpu, count in (("4", 200), ("8", 200), ("16", 100)):
        await kube.make_nodes(count, cpu=cpu)
    sizes = ("100m", "250m", "500m", "1", "2")
    for start in range(0, 1000, 100):
        await asyncio.gather(
            *(
                kube.client.create(
                    PODS, pod_manifest(f"p{i:04d}", cpu=sizes[i % len(sizes)], scheduler=profile),
                    namespace=kube.namespace,
                )
                for i in range(start, start + 100)
            )
        )  # fmt: skip
    config = scheduler_config(profile)
    registry = in_tree_registry()
    waiting = WaitingPods()
    framework = Framework.from_profile(config.profile(profile), registry, handle=waiting)
    queue_first: list[Service] = [
        WatcherService(settings, kube.config(), config, WatcherOptions(heartbeat_interval=1.0)),
        QueueService(settings, config, QueueOptions(flush_interval=0.05, in_flight_interval=0.05), registry=registry),
    ]
    binder_client = KubeClient(kube.config())
    then: list[Service] = [
        CycleService(settings, framework, CycleOptions(lease_ttl=1.0, renew_interval=0.1, pop_wait_ms=50,
                                                       request_timeout=1.0, backend="numpy"),
                     waiting=waiting, name=f"cycle-{profile}"),
        BinderService(settings, BinderOptions(fetch_timeout=0.2), frameworks={profile: framework},
                      apiserver=ApiBinding(binder_client)),
    ]  # fmt: skip
    try:
        for service in queue_first:
            await service.start()
        queue = queue_first[1]
        assert isinstance(queue, QueueService)

        async def all_queued() -> None:
            assert len(queue.queues[profile]) == 1000

        await eventually(all_queued, timeout=60, interval=0.2)
        for service in then:
            await service.start()

        async def all_bound() -> dict[str, dict[str, Any]]:
            pods = await api_pods(kube)
            assert len(pods) == 1000 and all(p["spec"].get("nodeName") for p in pods.values())
            return pods

        pods = await eventually(all_bound, timeout=120, interval=0.5)
    finally:
        for service in reversed([*queue_first, *then]):
            with contextlib.suppress(Exception):
                await service.stop(timeout=5)
        await binder_client.close()
    nodes = [n for n in (await kube.client.list(NODES)).items if n["metadata"]["name"].startswith(kube.namespace)]
    items = [{**n, "kind": "Node"} for n in nodes] + [{**p, "kind": "Pod"} for p in sorted(pods.values(), key=_name)]
    for pod in items[len(nodes) :]:  # as they were before kubus bound them
        pod["spec"] = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    simulated, _ = simulate(parse_manifests(codec.dumps({"kind": "List", "items": items})), config,
                            backend=select_backend("numpy"))  # fmt: skip
    want = {o.pod.name: o.node for o in simulated}
    got = {name: p["spec"]["nodeName"] for name, p in pods.items()}
    differ = sorted(name for name in want if want[name] != got[name])
    examples = [(n, got[n], want[n]) for n in differ[:3]]
    assert not differ, f"{len(differ)} of 1000 placed elsewhere than simulate, e.g. {examples}"
    assert await check_invariants(state) == []


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


async def test_a_preemptor_is_bound_only_once_its_victim_is_gone_from_the_apiserver(
    settings: ConnectionSettings, state: ClusterState, kube: KubeTest
) -> None:
    """The victim has a grace period: deleted, it stays (Terminating) until its kubelet stops it.
    The preemptor is nominated at once and bound only after the victim is gone, as kube does (a
    kubelet would refuse it while the victim holds the room). No kubelet here: the test plays
    it, removing the victim. The binder looks at the apiserver only every 120 s unless it hears
    the victim's deletion from the watcher: the preemptor is bound within 30 s only by that."""
    profile = f"kubus-{kube.namespace}"
    [node] = [n["metadata"]["name"] for n in await kube.make_nodes(1, cpu="2")]
    low, high = f"low-{kube.namespace}", f"high-{kube.namespace}"
    for name, value in ((low, 10), (high, 1000)):
        await kube.client.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
    try:
        async with cluster_mode(settings, kube, profile, victim_poll=120):
            victim = pod_manifest("victim", cpu="2", scheduler=profile, priorityClassName=low,
                                  terminationGracePeriodSeconds=30)  # fmt: skip
            await create_pods(kube, [victim])
            await eventually(lambda: _bound(kube, "victim"), timeout=30, interval=0.2)
            await create_pods(kube, [pod_manifest("urgent", cpu="2", scheduler=profile, priorityClassName=high)])

            async def nominated_and_victim_terminating() -> None:
                pods = await api_pods(kube)
                assert pods["urgent"]["status"].get("nominatedNodeName") == node, pods["urgent"]["status"]
                assert pods["victim"]["metadata"].get("deletionTimestamp"), pods["victim"]["metadata"]

            await eventually(nominated_and_victim_terminating, timeout=30, interval=0.2)
            await asyncio.sleep(2)
            assert not (await api_pods(kube))["urgent"]["spec"].get("nodeName")  # waits for the victim
            await kube.client.delete(PODS, "victim", namespace=kube.namespace, grace_period_seconds=0)
            await eventually(lambda: _bound(kube, "urgent"), timeout=30, interval=0.2)
        assert await check_invariants(state) == []
    finally:
        for name in (low, high):
            with contextlib.suppress(KubeAPIError):
                await kube.client.delete(PRIORITY_CLASSES, name)


async def _bound(kube: KubeTest, name: str) -> None:
    assert (await api_pods(kube))[name]["spec"].get("nodeName")


async def test_the_watcher_says_in_one_line_why_it_cannot_start(settings: ConnectionSettings, kube: KubeTest) -> None:
    """A token the apiserver refuses, an apiserver out of reach: start fails with one line that
    says what to fix (the entry point exits 1 with it); nothing is left running."""
    config = scheduler_config("kubus-nope")
    for kube_config, expected in (
        (kube.config(token="not-a-token"), "token expired or invalid"),
        (kube.config(server="https://127.0.0.1:1"), "cannot reach the Kubernetes API at https://127.0.0.1:1"),
    ):
        watcher = WatcherService(settings, kube_config, config)
        with pytest.raises(WatcherStartError) as caught:
            await watcher.start()
        assert expected in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
        assert watcher.state is ServiceState.STOPPED
