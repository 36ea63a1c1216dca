"""Who may do what on the bus and in Redis: one `Role` per kind of kubus process, as data.

The table here is the only place permissions are spelled; `kubus.access.servers` renders it as a
nats-server ``authorization`` block and a Valkey/Redis ACL file, and docs/security.md shows it.
Least privilege, with the reason for each grant in docs/security.md:

- **queue**: owns pods (submits, deletions, requeues, the pop/done requests it answers) and the
  node lifecycle; publishes any event.
- **cycle**: asks its queue for pods, reserves them in Redis, hands them to the binders
  (``kubus.bind.*``), preempts (``pod.deleted`` events of its victims, requeues).
- **binder**: binds what the cycles reserved, hands bound pods to node agents
  (``kubus.node.*.pods``), requeues what it could not bind.
- **gpu-agent**: an agent simulating many nodes (``kubus up``, the bench): the agent rights on
  every node.
- **node agent** (`node_agent_role`, one user per node): only its own node: its pods' subject
  (through a consumer filtered on it), its node's events, its node's Redis keys. It cannot publish
  a bind request, a submission or another node's event, and cannot write another node's record.
- **client**: ``kubus apply/get/delete/describe``: submits and deletes pods through the queue,
  stores cluster objects (nodes, namespaces, priority classes, PDBs, pod groups), reads the rest.
- **admin**: ``kubus up`` and the test fixtures: everything (creates the streams, wipes a test DB).

Control-plane roles may create and update the KUBUS_* streams (any of them may start first);
agents and clients may not: an agent waits for the streams the control plane made.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubus.bus.consumers import agent_consumer
from kubus.bus.subjects import (
    BIND_STREAM,
    EVENTS,
    EVENTS_STREAM,
    NODE_PODS_ALL,
    NODES_STREAM,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    PREFIX,
    RESERVED_ALL,
    STREAMS,
    EventKind,
    node_pods,
    token,
)
from kubus.store.keys import DEFAULT_PREFIX, escape

__all__ = [
    "ADMIN",
    "ROLES",
    "Role",
    "inbox_prefix",
    "node_agent_role",
    "role",
]


def inbox_prefix(user: str) -> str:
    """The reply-subject prefix of ``user``'s connections (``_INBOX_<user>``): each user may
    subscribe only to its own inboxes, so no other user reads or forges its replies."""
    return "_INBOX_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in user)


@dataclass(frozen=True, slots=True)
class Role:
    """What one kind of kubus process may do. Subjects are NATS subjects (wildcards allowed);
    key patterns are Redis glob patterns under the key prefix."""

    name: str
    """The user name of the role (one user per role; per node for node agents)."""
    purpose: str
    """One line: who connects as this role."""
    publish: tuple[str, ...]
    """Subjects the role may publish to (JetStream API subjects included). Replies to requests
    it received are allowed besides (``allow_responses``); its own inbox too."""
    subscribe: tuple[str, ...]
    """Subjects the role may subscribe to (its own inbox is added)."""
    redis_read: tuple[str, ...]
    """Key patterns the role may read."""
    redis_write: tuple[str, ...]
    """Key patterns the role may write (scripts run with the caller's rights, key by key)."""
    admin: bool = False
    """Everything on both servers (stream and database administration included)."""

    @property
    def inbox(self) -> str:
        """This role's reply-subject prefix (`inbox_prefix`)."""
        return inbox_prefix(self.name)


# -- JetStream API subjects ----------------------------------------------------------------------

_API = "$JS.API"
_ALL_STREAMS = tuple(s.name for s in STREAMS)


def _manage_streams() -> tuple[str, ...]:
    """Create, update and read the KUBUS_* streams (what `ensure_streams` does at start)."""
    return (
        f"{_API}.INFO",
        *(f"{_API}.STREAM.{verb}.{name}" for name in _ALL_STREAMS for verb in ("CREATE", "UPDATE", "INFO")),
    )


def _consume(stream: str, durable: str = "*") -> tuple[str, ...]:
    """Create/read a durable consumer on ``stream``, pull from it and ack its messages."""
    return (
        f"{_API}.STREAM.INFO.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}",
        f"{_API}.CONSUMER.CREATE.{stream}.{durable}",
        f"{_API}.CONSUMER.CREATE.{stream}.{durable}.>",
        f"{_API}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
        f"{_API}.CONSUMER.INFO.{stream}.{durable}",
        f"{_API}.CONSUMER.MSG.NEXT.{stream}.{durable}",
        f"$JS.ACK.{stream}.{durable}.>",
    )


def _events(*kinds: EventKind) -> tuple[str, ...]:
    return tuple(f"{PREFIX}.events.{kind.value}.>" for kind in kinds)


# -- Redis key patterns --------------------------------------------------------------------------


_EVERY_KEY = ("*",)
_POD_KEYS = ("{pod:*}:*",)
_PHASE_INDEXES = ("{idx}:phase:*", "{idx}:pending:*", "{idx}:pod-keys", "{idx}:waiting:*", "{idx}:group:*")
_NODE_INDEXES = ("{idx}:nodes", "{idx}:heartbeats")


def _agent(name: str, purpose: str, node: str | None) -> Role:
    """The agent rights on one node (``node``) or on every node (None: a simulator)."""
    if node is None:
        pods, node_keys, node_token = NODE_PODS_ALL, "{node:*}:*", "*"
    else:
        pods, node_keys, node_token = node_pods(node), "{node:" + escape(node) + "}:*", token(node)
    durable = agent_consumer(node)
    return Role(
        name=name,
        purpose=purpose,
        publish=(
            *(f"{PREFIX}.events.{kind.value}.{node_token}" for kind in (
                EventKind.NODE_ADDED, EventKind.NODE_UPDATED, EventKind.NODE_DELETED)),
            # Pod events carry the pod's name, not the node's: an agent may announce any pod's
            # start and end (the Redis scripts it runs only move pods reserved on its nodes).
            *_events(EventKind.POD_RUNNING, EventKind.POD_FINISHED, EventKind.POD_REJECTED),
            # Creating a stream that exists as kubus wants it changes nothing; an agent that starts
            # first makes them. Updating one (what a changed spec needs) is the control plane's.
            *(f"{_API}.STREAM.CREATE.{name}" for name in _ALL_STREAMS),
            f"{_API}.STREAM.INFO.{NODES_STREAM.name}",
            f"{_API}.CONSUMER.CREATE.{NODES_STREAM.name}.{durable}.{pods}",
            f"{_API}.CONSUMER.INFO.{NODES_STREAM.name}.{durable}",
            f"{_API}.CONSUMER.MSG.NEXT.{NODES_STREAM.name}.{durable}",
            f"$JS.ACK.{NODES_STREAM.name}.{durable}.>",
        ),
        subscribe=_events(EventKind.POD_DELETED),
        redis_read=_EVERY_KEY,
        redis_write=(node_keys, *_POD_KEYS, *_PHASE_INDEXES, *_NODE_INDEXES),
    )  # fmt: skip


def node_agent_role(node: str) -> Role:
    """The rights of the agent of node ``node`` (user ``agent-<node>``): its node only."""
    return _agent(f"agent-{node}", f"the agent of node {node}", node)


ADMIN = Role(
    name="admin",
    purpose="kubus up and the test fixtures: every subject, every key and command",
    publish=(">",),
    subscribe=(">",),
    redis_read=_EVERY_KEY,
    redis_write=_EVERY_KEY,
    admin=True,
)

ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        Role(
            name="queue",
            purpose="the queue service: pods in, pods out to the cycles, the node lifecycle",
            publish=(
                *_manage_streams(),
                *_consume(PODS_STREAM.name),
                *_consume(EVENTS_STREAM.name),
                EVENTS,
            ),
            subscribe=(f"{PREFIX}.queue.*.pop", f"{PREFIX}.queue.*.done", EVENTS),
            redis_read=_EVERY_KEY,
            redis_write=_EVERY_KEY,
        ),
        Role(
            name="cycle",
            purpose="a profile's scheduling cycle: pops, filters, scores, reserves, preempts",
            publish=(
                *_manage_streams(),
                f"{PREFIX}.queue.*.pop",
                f"{PREFIX}.queue.*.done",
                f"{PREFIX}.bind.*",
                RESERVED_ALL,
                PODS_REQUEUE,
                *_events(EventKind.POD_DELETED, EventKind.POD_UNRESERVED, EventKind.POD_UNSCHEDULABLE),
            ),
            subscribe=(EVENTS, RESERVED_ALL),
            redis_read=_EVERY_KEY,
            # Node records among them: the scripts that reserve read them, and a key a script is
            # given needs read-write rights even when the script only reads it.
            redis_write=("{node:*}:*", *_POD_KEYS, *_PHASE_INDEXES, "{lease:*}:*"),
        ),
        Role(
            name="binder",
            purpose="a binder: waits on Permit, binds, hands pods to their node's agent",
            publish=(
                *_manage_streams(),
                *_consume(BIND_STREAM.name),
                f"{PREFIX}.node.*.pods",
                PODS_REQUEUE,
                *_events(EventKind.POD_BOUND, EventKind.POD_UNRESERVED),
            ),
            subscribe=(EVENTS,),
            redis_read=_EVERY_KEY,
            redis_write=("{node:*}:*", *_POD_KEYS, *_PHASE_INDEXES),
        ),
        _agent("gpu-agent", "a gpu-agent simulating many nodes (kubus up, the bench)", None),
        Role(
            name="client",
            purpose="the kubus CLI: apply, get, delete, describe, watch",
            publish=(
                PODS_SUBMIT,
                PODS_DELETE,
                *(f"{_API}.STREAM.CREATE.{name}" for name in _ALL_STREAMS),
                # `get pods -w`: an ordered (ephemeral) consumer on the events stream.
                f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}",
                f"{_API}.CONSUMER.DELETE.{EVENTS_STREAM.name}.*",
            ),
            subscribe=(EVENTS,),
            redis_read=_EVERY_KEY,
            redis_write=(
                "{idx}:namespaces*",
                "{idx}:priority-classes*",
                "{idx}:pdbs*",
                "{idx}:pod-groups",
                "{pg:*}:*",
            ),
        ),
        ADMIN,
    )
}
"""Every fixed role by name (node agents are made per node by `node_agent_role`)."""


def role(name: str) -> Role:
    """The role ``name`` (a key of `ROLES`, or ``agent-<node>``). Raises KeyError for another."""
    if name in ROLES:
        return ROLES[name]
    if name.startswith("agent-") and len(name) > len("agent-"):
        return node_agent_role(name.removeprefix("agent-"))
    raise KeyError(f"unknown role {name!r} (known: {', '.join(ROLES)}, agent-<node>)")


def redis_patterns(patterns: tuple[str, ...], prefix: str = DEFAULT_PREFIX) -> tuple[str, ...]:
    """``patterns`` under ``prefix`` (``kubus:{node:*}:usage``)."""
    return tuple(f"{prefix}:{p}" for p in patterns)
