"""The watcher's pod mirror against real NATS and Redis: what it does with pods kubus's binder is
binding (settling), when events arrive while it records one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nats.js import JetStreamContext

from kubus.bus.connection import ensure_streams
from kubus.service import logger
from kubus.store import ClusterState
from kubus.watcher.pods import SETTLE, PodMirror


def api_pod(uid: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kubus",
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "default", "uid": uid, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


async def test_settling_survives_a_binding_reported_while_another_is_recorded(
    state: ClusterState, js: JetStreamContext
) -> None:
    """Two pods kubus bound, neither reported by the binder in time: while the mirror records
    the first itself, the binder's word for the second comes. The second is left alone (its
    binder recorded it) and settling goes on (it once failed with KeyError, which stopped the
    watcher)."""
    await ensure_streams(js)
    now = [1000.0]
    mirror = PodMirror(store=state, js=js, profiles=["kubus"], log=logger("test"), clock=lambda: now[0])
    for uid in ("u1", "u2"):
        await mirror.changed(api_pod(uid))  # submitted
        await mirror.changed(api_pod(uid, node="n1"))  # bound by kubus's binder: settling
    recorded: list[str] = []
    placed = mirror._placed

    async def placing(pod: Any, obj: Mapping[str, Any]) -> bool:
        recorded.append(pod.uid)
        mirror.note_bound("u2" if pod.uid == "u1" else "u1", "n1")  # the other's word, meanwhile
        return await placed(pod, obj)

    mirror._placed = placing  # type: ignore[method-assign]
    now[0] += SETTLE + 1
    await mirror.settle()
    assert len(recorded) == 1, recorded
    await mirror.settle()
    assert len(recorded) == 1, "nothing is left settling"
