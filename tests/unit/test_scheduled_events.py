"""The binder's Scheduled events (`ScheduledEvents`) over an apiserver client of our own making
(pure logic): kube's event for each pod, written in the background; a refusal for a while
(5xx, 429, unreachable) tried again, others and the last try dropped; `drain` waits for them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from kubus.binder.apiserver import ScheduledEvents
from kubus.bus.messages import BindRequest
from kubus.kubeapi import EVENTS, KubeAPIError, KubeClient, KubeUnreachable, Resource


class Apiserver:
    """Answers creates with the errors of ``failures`` (by pod name, in turn), then stores them."""

    def __init__(self, failures: Mapping[str, list[Exception]] | None = None) -> None:
        self.failures = {name: list(errors) for name, errors in (failures or {}).items()}
        self.tries: dict[str, int] = {}
        self.events: list[dict[str, Any]] = []

    async def create(
        self, resource: Resource, obj: dict[str, Any], *, namespace: str | None = None, answer: bool = True
    ) -> dict[str, Any]:
        assert resource is EVENTS and namespace == obj["metadata"]["namespace"]
        assert not answer  # the binder reads nothing of the event it wrote
        pod = obj["regarding"]["name"]
        self.tries[pod] = self.tries.get(pod, 0) + 1
        errors = self.failures.get(pod)
        if errors:
            raise errors.pop(0)
        self.events.append(obj)
        return obj


def request(name: str, node: str = "n1") -> BindRequest:
    return BindRequest(uid=f"uid-{name}", key=f"ns/{name}", profile="kubus", node=node, manifest=b"")


def events_of(apiserver: Apiserver) -> ScheduledEvents:
    events = ScheduledEvents(cast(KubeClient, apiserver), instance="host", clock=lambda: 1700000000.5)
    events.RETRY_DELAY = 0.0
    return events


def test_each_pod_gets_kubes_scheduled_event() -> None:
    apiserver = Apiserver()

    async def main() -> None:
        events = events_of(apiserver)
        events.record([request("a"), request("b", node="n2")])
        await events.drain(5)

    asyncio.run(main())
    by_pod = {e["regarding"]["name"]: e for e in apiserver.events}
    assert sorted(by_pod) == ["a", "b"]
    a = by_pod["a"]
    assert (a["type"], a["reason"], a["action"]) == ("Normal", "Scheduled", "Binding")
    assert a["note"] == "Successfully assigned ns/a to n1"
    assert by_pod["b"]["note"] == "Successfully assigned ns/b to n2"
    assert (a["reportingController"], a["reportingInstance"]) == ("kubus", "kubus-host")
    assert a["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"}
    assert a["eventTime"] == "2023-11-14T22:13:20.500000Z"
    assert a["metadata"]["name"].startswith("a.") and a["metadata"]["name"] != by_pod["b"]["metadata"]["name"]


def test_a_refusal_for_a_while_is_tried_again_and_others_are_dropped() -> None:
    busy = KubeAPIError(429, "TooManyRequests", "slow down")
    apiserver = Apiserver(
        {
            "busy": [busy, KubeAPIError(503, "ServiceUnavailable", "")],  # the third try goes through
            "away": [KubeUnreachable("https://x", "refused")] * 3,  # every try: dropped after the last
            "forbidden": [KubeAPIError(403, "Forbidden", "no")],  # not tried again
            "gone": [KubeAPIError(404, "NotFound", "namespace gone")],  # nothing to report on
        }
    )

    async def main() -> None:
        events = events_of(apiserver)
        events.record([request(name) for name in ("busy", "away", "forbidden", "gone", "fine")])
        await events.drain(5)

    asyncio.run(main())
    assert sorted(e["regarding"]["name"] for e in apiserver.events) == ["busy", "fine"]
    assert apiserver.tries == {"busy": 3, "away": 3, "forbidden": 1, "gone": 1, "fine": 1}


def test_drain_gives_up_on_writes_past_its_time() -> None:
    class Stuck(Apiserver):
        async def create(
            self, resource: Resource, obj: dict[str, Any], *, namespace: str | None = None, answer: bool = True
        ) -> dict[str, Any]:
            await asyncio.sleep(60)
            raise AssertionError("not reached")

    async def main() -> bool:
        events = events_of(Stuck())
        events.record([request("a")])
        await events.drain(0.05)
        return not events._tasks

    assert asyncio.run(main()), "the stuck write is cancelled and forgotten"
