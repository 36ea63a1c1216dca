"""Who may do what on the bus and in Redis: one `Role` per kind of kubus process, as data.

The table here is the only place permissions are spelled; `kubus.access.servers` renders it as a
nats-server ``authorization`` block and a Valkey/Redis ACL file, and docs/security.md shows it.
Least privilege, with the reason for each grant in docs/security.md:

- **queue**: owns pods (submits, deletions, requeues, the pop/done requests it answers) and the
  node lifecycle; publishes any event, and the assignment of a pod it binds itself (one naming its
  node) or whose bind it finishes.
- **cycle**: asks its queue for pods, reserves them in Redis, hands them to the binders
  (``kubus.bind.*``), tells the other profiles' cycles (``kubus.reserved.*``), preempts
  (``pod.deleted`` events of its victims); what becomes of a pod it reports to the queue.
- **binder**: binds what the cycles reserved, hands bound pods to node agents
  (``kubus.node.*.pods``), requeues what it could not bind.
- **gpu-agent**: an agent simulating many nodes (``kubus up``, the bench): the agent rights on
  every node.
- **node agent** (`node_agent_role`, one user per node): only its own node: its pods' subject
  (through a consumer filtered on it), its node's events, its node's Redis keys. It cannot publish
  a bind request, a submission or another node's event, and cannot write another node's record.
- **client**: ``kubus apply/get/delete/describe``: submits and deletes pods through the queue,
  stores cluster objects (namespaces, priority classes, PDBs, workloads, pod groups), reads the
  rest; follows pod events (``get pods -w``) through an ordered consumer it cannot turn into a durable one.
- **admin**: ``kubus up`` and the test fixtures: everything (creates the streams, wipes a test DB).

Every role may create the KUBUS_* streams (every service and the CLI run `ensure_streams` at start:
whichever comes first makes them, and creating one that exists as kubus wants it changes nothing);
only the control plane may update them (bring a drifted stream to kubus' spec). Consumers: each
role creates only its own, through the subject that names the consumer and its filter (nats-server
refuses a request whose name or filter is not the subject's), except the ordered consumers of
KUBUS_EVENTS (the queue's, `kubus get pods -w`), which go through the subject of ephemeral ones. No
role but admin deletes a consumer or a stream: ephemeral consumers go when their subscriber does
(the server's inactive threshold).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubus.bus.consumers import WATCHER_CONSUMER, agent_consumer
from kubus.bus.subjects import (
    APISERVER_DELETED,
    BIND_ALL,
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
    StreamSpec,
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


def _create_streams() -> tuple[str, ...]:
    """Create the KUBUS_* streams: what `ensure_streams` does first at start (a no-op for a stream
    that exists as kubus wants it)."""
    return tuple(f"{_API}.STREAM.CREATE.{name}" for name in _ALL_STREAMS)


def _manage_streams() -> tuple[str, ...]:
    """Create and update the KUBUS_* streams (`ensure_streams` brings a drifted stream to kubus' spec)."""
    return (*_create_streams(), *(f"{_API}.STREAM.UPDATE.{name}" for name in _ALL_STREAMS))


def _pull(stream: StreamSpec, durable: str = "*", filter_subject: str | None = None) -> tuple[str, ...]:
    """Create (or update) the durable pull consumer ``durable`` on ``stream``, filtered on
    ``filter_subject`` (default: the stream's subjects), fetch from it and ack its messages: what
    `ensure_pull_consumer` and `PullConsumer` send.

    Only the subject that names the consumer and its filter: nats-server refuses a request whose
    name, durable name or filter is not the subject's. Not the subject of ephemeral consumers
    (``CONSUMER.CREATE.<stream>``): a config named like an existing durable sent there updates that
    durable. Not the legacy ``CONSUMER.DURABLE.CREATE``: nats-py uses it only with servers older
    than 2.9."""
    filter_subject = filter_subject or stream.subjects[0]
    return (
        f"{_API}.CONSUMER.CREATE.{stream.name}.{durable}.{filter_subject}",
        f"{_API}.CONSUMER.MSG.NEXT.{stream.name}.{durable}",
        f"$JS.ACK.{stream.name}.{durable}.>",
    )


def _ordered(stream: StreamSpec) -> str:
    """Create an ephemeral consumer on ``stream`` (nats-py's ordered consumer, created again after a
    gap). nats-server refuses a durable name on this subject, but a request naming an existing
    consumer updates it (a durable's whole config, an ephemeral's filter): so it is granted only on
    KUBUS_EVENTS, where no role may make a durable (`_pull` is never granted on it) and the
    ephemeral consumers have names the server drew, which no role but admin can list. No delete:
    the server removes an ephemeral consumer once nobody listens on its delivery subject (its
    inactive threshold, 5 s by default)."""
    return f"{_API}.CONSUMER.CREATE.{stream.name}"


_QUEUE_POP, _QUEUE_DONE = f"{PREFIX}.queue.*.pop", f"{PREFIX}.queue.*.done"
_QUEUE_SERVING = f"{PREFIX}.queue.*.serving"


def _events(*kinds: EventKind) -> tuple[str, ...]:
    return tuple(f"{PREFIX}.events.{kind.value}.>" for kind in kinds)


# -- Redis key patterns --------------------------------------------------------------------------


_EVERY_KEY = ("*",)
_POD_KEYS = ("{pod:*}:*",)
_PHASE_INDEXES = ("{idx}:phase:*", "{idx}:pending:*", "{idx}:pod-keys", "{idx}:waiting:*", "{idx}:group:*")
_NODE_INDEXES = ("{idx}:nodes", "{idx}:heartbeats")
_REPLICATION_FENCE = ("{idx}:replication-fence",)
"""Written before a WAIT (`KubusRedis.confirm_replicated`) by the roles whose writes must survive a failover."""


def _agent(name: str, purpose: str, node: str | None) -> Role:
    """The agent rights on one node (``node``) or on every node (None: a simulator)."""
    if node is None:
        pods, node_keys, node_token = NODE_PODS_ALL, "{node:*}:*", "*"
    else:
        pods, node_keys, node_token = node_pods(node), "{node:" + escape(node) + "}:*", token(node)
    return Role(
        name=name,
        purpose=purpose,
        publish=(
            # Registration and heartbeats (a lost node comes back as node.updated).
            *(f"{PREFIX}.events.{kind.value}.{node_token}" for kind in (EventKind.NODE_ADDED, EventKind.NODE_UPDATED)),
            # Pod events carry the pod's name, not the node's: an agent may announce any pod's
            # start and end (the Redis scripts it runs only move pods reserved on its nodes).
            *_events(EventKind.POD_RUNNING, EventKind.POD_FINISHED),
            # Creating a stream that exists as kubus wants it changes nothing; an agent that starts
            # first makes them. Updating one (what a changed spec needs) is the control plane's.
            *_create_streams(),
            # Its consumer, by its name and on its node's subject alone.
            *_pull(NODES_STREAM, agent_consumer(node), pods),
        ),
        subscribe=_events(EventKind.POD_DELETED),
        redis_read=_EVERY_KEY,
        redis_write=(node_keys, *_POD_KEYS, *_PHASE_INDEXES, *_NODE_INDEXES),
    )


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

# Subscriptions to events are granted as a whole (``kubus.events.>``) to the roles that subscribe to
# some: an event tells nothing that Redis, which every role reads, does not; and a refused
# subscription fails in silence (a kind added in code would leave a table stale), where a refused
# publish fails the publisher.
ROLES: dict[str, Role] = {
    r.name: r
    for r in (
        Role(
            name="queue",
            purpose="the queue service: pods in, pods out to the cycles, the node lifecycle",
            publish=(
                *_manage_streams(),
                # Submissions, deletions and requeues: its durable consumer (`QueueOptions.durable`).
                *_pull(PODS_STREAM),
                # The events its plugins registered: an ordered consumer (delivered to its inbox).
                _ordered(EVENTS_STREAM),
                # Acceptances, rejections, node.lost and more: it owns pods and the node lifecycle.
                EVENTS,
                # The assignment of a pod it binds itself (spec.nodeName) or whose bind it finishes.
                NODE_PODS_ALL,
                # "I serve now", to the cycles (`queue_serving`).
                _QUEUE_SERVING,
            ),
            subscribe=(_QUEUE_POP, _QUEUE_DONE),
            redis_read=_EVERY_KEY,
            redis_write=_EVERY_KEY,
        ),
        Role(
            name="cycle",
            purpose="a profile's scheduling cycle: pops, filters, scores, reserves, preempts",
            publish=(
                *_manage_streams(),
                _QUEUE_POP,
                _QUEUE_DONE,
                BIND_ALL,
                RESERVED_ALL,
                # Its preemption victims (what a deletion announces).
                *_events(EventKind.POD_DELETED),
            ),
            subscribe=(EVENTS, RESERVED_ALL, _QUEUE_SERVING),
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
                # The bind requests: the durable consumer every replica shares (`BinderOptions.durable`).
                *_pull(BIND_STREAM),
                NODE_PODS_ALL,
                PODS_REQUEUE,
                # The pods it bound together (several an event), and those it gave back.
                *_events(EventKind.PODS_BOUND, EventKind.POD_UNRESERVED),
            ),
            # Cluster mode: the pods the apiserver deleted, a preemptor's victims among them.
            subscribe=(APISERVER_DELETED,),
            redis_read=_EVERY_KEY,
            redis_write=("{node:*}:*", *_POD_KEYS, *_PHASE_INDEXES, *_REPLICATION_FENCE),
        ),
        _agent("gpu-agent", "a gpu-agent simulating many nodes (kubus up, the bench)", None),
        Role(
            name="watcher",
            purpose="cluster mode's bridge to a kube-apiserver: its nodes, pods and objects into kubus",
            publish=(
                *_manage_streams(),
                # The apiserver's pending pods of kubus's profiles, and its deletions: the queue's;
                # the deletions said to the binders too, waiting on preemption victims.
                PODS_SUBMIT,
                PODS_DELETE,
                APISERVER_DELETED,
                # Its nodes' changes (several an event) and the placements, phases and ends of
                # pods the apiserver reports.
                *_events(EventKind.NODES_CHANGED),
                *_events(EventKind.POD_BOUND, EventKind.POD_RUNNING, EventKind.POD_FINISHED),
                # What it reports back to the apiserver: its own durable on KUBUS_EVENTS, by name
                # (several filters: the subject names no filter), and no other consumer there.
                f"{_API}.CONSUMER.CREATE.{EVENTS_STREAM.name}.{WATCHER_CONSUMER}",
                f"{_API}.CONSUMER.MSG.NEXT.{EVENTS_STREAM.name}.{WATCHER_CONSUMER}",
                f"$JS.ACK.{EVENTS_STREAM.name}.{WATCHER_CONSUMER}.>",
            ),
            subscribe=(),
            redis_read=_EVERY_KEY,
            redis_write=(
                "{node:*}:*",
                *_POD_KEYS,
                *_PHASE_INDEXES,
                *_NODE_INDEXES,
                "{idx}:namespaces*",
                "{idx}:priority-classes*",
                "{idx}:pdbs*",
                "{idx}:workloads*",
                "{idx}:pod-groups",
                "{pg:*}:*",
                *_REPLICATION_FENCE,
            ),
        ),
        Role(
            name="client",
            purpose="the kubus CLI: apply, get, delete, describe, watch",
            publish=(
                PODS_SUBMIT,
                PODS_DELETE,
                # What it publishes waits in them for services that have not started yet.
                *_create_streams(),
                # `get pods -w`: an ordered (ephemeral) consumer on the events stream; no delete.
                _ordered(EVENTS_STREAM),
            ),
            # The bench's and the demo's trackers (`get pods -w` is delivered to its inbox).
            subscribe=(EVENTS,),
            redis_read=_EVERY_KEY,
            redis_write=(
                "{idx}:namespaces*",
                "{idx}:priority-classes*",
                "{idx}:pdbs*",
                "{idx}:workloads*",
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
