"""Finishing (`Finishing`): a pod this agent runs stops when its run time is up (one timer for
every pod: Running → Succeeded, its room released, ``pod.finished``) or when it is deleted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.bus import EventKind, event_filter
from kubus.bus.messages import ClusterEvent, MessageError, PodChange, decode
from kubus.core.metrics import Metrics
from kubus.gpu_agent._plumbing import each, log_failure, publish_pod_event
from kubus.gpu_agent.running import RunningPod, RunningPods
from kubus.runtime.service import StructuredLogger, Throttle
from kubus.store import ClusterState, EventType, PodEvent, PodPhase, StoreCode

__all__ = ["Finishing"]


class Finishing:
    """Finishes the pods whose run time is up, and stops the deleted ones."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        running: RunningPods,
        concurrency: int,
        clock: Callable[[], float],
        source: str,
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        """``running``: the pods the agent runs, with their timer; ``concurrency``: finishes at
        once, at most; ``source``: who records the pod events it writes."""
        self.store = store
        self.js = js
        self.running = running
        self.concurrency = concurrency
        self.clock = clock
        self.source = source
        self.log = log
        self.metrics = metrics
        self._unbacked_deletions = Throttle()
        """The throttle of "pod.deleted event ignored" lines (a forged event in a loop)."""

    async def finish_due(self, stopping: asyncio.Event) -> None:
        """Finish each pod when its run time is up (one timer for every pod), until ``stopping``
        is set (set `RunningPods.wake` too, so that a wait for the next deadline ends at once)."""
        timer = self.running
        while not stopping.is_set():
            now = self.clock()
            due = timer.due(now)
            if due:
                await each(due, self._finish_guarded, concurrency=self.concurrency)
                continue
            timer.wake.clear()
            deadline = timer.next_deadline()
            timeout = max(0.0, deadline - now) if deadline is not None else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(timer.wake.wait(), timeout)

    async def _finish_guarded(self, pod: RunningPod) -> None:
        try:
            await self.finish(pod)
        except Exception as exc:
            log_failure(self.log, "finishing a pod failed, retrying in a second", exc, pod=pod.key, uid=pod.uid)
            if self.running.get(pod.uid) is pod:
                self.running.schedule(pod, self.clock() + 1.0)

    async def finish(self, pod: RunningPod) -> None:
        """Running → Succeeded, release its room, ``pod.finished``. Idempotent; raises on
        Redis/NATS errors (the caller retries)."""
        write = await self.store.transition(pod.uid, PodPhase.SUCCEEDED, expected_phases={PodPhase.RUNNING})
        await self.store.release(pod.node, pod.uid)  # every outcome: the pod does not run here any more
        if write.code in (StoreCode.OK, StoreCode.ALREADY):
            if write.code is StoreCode.OK:
                ran = round(self.clock() - pod.started_at, 3)
                event = PodEvent(
                    self.clock(), EventType.NORMAL, "Completed", f"Pod ran {ran}s and succeeded", self.source
                )
                await self.store.append_event(pod.uid, event)
            await publish_pod_event(self.js, EventKind.POD_FINISHED, pod, at=self.clock(), phase=PodPhase.SUCCEEDED)
            self.log.info("pod succeeded", pod=pod.key, uid=pod.uid, node=pod.node)
        else:
            self.log.info("pod stopped: it moved on", pod=pod.key, uid=pod.uid, code=str(write.code))
        self.running.untrack(pod.uid)

    async def on_deleted(self, msg: Msg) -> None:
        """A ``pod.deleted`` event: stop the pod if it runs here and the store agrees it does not
        run any more (the queue released its room already; releasing again is idempotent). The
        event is a claim: one the store does not back (a forged or stale event about a pod still
        Running here) stops nothing and frees no room."""
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self.metrics.rejected_messages.labels(subject=event_filter(EventKind.POD_DELETED)).inc()
            self.log.warning("pod.deleted event unreadable", subject=msg.subject, error=str(exc))
            return
        uid: str | None = event.data.uid if isinstance(event.data, PodChange) else ""
        if not uid:  # no uid in the event: the pod of that name
            uid = self.running.uid_of(event.name)
        pod = self.running.get(uid) if uid else None
        if pod is None:
            return
        try:
            stopped = await self.store.not_running_here([(pod.node, pod.uid)])
        except Exception as exc:  # the resync finds a pod that really stopped
            log_failure(self.log, "pod.deleted event not checked: the store did not answer", exc, pod=pod.key)
            return
        if pod.uid not in stopped:
            if (dropped := self._unbacked_deletions.allow()) is not None:
                self.log.warning("pod.deleted event ignored: the store has the pod running here", pod=pod.key,
                                 uid=pod.uid, node=pod.node, ignored_before_unlogged=dropped)  # fmt: skip
            return
        if self.running.get(pod.uid) is not pod:
            return  # finished or stopped meanwhile
        self.running.untrack(pod.uid)
        try:
            await self.store.release(pod.node, pod.uid)
        except Exception as exc:
            log_failure(self.log, "release after deletion failed (the queue releases too)", exc, pod=pod.key)
        self.log.info("pod stopped: deleted", pod=pod.key, uid=pod.uid, node=pod.node, phase=str(stopped[pod.uid]))
