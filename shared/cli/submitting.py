"""The pods a client submits: each pod's JSON manifest, published on its own to
``kubus.pods.submit`` (`submit`), where the queue takes it. `kubus apply`, `kubus demo`, the bench
and the tests submit pods this way."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nats.js import JetStreamContext

from kubus.api.manifests import parse_pod
from kubus.bus import msgids
from kubus.bus.connection import Publication, publish_durable_many
from kubus.bus.subjects import PODS_SUBMIT
from kubus.core import codec
from kubus.core.codec import JSONObject

__all__ = ["SubmitManifest", "pod_manifests", "submit"]

_PUBLISH_WINDOW = 256
"""Submissions in flight at once: enough to keep JetStream busy, few enough to stay polite."""


@dataclass(frozen=True, slots=True)
class SubmitManifest:
    """One pod to submit: its identity and the JSON bytes published for it."""

    namespace: str
    name: str
    data: bytes
    uid: str = ""
    """The uid the queue will store the pod under (metadata.uid, or the one kubus derives)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def msg_id(self) -> str:
        """The same manifest twice is stored once (`kubus.bus.msgids.submit`)."""
        return msgids.submit(self.namespace, self.name, self.data)


def pod_manifests(objects: Sequence[JSONObject], source: str = "<generated>") -> list[SubmitManifest]:
    """Pod manifests given as dicts (a generated workload), validated, ready to submit.
    Raises ManifestError for an invalid one."""
    out = []
    for i, obj in enumerate(objects, start=1):
        pod = parse_pod(obj, source=source, index=i)
        out.append(SubmitManifest(pod.namespace, pod.name, codec.dumps(obj), pod.metadata.uid))
    return out


async def submit(
    js: JetStreamContext,
    pods: Sequence[SubmitManifest],
    *,
    window: int = _PUBLISH_WINDOW,
    on_ack: Callable[[int, bool, float], object] | None = None,
) -> list[bool]:
    """Publish every pod to ``kubus.pods.submit``, ``window`` at a time (sent together, then
    their acks awaited); returns, in order, whether each was new (False: JetStream already had
    this exact manifest, a duplicate). ``on_ack(i, duplicate, monotonic_time)`` is called as
    each is stored. Raises the first publish error (earlier pods stay submitted: submitting is
    idempotent, run it again)."""
    results: list[bool] = []
    for start in range(0, len(pods), max(1, window)):
        chunk = pods[start : start + max(1, window)]
        acks = await publish_durable_many(js, [Publication(PODS_SUBMIT, pod.data, pod.msg_id) for pod in chunk])
        now = time.monotonic()
        for i, ack in enumerate(acks, start):
            duplicate = bool(ack.duplicate)  # type: ignore[union-attr]  # errors raise, not returned
            results.append(not duplicate)
            if on_ack is not None:
                on_ack(i, duplicate, now)
    return results
