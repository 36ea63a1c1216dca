"""A Namespace manifest (v1) -> Namespace (see kubus.api.manifests and kubus.api.namespaces)."""

from __future__ import annotations

from kubus.api._fields import key_path, quote
from kubus.api._metadata import read_object
from kubus.api.names import dns1123_label_error
from kubus.api.namespaces import Namespace
from kubus.core.codec import JSONValue

_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")


def read_namespace(obj: JSONValue, source: str, where: str) -> Namespace:
    """Raises ManifestError naming the object and the field. spec (finalizers) and status are
    accepted and not read; any other field is an error (a typo would silently drop labels)."""
    r, metadata = read_object(obj, source, where, "Namespace", namespaced=False)
    for name in obj:
        if name not in _TOP_FIELDS:
            r.fail(key_path("", str(name)), f"unknown field (a Namespace has {', '.join(_TOP_FIELDS)})")
    if problem := dns1123_label_error(metadata.name):
        r.fail("metadata.name", f"{quote(metadata.name)} is not a valid namespace name: {problem}")
    return Namespace(name=metadata.name, labels=metadata.labels)
