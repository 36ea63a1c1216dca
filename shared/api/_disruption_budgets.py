"""A PodDisruptionBudget manifest (`policy/v1`) -> PodDisruptionBudget, with kube's validation
(see kubus.api.manifests and kubus.api.disruption)."""

from __future__ import annotations

from kubus.api._fields import Reader, describe, key_path, shown
from kubus.api._metadata import object_label, object_meta
from kubus.api._pods import _label_selector
from kubus.api.disruption import UNHEALTHY_POD_EVICTION_POLICIES, IntOrPercent, PodDisruptionBudget
from kubus.core.codec import JSONValue

PDB_API_VERSION = "policy/v1"

_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_SPEC_FIELDS = ("selector", "minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy")
_INT32_MAX = 2**31 - 1


def _int_or_percent(r: Reader, raw: JSONValue, path: str) -> IntOrPercent:
    """A count (0 or more) or a percentage up to 100% (kube's ValidatePositiveIntOrPercent and
    IsNotMoreThan100Percent)."""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str):
        digits = raw[:-1]
        if not (raw.endswith("%") and digits.isascii() and digits.isdigit()):
            r.fail(
                path,
                f"{shown(raw)}: a valid percent string must be a numeric string followed by an ending '%' "
                "(e.g. '1%',  or '93%')",
            )
        if int(digits) > 100:
            r.fail(path, f"{shown(raw)}: must not be greater than 100%")
        return raw
    if isinstance(raw, bool) or not isinstance(raw, int):
        r.fail(path, f"must be an integer or percentage (e.g '5%'), got {describe(raw)}")
    if raw < 0:
        r.fail(path, f"{raw}: must be greater than or equal to 0")
    if raw > _INT32_MAX:
        r.fail(path, f"{raw}: must be at most {_INT32_MAX}")
    return raw


def read_pod_disruption_budget(obj: JSONValue, source: str, where: str) -> PodDisruptionBudget:
    """Raises ManifestError naming the object and the field. Any field a PodDisruptionBudget
    does not have is an error (a typo such as `minAvailible` would silently protect nothing)."""
    r = Reader(source, where)
    if not isinstance(obj, dict):
        r.fail("", f"expected a PodDisruptionBudget (a mapping), got {describe(obj)}")
    r.obj = object_label("PodDisruptionBudget", obj, where, namespaced=True)
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != PDB_API_VERSION:
        r.fail("apiVersion", f"{shown(api_version)} is not supported for PodDisruptionBudget (want {PDB_API_VERSION})")
    kind = obj.get("kind")
    if kind is not None and kind != "PodDisruptionBudget":
        r.fail("kind", f"expected PodDisruptionBudget, got {shown(kind)}")
    for name in obj:
        if name not in _TOP_FIELDS:
            r.fail(key_path("", str(name)), f"unknown field (a PodDisruptionBudget has {', '.join(_TOP_FIELDS)})")
    metadata = object_meta(r, obj.get("metadata"), "PodDisruptionBudget", namespaced=True)
    spec = r.mapping(obj.get("spec"), "spec")
    for name in spec:
        if name not in _SPEC_FIELDS:
            r.fail(key_path("spec", name), f"unknown field (a PodDisruptionBudget spec has {', '.join(_SPEC_FIELDS)})")
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        r.fail("spec", "minAvailable and maxUnavailable cannot be both set")
    policy = spec.get("unhealthyPodEvictionPolicy")
    return PodDisruptionBudget(
        namespace=metadata.namespace,
        name=metadata.name,
        selector=_label_selector(r, spec.get("selector"), "spec.selector"),
        min_available=None if min_available is None else _int_or_percent(r, min_available, "spec.minAvailable"),
        max_unavailable=None if max_unavailable is None else _int_or_percent(r, max_unavailable, "spec.maxUnavailable"),
        unhealthy_pod_eviction_policy=(
            None
            if policy is None
            else r.choice(policy, "spec.unhealthyPodEvictionPolicy", UNHEALTHY_POD_EVICTION_POLICIES)
        ),
    )
