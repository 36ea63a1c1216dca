"""The Helm chart's ClusterRole (deploy/helm/kubus/templates/rbac.yaml, rendered by Helm's engine
as the deploy tests render it) against a real kube-apiserver, through kubus's own code: a
ServiceAccount bound to it can do all the watcher and the binders do (the watcher's start check,
its watches, `StatusWriter`'s writes, `ApiBinding`'s bindings and `ScheduledEvents`); without any one of its permissions
that code fails with a 403 naming the permission, so each is needed; and it cannot do what kubus
must not (create pods, change nodes, read secrets, ...).

RBAC takes a new binding in a moment after it is made (the apiserver's informers): each account
is used once a request its role allows has gone through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kube_support import KubeTest, install_pod_group_crd, mint_token, pod_manifest
from support import eventually

from kubus.binder.apiserver import ApiBinding, ApiBindResult, ScheduledEvents
from kubus.bus.messages import BindRequest, ClusterEvent, PodChange
from kubus.bus.subjects import EventKind
from kubus.kubeapi import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIG_MAPS,
    EVENTS,
    LEASES,
    NODES,
    PODS,
    SERVICES,
    KubeAccessError,
    KubeAPIError,
    KubeClient,
    PatchType,
    Resource,
    check_access,
)
from kubus.runtime.service import logger
from kubus.watcher.objects import mirrored
from kubus.watcher.service import FIX_RBAC
from kubus.watcher.status import StatusWriter

pytestmark = pytest.mark.kube

Permission = tuple[str, str, str]
"""(API group, resource, verb), as an RBAC rule grants it: ("", "pods/binding", "create")."""

WATCHED = (NODES, PODS, *mirrored().values())
"""What the watcher lists at start (`WatcherService._check_access`) and then watches."""
PROFILE = "kubus"
SECRETS = Resource("", "v1", "secrets", True, "Secret")
CORE_EVENTS = Resource("", "v1", "events", True, "Event")


# -- the chart's role ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart_rules() -> list[dict[str, Any]]:
    """The rules of the ClusterRole the chart installs in cluster mode (its defaults)."""
    try:
        import helm_python
    except ImportError as exc:
        reason = f"helm_python is not installed ({exc}); `pip install -e '.[dev]'` installs it"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true makes this a failure: {reason}", pytrace=False)
        pytest.skip(reason)
    from deploy.deploy_support import render_chart

    (role,) = render_chart(helm_python, {}).of_kind("ClusterRole")
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def permissions(rules: list[dict[str, Any]]) -> list[Permission]:
    return sorted(
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )


def without(rules: list[dict[str, Any]], permission: Permission) -> list[dict[str, Any]]:
    """``rules`` less the one ``permission`` (the rule that grants it split as needed)."""
    group, resource, verb = permission
    kept: list[dict[str, Any]] = []
    for rule in rules:
        if group not in rule["apiGroups"] or resource not in rule["resources"] or verb not in rule["verbs"]:
            kept.append(rule)
            continue
        others = [r for r in rule["resources"] if r != resource]
        if others:
            kept.append({**rule, "resources": others})
        verbs = [v for v in rule["verbs"] if v != verb]
        if verbs:
            kept.append({"apiGroups": [group], "resources": [resource], "verbs": verbs})
    return kept


def named(permission: Permission) -> str:
    """The permission as kubus's errors name it (`KubeAPIError.missing_permission`):
    "create pods/binding", "list podgroups.scheduling.x-k8s.io"."""
    group, resource, verb = permission
    plural, slash, subresource = resource.partition("/")
    return f"{verb} {plural}.{group}{slash}{subresource}" if group else f"{verb} {resource}"


# -- accounts bound to a role ----------------------------------------------------------------------


Bind = Callable[[str, list[dict[str, Any]]], Awaitable[KubeClient]]


@pytest.fixture
async def bound(kube: KubeTest) -> AsyncIterator[Bind]:
    """``await bound(name, rules)``: a client of ServiceAccount ``name`` in the test's namespace,
    bound to a new ClusterRole of ``rules`` (both deleted after the test)."""
    made: list[str] = []
    clients: list[KubeClient] = []

    async def bind(name: str, rules: list[dict[str, Any]]) -> KubeClient:
        role = f"{kube.namespace}-{name}"
        made.append(role)
        await kube.client.create(CLUSTER_ROLES, {"metadata": {"name": role}, "rules": rules})
        token = await mint_token(kube.client, namespace=kube.namespace, name=name, cluster_role=role)
        client = KubeClient(kube.config(token=token))
        clients.append(client)
        return client

    yield bind
    for client in clients:
        await client.close()
    for name in made:  # mint_token names the binding <namespace>-<account>, as the role here
        for resource in (CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES):
            with contextlib.suppress(KubeAPIError):
                await kube.client.delete(resource, name)


async def allowed(request: Callable[[], Awaitable[Any]]) -> None:
    """Wait until ``request`` is not refused: the account's binding has taken effect."""

    async def once() -> None:
        try:
            await request()
        except KubeAPIError as exc:
            assert not exc.forbidden, str(exc)
            raise

    await eventually(once, timeout=30, interval=0.1)


# -- what kubus does -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    """The pods one run of `kubus_does_its_work` works on, made by the admin in the test's
    namespace: one to bind, one kubus found no node for, a preemption's victim (bound) and its
    preemptor."""

    namespace: str
    node: str
    pending: str
    pending_uid: str
    unschedulable: str
    unschedulable_uid: str
    victim: str
    victim_uid: str
    preemptor: str

    @classmethod
    async def make(cls, kube: KubeTest, node: str, tag: str) -> Scene:
        uids = {}
        for role in ("pending", "unschedulable", "preemptor", "victim"):
            spec = {"nodeName": node} if role == "victim" else {}
            pod = await kube.client.create(PODS, pod_manifest(f"{tag}-{role}", **spec), namespace=kube.namespace)
            uids[role] = str(pod["metadata"]["uid"])
        return cls(
            namespace=kube.namespace,
            node=node,
            pending=f"{tag}-pending",
            pending_uid=uids["pending"],
            unschedulable=f"{tag}-unschedulable",
            unschedulable_uid=uids["unschedulable"],
            victim=f"{tag}-victim",
            victim_uid=uids["victim"],
            preemptor=f"{tag}-preemptor",
        )


async def kubus_does_its_work(client: KubeClient, scene: Scene) -> None:
    """Every kind of request the watcher and the binders make, through their own code, as
    ``client``: the watcher's start check (a list of each kind it reads) and its watches; a
    binding, and the same binding again (409: the pod read back), and its Scheduled event (the
    binder's); PodScheduled=False with a
    FailedScheduling event, twice (the second counted in the event's series); a preemption
    (the victim's DisruptionTarget, its Preempted event and deletion, the preemptor's
    nominatedNodeName). Raises what that code raises: KubeAccessError, KubeAPIError."""
    assert await check_access(client, WATCHED, fix_rbac=FIX_RBAC) == set(), "every kind it reads is served"
    for resource in WATCHED:
        async with client.watch(resource, timeout_seconds=1):  # the open is what RBAC decides
            pass

    binding = ApiBinding(client)
    request = BindRequest(
        uid=scene.pending_uid, key=f"{scene.namespace}/{scene.pending}", profile=PROFILE, node=scene.node, manifest=b""
    )
    assert await binding.bind(request) is ApiBindResult.BOUND
    assert await binding.bind(request) is ApiBindResult.BOUND, "a redelivery: 409, read back, bound here"

    writer = StatusWriter(client=client, log=logger("tests.rbac"), instance="test")
    unschedulable = ClusterEvent(
        kind=EventKind.POD_UNSCHEDULABLE.value,
        name=f"{scene.namespace}/{scene.unschedulable}",
        reason="Unschedulable",
        message="0/1 nodes are available: 1 Insufficient cpu.",
        data=PodChange(uid=scene.unschedulable_uid, profile=PROFILE),
    )
    await writer.write(unschedulable)
    await writer.write(unschedulable)
    scheduled = ScheduledEvents(client, instance="test")
    scheduled.record([request])
    await scheduled.drain(30)
    preempted = ClusterEvent(
        kind=EventKind.POD_DELETED.value,
        name=f"{scene.namespace}/{scene.victim}",
        reason="Preempted",
        message=f"Preempted by {scene.namespace}/{scene.preemptor} on node {scene.node}",
        data=PodChange(uid=scene.victim_uid, profile=PROFILE),
    )
    await writer.write(preempted)


# -- the tests -------------------------------------------------------------------------------------


async def test_the_chart_role_lets_the_watcher_and_binders_do_their_work(
    kube: KubeTest, bound: Bind, chart_rules: list[dict[str, Any]]
) -> None:
    await install_pod_group_crd(kube.client)
    (node,) = [n["metadata"]["name"] for n in await kube.make_nodes(1)]
    scene = await Scene.make(kube, node, "p")
    client = await bound("kubus", chart_rules)

    async def watcher_starts() -> None:
        try:
            await check_access(client, WATCHED, fix_rbac=FIX_RBAC)
        except KubeAccessError as exc:
            raise AssertionError(str(exc)) from None

    await eventually(watcher_starts, timeout=30, interval=0.1)
    await kubus_does_its_work(client, scene)

    # What the apiserver holds now, read as the admin.
    pods = {p["metadata"]["name"]: p for p in (await kube.client.list(PODS, namespace=kube.namespace)).items}
    assert pods[scene.pending]["spec"]["nodeName"] == node
    (scheduled,) = [c for c in pods[scene.unschedulable]["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    victim = pods.get(scene.victim)  # bound to a node without a kubelet: Terminating, or gone
    if victim is not None:
        assert victim["metadata"].get("deletionTimestamp"), "the victim is deleted"
        conditions = {c["type"]: c for c in victim["status"]["conditions"]}
        assert conditions["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
    assert pods[scene.preemptor]["status"]["nominatedNodeName"] == node
    events = (await kube.client.list(EVENTS, namespace=kube.namespace)).items
    by_reason = {(e["regarding"]["name"], e["reason"]): e for e in events}
    assert by_reason[(scene.unschedulable, "FailedScheduling")]["series"]["count"] == 2
    assert by_reason[(scene.pending, "Scheduled")]["reportingController"] == PROFILE
    assert (scene.victim, "Preempted") in by_reason


async def test_each_permission_of_the_chart_role_is_needed_and_named_when_missing(
    kube: KubeTest, bound: Bind, chart_rules: list[dict[str, Any]]
) -> None:
    """For every permission the role grants: bound to the role without it, kubus's own code
    fails at the request that needs it (the watcher's start check or a request of its own),
    with a 403 naming exactly that permission. A permission kubus could do without fails."""
    await install_pod_group_crd(kube.client)
    (node,) = [n["metadata"]["name"] for n in await kube.make_nodes(1)]
    granted = permissions(chart_rules)
    assert ("", "pods/binding", "create") in granted and ("", "nodes", "list") in granted

    async def lacking(index: int, permission: Permission) -> str | None:
        """None when kubus's work failed naming ``permission``; else what happened instead."""
        scene = await Scene.make(kube, node, f"w{index}")
        client = await bound(f"without-{index}", without(chart_rules, permission))
        probe = NODES if permission == ("", "pods", "list") else PODS
        await allowed(lambda: client.list(probe, namespace=kube.namespace if probe.namespaced else None, limit=1))
        try:
            await kubus_does_its_work(client, scene)
        except KubeAccessError as exc:
            expected = f"missing RBAC permission: {named(permission)} ({FIX_RBAC})"
            return None if expected in str(exc) else f"the start check said: {exc}"
        except KubeAPIError as exc:
            return None if exc.missing_permission == named(permission) else f"the apiserver said: {exc}"
        return "kubus did all its work without it: the ClusterRole grants more than kubus uses"

    outcomes = await asyncio.gather(*(lacking(i, p) for i, p in enumerate(granted)))
    wrong = {named(p): outcome for p, outcome in zip(granted, outcomes, strict=True) if outcome is not None}
    assert wrong == {}


Request = Callable[[KubeClient, str, str], Awaitable[Any]]
"""A request as ``(client, namespace, node)``."""


async def _evict(client: KubeClient, namespace: str, node: str) -> Any:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "bystander", "namespace": namespace},
    }
    return await client.create(PODS, eviction, namespace=namespace, name="bystander", subresource="eviction")


async def _escalate(client: KubeClient, namespace: str, node: str) -> Any:
    binding = {
        "metadata": {"name": f"{namespace}-escalate"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "kubus", "namespace": namespace}],
    }
    return await client.create(CLUSTER_ROLE_BINDINGS, binding)


MERGE = PatchType.MERGE
BYSTANDER = {"metadata": {"name": "bystander"}}
FORBIDDEN: list[tuple[str, Request]] = [
    ("create pods", lambda c, ns, node: c.create(PODS, pod_manifest("intruder"), namespace=ns)),
    ("patch pods", lambda c, ns, node: c.patch(PODS, "bystander", {"spec": {}}, namespace=ns, patch_type=MERGE)),
    ("update pods/status", lambda c, ns, node: c.update(PODS, BYSTANDER, namespace=ns, subresource="status")),
    ("create pods/eviction", _evict),
    ("patch nodes", lambda c, ns, node: c.patch(NODES, node, {"spec": {"unschedulable": True}}, patch_type=MERGE)),
    ("patch nodes/status", lambda c, ns, node: c.patch_status(NODES, node, {"status": {}}, patch_type=MERGE)),
    ("delete nodes", lambda c, ns, node: c.delete(NODES, node)),
    ("get secrets", lambda c, ns, node: c.get(SECRETS, "anything", namespace=ns)),
    ("list secrets", lambda c, ns, node: c.list(SECRETS)),
    ("list configmaps", lambda c, ns, node: c.list(CONFIG_MAPS)),
    # services are read (default spreading), never written
    ("create services", lambda c, ns, node: c.create(SERVICES, {"metadata": {"name": "s"}}, namespace=ns)),
    ("create leases.coordination.k8s.io", lambda c, ns, node: c.create(LEASES, {"metadata": {}}, namespace=ns)),
    ("create events", lambda c, ns, node: c.create(CORE_EVENTS, {"metadata": {"name": "e"}}, namespace=ns)),
    ("delete events.events.k8s.io", lambda c, ns, node: c.delete(EVENTS, "anything", namespace=ns)),
    ("create clusterrolebindings.rbac.authorization.k8s.io", _escalate),
]
"""What kubus never does, each with the permission a 403 names."""


async def test_the_chart_role_cannot_do_what_kubus_must_not(
    kube: KubeTest, bound: Bind, chart_rules: list[dict[str, Any]]
) -> None:
    """Bound to the chart's role, the API refuses (403, naming the permission) what kubus never
    does: make or change pods, evict, change or delete nodes, read secrets and what it does not
    read, take leases, write core events, grant itself more."""
    (node,) = [n["metadata"]["name"] for n in await kube.make_nodes(1)]
    await kube.client.create(PODS, pod_manifest("bystander"), namespace=kube.namespace)
    client = await bound("kubus", chart_rules)
    await allowed(lambda: client.list(PODS, namespace=kube.namespace, limit=1))
    answers = {}
    for permission, request in FORBIDDEN:
        try:
            await request(client, kube.namespace, node)
        except KubeAPIError as exc:
            answers[permission] = exc.missing_permission if exc.forbidden else str(exc)
        else:
            answers[permission] = "done"
    assert answers == {permission: permission for permission, _ in FORBIDDEN}
