"""Read Kubernetes manifests (Pods and Nodes) into kubus objects, as the API server would.

Input is YAML or JSON, one or many documents (`---`), each a `v1` `Pod` or `Node`, or a `List`
(`PodList`, `NodeList`) whose `items` are. Empty documents are skipped. Fields scheduling does
not read are ignored, as kube ignores them; fields it reads must have the right type and a valid
value, otherwise the load fails with a ManifestError naming the file, the object and the field::

    pods.yaml: Pod default/web-1: spec.containers[0].resources.requests.cpu: quantity "abc" is not valid

`load_manifests` (a file, standard input or text) and `parse_manifests` (text only) report
every bad object of the input at once (ManifestErrors), the first problem of each; `parse_pod`
and `parse_node` read one decoded object.

Validation follows the API server where scheduling depends on it: quantities, enums (taint
effects, toleration and selector operators, preemptionPolicy, whenUnsatisfiable), the rules on
selector values (In/NotIn need values, Exists/DoesNotExist take none, Gt/Lt take one
integer, matchFields only `metadata.name` with one value), tolerations (Exists takes no value,
an empty key needs Exists, tolerationSeconds only with NoExecute), names (RFC 1123), label keys
and values, container resource names (cpu, memory, ephemeral-storage, hugepages-*, or a
domain-qualified extended resource: "cpus" is a typo, not a resource), requests not above
limits (equal for extended resources and hugepages), whole numbers for extended resources,
ports (1-65535, TCP/UDP/SCTP, a valid hostIP), one RFC 3339 time format, and kubus's own
`kubus.io/gpu*` annotations (see kubus.api.gpus). Two objects of the same kind and name in one
load are an error.

Defaults applied, as the API server, kubelet and controllers would before the scheduler sees an
object:

- `metadata.namespace` of a Pod: "default". Nodes are cluster-scoped (namespace "").
- `metadata.uid` when absent: a UUID derived from kind, namespace and name (uuid5), so loading
  the same file twice gives the same uids and runs are reproducible.
- `spec.schedulerName`: "default-scheduler"; `spec.preemptionPolicy`: PreemptLowerPriority;
  `spec.priority`: 0 (kubus does not resolve `priorityClassName`; give `priority` explicitly).
- Container requests (init containers too): a resource with a limit and no request gets the
  limit as its request (SetDefaults_Pod).
- Node allocatable: when `status.allocatable` is absent or empty, it is `status.capacity`.
- Node `pods`: 110 (kubelet's default maxPods) in capacity and in allocatable when missing.
- Node `nvidia.com/gpu`: for a node with a `kubus.io/gpus` annotation and no `nvidia.com/gpu`,
  the number of GPUs in capacity and of healthy GPUs in allocatable.
- Node label `kubernetes.io/hostname`: the node's name when missing (kubelet sets it; topology
  keys such as hostname anti-affinity rely on it).
- Node `status.conditions`: a node without a Ready condition is ready.

No taints are derived from conditions or from `spec.unschedulable` (kube's node lifecycle
controller adds `node.kubernetes.io/not-ready` and `.../unschedulable` taints): kubus's plugins
read `NodeStatus.ready` and `NodeSpec.unschedulable` directly.

Exactness: quantities are converted to integers per field (see kubus.api.quantity), so a request
finer than 1m CPU or 1 byte is rounded up where it is written.

Deliberate leniencies: a missing `apiVersion` is accepted (a present one must be `v1`), and an
extended resource such as `nvidia.com/gpu` may be given in requests alone (kube insists on a
limit; if both are given they must be equal, as in kube).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import orjson
import yaml

from kubus.api.errors import ManifestError, ManifestErrors
from kubus.api.gpus import (
    GPU_DEVICES_ANNOTATION,
    GPUS_ANNOTATION,
    GPUAnnotationError,
    parse_node_gpus,
    pod_gpu_devices,
    pod_gpu_request,
)
from kubus.api.names import dns1123_label_error, dns1123_subdomain_error, label_value_error, qualified_name_error
from kubus.api.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Affinity,
    Container,
    ContainerImage,
    ContainerPort,
    GPUDevice,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    PreemptionPolicy,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from kubus.api.quantity import MAX_INT64, milli_value, parse_quantity, value

__all__ = [
    "DEFAULT_MAX_PODS",
    "DEFAULT_SCHEDULER_NAME",
    "Manifests",
    "load_manifests",
    "parse_manifests",
    "parse_node",
    "parse_pod",
    "read_documents",
]

DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_MAX_PODS = 110
"""kubelet's default --max-pods, given to nodes whose status has no `pods`."""

HOSTNAME_LABEL = "kubernetes.io/hostname"
STDIN = "<stdin>"

# uuid5 namespace for uids kubus derives: uuid5(NAMESPACE_DNS, "kubus.io").
_UID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "kubus.io")

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

_LIST_KINDS = {"List": None, "PodList": "Pod", "NodeList": "Node"}
_POD_RESOURCES = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE})

# --- YAML: the safe loader (C when available), with timestamps left as strings -------------------
# kube decodes YAML through JSON, where a timestamp is just a string; PyYAML would make a label
# value like 2024-01-02 a date. Removing the implicit resolver keeps such values strings.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    pass


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

_E = TypeVar("_E", bound=Enum)


def _quote(text: str) -> str:
    """Double-quoted with JSON escapes, so that a message stays on one line."""
    return json.dumps(text, ensure_ascii=False)


def _shown(value: Any) -> str:
    """A string quoted, anything else described: for values that should have been a string."""
    return _quote(value) if isinstance(value, str) else _describe(value)


def _describe(value: Any) -> str:
    """A value's JSON type and, when short, the value: `integer 1`, `list`, `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {_quote(value)}" if len(value) <= 40 else "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _key_path(base: str, key: str) -> str:
    """`base.key` for a plain identifier, `base[key]` otherwise (kube's field.Path.Key)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    if not key.isprintable():
        key = _quote(key)[1:-1]
    return f"{base}[{key}]"


def _enum_values(cls: type[Enum]) -> str:
    return ", ".join(m.value for m in cls)


def _is_integer_resource(name: str) -> bool:
    """Extended resources (`example.com/foo`, outside kubernetes.io) must be whole numbers."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def _is_overcommit_forbidden(name: str) -> bool:
    """kube's !IsOvercommitAllowed: extended resources and hugepages need request == limit."""
    return _is_integer_resource(name) or name.startswith("hugepages-")


@lru_cache(maxsize=4096, typed=True)
def _resource_quantity(kind: str, raw: str | int | float) -> tuple[int, Fraction]:
    """(base units, exact value) of a quantity; `kind` is "cpu" (milli-CPU), the name of an
    extended resource (whole numbers only), or "" (anything else). Cached: a cluster file
    repeats the same few quantities thousands of times."""
    shown = raw.strip() if isinstance(raw, str) else repr(raw)
    exact = parse_quantity(shown if isinstance(raw, str) else raw)
    if exact < 0:
        raise ValueError(f"quantity {_quote(shown)} must not be negative")
    if kind and kind != CPU and exact.denominator != 1:
        raise ValueError(f"quantity {_quote(shown)} must be a whole number for {kind}")
    base = milli_value(exact) if kind == CPU else value(exact)
    if base > MAX_INT64:
        raise ValueError(f"quantity {_quote(shown)} is too large")
    return base, exact


class _Reader:
    """Reads one object's fields, raising ManifestError with the object's name and field path."""

    __slots__ = ("obj", "source")

    def __init__(self, source: str, obj: str) -> None:
        self.source = source
        self.obj = obj

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ManifestError(self.source, self.obj, path, reason)

    # -- shapes --------------------------------------------------------------------------------
    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {_describe(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {_describe(key)}")
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, default: str = "") -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            hint = " (quote it)" if isinstance(value, int | float | bool) else ""
            self.fail(path, f"expected a string, got {_describe(value)}{hint}")
        return value

    def required_string(self, value: Any, path: str) -> str:
        text = self.string(value, path)
        if not text:
            self.fail(path, "is required")
        return text

    def integer(self, value: Any, path: str, *, lo: int = -MAX_INT64 - 1, hi: int = MAX_INT64) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_describe(value)}")
        if not lo <= value <= hi:
            self.fail(path, f"must be between {lo} and {hi}, inclusive")
        return value

    def optional_integer(self, value: Any, path: str, *, lo: int, hi: int) -> int | None:
        return None if value is None else self.integer(value, path, lo=lo, hi=hi)

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_describe(value)}")
        return value

    def enum(self, value: Any, path: str, cls: type[_E]) -> _E:
        text = self.string(value, path)
        try:
            return cls(text)
        except ValueError:
            self.fail(path, f"unsupported value {_quote(text)} (supported: {_enum_values(cls)})")

    def choice(self, value: Any, path: str, choices: tuple[str, ...]) -> str:
        text = self.string(value, path)
        if text not in choices:
            self.fail(path, f"unsupported value {_quote(text)} (supported: {', '.join(choices)})")
        return text

    def string_list(self, value: Any, path: str, check: Callable[[str], str | None] | None = None) -> tuple[str, ...]:
        items = self.sequence(value, path)
        result = []
        for i, item in enumerate(items):
            item_path = f"{path}[{i}]"
            if item is None:
                self.fail(item_path, "expected a string, got null")
            text = self.string(item, item_path)
            if check is not None and (problem := check(text)):
                self.fail(item_path, f"{_quote(text)} is not valid: {problem}")
            result.append(text)
        return tuple(result)

    def string_map(
        self,
        value: Any,
        path: str,
        key_check: Callable[[str], str | None] | None = None,
        value_check: Callable[[str], str | None] | None = None,
    ) -> dict[str, str]:
        raw = self.mapping(value, path)
        result: dict[str, str] = {}
        for key, item in raw.items():
            item_path = _key_path(path, key)
            if key_check is not None and (problem := key_check(key)):
                self.fail(item_path, f"key {_quote(key)} is not valid: {problem}")
            if item is None:
                item = ""
            text = self.string(item, item_path)
            if value_check is not None and (problem := value_check(text)):
                self.fail(item_path, f"{_quote(text)} is not valid: {problem}")
            result[key] = text
        return result

    # -- quantities ----------------------------------------------------------------------------
    def quantity(self, name: str, raw: Any, path: str) -> tuple[int, Fraction]:
        """(base units, exact value) of one resource quantity; rejects negatives and > int64."""
        if raw is None or isinstance(raw, bool) or not isinstance(raw, str | int | float):
            self.fail(path, f"expected a quantity (string or number), got {_describe(raw)}")
        kind = name if name == CPU or _is_integer_resource(name) else ""
        try:
            return _resource_quantity(kind, raw)
        except ValueError as e:
            self.fail(path, str(e))

    def resources(self, value: Any, path: str, *, pod: bool = False) -> dict[str, tuple[int, Fraction, str]]:
        """name -> (base units, exact value, field path) for a ResourceList.

        `pod` restricts names without a domain to those a container can ask for, as kube's
        validateContainerResourceName does (it catches typos such as "cpus").
        """
        raw = self.mapping(value, path)
        result = {}
        for name, amount in raw.items():
            item_path = _key_path(path, name)
            if not name:
                self.fail(path, "resource names must be non-empty")
            if problem := qualified_name_error(name):
                self.fail(item_path, f"resource name {_quote(name)} is not valid: {problem}")
            standard = name in _POD_RESOURCES or name.startswith("hugepages-")
            if pod and "/" not in name and not standard:
                self.fail(
                    item_path,
                    f"{_quote(name)} is not a resource a pod can request (cpu, memory, "
                    "ephemeral-storage, hugepages-<size>, or an extended resource such as "
                    "nvidia.com/gpu)",
                )
            base, exact = self.quantity(name, amount, item_path)
            result[name] = (base, exact, item_path)
        return result

    def resource_list(self, value: Any, path: str, *, pod: bool = False) -> dict[str, int]:
        return {name: base for name, (base, _, _) in self.resources(value, path, pod=pod).items()}

    # -- metadata ------------------------------------------------------------------------------
    def timestamp(self, value: Any, path: str) -> float:
        if value is None:
            return 0.0
        text = self.string(value, path)
        if not text:
            return 0.0
        try:
            moment = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            moment = None
        if moment is None or "T" not in text.upper() or moment.tzinfo is None:
            self.fail(
                path,
                f"{_quote(text)} is not an RFC 3339 time (such as 2024-05-01T12:00:00Z)",
            )
        return moment.astimezone(UTC).timestamp()


def _uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def _check_kind(r: _Reader, obj: Mapping[str, Any], want: str) -> None:
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != "v1":
        r.fail("apiVersion", f"{_shown(api_version)} is not supported for {want} (want v1)")
    kind = obj.get("kind")
    if kind is not None and kind != want:
        r.fail("kind", f"expected {want}, got {_shown(kind)}")


def _object_label(kind: str, obj: Mapping[str, Any], where: str, namespaced: bool) -> str:
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


def _metadata(r: _Reader, raw: Any, kind: str, namespaced: bool) -> ObjectMeta:
    meta = r.mapping(raw, "metadata")
    if raw is None:
        r.fail("metadata", "is required")
    name = r.string(meta.get("name"), "metadata.name")
    if not name:
        hint = " (generateName is not supported)" if meta.get("generateName") else ""
        r.fail("metadata.name", f"is required{hint}")
    if problem := dns1123_subdomain_error(name):
        r.fail("metadata.name", f"{_quote(name)} is not a valid name: {problem}")
    namespace = ""
    if namespaced:
        namespace = r.string(meta.get("namespace"), "metadata.namespace") or "default"
        if problem := dns1123_label_error(namespace):
            r.fail("metadata.namespace", f"{_quote(namespace)} is not a valid namespace: {problem}")
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
    )


# --- selectors ----------------------------------------------------------------------------------

_SET_OPERATORS = (SelectorOperator.IN, SelectorOperator.NOT_IN)
_EXISTS_OPERATORS = (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST)


def _check_values(r: _Reader, op: SelectorOperator, values: tuple[str, ...], path: str) -> None:
    if op in _SET_OPERATORS and not values:
        r.fail(path, "must be specified when `operator` is 'In' or 'NotIn'")
    if op in _EXISTS_OPERATORS and values:
        r.fail(path, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            r.fail(path, "must be specified single value when `operator` is 'Lt' or 'Gt'")
        text = values[0]
        if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(2**63) <= int(text) <= MAX_INT64:
            r.fail(f"{path}[0]", f"{_quote(text)} is not an integer")


def _node_selector_requirement(r: _Reader, raw: Any, path: str, *, field_selector: bool) -> NodeSelectorRequirement:
    req = r.mapping(raw, path)
    key = r.required_string(req.get("key"), f"{path}.key")
    if req.get("operator") is None:
        r.fail(f"{path}.operator", "is required")
    op = r.enum(req.get("operator"), f"{path}.operator", SelectorOperator)
    values = r.string_list(req.get("values"), f"{path}.values")
    if field_selector:
        if key != "metadata.name":
            r.fail(f"{path}.key", f"{_quote(key)} is not supported: must be metadata.name")
        if op not in _SET_OPERATORS:
            r.fail(f"{path}.operator", f"{_quote(op.value)} is not supported: must be In or NotIn")
        if len(values) != 1:
            r.fail(
                f"{path}.values",
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )
    else:
        if problem := qualified_name_error(key):
            r.fail(f"{path}.key", f"{_quote(key)} is not a valid label key: {problem}")
        _check_values(r, op, values, f"{path}.values")
    return NodeSelectorRequirement(key=key, operator=op, values=values)


def _node_selector_term(r: _Reader, raw: Any, path: str) -> NodeSelectorTerm:
    term = r.mapping(raw, path)
    expr_path, fields_path = f"{path}.matchExpressions", f"{path}.matchFields"
    expressions = tuple(
        _node_selector_requirement(r, item, f"{expr_path}[{i}]", field_selector=False)
        for i, item in enumerate(r.sequence(term.get("matchExpressions"), expr_path))
    )
    fields = tuple(
        _node_selector_requirement(r, item, f"{fields_path}[{i}]", field_selector=True)
        for i, item in enumerate(r.sequence(term.get("matchFields"), fields_path))
    )
    return NodeSelectorTerm(match_expressions=expressions, match_fields=fields)


def _node_affinity(r: _Reader, raw: Any, path: str) -> NodeAffinity:
    affinity = r.mapping(raw, path)
    required = None
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    req_raw = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_raw is not None:
        selector = r.mapping(req_raw, req_path)
        terms_path = f"{req_path}.nodeSelectorTerms"
        terms_raw = r.sequence(selector.get("nodeSelectorTerms"), terms_path)
        if not terms_raw:
            r.fail(terms_path, "must have at least one node selector term")
        required = NodeSelector(
            node_selector_terms=tuple(_node_selector_term(r, t, f"{terms_path}[{i}]") for i, t in enumerate(terms_raw))
        )
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(r.sequence(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
        item_path = f"{pref_path}[{i}]"
        pref = r.mapping(item, item_path)
        weight = r.integer(pref.get("weight"), f"{item_path}.weight", lo=1, hi=100)
        if pref.get("preference") is None:
            r.fail(f"{item_path}.preference", "is required")
        term = _node_selector_term(r, pref.get("preference"), f"{item_path}.preference")
        preferred.append(PreferredSchedulingTerm(weight=weight, preference=term))
    return NodeAffinity(required=required, preferred=tuple(preferred))


def _label_selector(r: _Reader, raw: Any, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    selector = r.mapping(raw, path)
    match_labels = r.string_map(
        selector.get("matchLabels"),
        f"{path}.matchLabels",
        qualified_name_error,
        label_value_error,
    )
    expressions = []
    expr_path = f"{path}.matchExpressions"
    for i, item in enumerate(r.sequence(selector.get("matchExpressions"), expr_path)):
        item_path = f"{expr_path}[{i}]"
        req = r.mapping(item, item_path)
        key = r.required_string(req.get("key"), f"{item_path}.key")
        if problem := qualified_name_error(key):
            r.fail(f"{item_path}.key", f"{_quote(key)} is not a valid label key: {problem}")
        if req.get("operator") is None:
            r.fail(f"{item_path}.operator", "is required")
        op = r.enum(req.get("operator"), f"{item_path}.operator", SelectorOperator)
        if op not in _SET_OPERATORS and op not in _EXISTS_OPERATORS:
            r.fail(
                f"{item_path}.operator",
                f"{_quote(op.value)} is not a valid label selector operator "
                "(supported: In, NotIn, Exists, DoesNotExist)",
            )
        values = r.string_list(req.get("values"), f"{item_path}.values")
        _check_values(r, op, values, f"{item_path}.values")
        expressions.append(LabelSelectorRequirement(key=key, operator=op, values=values))
    return LabelSelector(match_labels=match_labels, match_expressions=tuple(expressions))


def _pod_affinity_term(r: _Reader, raw: Any, path: str) -> PodAffinityTerm:
    term = r.mapping(raw, path)
    topology_key = r.required_string(term.get("topologyKey"), f"{path}.topologyKey")
    if problem := qualified_name_error(topology_key):
        r.fail(f"{path}.topologyKey", f"{_quote(topology_key)} is not a valid label key: {problem}")
    return PodAffinityTerm(
        topology_key=topology_key,
        label_selector=_label_selector(r, term.get("labelSelector"), f"{path}.labelSelector"),
        namespaces=r.string_list(term.get("namespaces"), f"{path}.namespaces"),
        namespace_selector=_label_selector(r, term.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=r.string_list(term.get("matchLabelKeys"), f"{path}.matchLabelKeys", qualified_name_error),
        mismatch_label_keys=r.string_list(
            term.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", qualified_name_error
        ),
    )


def _pod_affinity(r: _Reader, raw: Any, path: str) -> PodAffinity:
    affinity = r.mapping(raw, path)
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required = tuple(
        _pod_affinity_term(r, item, f"{req_path}[{i}]")
        for i, item in enumerate(r.sequence(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path))
    )
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(r.sequence(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
        item_path = f"{pref_path}[{i}]"
        weighted = r.mapping(item, item_path)
        weight = r.integer(weighted.get("weight"), f"{item_path}.weight", lo=1, hi=100)
        if weighted.get("podAffinityTerm") is None:
            r.fail(f"{item_path}.podAffinityTerm", "is required")
        term_path = f"{item_path}.podAffinityTerm"
        term = _pod_affinity_term(r, weighted.get("podAffinityTerm"), term_path)
        preferred.append(WeightedPodAffinityTerm(weight=weight, pod_affinity_term=term))
    return PodAffinity(required=required, preferred=tuple(preferred))


def _affinity(r: _Reader, raw: Any, path: str) -> Affinity | None:
    if raw is None:
        return None
    affinity = r.mapping(raw, path)
    node = affinity.get("nodeAffinity")
    pod = affinity.get("podAffinity")
    anti = affinity.get("podAntiAffinity")
    return Affinity(
        node_affinity=None if node is None else _node_affinity(r, node, f"{path}.nodeAffinity"),
        pod_affinity=None if pod is None else _pod_affinity(r, pod, f"{path}.podAffinity"),
        pod_anti_affinity=(None if anti is None else _pod_affinity(r, anti, f"{path}.podAntiAffinity")),
    )


# --- taints and tolerations ---------------------------------------------------------------------


def _toleration(r: _Reader, raw: Any, path: str) -> Toleration:
    tol = r.mapping(raw, path)
    key = r.string(tol.get("key"), f"{path}.key")
    if key and (problem := qualified_name_error(key)):
        r.fail(f"{path}.key", f"{_quote(key)} is not a valid taint key: {problem}")
    op_raw = tol.get("operator")
    operator = (
        TolerationOperator.EQUAL
        if op_raw is None or op_raw == ""
        else r.enum(op_raw, f"{path}.operator", TolerationOperator)
    )
    value_text = r.string(tol.get("value"), f"{path}.value")
    if not key and operator is not TolerationOperator.EXISTS:
        r.fail(f"{path}.operator", "must be Exists when `key` is empty (to tolerate every taint)")
    if operator is TolerationOperator.EXISTS and value_text:
        r.fail(f"{path}.value", "must be empty when `operator` is 'Exists'")
    if operator is TolerationOperator.EQUAL and (problem := label_value_error(value_text)):
        r.fail(f"{path}.value", f"{_quote(value_text)} is not valid: {problem}")
    effect_raw = tol.get("effect")
    effect = None if effect_raw is None or effect_raw == "" else r.enum(effect_raw, f"{path}.effect", TaintEffect)
    seconds = r.optional_integer(
        tol.get("tolerationSeconds"), f"{path}.tolerationSeconds", lo=-MAX_INT64 - 1, hi=MAX_INT64
    )
    if seconds is not None and effect is not TaintEffect.NO_EXECUTE:
        r.fail(f"{path}.effect", "must be 'NoExecute' when `tolerationSeconds` is set")
    return Toleration(key=key, operator=operator, value=value_text, effect=effect, toleration_seconds=seconds)


def _taints(r: _Reader, raw: Any, path: str) -> tuple[Taint, ...]:
    taints = []
    seen: dict[tuple[str, TaintEffect], int] = {}
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        taint = r.mapping(item, item_path)
        key = r.required_string(taint.get("key"), f"{item_path}.key")
        if problem := qualified_name_error(key):
            r.fail(f"{item_path}.key", f"{_quote(key)} is not a valid taint key: {problem}")
        value_text = r.string(taint.get("value"), f"{item_path}.value")
        if problem := label_value_error(value_text):
            r.fail(f"{item_path}.value", f"{_quote(value_text)} is not valid: {problem}")
        if taint.get("effect") is None or taint.get("effect") == "":
            r.fail(f"{item_path}.effect", "is required")
        effect = r.enum(taint.get("effect"), f"{item_path}.effect", TaintEffect)
        if (key, effect) in seen:
            r.fail(
                item_path,
                f"taints must be unique by key and effect: {key}:{effect.value} repeats {path}[{seen[(key, effect)]}]",
            )
        seen[(key, effect)] = i
        taints.append(Taint(key=key, value=value_text, effect=effect))
    return tuple(taints)


# --- pods ---------------------------------------------------------------------------------------


def _topology_spread(r: _Reader, raw: Any, path: str) -> tuple[TopologySpreadConstraint, ...]:
    result = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        tsc = r.mapping(item, item_path)
        max_skew = r.integer(tsc.get("maxSkew"), f"{item_path}.maxSkew", lo=1, hi=_INT32_MAX)
        topology_key = r.required_string(tsc.get("topologyKey"), f"{item_path}.topologyKey")
        if problem := qualified_name_error(topology_key):
            r.fail(
                f"{item_path}.topologyKey",
                f"{_quote(topology_key)} is not a valid label key: {problem}",
            )
        if tsc.get("whenUnsatisfiable") is None:
            r.fail(f"{item_path}.whenUnsatisfiable", "is required")
        when = r.choice(
            tsc.get("whenUnsatisfiable"),
            f"{item_path}.whenUnsatisfiable",
            ("DoNotSchedule", "ScheduleAnyway"),
        )
        if (topology_key, when) in seen:
            r.fail(
                item_path,
                f"duplicate topologyKey and whenUnsatisfiable pair ({topology_key}, {when}) "
                f"with {path}[{seen[(topology_key, when)]}]",
            )
        seen[(topology_key, when)] = i
        min_domains = r.optional_integer(tsc.get("minDomains"), f"{item_path}.minDomains", lo=1, hi=_INT32_MAX)
        if min_domains is not None and when != "DoNotSchedule":
            r.fail(
                f"{item_path}.minDomains",
                "can only be set when `whenUnsatisfiable` is 'DoNotSchedule'",
            )
        policies = {}
        for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            raw_policy = tsc.get(name)
            policies[name] = (
                None if raw_policy is None else r.choice(raw_policy, f"{item_path}.{name}", ("Honor", "Ignore"))
            )
        result.append(
            TopologySpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=_label_selector(r, tsc.get("labelSelector"), f"{item_path}.labelSelector"),
                min_domains=min_domains,
                node_affinity_policy=policies["nodeAffinityPolicy"],
                node_taints_policy=policies["nodeTaintsPolicy"],
                match_label_keys=r.string_list(
                    tsc.get("matchLabelKeys"), f"{item_path}.matchLabelKeys", qualified_name_error
                ),
            )
        )
    return tuple(result)


def _ports(r: _Reader, raw: Any, path: str) -> tuple[ContainerPort, ...]:
    ports = []
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        port = r.mapping(item, item_path)
        if port.get("containerPort") is None:
            r.fail(f"{item_path}.containerPort", "is required")
        container_port = r.integer(port.get("containerPort"), f"{item_path}.containerPort", lo=1, hi=65535)
        host_port = 0
        if port.get("hostPort") is not None:
            host_port = r.integer(port.get("hostPort"), f"{item_path}.hostPort", lo=0, hi=65535)
        protocol = (
            "TCP"
            if port.get("protocol") is None or port.get("protocol") == ""
            else r.choice(port.get("protocol"), f"{item_path}.protocol", ("TCP", "UDP", "SCTP"))
        )
        host_ip = r.string(port.get("hostIP"), f"{item_path}.hostIP")
        if host_ip:
            try:
                ipaddress.ip_address(host_ip)
            except ValueError:
                r.fail(f"{item_path}.hostIP", f"{_quote(host_ip)} is not a valid IP address")
        ports.append(
            ContainerPort(
                container_port=container_port,
                host_port=host_port,
                protocol=protocol,
                host_ip=host_ip,
            )
        )
    return tuple(ports)


def _container(r: _Reader, raw: Any, path: str, *, init: bool) -> Container:
    spec = r.mapping(raw, path)
    if raw is None:
        r.fail(path, "expected a container, got null")
    name = r.required_string(spec.get("name"), f"{path}.name")
    if problem := dns1123_label_error(name):
        r.fail(f"{path}.name", f"{_quote(name)} is not a valid container name: {problem}")
    resources = r.mapping(spec.get("resources"), f"{path}.resources")
    requests = r.resources(resources.get("requests"), f"{path}.resources.requests", pod=True)
    limits = r.resources(resources.get("limits"), f"{path}.resources.limits", pod=True)
    for res_name, (_, req_exact, req_path) in requests.items():
        if res_name not in limits:
            continue
        _, lim_exact, _ = limits[res_name]
        limit_text = _format_exact(lim_exact)
        if _is_overcommit_forbidden(res_name) and req_exact != lim_exact:
            r.fail(req_path, f"must be equal to {res_name} limit of {limit_text}")
        if req_exact > lim_exact:
            r.fail(req_path, f"must be less than or equal to {res_name} limit of {limit_text}")
    # SetDefaults_Pod: a limit without a request is the request.
    request_list = {n: base for n, (base, _, _) in requests.items()}
    for res_name, (lim_base, _, _) in limits.items():
        request_list.setdefault(res_name, lim_base)
    restart_policy = None
    if init and spec.get("restartPolicy") is not None:
        restart_policy = r.choice(spec.get("restartPolicy"), f"{path}.restartPolicy", ("Always",))
    return Container(
        name=name,
        image=r.string(spec.get("image"), f"{path}.image"),
        requests=request_list,
        limits={n: base for n, (base, _, _) in limits.items()},
        ports=_ports(r, spec.get("ports"), f"{path}.ports"),
        restart_policy=restart_policy,
    )


def _format_exact(q: Fraction) -> str:
    """A quantity for a message: an integer as is, else in milli-units if exact ("500m")."""
    if q.denominator == 1:
        return str(q.numerator)
    milli = q * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(q))


def _pod_spec(r: _Reader, raw: Any) -> PodSpec:
    if raw is None:
        r.fail("spec", "is required")
    spec = r.mapping(raw, "spec")
    containers_raw = r.sequence(spec.get("containers"), "spec.containers")
    if not containers_raw:
        r.fail("spec.containers", "is required: a pod needs at least one container")
    containers = tuple(_container(r, c, f"spec.containers[{i}]", init=False) for i, c in enumerate(containers_raw))
    init_containers = tuple(
        _container(r, c, f"spec.initContainers[{i}]", init=True)
        for i, c in enumerate(r.sequence(spec.get("initContainers"), "spec.initContainers"))
    )
    seen_names: dict[str, str] = {}
    for group, items in (("initContainers", init_containers), ("containers", containers)):
        for i, container in enumerate(items):
            where = f"spec.{group}[{i}]"
            if container.name in seen_names:
                r.fail(
                    f"{where}.name",
                    f"duplicate container name {_quote(container.name)} (also {seen_names[container.name]})",
                )
            seen_names[container.name] = where

    scheduler_name = r.string(spec.get("schedulerName"), "spec.schedulerName")
    priority = 0
    if spec.get("priority") is not None:
        priority = r.integer(spec.get("priority"), "spec.priority", lo=_INT32_MIN, hi=_INT32_MAX)
    preemption = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    if spec.get("preemptionPolicy") is not None:
        preemption = r.enum(spec.get("preemptionPolicy"), "spec.preemptionPolicy", PreemptionPolicy)
    node_name = r.string(spec.get("nodeName"), "spec.nodeName")
    if node_name and (problem := dns1123_subdomain_error(node_name)):
        r.fail("spec.nodeName", f"{_quote(node_name)} is not a valid node name: {problem}")

    gates = []
    for i, item in enumerate(r.sequence(spec.get("schedulingGates"), "spec.schedulingGates")):
        gate_path = f"spec.schedulingGates[{i}]"
        gate = r.mapping(item, gate_path)
        gate_name = r.required_string(gate.get("name"), f"{gate_path}.name")
        if problem := qualified_name_error(gate_name):
            r.fail(f"{gate_path}.name", f"{_quote(gate_name)} is not valid: {problem}")
        if gate_name in gates:
            r.fail(f"{gate_path}.name", f"duplicate scheduling gate {_quote(gate_name)}")
        gates.append(gate_name)
    if gates and node_name:
        r.fail("spec.schedulingGates", "cannot be set on a pod that already has spec.nodeName")

    return PodSpec(
        containers=containers,
        init_containers=init_containers,
        scheduler_name=scheduler_name or DEFAULT_SCHEDULER_NAME,
        priority=priority,
        priority_class_name=r.string(spec.get("priorityClassName"), "spec.priorityClassName"),
        preemption_policy=preemption,
        node_name=node_name,
        node_selector=r.string_map(
            spec.get("nodeSelector"), "spec.nodeSelector", qualified_name_error, label_value_error
        ),
        affinity=_affinity(r, spec.get("affinity"), "spec.affinity"),
        tolerations=tuple(
            _toleration(r, t, f"spec.tolerations[{i}]")
            for i, t in enumerate(r.sequence(spec.get("tolerations"), "spec.tolerations"))
        ),
        topology_spread_constraints=_topology_spread(
            r, spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"
        ),
        overhead=r.resource_list(spec.get("overhead"), "spec.overhead", pod=True),
        scheduling_gates=tuple(gates),
    )


def _check_pod_gpus(r: _Reader, pod: Pod) -> None:
    try:
        request = pod_gpu_request(pod)
        devices = pod_gpu_devices(pod)
    except GPUAnnotationError as e:
        r.fail(_key_path("metadata.annotations", e.annotation), str(e))
    if not devices:
        return
    where = _key_path("metadata.annotations", GPU_DEVICES_ANNOTATION)
    if request is None:
        r.fail(where, "the pod asks for no GPU")
    if not pod.spec.node_name:
        r.fail(where, "is only valid on a pod bound to a node (spec.nodeName)")
    if len(devices) != request.count:
        r.fail(where, f"lists {len(devices)} GPU(s) but the pod asks for {request.count}")


def _parse_pod(obj: Any, source: str, where: str) -> Pod:
    r = _Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a Pod (a mapping), got {_describe(obj)}")
    r.obj = _object_label("Pod", obj, where, namespaced=True)
    _check_kind(r, obj, "Pod")
    metadata = _metadata(r, obj.get("metadata"), "Pod", namespaced=True)
    pod = Pod(metadata=metadata, spec=_pod_spec(r, obj.get("spec")))
    _check_pod_gpus(r, pod)
    return pod


def parse_pod(obj: Mapping[str, Any], *, source: str = STDIN, index: int = 1) -> Pod:
    """A Pod from its decoded manifest (a dict as YAML/JSON gives it), defaulted and validated.

    `source` and `index` (the 1-based document number) only label errors. Raises ManifestError.
    """
    return _parse_pod(obj, source, f"document {index}")


# --- nodes --------------------------------------------------------------------------------------


def _node_status(r: _Reader, raw: Any, gpus_total: int | None, gpus_healthy: int) -> NodeStatus:
    status = r.mapping(raw, "status")
    capacity = r.resource_list(status.get("capacity"), "status.capacity")
    allocatable = r.resource_list(status.get("allocatable"), "status.allocatable")
    if not allocatable:
        allocatable = dict(capacity)
    capacity.setdefault(PODS, DEFAULT_MAX_PODS)
    allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
    if gpus_total is not None:
        capacity.setdefault(NVIDIA_GPU, gpus_total)
        allocatable.setdefault(NVIDIA_GPU, gpus_healthy)

    images = []
    for i, item in enumerate(r.sequence(status.get("images"), "status.images")):
        item_path = f"status.images[{i}]"
        image = r.mapping(item, item_path)
        names = r.string_list(image.get("names"), f"{item_path}.names")
        size = 0
        if image.get("sizeBytes") is not None:
            size = r.integer(image.get("sizeBytes"), f"{item_path}.sizeBytes", lo=0)
        images.append(ContainerImage(names=names, size_bytes=size))

    ready = True
    for i, item in enumerate(r.sequence(status.get("conditions"), "status.conditions")):
        item_path = f"status.conditions[{i}]"
        condition = r.mapping(item, item_path)
        if r.string(condition.get("type"), f"{item_path}.type") != "Ready":
            continue
        state = r.choice(condition.get("status"), f"{item_path}.status", ("True", "False", "Unknown"))
        ready = state == "True"
    return NodeStatus(capacity=capacity, allocatable=allocatable, images=tuple(images), ready=ready)


def _parse_node(obj: Any, source: str, where: str) -> Node:
    r = _Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a Node (a mapping), got {_describe(obj)}")
    r.obj = _object_label("Node", obj, where, namespaced=False)
    _check_kind(r, obj, "Node")
    metadata = _metadata(r, obj.get("metadata"), "Node", namespaced=False)
    if HOSTNAME_LABEL not in metadata.labels:
        metadata = replace(metadata, labels={**metadata.labels, HOSTNAME_LABEL: metadata.name})

    gpus: tuple[GPUDevice, ...] = ()
    gpus_total = None
    gpus_healthy = 0
    annotation = metadata.annotations.get(GPUS_ANNOTATION)
    if annotation is not None:
        try:
            gpus = parse_node_gpus(annotation)
        except ValueError as e:
            r.fail(_key_path("metadata.annotations", GPUS_ANNOTATION), str(e))
        gpus_total = len(gpus)
        gpus_healthy = sum(1 for g in gpus if g.healthy)

    spec = r.mapping(obj.get("spec"), "spec")
    node_spec = NodeSpec(
        unschedulable=r.boolean(spec.get("unschedulable"), "spec.unschedulable", False),
        taints=_taints(r, spec.get("taints"), "spec.taints"),
    )
    status = _node_status(r, obj.get("status"), gpus_total, gpus_healthy)
    return Node(metadata=metadata, spec=node_spec, status=status, gpus=gpus)


def parse_node(obj: Mapping[str, Any], *, source: str = STDIN, index: int = 1) -> Node:
    """A Node from its decoded manifest, defaulted and validated (see the module docstring).

    `source` and `index` (the 1-based document number) only label errors. Raises ManifestError.
    """
    return _parse_node(obj, source, f"document {index}")


# --- files --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Manifests:
    """The objects of one or more manifest files, in file order."""

    pods: list[Pod] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)


class _Collector:
    """Parses documents into a Manifests, gathering one error per bad object."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.result = Manifests()
        self.errors: list[ManifestError] = []
        self.pod_at: dict[str, str] = {}
        self.node_at: dict[str, str] = {}

    def document(self, doc: Any, number: int) -> None:
        where = f"document {number}"
        if doc is None:
            return
        if not isinstance(doc, dict):
            self.errors.append(
                ManifestError(
                    self.source,
                    where,
                    "",
                    f"expected a Kubernetes object (a mapping), got {_describe(doc)}",
                )
            )
            return
        self.item(doc, where, None)

    def item(self, doc: dict[str, Any], where: str, implied_kind: str | None) -> None:
        kind = doc.get("kind", implied_kind)
        try:
            if kind == "Pod":
                self.add_pod(_parse_pod(doc, self.source, where), where)
            elif kind == "Node":
                self.add_node(_parse_node(doc, self.source, where), where)
            elif kind in _LIST_KINDS:
                self.list(doc, where, kind)
            elif kind is None:
                raise ManifestError(self.source, where, "kind", "is required (Pod, Node or List)")
            else:
                raise ManifestError(
                    self.source,
                    where,
                    "kind",
                    f"{_shown(kind)} is not supported; kubus reads Pod, Node and List (PodList, NodeList)",
                )
        except ManifestError as e:
            self.errors.append(e)

    def list(self, doc: dict[str, Any], where: str, kind: str) -> None:
        r = _Reader(self.source, where)
        api_version = doc.get("apiVersion")
        if api_version is not None and api_version != "v1":
            r.fail("apiVersion", f"{_shown(api_version)} is not supported for {kind} (want v1)")
        items = r.sequence(doc.get("items"), "items")
        for i, item in enumerate(items):
            item_where = f"{where} items[{i}]"
            if not isinstance(item, dict):
                self.errors.append(
                    ManifestError(
                        self.source,
                        item_where,
                        "",
                        f"expected a Kubernetes object (a mapping), got {_describe(item)}",
                    )
                )
                continue
            self.item(item, item_where, _LIST_KINDS[kind])

    def add_pod(self, pod: Pod, where: str) -> None:
        key = pod.key
        if key in self.pod_at:
            raise ManifestError(
                self.source,
                f"Pod {key}",
                "metadata.name",
                f"duplicate: the same pod is already defined in {self.pod_at[key]}",
            )
        self.pod_at[key] = where
        self.result.pods.append(pod)

    def add_node(self, node: Node, where: str) -> None:
        name = node.name
        if name in self.node_at:
            raise ManifestError(
                self.source,
                f"Node {name}",
                "metadata.name",
                f"duplicate: the same node is already defined in {self.node_at[name]}",
            )
        self.node_at[name] = where
        self.result.nodes.append(node)


def _yaml_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is not None:
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"invalid YAML: {problem}"


def read_documents(text: str) -> Iterator[Any]:
    """The documents of a manifest text as kube reads them: the JSON document when it is JSON,
    else every YAML document (safe loader, timestamps left as strings). Raises yaml.YAMLError
    when it reaches a document that is not valid YAML."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            yield orjson.loads(text)
            return
        except orjson.JSONDecodeError:
            pass  # not JSON after all (or bad JSON): YAML reads it, or says where it is wrong
    yield from yaml.load_all(text, Loader=_Loader)


def _documents(text: str, collector: _Collector) -> None:
    number = 0
    try:
        for number, doc in enumerate(read_documents(text), start=1):
            collector.document(doc, number)
    except yaml.YAMLError as e:
        collector.errors.append(ManifestError(collector.source, f"document {number + 1}", "", _yaml_error(e)))


def _read(path_or_text: str | bytes | os.PathLike[str], source: str | None) -> tuple[str, str]:
    """(text, source) for load_manifests' argument."""
    if isinstance(path_or_text, bytes):
        data, name = path_or_text, source or STDIN
    elif isinstance(path_or_text, str) and path_or_text == "-":
        data, name = sys.stdin.buffer.read(), source or STDIN
    elif isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str)
        and path_or_text.strip()
        and "\n" not in path_or_text
        and path_or_text.lstrip()[:1] not in ("{", "[")
    ):
        name = source or os.fspath(path_or_text)
        try:
            data = Path(path_or_text).read_bytes()
        except OSError as e:
            raise ManifestError(name, "", "", f"cannot read the file: {e.strerror or e}") from None
    else:
        return path_or_text, source or STDIN
    try:
        return data.decode("utf-8-sig"), name
    except UnicodeDecodeError as e:
        raise ManifestError(name, "", "", f"not UTF-8 text: {e.reason} at byte {e.start}") from None


def load_manifests(path_or_text: str | bytes | os.PathLike[str], *, source: str | None = None) -> Manifests:
    """Read Pods and Nodes from a manifest file or text (YAML or JSON, multi-document, Lists).

    The argument is a path (a `pathlib.Path`, or a non-blank one-line string), "-" for standard
    input, or the manifest text itself (bytes, or a string that has a newline, starts with `{`
    or `[`, or is blank).
    `source` names the input in errors; by default the path as given, or "<stdin>".

    Raises ManifestError for the first problem when only one object is bad, ManifestErrors
    (a ManifestError) listing the first problem of every bad object otherwise. Never raises
    anything else for bad input.
    """
    text, name = _read(path_or_text, source)
    return parse_manifests(text, source=name)


def parse_manifests(text: str | bytes, *, source: str = STDIN) -> Manifests:
    """Like `load_manifests`, for manifest text that is never taken for a path (what a client
    published on the bus, what was read from standard input)."""
    if isinstance(text, bytes):
        text, source = _read(text, source)
    collector = _Collector(source)
    _documents(text, collector)
    if len(collector.errors) == 1:
        raise collector.errors[0]
    if collector.errors:
        raise ManifestErrors(collector.errors)
    return collector.result
