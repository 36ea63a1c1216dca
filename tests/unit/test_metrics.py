"""Metrics in one registry per service, and the HTTP port that serves them with /healthz and /readyz."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import urllib.error
import urllib.request

import pytest
from support import http_get

from kubus.metrics import Metrics, serve_metrics
from kubus.service import Service, ServiceError


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
