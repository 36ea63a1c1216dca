"""kubectl's ways of naming what a command is about: ``pods``, ``pod NAME...``, ``pod/NAME...``
(several types at once: ``pod/web node/sim-00001``), and ``-f FILE|DIR`` (a directory's
``.yaml``, ``.yml`` and ``.json`` files, its subdirectories' too with ``-R``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

import yaml

from kubus.api.manifests import list_items, read_documents
from kubus.core.codec import JSONList
from kubus.core.errors import UsageError

__all__ = ["RESOURCES", "ResourceChoices", "manifest_paths", "objects_in_files", "resource_choices", "targets"]

RESOURCES = {
    "pods": "pods",
    "pod": "pods",
    "po": "pods",
    "nodes": "nodes",
    "node": "nodes",
    "no": "nodes",
    "events": "events",
    "event": "events",
    "ev": "events",
}
"""Every name kubectl takes for a resource kubus has -> its plural."""

_KINDS = {"Pod": "pods", "Node": "nodes", "Event": "events"}


class ResourceChoices(tuple[str, ...]):
    """argparse ``choices`` of a resource argument: the names (completion offers them), any
    case, and ``TYPE/NAME``."""

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        kind, sep, name = value.partition("/")
        return tuple.__contains__(self, kind.lower()) and (not sep or bool(name))


def resource_choices(*plurals: str) -> ResourceChoices:
    """The names of ``plurals`` (pods, nodes, events), as `ResourceChoices`."""
    return ResourceChoices(name for name, plural in RESOURCES.items() if plural in plurals)


def targets(resource: str, names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(plural, names) per resource named, in order: ``pods a b`` -> [("pods", ["a", "b"])],
    ``pod/a node/n pod/b`` -> [("pods", ["a", "b"]), ("nodes", ["n"])]. Raises UsageError for
    a TYPE/NAME mixed with bare names, or an unknown type."""
    if "/" not in resource:
        plural = RESOURCES.get(resource.lower())
        if plural is None:
            raise UsageError(f'the server doesn\'t have a resource type "{resource}"')
        if any("/" in n for n in names):
            raise UsageError(
                "there is no need to specify a resource type as a separate argument when passing "
                "arguments in resource/name form (e.g. 'kubus get pod/web' instead of 'kubus get pod pod/web')"
            )
        return [(plural, list(names))]
    out: dict[str, list[str]] = {}
    for word in (resource, *names):
        kind, sep, name = word.partition("/")
        plural = RESOURCES.get(kind.lower())
        if not sep or not name:
            raise UsageError(f"arguments in resource/name form must have a single resource and name, got {word!r}")
        if plural is None:
            raise UsageError(f'the server doesn\'t have a resource type "{kind}"')
        out.setdefault(plural, []).append(name)
    return list(out.items())


_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def manifest_paths(paths: Sequence[str], *, recursive: bool = False) -> list[str]:
    """``-f`` values with each directory replaced by its manifest files (.yaml, .yml, .json),
    sorted, as kubectl reads them; its subdirectories too with ``recursive``. '-' and files
    stay as they are (a missing file is its reader's to report). Raises UsageError for a
    directory without a manifest."""
    out: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            out.append(path)
            continue
        found: list[str] = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            found += sorted(os.path.join(root, f) for f in files if f.endswith(_MANIFEST_SUFFIXES))
            if not recursive:
                break
        if not found:
            raise UsageError(f"-f {path}: no manifest (.yaml, .yml, .json) in the directory")
        out += found
    return out


def objects_in_files(paths: Sequence[str], stdin: BinaryIO | None = None) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every object in the manifests at ``paths`` ('-' reads
    standard input), List items included, in order; namespace "" for a cluster-scoped kind
    and "default" for a namespaced one that names none. Only the names are read: `kubus delete
    -f` needs nothing else. Raises UsageError for a file that cannot be read or parsed, or an
    object without kind or name."""
    out: list[tuple[str, str, str]] = []
    for path in paths:
        try:
            if path == "-":
                text = (stdin or sys.stdin.buffer).read()
            else:
                with open(path, "rb") as f:
                    text = f.read()
            docs = list(read_documents(text.decode("utf-8-sig"), refuse_duplicates=False))
        except OSError as e:
            raise UsageError(f"{path}: cannot read the file: {e.strerror or e}") from None
        except (yaml.YAMLError, ValueError) as e:
            raise UsageError(f"{path}: {' '.join(str(e).split())}") from None
        items: JSONList = []
        for doc in docs:
            if (listed := list_items(doc)) is not None:
                items += listed
            elif doc is not None:
                items.append(doc)
        for i, obj in enumerate(items, start=1):
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if not isinstance(kind, str) or not kind or not isinstance(name, str) or not name:
                raise UsageError(f"{path}: object {i}: expected kind and metadata.name")
            namespace = meta.get("namespace") if isinstance(meta, dict) else None
            cluster_scoped = kind in ("Node", "Namespace", "PriorityClass")
            out.append((kind, "" if cluster_scoped else str(namespace or "default"), name))
    return out
