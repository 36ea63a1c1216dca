"""`kubus apply`, `kubus get`, `kubus top` and `kubus delete`: the cluster as kubectl users know it.

apply validates every manifest locally first (nothing is stored or published if one is wrong),
stores the Namespaces, PriorityClasses, PodDisruptionBudgets, workloads (Services,
ReplicationControllers, ReplicaSets, StatefulSets) and PodGroups in Redis, then
publishes each pod on its own to ``kubus.pods.submit``; get and top read Redis (get prints v1
objects, `kubus.cli.kube_objects`, or tables, `kubus.cli.output`); delete publishes a
PodDeletion and waits until the queue has recorded it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

from nats.js.api import DeliverPolicy

from kubus import codec
from kubus.api.disruption import PodDisruptionBudget
from kubus.api.errors import ManifestError
from kubus.api.manifests import FieldValidation, Manifests, parse_manifests, parse_pod, wire_pod
from kubus.api.namespaces import Namespace
from kubus.api.objects import LabelSelector, Pod
from kubus.api.pod_affinity import selector_matches
from kubus.api.podgroups import PodGroup
from kubus.api.priority import PriorityClass, PriorityError, check_priority_class
from kubus.api.quantity import format_bytes, format_cpu
from kubus.api.submission import Rejected, admit_priority, read_submission
from kubus.api.workloads import WORKLOAD_KINDS, Workload
from kubus.bus import msgids
from kubus.bus.connection import Publication, publish_durable, publish_durable_many, settle
from kubus.bus.messages import ClusterEvent, PodDeletion, decode, encode
from kubus.bus.subjects import EVENTS_STREAM, MAX_MANIFEST_SIZE, POD_EVENTS, PODS_DELETE, PODS_SUBMIT, EventKind
from kubus.cli.connect import UsageError, open_bus, open_state
from kubus.cli.kube_objects import (
    CollapsedEvent,
    collapse_events,
    event_object,
    node_object,
    pod_object,
    same_pod,
)
from kubus.cli.output import (
    DOCUMENT_OUTPUTS,
    Listing,
    Output,
    format_age,
    output_of,
    print_listing,
    write_document,
    write_table,
)
from kubus.errors import KubusError
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.service import TRANSIENT_ERRORS
from kubus.settings import ConnectionSettings
from kubus.store.cluster_state import ClusterState, node_info_of
from kubus.store.permits import PermitState
from kubus.store.records import NodeRecord, PodPhase, PodRecord

__all__ = [
    "APPLY_TIMEOUT",
    "ApplyObjects",
    "NotFoundError",
    "SubmitManifest",
    "apply",
    "delete_objects",
    "delete_pod",
    "delete_pods",
    "event_age",
    "event_listing",
    "format_age",
    "format_bytes",
    "format_cpu",
    "get_events",
    "get_nodes",
    "get_pods",
    "get_resources",
    "list_pods",
    "node_listing",
    "nodes_in_use",
    "not_found",
    "pod_listing",
    "pod_manifests",
    "read_apply_manifests",
    "read_pod_manifests",
    "submit",
    "top_nodes",
    "top_pods",
    "write_table",
]

_PUBLISH_WINDOW = 256
"""Submissions in flight at once: enough to keep JetStream busy, few enough to stay polite."""


# ---- apply -------------------------------------------------------------------------------------


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


def read_pod_manifests(paths: Sequence[str], stdin: Any = None) -> list[SubmitManifest]:
    """Read, validate and split manifest files into one JSON manifest per pod, in file order.

    ``-`` reads standard input (once). Raises ManifestError (all of a file's bad objects) for
    invalid input, UsageError for what apply does not take (a Node, the same pod twice, a pod
    too large for the bus). Other kinds are validated and left out (`read_apply_manifests`).
    """
    return read_apply_manifests(paths, stdin).pods


def read_apply_manifests(
    paths: Sequence[str],
    stdin: Any = None,
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


def pod_manifests(objects: Sequence[dict[str, Any]], source: str = "<generated>") -> list[SubmitManifest]:
    """Pod manifests given as dicts (a generated workload), validated, ready to submit.
    Raises ManifestError for an invalid one."""
    out = []
    for i, obj in enumerate(objects, start=1):
        pod = parse_pod(obj, source=source, index=i)
        out.append(SubmitManifest(pod.namespace, pod.name, codec.dumps(obj), pod.metadata.uid))
    return out


async def submit(
    js: Any, pods: Sequence[SubmitManifest], *, window: int = _PUBLISH_WINDOW, on_ack: Any = None
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


async def _store_objects(state: ClusterState, objects: ApplyObjects, out: TextIO, *, quiet: bool) -> None:
    """Store every object but the pods: namespaces, priority classes, disruption budgets,
    workloads, pod groups. The classes are checked against the stored ones first, as their puts will be, so
    that a refused class (a second globalDefault, a changed value) stores nothing at all.
    Each object is said as kubectl says it: created (the store did not hold it), configured
    (it held another) or unchanged (it held this one). Raises UsageError for a refused class."""
    stored_classes = await state.priority_classes()
    classes = dict(stored_classes)
    for pc in objects.priority_classes:
        try:
            check_priority_class(pc, classes.values())
        except PriorityError as e:
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
        classes[pc.name] = pc
    held = await _held_objects(state, objects)
    held.update(("priorityclass", name) for name in stored_classes)
    written: list[tuple[str, str, str, bool]] = []
    """(kind, key, name, changed) of each object put."""
    for ns in objects.namespaces:
        written.append(("namespace", ns.name, ns.name, await state.put_namespace(ns)))
    for pc in objects.priority_classes:
        try:
            written.append(("priorityclass", pc.name, pc.name, await state.put_priority_class(pc)))
        except PriorityError as e:  # another apply stored a class meanwhile
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
    for pdb in objects.disruption_budgets:
        written.append(("poddisruptionbudget", pdb.key, pdb.name, await state.put_pod_disruption_budget(pdb)))
    for obj in objects.workloads:
        written.append((obj.kind.lower(), obj.key, obj.name, await state.put_workload(obj)))
    for group, manifest in objects.pod_groups:
        written.append(("podgroup", group.key, group.name, await state.put_pod_group(group, manifest)))
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


async def _held_objects(state: ClusterState, objects: ApplyObjects) -> set[tuple[str, str]]:
    """(kind, key) of the objects of these kinds but PriorityClass that the store holds now,
    each kind read once (and not at all when none of it is applied): keys as the puts key
    them, a namespace by name, a budget or group ``namespace/name``, a workload
    ``Kind/namespace/name``."""
    held: set[tuple[str, str]] = set()
    if objects.namespaces:
        held.update(("namespace", name) for name in await state.namespaces())
    if objects.disruption_budgets:
        held.update(("poddisruptionbudget", pdb.key) for pdb in await state.pod_disruption_budgets())
    if objects.workloads:
        held.update((obj.kind.lower(), obj.key) for obj in (await state.workloads()).objects)
    if objects.pod_groups:
        keys = [group.key for group, _ in objects.pod_groups]
        held.update(("podgroup", group.key) for group in await state.pod_groups(keys))
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


async def _read_store(state: ClusterState, items: Sequence[_Applied]) -> None:
    """Fill in each item's expected manifest and verdict from the store. Raises Redis' errors
    (nothing is filled in then)."""
    classes = await state.priority_classes()
    records = await state.get_pods(item.pod.uid for item in items)
    for item, existing in zip(items, records, strict=True):
        if item.expected is None:
            try:
                item.expected = _expected(item.pod, classes)
            except Rejected as exc:
                item.error = str(exc)
                continue
        if not item.verdict and not item.error:
            _verdict(item, existing)


async def _wait_stored(
    state: ClusterState, items: Sequence[_Applied], *, since: float, timeout: float
) -> str | None:
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
                await _read_store(state, [i for i in waiting if i.expected is None])
            records = await state.get_pods(i.pod.uid for i in waiting)
            for item, record in zip(waiting, records, strict=True):
                if record is not None and record.manifest == item.expected:
                    item.stored = True
                    if not item.verdict:
                        item.verdict = "created" if record.version <= 1 else "configured"
                elif time.monotonic() - since > 1.0:
                    history = await state.events(item.pod.uid)
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
        async with open_state(settings) as state:
            await _store_objects(state, objects, out, quiet=quiet)
    if not pods:
        return 0
    items = [_Applied(pod) for pod in pods]
    async with open_state(settings, check=False) as state:
        with contextlib.suppress(*TRANSIENT_ERRORS):  # unreadable now: everything is sent, and confirmed later
            await _read_store(state, items)
        send = [i for i in items if not i.error and i.verdict != "unchanged"]
        since = time.time()
        if send:
            async with open_bus(settings) as (_, js):
                await submit(js, [i.pod for i in send])
        for item in items:
            item.stored = item.verdict == "unchanged"
        why = None if timeout is None else await _wait_stored(state, send, since=since, timeout=timeout)
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


# ---- get ---------------------------------------------------------------------------------------


async def list_pods(state: ClusterState, namespace: str | None) -> list[PodRecord]:
    """The newest pod of every namespace/name (of one namespace unless None), sorted by key."""
    index = await state.redis.hgetall(state.keys.pod_keys_index())
    pairs = sorted((codec.text(k), codec.text(v)) for k, v in index.items())
    if namespace is not None:
        pairs = [(k, u) for k, u in pairs if k.partition("/")[0] == namespace]
    return [p for p in await state.get_pods([u for _, u in pairs]) if p is not None]


def _devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices) if devices else "-"


class NotFoundError(KubusError):
    """What a command was asked about is not there (kubectl's NotFound); str() is one line.
    Commands exit 1 for it, as kubectl does."""


def not_found(resource: str, name: str, namespace: str | None = None) -> str:
    """kube's NotFound line: 'pods "web" not found in namespace "shop"'."""
    return f'{resource} "{name}" not found' + (f' in namespace "{namespace}"' if namespace else "")


def _pod_labels(record: PodRecord) -> dict[str, str]:
    """The labels of the pod's stored manifest (validated at submit)."""
    try:
        labels = codec.loads(record.manifest).get("metadata", {}).get("labels") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


POD_COLUMNS = ("NAMESPACE", "NAME", "PHASE", "NODE", "GPUS", "AGE", "REASON")
POD_WIDE_COLUMNS = ("SCHEDULER", "ATTEMPTS", "MESSAGE")


async def pod_listing(
    state: ClusterState,
    *,
    namespace: str | None,
    output: Output,
    names: Sequence[str] = (),
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
) -> tuple[Listing, list[str]]:
    """The pods `kubus get pods` shows (of ``namespace``, every one for None; those ``names``
    when given; Deleted ones only with ``show_deleted``; only those whose labels ``selector``
    matches), each as a v1 Pod with its table row (NAMESPACE only across namespaces), and a
    NotFound line per name that is not there."""
    missing: list[str] = []
    if names:
        where = namespace or "default"
        pods = []
        for name in dict.fromkeys(names):
            record = await state.find_pod(where, name)
            if record is None or (record.phase is PodPhase.DELETED and not show_deleted):
                missing.append(not_found("pods", name, where))
            else:
                pods.append(record)
    else:
        pods = await list_pods(state, namespace)
        if not show_deleted:
            pods = [p for p in pods if p.phase is not PodPhase.DELETED]
    if selector is not None:
        pods = [p for p in pods if selector_matches(selector, _pod_labels(p))]
    reserved = [p.uid for p in pods if p.phase is PodPhase.RESERVED]
    waits = await state.permit_states(reserved) if reserved else {}
    waiting = {uid: w for uid, w in waits.items() if w is not None and w.pending and not w.rejected}
    # the events give the conditions' times and startTime: read them only for the objects' sake
    histories = await state.events_of([p.uid for p in pods]) if pods and not output.table else [[] for _ in pods]
    now = time.time()
    header = [*POD_COLUMNS, *(POD_WIDE_COLUMNS if output.format == "wide" else ())]
    across = namespace is None and not names
    listing = Listing("pod", header if across else header[1:], colour_column=2 if across else 1)
    listing.single = len(names) == 1
    for p, events in zip(pods, histories, strict=True):
        wait = waiting.get(p.uid)
        row = _pod_row(p, now, wait, output.format)
        listing.rows.append((pod_object(p, events=events, waiting=wait), row if across else row[1:]))
    return listing, missing


def _no_pods(namespace: str | None) -> str:
    return f"No pods found in {'any namespace' if namespace is None else f'namespace {namespace}'}."


def report(listing: Listing, missing: Sequence[str], out: TextIO, output: Output, *, empty: str) -> int:
    """Print a listing, then its NotFound lines on stderr (nothing else when every name asked
    for was missing); exit status 1 when a name was missing, else 0."""
    if listing.rows or not missing:
        print_listing(listing, out, output, empty=empty)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0


async def get_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str | Output,
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
) -> int:
    """`kubus get pods [NAME...]`: one row per pod (Deleted ones hidden unless ``show_deleted``;
    only those whose labels ``selector`` matches, when given), or the v1 Pods. Exit status 1
    when a name is not found (each said on stderr), else 0."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_state(settings) as state:
        listing, missing = await pod_listing(
            state, namespace=namespace, output=shape, names=names, show_deleted=show_deleted, selector=selector
        )
    return report(listing, missing, out, shape, empty=_no_pods(namespace))


def _pod_row(p: PodRecord, now: float, wait: PermitState | None, output: str) -> list[str]:
    # The reason of the last failure is kept after the pod moves on; show it while it matters.
    showing_reason = p.phase in (PodPhase.PENDING, PodPhase.FAILED)
    # A pod waiting on Permit holds its reservation: Reserved, and what it waits for.
    phase = f"Waiting ({', '.join(sorted(wait.pending))})" if wait is not None else str(p.phase)
    row = [
        p.namespace,
        p.name,
        phase,
        p.node or "<none>",
        _devices(p.gpu_devices),
        format_age(now - p.created_at) if p.created_at else "-",
        (p.reason if showing_reason else "") or "-",
    ]
    if output == "wide":
        row += [p.profile, str(p.attempts), (p.message if showing_reason else "") or "-"]
    return row


_EVENT_PHASES = {
    EventKind.POD_ACCEPTED.value: PodPhase.PENDING,
    EventKind.POD_UNSCHEDULABLE.value: PodPhase.PENDING,
    EventKind.POD_UNRESERVED.value: PodPhase.PENDING,
    EventKind.POD_BOUND.value: PodPhase.BOUND,
    EventKind.POD_RUNNING.value: PodPhase.RUNNING,
    EventKind.POD_FINISHED.value: PodPhase.SUCCEEDED,
    EventKind.POD_DELETED.value: PodPhase.DELETED,
}
"""The phase each pod event announces (a finished pod: Succeeded, or Failed as Redis says)."""


WATCH_HEARTBEAT = 2.0
"""Seconds between the server's heartbeats to `kubus get pods -w`: two missed ones and the watch
resumes its consumer where it left off."""


async def watch_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str | Output,
    selector: LabelSelector | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """`kubus get pods -w`: after the list, one line for each change of a pod (of the namespace,
    matching ``selector``) as the services announce it on the bus, read again from Redis, until
    ``stop`` is set or the command is interrupted (Ctrl-C: exit 0). A JSON/YAML watch prints one
    Pod per change (YAML documents separated by ---)."""
    shape = output if isinstance(output, Output) else output_of(output)
    changed: asyncio.Queue[ClusterEvent] = asyncio.Queue()

    async def on_event(msg: Any) -> None:
        try:
            changed.put_nowait(decode(ClusterEvent, msg.data))
        except ValueError:
            return  # not ours to judge here: the queue counts and reports bad events

    stop = stop or asyncio.Event()
    async with open_bus(settings, "kubus-cli-watch") as (nc, js), open_state(settings) as state:
        # An ordered consumer on the events stream, not a plain subscription: after a lost
        # connection nats-py notices the gap (sequence or missed heartbeats) and resumes from the
        # last event it delivered, so the changes announced meanwhile are shown too.
        sub = await js.subscribe(
            POD_EVENTS,
            stream=EVENTS_STREAM.name,
            cb=on_event,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            idle_heartbeat=WATCH_HEARTBEAT,
        )
        await settle(nc)  # subscribed before the list is read: no change between them is missed
        try:
            await get_pods(settings, out, namespace=namespace, output=shape, selector=selector)
            out.flush()
            stopping = asyncio.create_task(stop.wait())
            while not stop.is_set():
                getting = asyncio.create_task(changed.get())
                done, _ = await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if getting not in done:
                    getting.cancel()
                    break
                event = getting.result()
                pod_ns, _, name = event.name.partition("/")
                phase = _EVENT_PHASES.get(event.kind)
                if phase is None or (namespace is not None and pod_ns != namespace):
                    continue
                record = await state.find_pod(pod_ns, name)
                if record is None or (selector is not None and not selector_matches(selector, _pod_labels(record))):
                    continue
                # the pod as the event found it: by the time Redis is read it may have moved on
                if phase is PodPhase.SUCCEEDED and record.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
                    phase = record.phase
                record = replace(record, phase=phase, node=event.node or record.node)
                row = _pod_row(record, time.time(), None, shape.format)
                change = Listing("pod", [], [(pod_object(record), row if namespace is None else row[1:])])
                change.colour_column, change.single = (2 if namespace is None else 1), True
                if shape.format == "yaml":
                    out.write("---\n")
                print_listing(change, out, replace(shape, headers=False))
                out.flush()
        finally:
            await sub.unsubscribe()
    return 0


def event_age(event: CollapsedEvent, now: float) -> str:
    """When an event was seen, as kubectl writes it: '12s', or '3s (x4 over 40s)' for one seen
    several times."""
    if event.count > 1:
        return f"{format_age(now - event.last)} (x{event.count} over {format_age(now - event.first)})"
    return format_age(now - event.first)


async def event_listing(
    state: ClusterState, *, namespace: str | None, output: Output, pod: str | None = None, names: Sequence[str] = ()
) -> tuple[Listing, list[str]]:
    """Every pod's events (of one namespace unless None; of one pod with ``pod``; those named
    ``names``), identical ones collapsed with their count, by when they were last seen, each as
    a v1 Event with its table row. Raises NotFoundError for an unknown ``pod``."""
    if pod is not None:
        record = await state.find_pod(namespace or "default", pod)
        if record is None:
            raise NotFoundError(not_found("pods", pod, namespace or "default"))
        pods = [record]
    else:
        pods = await list_pods(state, namespace)
    histories = await state.events_of([p.uid for p in pods])
    now = time.time()
    found = sorted(
        ((c, p) for p, history in zip(pods, histories, strict=True) for c in collapse_events(history)),
        key=lambda cp: (cp[0].last, cp[0].first),
    )
    header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if output.format == "wide":
        header += ["SOURCE", "FIRST SEEN", "COUNT", "NAME"]
    across = namespace is None and pod is None
    if across:
        header.insert(0, "NAMESPACE")
    listing = Listing("event", header, colour_column=2 if across else 1, single=len(names) == 1)
    wanted = set(names)
    for c, p in found:
        obj = event_object(c, p)
        if wanted and obj["metadata"]["name"] not in wanted:
            continue
        wanted.discard(obj["metadata"]["name"])
        row = [event_age(c, now), c.type, c.reason, f"pod/{p.name}", c.message]
        if output.format == "wide":
            row += [c.source or "-", format_age(now - c.first), str(c.count), obj["metadata"]["name"]]
        listing.rows.append((obj, [p.namespace, *row] if across else row))
    missing = [not_found("events", name, namespace) for name in names if name in wanted]
    return listing, missing


async def get_events(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    pod: str | None,
    output: str | Output,
    names: Sequence[str] = (),
) -> int:
    """`kubus get events`: every pod's events (of one namespace unless None; of one pod with
    ``pod``), identical ones collapsed as kubectl shows them, by when they were last seen.
    Raises NotFoundError for an unknown ``pod``; exit status 1 when one of ``names`` is not
    found."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_state(settings) as state:
        listing, missing = await event_listing(state, namespace=namespace, output=shape, pod=pod, names=names)
    return report(listing, missing, out, shape, empty="No events found.")


def _node_status(record: NodeRecord) -> str:
    if record.unreachable:
        status = "Unreachable"
    elif not record.ready:
        status = "NotReady"
    else:
        status = "Ready"
    if record.unschedulable:
        status += ",SchedulingDisabled"
    return status


async def nodes_in_use(
    state: ClusterState, selector: LabelSelector | None, names: Sequence[str] = ()
) -> tuple[list[tuple[NodeRecord, NodeInfo]], list[str]]:
    """Every node (those ``names`` when given; whose labels ``selector`` matches) with what its
    reservations use, by name; and a NotFound line per name that is not there."""
    records = {r.name: r for r in await state.list_nodes() if selector is None or selector_matches(selector, r.labels)}
    missing = [not_found("nodes", n) for n in dict.fromkeys(names) if n not in records]
    wanted = [n for n in dict.fromkeys(names) if n in records] if names else None
    snapshot = await state.load_snapshot(wanted) if wanted is None or wanted else []
    return [(records[node.name], node_info_of(node, held)) for node, held in snapshot if node.name in records], missing


def _percent(used: int, total: int) -> str:
    return f"{100 * used // total}%" if total > 0 else "-"


GPU_BAR_WIDTH = 20
"""Characters of a GPU's memory bar in `kubus top nodes --gpus`."""


def gpu_bar(used: int, total: int, width: int = GPU_BAR_WIDTH) -> str:
    """Used memory of one GPU as a text bar: '[#####---------------]' (rounded up, so any use shows)."""
    filled = 0 if total <= 0 else min(width, -(-used * width // total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


_NO_NODES = "No nodes found (start nodes with `kubus up --nodes N`, or run gpu-agents)."


async def top_nodes(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    output: str,
    gpus: bool,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
    headers: bool = True,
) -> int:
    """`kubus top nodes [NAME...]`: requested against allocatable per node, in percent (kubus has
    no usage metrics: requests are what it accounts); with ``gpus`` each GPU's memory as a bar
    (used / total), its pods and health. Exit status 1 when a name is not found."""
    async with open_state(settings) as state:
        nodes, missing = await nodes_in_use(state, selector, names)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    status = 1 if missing else 0
    if output in DOCUMENT_OUTPUTS:
        doc = []
        for record, info in nodes:
            item: dict[str, Any] = {
                "name": record.name,
                "requested": dict(info.requested),
                "allocatable": dict(record.allocatable),
            }
            if gpus:
                item["gpus"] = [
                    {
                        "index": g.index,
                        "model": g.model,
                        "healthy": g.healthy,
                        "memory": g.memory,
                        "memoryUsed": g.memory - free,
                        "pods": pods,
                    }
                    for g, free, pods in zip(record.gpus, info.gpu_free_memory, info.gpu_pod_count, strict=False)
                ]
            doc.append(item)
        write_document({"nodes": doc}, out, output)
        return status
    if not nodes:
        if not missing:
            sys.stderr.write(_NO_NODES + "\n")
        return status
    rows = [["NAME", "CPU(req)", "CPU%", "MEMORY(req)", "MEMORY%", "GPUS(used/total)", "GPU-MEMORY%", "PODS"]]
    for record, info in nodes:
        alloc, req = record.allocatable, info.requested
        gpu_total = sum(g.memory for g in record.gpus)
        gpu_used = gpu_total - sum(info.gpu_free_memory)
        rows.append(
            [
                record.name,
                format_cpu(req.get("cpu", 0)),
                _percent(req.get("cpu", 0), alloc.get("cpu", 0)),
                format_bytes(req.get("memory", 0)),
                _percent(req.get("memory", 0), alloc.get("memory", 0)),
                f"{sum(1 for n in info.gpu_pod_count if n > 0)}/{len(record.gpus)}",
                _percent(gpu_used, gpu_total),
                f"{len(info.pods)}/{alloc.get('pods', 0)}",
            ]
        )
    if not gpus:
        write_table(rows if headers else rows[1:], out)
        return status
    aligned = io.StringIO()
    write_table(rows, aligned)
    header, *lines = aligned.getvalue().splitlines()
    if headers:
        out.write(header + "\n")
    for (record, info), line in zip(nodes, lines, strict=True):
        out.write(line + "\n")
        for g, free, pods in zip(record.gpus, info.gpu_free_memory, info.gpu_pod_count, strict=False):
            used = g.memory - free
            health = "" if g.healthy else "  UNHEALTHY"
            out.write(
                f"  gpu{g.index} {gpu_bar(used, g.memory)} {format_bytes(used)}/{format_bytes(g.memory)}"
                f"  {pods} pod(s)  {g.model}{health}\n"
            )
    return status


async def top_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
    headers: bool = True,
    sort_by: str | None = None,
) -> int:
    """`kubus top pods [NAME...]`: what each pod that holds room on a node (reserved, bound or
    running) requested: cpu, memory, GPUs and GPU memory, and its node. kubus has no usage
    metrics: requests are what it accounts. ``sort_by`` is kubectl top's: cpu or memory. Exit
    status 1 when a name is not found."""
    async with open_state(settings) as state:
        nodes, _ = await nodes_in_use(state, None)
    held: list[tuple[str, PodInfo, NodeRecord]] = []
    for record, info in nodes:
        for key, pod in info.pods.items():
            ns, _, name = key.partition("/")
            if namespace is not None and ns != namespace:
                continue
            if selector is not None and not selector_matches(selector, pod.pod.metadata.labels):
                continue
            if names and name not in names:
                continue
            held.append((key, pod, record))
    seen = {key.partition("/")[2] for key, _, _ in held}
    missing = [not_found("pods", n, namespace or "default") + " on any node" for n in names if n not in seen]
    if sort_by == "cpu":
        held.sort(key=lambda h: -h[1].requests.get("cpu", 0))
    elif sort_by == "memory":
        held.sort(key=lambda h: -h[1].requests.get("memory", 0))
    else:
        held.sort(key=lambda h: h[0])
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    status = 1 if missing else 0

    def gpu_memory(pod: PodInfo, node: NodeRecord) -> int:
        if pod.gpu is None or not pod.gpu_devices:
            return 0
        if pod.gpu.shared:
            return pod.gpu.memory * len(pod.gpu_devices)
        sizes = {g.index: g.memory for g in node.gpus}
        return sum(sizes.get(d, 0) for d in pod.gpu_devices)

    if output in DOCUMENT_OUTPUTS:
        doc = [
            {
                "namespace": key.partition("/")[0],
                "name": key.partition("/")[2],
                "node": node.name,
                "requested": dict(pod.requests),
                "gpuDevices": list(pod.gpu_devices),
                "gpuMemory": gpu_memory(pod, node),
            }
            for key, pod, node in held
        ]
        write_document({"pods": doc}, out, output)
        return status
    if not held:
        if not missing:
            where = f" in namespace {namespace}" if namespace else ""
            sys.stderr.write(f"No pods hold room on a node{where}.\n")
        return status
    rows = [["NAMESPACE", "NAME", "CPU(req)", "MEMORY(req)", "GPUS", "GPU-MEMORY", "NODE"]]
    for key, pod, node in held:
        ns, _, name = key.partition("/")
        memory = gpu_memory(pod, node)
        rows.append(
            [
                ns,
                name,
                format_cpu(pod.requests.get("cpu", 0)),
                format_bytes(pod.requests.get("memory", 0)),
                _devices(pod.gpu_devices),
                format_bytes(memory) if memory else "-",
                node.name,
            ]
        )
    if namespace is not None:
        rows = [row[1:] for row in rows]
    write_table(rows if headers else rows[1:], out)
    return status


async def node_listing(
    state: ClusterState, *, output: Output, names: Sequence[str] = (), selector: LabelSelector | None = None
) -> tuple[Listing, list[str]]:
    """The nodes `kubus get nodes` shows (those ``names`` when given; whose labels ``selector``
    matches), each as a v1 Node with its table row, and a NotFound line per name not there."""
    nodes, missing = await nodes_in_use(state, selector, names)
    now = time.time()
    header = ["NAME", "STATUS", "CPU(req/alloc)", "MEMORY(req/alloc)", "GPUS(used/total)", "PODS", "AGE"]
    if output.format == "wide":
        header += ["GPU-MEMORY(used/total)", "HEARTBEAT", "TAINTS"]
    listing = Listing("node", header, colour_column=1, single=len(names) == 1)
    for record, info in nodes:
        alloc = record.allocatable
        gpus_total = len(record.gpus)
        gpus_used = sum(1 for count in info.gpu_pod_count if count > 0)
        gpu_mem_total = sum(g.memory for g in record.gpus)
        gpu_mem_used = gpu_mem_total - sum(info.gpu_free_memory)
        age = now - record.created_at if record.created_at else None
        heartbeat = now - record.heartbeat if record.heartbeat else None
        row = [
            record.name,
            _node_status(record),
            f"{format_cpu(info.requested.get('cpu', 0))}/{format_cpu(alloc.get('cpu', 0))}",
            f"{format_bytes(info.requested.get('memory', 0))}/{format_bytes(alloc.get('memory', 0))}",
            f"{gpus_used}/{gpus_total}",
            f"{len(info.pods)}/{alloc.get('pods', 0)}",
            format_age(age) if age is not None else "<unknown>",
        ]
        if output.format == "wide":
            taints = ",".join(
                f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in record.taints
            )
            row += [
                f"{format_bytes(gpu_mem_used)}/{format_bytes(gpu_mem_total)}",
                format_age(heartbeat) + " ago" if heartbeat is not None else "never",
                taints or "<none>",
            ]
        listing.rows.append((node_object(record, info, now=now), row))
    return listing, missing


async def get_nodes(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    output: str | Output,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
) -> int:
    """`kubus get nodes [NAME...]`: status, requests against allocatable, GPUs in use, pods, age
    (only the nodes whose labels ``selector`` matches, when given), or the v1 Nodes. Exit
    status 1 when a name is not found."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_state(settings) as state:
        listing, missing = await node_listing(state, output=shape, names=names, selector=selector)
    return report(listing, missing, out, shape, empty=_NO_NODES)


# ---- delete ------------------------------------------------------------------------------------


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

    async with open_state(settings) as state:
        targets: list[PodRecord] = []
        for name in dict.fromkeys(names):
            pod = await state.find_pod(namespace, name)
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
            current = await state.get_pods([p.uid for p in waiting])
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
        async with open_state(settings) as state:
            for kind, namespace, name in stored:
                if kind == "Namespace":
                    gone = await state.delete_namespace(name)
                elif kind == "PriorityClass":
                    gone = await state.delete_priority_class(name)
                elif kind == "PodDisruptionBudget":
                    gone = await state.delete_pod_disruption_budget(f"{namespace}/{name}")
                elif kind == "PodGroup":
                    gone = await state.delete_pod_group(f"{namespace}/{name}")
                else:
                    gone = await state.delete_workload(f"{kind}/{namespace}/{name}")
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


async def get_resources(
    settings: ConnectionSettings,
    out: TextIO,
    groups: Sequence[tuple[str, Sequence[str]]],
    *,
    namespace: str | None,
    output: Output,
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
) -> int:
    """`kubus get pod/web node/sim-00001 ...`: each resource's listing (`pod_listing`,
    `node_listing`, `event_listing`), tables one after the other (a blank line between), or one
    v1 List of them all for -o json|yaml|jsonpath|name, as kubectl prints them. Exit status 1
    when a name is not found."""
    listings: list[Listing] = []
    missing: list[str] = []
    async with open_state(settings) as state:
        for plural, names in groups:
            if plural == "pods":
                found = await pod_listing(
                    state, namespace=namespace, output=output, names=names, show_deleted=show_deleted, selector=selector
                )
            elif plural == "nodes":
                found = await node_listing(state, output=output, names=names, selector=selector)
            else:
                found = await event_listing(state, namespace=namespace, output=output, names=names)
            listings.append(found[0])
            missing += found[1]
    if output.table or output.format == "custom-columns":
        shown = [listing for listing in listings if listing.rows]
        for i, listing in enumerate(shown):
            if i:
                out.write("\n")
            print_listing(listing, out, output)
    else:
        every = Listing("", [], [row for listing in listings for row in listing.rows])
        if every.rows or not missing:
            print_listing(every, out, output)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0
