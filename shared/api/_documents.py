"""The documents of a manifest text, decoded as kube decodes them: the JSON document when the
text is JSON, else every YAML document (the safe loader, timestamps left as strings), each mapping
that gives a key twice noted (refused by kube's strict decoding, never read as "the last one
wins"), and aliases that expand far beyond what the text spells out refused ("excessive
aliasing"). `kubus.api.manifests` reads the objects of these documents."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import yaml

from kubus.api._fields import key_path, quote
from kubus.core import codec
from kubus.core.codec import JSONList, JSONObject, JSONValue

__all__ = [
    "Duplicates",
    "decoded_documents",
    "duplicate_in",
    "json_document",
    "list_items",
    "read_documents",
    "yaml_error",
]

Duplicates = Mapping[int, tuple[str, str]]
"""id() of each mapping of a document that had a key twice -> (the key, the reason, one line)."""

# --- YAML: the safe loader (C when available), with timestamps left as strings -------------------
# kube decodes YAML through JSON, where a timestamp is just a string; PyYAML would make a label
# value like 2024-01-02 a date. Removing the implicit resolver keeps such values strings.
# Any: CSafeLoader exists only where PyYAML was built with libyaml, so the base is picked at run time.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader, noting each mapping that has a key twice (`kubus_duplicates`, reset by
    whoever reads it after each document): the mapping keeps the last value, as PyYAML's does,
    and the reader refuses it, naming the object and the field."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.kubus_duplicates: dict[int, tuple[str, str]] = {}

    # A YAML mapping's keys may be of any hashable YAML type (ints, bools, null), not only strings.
    def construct_yaml_map(self, node: yaml.MappingNode) -> Iterator[dict[Hashable, JSONValue]]:
        data: dict[Hashable, JSONValue] = {}
        yield data
        own = node.value  # flatten_mapping takes the merge keys (<<) out of this very list
        count = len(own)
        data.update(self.construct_mapping(node))
        if len(data) < count or node.value is not own or len(own) != count:
            # A key twice, or merge keys, whose keys the mapping's own keys may override.
            self._note_duplicate(data, own)

    def _note_duplicate(self, data: dict[Hashable, JSONValue], pairs: list[tuple[yaml.Node, yaml.Node]]) -> None:
        first_nodes: dict[Hashable, yaml.Node] = {}
        for key_node, _ in pairs:
            key = self.construct_object(key_node)  # built already: construct_object remembers it
            try:
                first = first_nodes.setdefault(key, key_node)
            except TypeError:  # unhashable: construct_mapping has refused it already
                continue
            if first is not key_node:
                again, before = key_node.start_mark, first.start_mark
                where = (
                    f"at line {again.line + 1} (first at line {before.line + 1})"
                    if again.line != before.line
                    else f"at line {again.line + 1}, column {again.column + 1} (first at column {before.column + 1})"
                )
                reason = f"duplicate field {quote(str(key))} {where}"
                self.kubus_duplicates[id(data)] = (str(key), reason)
                return


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


# A "billion laughs" (anchors of anchors: 600 bytes that are 10**9 strings once anything walks or
# serializes them) is refused as kube's YAML reader refuses it: "excessive aliasing". Aliases of
# ordinary use (a shared label set, a container repeated) pass.
_ALIAS_FLOOR = 100_000
"""Nodes a text's documents may expand to through aliases however few they spell out."""
_ALIAS_RATIO = 10
"""Beyond the floor, how many times their own nodes a text's documents may expand to."""


class _AliasCheckingLoader(_Loader):
    """`_Loader` that counts what the documents' aliases expand them to (`_expansion`), all the
    documents of the text together, and raises a YAMLError past `_ALIAS_FLOOR` nodes and
    `_ALIAS_RATIO` times the nodes they spell out. For text with a ``&`` and a ``*`` in it, the
    only text that can hold an anchor and its alias."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.kubus_nodes = 0
        self.kubus_expanded = 0

    def construct_document(self, node: yaml.Node) -> JSONValue:
        nodes, expanded = _expansion(node)
        self.kubus_nodes += nodes
        self.kubus_expanded += expanded
        if self.kubus_expanded > max(_ALIAS_FLOOR, _ALIAS_RATIO * self.kubus_nodes):
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"document contains excessive aliasing ({self.kubus_nodes} nodes expand to {self.kubus_expanded})",
                node.start_mark,
            )
        return super().construct_document(node)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _expansion(root: yaml.Node) -> tuple[int, int]:
    """(nodes, expanded): the nodes of the document ``root`` and how many it is with every alias
    replaced by what it names. Counted over the node graph, never built; an alias of an
    enclosing node (a cycle) counts 1."""
    sizes: dict[int, int] = {}
    """id(collection node) -> its expanded node count; 1 while it is being counted. A scalar counts 1."""
    scalars = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        children = _children(node)
        if counted:
            sizes[id(node)] = min(1 << 62, 1 + sum(sizes.get(id(child), 1) for child in children))
        elif id(node) not in sizes:
            sizes[id(node)] = 1
            stack.append((node, True))
            for child in children:
                if isinstance(child, yaml.ScalarNode):
                    scalars += 1
                elif id(child) not in sizes:
                    stack.append((child, False))
    return len(sizes) + scalars, sizes[id(root)]


def yaml_error(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is not None:
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"invalid YAML: {problem}"


# --- JSON: orjson, which keeps the last of a key given twice, checked for keys given twice -------
# Outside its strings a JSON text has one colon per key it spells out; inside them a colon is
# itself or the escape \u003a. orjson's output of the decoded document spells every colon as
# itself. So, with no such escape, the text has as many colons as that output exactly when no
# object gives a key twice: the pair orjson drops takes its colon (and any in its key and value)
# with it.


def _keys_unique(text: bytes | str, doc: JSONValue) -> bool:
    """True when no object of the JSON `text` (decoded: `doc`) gives a key twice; False when one
    may (or when the text spells a colon as \\u003a): `_json_duplicates` then says. About 2 µs
    for a pod's manifest of 600 bytes."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\u003a" in data or b"\\u003A" in data:
        return False
    try:
        again = codec.dumps(doc)
    except TypeError:  # nested deeper than orjson writes (254 levels)
        return False
    return data.count(b":") == again.count(b":")


def _json_duplicates(text: bytes | str) -> tuple[JSONValue, dict[int, tuple[str, str]]]:
    """The JSON document of `text` (valid JSON) and its objects that have a key twice (the
    standard library's decoder, which shows each object's pairs before they become a dict).
    Raises codec.DecodeError for a text nested too deeply for that decoder."""
    duplicates: dict[int, tuple[str, str]] = {}

    def mapping(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
        data = dict(pairs)
        if len(data) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicates[id(data)] = (key, f"duplicate field {quote(key)}")
                    break
                seen.add(key)
        return data

    try:
        return json.loads(text, object_pairs_hook=mapping), duplicates
    except RecursionError:
        raise codec.DecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None


def json_document(text: bytes | str) -> JSONValue:
    """The document of a text that is one JSON value, decoded the fast way (orjson). Raises
    codec.DecodeError when it is not JSON, and when an object of it may give a key twice (orjson
    would keep the last value, silently) or it is nested too deeply to tell: `parse_manifests`
    reads such a text, and refuses a key given twice, naming the object and the field."""
    doc = codec.loads(text)
    if not _keys_unique(text, doc) and _json_duplicates(text)[1]:
        raise codec.DecodeError("an object gives a key twice", text if isinstance(text, str) else "", 0)
    return doc


def decoded_documents(text: str) -> Iterator[tuple[JSONValue, Duplicates]]:
    """(document, its mappings that had a key twice) for each document of a manifest text: the
    JSON document when it is JSON, else every YAML document. Raises yaml.YAMLError as
    `read_documents` does."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            doc = codec.loads(text)
            checked, duplicates = ({}, {}) if _keys_unique(text, doc) else _json_duplicates(text)
        except codec.DecodeError:
            pass  # not JSON after all, bad JSON, or too deep to check: YAML reads it, or says what is wrong
        else:
            yield (checked, duplicates) if duplicates else (doc, {})  # orjson's, whichever path ran
            return
    loader = (_AliasCheckingLoader if "&" in text and "*" in text else _Loader)(text)
    try:
        while loader.check_data():
            doc = loader.get_data()
            duplicates, loader.kubus_duplicates = loader.kubus_duplicates, {}
            yield doc, duplicates
    finally:
        loader.dispose()


def duplicate_in(obj: JSONValue, duplicates: Duplicates, *, items: bool = True) -> tuple[str, str] | None:
    """(field path, reason) for the first mapping of `obj`, in document order, that had a key
    twice; None when none did. `items` False leaves out the `items` of `obj` (a List, whose
    items are objects of their own)."""
    stack: list[tuple[JSONValue, str]] = [(obj, "")]
    walked: set[int] = set()  # an alias may name a node twice, or its own ancestor
    while stack:
        node, path = stack.pop()
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, dict):
            if found := duplicates.get(id(node)):
                key, reason = found
                return key_path(path, key), reason
            children = [
                (value, key_path(path, str(key)))
                for key, value in node.items()
                if isinstance(value, dict | list) and (items or node is not obj or key != "items")
            ]
        elif isinstance(node, list):
            children = [(value, f"{path}[{i}]") for i, value in enumerate(node) if isinstance(value, dict | list)]
        else:
            continue
        stack.extend(reversed(children))
    return None


def read_documents(text: str, *, refuse_duplicates: bool = True) -> Iterator[JSONValue]:
    """The documents of a manifest text as kube reads them: the JSON document when it is JSON,
    else every YAML document (safe loader, timestamps left as strings). Raises yaml.YAMLError
    when it reaches a document that is not valid YAML, that has a mapping with a key twice
    (JSON too: `spec.containers[0].name: duplicate field "name"`; with `refuse_duplicates`
    False the last value is kept, as a best-effort reading of a manifest already refused may
    want), or whose aliases expand the documents read so far far beyond what they spell out
    ("excessive aliasing", `_AliasCheckingLoader`)."""
    for doc, duplicates in decoded_documents(text):
        if refuse_duplicates and duplicates and (found := duplicate_in(doc, duplicates)):
            path, reason = found
            raise yaml.YAMLError(f"{path}: {reason}")
        yield doc


def list_items(doc: JSONValue) -> JSONList | None:
    """The items of a document that is a List of any kind (its kind ends in "List" and its
    ``items`` is a list), each mapping item that names no kind given the one its List implies
    (PodList: Pod; List: none); None for any other document. Lenient, validating nothing: for
    reading names from input a load may refuse (`kubus delete -f`, a rejected submission's
    identity). `parse_manifests` reads Lists itself, strictly (List, PodList, NodeList)."""
    if not isinstance(doc, dict) or not isinstance(items := doc.get("items"), list):
        return None
    kind = str(doc.get("kind", ""))
    if not kind.endswith("List"):
        return None
    implied = kind.removesuffix("List") or None
    return [{"kind": implied, **item} if isinstance(item, dict) and implied else item for item in items]
