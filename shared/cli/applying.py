"""`kubus apply`: validate every manifest locally first (nothing is stored or published if one is
wrong), store the Namespaces, PriorityClasses, PodDisruptionBudgets, workloads (Services,
ReplicationControllers, ReplicaSets, StatefulSets) and PodGroups in Redis, then publish each pod
that is new or changed (`kubus.cli.submitting`) and wait until the queue has stored it."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.errors import ManifestError
from kubus.api.manifests import FieldValidation, Manifests, parse_manifests, wire_pod
from kubus.api.namespaces import Namespace
from kubus.api.objects import Pod
from kubus.api.podgroups import PodGroup
from kubus.api.priority import PriorityClass, PriorityError, check_priority_class
from kubus.api.submission import Rejected, admit_priority, read_submission
from kubus.api.workloads import Workload
from kubus.bus.subjects import MAX_MANIFEST_SIZE, PODS_SUBMIT
from kubus.cli.connect import UsageError, open_bus, open_store
from kubus.cli.kube_objects import same_pod
from kubus.cli.submitting import SubmitManifest, submit
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.runtime.service import TRANSIENT_ERRORS
from kubus.store.cluster_state import ClusterState
from kubus.store.records import PodPhase, PodRecord

__all__ = ["APPLY_TIMEOUT", "ApplyObjects", "apply", "read_apply_manifests", "read_pod_manifests"]


@dataclass(slots=True)
class ApplyObjects:
    """What `kubus apply` takes from its files, each kind in file order."""

    pods: list[SubmitManifest] = field(default_factory=list)
    pod_groups: list[tuple[PodGroup, bytes]] = field(default_factory=list)
    """Each group with its manifest (JSON)."""
    namespaces: list[Namespace] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    disruption_budgets: list[PodDisruptionBudget] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    """Services, ReplicationControllers, ReplicaSets and StatefulSets (default spreading's)."""

    @property
    def stored(self) -> int:
        """How many objects are stored in Redis (all but the pods)."""
        return (
            len(self.pod_groups)
            + len(self.namespaces)
            + len(self.priority_classes)
            + len(self.disruption_budgets)
            + len(self.workloads)
        )


def _take_cluster_objects(result: ApplyObjects, manifests: Manifests, source: str, seen: dict[str, str]) -> None:
    """The file's Namespaces, PriorityClasses, PodDisruptionBudgets and workloads into ``result``.
    The same object twice (``seen``: "Kind key" -> file) or a second globalDefault class is a
    UsageError."""

    def first(label: str) -> None:
        if label in seen:
            raise UsageError(
                f"{source}: {label}: metadata.name: duplicate: the same object is already in {seen[label]}"
            )
        seen[label] = source

    for ns in manifests.namespaces:
        first(f"Namespace {ns.name}")
        result.namespaces.append(ns)
    for pc in manifests.priority_classes:
        first(f"PriorityClass {pc.name}")
        try:
            check_priority_class(pc, result.priority_classes)
        except PriorityError as e:
            raise UsageError(f"{source}: PriorityClass {pc.name}: {e.field}: {e}") from None
        result.priority_classes.append(pc)
    for pdb in manifests.disruption_budgets:
        first(f"PodDisruptionBudget {pdb.key}")
        result.disruption_budgets.append(pdb)
    for obj in manifests.workloads:
        first(f"{obj.kind} {obj.namespace}/{obj.name}")
        result.workloads.append(obj)


def read_pod_manifests(paths: Sequence[str], stdin: BinaryIO | None = None) -> list[SubmitManifest]:
    """Read, validate and split manifest files into one JSON manifest per pod, in file order.

    ``-`` reads standard input (once). Raises ManifestError (all of a file's bad objects) for
    invalid input, UsageError for what apply does not take (a Node, the same pod twice, a pod
    too large for the bus). Other kinds are validated and left out (`read_apply_manifests`).
    """
    return read_apply_manifests(paths, stdin).pods


def read_apply_manifests(
    paths: Sequence[str],
    stdin: BinaryIO | None = None,
    *,
    validate: FieldValidation | None = FieldValidation.STRICT,
    warnings: list[str] | None = None,
) -> ApplyObjects:
    """`read_pod_manifests`, and the files' other objects. Raises as it does; the same object
    in two files, or a second globalDefault PriorityClass, is a UsageError. ``validate``: what
    an unknown or duplicate field is (kubectl's ``--validate``; strict by default), the accepted
    ones said in ``warnings``."""
    result = ApplyObjects()
    out, groups = result.pods, result.pod_groups
    group_seen: dict[str, str] = {}
    seen: dict[str, str] = {}
    others_seen: dict[str, str] = {}
    stdin_used = False
    for path in paths:
        if path == "-":
            if stdin_used:
                raise UsageError("-f -: standard input can be read only once")
            stdin_used = True
            source, raw = "<stdin>", (stdin or sys.stdin.buffer).read()
        else:
            source = path
            try:
                with open(path, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise ManifestError(path, "", "", f"cannot read the file: {e.strerror or e}") from None
        # Validates (raises ManifestError(s)) and keeps each object as written: what is sent.
        manifests = parse_manifests(raw, source=source, validate=validate, keep_raw=True)
        if warnings is not None:
            warnings.extend(manifests.warnings)
        if manifests.nodes:
            raise UsageError(
                f"{source}: Node {manifests.nodes[0].name}: kubus apply submits pods; nodes join the "
                "cluster through their gpu-agent"
            )
        _take_cluster_objects(result, manifests, source, others_seen)
        for group, obj in [(o.obj, o.raw) for o in manifests.objects if isinstance(o.obj, PodGroup)]:
            if group.key in group_seen:
                raise UsageError(
                    f"{source}: PodGroup {group.key}: metadata.name: duplicate: the same pod group is already "
                    f"in {group_seen[group.key]}"
                )
            group_seen[group.key] = source
            groups.append((group, codec.dumps(obj)))
        for pod, obj in [(o.obj, o.raw) for o in manifests.objects if isinstance(o.obj, Pod)]:
            where = f"{source}: Pod {pod.key}"
            if pod.key in seen:
                raise UsageError(f"{where}: metadata.name: duplicate: the same pod is already in {seen[pod.key]}")
            seen[pod.key] = source
            try:
                data = codec.dumps(obj if "kind" in obj else {**obj, "kind": "Pod"})  # a PodList's item
            except TypeError as e:
                raise UsageError(f"{where}: cannot be sent as JSON: {e}") from None
            if len(data) > MAX_MANIFEST_SIZE:
                raise UsageError(
                    f"{where}: the manifest is {len(data)} bytes as JSON; kubus accepts at most {MAX_MANIFEST_SIZE}"
                )
            out.append(SubmitManifest(pod.namespace, pod.name, data, pod.metadata.uid))
    return result


async def _store_objects(store: ClusterState, objects: ApplyObjects, out: TextIO, *, quiet: bool) -> None:
    """Store every object but the pods: namespaces, priority classes, disruption budgets,
    workloads, pod groups. The classes are checked against the stored ones first, as their puts will be, so
    that a refused class (a second globalDefault, a changed value) stores nothing at all.
    Each object is said as kubectl says it: created (the store did not hold it), configured
    (it held another) or unchanged (it held this one). Raises UsageError for a refused class."""
    stored_classes = await store.priority_classes()
    classes = dict(stored_classes)
    for pc in objects.priority_classes:
        try:
            check_priority_class(pc, classes.values())
        except PriorityError as e:
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
        classes[pc.name] = pc
    held = await _held_objects(store, objects)
    held.update(("priorityclass", name) for name in stored_classes)
    written: list[tuple[str, str, str, bool]] = []
    """(kind, key, name, changed) of each object put."""
    for ns in objects.namespaces:
        written.append(("namespace", ns.name, ns.name, await store.put_namespace(ns)))
    for pc in objects.priority_classes:
        try:
            written.append(("priorityclass", pc.name, pc.name, await store.put_priority_class(pc)))
        except PriorityError as e:  # another apply stored a class meanwhile
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
    for pdb in objects.disruption_budgets:
        written.append(("poddisruptionbudget", pdb.key, pdb.name, await store.put_pod_disruption_budget(pdb)))
    for obj in objects.workloads:
        written.append((obj.kind.lower(), obj.key, obj.name, await store.put_workload(obj)))
    for group, manifest in objects.pod_groups:
        written.append(("podgroup", group.key, group.name, await store.put_pod_group(group, manifest)))
    verdicts = [
        (f"{kind}/{name}", "unchanged" if not changed else "configured" if (kind, key) in held else "created")
        for kind, key, name, changed in written
    ]
    if quiet:
        kinds = ("created", "configured", "unchanged")
        counts = [f"{n} {v}" for v in kinds if (n := sum(verdict == v for _, verdict in verdicts))]
        out.write(f"{len(verdicts)} objects: {', '.join(counts)}\n")
        return
    for what, verdict in verdicts:
        out.write(f"{what} {verdict}\n")


async def _held_objects(store: ClusterState, objects: ApplyObjects) -> set[tuple[str, str]]:
    """(kind, key) of the objects of these kinds but PriorityClass that the store holds now,
    each kind read once (and not at all when none of it is applied): keys as the puts key
    them, a namespace by name, a budget or group ``namespace/name``, a workload
    ``Kind/namespace/name``."""
    held: set[tuple[str, str]] = set()
    if objects.namespaces:
        held.update(("namespace", name) for name in await store.namespaces())
    if objects.disruption_budgets:
        held.update(("poddisruptionbudget", pdb.key) for pdb in await store.pod_disruption_budgets())
    if objects.workloads:
        held.update((obj.kind.lower(), obj.key) for obj in (await store.workloads()).objects)
    if objects.pod_groups:
        keys = [group.key for group, _ in objects.pod_groups]
        held.update(("podgroup", group.key) for group in await store.pod_groups(keys))
    return held


APPLY_TIMEOUT = 30.0
"""Seconds `kubus apply` waits, by default, for the queue to confirm its pods are stored."""


@dataclass(slots=True)
class _Applied:
    """One pod of an apply: what the queue will store for it and what became of it."""

    pod: SubmitManifest
    expected: bytes | None = None
    """The manifest the queue stores for it (`read_submission` + `admit_priority`); None until
    the priority classes could be read."""
    verdict: str = ""
    """created, configured or unchanged; "" while not known (the store was not readable)."""
    error: str = ""
    """Why it was refused (one line), or ""."""
    stored: bool = False


def _expected(pod: SubmitManifest, classes: Mapping[str, PriorityClass]) -> bytes:
    """The manifest the queue will store for ``pod``: what it reads (`read_submission`) as kube's
    Priority admission lets it in. Raises Rejected as the queue would reject it."""
    [submission] = read_submission(pod.data, source=PODS_SUBMIT, max_manifest_bytes=MAX_MANIFEST_SIZE)
    return admit_priority(submission, classes, source=PODS_SUBMIT).manifest


def _verdict(item: _Applied, existing: PodRecord | None) -> None:
    """Classify ``item`` against the pod the store has under its uid, as the queue will treat
    it: created, configured (a Pending pod changed), unchanged, or refused (a changed pod that
    is not Pending any more, a changed scheduler), with kube's wording."""
    assert item.expected is not None
    name = item.pod.name
    if existing is None:
        item.verdict = "created"
    elif same_pod(existing.manifest, item.expected, node=existing.node, devices=existing.gpu_devices):
        # what `kubus get -o yaml` adds (status, spec.nodeName, ...) is the server's: not a change
        item.verdict = "unchanged"
    elif existing.phase is not PodPhase.PENDING:
        where = f" on node {existing.node}" if existing.node else ""
        item.error = (
            f'The Pod "{name}" is invalid: spec: Forbidden: a pod changes only while it is Pending; '
            f"it is {existing.phase}{where}"
        )
    elif existing.profile != wire_pod(item.expected, item.pod.uid, item.pod.key).spec.scheduler_name:
        item.error = (
            f'The Pod "{name}" is invalid: spec.schedulerName: Forbidden: cannot change from "{existing.profile}"'
        )
    else:
        item.verdict = "configured"


async def _read_store(store: ClusterState, items: Sequence[_Applied]) -> None:
    """Fill in each item's expected manifest and verdict from the store. Raises Redis' errors
    (nothing is filled in then)."""
    classes = await store.priority_classes()
    records = await store.get_pods(item.pod.uid for item in items)
    for item, existing in zip(items, records, strict=True):
        if item.expected is None:
            try:
                item.expected = _expected(item.pod, classes)
            except Rejected as exc:
                item.error = str(exc)
                continue
        if not item.verdict and not item.error:
            _verdict(item, existing)


async def _wait_stored(store: ClusterState, items: Sequence[_Applied], *, since: float, timeout: float) -> str | None:
    """Wait until the queue has stored every published item's manifest (or refused it: its
    Rejected pod event), at most ``timeout`` seconds; None when all are, else why not (one
    line, the store's error when it did not answer)."""
    deadline = time.monotonic() + timeout
    why: str | None = None
    while True:
        waiting = [i for i in items if not i.stored and not i.error]
        if not waiting:
            return None
        try:
            if any(i.expected is None for i in waiting):
                await _read_store(store, [i for i in waiting if i.expected is None])
            records = await store.get_pods(i.pod.uid for i in waiting)
            for item, record in zip(waiting, records, strict=True):
                if record is not None and record.manifest == item.expected:
                    item.stored = True
                    if not item.verdict:
                        item.verdict = "created" if record.version <= 1 else "configured"
                elif time.monotonic() - since > 1.0:
                    history = await store.events(item.pod.uid)
                    rejected = [e for e in history if e.reason == "Rejected" and e.time >= since]
                    if rejected:
                        item.error = rejected[-1].message
            why = "the queue has not stored them yet (is the queue service running?)"
        except TRANSIENT_ERRORS as exc:
            why = f"the store does not answer: {' '.join(str(exc).split()) or type(exc).__name__}"
        if time.monotonic() >= deadline:
            return why
        await asyncio.sleep(0.2)


async def apply(
    settings: ConnectionSettings,
    paths: Sequence[str],
    out: TextIO,
    *,
    quiet: bool = False,
    timeout: float | None = APPLY_TIMEOUT,
    err: TextIO | None = None,
    validate: FieldValidation = FieldValidation.STRICT,
) -> int:
    """`kubus apply -f ...`: validate everything, store the other objects in Redis before the
    pods (a pod's PriorityClass must be there when the queue admits it, a gang's group before
    its members are scheduled), then submit the pods that are new or changed.

    Each pod is compared with the store first, as the queue will treat it: ``created``,
    ``configured`` (a Pending pod changed), ``unchanged`` (not sent again: the store already
    has it, so a duplicate is told apart across restarts of NATS, Redis and the queue), or
    refused at once with kube's wording (a pod changes only while Pending). Then, unless
    ``timeout`` is None, it waits up to ``timeout`` seconds for the queue to confirm each pod
    is stored: accepted by the bus is not stored. Exit status 0 when every pod is stored
    (or accepted, without waiting), 1 when one was refused or is not confirmed stored (each
    named on ``err``, stderr by default)."""
    err = err or sys.stderr
    warnings: list[str] = []
    objects = read_apply_manifests(paths, validate=validate, warnings=warnings)
    for line in warnings:
        err.write(f"Warning: {line}\n")
    pods = objects.pods
    if not pods and not objects.stored:
        raise UsageError(f"nothing to apply in {', '.join(paths)}")
    if objects.stored:
        async with open_store(settings) as store:
            await _store_objects(store, objects, out, quiet=quiet)
    if not pods:
        return 0
    items = [_Applied(pod) for pod in pods]
    async with open_store(settings, check=False) as store:
        with contextlib.suppress(*TRANSIENT_ERRORS):  # unreadable now: everything is sent, and confirmed later
            await _read_store(store, items)
        send = [i for i in items if not i.error and i.verdict != "unchanged"]
        since = time.time()
        if send:
            async with open_bus(settings) as (_, js):
                await submit(js, [i.pod for i in send])
        for item in items:
            item.stored = item.verdict == "unchanged"
        why = None if timeout is None else await _wait_stored(store, send, since=since, timeout=timeout)
    done: list[str] = []
    """What became of each pod that was not refused, nor is still waiting to be stored."""
    failed = 0
    for item in items:
        if item.error:
            failed += 1
            err.write(f"error: pod/{item.pod.name}: {item.error}\n")
        elif not item.stored and timeout is not None:
            failed += 1
            err.write(f"error: pod/{item.pod.name}: accepted by the bus, not stored within {timeout:g}s: {why}\n")
        else:
            # Not waited for: "accepted" is all that is known (unless the store said unchanged).
            done.append(item.verdict if item.stored or item.verdict == "unchanged" else "accepted")
            if not quiet:
                out.write(f"pod/{item.pod.name} {done[-1]}\n")
    if quiet:
        kinds = ("created", "configured", "unchanged", "accepted")
        counts = [f"{n} {kind}" for kind in kinds if (n := done.count(kind))] + ([f"{failed} failed"] if failed else [])
        out.write(f"{len(items)} pods: {', '.join(counts)}\n")
    return 1 if failed else 0
