"""What the agent's parts do alike: steps run many at once, bounded (`each`); a failed step
logged by its kind (`log_failure`); the events about a pod the agent runs (`pod_publication`,
`publish_pod_event`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from nats.js import JetStreamContext

from kubus.bus import EventKind, Publication, announcements, publish_durable
from kubus.gpu_agent.running import RunningPod
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import PodPhase

_T = TypeVar("_T")
_R = TypeVar("_R")


async def each(items: Sequence[_T], fn: Callable[[_T], Awaitable[_R]], *, concurrency: int) -> list[_R]:
    """``fn`` over ``items``, at most ``concurrency`` at once; results in order."""
    if not items:
        return []
    limit = asyncio.Semaphore(concurrency)

    async def one(item: _T) -> _R:
        async with limit:
            return await fn(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


def log_failure(log: StructuredLogger, event: str, exc: BaseException, **fields: object) -> None:
    """A failed step: a warning when a server was away, else an error with its traceback."""
    if isinstance(exc, TRANSIENT_ERRORS):
        log.warning(event, error=repr(exc), **fields)
    else:
        log.log(logging.ERROR, event, exc_info=exc, error=repr(exc), **fields)


def pod_publication(
    kind: EventKind, pod: RunningPod, *, at: float, phase: PodPhase | None = None, reason: str = ""
) -> Publication:
    """The cluster event ``kind`` about a pod this agent runs, at ``at`` (seconds since the epoch)."""
    # One per (kind, pod): a pod runs and finishes once, whichever attempt placed it.
    return announcements.pod_event(kind, pod.key, pod.uid, at=at, node=pod.node, phase=str(phase or ""), reason=reason)


async def publish_pod_event(
    js: JetStreamContext,
    kind: EventKind,
    pod: RunningPod,
    *,
    at: float,
    phase: PodPhase | None = None,
    reason: str = "",
) -> None:
    """Publish `pod_publication` durably (its message id makes a repeat harmless)."""
    p = pod_publication(kind, pod, at=at, phase=phase, reason=reason)
    await publish_durable(js, p.subject, p.payload, p.msg_id)
