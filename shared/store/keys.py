"""The Redis key layout of kubus: one function per key, and the one place key names are spelled.

Every key starts with a prefix (default ``kubus``) so several clusters can share one Redis.
Keys carry a *hash tag* (the part in braces) naming what they belong to; kubus runs on one
Redis (Redis Cluster is not supported: its scripts write a pod's and a node's keys together):

Per node ``N`` (tag ``{node:N}``)::

    <p>:{node:N}:info          hash  the node as scheduling reads it (written by put_node)
                                      record      JSON of the NodeRecord's static fields
                                      manifest    the node's manifest bytes, when given
                                      a:<res>     allocatable of resource <res> (integer)
                                      gpus        number of GPU devices
                                      g:<i>:mem   total memory of device i, bytes
                                      g:<i>:ok    1 when device i is healthy, else 0
                                      g:<i>:model device i's model (RESERVE's new pick)
                                      generation  bumped by every put_node
                                      heartbeat   last heartbeat, seconds since the epoch
                                      unreachable 1 when the node lifecycle marked it lost
                                      registered  when put_node first stored the node, seconds
                                                  since the epoch (later puts keep it)
    <p>:{node:N}:usage         hash  what the node's reservations hold (written by scripts only)
                                      r:<res>     sum of the reservations' requests of <res>
                                      pods        number of reservations
                                      g:<i>:used  GPU memory taken on device i (whole = all of it)
                                      g:<i>:pods  reservations holding device i
                                      p:<proto>:<port>:<ip>, p:<proto>:<port>  host ports in use
    <p>:{node:N}:reservations  hash  pod uid -> Reservation JSON (immutable once written)
    <p>:{node:N}:bound         set   pod uids whose reservation is bound (mark_bound)
    <p>:{node:N}:fences        hash  profile -> highest fencing token a reserve carried here

Per pod ``U`` (its uid; tag ``{pod:U}``)::

    <p>:{pod:U}:record         hash  the PodRecord, one field per attribute (see records.py)
    <p>:{pod:U}:events         list  PodEvent JSON, oldest first, capped
    <p>:{pod:U}:permit         hash  the pod waiting on Permit (PermitStore): attempt, node,
                                      profile, deadline, p:<plugin> per plugin still waited on,
                                      rejected (the message) once a plugin rejected it

Per pod group ``G`` (``namespace/name``; tag ``{pg:G}``)::

    <p>:{pg:G}:record          hash  the PodGroup (written by put_pod_group)
                                      record      JSON of the PodGroup's fields
                                      manifest    the group's manifest bytes, when given

Per lease ``L`` (tag ``{lease:L}``)::

    <p>:{lease:L}:holder       hash  holder, token; expires (PEXPIRE) when not renewed
    <p>:{lease:L}:fence        string the fencing token counter (INCR), never expires

Indexes (tag ``{idx}``, one slot of their own)::

    <p>:{idx}:nodes            set   names of all nodes
    <p>:{idx}:heartbeats       zset  node name -> its last heartbeat (HEARTBEAT adds, DELETE_NODE
                                      removes): the node lifecycle reads only the silent ones
    <p>:{idx}:phase:<Phase>    set   pod uids per phase (Pending, Reserved, ... Deleted)
    <p>:{idx}:pending:<prof>   set   uids of Pending pods of one profile (schedulerName)
    <p>:{idx}:pod-keys         hash  "namespace/name" -> uid of the newest pod with that key
    <p>:{idx}:waiting:<prof>   set   uids of pods of one profile waiting on Permit
    <p>:{idx}:pod-groups       set   "namespace/name" of every PodGroup (put_pod_group adds)
    <p>:{idx}:group:<G>        set   uids of the pods labeled into group G (the queue adds them
                                      when it stores the pods, removes them when they are deleted)

Objects `kubus apply` stores whole, one hash per kind (tag ``{idx}``; see kubus.store.objects)::

    <p>:{idx}:namespaces       hash  name -> Namespace JSON
    <p>:{idx}:priority-classes hash  name -> PriorityClass JSON
    <p>:{idx}:pdbs             hash  "namespace/name" -> PodDisruptionBudget JSON
    <p>:{idx}:workloads        hash  "Kind/namespace/name" -> Service, ReplicationController,
                                      ReplicaSet or StatefulSet JSON (default spreading's)
    <p>:{idx}:<kind>:version   string bumped (INCR) by every change of that hash: readers that
                                      cache a kind read it again only when this moved

Replication (tag ``{idx}``)::

    <p>:{idx}:replication-fence string INCR'd before a WAIT (`KubusRedis.confirm_replicated`):
                                      a write on the WAITing connection, so WAIT proves that
                                      every earlier write of the process reached the replicas

The scripts update the indexes atomically with the records, the index keys passed as KEYS too
(`ClusterState.repair_indexes` rebuilds them from the records, which are the truth).

Names are escaped: every character outside ``[A-Za-z0-9._~-]`` is percent-encoded (UTF-8), so
any node, pod, profile or lease name gives a distinct key and can never open or close a hash
tag or fake a ``:`` separator.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

DEFAULT_PREFIX = "kubus"

PHASES = ("Pending", "Reserved", "Bound", "Running", "Succeeded", "Failed", "Deleted")
"""Pod phases in the order the per-phase index keys are passed to scripts (see PodPhase)."""


_SAFE = re.compile(r"[A-Za-z0-9._~-]*")


def escape(name: str) -> str:
    """`name` with every character outside [A-Za-z0-9._~-] percent-encoded; injective."""
    if _SAFE.fullmatch(name):  # the common case, several times per command: no quoting to do
        return name
    return quote(name, safe="")


def unescape(text: str) -> str:
    """The inverse of `escape`."""
    return unquote(text)


class Keys:
    """Key names under one prefix. Immutable and cheap; build once per ClusterState."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        """Raises ValueError for an empty prefix, or one with a brace (it would become the hash
        tag) or a glob character (SCAN patterns are built on it)."""
        if not prefix or set(prefix) & set("{}*?[]\\"):
            raise ValueError(f"key prefix {prefix!r} must be non-empty, without braces or glob characters")
        self.prefix = prefix

    def replication_fence(self) -> str:
        """The counter a WAIT for replicas follows (`KubusRedis.confirm_replicated`)."""
        return f"{self.prefix}:{{idx}}:replication-fence"

    # ---- nodes ---------------------------------------------------------------------------------

    def node_tag(self, node: str) -> str:
        return f"{self.prefix}:{{node:{escape(node)}}}"

    def node_info(self, node: str) -> str:
        return f"{self.node_tag(node)}:info"

    def node_usage(self, node: str) -> str:
        return f"{self.node_tag(node)}:usage"

    def node_reservations(self, node: str) -> str:
        return f"{self.node_tag(node)}:reservations"

    def node_bound(self, node: str) -> str:
        return f"{self.node_tag(node)}:bound"

    def node_fences(self, node: str) -> str:
        return f"{self.node_tag(node)}:fences"

    def node_keys(self, node: str) -> list[str]:
        """info, usage, reservations, bound, fences: the KEYS of every node script, in order."""
        return [
            self.node_info(node),
            self.node_usage(node),
            self.node_reservations(node),
            self.node_bound(node),
            self.node_fences(node),
        ]

    def node_info_pattern(self) -> str:
        """SCAN pattern matching every node's info key."""
        return f"{self.prefix}:{{node:*}}:info"

    def node_of_info_key(self, key: str) -> str:
        """The node name back from a node info key. Raises ValueError for another key."""
        head, tail = f"{self.prefix}:{{node:", "}:info"
        if not (key.startswith(head) and key.endswith(tail)):
            raise ValueError(f"{key!r} is not a node info key")
        return unescape(key[len(head) : -len(tail)])

    # ---- pods ----------------------------------------------------------------------------------

    def pod_tag(self, uid: str) -> str:
        return f"{self.prefix}:{{pod:{escape(uid)}}}"

    def pod_record(self, uid: str) -> str:
        return f"{self.pod_tag(uid)}:record"

    def pod_events(self, uid: str) -> str:
        return f"{self.pod_tag(uid)}:events"

    def pod_permit(self, uid: str) -> str:
        return f"{self.pod_tag(uid)}:permit"

    def pod_record_pattern(self) -> str:
        """SCAN pattern matching every pod's record key."""
        return f"{self.prefix}:{{pod:*}}:record"

    def pod_of_record_key(self, key: str) -> str:
        """The pod uid back from a pod record key. Raises ValueError for another key."""
        head, tail = f"{self.prefix}:{{pod:", "}:record"
        if not (key.startswith(head) and key.endswith(tail)):
            raise ValueError(f"{key!r} is not a pod record key")
        return unescape(key[len(head) : -len(tail)])

    # ---- pod groups ----------------------------------------------------------------------------

    def pod_group_record(self, group: str) -> str:
        """The record of the group ``namespace/name``."""
        return f"{self.prefix}:{{pg:{escape(group)}}}:record"

    def pod_groups_index(self) -> str:
        return f"{self.prefix}:{{idx}}:pod-groups"

    def group_members(self, group: str) -> str:
        """The uids of the pods of the group ``namespace/name``."""
        return f"{self.prefix}:{{idx}}:group:{escape(group)}"

    # ---- leases --------------------------------------------------------------------------------

    def lease_holder(self, lease: str) -> str:
        return f"{self.prefix}:{{lease:{escape(lease)}}}:holder"

    def lease_fence(self, lease: str) -> str:
        return f"{self.prefix}:{{lease:{escape(lease)}}}:fence"

    # ---- indexes ---------------------------------------------------------------------------------

    def nodes_index(self) -> str:
        return f"{self.prefix}:{{idx}}:nodes"

    def heartbeats_index(self) -> str:
        return f"{self.prefix}:{{idx}}:heartbeats"

    def phase_index(self, phase: str) -> str:
        return f"{self.prefix}:{{idx}}:phase:{phase}"

    def phase_indexes(self) -> list[str]:
        """One key per phase, in PHASES order."""
        return [self.phase_index(p) for p in PHASES]

    def pending_index(self, profile: str) -> str:
        return f"{self.prefix}:{{idx}}:pending:{escape(profile)}"

    def waiting_index(self, profile: str) -> str:
        return f"{self.prefix}:{{idx}}:waiting:{escape(profile)}"

    def pending_index_pattern(self) -> str:
        return f"{self.prefix}:{{idx}}:pending:*"

    def profile_of_pending_index(self, key: str) -> str:
        head = f"{self.prefix}:{{idx}}:pending:"
        if not key.startswith(head):
            raise ValueError(f"{key!r} is not a pending index key")
        return unescape(key[len(head) :])

    def pod_keys_index(self) -> str:
        return f"{self.prefix}:{{idx}}:pod-keys"

    # ---- objects stored whole ------------------------------------------------------------------

    def namespaces(self) -> str:
        return f"{self.prefix}:{{idx}}:namespaces"

    def priority_classes(self) -> str:
        return f"{self.prefix}:{{idx}}:priority-classes"

    def disruption_budgets(self) -> str:
        return f"{self.prefix}:{{idx}}:pdbs"

    def workloads(self) -> str:
        return f"{self.prefix}:{{idx}}:workloads"

    @staticmethod
    def version_of(objects: str) -> str:
        """The version counter of one of the hashes above (``objects`` is its key)."""
        return f"{objects}:version"


def hash_slot_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes: the first non-empty {...}, else the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key
