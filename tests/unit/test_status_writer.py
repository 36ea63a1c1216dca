"""The watcher's apiserver writes for a preemption (`StatusWriter`), over an apiserver client of
our own making (pure logic): each victim gets its DisruptionTarget, Preempted event and deletion;
the preemptor is nominated once per preemption, as kube nominates it, not once per victim."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kubus.bus.messages import ClusterEvent, PodChange
from kubus.bus.subjects import EventKind
from kubus.kubeapi import KubeClient, Resource
from kubus.runtime.service import logger
from kubus.store import preemption_message
from kubus.watcher.status import StatusWriter


class Apiserver:
    """Records every write as (verb, name, body)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any]] = []

    async def patch_status(self, resource: Resource, name: str, patch: Any, **_: Any) -> dict[str, Any]:
        self.writes.append(("patch_status", name, patch))
        return {}

    async def create(self, resource: Resource, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.writes.append(("create", obj["regarding"]["name"], obj["reason"]))
        return {"metadata": {"name": obj["metadata"]["name"]}}

    async def delete(self, resource: Resource, name: str, **_: Any) -> dict[str, Any]:
        self.writes.append(("delete", name, None))
        return {}


def victim_event(victim: str, preemptor: str, node: str) -> ClusterEvent:
    return ClusterEvent(
        kind=EventKind.POD_DELETED.value,
        name=f"ns/{victim}",
        node=node,
        reason="Preempted",
        message=preemption_message(f"ns/{preemptor}", node),
        data=PodChange(uid=f"uid-{victim}", profile="kubus"),
    )


def nominations(apiserver: Apiserver) -> list[tuple[str, str]]:
    return [
        (name, patch["status"]["nominatedNodeName"])
        for verb, name, patch in apiserver.writes
        if verb == "patch_status" and "nominatedNodeName" in patch["status"]
    ]


def test_a_preemptor_is_nominated_once_for_all_its_victims() -> None:
    apiserver = Apiserver()
    now = [1000.0]
    told: dict[str, bool] = {}  # victim uid -> whether its delete was written when told

    def evicting(uid: str) -> None:
        told[uid] = ("delete", uid.removeprefix("uid-"), None) in apiserver.writes

    writer = StatusWriter(
        client=cast(KubeClient, apiserver), log=logger("test"), instance="h", clock=lambda: now[0], evicting=evicting
    )

    async def main() -> None:
        # Three victims of one preemption, written at once (each on a writer of its own).
        await asyncio.gather(*(writer.write(victim_event(v, "big", "n1")) for v in ("v1", "v2", "v3")))
        await writer.write(victim_event("v4", "big", "n2"))  # preempting elsewhere: nominated there
        now[0] += 61  # a pod made again under the name, preempting on n2 again, later
        await writer.write(victim_event("v5", "big", "n2"))

    asyncio.run(main())
    assert nominations(apiserver) == [("big", "n1"), ("big", "n2"), ("big", "n2")]
    for victim in ("v1", "v2", "v3", "v4", "v5"):  # each victim: as kube-scheduler writes it
        mine = [(verb, detail) for verb, name, detail in apiserver.writes if name == victim]
        assert [verb for verb, _ in mine] == ["patch_status", "create", "delete"], mine
        assert mine[0][1]["status"]["conditions"][0]["type"] == "DisruptionTarget"
        assert mine[1][1] == "Preempted"
    # The pod mirror is told of each victim before its deletion is written.
    assert told == {f"uid-v{i}": False for i in range(1, 6)}
