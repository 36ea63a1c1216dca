"""kubus as the scheduler of a real kube-apiserver (cluster mode): the watcher, queue, cycle and
binder in this process, over the test's NATS and Redis, against the session's etcd +
kube-apiserver. Pods are created through the API with the test's own schedulerName, and what
kubus does is read back from the API: spec.nodeName, conditions, events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from kube_support import KubeTest, pod_manifest
from support import eventually

from kubus.binder import BinderOptions, BinderService
from kubus.binder.apiserver import ApiBinding
from kubus.cycle import CycleOptions, CycleService
from kubus.framework.config import SchedulerConfiguration, load_config
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.kubeapi import EVENTS, PODS, KubeClient
from kubus.plugins import in_tree_registry
from kubus.queue import QueueOptions, QueueService
from kubus.service import Service
from kubus.settings import ConnectionSettings
from kubus.store import ClusterState, PodPhase, check_invariants
from kubus.watcher import WatcherOptions, WatcherService

pytestmark = [pytest.mark.integration, pytest.mark.kube]


def scheduler_config(profile: str) -> SchedulerConfiguration:
    text = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {profile}
"""
    return load_config(text, registry=in_tree_registry())


@contextlib.asynccontextmanager
async def cluster_mode(settings: ConnectionSettings, kube: KubeTest, profile: str) -> AsyncIterator[list[Service]]:
    """The watcher, queue, one cycle and one binder for ``profile``, bound to the test's
    apiserver; stopped after."""
    config = scheduler_config(profile)
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
            apiserver=ApiBinding(binder_client),
        ),
    ]
    try:
        for service in services:
            await service.start()
        watcher = services[0]
        assert isinstance(watcher, WatcherService)
        await asyncio.wait_for(watcher.synced(), 30)
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
        reasons = [(e["regarding"]["name"], e["reason"]) for e in events]
        assert sorted(n for n, r in reasons if r == "Scheduled") == sorted(p["metadata"]["name"] for p in mine)

    await eventually(scheduled_events, timeout=20)
    assert await check_invariants(state) == []
