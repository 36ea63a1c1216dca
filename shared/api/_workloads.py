"""Service (v1), ReplicationController (v1), ReplicaSet and StatefulSet (apps/v1) manifests ->
their `kubus.api.workloads` objects: metadata and selector, checked as the apiserver checks
them. The rest of their spec (ports, replicas, the pod template...) is not read; a field their
spec does not have is an error all the same (a typo such as `selecter` would silently spread
nothing)."""

from __future__ import annotations

from kubus.api._fields import Reader, describe, key_path, shown
from kubus.api._metadata import object_label, object_meta
from kubus.api._pods import _label_selector
from kubus.api.names import label_value_error, qualified_name_error
from kubus.api.objects import LabelSelector
from kubus.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet, Workload
from kubus.core.codec import JSONObject, JSONValue

_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_SPEC_FIELDS = {
    "Service": (
        "ports",
        "selector",
        "clusterIP",
        "clusterIPs",
        "type",
        "externalIPs",
        "sessionAffinity",
        "loadBalancerIP",
        "loadBalancerSourceRanges",
        "externalName",
        "externalTrafficPolicy",
        "healthCheckNodePort",
        "publishNotReadyAddresses",
        "sessionAffinityConfig",
        "ipFamilies",
        "ipFamilyPolicy",
        "allocateLoadBalancerNodePorts",
        "loadBalancerClass",
        "internalTrafficPolicy",
        "trafficDistribution",
    ),
    "ReplicationController": ("replicas", "minReadySeconds", "selector", "template"),
    "ReplicaSet": ("replicas", "minReadySeconds", "selector", "template"),
    "StatefulSet": (
        "replicas",
        "selector",
        "template",
        "volumeClaimTemplates",
        "serviceName",
        "podManagementPolicy",
        "updateStrategy",
        "revisionHistoryLimit",
        "minReadySeconds",
        "persistentVolumeClaimRetentionPolicy",
        "ordinals",
    ),
}
_API_VERSION = {"Service": "v1", "ReplicationController": "v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1"}


def _start(obj: JSONValue, source: str, where: str, kind: str) -> tuple[Reader, JSONObject]:
    r = Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a {kind} (a mapping), got {describe(obj)}")
    r.obj = object_label(kind, obj, where, namespaced=True)
    want = _API_VERSION[kind]
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != want:
        r.fail("apiVersion", f"{shown(api_version)} is not supported for {kind} (want {want})")
    found = obj.get("kind")
    if found is not None and found != kind:
        r.fail("kind", f"expected {kind}, got {shown(found)}")
    for name in obj:
        if name not in _TOP_FIELDS:
            r.fail(key_path("", str(name)), f"unknown field (a {kind} has {', '.join(_TOP_FIELDS)})")
    spec = r.mapping(obj.get("spec"), "spec")
    for name in spec:
        if name not in _SPEC_FIELDS[kind]:
            r.fail(key_path("spec", name), f"unknown field (a {kind} spec has {', '.join(_SPEC_FIELDS[kind])})")
    return r, spec


def _label_map(r: Reader, raw: JSONValue, path: str) -> dict[str, str]:
    return r.string_map(raw, path, qualified_name_error, label_value_error)


def read_service(obj: JSONValue, source: str, where: str) -> Service:
    """Raises ManifestError naming the object and the field."""
    r, spec = _start(obj, source, where, "Service")
    meta = object_meta(r, obj.get("metadata"), "Service", namespaced=True)
    raw = spec.get("selector")
    selector = None if raw is None else _label_map(r, raw, "spec.selector")
    return Service(namespace=meta.namespace, name=meta.name, selector=selector, uid=meta.uid)


def read_replication_controller(obj: JSONValue, source: str, where: str) -> ReplicationController:
    """Raises ManifestError naming the object and the field. An empty spec.selector is the pod
    template's labels (SetDefaults_ReplicationController); still empty, it is an error."""
    r, spec = _start(obj, source, where, "ReplicationController")
    meta = object_meta(r, obj.get("metadata"), "ReplicationController", namespaced=True)
    selector = _label_map(r, spec.get("selector"), "spec.selector")
    if not selector:
        template = r.mapping(spec.get("template"), "spec.template")
        template_meta = r.mapping(template.get("metadata"), "spec.template.metadata")
        selector = _label_map(r, template_meta.get("labels"), "spec.template.metadata.labels")
    if not selector:
        r.fail("spec.selector", "is required (or labels in spec.template.metadata.labels)")
    return ReplicationController(namespace=meta.namespace, name=meta.name, selector=selector, uid=meta.uid)


def _required_selector(r: Reader, spec: JSONObject) -> LabelSelector:
    selector = _label_selector(r, spec.get("selector"), "spec.selector")
    if selector is None:
        r.fail("spec.selector", "is required")
    if not selector.match_labels and not selector.match_expressions:
        r.fail("spec.selector", "must not be empty (an empty selector is invalid, as kube says)")
    return selector


def read_replica_set(obj: JSONValue, source: str, where: str) -> ReplicaSet:
    """Raises ManifestError naming the object and the field (spec.selector is required, and not
    empty)."""
    r, spec = _start(obj, source, where, "ReplicaSet")
    meta = object_meta(r, obj.get("metadata"), "ReplicaSet", namespaced=True)
    return ReplicaSet(namespace=meta.namespace, name=meta.name, selector=_required_selector(r, spec), uid=meta.uid)


def read_stateful_set(obj: JSONValue, source: str, where: str) -> StatefulSet:
    """Raises ManifestError naming the object and the field (spec.selector is required, and not
    empty)."""
    r, spec = _start(obj, source, where, "StatefulSet")
    meta = object_meta(r, obj.get("metadata"), "StatefulSet", namespaced=True)
    return StatefulSet(namespace=meta.namespace, name=meta.name, selector=_required_selector(r, spec), uid=meta.uid)


WORKLOAD_READERS: JSONObject = {
    "Service": read_service,
    "ReplicationController": read_replication_controller,
    "ReplicaSet": read_replica_set,
    "StatefulSet": read_stateful_set,
}
"""Kind -> reader ``(obj, source, where) -> Workload``."""


def read_workload(obj: JSONValue, source: str, where: str, kind: str) -> Workload:
    """The object of ``kind`` (a key of WORKLOAD_READERS). Raises ManifestError."""
    workload: Workload = WORKLOAD_READERS[kind](obj, source, where)
    return workload
