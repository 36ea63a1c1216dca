"""The service lifecycle, with no servers: start, stop, failures, signals, structured logs."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import eventually

from kubus.core.settings import ConnectionSettings
from kubus.runtime.entrypoint import GC_GEN0_THRESHOLD, tune_gc
from kubus.runtime.service import RUNNING_EVENT, Service, ServiceError, ServiceState, install_signal_handlers, logger


class Recorder(Service):
    """A service whose root tasks and hooks write what happens into ``events``."""

    def __init__(self, *, fail: str | None = None, stop_hook_delay: float = 0.0) -> None:
        super().__init__("recorder")
        self.events: list[str] = []
        self._fail = fail
        self._stop_hook_delay = stop_hook_delay
        self.running = asyncio.Event()

    async def on_start(self) -> None:
        self.events.append("on_start")
        # Stands in for a work loop: runs until cancelled, noting how it ended.
        self.spawn("worker", self._worker)
        # Stands in for a loop that can crash; it crashes when asked to.
        self.spawn("crasher", self._crasher)

    async def on_stop(self) -> None:
        self.events.append(f"on_stop stopping={self.stopping.is_set()} worker_alive={not self._worker_done()}")
        await asyncio.sleep(self._stop_hook_delay)

    def _worker_done(self) -> bool:
        return "worker cancelled" in self.events

    async def _worker(self) -> None:
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.events.append("worker cancelled")
            raise

    async def _crasher(self) -> None:
        await self.running.wait()
        if self._fail:
            raise ValueError(self._fail)


class FakeSubscription:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def unsubscribe(self) -> None:
        self.events.append("unsubscribed")


async def test_start_run_stop_in_order() -> None:
    service = Recorder()
    service.intake(FakeSubscription(service.events))
    await service.start()
    assert service.state is ServiceState.RUNNING
    await service.running.wait()
    await service.stop()
    assert service.state is ServiceState.STOPPED
    assert service.events == [
        "on_start",
        "unsubscribed",
        "on_stop stopping=True worker_alive=True",
        "worker cancelled",
    ]


async def test_stop_is_idempotent_and_safe_before_start() -> None:
    never_started = Recorder()
    await never_started.stop()
    await never_started.stop()
    assert never_started.state is ServiceState.STOPPED
    assert never_started.events == []
    with pytest.raises(RuntimeError, match="runs once"):
        await never_started.start()

    service = Recorder()
    await service.start()
    await service.stop()
    await service.stop()
    assert service.events.count("worker cancelled") == 1


async def test_concurrent_stops_share_one_shutdown() -> None:
    service = Recorder(stop_hook_delay=0.05)
    await service.start()
    await asyncio.gather(service.stop(), service.stop(), service.stop())
    assert [e for e in service.events if e.startswith("on_stop")] == ["on_stop stopping=True worker_alive=True"]


async def test_run_returns_when_stopped() -> None:
    service = Recorder()
    runner = asyncio.create_task(service.run())
    await service.running.wait()
    await service.stop()
    await asyncio.wait_for(runner, 5)
    assert runner.result() is None


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING, logging.ERROR])
async def test_service_running_is_logged_at_any_log_level(caplog: pytest.LogCaptureFixture, level: int) -> None:
    """Supervisors (kubus up, kubus bench) wait for this line in the log, whatever the level
    the services run at (kubus bench runs them at warning)."""
    service = Recorder()
    with caplog.at_level(level, logger="kubus.recorder"):
        await service.start()
        await service.stop()
    running = [r for r in caplog.records if f'event="{RUNNING_EVENT}"' in r.getMessage()]
    assert len(running) == 1 and running[0].levelno == max(logging.INFO, level)


async def test_a_dying_root_task_stops_the_service_and_run_names_it(caplog: pytest.LogCaptureFixture) -> None:
    service = Recorder(fail="disk on fire")
    with caplog.at_level(logging.INFO, logger="kubus.recorder"), pytest.raises(ServiceError) as caught:
        await asyncio.wait_for(service.run(), 5)
    assert caught.value.task == "crasher"
    assert "crasher" in str(caught.value) and "disk on fire" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)
    assert service.state is ServiceState.STOPPED
    assert "worker cancelled" in service.events
    died = [r for r in caplog.records if "root task died" in r.getMessage()]
    assert died and died[0].levelno == logging.CRITICAL and died[0].exc_info
    assert "task=crasher" in died[0].getMessage()


async def test_async_with_starts_and_stops() -> None:
    async with Recorder() as service:
        assert service.state is ServiceState.RUNNING
    assert service.state is ServiceState.STOPPED


async def test_stop_during_start_cancels_the_start() -> None:
    class SlowStart(Service):
        async def on_start(self) -> None:
            await asyncio.Event().wait()

    service = SlowStart("slow")
    starting = asyncio.create_task(service.start())
    await asyncio.sleep(0)  # let start() begin
    await service.stop()
    await asyncio.wait_for(starting, 5)
    assert service.state is ServiceState.STOPPED


async def test_cancelling_run_stops_the_service() -> None:
    service = Recorder()
    runner = asyncio.create_task(service.run())
    await service.running.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert service.state is ServiceState.STOPPED
    assert "worker cancelled" in service.events


async def test_on_stop_is_bounded_by_the_timeout() -> None:
    service = Recorder(stop_hook_delay=30)
    await service.start()
    await asyncio.wait_for(service.stop(timeout=0.1), 5)
    assert service.state is ServiceState.STOPPED


async def test_spawn_outside_a_running_service_is_an_error() -> None:
    service = Recorder()
    with pytest.raises(RuntimeError, match="spawn"):
        service.spawn("late", asyncio.sleep, 0)


async def test_sigterm_stops_the_service() -> None:
    service = Recorder()
    uninstall = install_signal_handlers(service)
    try:
        runner = asyncio.create_task(service.run())
        await service.running.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(runner, 5)
        assert service.state is ServiceState.STOPPED
    finally:
        uninstall()


def test_structured_logger_writes_one_key_value_line(caplog: pytest.LogCaptureFixture) -> None:
    log = logger("kubus.test").bind(service="binder")
    with caplog.at_level(logging.INFO, logger="kubus.test"):
        log.info("pod bound", pod="ns/name", node="n1", reason='said "no" twice')
        log.debug("not shown")
    [record] = caplog.records
    assert record.getMessage() == 'event="pod bound" service=binder pod=ns/name node=n1 reason="said \\"no\\" twice"'
    assert record.kubus_fields == {  # type: ignore[attr-defined]
        "event": "pod bound",
        "service": "binder",
        "pod": "ns/name",
        "node": "n1",
        "reason": 'said "no" twice',
    }
    assert record.funcName == "test_structured_logger_writes_one_key_value_line"


async def test_stop_while_connecting_leaves_nothing_behind() -> None:
    service = Service("lonely", ConnectionSettings(nats_url="nats://127.0.0.1:1", connect_timeout=30))
    starting = asyncio.create_task(service.start())
    await asyncio.sleep(0.05)  # connecting: refused, retrying
    await asyncio.wait_for(service.stop(), 5)
    await asyncio.wait_for(starting, 5)
    assert service.state is ServiceState.STOPPED
    assert service.nc is None
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []


async def test_an_unreachable_bus_fails_start_clearly() -> None:
    service = Service("lonely", ConnectionSettings(nats_url="nats://127.0.0.1:1", connect_timeout=0.2))
    with pytest.raises(ConnectionError, match="did not answer"):
        await service.start()
    assert service.state is ServiceState.STOPPED


async def test_a_stop_that_runs_out_of_time_says_what_it_abandoned() -> None:
    service = Recorder(stop_hook_delay=30)
    await service.start()
    await asyncio.wait_for(service.stop(timeout=0.1), 5)
    assert service.state is ServiceState.STOPPED
    assert len(service.abandoned) == 1 and "in-flight work not finished within 0.1s" in service.abandoned[0]


async def test_a_clean_stop_abandons_nothing() -> None:
    service = Recorder()
    await service.start()
    await service.stop()
    assert service.abandoned == ()


async def test_a_signal_while_stopping_calls_on_repeat() -> None:
    service = Recorder(stop_hook_delay=30)
    repeated: list[signal.Signals] = []
    uninstall = install_signal_handlers(service, timeout=5, on_repeat=repeated.append)
    try:
        runner = asyncio.create_task(service.run())
        await service.running.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(service.stopping.wait(), 5)
        os.kill(os.getpid(), signal.SIGINT)

        def repeated_once() -> None:
            assert repeated == [signal.SIGINT]

        await eventually(repeated_once)
        assert not runner.done()  # the first stop goes on; what to do now is on_repeat's call
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    finally:
        uninstall()


def test_kubus_profile_dir_profiles_a_service_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KUBUS_PROFILE_DIR: the run is profiled and the profile written, named for the service."""
    import pstats

    from kubus.runtime.entrypoint import PROFILE_DIR_ENV, _profiled

    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "profiles"))
    with _profiled("kubus.queue"):
        sum(i * i for i in range(10_000))
    [written] = (tmp_path / "profiles").iterdir()
    assert written.name.startswith("queue-") and written.suffix == ".prof"
    assert pstats.Stats(str(written)).total_calls > 0
    monkeypatch.delenv(PROFILE_DIR_ENV)
    with _profiled("kubus.cycle"):
        pass
    assert len(list((tmp_path / "profiles").iterdir())) == 1  # unset: nothing written


_ONE_SHOT_SERVICE = """
import argparse, asyncio, sys
from kubus.runtime.entrypoint import add_service_flags, run_service
from kubus.runtime.service import Service

class OneShot(Service):
    '''Says which event loop runs it, then stops itself.'''
    def __init__(self):
        super().__init__("one-shot")
    async def on_start(self):
        print(type(asyncio.get_running_loop()).__module__, flush=True)
        self.spawn("stopper", self._stop)
    async def _stop(self):
        await self.stop()

parser = argparse.ArgumentParser()
add_service_flags(parser)
if "--without-uvloop" in sys.argv:
    sys.modules["uvloop"] = None  # an import of it now fails, as where it is not installed
    sys.argv.remove("--without-uvloop")
sys.exit(run_service("kubus.one-shot", parser.parse_args(sys.argv[1:]), lambda args: OneShot()))
"""


@pytest.mark.parametrize(("flags", "module"), [((), "uvloop"), (("--event-loop", "asyncio"), "asyncio")])
def test_a_service_runs_on_uvloop_unless_asked_for_asyncios_loop(flags: tuple[str, ...], module: str) -> None:
    run = subprocess.run([sys.executable, "-c", _ONE_SHOT_SERVICE, *flags], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0].split(".")[0] == module


def test_event_loop_uvloop_where_it_is_missing_is_a_usage_error() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _ONE_SHOT_SERVICE, "--without-uvloop", "--event-loop", "uvloop"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "uvloop is not installed" in run.stderr and run.stdout == ""


def test_a_service_process_collects_garbage_rarely_and_never_its_start() -> None:
    """`run_service` tunes the cyclic collector before the loop runs: what was loaded to start
    with is frozen out of its sight, and a collection waits for many more allocations."""
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD > before[0]
        assert gc.get_threshold()[1:] == before[1:]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
