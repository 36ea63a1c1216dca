"""The binding of cluster mode: a pod is bound in the kube-apiserver (POST pods/<name>/binding,
a v1 Binding, as kube-scheduler's DefaultBinder binds) before the store records it; the
apiserver is the truth for bindings, Redis for the room between kubus's profiles.

What the apiserver answers decides what the store does, as kube's binder answers it:

- created: bound; the store's bind follows (`BindingCycle._store_bind`).
- 409 Conflict, the pod bound already: to this node (a redelivery of a bind that went through)
  is bound; to another node (bound by someone else meanwhile) this attempt's room is given back,
  and the watcher records the pod where the apiserver has it.
- 404 Not Found, or a pod of that name with another uid: deleted meanwhile; this attempt's room
  is given back (the watcher's deletion tells the queue).
- 5xx, 429, unreachable: retried (the binder's outage handling), the reservation kept.
- 403 (a permission missing) or another refusal: a failure of the bind, retried, then the pod
  handed back (`BinderOptions.max_failures`), said each time.

A binder killed after the POST and before the store's bind leaves the pod bound in the
apiserver and Reserved in the store: the watcher sees the binding and finishes it in the store
(`ClusterState.observe_placed`), and a redelivered request meets 409 "to this node": bound.

Each pod bound gets the Normal "Scheduled" event kube-scheduler's binding cycle records
(`ScheduledEvents`), written in the background: no binding waits for its event.

A preemptor (`BindRequest.victims`) is bound once its victims are gone from the apiserver: their
kubelet stops them within their grace period, and a kubelet would refuse the preemptor while they
still hold the room (kube-scheduler binds a nominated preemptor only then too). The watcher says
each pod it sees the apiserver delete (``kubus.apiserver.deleted``, `Deletions`): a victim said
gone is gone; one not said gone within `ApiBinding.victim_poll` seconds (a notice lost, a binder
started after it) is looked up in the apiserver. A victim still there after
`ApiBinding.victim_wait` seconds (a stuck finalizer) is waited for no longer: said.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from nats.aio.msg import Msg

from kubus.bus.messages import BindRequest, MessageError, PodDeletion, decode
from kubus.kubeapi import EVENTS, PODS, KubeAPIError, KubeClient, KubeUnreachable
from kubus.kubeapi.events import pod_event
from kubus.runtime.service import Throttle, logger

__all__ = ["BIND_CONCURRENCY", "ApiBindResult", "ApiBinding", "Deletions", "ScheduledEvents"]

BIND_CONCURRENCY = 64
"""Bindings in flight at once (each on a write lane of its own: `KubeClient` ``write_lanes``)."""


class ApiBindResult(Enum):
    """What the apiserver said to one binding."""

    BOUND = "bound"
    """Bound there now, or before (a redelivery)."""
    ELSEWHERE = "elsewhere"
    """Bound to another node by someone else: this attempt is over."""
    GONE = "gone"
    """The pod (that uid) no longer exists."""


class Deletions:
    """The pods the apiserver deleted lately, by uid, as the watcher says them gone
    (``kubus.apiserver.deleted``, which only the watcher may publish): a preemptor's binding
    waits on its victims' rather than asking the apiserver about them again and again."""

    KEEP = 60.0
    """Seconds a deletion is remembered: a wait that starts after it finds it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._heard: dict[str, float] = {}
        """Uid -> when its deletion was heard, oldest first."""
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    async def on_message(self, msg: Msg) -> None:
        """A pod said gone (the subscription's callback). Never raises: garbage is dropped, as
        a notice lost is (it costs a waiting binder one look at the apiserver)."""
        try:
            deletion = decode(PodDeletion, msg.data)
        except MessageError:
            return
        if deletion.uid:
            self.heard(deletion.uid)

    def heard(self, uid: str) -> None:
        """Pod ``uid`` was deleted: wake its waits, and remember it for `KEEP` seconds."""
        now = self.clock()
        heard = self._heard
        heard.pop(uid, None)
        heard[uid] = now
        while heard:
            oldest, at = next(iter(heard.items()))
            if now - at <= self.KEEP:
                break
            del heard[oldest]
        for waiter in self._waiting.pop(uid, ()):
            if not waiter.done():
                waiter.set_result(None)

    def __contains__(self, uid: str) -> bool:
        return uid in self._heard

    async def wait(self, uid: str, timeout: float) -> None:
        """Return once the deletion of ``uid`` is heard (at once if it was), or after
        ``timeout`` seconds without it."""
        if uid in self._heard:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiting.setdefault(uid, set())
        waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, timeout)
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiting.get(uid) is waiters:
                del self._waiting[uid]


@dataclass(frozen=True, slots=True)
class ApiBinding:
    """Binds pods in the apiserver through ``client``, ``concurrency`` at a time."""

    client: KubeClient
    concurrency: int = BIND_CONCURRENCY
    victim_wait: float = 300.0
    """Seconds a preemptor waits at most for its victims to be gone from the apiserver."""
    victim_poll: float = 5.0
    """Seconds a victim not said gone is waited for before the apiserver is asked (again)."""
    deletions: Deletions = field(default_factory=Deletions)
    """The pods the watcher said gone (the binder subscribes `Deletions.on_message`)."""

    async def bind_all(self, requests: list[BindRequest]) -> list[ApiBindResult | Exception]:
        """Bind each request's pod to its node; per request, in order, the result or the error
        to retry it for (KubeAPIError, KubeUnreachable). Never raises but for cancellation."""
        slots = asyncio.Semaphore(self.concurrency)

        async def one(request: BindRequest) -> ApiBindResult | Exception:
            async with slots:
                try:
                    return await self.bind(request)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    return exc

        return list(await asyncio.gather(*map(one, requests)))

    async def bind(self, request: BindRequest) -> ApiBindResult:
        """Bind one pod (only the pod of that uid), once its victims are gone. Raises
        KubeAPIError, KubeUnreachable."""
        if request.victims:
            await self._victims_gone(request)
        namespace, _, name = request.key.partition("/")
        try:
            await self.client.bind(namespace, name, request.node, uid=request.uid)
            return ApiBindResult.BOUND
        except KubeAPIError as exc:
            if exc.not_found:
                return ApiBindResult.GONE
            if not exc.conflict:
                raise
        # 409: bound already (or the uid precondition failed): read what the apiserver has.
        try:
            pod = await self.client.get(PODS, name, namespace=namespace)
        except KubeAPIError as exc:
            if exc.not_found:
                return ApiBindResult.GONE
            raise
        if (pod.get("metadata") or {}).get("uid") != request.uid:
            return ApiBindResult.GONE
        if (pod.get("spec") or {}).get("nodeName") == request.node:
            return ApiBindResult.BOUND
        return ApiBindResult.ELSEWHERE

    async def _victims_gone(self, request: BindRequest) -> None:
        """Wait until every victim of the request's preemption is gone from the apiserver (no pod
        of its name, or one of another uid), at most `victim_wait` seconds: said gone by the
        watcher (`Deletions`), or, when not said within `victim_poll` seconds, as the apiserver
        answers then."""
        deadline = time.monotonic() + self.victim_wait
        for victim in request.victims:
            namespace, name, uid = victim.split("/", 2)
            while True:
                await self.deletions.wait(uid, self.victim_poll)
                if uid in self.deletions or await self._gone(namespace, name, uid):
                    break
                if time.monotonic() >= deadline:
                    _log.warning("preemption victim still there; binding the preemptor anyway", pod=request.key,
                                 victim=f"{namespace}/{name}", waited=self.victim_wait)  # fmt: skip
                    return

    async def _gone(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the apiserver has no pod ``namespace/name`` of ``uid``."""
        try:
            pod = await self.client.get(PODS, name, namespace=namespace)
        except KubeAPIError as exc:
            if exc.not_found:
                return True
            raise
        return (pod.get("metadata") or {}).get("uid") != uid


class ScheduledEvents:
    """The Normal "Scheduled" event of each pod bound in the apiserver, as kube-scheduler's
    binding cycle records it once the binding is made (events.k8s.io/v1: reason Scheduled,
    action Binding, "Successfully assigned <namespace>/<pod> to <node>", reported by the pod's
    profile). Written in the background, ``concurrency`` at a time: binding waits for no event.
    As kube's event recorder, best effort: a write the apiserver refuses for a while (5xx, 429,
    unreachable) is tried `ATTEMPTS` times, then dropped and said; a binder killed between a
    binding and its event leaves that pod without one. `drain` at stop."""

    ATTEMPTS = 3
    RETRY_DELAY = 1.0

    def __init__(
        self, client: KubeClient, *, instance: str, concurrency: int = BIND_CONCURRENCY,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.client = client
        self.instance = instance
        """reportingInstance's host part (kube: "<scheduler name>-<host>")."""
        self.clock = clock
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failures = Throttle(30.0)

    def record(self, bound: Sequence[BindRequest]) -> None:
        """Write the Scheduled events of these pods (just bound), in the background."""
        if not bound:
            return
        at = self.clock()
        task = asyncio.get_running_loop().create_task(self._write_all(bound, at), name="binder: Scheduled events")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float) -> None:
        """Give the events being written ``timeout`` seconds, then cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)

    async def _write_all(self, bound: Sequence[BindRequest], at: float) -> None:
        await asyncio.gather(*(self._write(request, at) for request in bound))

    async def _write(self, request: BindRequest, at: float) -> None:
        namespace, _, name = request.key.partition("/")
        body = pod_event(
            namespace=namespace, name=name, uid=request.uid, type_="Normal", reason="Scheduled", action="Binding",
            note=f"Successfully assigned {request.key} to {request.node}", profile=request.profile,
            instance=self.instance, at=at,
        )  # fmt: skip
        for attempt in range(1, self.ATTEMPTS + 1):
            async with self._slots:
                try:
                    await self.client.create(EVENTS, body, namespace=namespace, answer=False)
                    return
                except asyncio.CancelledError:
                    raise
                except KubeAPIError as exc:
                    if exc.not_found:
                        return  # its namespace is gone: nothing to report on
                    error: Exception = exc
                    transient = exc.transient
                except KubeUnreachable as exc:
                    error, transient = exc, True
            if not transient or attempt == self.ATTEMPTS:
                if (dropped := self._failures.allow()) is not None:
                    _log.warning("Scheduled event not written", pod=request.key, node=request.node,
                                 error=str(error), unlogged_before=dropped)  # fmt: skip
                return
            await asyncio.sleep(self.RETRY_DELAY * attempt)


_log = logger("kubus.binder")
