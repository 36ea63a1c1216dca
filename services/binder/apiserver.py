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

A preemptor (`BindRequest.victims`) is bound once its victims are gone from the apiserver: their
kubelet stops them within their grace period, and a kubelet would refuse the preemptor while they
still hold the room (kube-scheduler binds a nominated preemptor only then too). A victim still
there after `ApiBinding.victim_wait` seconds (a stuck finalizer) is waited for no longer: said.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from enum import Enum

from kubus.bus.messages import BindRequest
from kubus.kubeapi import PODS, KubeAPIError, KubeClient
from kubus.runtime.service import logger

__all__ = ["BIND_CONCURRENCY", "ApiBindResult", "ApiBinding"]

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


@dataclass(frozen=True, slots=True)
class ApiBinding:
    """Binds pods in the apiserver through ``client``, ``concurrency`` at a time."""

    client: KubeClient
    concurrency: int = BIND_CONCURRENCY
    victim_wait: float = 300.0
    """Seconds a preemptor waits at most for its victims to be gone from the apiserver."""
    victim_poll: float = 0.5
    """Seconds between two looks at a victim still there."""

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
        of its name, or one of another uid), at most `victim_wait` seconds."""
        deadline = time.monotonic() + self.victim_wait
        for victim in request.victims:
            namespace, name, uid = victim.split("/", 2)
            while True:
                try:
                    pod = await self.client.get(PODS, name, namespace=namespace)
                except KubeAPIError as exc:
                    if exc.not_found:
                        break
                    raise
                if (pod.get("metadata") or {}).get("uid") != uid:
                    break
                if time.monotonic() >= deadline:
                    _log.warning("preemption victim still there; binding the preemptor anyway", pod=request.key,
                                 victim=f"{namespace}/{name}", waited=self.victim_wait)  # fmt: skip
                    return
                await asyncio.sleep(self.victim_poll)


_log = logger("kubus.binder")
