"""`kubus delete`: pods through the queue (a PodDeletion published, then waited for until the
queue has recorded it), the other objects forgotten by the store."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from kubus.api.workloads import WORKLOAD_KINDS
from kubus.bus import msgids
from kubus.bus.connection import publish_durable
from kubus.bus.messages import PodDeletion, encode
from kubus.bus.subjects import PODS_DELETE
from kubus.cli.connect import open_bus, open_store
from kubus.cli.not_found import not_found
from kubus.core.settings import ConnectionSettings
from kubus.store.records import PodPhase, PodRecord

__all__ = ["delete_objects", "delete_pod", "delete_pods"]


async def delete_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str,
    names: Sequence[str],
    wait: float | None,
    ignore_not_found: bool = False,
    output: str = "",
) -> int:
    """`kubus delete pod NAME...`: publish each deletion; unless ``wait`` is None, wait that
    many seconds for each pod to be recorded Deleted. A pod not there (or deleted already) is
    kubectl's NotFound, on stderr (silent with ``ignore_not_found``). Each pod deleted is said
    as kubectl says it (``pod "web" deleted``; ``pod/web`` with ``output`` "name"). Exit status
    1 when a pod was not found or not deleted in time, else 0."""
    failed = 0

    def done(name: str, what: str) -> None:
        out.write(f"pod/{name}\n" if output == "name" else f'pod "{name}" {what}\n')

    async with open_store(settings) as store:
        targets: list[PodRecord] = []
        for name in dict.fromkeys(names):
            pod = await store.find_pod(namespace, name)
            if pod is None or pod.phase is PodPhase.DELETED:
                if not ignore_not_found:
                    failed += 1
                    sys.stderr.write(f"error: {not_found('pods', name, namespace)}\n")
                continue
            targets.append(pod)
        if targets:
            async with open_bus(settings) as (_, js):
                for pod in targets:
                    msg_id = msgids.delete(namespace, pod.name, pod.uid, time.time_ns())
                    deletion = encode(PodDeletion(namespace=namespace, name=pod.name))
                    await publish_durable(js, PODS_DELETE, deletion, msg_id)
        if wait is None:
            for pod in targets:
                done(pod.name, "deletion submitted")
            return 1 if failed else 0
        deadline = time.monotonic() + wait
        waiting = list(targets)
        while waiting:
            current = await store.get_pods([p.uid for p in waiting])
            left = []
            for pod, now in zip(waiting, current, strict=True):
                if now is None or now.phase is PodPhase.DELETED:
                    done(pod.name, "deleted")
                else:
                    left.append(pod)
            waiting = left
            if not waiting or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
    for pod in waiting:
        failed += 1
        sys.stderr.write(
            f"error: pod {namespace}/{pod.name}: deletion submitted but not recorded within {wait:g}s "
            "(is the queue service running?)\n"
        )
    return 1 if failed else 0


async def delete_pod(
    settings: ConnectionSettings, out: TextIO, *, namespace: str, name: str, wait: float | None
) -> int:
    """`kubus delete pod NAME` (`delete_pods` of one)."""
    return await delete_pods(settings, out, namespace=namespace, names=[name], wait=wait)


_STORED_KINDS = ("Namespace", "PriorityClass", "PodDisruptionBudget", "PodGroup", *WORKLOAD_KINDS)
"""What `kubus delete -f` deletes from the store itself (pods go through the queue)."""


async def delete_objects(
    settings: ConnectionSettings,
    out: TextIO,
    objects: Sequence[tuple[str, str, str]],
    *,
    wait: float | None,
    ignore_not_found: bool = False,
    output: str = "",
) -> int:
    """`kubus delete -f FILE|DIR`: the (kind, namespace, name) of `objects_in_files`. Pods are
    deleted as `delete_pods` deletes them; Namespaces, PriorityClasses, PodDisruptionBudgets,
    PodGroups and workloads are forgotten by the store (their pods stay: kubus has no garbage
    collector). A node is refused (it leaves with its gpu-agent), an object not there is
    kubectl's NotFound: exit status 1 for either, else 0."""
    failed = 0
    stored = [(k, ns, n) for k, ns, n in objects if k in _STORED_KINDS]
    if stored:
        async with open_store(settings) as store:
            for kind, namespace, name in stored:
                if kind == "Namespace":
                    gone = await store.delete_namespace(name)
                elif kind == "PriorityClass":
                    gone = await store.delete_priority_class(name)
                elif kind == "PodDisruptionBudget":
                    gone = await store.delete_pod_disruption_budget(f"{namespace}/{name}")
                elif kind == "PodGroup":
                    gone = await store.delete_pod_group(f"{namespace}/{name}")
                else:
                    gone = await store.delete_workload(f"{kind}/{namespace}/{name}")
                if gone:
                    out.write(f"{kind.lower()}/{name}\n" if output == "name" else f'{kind.lower()} "{name}" deleted\n')
                elif not ignore_not_found:
                    failed += 1
                    sys.stderr.write(f"error: {not_found(kind.lower() + 's', name, namespace)}\n")
    for kind, _, name in objects:
        if kind not in _STORED_KINDS and kind != "Pod":
            failed += 1
            why = "nodes leave the cluster with their gpu-agent" if kind == "Node" else "kubus does not store it"
            sys.stderr.write(f"error: {kind} {name}: not deleted: {why}\n")
    by_namespace: dict[str, list[str]] = {}
    for kind, namespace, name in objects:
        if kind == "Pod":
            by_namespace.setdefault(namespace, []).append(name)
    for namespace, names in by_namespace.items():
        code = await delete_pods(
            settings,
            out,
            namespace=namespace,
            names=names,
            wait=wait,
            ignore_not_found=ignore_not_found,
            output=output,
        )
        failed += code
    return 1 if failed else 0
