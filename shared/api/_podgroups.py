"""A PodGroup manifest (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins' Coscheduling) ->
PodGroup (see kubus.api.manifests and kubus.api.podgroups)."""

from __future__ import annotations

from kubus.api._fields import Reader, describe, key_path, shown
from kubus.api._metadata import STDIN, object_label, object_meta
from kubus.api.podgroups import PodGroup
from kubus.core.codec import JSONMapping, JSONValue

POD_GROUP_API_VERSION = "scheduling.x-k8s.io/v1alpha1"

_SPEC_FIELDS = ("minMember", "minResources", "scheduleTimeoutSeconds")
_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_MAX_INT32 = 2**31 - 1


def read_pod_group(obj: JSONValue, source: str, where: str) -> PodGroup:
    """Raises ManifestError naming the object and the field."""
    r = Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a PodGroup (a mapping), got {describe(obj)}")
    r.obj = object_label("PodGroup", obj, where, namespaced=True)
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != POD_GROUP_API_VERSION:
        r.fail("apiVersion", f"{shown(api_version)} is not supported for PodGroup (want {POD_GROUP_API_VERSION})")
    kind = obj.get("kind")
    if kind is not None and kind != "PodGroup":
        r.fail("kind", f"expected PodGroup, got {shown(kind)}")
    for name in obj:
        if name not in _TOP_FIELDS:
            r.fail(key_path("", str(name)), f"unknown field (a PodGroup has {', '.join(_TOP_FIELDS)})")
    metadata = object_meta(r, obj.get("metadata"), "PodGroup", namespaced=True)

    if obj.get("spec") is None:
        r.fail("spec", "is required (spec.minMember at least)")
    spec = r.mapping(obj.get("spec"), "spec")
    for name in spec:
        if name not in _SPEC_FIELDS:
            r.fail(key_path("spec", name), f"unknown field (a PodGroup spec has {', '.join(_SPEC_FIELDS)})")
    if spec.get("minMember") is None:
        r.fail("spec.minMember", "is required (an integer, at least 1)")
    min_member = r.integer(spec.get("minMember"), "spec.minMember", lo=1, hi=_MAX_INT32)
    min_resources = r.resource_list(spec.get("minResources"), "spec.minResources", pod=True)
    timeout = r.optional_integer(spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds", lo=1, hi=_MAX_INT32)
    return PodGroup(
        namespace=metadata.namespace,
        name=metadata.name,
        min_member=min_member,
        min_resources=min_resources,
        schedule_timeout_seconds=timeout,
        creation_timestamp=metadata.creation_timestamp,
    )


def parse_pod_group(obj: JSONMapping, *, source: str = STDIN, index: int = 1) -> PodGroup:
    """A PodGroup from its decoded manifest, validated. `source` and `index` (the 1-based
    document number) only label errors. Raises ManifestError."""
    return read_pod_group(obj, source, f"document {index}")
