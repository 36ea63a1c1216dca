"""`kubus apply`, `kubus get` and `kubus delete`: the cluster as kubectl users know it.

apply validates every manifest locally first (nothing is stored or published if one is wrong),
stores the Namespaces, PriorityClasses, PodDisruptionBudgets, workloads (Services,
ReplicationControllers, ReplicaSets, StatefulSets) and PodGroups in Redis, then
publishes each pod on its own to ``kubus.pods.submit``; get reads Redis; delete publishes a
PodDeletion and waits until the queue has recorded it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

import yaml
from nats.js.api import DeliverPolicy

from kubus import codec
from kubus.api.disruption import PodDisruptionBudget
from kubus.api.errors import ManifestError
from kubus.api.manifests import Manifests, parse_manifests, parse_pod, read_documents, wire_pod
from kubus.api.namespaces import Namespace
from kubus.api.objects import LabelSelector
from kubus.api.pod_affinity import selector_matches
from kubus.api.podgroups import PodGroup
from kubus.api.priority import PriorityClass, PriorityError, check_priority_class
from kubus.api.quantity import format_bytes, format_cpu
from kubus.api.submission import Rejected, admit_priority, read_submission
from kubus.api.workloads import Workload
from kubus.bus import msgids
from kubus.bus.connection import Publication, publish_durable, publish_durable_many, settle
from kubus.bus.messages import ClusterEvent, PodDeletion, decode, encode
from kubus.bus.subjects import EVENTS_STREAM, MAX_MANIFEST_SIZE, POD_EVENTS, PODS_DELETE, PODS_SUBMIT, EventKind
from kubus.cli.connect import UsageError, open_bus, open_state
from kubus.kernels.nodeinfo import NodeInfo
from kubus.service import TRANSIENT_ERRORS
from kubus.settings import ConnectionSettings
from kubus.store.cluster_state import ClusterState, node_info_of
from kubus.store.permits import PermitState
from kubus.store.records import NodeRecord, PodPhase, PodRecord

__all__ = [
    "APPLY_TIMEOUT",
    "ApplyObjects",
    "SubmitManifest",
    "apply",
    "delete_pod",
    "format_age",
    "format_bytes",
    "format_cpu",
    "get_nodes",
    "get_pods",
    "list_pods",
    "pod_manifests",
    "read_apply_manifests",
    "read_pod_manifests",
    "submit",
    "write_table",
]

_PUBLISH_WINDOW = 256
"""Submissions in flight at once: enough to keep JetStream busy, few enough to stay polite."""


# ---- apply -------------------------------------------------------------------------------------

_LIST_KINDS = ("List", "PodList", "NodeList")


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


def _objects(text: str) -> list[Any]:
    """The top-level objects of a manifest text, List items flattened, in order."""
    out: list[Any] = []
    for doc in read_documents(text):
        if isinstance(doc, dict) and doc.get("kind") in _LIST_KINDS and isinstance(doc.get("items"), list):
            implied = {"PodList": "Pod", "NodeList": "Node"}.get(doc["kind"])
            for item in doc["items"]:
                if implied and isinstance(item, dict) and "kind" not in item:
                    item = {**item, "kind": implied}
                out.append(item)
        elif doc is not None:
            out.append(doc)
    return out


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


def read_apply_manifests(paths: Sequence[str], stdin: Any = None) -> ApplyObjects:
    """`read_pod_manifests`, and the files' other objects. Raises as it does; the same object
    in two files, or a second globalDefault PriorityClass, is a UsageError."""
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
        manifests = parse_manifests(raw, source=source)  # validates; raises ManifestError(s)
        if manifests.nodes:
            raise UsageError(
                f"{source}: Node {manifests.nodes[0].name}: kubus apply submits pods; nodes join the "
                "cluster through their gpu-agent"
            )
        _take_cluster_objects(result, manifests, source, others_seen)
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
        every = _objects(text)
        objects = [o for o in every if isinstance(o, dict) and o.get("kind", "Pod") == "Pod"]
        group_objects = [o for o in every if isinstance(o, dict) and o.get("kind") == "PodGroup"]
        if len(group_objects) != len(manifests.pod_groups):  # cannot happen: both read the same documents
            raise UsageError(
                f"{source}: found {len(manifests.pod_groups)} pod groups but {len(group_objects)} PodGroup objects"
            )
        for group, obj in zip(manifests.pod_groups, group_objects, strict=True):
            if group.key in group_seen:
                raise UsageError(
                    f"{source}: PodGroup {group.key}: metadata.name: duplicate: the same pod group is already "
                    f"in {group_seen[group.key]}"
                )
            group_seen[group.key] = source
            groups.append((group, codec.dumps(obj)))
        if len(objects) != len(manifests.pods):  # cannot happen: both read the same documents
            raise UsageError(f"{source}: found {len(manifests.pods)} pods but {len(objects)} Pod objects")
        for pod, obj in zip(manifests.pods, objects, strict=True):
            where = f"{source}: Pod {pod.key}"
            if pod.key in seen:
                raise UsageError(f"{where}: metadata.name: duplicate: the same pod is already in {seen[pod.key]}")
            seen[pod.key] = source
            try:
                data = codec.dumps(obj)
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
    Raises UsageError for a refused class."""
    classes = dict(await state.priority_classes())
    for pc in objects.priority_classes:
        try:
            check_priority_class(pc, classes.values())
        except PriorityError as e:
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
        classes[pc.name] = pc
    written: list[tuple[str, str, bool]] = []
    for ns in objects.namespaces:
        written.append(("namespace", ns.name, await state.put_namespace(ns)))
    for pc in objects.priority_classes:
        try:
            written.append(("priorityclass", pc.name, await state.put_priority_class(pc)))
        except PriorityError as e:  # another apply stored a class meanwhile
            raise UsageError(f"PriorityClass {pc.name}: {e.field}: {e}") from None
    for pdb in objects.disruption_budgets:
        written.append(("poddisruptionbudget", pdb.name, await state.put_pod_disruption_budget(pdb)))
    for obj in objects.workloads:
        written.append((obj.kind.lower(), obj.name, await state.put_workload(obj)))
    for group, manifest in objects.pod_groups:
        written.append(("podgroup", group.name, await state.put_pod_group(group, manifest)))
    if quiet:
        out.write(f"{len(written)} objects configured ({sum(changed for _, _, changed in written)} changed)\n")
        return
    for kind, name, changed in written:
        out.write(f"{kind}/{name} {'configured' if changed else 'unchanged'}\n")


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
    elif existing.manifest == item.expected:
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
                    rejected = [e for e in await state.events(item.pod.uid) if e.reason == "Rejected" and e.at >= since]
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
    objects = read_apply_manifests(paths)
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


DOCUMENT_OUTPUTS = ("json", "yaml")
"""`-o` values that print one document instead of a table."""


def write_document(doc: Mapping[str, Any], out: TextIO, output: str) -> None:
    """``doc`` as pretty JSON or as YAML (``output``: one of DOCUMENT_OUTPUTS), the keys in order."""
    if output == "yaml":
        out.write(yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True))
    else:
        out.write(codec.dumps(doc, pretty=True).decode() + "\n")


def write_table(
    rows: Sequence[Sequence[str]], out: TextIO, *, colour_column: int | None = None, header: bool = True
) -> None:
    """Left-aligned columns three spaces apart, as kubectl prints them; the last one unpadded.
    On a terminal (and without NO_COLOR), the cells of ``colour_column`` below the header (the
    first row, unless ``header`` is False) are coloured by what they say (`STATE_COLOURS`);
    aligned first, so colour never shifts a column."""
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    paint = colour_column is not None and uses_colour(out)
    for n, r in enumerate(rows):
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]
        if paint and (n > 0 or not header) and colour_column is not None and colour_column < len(cells):
            cells[colour_column] = coloured(cells[colour_column])
        out.write("   ".join(cells).rstrip() + "\n")


STATE_COLOURS = {
    "Running": "32",
    "Succeeded": "32",
    "Bound": "32",
    "Ready": "32",
    "Normal": "32",
    "Pending": "33",
    "Reserved": "33",
    "Waiting": "33",
    "Warning": "33",
    "Failed": "31",
    "NotReady": "31",
    "Unreachable": "31",
    "Deleted": "2",
}
"""ANSI SGR codes by the first word of a state cell: green done or well, yellow on its way or
a warning, red failed or lost, dim gone."""


def uses_colour(out: TextIO) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (no-color.org)."""
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def coloured(cell: str) -> str:
    """``cell`` in the colour of its first word, padding included; unchanged for an unknown state."""
    word = cell.split(" ", 1)[0].split(",", 1)[0]
    code = STATE_COLOURS.get(word)
    return f"\x1b[{code}m{cell}\x1b[0m" if code else cell


def format_age(seconds: float) -> str:
    """kubectl's short duration: 45s, 3m12s, 5m, 2h10m, 3d4h, 12d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s" if s < 60 else f"{s // 60}m{s % 60}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m" if m < 60 else f"{m // 60}h{m % 60}m" if m % 60 else f"{m // 60}h"
    h = m // 60
    if h < 48:
        return f"{h}h"
    d = h // 24
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


async def list_pods(state: ClusterState, namespace: str | None) -> list[PodRecord]:
    """The newest pod of every namespace/name (of one namespace unless None), sorted by key."""
    index = await state.redis.hgetall(state.keys.pod_keys_index())
    pairs = sorted((codec.text(k), codec.text(v)) for k, v in index.items())
    if namespace is not None:
        pairs = [(k, u) for k, u in pairs if k.partition("/")[0] == namespace]
    return [p for p in await state.get_pods([u for _, u in pairs]) if p is not None]


def _devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices) if devices else "-"


def _pod_json(p: PodRecord, now: float) -> dict[str, Any]:
    return {
        "namespace": p.namespace,
        "name": p.name,
        "uid": p.uid,
        "phase": str(p.phase),
        "node": p.node or None,
        "gpuDevices": list(p.gpu_devices),
        "schedulerName": p.profile,
        "attempts": p.attempts,
        "reason": p.reason,
        "message": p.message,
        "createdAt": p.created_at,
        "updatedAt": p.updated_at,
        "ageSeconds": round(now - p.created_at, 3) if p.created_at else None,
    }


def _pod_labels(record: PodRecord) -> dict[str, str]:
    """The labels of the pod's stored manifest (validated at submit)."""
    try:
        labels = codec.loads(record.manifest).get("metadata", {}).get("labels") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


async def get_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str,
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
) -> int:
    """`kubus get pods`: one row per pod (Deleted ones hidden unless ``show_deleted``; only those
    whose labels ``selector`` matches, when given)."""
    async with open_state(settings) as state:
        pods = await list_pods(state, namespace)
        if selector is not None:
            pods = [p for p in pods if selector_matches(selector, _pod_labels(p))]
        reserved = [p.uid for p in pods if p.phase is PodPhase.RESERVED]
        waits = await state.permit_states(reserved) if reserved else {}
    waiting = {uid: w for uid, w in waits.items() if w is not None and w.pending and not w.rejected}
    now = time.time()
    if not show_deleted:
        pods = [p for p in pods if p.phase is not PodPhase.DELETED]
    if output in DOCUMENT_OUTPUTS:
        items = []
        for p in pods:
            item = _pod_json(p, now)
            if p.uid in waiting:
                item["waitingOnPermit"] = sorted(waiting[p.uid].pending)
            items.append(item)
        write_document({"pods": items}, out, output)
        return 0
    if not pods:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        sys.stderr.write(f"No pods found in {where}.\n")
        return 0
    header = ["NAMESPACE", "NAME", "PHASE", "NODE", "GPUS", "AGE", "REASON"]
    if output == "wide":
        header += ["SCHEDULER", "ATTEMPTS", "MESSAGE"]
    write_table([header, *(_pod_row(p, now, waiting.get(p.uid), output) for p in pods)], out, colour_column=2)
    return 0


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
    output: str,
    selector: LabelSelector | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """`kubus get pods -w`: after the list, one line for each change of a pod (of the namespace,
    matching ``selector``) as the services announce it on the bus, read again from Redis, until
    ``stop`` is set or the command is interrupted (Ctrl-C: exit 0). A JSON/YAML watch prints one
    document per change."""
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
            await get_pods(settings, out, namespace=namespace, output=output, selector=selector)
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
                if output in DOCUMENT_OUTPUTS:
                    write_document({"pods": [_pod_json(record, time.time())]}, out, output)
                else:
                    row = _pod_row(record, time.time(), None, output)
                    write_table([row], out, colour_column=2, header=False)
                out.flush()
        finally:
            await sub.unsubscribe()
    return 0


async def get_events(
    settings: ConnectionSettings, out: TextIO, *, namespace: str | None, pod: str | None, output: str
) -> int:
    """`kubus get events`: every pod's events (of one namespace unless None; of one pod with
    ``pod``), oldest first. Raises UsageError for an unknown ``pod``."""
    async with open_state(settings) as state:
        if pod is not None:
            record = await state.find_pod(namespace or "default", pod)
            if record is None:
                raise UsageError(f'pod "{pod}" not found in namespace "{namespace or "default"}"')
            pods = [record]
        else:
            pods = await list_pods(state, namespace)
        histories = await state.events_of([p.uid for p in pods])
    now = time.time()
    events = sorted(
        ((e, p) for p, history in zip(pods, histories, strict=True) for e in history), key=lambda ep: ep[0].time
    )
    if output in DOCUMENT_OUTPUTS:
        items = [
            {
                "namespace": p.namespace,
                "object": f"pod/{p.name}",
                "time": e.time,
                "type": str(e.type),
                "reason": e.reason,
                "source": e.source,
                "message": e.message,
            }
            for e, p in events
        ]
        write_document({"events": items}, out, output)
        return 0
    if not events:
        sys.stderr.write("No events found.\n")
        return 0
    rows = [["LAST SEEN", "TYPE", "REASON", "OBJECT", "SOURCE", "MESSAGE"]]
    if namespace is None:
        rows[0].insert(0, "NAMESPACE")
    for e, p in events:
        row = [format_age(now - e.time), str(e.type), e.reason, f"pod/{p.name}", e.source or "-", e.message]
        rows.append([p.namespace, *row] if namespace is None else row)
    write_table(rows, out, colour_column=2 if namespace is None else 1)
    return 0


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


async def _nodes_in_use(
    settings: ConnectionSettings, selector: LabelSelector | None
) -> list[tuple[NodeRecord, NodeInfo]]:
    """Every node (whose labels ``selector`` matches) with what its reservations use, by name."""
    async with open_state(settings) as state:
        records = {
            r.name: r for r in await state.list_nodes() if selector is None or selector_matches(selector, r.labels)
        }
        snapshot = await state.load_snapshot()
    return [(records[node.name], node_info_of(node, held)) for node, held in snapshot if node.name in records]


def _percent(used: int, total: int) -> str:
    return f"{100 * used // total}%" if total > 0 else "-"


GPU_BAR_WIDTH = 20
"""Characters of a GPU's memory bar in `kubus top nodes --gpus`."""


def gpu_bar(used: int, total: int, width: int = GPU_BAR_WIDTH) -> str:
    """Used memory of one GPU as a text bar: '[#####---------------]' (rounded up, so any use shows)."""
    filled = 0 if total <= 0 else min(width, -(-used * width // total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


async def top_nodes(
    settings: ConnectionSettings, out: TextIO, *, output: str, gpus: bool, selector: LabelSelector | None = None
) -> int:
    """`kubus top nodes`: requested against allocatable per node, in percent; with ``gpus`` each
    GPU's memory as a bar (used / total), its pods and health."""
    nodes = await _nodes_in_use(settings, selector)
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
        return 0
    if not nodes:
        sys.stderr.write("No nodes found (start nodes with `kubus up --nodes N`, or run gpu-agents).\n")
        return 0
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
        write_table(rows, out)
        return 0
    aligned = io.StringIO()
    write_table(rows, aligned)
    header, *lines = aligned.getvalue().splitlines()
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
    return 0


async def get_nodes(
    settings: ConnectionSettings, out: TextIO, *, output: str, selector: LabelSelector | None = None
) -> int:
    """`kubus get nodes`: status, requests against allocatable, GPUs in use, pods, age (only the
    nodes whose labels ``selector`` matches, when given)."""
    now = time.time()
    rows_json = []
    rows = [["NAME", "STATUS", "CPU(req/alloc)", "MEMORY(req/alloc)", "GPUS(used/total)", "PODS", "AGE"]]
    if output == "wide":
        rows[0] += ["GPU-MEMORY(used/total)", "HEARTBEAT", "TAINTS"]
    for record, info in await _nodes_in_use(settings, selector):
        alloc = record.allocatable
        gpus_total = len(record.gpus)
        gpus_used = sum(1 for count in info.gpu_pod_count if count > 0)
        gpu_mem_total = sum(g.memory for g in record.gpus)
        gpu_mem_used = gpu_mem_total - sum(info.gpu_free_memory)
        age = now - record.creation_timestamp if record.creation_timestamp else None
        heartbeat = now - record.heartbeat if record.heartbeat else None
        if output in DOCUMENT_OUTPUTS:
            rows_json.append(
                {
                    "name": record.name,
                    "status": _node_status(record),
                    "requested": dict(info.requested),
                    "allocatable": dict(alloc),
                    "pods": len(info.pods),
                    "gpus": {
                        "used": gpus_used,
                        "total": gpus_total,
                        "memoryUsed": gpu_mem_used,
                        "memory": gpu_mem_total,
                    },
                    "heartbeatAgeSeconds": None if heartbeat is None else round(heartbeat, 3),
                    "unreachable": record.unreachable,
                    "unschedulable": record.unschedulable,
                }
            )
            continue
        row = [
            record.name,
            _node_status(record),
            f"{format_cpu(info.requested.get('cpu', 0))}/{format_cpu(alloc.get('cpu', 0))}",
            f"{format_bytes(info.requested.get('memory', 0))}/{format_bytes(alloc.get('memory', 0))}",
            f"{gpus_used}/{gpus_total}",
            f"{len(info.pods)}/{alloc.get('pods', 0)}",
            format_age(age) if age is not None else "-",
        ]
        if output == "wide":
            taints = ",".join(
                f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in record.taints
            )
            row += [
                f"{format_bytes(gpu_mem_used)}/{format_bytes(gpu_mem_total)}",
                format_age(heartbeat) + " ago" if heartbeat is not None else "never",
                taints or "<none>",
            ]
        rows.append(row)
    if output in DOCUMENT_OUTPUTS:
        write_document({"nodes": rows_json}, out, output)
        return 0
    if len(rows) == 1:
        sys.stderr.write("No nodes found (start nodes with `kubus up --nodes N`, or run gpu-agents).\n")
        return 0
    write_table(rows, out, colour_column=1)
    return 0


# ---- delete ------------------------------------------------------------------------------------


async def delete_pod(
    settings: ConnectionSettings, out: TextIO, *, namespace: str, name: str, wait: float | None
) -> int:
    """`kubus delete pod NAME`: publish the deletion; unless ``wait`` is None, wait that many
    seconds for the pod to be recorded Deleted. Raises UsageError for an unknown pod."""
    async with open_state(settings) as state:
        pod = await state.find_pod(namespace, name)
        if pod is None:
            raise UsageError(f'pod "{name}" not found in namespace "{namespace}"')
        if pod.phase is PodPhase.DELETED:
            out.write(f"pod/{name} already deleted\n")
            return 0
        async with open_bus(settings) as (_, js):
            msg_id = msgids.delete(namespace, name, pod.uid, time.time_ns())
            await publish_durable(js, PODS_DELETE, encode(PodDeletion(namespace=namespace, name=name)), msg_id)
        if wait is None:
            out.write(f"pod/{name} deletion submitted\n")
            return 0
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            current = await state.get_pod(pod.uid)
            if current is None or current.phase is PodPhase.DELETED:
                out.write(f"pod/{name} deleted\n")
                return 0
            await asyncio.sleep(0.1)
    sys.stderr.write(
        f"error: pod {namespace}/{name}: deletion submitted but not recorded within {wait:g}s "
        "(is the queue service running?)\n"
    )
    return 1
