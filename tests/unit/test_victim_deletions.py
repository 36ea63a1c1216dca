"""How a preemptor's binding waits for its victims to leave the apiserver (pure logic, an
apiserver client of our own making): a victim the watcher says gone (`Deletions`) is gone, with
no look at the apiserver; one not said gone is looked up every ``victim_poll`` seconds."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from kubus.binder.apiserver import ApiBinding, Deletions
from kubus.bus.messages import BindRequest, PodDeletion, encode
from kubus.kubeapi import PODS, KubeAPIError, KubeClient, Resource


class Apiserver:
    """Pods by name (their uid); counts the GETs."""

    def __init__(self, pods: dict[str, str]) -> None:
        self.pods = dict(pods)
        self.gets = 0

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        assert resource is PODS
        self.gets += 1
        await asyncio.sleep(0)  # a loop that spins on it still lets the test see it
        if name not in self.pods:
            raise KubeAPIError(404, "NotFound", f"pods {name!r} not found")
        return {"metadata": {"name": name, "namespace": namespace, "uid": self.pods[name]}}


def preemptor(*victims: str) -> BindRequest:
    return BindRequest(uid="u-p", key="ns/p", profile="kubus", node="n1", manifest=b"{}", victims=victims)


def message(data: bytes) -> Any:
    """A NATS message carrying ``data``, as the subscription's callback gets it."""
    return SimpleNamespace(data=data)


def deletion(uid: str) -> Any:
    return message(encode(PodDeletion(namespace="ns", name="v", uid=uid)))


async def test_a_wait_ends_when_the_deletion_is_heard_and_at_once_after() -> None:
    deletions = Deletions()
    waiting = asyncio.ensure_future(deletions.wait("u1", 30))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await deletions.on_message(deletion("u1"))
    await asyncio.wait_for(waiting, 1)
    await asyncio.wait_for(deletions.wait("u1", 30), 0.1)  # remembered
    began = time.monotonic()
    await deletions.wait("u2", 0.05)  # never heard: the timeout ends it
    assert time.monotonic() - began >= 0.04  # waited (the loop may fire a timer a hair early)
    assert "u1" in deletions and "u2" not in deletions


async def test_garbage_and_deletions_without_a_uid_wake_nothing() -> None:
    deletions = Deletions()
    for data in (b"not json", b"{}", encode(PodDeletion(namespace="ns", name="v"))):
        await deletions.on_message(message(data))
    assert not deletions._heard


def test_deletions_are_forgotten_after_keep_seconds() -> None:
    now = [0.0]
    deletions = Deletions(clock=lambda: now[0])
    deletions.heard("old")
    now[0] = Deletions.KEEP + 1
    deletions.heard("new")
    assert "old" not in deletions and "new" in deletions


async def test_victims_said_gone_are_gone_without_a_look_at_the_apiserver() -> None:
    api = Apiserver({"v1": "u-v1", "v2": "u-v2"})
    binding = ApiBinding(cast(KubeClient, api), victim_poll=30)
    waiting = asyncio.ensure_future(binding._victims_gone(preemptor("ns/v1/u-v1", "ns/v2/u-v2")))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    binding.deletions.heard("u-v1")
    await asyncio.sleep(0.05)
    assert not waiting.done()  # v2 awaited
    binding.deletions.heard("u-v2")
    await asyncio.wait_for(waiting, 1)
    assert api.gets == 0


async def test_a_victim_not_said_gone_is_looked_up_every_victim_poll() -> None:
    api = Apiserver({"v1": "u-v1"})
    binding = ApiBinding(cast(KubeClient, api), victim_poll=0.05)
    began = time.monotonic()
    waiting = asyncio.ensure_future(binding._victims_gone(preemptor("ns/v1/u-v1")))

    async def looked(times: int) -> None:
        while api.gets < times:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(looked(3), 5)
    assert api.gets <= (time.monotonic() - began) / 0.05 + 1, api.gets  # one look per victim_poll
    api.pods["v1"] = "u-new"  # a new pod of its name: the victim is gone
    await asyncio.wait_for(waiting, 1)
