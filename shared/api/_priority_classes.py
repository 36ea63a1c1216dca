"""A PriorityClass manifest (`scheduling.k8s.io/v1`) -> PriorityClass, with kube's validation
(see kubus.api.manifests and kubus.api.priority)."""

from __future__ import annotations

from kubus.api._fields import Reader, describe, key_path, shown
from kubus.api._metadata import object_label, object_meta
from kubus.api.objects import PreemptionPolicy
from kubus.api.priority import (
    HIGHEST_USER_DEFINABLE_PRIORITY,
    SYSTEM_PRIORITY_CLASS_PREFIX,
    PriorityClass,
    system_class_problem,
)
from kubus.core.codec import JSONValue

PRIORITY_CLASS_API_VERSION = "scheduling.k8s.io/v1"

_TOP_FIELDS = ("apiVersion", "kind", "metadata", "value", "globalDefault", "description", "preemptionPolicy")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def read_priority_class(obj: JSONValue, source: str, where: str) -> PriorityClass:
    """Raises ManifestError naming the object and the field. Any field a PriorityClass does not
    have is an error (a typo such as `globaldefault` would silently change every pod)."""
    r = Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a PriorityClass (a mapping), got {describe(obj)}")
    r.obj = object_label("PriorityClass", obj, where, namespaced=False)
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != PRIORITY_CLASS_API_VERSION:
        r.fail(
            "apiVersion", f"{shown(api_version)} is not supported for PriorityClass (want {PRIORITY_CLASS_API_VERSION})"
        )
    kind = obj.get("kind")
    if kind is not None and kind != "PriorityClass":
        r.fail("kind", f"expected PriorityClass, got {shown(kind)}")
    for name in obj:
        if name not in _TOP_FIELDS:
            r.fail(key_path("", str(name)), f"unknown field (a PriorityClass has {', '.join(_TOP_FIELDS)})")
    metadata = object_meta(r, obj.get("metadata"), "PriorityClass", namespaced=False)
    if obj.get("value") is None:
        r.fail("value", "is required (an integer)")
    value = r.integer(obj.get("value"), "value", lo=_INT32_MIN, hi=_INT32_MAX)
    global_default = r.boolean(obj.get("globalDefault"), "globalDefault", False)
    if metadata.name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        if problem := system_class_problem(metadata.name, value, global_default):
            r.fail(
                "metadata.name",
                f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved for system use "
                f"only. error: {problem}",
            )
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        r.fail("value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")
    policy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    if obj.get("preemptionPolicy") is not None:
        if obj.get("preemptionPolicy") == "":
            r.fail("preemptionPolicy", "is required when given (PreemptLowerPriority or Never)")
        policy = r.enum(obj.get("preemptionPolicy"), "preemptionPolicy", PreemptionPolicy)
    return PriorityClass(
        name=metadata.name,
        value=value,
        global_default=global_default,
        preemption_policy=policy,
        description=r.string(obj.get("description"), "description"),
    )
