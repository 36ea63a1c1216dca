"""The invariants of the shared state, checked against what Redis holds now.

`check_invariants(store)` reads everything (SCAN, not the indexes: the indexes are checked too)
and returns one human-readable line per violation, empty when all hold:

No overcommit
  - per node and resource, the reservations' requests sum to at most the allocatable (resources
    a reservation was told to ignore excepted), and the reservations number at most `pods`;
  - per GPU device, the memory taken (a whole GPU takes all of it) is at most its memory, and a
    device held whole has exactly one holder;
  - the usage counters the scripts keep equal the sums recomputed from the reservations (drift).

No loss, no double binding
  - every reservation's pod exists and is Reserved, Bound or Running on that node (so a
    Succeeded, Failed or Deleted pod, a preempted victim too, holds none); a Bound or Running
    pod's reservation is marked bound and holds the devices the pod was bound with;
  - every Reserved, Bound or Running pod holds a reservation on its node, and on no other;
  - no pod was bound more than once;
  - every pod is in exactly one phase index, the one of its phase, and in its profile's pending
    index exactly when Pending; the node and pod-key indexes point at existing records.

Meant for tests and operators: it reads the whole state, so it is O(cluster). Run it when the
system is quiet; a step between two scripts (say the Reserved transition, then reserve) is
seen as a violation while it is in flight (see ClusterState.reconcile for the repairs).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kubus.api.objects import PODS
from kubus.core.codec import text
from kubus.store.cluster_state import ClusterState
from kubus.store.keys import PHASES, unescape
from kubus.store.nodes import _reservations
from kubus.store.records import NodeRecord, PodPhase, PodRecord, Reservation, ReservationState

__all__ = ["check_invariants"]


@dataclass(slots=True)
class _Node:
    name: str
    info: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    misfiled: list[str] = field(default_factory=list)
    """Reservation hash fields (pod uids) whose JSON names another pod."""
    bound: set[str] = field(default_factory=set)


async def _scan(store: ClusterState, pattern: str) -> list[str]:
    return sorted({text(k) async for k in store.redis.scan_iter(match=pattern, count=1000)})


def _node_of_key(prefix: str, key: str) -> str | None:
    head = f"{prefix}:{{node:"
    if not key.startswith(head):
        return None
    end = key.find("}", len(head))
    return unescape(key[len(head) : end]) if end > 0 else None


async def _gather_nodes(store: ClusterState) -> dict[str, _Node]:
    k = store.keys
    names = {n for key in await _scan(store, f"{k.prefix}:{{node:*}}:*") if (n := _node_of_key(k.prefix, key))}
    nodes: dict[str, _Node] = {}
    for name in sorted(names):
        pipe = store.redis.pipeline(transaction=True)
        pipe.hgetall(k.node_info(name))
        pipe.hgetall(k.node_usage(name))
        pipe.hgetall(k.node_reservations(name))
        pipe.smembers(k.node_bound(name))
        info, usage, resv, bound = await pipe.execute()
        node = _Node(name)
        node.info = {text(a): text(b) if a not in (b"manifest", "manifest") else "" for a, b in info.items()}
        node.usage = {text(a): int(text(b)) for a, b in usage.items()}
        node.misfiled = sorted(text(u) for u, j in resv.items() if Reservation.decode(j).pod_uid != text(u))
        node.reservations = _reservations(resv.values(), bound)
        node.bound = {text(u) for u in bound}
        nodes[name] = node
    return nodes


def _check_node(node: _Node, pods: dict[str, PodRecord], out: list[str]) -> None:
    name = node.name
    where = f"node {name}"
    if not node.info:
        if node.reservations:
            out.append(f"{where}: {len(node.reservations)} reservation(s) on a node that does not exist")
        if node.usage:
            out.append(f"{where}: usage counters on a node that does not exist: {sorted(node.usage)}")
        return
    record = NodeRecord.from_hash(node.info)
    alloc = {f[2:]: int(v) for f, v in node.info.items() if f.startswith("a:")}
    if alloc != {r: min(q, 2**53) for r, q in record.allocatable.items()}:
        out.append(f"{where}: allocatable fields {alloc} disagree with its record {record.allocatable}")

    for uid in node.misfiled:
        out.append(f"{where}: reservation stored under {uid} is for another pod")
    for uid in sorted(node.bound - {r.pod_uid for r in node.reservations}):
        out.append(f"{where}: pod {uid} marked bound without a reservation")

    # sums recomputed from the reservations, as the scripts account them
    total: dict[str, int] = defaultdict(int)
    ignored_by_some: set[str] = set()
    gpu_used: dict[int, int] = defaultdict(int)
    gpu_holders: dict[int, list[Reservation]] = defaultdict(list)
    ports: dict[str, int] = defaultdict(int)
    for r in node.reservations:
        if r.node != name:
            out.append(f"{where}: reservation of pod {r.pod_key} ({r.pod_uid}) says node {r.node}")
        for res, q in r.requests.items():
            if res != PODS:
                total[res] += q
        ignored_by_some.update(r.ignored)
        for d in r.gpu_devices:
            if not 0 <= d < len(record.gpus):
                out.append(f"{where}: pod {r.pod_key} holds gpu {d}, which the node does not have")
                continue
            gpu_used[d] += r.gpu_memory if r.gpu_shared else record.gpus[d].memory
            gpu_holders[d].append(r)
        for ip, proto, port in r.host_ports:
            ports[f"p:{proto}:{port}:{ip}"] += 1
            ports[f"p:{proto}:{port}"] += 1

    # no overcommit
    n = len(node.reservations)
    if n > alloc.get(PODS, 0):
        out.append(f"{where}: {n} pods reserved, allocatable pods {alloc.get(PODS, 0)}")
    for res, q in sorted(total.items()):
        if q > 0 and q > alloc.get(res, 0) and res not in ignored_by_some:
            out.append(f"{where}: overcommitted {res}: reservations request {q}, allocatable {alloc.get(res, 0)}")
    for d, used in sorted(gpu_used.items()):
        if used > record.gpus[d].memory:
            out.append(f"{where}: gpu {d} overcommitted: {used} bytes taken of {record.gpus[d].memory}")
        holders = gpu_holders[d]
        if any(not r.gpu_shared for r in holders) and len(holders) > 1:
            out.append(f"{where}: gpu {d} held whole but shared by {sorted(r.pod_key for r in holders)}")

    # drift: the counters the scripts keep equal the recomputed sums
    want: dict[str, int] = {f"r:{res}": q for res, q in total.items() if q != 0}
    if n:
        want["pods"] = n
    for d, used in gpu_used.items():
        if used:
            want[f"g:{d}:used"] = used
        want[f"g:{d}:pods"] = len(gpu_holders[d])
    want.update(ports)
    holders_of_anti = sum(1 for r in node.reservations if r.anti_affinity_on_host())
    if holders_of_anti:
        want["anti"] = holders_of_anti
    for f in sorted(set(want) | set(node.usage)):
        if want.get(f, 0) != node.usage.get(f, 0):
            out.append(f"{where}: usage {f} is {node.usage.get(f, 0)}, reservations add up to {want.get(f, 0)}")

    # no required anti-affinity on the hostname broken between the pods held here
    for r in node.reservations:
        for term in r.anti_affinity_on_host():
            for e in node.reservations:
                if e.pod_uid != r.pod_uid and term.matches(e.namespace, e.labels, e.namespace_labels_or_default()):
                    out.append(
                        f"{where}: pod {e.pod_key} is on the node of pod {r.pod_key}, whose anti-affinity excludes it"
                    )

    # every reservation belongs to a pod placed here
    for r in node.reservations:
        pod = pods.get(r.pod_uid)
        if pod is None:
            out.append(f"{where}: reservation of pod {r.pod_key} ({r.pod_uid}) whose pod does not exist")
            continue
        if not pod.phase.on_node:
            out.append(f"{where}: reservation of pod {pod.key} ({pod.uid}) which is {pod.phase}")
        elif pod.node != name:
            out.append(f"{where}: reservation of pod {pod.key} ({pod.uid}) which is {pod.phase} on node {pod.node!r}")
        elif pod.phase in (PodPhase.BOUND, PodPhase.RUNNING):
            if r.state is not ReservationState.BOUND:
                out.append(f"{where}: pod {pod.key} is {pod.phase} but its reservation is not marked bound")
            if tuple(pod.gpu_devices) != tuple(r.gpu_devices):
                out.append(
                    f"{where}: pod {pod.key} is bound with gpus {list(pod.gpu_devices)}, "
                    f"reserved gpus {list(r.gpu_devices)}"
                )


def _check_pods(
    pods: dict[str, PodRecord], held: dict[str, list[str]], indexes: dict[str, set[str]], out: list[str]
) -> None:
    for uid, pod in sorted(pods.items()):
        what = f"pod {pod.key} ({uid})"
        if pod.bindings > 1:
            out.append(f"{what}: bound {pod.bindings} times")
        nodes = held.get(uid, [])
        if len(nodes) > 1:
            out.append(f"{what}: holds reservations on {len(nodes)} nodes: {nodes}")
        if pod.phase.on_node:
            if not pod.node:
                out.append(f"{what}: {pod.phase} without a node")
            elif pod.node not in nodes:
                out.append(f"{what}: {pod.phase} on node {pod.node} without a reservation there")
        in_phases = [p for p in PHASES if uid in indexes[f"phase:{p}"]]
        if in_phases != [str(pod.phase)]:
            out.append(f"{what}: phase {pod.phase}, but in phase index(es) {in_phases}")
        pending_in = sorted(
            key[len("pending:") :] for key, uids in indexes.items() if key.startswith("pending:") and uid in uids
        )
        want_pending = [pod.profile] if pod.phase is PodPhase.PENDING else []
        if pending_in != want_pending:
            out.append(f"{what}: {pod.phase} of profile {pod.profile!r}, but in pending index(es) {pending_in}")
    for key, uids in sorted(indexes.items()):
        for uid in sorted(uids - set(pods)):
            out.append(f"index {key}: pod {uid} does not exist")


async def check_invariants(store: ClusterState) -> list[str]:
    """Every violation of the invariants (see the module docstring), one line each; [] if none."""
    k = store.keys
    out: list[str] = []
    nodes = await _gather_nodes(store)
    uids = [k.pod_of_record_key(key) for key in await _scan(store, k.pod_record_pattern())]
    pods = {p.uid: p for p in await store.get_pods(uids) if p is not None}
    for uid in uids:
        if uid not in pods:
            out.append(f"pod record {uid} vanished while checking")  # only under concurrent deletes
    for uid, pod in pods.items():
        if pod.uid != uid:
            out.append(f"pod record {uid} holds pod uid {pod.uid}")

    held: dict[str, list[str]] = defaultdict(list)
    for node in nodes.values():
        _check_node(node, pods, out)
        for r in node.reservations:
            held[r.pod_uid].append(node.name)

    # indexes
    existing = {name for name, node in nodes.items() if node.info}
    indexed = {text(n) for n in await store.redis.smembers(k.nodes_index())}
    for name in sorted(existing - indexed):
        out.append(f"nodes index: node {name} missing")
    for name in sorted(indexed - existing):
        out.append(f"nodes index: lists node {name}, which does not exist")
    indexes: dict[str, set[str]] = {}
    for phase in PHASES:
        indexes[f"phase:{phase}"] = {text(u) for u in await store.redis.smembers(k.phase_index(phase))}
    for key in await _scan(store, k.pending_index_pattern()):
        indexes[f"pending:{k.profile_of_pending_index(key)}"] = {text(u) for u in await store.redis.smembers(key)}
    _check_pods(pods, held, indexes, out)
    by_key = await store.redis.hgetall(k.pod_keys_index())
    for key, uid in sorted((text(a), text(b)) for a, b in by_key.items()):
        indexed_pod = pods.get(uid)
        if indexed_pod is None:
            out.append(f"pod-keys index: {key} -> {uid}, which does not exist")
        elif indexed_pod.key != key:
            out.append(f"pod-keys index: {key} -> {uid}, which is {indexed_pod.key}")
    for pod in pods.values():
        if text(by_key.get(pod.key) or by_key.get(pod.key.encode()) or "") == "":
            out.append(f"pod-keys index: {pod.key} missing")
    return out
