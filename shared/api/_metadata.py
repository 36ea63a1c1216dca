"""What every manifest object has: kind and apiVersion, metadata (names, uid, labels), and the
label errors give the object (`Pod ns/name`)."""

from __future__ import annotations

import uuid

from kubus.api._fields import (
    Reader,
    describe,
    quote,
    shown,
)
from kubus.api.names import dns1123_label_error, dns1123_subdomain_error, label_value_error, qualified_name_error
from kubus.api.objects import (
    ObjectMeta,
    OwnerReference,
)
from kubus.core.codec import JSONMapping, JSONValue

STDIN = "<stdin>"
"""The source errors name for input without a file."""

# uuid5 namespace for uids kubus derives: uuid5(NAMESPACE_DNS, "kubus.io").
_UID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "kubus.io")


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def check_kind(r: Reader, obj: JSONMapping, want: str) -> None:
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != "v1":
        r.fail("apiVersion", f"{shown(api_version)} is not supported for {want} (want v1)")
    kind = obj.get("kind")
    if kind is not None and kind != want:
        r.fail("kind", f"expected {want}, got {shown(kind)}")


def object_label(kind: str, obj: JSONMapping, where: str, namespaced: bool) -> str:
    """`Pod ns/name` or `Node name` when the manifest names the object well enough, else where."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return where
    name = meta.get("name")
    if not isinstance(name, str) or not name or not name.isprintable():
        return where
    if not namespaced:
        return f"{kind} {name}"
    namespace = meta.get("namespace")
    if namespace is None or namespace == "":
        namespace = "default"
    if not isinstance(namespace, str) or not namespace.isprintable():
        return f"{kind} {name}"
    return f"{kind} {namespace}/{name}"


def object_meta(r: Reader, raw: JSONValue, kind: str, namespaced: bool) -> ObjectMeta:
    meta = r.mapping(raw, "metadata")
    if raw is None:
        r.fail("metadata", "is required")
    name = r.string(meta.get("name"), "metadata.name")
    if not name:
        hint = " (generateName is not supported)" if meta.get("generateName") else ""
        r.fail("metadata.name", f"is required{hint}")
    if problem := dns1123_subdomain_error(name):
        r.fail("metadata.name", f"{quote(name)} is not a valid name: {problem}")
    namespace = ""
    if namespaced:
        namespace = r.string(meta.get("namespace"), "metadata.namespace") or "default"
        if problem := dns1123_label_error(namespace):
            r.fail("metadata.namespace", f"{quote(namespace)} is not a valid namespace: {problem}")
    uid = r.string(meta.get("uid"), "metadata.uid") or _uid(kind, namespace, name)
    labels = r.string_map(meta.get("labels"), "metadata.labels", qualified_name_error, label_value_error)
    annotations = r.string_map(meta.get("annotations"), "metadata.annotations", qualified_name_error)
    created = r.timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        labels=labels,
        annotations=annotations,
        creation_timestamp=created,
        owner_references=owner_references(r, meta.get("ownerReferences")),
        deletion_timestamp=(
            None
            if meta.get("deletionTimestamp") in (None, "")
            else r.timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp")
        ),
    )


def owner_references(r: Reader, raw: JSONValue) -> tuple[OwnerReference, ...]:
    """metadata.ownerReferences, checked as kube's ValidateOwnerReferences checks them:
    apiVersion, kind and name required (uid too in kube; kubus accepts a reference without
    one, as a hand-written manifest has none and nothing it reads needs it), at most one
    controller."""
    refs = []
    controller_at = -1
    for i, item in enumerate(r.sequence(raw, "metadata.ownerReferences")):
        path = f"metadata.ownerReferences[{i}]"
        ref = r.mapping(item, path)
        if item is None:
            r.fail(path, "expected a mapping, got null")
        controller = r.boolean(ref.get("controller"), f"{path}.controller", False)
        if controller:
            if controller_at >= 0:
                r.fail(
                    f"{path}.controller",
                    f"only one reference can have controller set to true (also ownerReferences[{controller_at}])",
                )
            controller_at = i
        refs.append(
            OwnerReference(
                api_version=r.required_string(ref.get("apiVersion"), f"{path}.apiVersion"),
                kind=r.required_string(ref.get("kind"), f"{path}.kind"),
                name=r.required_string(ref.get("name"), f"{path}.name"),
                uid=r.string(ref.get("uid"), f"{path}.uid"),
                controller=controller,
            )
        )
    return tuple(refs)


def read_object(obj: JSONValue, source: str, where: str, kind: str, *, namespaced: bool) -> tuple[Reader, ObjectMeta]:
    """A reader for one object of `kind` (errors name it as well as the manifest allows) and its
    metadata, after checking it is a mapping of that kind and apiVersion v1. Raises ManifestError."""
    r = Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a {kind} (a mapping), got {describe(obj)}")
    r.obj = object_label(kind, obj, where, namespaced=namespaced)
    check_kind(r, obj, kind)
    return r, object_meta(r, obj.get("metadata"), kind, namespaced=namespaced)
