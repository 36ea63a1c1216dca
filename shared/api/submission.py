"""What clients publish to the queue, read and checked: pod manifests to submit, each bad one as one line.

`read_submissions` turns the bytes of a ``kubus.pods.submit`` message (YAML or JSON, one or more
Pods, or a PodList) into `Submission`s: the Pod as `kubus.api.manifests` validates it and its
manifest as the JSON the rest of kubus reads (uid and namespace filled in, so every hop parses
the same pod). What it refuses is a `Rejected`, whose ``str()`` is one line naming the object,
the field and the problem. A JSON PodList of Pods (the watcher submits an apiserver's pods so,
many a message) is read pod by pod: a pod that does not read is rejected alone, in its place
among the others. Any other message is read whole: all its pods, or one `Rejected`.
`read_submission` raises that instead. `admit_priority` is kube's Priority admission of a
submission.

The queue stores exactly ``admit_priority(read_submissions(data)[i], classes).manifest``; `kubus
apply` computes the same to tell created, configured and unchanged pods apart from the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from kubus.api.errors import ManifestError, ManifestErrors
from kubus.api.manifests import json_document, list_items, parse_manifests, parse_pod, read_documents
from kubus.api.objects import Pod
from kubus.api.priority import PriorityClass, PriorityError, resolve_priority
from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject, JSONValue
from kubus.core.errors import KubusError

__all__ = [
    "Rejected",
    "Submission",
    "admit_priority",
    "identify",
    "pod_from_api",
    "pod_list",
    "read_submission",
    "read_submissions",
]

_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
)
"""The metadata of an apiserver's Pod that kubus keeps: what scheduling reads."""


def pod_from_api(obj: JSONMapping) -> bytes:
    """The manifest kubus submits and stores for a Pod an apiserver has (cluster mode): its
    apiVersion, kind, spec and the metadata scheduling reads (`_KEPT_METADATA`), as JSON; not
    its status, resourceVersion or managedFields, which change while the pod does not change for
    scheduling (a status patch, kubus's own among them, gives the same bytes)."""
    metadata = obj.get("metadata") or {}
    return codec.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {k: metadata[k] for k in _KEPT_METADATA if k in metadata},
            "spec": obj.get("spec") or {},
        }
    )

_MAX_LINE = 1000
"""A rejection message longer than this is cut (it travels in events and logs)."""


class Rejected(KubusError, ValueError):
    """Input the queue refuses. ``str()`` is one line; ``key``/``uid`` name the pod when it could
    be read that far (else ""); ``reason`` is a CamelCase word for events (Invalid, TooLarge,
    WrongKind)."""

    def __init__(self, message: str, *, reason: str = "Invalid", key: str = "", uid: str = "") -> None:
        line = " ".join(message.split("\n"))
        if len(line) > _MAX_LINE:
            line = line[: _MAX_LINE - 3] + "..."
        super().__init__(line)
        self.reason = reason
        self.key = key
        self.uid = uid


@dataclass(frozen=True, slots=True)
class Submission:
    """One pod accepted for scheduling."""

    pod: Pod
    """Parsed from `manifest` (so it is exactly what the cycle will parse)."""
    manifest: bytes
    """The pod object as JSON."""


def read_submission(data: bytes, *, source: str, max_manifest_bytes: int) -> list[Submission]:
    """The pods of a submit message, validated (`read_submissions`). Raises Rejected for anything
    that is not one or more valid Pods: garbage, another kind, a Node, invalid values, a
    manifest whose JSON is over ``max_manifest_bytes`` (the first pod refused, for a PodList read
    pod by pod); nothing else for bad input. ``source`` names the input in errors."""
    subs = read_submissions(data, source=source, max_manifest_bytes=max_manifest_bytes)
    for sub in subs:
        if isinstance(sub, Rejected):
            raise sub
    return cast(list[Submission], subs)


def read_submissions(data: bytes, *, source: str, max_manifest_bytes: int) -> list[Submission | Rejected]:
    """Each pod of a submit message, validated, or why it is refused (see the module docstring);
    never empty. Raises nothing for bad input. ``source`` names the input in errors.

    The common cases, one Pod as JSON and a JSON PodList of Pods, are read once: decoded,
    validated and stored as they are (the same steps `parse_manifests` takes for them).
    Anything else takes the general path."""
    doc = _json_object(data)
    if doc is not None:
        kind = doc.get("kind")
        if kind == "Pod":
            return [_json_submission(doc, source, max_manifest_bytes)]
        items = doc.get("items") if kind in _LIST_KINDS and doc.get("apiVersion") == "v1" else None
        if isinstance(items, list) and items and all(isinstance(i, dict) and i.get("kind") == "Pod" for i in items):
            return [_json_submission(item, source, max_manifest_bytes) for item in items]
    try:
        return list(_read_whole(data, source, max_manifest_bytes))
    except Rejected as exc:
        return [exc]


def pod_list(manifests: Sequence[bytes]) -> bytes:
    """One message of these pod manifests (JSON Pods): a v1 PodList, read pod by pod."""
    return b'{"apiVersion":"v1","kind":"PodList","items":[' + b",".join(manifests) + b"]}"


def _read_whole(data: bytes, source: str, max_manifest_bytes: int) -> list[Submission]:
    try:
        manifests = parse_manifests(data, source=source, keep_raw=True)
    except ManifestError as exc:
        raise _rejected(exc, identify(data)) from None
    if manifests.nodes:
        raise Rejected(
            f"{source}: Node {manifests.nodes[0].name}: a node is not submitted to the queue; its agent registers it",
            reason="WrongKind",
        )
    if not manifests.pods:
        raise Rejected(f"{source}: no Pod in the message", reason="Invalid")
    return [
        _submission(o.obj, o.raw, source, max_manifest_bytes) for o in manifests.objects if isinstance(o.obj, Pod)
    ]


def _json_submission(doc: JSONObject, source: str, max_manifest_bytes: int) -> Submission | Rejected:
    """One Pod decoded from JSON, validated and stored as it is (it reads back as exactly this
    pod), or why not."""
    try:
        pod = parse_pod(doc, source=source)
    except ManifestError as exc:
        return _rejected(exc, _identity(doc))
    try:
        return _submission(pod, doc, source, max_manifest_bytes, reparse=False)
    except Rejected as exc:
        return exc


def admit_priority(sub: Submission, classes: Mapping[str, PriorityClass], *, source: str) -> Submission:
    """The submission as kube's Priority admission lets it in (`resolve_priority`): the pod with
    its class's priority, preemptionPolicy and name, in its manifest too (every hop parses the
    same pod). ``source`` names the input in errors. Raises Rejected (reason Forbidden) with
    kube's message."""
    pod = sub.pod
    try:
        resolved = resolve_priority(pod, classes)
    except PriorityError as exc:
        raise Rejected(
            f"{source}: Pod {pod.key}: {exc.field}: {exc}", reason="Forbidden", key=pod.key, uid=pod.metadata.uid
        ) from None
    if resolved is pod:
        return sub
    doc = codec.loads(sub.manifest)
    spec = doc["spec"]  # there is one: the pod was read from this manifest
    spec["priorityClassName"] = resolved.spec.priority_class_name
    spec["priority"] = resolved.spec.priority
    spec["preemptionPolicy"] = resolved.spec.preemption_policy.value
    return Submission(resolved, codec.dumps(doc))


_LIST_KINDS = ("PodList", "List")


def _json_object(data: bytes) -> JSONObject | None:
    """The object of a message that is exactly one JSON object, else None (the general path
    reads it: YAML, lists, a byte order mark, leading blanks, bad JSON, bad UTF-8, and an object
    that may give a key twice, which it refuses)."""
    if data[:1] != b"{":
        return None
    try:
        doc = json_document(data)
    except codec.DecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _rejected(exc: ManifestError, identity: tuple[str, str]) -> Rejected:
    errors = list(exc) if isinstance(exc, ManifestErrors) else [exc]
    first = errors[0]
    key, uid = identity
    reason = "WrongKind" if first.field == "kind" else "Invalid"
    return Rejected("; ".join(str(e) for e in errors), reason=reason, key=key, uid=uid)


def _submission(
    pod: Pod, raw: JSONMapping, source: str, max_manifest_bytes: int, *, reparse: bool = True
) -> Submission:
    label = f"{source}: Pod {pod.key}"
    doc = dict(raw)
    metadata = dict(doc.get("metadata") or {})
    metadata["namespace"] = pod.namespace
    metadata["uid"] = pod.metadata.uid
    doc["metadata"] = metadata
    doc["apiVersion"] = "v1"
    doc["kind"] = "Pod"
    try:
        manifest = codec.dumps(doc)
    except TypeError as exc:  # YAML that has no JSON form (binary, non-string keys)
        raise Rejected(f"{label}: cannot be stored as JSON: {exc}", key=pod.key, uid=pod.metadata.uid) from None
    if len(manifest) > max_manifest_bytes:
        raise Rejected(
            f"{label}: the manifest is {len(manifest)} bytes as JSON, "
            f"more than the {max_manifest_bytes} the queue accepts",
            reason="TooLarge",
            key=pod.key,
            uid=pod.metadata.uid,
        )
    if not reparse:  # decoded from JSON: the JSON stored reads back as exactly this pod
        return Submission(pod, manifest)
    try:
        parsed = parse_pod(codec.loads(manifest), source=source)
    except ManifestError as exc:  # cannot be: the same object validated a moment ago
        raise Rejected(str(exc), key=pod.key, uid=pod.metadata.uid) from None
    return Submission(parsed, manifest)


def identify(data: bytes) -> tuple[str, str]:
    """Best effort for a message that failed validation: the (``namespace/name``, uid) of the
    first pod it names (the uid the API would give it, when the manifest has none), or ("", "")."""
    try:
        # A key given twice: the last one names it.
        docs = list(read_documents(data.decode("utf-8-sig"), refuse_duplicates=False))
    except Exception:  # garbage: no identity, and no second error
        return "", ""
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind", "Pod") in ("Pod", "PodList", "List"):
            candidates = [doc] if doc.get("kind", "Pod") == "Pod" else list_items(doc) or []
            for candidate in candidates:
                found = _identity(candidate)
                if found[0]:
                    return found
    return "", ""


def _identity(doc: JSONValue) -> tuple[str, str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return "", ""
    meta = doc["metadata"]
    stub_meta = {k: meta[k] for k in ("name", "namespace", "uid") if isinstance(meta.get(k), str)}
    if "name" not in stub_meta:
        return "", ""
    # The identity parse_pod gives a pod with this metadata (the uid derived as the API would).
    try:
        pod = parse_pod({"metadata": stub_meta, "spec": {"containers": [{"name": "c"}]}})
    except ManifestError:
        return "", ""
    return pod.key, pod.metadata.uid
