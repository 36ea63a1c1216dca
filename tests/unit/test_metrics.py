"""Metrics in one registry per service, and the HTTP port that serves them with /healthz and /readyz."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import importlib
import platform
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support import http_get

from kubus.api.objects import CPU, PODS, Container, Node, NodeSpec, NodeStatus, ObjectMeta, Pod, PodSpec
from kubus.cli.connect import UsageError
from kubus.cli.endpoints import Endpoints, read_endpoints, write_endpoints
from kubus.cli.processes import DEFAULT_METRICS_BASE, cluster_services, free_metrics_ports, port_free
from kubus.cli.up import _metrics_ports as up_metrics_ports
from kubus.core.metrics import COMMON_FAMILIES, SERVICE_FAMILIES, Metrics, MetricsPortError, serve_metrics
from kubus.cycle import NodeSnapshot
from kubus.kernels.nodeinfo import PodInfo
from kubus.queue import SchedulingQueue
from kubus.runtime.service import Service, ServiceError
from kubus.store import Reservation, ReservationState


def test_each_service_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.schedule_attempts.labels("scheduled", "default-scheduler").inc(3)
    assert b'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 3.0' in a.exposition()
    assert b"scheduler_schedule_attempts_total{" not in b.exposition()


def test_served_over_http() -> None:
    m = Metrics()
    m.pending_pods.labels("active").set(5)
    server, thread = serve_metrics(m, 0, "127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read()
        assert b'scheduler_pending_pods{queue="active"} 5.0' in body
    finally:
        server.shutdown()
        thread.join(5)


class _Crasher(Service):
    """A service whose one root task dies at once."""

    async def on_start(self) -> None:
        # Stands in for a loop that crashes.
        self.spawn("crasher", self._crash)

    async def _crash(self) -> None:
        raise ValueError("boom")


async def test_health_follows_the_service_lifecycle() -> None:
    service = Service("probed")  # no settings: running is all readiness asks
    server, thread = serve_metrics(service.metrics, 0, "127.0.0.1", health=service)
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        # Requests from another thread: /readyz runs in this loop, which must stay free to answer.
        assert await asyncio.to_thread(http_get, f"{base}/healthz") == (200, "ok")
        assert await asyncio.to_thread(http_get, f"{base}/readyz") == (503, "service new")
        await service.start()
        assert await asyncio.to_thread(http_get, f"{base}/readyz") == (200, "ok")
        assert (await asyncio.to_thread(http_get, f"{base}/metrics"))[0] == 200
        await service.stop()
        assert await asyncio.to_thread(http_get, f"{base}/healthz") == (503, "service stopped")
        assert await asyncio.to_thread(http_get, f"{base}/readyz") == (503, "service stopped")
    finally:
        server.shutdown()
        thread.join(5)


async def test_a_dead_root_task_fails_liveness() -> None:
    service = _Crasher("crashing")
    server, thread = serve_metrics(service.metrics, 0, "127.0.0.1", health=service)
    try:
        with pytest.raises(ServiceError):
            await service.run()
        status, reason = await asyncio.to_thread(http_get, f"http://127.0.0.1:{server.server_port}/healthz")
        assert status == 503 and reason.startswith("root task 'crasher' died: ValueError('boom')")
    finally:
        server.shutdown()
        thread.join(5)


async def test_a_blocked_event_loop_is_not_ready() -> None:
    service = Service("busy")
    server, thread = serve_metrics(service.metrics, 0, "127.0.0.1", health=service, ready_timeout=0.1)
    try:
        await service.start()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(http_get, f"http://127.0.0.1:{server.server_port}/readyz")
            time.sleep(1.5)  # a long synchronous computation: the loop cannot run readiness()
            assert await asyncio.wrap_future(answer) == (503, "event loop busy: no answer within 1.1s")
        await service.stop()
    finally:
        server.shutdown()
        thread.join(5)


# -- what each service exports --------------------------------------------------------------------

_PROCESS = {
    "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds",
}  # fmt: skip
_SERVICES = {  # folder -> (module, class, role)
    "queue": ("kubus.queue.service", "QueueService", "queue"),
    "cycle": ("kubus.cycle.service", "CycleService", "cycle"),
    "binder": ("kubus.binder.service", "BinderService", "binder"),
    "gpu-agent": ("kubus.gpu_agent.service", "AgentService", "gpu-agent"),
    "watcher": ("kubus.watcher.service", "WatcherService", "watcher"),
}
_SERVICES_DIR = Path(__file__).resolve().parents[2] / "services"


@pytest.mark.parametrize("role", sorted(SERVICE_FAMILIES))
def test_a_service_exports_its_own_families_and_the_process_ones(role: str) -> None:
    exported = Metrics(service=role).exported()
    own = exported - {n for n in exported if n.startswith("process_")}
    assert own == SERVICE_FAMILIES[role] | COMMON_FAMILIES
    assert exported >= _PROCESS
    body = Metrics(service=role).exposition().decode()
    assert f'kubus_build_info{{python="{platform.python_version()}",service="{role}",version=' in body
    others = set().union(*SERVICE_FAMILIES.values()) - SERVICE_FAMILIES[role]
    assert not [n for n in others if f"# TYPE {n.removesuffix('_total')} " in body]


def test_an_unknown_service_is_refused() -> None:
    with pytest.raises(ValueError, match="no metrics for service 'schedular'"):
        Metrics(service="schedular")


@pytest.mark.parametrize("folder", sorted(_SERVICES))
def test_each_service_updates_exactly_the_families_it_exports(folder: str) -> None:
    """Read from the code: every ``metrics.<family>`` a service touches is exported by it, and
    every family it exports (but the common ones, which `Metrics` sets itself) is touched."""
    module, cls, role = _SERVICES[folder]
    assert getattr(importlib.import_module(module), cls).metrics_role == role
    every = Metrics()
    names = {attr: name for name, metric in every.families.items() for attr, value in vars(every).items()
             if value is metric}  # fmt: skip
    used = set()
    for path in (_SERVICES_DIR / folder).glob("*.py"):
        used |= {names[a] for a in re.findall(r"\bmetrics\.(\w+)", path.read_text()) if a in names}
    assert used <= SERVICE_FAMILIES[role] | COMMON_FAMILIES, f"{folder} updates families it does not export"
    assert SERVICE_FAMILIES[role] <= used, f"{folder} exports families it never updates"


def test_the_missing_kube_names_are_defined_as_kube_defines_them() -> None:
    m = Metrics()
    m.e2e_scheduling_duration.labels(result="scheduled", profile="p").observe(0.003)
    m.cache_size.labels(type="assumed_pods").set(2)
    m.inflight_events.labels(event="NodeAdd").set(1)
    body = m.exposition().decode()
    assert 'scheduler_e2e_scheduling_duration_seconds_bucket{le="0.004",profile="p",result="scheduled"} 1.0' in body
    assert 'scheduler_e2e_scheduling_duration_seconds_bucket{le="16.384",profile="p",result="scheduled"} 1.0' in body
    assert 'scheduler_cache_size{type="assumed_pods"} 2.0' in body
    assert 'scheduler_inflight_events{event="NodeAdd"} 1.0' in body
    assert "# TYPE scheduler_goroutines gauge" in body


async def test_goroutines_count_the_event_loops_tasks_by_operation() -> None:
    m = Metrics(service="watcher")
    server, thread = serve_metrics(m, 0, "127.0.0.1")  # from this loop: samplers run in it
    release = asyncio.Event()
    tasks = [asyncio.create_task(release.wait(), name=f"watcher: status writer {i}") for i in range(3)]
    tasks.append(asyncio.create_task(release.wait()))  # unnamed, as a library's
    try:
        status, body = await asyncio.to_thread(http_get, f"http://127.0.0.1:{server.server_port}/metrics")
        assert status == 200
        assert 'scheduler_goroutines{operation="status writer"} 3.0' in body
        assert 'scheduler_goroutines{operation="unnamed"}' in body  # this one, and the test's own
        release.set()
        await asyncio.gather(*tasks)
        body = (await asyncio.to_thread(http_get, f"http://127.0.0.1:{server.server_port}/metrics"))[1]
        assert 'operation="status writer"' not in body  # gone with its tasks
    finally:
        server.shutdown()
        thread.join(5)


def test_a_sampler_that_raises_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics(service="cycle")

    def broken() -> None:
        raise RuntimeError("table gone")

    m.sample(broken)
    m.sample(lambda: m.cache_size.labels(type="nodes").set(7))
    assert b'scheduler_cache_size{type="nodes"} 7.0' in m.exposition()
    assert "metrics sampler failed" in caplog.text


def test_a_taken_port_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortError, match=f"^metrics port {port} on 127.0.0.1: already in use"):
            serve_metrics(Metrics(), port, "127.0.0.1")


# -- the samplers' sources: the queue's in-flight events, the cycle's cache ------------------------


def test_inflight_events_are_those_kept_for_the_pods_in_flight() -> None:
    queue = SchedulingQueue("p")
    assert queue.inflight_events() == {}
    queue.add(Pod(ObjectMeta(name="a", namespace="default", uid="uid-a"), PodSpec()), b"{}")
    queue.move_for_event("node.added")  # nothing in flight: not kept
    [entry] = queue.pop(1)
    queue.move_for_event("node.added")
    queue.move_for_event("pod.deleted")
    assert queue.inflight_events() == {"NodeAdd": 1, "AssignedPodDelete": 1}
    queue.done(entry.uid)
    assert queue.inflight_events() == {}


def test_cache_size_counts_nodes_pods_and_the_unbound_ones() -> None:
    snapshot = NodeSnapshot()
    assert snapshot.sizes() == (0, 0, 0)

    def reservation(name: str, *, bound: bool) -> Reservation:
        pod = Pod(ObjectMeta(name=name, uid=f"uid-{name}"), PodSpec(containers=(Container("c", "busybox"),)))
        r = Reservation.of(PodInfo.of(pod).placed_on(()), "n1", attempt=1)
        return dataclasses.replace(r, state=ReservationState.BOUND) if bound else r

    n1 = Node(ObjectMeta(name="n1", namespace=""), NodeSpec(), NodeStatus(allocatable={CPU: 4000, PODS: 110}))
    snapshot.load([(n1, [reservation("a", bound=True), reservation("b", bound=False)])])
    assert snapshot.sizes() == (1, 2, 1)
    snapshot.load([(n1, [reservation("a", bound=True), reservation("b", bound=True)])])  # b's bind, read
    assert snapshot.sizes() == (1, 2, 0)


# -- kubus up's metrics ports -----------------------------------------------------------------------


def _up_args(metrics_base: int | None) -> argparse.Namespace:
    return argparse.Namespace(metrics_base=metrics_base, nodes=2, binders=1, standby=False)


def test_kubus_up_picks_free_ports_skipping_a_taken_one() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free(port)
        assert free_metrics_ports(2, port) == [port + 1, port + 2] or not port_free(port + 1)
        # queue, one cycle, one binder, the gpu-agent: four free ports from 10260 up
        ports = up_metrics_ports(_up_args(None), ("default-scheduler",), None)
        assert len(ports) == 4 and min(ports) >= DEFAULT_METRICS_BASE and all(map(port_free, ports))
        with pytest.raises(UsageError, match=rf"--metrics-base {port - 1}: port {port} is already in use"):
            up_metrics_ports(_up_args(port - 1), ("default-scheduler",), None)
    assert up_metrics_ports(_up_args(0), ("default-scheduler",), None) == []


def test_the_services_get_their_ports_and_kubus_up_records_the_urls(tmp_path: Path) -> None:
    specs = cluster_services(profiles=("a", "b"), config=None, nodes=0, node_template=None, metrics_ports=(7, 8, 9, 10))
    assert [(s.name, s.metrics_port) for s in specs] == [("queue", 7), ("cycle-a", 8), ("cycle-b", 9), ("binder", 10)]
    assert specs[0].args[-2:] == ("--metrics-port", "7")
    assert specs[0].metrics_url == "http://127.0.0.1:7/metrics"
    with pytest.raises(ValueError, match="2 metrics ports for 4 services"):
        cluster_services(profiles=("a", "b"), config=None, nodes=0, node_template=None, metrics_ports=(7, 8))
    urls = {s.name: s.metrics_url for s in specs if s.metrics_url}
    write_endpoints(tmp_path, Endpoints("nats://x", "redis://y", metrics=urls))
    recorded = read_endpoints(tmp_path)
    assert recorded is not None and recorded.metrics == urls
