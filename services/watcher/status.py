"""What kubus decides, written to the apiserver as kube-scheduler writes it, so that `kubectl
describe pod` tells what `kubus describe pod` tells:

- ``pod.unschedulable`` (the queue, after an attempt that found no node): the PodScheduled
  condition False with kube's reason (Unschedulable, or SchedulerError) and message, and a
  Warning ``FailedScheduling`` event;
- ``pod.deleted`` of a preemption victim: the DisruptionTarget condition kube sets
  (PreemptionByScheduler), a ``Preempted`` event, the victim deleted through the API (only that
  uid), and the preemptor's status.nominatedNodeName;
- ``pod.rejected`` of a pod kubus could not read: a Warning ``FailedScheduling`` event naming
  the field, on that pod.

The Normal ``Scheduled`` event of a bound pod is the binder's, written where kube-scheduler's
binding cycle writes it (`kubus.binder.apiserver.ScheduledEvents`): the watcher does not hear of
bindings at all.

Events are events.k8s.io/v1, reported by the pod's profile (reportingController, as
kube-scheduler reports as its scheduler name); a repeat of an event (same pod, reason and note)
within `WatcherOptions.event_series_window` is counted in the first one's ``series`` instead of
a new object, as kube's event recorder does. Each write is conditional on the pod's uid (a pod
deleted and made again under its name is left alone); a pod that is gone is no error.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.aio.msg import Msg

from kubus.bus.messages import ClusterEvent, MessageError, PodChange, Rejection, decode
from kubus.bus.subjects import EventKind
from kubus.kubeapi import EVENTS, PODS, KubeAPIError, KubeClient, PatchType
from kubus.kubeapi.events import DEFAULT_REPORTER, micro_time, pod_event
from kubus.runtime.service import StructuredLogger, Throttle
from kubus.store import preemptor_of

__all__ = ["WATCHED_KINDS", "StatusWriter"]

WATCHED_KINDS = (EventKind.POD_UNSCHEDULABLE, EventKind.POD_DELETED, EventKind.POD_REJECTED)
"""The cluster events this part turns into apiserver writes."""

_SERIES_KEPT = 50_000
"""Recent events remembered for their series (one per pod, reason and note)."""

_NOMINATION_WINDOW = 60.0
"""Seconds a preemptor's nomination is remembered: its other victims' events nominate it no more."""

_NOMINATIONS_KEPT = 10_000
"""Preemptors whose nomination is remembered at most (the oldest forgotten first)."""


def rfc3339(seconds: float) -> str:
    """A time as kube writes it in conditions (second precision, UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class _Series:
    """One event object written, and how often it happened since."""

    namespace: str
    name: str
    count: int
    last: float


class StatusWriter:
    """Turns cluster events into the apiserver writes kube-scheduler makes (module docstring)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        log: StructuredLogger,
        instance: str,
        series_window: float = 360.0,
        clock: Callable[[], float] = time.time,
        evicting: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.log = log.bind(part="status")
        self.evicting = evicting
        """Told the uid of each preemption victim before it is deleted (`PodMirror.evicting`)."""
        self.instance = instance
        """reportingInstance of the events (kube: "<scheduler name>-<host>")."""
        self.series_window = series_window
        self.clock = clock
        self._series: OrderedDict[tuple[str, str, str], _Series] = OrderedDict()
        self._failures = Throttle(30.0)
        self._nominated: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """Preemptor key -> (the node it was last nominated to, when): one write per preemption."""

    def read(self, msg: Msg) -> ClusterEvent | None:
        """The cluster event ``msg`` carries (None for garbage, which is said)."""
        try:
            return decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self.log.warning("cluster event unreadable", subject=msg.subject, error=str(exc))
            return None

    async def write_one(self, event: ClusterEvent) -> Exception | None:
        """`write`, its failure returned: None when done (or the pod is gone), else the error to
        retry the event for."""
        try:
            await self.write(event)
        except KubeAPIError as exc:
            return None if exc.not_found else exc  # not found: the pod is gone, nothing to report on
        except Exception as exc:
            return exc
        return None

    async def write(self, event: ClusterEvent) -> None:
        """The apiserver writes ``event`` calls for (none for most). Raises KubeAPIError,
        KubeUnreachable."""
        uid = event.data.uid if isinstance(event.data, PodChange | Rejection) else ""
        profile = event.data.profile if isinstance(event.data, PodChange) else ""
        namespace, _, name = event.name.partition("/")
        if not name or not uid:
            return
        kind = EventKind(event.kind)
        if kind is EventKind.POD_UNSCHEDULABLE:
            reason = event.reason if event.reason in ("Unschedulable", "SchedulerError") else "Unschedulable"
            await self._condition(namespace, name, uid, "PodScheduled", "False", reason, event.message)
            await self._event(namespace, name, uid, "Warning", "FailedScheduling", event.message, profile)
        elif kind is EventKind.POD_DELETED and event.reason == "Preempted":
            await self._preempted(namespace, name, uid, event.message, profile)
        elif kind is EventKind.POD_REJECTED and event.message:
            await self._event(namespace, name, uid, "Warning", "FailedScheduling", event.message, profile)

    async def _preempted(self, namespace: str, name: str, uid: str, message: str, profile: str) -> None:
        """A victim: DisruptionTarget, its Preempted event, deleted (only this uid); the
        preemptor nominated to the node."""
        scheduler = profile or DEFAULT_REPORTER
        why = f"{scheduler}: preempting to accommodate a higher priority pod"
        try:
            await self._condition(namespace, name, uid, "DisruptionTarget", "True", "PreemptionByScheduler", why)
            await self._event(namespace, name, uid, "Normal", "Preempted", message, profile)
            if self.evicting is not None:
                self.evicting(uid)
            await self.client.delete(PODS, name, namespace=namespace, uid=uid, answer=False)
        except KubeAPIError as exc:
            if not (exc.not_found or exc.conflict):  # gone, or another pod of that name now
                raise
        preemptor = preemptor_of(message)
        now = self.clock()
        if preemptor is not None and not self._nominated_lately(*preemptor, now):
            # Once per preemption, as kube nominates, not once per victim: noted before the
            # write, so the other victims' writers (at once) leave it alone; forgotten on failure.
            key, node = preemptor
            self._nominated[key] = (node, now)
            self._nominated.move_to_end(key)
            while len(self._nominated) > _NOMINATIONS_KEPT:
                self._nominated.popitem(last=False)
            p_namespace, _, p_name = key.partition("/")
            try:
                await self.client.patch_status(
                    PODS, p_name, {"status": {"nominatedNodeName": node}}, namespace=p_namespace, answer=False
                )
            except BaseException as exc:
                if not (isinstance(exc, KubeAPIError) and exc.not_found):  # a preemptor gone is done
                    self._nominated.pop(key, None)
                    raise

    def _nominated_lately(self, key: str, node: str, now: float) -> bool:
        """Whether preemptor ``key`` was nominated to ``node`` within `_NOMINATION_WINDOW` seconds
        (by another victim of the same preemption: a pod made again under that name later is
        nominated again)."""
        last = self._nominated.get(key)
        return last is not None and last[0] == node and now - last[1] <= _NOMINATION_WINDOW

    async def _condition(
        self, namespace: str, name: str, uid: str, type_: str, status: str, reason: str, message: str
    ) -> None:
        """Set one condition of the pod (strategic merge: by type), only on that uid."""
        now = rfc3339(self.clock())
        patch = {
            "metadata": {"uid": uid},
            "status": {
                "conditions": [
                    {
                        "type": type_,
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    }
                ]
            },
        }
        try:
            await self.client.patch_status(
                PODS, name, patch, namespace=namespace, patch_type=PatchType.STRATEGIC, answer=False
            )
        except KubeAPIError as exc:
            if exc.conflict:  # the uid precondition: another pod of that name now
                return
            raise

    async def _event(  # the fields of an event
        self, namespace: str, name: str, uid: str, type_: str, reason: str, note: str, profile: str
    ) -> None:
        """An events.k8s.io/v1 Event about the pod, or one more in the series of the last like it."""
        now = self.clock()
        key = (uid, reason, note)
        series = self._series.get(key)
        if series is not None and now - series.last <= self.series_window:
            series.count += 1
            series.last = now
            self._series.move_to_end(key)
            patch = {"series": {"count": series.count, "lastObservedTime": micro_time(now)}}
            try:
                await self.client.patch(
                    EVENTS, series.name, patch, namespace=series.namespace, patch_type=PatchType.MERGE, answer=False
                )
                return
            except KubeAPIError as exc:
                if not exc.not_found:
                    raise
        body = pod_event(
            namespace=namespace, name=name, uid=uid, type_=type_, reason=reason,
            action="Preempting" if reason == "Preempted" else "Scheduling", note=note, profile=profile,
            instance=self.instance, at=now,
        )  # fmt: skip
        created = await self.client.create(EVENTS, body, namespace=namespace)
        self._series[key] = _Series(namespace, str(created["metadata"]["name"]), 1, now)
        while len(self._series) > _SERIES_KEPT:
            self._series.popitem(last=False)
