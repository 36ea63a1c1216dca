import urllib.request

from kubus.metrics import Metrics, serve_metrics


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
