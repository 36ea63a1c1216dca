"""Read Kubernetes manifests (Pods, Nodes, PodGroups, Namespaces, PriorityClasses and
PodDisruptionBudgets) into kubus objects, as the API server would.

Input is YAML or JSON, one or many documents (`---`), each a `v1` `Pod` or `Node`, a
`scheduling.x-k8s.io/v1alpha1` `PodGroup` (`spec.minMember` required, at least 1;
`spec.minResources` a resource list; `spec.scheduleTimeoutSeconds` at least 1; any other field of
a PodGroup is an error, a typo there would silently change the gang), a `v1` `Namespace` (its
labels; the name a DNS label), a `scheduling.k8s.io/v1` `PriorityClass` (`value` required, at
most 1000000000 unless it is one of kube's two `system-` classes, whose names are reserved;
`globalDefault`, `preemptionPolicy`, `description`; at most one globalDefault class in a load),
a `policy/v1` `PodDisruptionBudget` (`spec.selector`; `spec.minAvailable` or
`spec.maxUnavailable`, not both, each a count or a percentage up to 100%;
`spec.unhealthyPodEvictionPolicy`) — any other field of these three is an error too —, a `v1`
`Service` (`spec.selector`, a map) or `ReplicationController` (`spec.selector`, defaulted from
the pod template's labels), an `apps/v1` `ReplicaSet` or `StatefulSet` (`spec.selector`, a label
selector, required and not empty): the objects kube's default topology spreading selects pods
by (`kubus.api.workloads`; the rest of their spec is not read, a field their spec does not have
is an error) — or a `List` (`PodList`, `NodeList`) whose `items` are. Empty documents are
skipped. Fields scheduling does not read are ignored, as kube ignores them; fields it reads must
have the right type and a valid value, otherwise the load fails with a ManifestError naming the
file, the object and the field::

    pods.yaml: Pod default/web-1: spec.containers[0].resources.requests.cpu: quantity "abc" is not valid

A mapping that has a key twice, in YAML or in JSON, is refused as kube's strict decoding refuses
it (`duplicate field "spec.containers[0].resources"`), never read as "the last one wins"::

    pods.yaml: Pod default/web-1: spec.containers[0].resources: duplicate field "resources" at line 14 (first at line 9)

With ``validate=FieldValidation.STRICT`` (what `kubus apply` and `kubus simulate` pass by default,
as kubectl's ``--validate=strict``), a field that the object's Kubernetes schema does not have
(`kubus.api.schema`) is refused too, naming it::

    pods.yaml: Pod default/web-1: spec.containers[0].resourcse: unknown field "resourcse" (...)

``FieldValidation.WARN`` accepts unknown and duplicate fields, each said in
``Manifests.warnings``; ``IGNORE`` accepts them silently (kubectl's ``--validate=false``). The
default, None, is what a service reading a manifest kubus already checked wants: a duplicate
field refused, an unknown one ignored.

`load_manifests` (a file, standard input or text) and `parse_manifests` (text only) report
every bad object of the input at once (ManifestErrors), the first problem of each; `parse_pod`
and `parse_node` read one decoded object. With ``keep_raw=True`` they also give, per object,
the mapping as written with its typed object and its place (`Manifests.objects`,
`ManifestObject`): what `kubus apply` sends and the queue stores. `list_items` is the lenient
List reading, for input the load may refuse (names only). The text is decoded into documents by
`kubus.api._documents` (`read_documents`, `json_document`); this module reads their objects.

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
  `spec.priority`: 0. `priorityClassName` is resolved where a pod is admitted (the queue,
  `kubus simulate`), not here: `kubus.api.priority.resolve_priority`.
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
finer than 1m CPU or 1 byte is rounded up where it is written. Every quantity, whatever the
resource and wherever it is written, is at most 2**63-1 in base units (milli-CPU, bytes, counts):
`memory: 9Ei` is too large, as `cpu: 1e1000` is, where kube caps the first at 2**63-1 in silence.

Deliberate leniencies: a missing `apiVersion` is accepted (a present one must be `v1`), and an
extended resource such as `nvidia.com/gpu` may be given in requests alone (kube insists on a
limit; if both are given they must be equal, as in kube).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TypeVar

import yaml

from kubus.api._disruption_budgets import read_pod_disruption_budget
from kubus.api._documents import (
    Duplicates,
    decoded_documents,
    duplicate_in,
    json_document,
    list_items,
    read_documents,
    yaml_error,
)
from kubus.api._fields import Reader, describe, quote, shown
from kubus.api._metadata import STDIN, object_label
from kubus.api._namespaces import read_namespace
from kubus.api._nodes import DEFAULT_MAX_PODS, HOSTNAME_LABEL, parse_node, read_node
from kubus.api._podgroups import parse_pod_group, read_pod_group
from kubus.api._pods import parse_pod, read_pod
from kubus.api._priority_classes import read_priority_class
from kubus.api._workloads import WORKLOAD_READERS, read_workload
from kubus.api.disruption import PodDisruptionBudget
from kubus.api.errors import ManifestError, ManifestErrors
from kubus.api.namespaces import Namespace
from kubus.api.objects import (
    DEFAULT_SCHEDULER_NAME,
    Node,
    Pod,
)
from kubus.api.podgroups import PodGroup
from kubus.api.priority import PriorityClass, PriorityError, check_priority_class
from kubus.api.schema import unknown_fields
from kubus.api.workloads import Workload
from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject, JSONValue

_T = TypeVar("_T")

__all__ = [
    "DEFAULT_MAX_PODS",
    "DEFAULT_SCHEDULER_NAME",
    "HOSTNAME_LABEL",
    "FieldValidation",
    "KubeObject",
    "ManifestObject",
    "Manifests",
    "json_document",
    "list_items",
    "load_manifests",
    "parse_manifests",
    "parse_node",
    "parse_object",
    "parse_pod",
    "parse_pod_group",
    "read_documents",
    "wire_pod",
]

_LIST_KINDS = {"List": None, "PodList": "Pod", "NodeList": "Node"}
_NAMESPACED = {
    "Pod": True,
    "Node": False,
    "PodGroup": True,
    "Namespace": False,
    "PriorityClass": False,
    "PodDisruptionBudget": True,
    "Service": True,
    "ReplicationController": True,
    "ReplicaSet": True,
    "StatefulSet": True,
}
"""The kinds read, and whether their objects are namespaced (for the label errors give them)."""


class FieldValidation(Enum):
    """What a load does with a field the object's schema lacks, or a field given twice:
    kubectl's ``--validate`` values."""

    STRICT = "strict"
    """Refuse it, naming the object and the field (kubectl's default, ``--validate=true``)."""
    WARN = "warn"
    """Accept it (the last of a field given twice wins), with a line in ``Manifests.warnings``."""
    IGNORE = "ignore"
    """Accept it silently (``--validate=false``)."""

    @classmethod
    def parse(cls, value: str) -> FieldValidation:
        """kubectl's spellings: strict or true, warn, ignore or false. Raises ValueError."""
        aliases = {"true": cls.STRICT, "false": cls.IGNORE}
        if value.lower() in aliases:
            return aliases[value.lower()]
        try:
            return cls(value.lower())
        except ValueError:
            expected = "strict (or true), warn, or ignore (or false)"
            raise ValueError(f"--validate: expected {expected}, got {value!r}") from None


_STRICT_HINT = "to accept it: --validate=false"

# --- files --------------------------------------------------------------------------------------


@dataclass(slots=True)
class Manifests:
    """The objects of one or more manifest files, in file order."""

    pods: list[Pod] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pod_groups: tuple[PodGroup, ...] = ()
    """PodGroups (`scheduling.x-k8s.io/v1alpha1`), for gang scheduling (Coscheduling)."""
    namespaces: tuple[Namespace, ...] = ()
    """Namespaces (v1), for the labels namespaceSelectors match."""
    priority_classes: tuple[PriorityClass, ...] = ()
    """PriorityClasses (`scheduling.k8s.io/v1`), which pods' priorityClassName name."""
    disruption_budgets: tuple[PodDisruptionBudget, ...] = ()
    """PodDisruptionBudgets (`policy/v1`)."""
    workloads: tuple[Workload, ...] = ()
    """Services, ReplicationControllers (v1), ReplicaSets and StatefulSets (`apps/v1`), in file
    order: what default topology spreading selects pods by."""
    warnings: list[str] = field(default_factory=list)
    """Unknown and duplicate fields accepted (`FieldValidation.WARN`), one line each, naming the
    file, the object and the field."""
    objects: list[ManifestObject] = field(default_factory=list)
    """Every object, List items included, in file order, with its mapping as written: filled
    only by a load with ``keep_raw=True`` (the mappings cost memory a large load need not keep)."""


@dataclass(frozen=True, slots=True)
class ManifestObject:
    """One object of a manifest as read: the mapping the text gives and what kubus reads from it."""

    raw: JSONMapping
    """The object as written (the last value of a field given twice, where the load accepts
    it); an item of a PodList or NodeList may name no kind, its List's: `obj` says which. Shared
    with the load, not a copy: read it, never change it."""
    obj: KubeObject
    """What `raw` reads as (a Pod, a Node, a PodGroup, ...)."""
    where: str
    """Its place in its input, as errors name it: "document 2", "document 1 items[3]"."""


class _Collector:
    """Parses documents into a Manifests, gathering one error per bad object."""

    def __init__(self, source: str, validate: FieldValidation | None = None, *, keep_raw: bool = False) -> None:
        self.source = source
        self.validate = validate
        self.keep_raw = keep_raw
        self.result = Manifests()
        self.errors: list[ManifestError] = []
        self.pod_at: dict[str, str] = {}
        self.node_at: dict[str, str] = {}
        self.group_at: dict[str, str] = {}
        self.groups: list[PodGroup] = []
        self.namespace_at: dict[str, str] = {}
        self.class_at: dict[str, str] = {}
        self.budget_at: dict[str, str] = {}
        self.namespaces: list[Namespace] = []
        self.priority_classes: list[PriorityClass] = []
        self.budgets: list[PodDisruptionBudget] = []
        self.workload_at: dict[str, str] = {}
        self.workloads: list[Workload] = []
        self.duplicates: Duplicates = {}
        """The current document's mappings that had a key twice."""

    def document(self, doc: JSONValue, number: int, duplicates: Duplicates) -> None:
        where = f"document {number}"
        self.duplicates = duplicates
        if doc is None:
            return
        if not isinstance(doc, dict):
            self.errors.append(
                ManifestError(
                    self.source,
                    where,
                    "",
                    f"expected a Kubernetes object (a mapping), got {describe(doc)}",
                )
            )
            return
        self.item(doc, where, None)

    def item(self, doc: JSONObject, where: str, implied_kind: str | None) -> None:
        kind = doc.get("kind", implied_kind)
        try:
            if self.duplicates and isinstance(kind, str) and (kind in _NAMESPACED or kind in _LIST_KINDS):
                self.refuse_duplicates(doc, where, kind)
            if self.validate in (FieldValidation.STRICT, FieldValidation.WARN) and isinstance(kind, str):
                self.check_known(doc, where, kind)
            obj: KubeObject | None = None
            if kind == "Pod":
                obj = self.add_pod(read_pod(doc, self.source, where), where)
            elif kind == "Node":
                obj = self.add_node(read_node(doc, self.source, where), where)
            elif kind == "PodGroup":
                obj = self.add_pod_group(read_pod_group(doc, self.source, where), where)
            elif kind == "Namespace":
                obj = self.add_namespace(read_namespace(doc, self.source, where), where)
            elif kind == "PriorityClass":
                obj = self.add_priority_class(read_priority_class(doc, self.source, where), where)
            elif kind == "PodDisruptionBudget":
                obj = self.add_budget(read_pod_disruption_budget(doc, self.source, where), where)
            elif isinstance(kind, str) and kind in WORKLOAD_READERS:
                obj = self.add_workload(read_workload(doc, self.source, where, kind), where)
            elif isinstance(kind, str) and kind in _LIST_KINDS:
                self.list(doc, where, kind)
            elif kind is None:
                raise ManifestError(self.source, where, "kind", "is required (Pod, Node or List)")
            else:
                raise ManifestError(
                    self.source,
                    where,
                    "kind",
                    f"{shown(kind)} is not supported; kubus reads {', '.join(_NAMESPACED)} "
                    "and List (PodList, NodeList)",
                )
            if obj is not None and self.keep_raw:
                self.result.objects.append(ManifestObject(doc, obj, where))
        except ManifestError as e:
            self.errors.append(e)

    def refuse_duplicates(self, doc: JSONObject, where: str, kind: str) -> None:
        """Raise a ManifestError for the first field of the object `doc` (a List: less its items)
        given twice, as kube's strict decoding refuses it (only a warning, or nothing, when the
        load's validation is WARN or IGNORE)."""
        if self.validate is FieldValidation.IGNORE:
            return
        is_list = kind in _LIST_KINDS
        if found := duplicate_in(doc, self.duplicates, items=not is_list):
            path, reason = found
            obj = where if is_list else object_label(kind, doc, where, namespaced=_NAMESPACED[kind])
            if self.validate is FieldValidation.WARN:
                warning = ManifestError(self.source, obj, path, f"{reason}: the last one is used")
                self.result.warnings.append(str(warning))
                return
            if self.validate is FieldValidation.STRICT:
                reason = f"{reason} ({_STRICT_HINT})"
            raise ManifestError(self.source, obj, path, reason)

    def check_known(self, doc: JSONObject, where: str, kind: str) -> None:
        """Raise a ManifestError for the first field of the object `doc` that its kind's schema
        lacks (`kubus.api.schema`); with WARN, note each in the warnings instead."""
        if kind in _LIST_KINDS:
            unknown = [key for key in doc if key not in ("apiVersion", "kind", "metadata", "items")]
        else:
            unknown = list(unknown_fields(kind, doc))
        if not unknown:
            return
        obj = where if kind in _LIST_KINDS else object_label(kind, doc, where, namespaced=_NAMESPACED.get(kind, True))
        for path in unknown:
            name = path.rsplit(".", 1)[-1] if not path.endswith("]") else path
            reason = f"unknown field {quote(name)}"
            if self.validate is FieldValidation.STRICT:
                raise ManifestError(self.source, obj, path, f"{reason} ({_STRICT_HINT})")
            self.result.warnings.append(str(ManifestError(self.source, obj, path, f"{reason}: ignored")))

    def list(self, doc: JSONObject, where: str, kind: str) -> None:
        r = Reader(self.source, where)
        api_version = doc.get("apiVersion")
        if api_version is not None and api_version != "v1":
            r.fail("apiVersion", f"{shown(api_version)} is not supported for {kind} (want v1)")
        items = r.sequence(doc.get("items"), "items")
        for i, item in enumerate(items):
            item_where = f"{where} items[{i}]"
            if not isinstance(item, dict):
                self.errors.append(
                    ManifestError(
                        self.source,
                        item_where,
                        "",
                        f"expected a Kubernetes object (a mapping), got {describe(item)}",
                    )
                )
                continue
            self.item(item, item_where, _LIST_KINDS[kind])

    # Each add_* keeps the object and returns it; a ManifestError for one it refuses.

    def add_pod(self, pod: Pod, where: str) -> Pod:
        self.result.pods.append(self._first("Pod", "pod", pod.key, where, self.pod_at, pod))
        return pod

    def add_node(self, node: Node, where: str) -> Node:
        self.result.nodes.append(self._first("Node", "node", node.name, where, self.node_at, node))
        return node

    def add_pod_group(self, group: PodGroup, where: str) -> PodGroup:
        self.groups.append(self._first("PodGroup", "pod group", group.key, where, self.group_at, group))
        return group

    def add_namespace(self, ns: Namespace, where: str) -> Namespace:
        self.namespaces.append(self._first("Namespace", "namespace", ns.name, where, self.namespace_at, ns))
        return ns

    def add_budget(self, pdb: PodDisruptionBudget, where: str) -> PodDisruptionBudget:
        self.budgets.append(self._first("PodDisruptionBudget", "budget", pdb.key, where, self.budget_at, pdb))
        return pdb

    def add_workload(self, obj: Workload, where: str) -> Workload:
        key = f"{obj.namespace}/{obj.name}"
        noun = obj.kind[0].lower() + obj.kind[1:]
        self.workloads.append(self._first(obj.kind, noun, obj.key, where, self.workload_at, obj, key))
        return obj

    def add_priority_class(self, pc: PriorityClass, where: str) -> PriorityClass:
        """The class, unless it is a second globalDefault (kube's admission refuses it)."""
        pc = self._first("PriorityClass", "priority class", pc.name, where, self.class_at, pc)
        try:
            check_priority_class(pc, self.priority_classes)
        except PriorityError as e:
            raise ManifestError(self.source, f"PriorityClass {pc.name}", e.field, str(e)) from None
        self.priority_classes.append(pc)
        return pc

    def _first(
        self, kind: str, noun: str, key: str, where: str, seen: dict[str, str], obj: _T, shown_key: str = ""
    ) -> _T:
        """``obj``, the first of its kind named ``key``; a ManifestError for a second one (naming
        it ``shown_key``, by default ``key``)."""
        if key in seen:
            raise ManifestError(
                self.source,
                f"{kind} {shown_key or key}",
                "metadata.name",
                f"duplicate: the same {noun} is already defined in {seen[key]}",
            )
        seen[key] = where
        return obj


def _documents(text: str, collector: _Collector) -> None:
    number = 0
    try:
        for number, (doc, duplicates) in enumerate(decoded_documents(text), start=1):
            collector.document(doc, number, duplicates)
    except yaml.YAMLError as e:
        collector.errors.append(ManifestError(collector.source, f"document {number + 1}", "", yaml_error(e)))


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


def load_manifests(
    path_or_text: str | bytes | os.PathLike[str],
    *,
    source: str | None = None,
    validate: FieldValidation | None = None,
    keep_raw: bool = False,
) -> Manifests:
    """Read the objects of a manifest file or text (YAML or JSON, multi-document, Lists).

    The argument is a path (a `pathlib.Path`, or a non-blank one-line string), "-" for standard
    input, or the manifest text itself (bytes, or a string that has a newline, starts with `{`
    or `[`, or is blank).
    `source` names the input in errors; by default the path as given, or "<stdin>".
    `validate` says what becomes of unknown and duplicate fields (`FieldValidation`; None: a
    duplicate is refused, an unknown field ignored).
    `keep_raw` fills `Manifests.objects`: each object's mapping as written, with its typed object
    and its place, read in the same pass (the text is read once).

    Raises ManifestError for the first problem when only one object is bad, ManifestErrors
    (a ManifestError) listing the first problem of every bad object otherwise. Never raises
    anything else for bad input.
    """
    text, name = _read(path_or_text, source)
    return parse_manifests(text, source=name, validate=validate, keep_raw=keep_raw)


def parse_manifests(
    text: str | bytes, *, source: str = STDIN, validate: FieldValidation | None = None, keep_raw: bool = False
) -> Manifests:
    """Like `load_manifests`, for manifest text that is never taken for a path (what a client
    published on the bus, what was read from standard input)."""
    if isinstance(text, bytes):
        text, source = _read(text, source)
    collector = _Collector(source, validate, keep_raw=keep_raw)
    _documents(text, collector)
    if len(collector.errors) == 1:
        raise collector.errors[0]
    if collector.errors:
        raise ManifestErrors(collector.errors)
    collector.result.pod_groups = tuple(collector.groups)
    collector.result.namespaces = tuple(collector.namespaces)
    collector.result.priority_classes = tuple(collector.priority_classes)
    collector.result.disruption_budgets = tuple(collector.budgets)
    collector.result.workloads = tuple(collector.workloads)
    return collector.result


KubeObject = Pod | Node | PodGroup | Namespace | PriorityClass | PodDisruptionBudget | Workload
"""An object of a kind kubus reads."""


def parse_object(obj: JSONMapping, *, source: str = STDIN) -> KubeObject:
    """One decoded object of a kind kubus reads (its ``kind``: Pod, Node, PodGroup, Namespace,
    PriorityClass, PodDisruptionBudget, Service, ReplicationController, ReplicaSet, StatefulSet), as
    `parse_manifests` reads it; what an apiserver's
    watch delivers, for instance. ``source`` labels errors. Raises ManifestError (the kind
    among them)."""
    kind = obj.get("kind")
    readers: JSONObject = {
        "Pod": read_pod,
        "Node": read_node,
        "PodGroup": read_pod_group,
        "Namespace": read_namespace,
        "PriorityClass": read_priority_class,
        "PodDisruptionBudget": read_pod_disruption_budget,
        **WORKLOAD_READERS,
    }
    reader = readers.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise ManifestError(source, "", "kind", f"{kind!r} is not a kind kubus reads (known: {', '.join(readers)})")
    parsed: KubeObject = reader(obj, source, "object")
    return parsed


def _one_json_pod(manifest: bytes | str, source: str, uid: str) -> Pod | None:
    """The Pod of a manifest that is one JSON Pod object (what services publish), read the short
    way, with ``uid`` as its metadata.uid (set before reading: no uid derived to be replaced);
    None for anything else, or anything wrong, which `parse_manifests` then reads and reports as
    it does any manifest."""
    if manifest[:1] != (b"{" if isinstance(manifest, bytes) else "{"):
        return None
    try:
        # Not json_document: kubus wrote this JSON (codec.dumps of a dict, which cannot give a
        # key twice) from a manifest the queue checked when the pod was submitted.
        doc = codec.loads(manifest)
    except codec.DecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "Pod":
        return None
    if isinstance(meta := doc.get("metadata"), dict) and uid:
        meta["uid"] = uid
    try:
        return read_pod(doc, source, "document 1")
    except ManifestError:
        return None


def wire_pod(manifest: bytes | str, uid: str, key: str) -> Pod:
    """The one Pod of a manifest that travels between services (a queued pod, a BindRequest),
    with the uid the store knows it by. Raises ManifestError, or ValueError when the manifest
    is not exactly one Pod."""
    pod = _one_json_pod(manifest, f"pod {key}", uid)
    if pod is None:
        manifests = parse_manifests(manifest, source=f"pod {key}")
        others = (
            manifests.pod_groups,
            manifests.namespaces,
            manifests.priority_classes,
            manifests.disruption_budgets,
            manifests.workloads,
        )
        if manifests.nodes or any(others) or len(manifests.pods) != 1:
            raise ValueError(
                f"pod {key}: expected one Pod, got {len(manifests.pods)} pod(s), {len(manifests.nodes)} node(s) "
                f"and {sum(map(len, others))} other object(s)"
            )
        pod = manifests.pods[0]
    if pod.metadata.uid != uid:
        pod = replace(pod, metadata=replace(pod.metadata, uid=uid))
    return pod
