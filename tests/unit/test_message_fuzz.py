"""Fuzzing every decoder of bus input: random bytes, random JSON, and valid messages and pod
manifests with one field made wrong. The only outcomes allowed are a well-typed message (or
accepted pods that every later hop reads back the same) and the decoder's own error:
MessageError for messages, Rejected for ``kubus.pods.submit``, ManifestError for manifest
text. Never a KeyError, TypeError, AttributeError, RecursionError or an exhausted memory."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from enum import StrEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubus.api.errors import ManifestError
from kubus.api.manifests import parse_manifests, wire_pod
from kubus.api.submission import Rejected, Submission, identify, read_submission
from kubus.bus import EventKind, messages
from kubus.bus.messages import (
    BatchedPod,
    BindRequest,
    ClusterEvent,
    MessageError,
    NodeAssignment,
    NodeChange,
    NodeChanged,
    NodeChanges,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodBatch,
    PodChange,
    PodDeletion,
    PopReply,
    PopRequest,
    QueuedPod,
    Rejection,
    ReservedPods,
    decode,
    encode,
    event_data_type,
)
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_MANIFEST = 1 << 20

# -- the messages --------------------------------------------------------------------------------

POD_JSON = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u1"}}'

EXAMPLES: list[Any] = [
    QueuedPod("u1", "ns/p", POD_JSON, attempts=2),
    PopRequest(max_pods=64, wait_ms=100, holder="cycle-a", fencing_token=7),
    PopReply((QueuedPod("u1", "ns/p", POD_JSON, 2), QueuedPod("u2", "ns/q", b"{}"))),
    Outcome("u1", OutcomeKind.UNSCHEDULABLE, "n1", "0/3 nodes are available", ("NodeResourcesFit",), (0, 3), 4),
    Outcomes(
        (
            Outcome("u1", OutcomeKind.RESERVED, "n1", gpu_devices=(0, 3), attempt=2),
            Outcome("u2", OutcomeKind.BIND_FAILED, "n2", "binding rejected", ("GPUFit", "NodePorts"), (1,), 5),
        )
    ),
    BindRequest("u1", "ns/p", "default-scheduler", "n1", POD_JSON, (1, 2), fencing_token=9, attempt=4, reserved_at=1.5),
    NodeAssignment("u1", "ns/p", "n1", POD_JSON, (0,), attempt=3),
    PodDeletion("ns", "p"),
    ReservedPods("profile-1", ({"pod_uid": "u1", "node": "n1", "gpu_devices": [0, 3]},)),
    PodChange("u1", 4, "default-scheduler", "Succeeded"),
    NodeChange(3),
    NodeChanged("node.updated", "n2", 4),
    NodeChanges((NodeChanged("node.added", "n1", 1), NodeChanged("node.deleted", "n2"))),
    Rejection("kubus.pods.submit", 7),
    ClusterEvent("node.added", "n1", "n1", 1.0, "Registered", "ready", NodeChange(3)),
    ClusterEvent("nodes.changed", "b1", "", 1.5, data=NodeChanges((NodeChanged("node.updated", "n1", 4),))),
    BatchedPod("default/web-1", "uid-1", "n1", 2, "default-scheduler"),
    PodBatch((BatchedPod("default/web-1", "uid-1"), BatchedPod("default/web-2", "uid-2", "n2", 1))),
    ClusterEvent("pods.bound", "d1", "", 2.5, data=PodBatch((BatchedPod("default/web-1", "uid-1", "n1", 3),))),
    ClusterEvent(
        "pod.finished", "ns/p", "n1", 2.5, "Completed", "ran", PodChange("u1", 4, "default-scheduler", "Failed")
    ),
    ClusterEvent("pod.rejected", "invalid/7", "", 3.0, "Invalid", "bad", Rejection("kubus.pods.submit", 7)),
]
CLASSES = sorted({type(m) for m in EXAMPLES}, key=lambda c: c.__name__)


def _example_id(message: Any) -> str:
    kind = f"-{message.kind}" if isinstance(message, ClusterEvent) else ""
    return type(message).__name__ + kind


def test_every_message_of_the_module_is_fuzzed() -> None:
    declared = {
        obj
        for name in messages.__all__
        if isinstance(obj := getattr(messages, name), type) and dataclasses.is_dataclass(obj)
    }
    assert declared == set(CLASSES)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _well_typed(value: Any, hint: Any) -> bool:
    """Whether ``value`` is exactly what a field of type ``hint`` holds."""
    origin = typing.get_origin(hint)
    if hint is float:
        return type(value) is float
    if hint in (int, str, bytes, bool):
        return type(value) is hint
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return type(value) is hint
    if origin is tuple:
        (item, _) = typing.get_args(hint)
        return type(value) is tuple and all(_well_typed(v, item) for v in value)
    if origin in (typing.Union, types.UnionType):
        return any(_well_typed(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is dict:  # free-form: an object, whatever is in it
        return type(value) is dict
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return type(value) is hint and all(_well_typed(getattr(value, name), t) for name, t in _hints(hint).items())
    raise AssertionError(f"no check for {hint!r}")


def decoded_or_rejected(cls: type, data: bytes | str) -> Any:
    """``decode(cls, data)``: a well-typed ``cls`` that encodes back to itself, or None when it
    raised MessageError with a one-line reason naming the class. Anything else fails the test."""
    try:
        message = decode(cls, data)
    except MessageError as exc:
        reason = str(exc)
        assert reason.startswith(cls.__name__) and "\n" not in reason, reason
        return None
    assert _well_typed(message, cls), message
    if isinstance(message, ClusterEvent):
        assert type(message.data) is event_data_type(message.kind)
    assert decode(cls, encode(message)) == message
    return message


# -- JSON values ---------------------------------------------------------------------------------

FIELD_NAMES = sorted({f.name for cls in CLASSES for f in dataclasses.fields(cls)} | {"kind", "data", "extra", ""})
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from([str(k) for k in OutcomeKind] + ["pod.bound", "node.added", "pod.rejected", "POD.BOUND"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)


def to_json(value: Any) -> bytes:
    """JSON text of ``value`` as a careless or hostile client writes it: NaN, Infinity and
    integers of any size included (the codec would refuse to write those)."""
    return json.dumps(value, allow_nan=True).encode()


# -- (a), (b): garbage -----------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_random_bytes_are_a_message_or_a_message_error(data: bytes) -> None:
    for cls in CLASSES:
        decoded_or_rejected(cls, data)


@FUZZ
@given(text=st.text(max_size=200))
def test_random_text_is_a_message_or_a_message_error(text: str) -> None:
    for cls in CLASSES:
        decoded_or_rejected(cls, text)


@FUZZ
@given(value=JSON_VALUES)
def test_random_json_is_a_message_or_a_message_error(value: Any) -> None:
    data = to_json(value)
    for cls in CLASSES:
        decoded = decoded_or_rejected(cls, data)
        assert decoded is None or isinstance(value, dict)  # only an object is a message


@settings(FUZZ, max_examples=120)
@given(fields=st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=8))
def test_random_objects_of_message_fields_are_a_message_or_a_message_error(fields: dict[str, Any]) -> None:
    data = to_json(fields)
    for cls in CLASSES:
        decoded_or_rejected(cls, data)


# -- (c): a valid message with one thing wrong ---------------------------------------------------------


@pytest.mark.parametrize("message", EXAMPLES, ids=_example_id)
def test_the_valid_examples_round_trip(message: Any) -> None:
    data = encode(message)
    assert decode(type(message), data) == message
    assert encode(decode(type(message), data)) == data


Path = tuple[str | int, ...]


def _paths(value: Any, at: Path = ()) -> list[Path]:
    """Every place in a JSON value: the value itself, and every key and index below it."""
    out = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*at, i))
    return out


def _get(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def _class_at(cls: type, raw: Any, path: Path) -> tuple[Any, bool]:
    """The type the decoder expects at ``path`` of a valid message of ``cls`` and whether the
    field there is required (False below a list)."""
    hint: Any = cls
    required = True
    for i, step in enumerate(path):
        if isinstance(step, int):
            (hint, _) = typing.get_args(hint)
            required = False
            continue
        owner = hint
        if owner is ClusterEvent and step == "data":
            hint = event_data_type(_get(raw, path[:i])["kind"])
        else:
            hint = _hints(owner)[step]
        field = next(f for f in dataclasses.fields(owner) if f.name == step)
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        required = required or (owner is ClusterEvent and step == "data")  # required on the wire
    return hint, required


def _free_form(cls: type, raw: Any, path: Path) -> bool:
    """Whether ``path`` holds a free-form object (a ``dict`` field: its reader checks what is in
    it, the message layer only that it is an object)."""
    return typing.get_origin(_class_at(cls, raw, path)[0]) is dict


def _in_object_field(cls: type, raw: Any, path: Path) -> bool:
    """Whether ``path`` is inside a free-form object."""
    return any(_free_form(cls, raw, path[:i]) for i in range(1, len(path)))


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return type(value).__name__


def _accepts(hint: Any, value: Any) -> bool | None:
    """Whether a field of type ``hint`` must take ``value`` (True), must refuse it (False), or
    may do either as far as this simple look can tell (None)."""
    kind = _json_kind(value)
    if hint is float:
        if kind == "int":
            return True if abs(value) < 2**1000 else None  # near 1.8e308 it reads as infinity: refused
        return kind == "float"  # NaN and infinities are no JSON: refused before
    if hint is int:
        return kind == "int" and -(2**63) <= value < 2**64
    if hint in (str, bytes):
        return kind == "str"
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return kind == "str" and value in {m.value for m in hint}
    if typing.get_origin(hint) is tuple:
        return False if kind != "list" else None
    return False if kind != "dict" else None


DEEP = "\x00deep\x00"
"""A placeholder replaced by deeply nested lists once the message is JSON text."""

LONG = "x" * 200_000
WRONG_TYPES = [None, True, False, 0, -1, 1.5, -0.0, "", "x", [], {}, [[[]]], {"a": {"b": {}}}, [None], {"uid": 1}]
NUMBERS = [-1, -(2**31), -(2**63), -(2**63) - 1, -(2**64), 2**63, 2**64, 2**200, 1e308, -1e308, 0.5]
ENUM_ISH = ["", "Reserved", "RESERVED", " reserved", "reserved ", "pod.Bound", "pod.", "pod", "node.*", "pod.bound.x"]
ENUM_ISH += ["bind-failed", "unknown", "é", "\u0000"]


@st.composite
def mutations(draw: st.DrawFn, message: Any) -> tuple[str, Path, Any]:
    """One mutation of the JSON of ``message``: (what, where, the mutated JSON value)."""
    raw = codec.loads(encode(message))
    paths = [p for p in _paths(raw) if p and not _in_object_field(type(message), raw, p)]
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["drop", "unknown field", "other type", "random", "deep", "long", "number", "enum"]))
    parent, last = _get(raw, path[:-1]), path[-1]
    if op == "drop":
        del parent[last]
    elif op == "unknown field":
        here = _get(raw, path)
        target = here if isinstance(here, dict) and not _free_form(type(message), raw, path) else parent
        if not isinstance(target, dict):
            target = raw
        target[draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in FIELD_NAMES))] = draw(JSON_VALUES)
    else:
        parent[last] = {
            "other type": lambda: draw(st.sampled_from(WRONG_TYPES)),
            "random": lambda: draw(JSON_VALUES),
            "deep": lambda: DEEP,
            "long": lambda: LONG,
            "number": lambda: draw(st.sampled_from(NUMBERS)),
            "enum": lambda: draw(st.sampled_from(ENUM_ISH) | st.text(max_size=12)),
        }[op]()
    return op, path, raw


def _mutated_json(raw: Any, depth: int) -> bytes:
    return to_json(raw).replace(json.dumps(DEEP).encode(), b"[" * depth + b"]" * depth)


@pytest.mark.parametrize("message", EXAMPLES, ids=_example_id)
@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_a_valid_message_with_one_field_wrong(message: Any, data: st.DataObject) -> None:
    cls = type(message)
    op, path, raw = data.draw(mutations(message), label="mutation")
    depth = data.draw(st.sampled_from([2, 50, 1023, 1024, 5000]), label="depth")
    decoded = decoded_or_rejected(cls, _mutated_json(raw, depth))

    original = codec.loads(encode(message))
    hint, required = _class_at(cls, original, path)
    if op == "drop":
        if required:
            assert decoded is None, f"{path}: a required field dropped, yet decoded"
        return
    if op == "unknown field":
        assert decoded is None, f"{path}: an unknown field, yet decoded"
        return
    value = _get(raw, path)
    if value == DEEP:  # lists in lists: no field holds those
        expected: bool | None = False
    elif cls is ClusterEvent and path == ("kind",):  # a kind of kubus whose payload is the one there
        known = isinstance(value, str) and value in {str(k) for k in EventKind}
        expected = known and event_data_type(value) is event_data_type(message.kind)
    else:
        expected = _accepts(hint, value)
    if expected is not None:
        assert (decoded is not None) == expected, f"{path}: {value!r:.80} as {hint}"


def test_required_fields_are_required_and_unknown_ones_refused() -> None:
    for message in EXAMPLES:
        cls = type(message)
        raw = codec.loads(encode(message))
        for f in dataclasses.fields(cls):
            less = {k: v for k, v in raw.items() if k != f.name}
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required or (cls is ClusterEvent and f.name == "data"):
                with pytest.raises(MessageError, match=r"missing field|expected an object|kind: expected str"):
                    decode(cls, to_json(less))
            else:
                assert decode(cls, to_json(less)) == dataclasses.replace(message, **{f.name: f.default})
        with pytest.raises(MessageError, match="unknown field 'zz'"):
            decode(cls, to_json({**raw, "zz": 1}))


# -- kubus.pods.submit: the pod manifests the queue reads ----------------------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "labels": {"app": "web", "tier": "frontend"},
        "annotations": {"kubus.io/gpu-model": "H100", "note": "kept"},
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priority": 10,
        "preemptionPolicy": "PreemptLowerPriority",
        "nodeSelector": {"pool": "gpu"},
        "containers": [
            {
                "name": "web",
                "image": "registry.example.com/web:1.4.2",
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": 1},
                    "limits": {"memory": "1Gi", "nvidia.com/gpu": 1},
                },
                "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
            }
        ],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}],
        "tolerations": [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "zone", "operator": "Equal", "value": "a", "effect": "NoExecute", "tolerationSeconds": 30},
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}
                ],
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                            },
                        },
                    }
                ]
            },
        },
        "schedulingGates": [{"name": "example.com/wait"}],
    },
}
POD_BYTES = codec.dumps(POD)
POD_FIELDS = sorted({str(p[-1]) for p in _paths(POD) if p and isinstance(p[-1], str)})


def submitted_or_rejected(data: bytes) -> list[Submission]:
    """The queue's reading of a submit message: pods every later hop reads back the same, or
    Rejected with one line. Anything else fails the test."""
    try:
        subs = read_submission(data, source="kubus.pods.submit", max_manifest_bytes=MAX_MANIFEST)
    except Rejected as exc:
        assert "\n" not in str(exc) and exc.reason, exc
        return []
    assert subs
    for sub in subs:
        assert len(sub.manifest) <= MAX_MANIFEST
        again = wire_pod(sub.manifest, sub.pod.metadata.uid, sub.pod.key)  # what the cycle and binder read
        assert again == sub.pod
        PodInfo.of(again)  # what the cycle computes of it
    return subs


def manifests_or_error(data: bytes) -> None:
    """`parse_manifests` (the CLI and every hop's reader) raises only ManifestError."""
    try:
        parse_manifests(data, source="fuzz")
    except ManifestError as exc:
        assert str(exc)


def identified(data: bytes) -> None:
    """`identify` (the queue's best effort at naming a bad submit) never raises."""
    key, uid = identify(data)
    assert isinstance(key, str) and isinstance(uid, str) and (not key or "/" in key)


def test_the_valid_pod_is_accepted() -> None:
    [sub] = submitted_or_rejected(POD_BYTES)
    assert sub.pod.key == "shop/web-1"
    assert submitted_or_rejected(POD_BYTES.replace(b'"shop"', b'"other"'))[0].pod.key == "other/web-1"


YAML_WORDS = ["kind", "Pod", "List", "items", "metadata", "name", "spec", "containers", "1", "x", "---", "<<"]
YAML_ALPHABET = st.sampled_from([*"-:[]{},&*!|>'\"#%@`?\n \t", *YAML_WORDS])


@FUZZ
@given(data=st.binary(max_size=300) | st.lists(YAML_ALPHABET, max_size=60).map(lambda t: "".join(t).encode()))
def test_random_submits_are_pods_or_rejected(data: bytes) -> None:
    submitted_or_rejected(data)
    manifests_or_error(data)
    identified(data)


POD_OBJECTS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(POD_FIELDS) | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(FUZZ, max_examples=120)
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "apiVersion": st.sampled_from(["v1", "v2"]) | POD_OBJECTS,
            "kind": st.sampled_from(["Pod", "List", "PodList", "Node", "PodGroup", "Namespace"]) | POD_OBJECTS,
            "metadata": st.fixed_dictionaries({}, optional={"name": st.sampled_from(["a", "b-1"]) | POD_OBJECTS})
            | POD_OBJECTS,
            "spec": POD_OBJECTS,
            "items": st.lists(POD_OBJECTS, max_size=3) | POD_OBJECTS,
        },
    ),
    yaml=st.booleans(),
)
def test_random_objects_are_pods_or_rejected(doc: dict[str, Any], yaml: bool) -> None:
    data = to_json(doc)
    if yaml:  # the same object as YAML flow text (JSON is YAML): the general path reads it
        data = b"# yaml\n" + data
    submitted_or_rejected(data)
    manifests_or_error(data)
    identified(data)


@st.composite
def pod_mutations(draw: st.DrawFn) -> Any:
    doc = codec.loads(POD_BYTES)
    path = draw(st.sampled_from([p for p in _paths(doc) if p]))
    op = draw(st.sampled_from(["drop", "unknown field", "other type", "random", "deep", "long", "number", "enum"]))
    parent, last = _get(doc, path[:-1]), path[-1]
    if op == "drop":
        del parent[last]
    elif op == "unknown field":
        target = _get(doc, path)
        target = target if isinstance(target, dict) else parent if isinstance(parent, dict) else doc
        target[draw(st.text(min_size=1, max_size=12))] = draw(POD_OBJECTS)
    else:
        parent[last] = {
            "other type": lambda: draw(st.sampled_from(WRONG_TYPES)),
            "random": lambda: draw(POD_OBJECTS),
            "deep": lambda: DEEP,
            "long": lambda: LONG,
            "number": lambda: draw(st.sampled_from(NUMBERS)),
            "enum": lambda: draw(st.sampled_from(ENUM_ISH) | st.text(max_size=12)),
        }[op]()
    return doc


@FUZZ
@given(doc=pod_mutations(), depth=st.sampled_from([1, 100, 1023, 5000]), form=st.sampled_from(["json", "yaml", "list"]))
def test_a_valid_pod_with_one_field_wrong_is_a_pod_or_rejected(doc: Any, depth: int, form: str) -> None:
    if form == "list":
        doc = {"apiVersion": "v1", "kind": "PodList", "items": [doc]}
    data = _mutated_json(doc, depth)
    if form == "yaml":
        data = b"---\n" + data
    submitted_or_rejected(data)
    manifests_or_error(data)
    identified(data)


# -- found by the fuzzing above: kept as plain regressions ------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind": "List", "items": 5}',
        b'{"kind": "PodList", "items": true}',
        b"kind: List\nitems: 3\n",
        b'{"kind": ["Pod"], "metadata": {"name": "x"}}',
        b'{"kind": {"a": 1}}',
        b"kind: [1]\n",
        b'{"apiVersion": "v1", "kind": "List", "items": [{"kind": [1]}]}',
    ],
)
def test_odd_kinds_and_items_are_rejected(data: bytes) -> None:
    assert submitted_or_rejected(data) == []
    with pytest.raises(ManifestError):
        parse_manifests(data)
    identified(data)


def billion_laughs(levels: int, name: str = "lol") -> bytes:
    """A Pod whose ignored field is a YAML alias bomb: 10**levels strings from ~60 bytes a level."""
    lines = [b"kind: Pod", b"metadata: {name: %s}" % name.encode(), b"spec:", b"  containers: [{name: c}]",
             b"  x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]  # fmt: skip
    for i in range(1, levels + 1):
        lines.append(b"  x%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


def test_a_yaml_alias_bomb_is_rejected_before_it_is_expanded() -> None:
    data = billion_laughs(12)  # 10**12 strings if expanded: no memory holds it
    assert len(data) < 1000
    with pytest.raises(Rejected, match="excessive aliasing"):
        read_submission(data, source="kubus.pods.submit", max_manifest_bytes=MAX_MANIFEST)
    with pytest.raises(ManifestError, match="excessive aliasing"):
        parse_manifests(data)
    identified(data)


def test_alias_bombs_of_many_small_documents_are_rejected_together() -> None:
    assert len(submitted_or_rejected(billion_laughs(3))) == 1  # 10**3 strings: under the limit alone
    many = b"---\n".join(billion_laughs(3, f"lol-{i}") for i in range(20))  # 20 times that in one message
    with pytest.raises(Rejected, match="excessive aliasing"):
        read_submission(many, source="kubus.pods.submit", max_manifest_bytes=MAX_MANIFEST)


def test_yaml_anchors_of_ordinary_use_still_work() -> None:
    pod = b"""\
kind: Pod
metadata: {name: a, labels: &labels {app: web}}
spec:
  containers:
  - &c {name: c, resources: {requests: {cpu: 100m}}}
  - {<<: *c, name: d}
  nodeSelector: *labels
"""
    [sub] = submitted_or_rejected(pod)
    assert sub.pod.spec.node_selector == {"app": "web"}
    assert submitted_or_rejected(billion_laughs(2))  # 100 strings: fine
