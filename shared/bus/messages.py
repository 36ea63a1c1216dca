"""The messages services exchange on the bus: frozen, slotted dataclasses, JSON on the wire.

Every message is encoded with `encode` and read back with `decode(Type, data)`, which checks the
shape (an object, the right fields, the right types) and raises MessageError with a one-line
reason for anything else: garbage on a subject never crashes a consumer. Pod manifests travel as
the JSON of the pod object (`manifest`), so every hop can re-parse them with
`kubus.api.manifests.parse_manifests` and the same validation.

Flow (see `kubus.bus.subjects`):
    client  -> kubus.pods.submit        raw manifest bytes (YAML or JSON), not a message here
    client  -> kubus.pods.delete        PodDeletion
    cycle   -> kubus.queue.<p>.pop      PopRequest  -> PopReply(QueuedPod...)
    cycle   -> kubus.queue.<p>.done     Outcomes    -> empty reply (ack)
    cycle   -> kubus.bind.<p>           BindRequest (JetStream, msg id = uid)
    cycle   -> kubus.reserved.<p>       ReservedPods (to the other profiles' cycles)
    binder  -> kubus.pods.requeue       Outcomes (a failed bind hands the pod back)
    binder  -> kubus.node.<n>.pods      NodeAssignment (JetStream, msg id = uid)
    anyone  -> kubus.events.<kind>...   ClusterEvent
A request the responder refuses (not its message) gets an empty reply whose `ERROR_HEADER`
says why.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from kubus.api.attempts import NO_ATTEMPT, Attempt
from kubus.bus.subjects import POD_BATCHES, EventKind
from kubus.core import codec
from kubus.core.codec import JSONObject, JSONValue
from kubus.core.errors import KubusError

T = TypeVar("T")


ERROR_HEADER = "Kubus-Error"
"""The header of a reply that refuses a request: its value says why, in one line."""

FENCED = "fenced"
"""How an `ERROR_HEADER` begins when the queue refused a pop whose fencing token is not the
lease's in Redis (``fenced: <why>``): the asker does not lead, whatever it believes."""


class MessageError(KubusError, ValueError):
    """A message that is not what its subject carries; str() says what is wrong in one line."""


class OutcomeKind(StrEnum):
    RESERVED = "reserved"
    """Reserved on `node` in Redis and handed to the binders."""
    UNSCHEDULABLE = "unschedulable"
    """No node fits now; `message` is kube's summary, `plugins` the rejecting plugins."""
    ERROR = "error"
    """Scheduling failed for a reason other than fit (a plugin error, a Redis failure)."""
    BIND_FAILED = "bind_failed"
    """The binder could not bind; the reservation was released."""
    REFUSED = "refused"
    """The pod was placed, but Redis refused its reservation twice in the batch (another
    profile's cycle reserved the room first, or the node went away: the cycle's table was
    stale); `node` and `message` say where and why. The pod is still Pending, its attempt not
    counted there: nothing about the pod made it fail, so the queue retries it at once, a few
    attempts in a row (`SchedulingQueue.retry_refused`), then as an unschedulable one."""


@dataclass(frozen=True, slots=True)
class QueuedPod:
    """A pod the queue hands to its profile's cycle."""

    uid: str
    key: str
    """namespace/name"""
    manifest: bytes
    """The pod as JSON (what `parse_manifests` reads)."""
    attempts: int = 0
    """Scheduling attempts before this one."""


@dataclass(frozen=True, slots=True)
class PopRequest:
    max_pods: int = 256
    """Hand out at most this many pods."""
    wait_ms: int = 200
    """Wait up to this long for a first pod when the activeQ is empty."""
    holder: str = ""
    """The cycle replica asking (its lease holder id), for logs and in-flight tracking."""
    fencing_token: int = 0
    """The asker's lease token: the queue refuses a stale holder once it saw a newer token."""


@dataclass(frozen=True, slots=True)
class PopReply:
    pods: tuple[QueuedPod, ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one popped pod."""

    uid: str
    kind: OutcomeKind
    node: str = ""
    message: str = ""
    plugins: tuple[str, ...] = ()
    """The plugins that rejected the pod (for QueueingHints: which events can help it)."""
    gpu_devices: tuple[int, ...] = ()
    attempt: Attempt = NO_ATTEMPT
    """The attempt the outcome is about (see BindRequest.attempt), when there was one; 0 when
    none or unknown. A pod handed back on kubus.pods.requeue with it goes back to Pending only if
    it is still at that attempt (compare-and-set), so a stale hand-back undoes nothing newer."""


@dataclass(frozen=True, slots=True)
class Outcomes:
    outcomes: tuple[Outcome, ...] = ()


@dataclass(frozen=True, slots=True)
class BindRequest:
    """A pod reserved on a node, for the binders of its profile."""

    uid: str
    key: str
    profile: str
    node: str
    manifest: bytes
    gpu_devices: tuple[int, ...] = ()
    fencing_token: int = 0
    """The reserving cycle's lease token."""
    attempt: Attempt = NO_ATTEMPT
    """The pod record's version after its Pending -> Reserved transition (see docs/services.md):
    every later step is conditional on it."""
    reserved_at: float = 0.0
    """Seconds since the epoch, for submit->bound latency."""
    victims: tuple[str, ...] = ()
    """The pods this pod's preemption evicted, as ``namespace/name/uid``: in cluster mode the
    binder binds it once they are gone from the apiserver (their kubelet stopped them), as
    kube-scheduler binds a nominated preemptor only then."""


@dataclass(frozen=True, slots=True)
class ReservedPods:
    """The reservations a cycle is handing to the binders, for the other profiles' cycles: they
    take them into their node tables before their next batch instead of learning them at
    ``pod.bound``, a bind later, so fewer of their reservations collide with these in Redis. A
    hint: a lost or late one costs a refused reservation, never an overcommit."""

    profile: str
    reservations: tuple[JSONObject, ...] = ()
    """Each as `kubus.store.Reservation.to_json` writes it (what Redis holds)."""


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """A pod bound to a node, for that node's agent."""

    uid: str
    key: str
    node: str
    manifest: bytes
    gpu_devices: tuple[int, ...] = ()
    attempt: Attempt = NO_ATTEMPT


@dataclass(frozen=True, slots=True)
class PodDeletion:
    namespace: str
    name: str
    uid: str = ""
    """The pod of that uid only (cluster mode: a name can be reused by a new pod at once); "":
    the newest pod of that name."""


@dataclass(frozen=True, slots=True)
class PodChange:
    """What a ``pod.*`` event is about, beyond its name."""

    uid: str
    attempt: Attempt = NO_ATTEMPT
    """The scheduling attempt (see BindRequest.attempt) when there is one, else 0."""
    profile: str = ""
    """The pod's scheduler profile, when the announcer knows it."""
    phase: str = ""
    """The phase a ``pod.finished`` event reports (Succeeded, Failed), else empty."""


@dataclass(frozen=True, slots=True)
class NodeChange:
    """What a ``node.*`` event is about, beyond the node's name."""

    generation: int = 0
    """The node record's generation the event reports (see NodeRecord.generation)."""


NODE_KINDS = frozenset(k.value for k in EventKind if k.value.startswith("node."))
"""The ``node.*`` event kinds, one node each (`EventKind` values)."""


@dataclass(frozen=True, slots=True)
class NodeChanged:
    """One node's change in a ``nodes.changed`` event: what its own ``node.*`` event would say."""

    kind: str
    """A ``node.*`` `EventKind` value (`NODE_KINDS`; a consumer drops, and says, any other)."""
    name: str
    generation: int = 0
    """As `NodeChange.generation`."""


@dataclass(frozen=True, slots=True)
class NodeChanges:
    """What a ``nodes.changed`` event is about: several nodes' changes, in the order they were
    made, each as its own ``node.*`` event would say it. A watcher announces what a list of
    thousands of nodes changed in a few messages, not one a node (each consumer would read
    every one of them)."""

    changes: tuple[NodeChanged, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchedPod:
    """One pod of a ``pods.*`` event: what its own ``pod.*`` event would say of it."""

    name: str
    """The pod's namespace/name."""
    uid: str
    node: str = ""
    attempt: Attempt = NO_ATTEMPT
    """As `PodChange.attempt`."""
    profile: str = ""


@dataclass(frozen=True, slots=True)
class PodBatch:
    """What a ``pods.*`` event is about: several pods, each as its own ``pod.*`` event of the
    kind `kubus.bus.subjects.POD_BATCHES` names would say it (`expand` gives those events). A
    binder announces the pods it bound together in one message, not one a pod (every consumer
    would read each of them)."""

    pods: tuple[BatchedPod, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejection:
    """What a ``pod.rejected`` event is about: the message that was bad input."""

    subject: str = ""
    seq: int = 0
    """Its stream sequence (0 when unknown)."""
    uid: str = ""
    """The pod's uid when the message could be read that far (cluster mode reports the
    rejection on that pod), else ""."""


EventData = PodChange | NodeChange | NodeChanges | PodBatch | Rejection
"""The payload of a ClusterEvent: one dataclass per resource of `EventKind`."""


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """Something changed in the cluster. `kind` is a `kubus.bus.subjects.EventKind` value; `data`
    is the payload its resource carries (`event_data_type`)."""

    kind: str
    name: str
    """Node name, or namespace/name of a pod."""
    node: str = ""
    at: float = 0.0
    reason: str = ""
    message: str = ""
    data: EventData | None = None
    """Required on the wire: `decode` reads it as the payload type of `kind` (`event_data_type`)."""


def event_data_type(kind: str) -> type[EventData]:
    """The payload dataclass of events of ``kind`` (an `EventKind` value). Raises MessageError
    for a kind kubus does not know."""
    payload = _EVENT_DATA.get(kind)
    if payload is None:
        raise MessageError(f"ClusterEvent.kind: unknown kind {kind!r}")
    return payload


def _payload_of(kind: EventKind) -> type[EventData]:
    if kind is EventKind.POD_REJECTED:
        return Rejection
    if kind is EventKind.NODES_CHANGED:
        return NodeChanges
    if kind.value in POD_BATCHES:
        return PodBatch
    return PodChange if kind.value.startswith("pod.") else NodeChange


_EVENT_DATA: dict[str, type[EventData]] = {k.value: _payload_of(k) for k in EventKind}
"""`event_data_type`'s answers, by kind (looking the kind up as an EventKind showed in profiles)."""


def expand(event: ClusterEvent) -> list[ClusterEvent]:
    """The events ``event`` stands for: a ``pods.*`` event's pods, each as its own ``pod.*``
    event (at the batch's time), in order; any other event, itself."""
    batch = event.data
    if not isinstance(batch, PodBatch):
        return [event]
    kind = POD_BATCHES[event.kind]
    return [
        ClusterEvent(kind, p.name, p.node, event.at, data=PodChange(p.uid, p.attempt, p.profile)) for p in batch.pods
    ]


def encode(message: object) -> bytes:
    """JSON bytes of a message dataclass (bytes fields as UTF-8 text)."""
    return codec.dumps(message, default=_bytes_as_text)


def _bytes_as_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError(f"{type(value).__name__} is not a message field type")


def decode(cls: type[T], data: bytes | str) -> T:
    """Read a message of type `cls`. Raises MessageError for malformed data of any kind."""
    try:
        raw = codec.loads(data)
    except (codec.DecodeError, UnicodeDecodeError) as e:
        raise MessageError(f"{cls.__name__}: not JSON: {e}") from None
    return _build(cls, raw, cls.__name__)


_Convert = Callable[[JSONValue, str, "str | int"], object]
"""``convert(value, where, name)``: the value of field (or list index) ``name`` of the object at
``where``. The path is formatted only for an error (`_at`): messages are decoded at every hop."""
_Field = tuple[str, _Convert, bool, "type | None"]
"""(name, converter, required, the type a JSON value of the field already is when it needs no
conversion: str, int, bool or float; None for the others)."""
_SCHEMAS: dict[type, tuple[frozenset[str], tuple[_Field, ...]]] = {}
"""Per message class: its field names and its fields, built once: messages are decoded at
every hop, and reading type hints each time showed in profiles. ClusterEvent's ``data`` is left
out of its fields: `_build_event` reads it as the payload of the event's kind."""
_EXACT = (str, int, bool, float)


def _schema(cls: type) -> tuple[frozenset[str], tuple[_Field, ...]]:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        hints = typing.get_type_hints(cls)
        fields = tuple(
            (
                f.name,
                _converter(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                hints[f.name] if hints[f.name] in _EXACT else None,
            )
            for f in dataclasses.fields(cls)
            if not (cls is ClusterEvent and f.name == "data")
        )
        schema = _SCHEMAS[cls] = (frozenset(f.name for f in dataclasses.fields(cls)), fields)
    return schema


def _build(cls: type[T], raw: JSONValue, where: str) -> T:
    if not isinstance(raw, dict):
        raise MessageError(f"{where}: expected an object, got {type(raw).__name__}")
    if cls is ClusterEvent:
        return _build_event(raw, where)  # type: ignore[return-value]
    return cls(**_values(cls, raw, where))


def _values(cls: type, raw: JSONObject, where: str) -> JSONObject:
    """The checked field values of ``cls`` in ``raw``."""
    names, fields = _schema(cls)
    if not names.issuperset(raw):
        raise MessageError(f"{where}: unknown field {sorted(set(raw) - names)[0]!r}")
    values = {}
    for name, convert, required, exact in fields:
        if name not in raw:
            if required:
                raise MessageError(f"{where}: missing field {name!r}")
            continue
        value = raw[name]
        # `type(...) is`, not isinstance: a bool is not an int here, as `plain` says
        values[name] = value if type(value) is exact else convert(value, where, name)
    return values


def _at(where: str, name: str | int) -> str:
    """The path of field or list index ``name`` of the object at ``where``."""
    return f"{where}[{name}]" if isinstance(name, int) else f"{where}.{name}"


def _build_event(raw: JSONObject, where: str) -> ClusterEvent:
    """A ClusterEvent: the envelope as any message, its data as the payload of its kind."""
    kind, data = raw.get("kind"), raw.get("data")
    if not isinstance(kind, str):
        raise MessageError(f"{where}.kind: expected str")
    payload = event_data_type(kind)
    if not isinstance(data, dict):
        raise MessageError(f"{where}.data: expected an object ({payload.__name__})")
    return ClusterEvent(**_values(ClusterEvent, raw, where), data=_build(payload, data, where + ".data"))


# Any: a field's type hint, as typing.get_type_hints gives it (typed Any there).
def _converter(hint: Any) -> _Convert:
    """The function that checks and converts a JSON value to ``hint`` (MessageError if it can't)."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return lambda v, where, name: _build(hint, v, _at(where, name))  # type: ignore[arg-type]
    if isinstance(hint, type) and issubclass(hint, StrEnum):

        def enum(v: JSONValue, where: str, name: str | int) -> object:
            try:
                return hint(v)
            except ValueError:
                raise MessageError(f"{_at(where, name)}: unknown value {v!r}") from None

        return enum
    if hint is bytes:

        def text_bytes(v: JSONValue, where: str, name: str | int) -> bytes:
            if not isinstance(v, str):
                raise MessageError(f"{_at(where, name)}: expected a string")
            return v.encode("utf-8")

        return text_bytes
    if hint is float:

        def number(v: JSONValue, where: str, name: str | int) -> float:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise MessageError(f"{_at(where, name)}: expected a number")
            return float(v)

        return number
    if hint in (int, str, bool):

        def plain(v: JSONValue, where: str, name: str | int) -> JSONValue:
            if not isinstance(v, hint) or (hint is int and isinstance(v, bool)):
                raise MessageError(f"{_at(where, name)}: expected {hint.__name__}")
            return v

        return plain
    if origin is tuple:
        item = _converter(typing.get_args(hint)[0])

        def items(v: JSONValue, where: str, name: str | int) -> tuple[object, ...]:
            if not isinstance(v, list):
                raise MessageError(f"{_at(where, name)}: expected a list")
            path = _at(where, name)
            return tuple(item(x, path, i) for i, x in enumerate(v))

        return items
    if origin is dict or hint is dict:

        def mapping(v: JSONValue, where: str, name: str | int) -> JSONObject:
            if not isinstance(v, dict):
                raise MessageError(f"{_at(where, name)}: expected an object")
            return v

        return mapping

    def unsupported(v: JSONValue, where: str, name: str | int) -> object:  # no optional fields on the wire
        raise MessageError(f"{_at(where, name)}: unsupported type {hint}")

    return unsupported


__all__ = [
    "ERROR_HEADER",
    "FENCED",
    "NODE_KINDS",
    "BatchedPod",
    "BindRequest",
    "ClusterEvent",
    "EventData",
    "MessageError",
    "NodeAssignment",
    "NodeChange",
    "NodeChanged",
    "NodeChanges",
    "Outcome",
    "OutcomeKind",
    "Outcomes",
    "PodBatch",
    "PodChange",
    "PodDeletion",
    "PopReply",
    "PopRequest",
    "QueuedPod",
    "Rejection",
    "ReservedPods",
    "decode",
    "encode",
    "event_data_type",
    "expand",
]
