"""The field names of Kubernetes' schema for the kinds kubus reads, for strict field validation.

`kubectl apply` validates strictly by default (``--validate=strict``): a field the object's
schema does not have, ``resourcse:`` for ``resources:``, is refused, naming it
(``unknown field "spec.containers[0].resourcse"``). kubus's own readers read only the fields
scheduling uses, so they cannot tell a typo from a field they do not need; this module knows
every field of the v1 schema instead: ObjectMeta (``managedFields`` included), the whole PodSpec,
Container and PodStatus, NodeSpec and NodeStatus, and so on, for Pod, Node, Namespace,
PriorityClass, PodDisruptionBudget, Service, ReplicationController, ReplicaSet, StatefulSet and
scheduler-plugins' PodGroup. Unknown means "not in Kubernetes' schema", never "not read by kubus".

The field sets are data (``_schema_fields.json``), made from the OpenAPI schemas that the
``kubernetes-validate`` package bundles, the union of every Kubernetes version it has, by
``python -m kubus.api.schema`` (a test checks the file is current). Maps (labels, annotations,
resource lists, nodeSelector) take any key; fields whose values are free-form (``fieldsV1``,
``x-kubernetes-preserve-unknown-fields``) are not looked into.

Only input a user wrote is checked (`kubus apply`, `kubus simulate`); what an apiserver sends
(the cluster watcher, `kubus.api.submission.pod_from_api`) is not: it validated it already, and
a newer apiserver may carry fields this file does not know yet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from kubus.api._fields import key_path
from kubus.core.codec import JSONMapping, JSONObject, JSONValue

__all__ = ["SCHEMA_KINDS", "unknown_fields"]

_DATA = Path(__file__).with_name("_schema_fields.json")

SCHEMA_KINDS: Mapping[str, tuple[str, str]] = {
    "Pod": ("v1", "pod-v1.json"),
    "Node": ("v1", "node-v1.json"),
    "Namespace": ("v1", "namespace-v1.json"),
    "Service": ("v1", "service-v1.json"),
    "ReplicationController": ("v1", "replicationcontroller-v1.json"),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclass-scheduling-v1.json"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudget-policy-v1.json"),
    "ReplicaSet": ("apps/v1", "replicaset-apps-v1.json"),
    "StatefulSet": ("apps/v1", "statefulset-apps-v1.json"),
}
"""kind -> (apiVersion, the kubernetes-validate schema file it is made from). PodGroup, a CRD,
is made from scheduler-plugins' CRD (`_POD_GROUP`)."""

_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

# scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1), as its CRD defines it.
_POD_GROUP: JSONObject = {
    "apiVersion": None,
    "kind": None,
    "metadata": _OBJECT_META,
    "spec": "PodGroup.spec",
    "status": "PodGroup.status",
}
_POD_GROUP_DEFS: dict[str, JSONObject] = {
    "PodGroup.spec": {"minMember": None, "minResources": ["{}", None], "scheduleTimeoutSeconds": None},
    "PodGroup.status": {
        "phase": None,
        "occupiedBy": None,
        "scheduled": None,
        "running": None,
        "succeeded": None,
        "failed": None,
        "scheduleStartTime": None,
    },
}

# A field's shape in the data: None (a value not looked into), "Def" (an object of that
# definition's fields), ["[]", shape] (a list of shape) or ["{}", shape] (a map, any key, of shape).
Shape = JSONValue  # recursive JSON: None | str | list  (mypy has no recursive aliases of this form here)


@cache
def _data() -> JSONObject:
    data: JSONObject = json.loads(_DATA.read_text())
    return data


def unknown_fields(kind: str, obj: JSONMapping) -> Iterator[str]:
    """The paths of ``obj``'s fields (an object of ``kind``) that its schema does not have, in
    document order, kube's notation (``spec.containers[0].resourcse``). Nothing for a kind
    without a schema here. Never raises for a value of the wrong type: the readers report those."""
    data = _data()
    top = data["kinds"].get(kind)
    if top is None:
        return
    defs: dict[str, dict[str, Shape]] = data["defs"]
    stack: list[tuple[JSONValue, dict[str, Shape], str]] = [(obj, top, "")]
    while stack:
        value, fields, path = stack.pop()
        children: list[tuple[JSONValue, Shape, str]] = []
        for key, child in value.items():
            if not isinstance(key, str):
                continue
            child_path = key_path(path, key)
            if key not in fields:
                yield child_path
                continue
            children.append((child, fields[key], child_path))
        pending: list[tuple[JSONValue, dict[str, Shape], str]] = []
        for child, shape, child_path in children:
            pending.extend(_objects(child, shape, child_path, defs))
        stack.extend(reversed(pending))


def _objects(
    value: JSONValue, shape: Shape, path: str, defs: Mapping[str, dict[str, Shape]]
) -> Iterator[tuple[JSONValue, dict[str, Shape], str]]:
    """(mapping, its fields, its path) for each object of known fields inside ``value``."""
    if shape is None:
        return
    if isinstance(shape, str):
        fields = defs.get(shape)
        if fields is not None and isinstance(value, dict):
            yield value, fields, path
        return
    wrapper, inner = shape
    if wrapper == "[]" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _objects(item, inner, f"{path}[{i}]", defs)
    elif wrapper == "{}" and isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield from _objects(item, inner, key_path(path, key), defs)


# --- making the data ------------------------------------------------------------------------------


def build(schema_root: Path) -> JSONObject:
    """The field sets of every kind of `SCHEMA_KINDS` (and PodGroup), from the schema folders
    (``v1.30.0-local``, ...) of kubernetes-validate under ``schema_root``: the union over them."""
    versions = sorted(p for p in schema_root.iterdir() if p.is_dir() and not p.name.endswith("-strict"))
    raw_defs: dict[str, list[JSONObject]] = {}
    kinds: dict[str, list[JSONObject]] = {}
    for folder in versions:
        for name, schema in json.loads((folder / "_definitions.json").read_text())["$defs"].items():
            raw_defs.setdefault(name, []).append(schema)
        for kind, (_, file) in SCHEMA_KINDS.items():
            if (folder / file).is_file():
                kinds.setdefault(kind, []).append(json.loads((folder / file).read_text()))
    defs: dict[str, dict[str, Shape]] = {}

    def shape(schema: JSONMapping) -> Shape:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return None
        if "$ref" in schema:
            target = str(schema["$ref"]).rsplit("/", 1)[-1]
            return target if define(target) else None
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return shape(schema["allOf"][0])
        if "items" in schema and isinstance(schema["items"], dict):
            inner = shape(schema["items"])
            return None if inner is None else ["[]", inner]
        if isinstance(schema.get("additionalProperties"), dict):
            inner = shape(schema["additionalProperties"])
            return None if inner is None else ["{}", inner]
        return None

    def define(name: str) -> bool:
        """Whether ``name`` is an object with known fields (added to ``defs``)."""
        if name in defs:
            return True
        schemas = raw_defs.get(name, [])
        if not any("properties" in s for s in schemas):
            return False
        if any(s.get("x-kubernetes-preserve-unknown-fields") for s in schemas):
            return False
        fields: dict[str, Shape] = {}
        defs[name] = fields  # before the fields: a definition may refer to itself
        for s in schemas:
            for field_name, sub in s.get("properties", {}).items():
                fields[field_name] = shape(sub)
        return True

    out_kinds: dict[str, dict[str, Shape]] = {}
    for kind, schemas in kinds.items():
        top: dict[str, Shape] = {}
        for s in schemas:
            for field_name, sub in s["properties"].items():
                top[field_name] = shape(sub)
        out_kinds[kind] = top
    define(_OBJECT_META)
    out_kinds["PodGroup"] = dict(_POD_GROUP)
    defs.update(_POD_GROUP_DEFS)
    return {"kinds": dict(sorted(out_kinds.items())), "defs": dict(sorted(defs.items()))}


def _schema_root() -> Path:
    import kubernetes_validate  # type: ignore[import-untyped]  # a dev dependency, untyped

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def render(data: JSONMapping) -> str:
    """The data file's text: one definition per line, so that a change reads as a small diff."""
    lines = ["{", ' "kinds": {']
    for i, (section, key) in enumerate((("kinds", "kinds"), ("defs", "defs"))):
        if i:
            lines.append(f' "{key}": {{')
        items = list(data[section].items())
        for j, (name, fields) in enumerate(items):
            comma = "," if j < len(items) - 1 else ""
            lines.append(f"  {json.dumps(name)}: {json.dumps(fields, sort_keys=True)}{comma}")
        lines.append(" }," if i == 0 else " }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    """``python -m kubus.api.schema``: write ``_schema_fields.json`` from kubernetes-validate."""
    _DATA.write_text(render(build(_schema_root())))
    print(f"wrote {_DATA}")


if __name__ == "__main__":
    main()
