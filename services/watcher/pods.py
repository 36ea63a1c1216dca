"""The apiserver's Pods in kubus (cluster mode), as kube-scheduler's informers feed its queue and
cache:

- a pod for one of kubus's profiles (spec.schedulerName), not bound (no spec.nodeName) and not
  terminating is submitted to the queue through the step `kubus apply` takes
  (``kubus.pods.submit``, `kubus.api.submission.pod_from_api`: its spec and the metadata
  scheduling reads, keyed by its real uid); a change of that (a scheduling gate removed, labels)
  is submitted again, and reaches the queue and the cycles as an update does;
- a pod bound to a node (by kubus's binder, by another scheduler, or created with its node) is
  recorded there with its room held (`ClusterState.observe_placed`: the kubelet admitted it,
  not kubus, so its room is taken whatever is left), Running when the apiserver says it runs;
  once its deletion begins (deletionTimestamp set: it runs out its grace period) its room is
  marked terminating (`Reservation.deletion_timestamp`), still held, as kube-scheduler's cache
  keeps such a pod with its DeletionTimestamp (PodTopologySpread stops counting it); not that
  of a preemption victim kubus evicted (`PodMirror.evicting`), whose room was given back then;
- a pod that succeeded or failed is finished in the store: its room given back, ``pod.finished``;
- a pod deleted (or gone when the list is read again) is deleted through the queue
  (``kubus.pods.delete`` with its uid), which gives its room back and tells everyone, and
  said gone to the binders (``kubus.apiserver.deleted``: a preemptor waits on its victims');
- a pending pod being deleted (deletionTimestamp) is not scheduled any more (kube skips it).

What it did for each pod is remembered (`_Seen`), so the many updates that change nothing for
scheduling (status patches, kubus's own among them) cost a dictionary lookup. A pod it saw
pending and now sees bound was bound by kubus's binder, which records the binding in the store
itself: `SETTLE` seconds later the store is asked, for all such pods at once, whether it has
them bound there (one field read each), and only a pod it does not have (its binder died
between the apiserver's binding and the store's) is recorded here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from kubus.api.attempts import NO_ATTEMPT
from kubus.api.errors import ManifestError
from kubus.api.gpus import pod_gpu_devices, pod_gpu_request
from kubus.api.manifests import DEFAULT_SCHEDULER_NAME, parse_pod
from kubus.api.objects import Pod
from kubus.api.submission import pod_from_api, pod_list
from kubus.bus import (
    APISERVER_DELETED,
    MAX_MSG_SIZE,
    PODS_DELETE,
    PODS_SUBMIT,
    EventKind,
    announcements,
    msgids,
    publish_durable_many,
)
from kubus.bus.connection import Publication
from kubus.bus.messages import PodDeletion, encode
from kubus.core import codec
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins.gpu_fit import pick_devices
from kubus.runtime.service import StructuredLogger, Throttle
from kubus.store import ClusterState, PodPhase, PodRecord, Reservation, StoreCode

__all__ = ["PodMirror", "submit_lists"]

APISERVER = "apiserver"

_ON_NODE = frozenset({PodPhase.RESERVED, PodPhase.BOUND, PodPhase.RUNNING})

_BOUND = frozenset({PodPhase.BOUND, PodPhase.RUNNING})

SETTLE = 5.0
"""Seconds a pod kubus's binder bound in the apiserver has for that binder's store bind before
the mirror looks (the binder records it milliseconds after the apiserver answers)."""
_EVICTING_KEPT = 10_000
"""Preemption victims remembered as being deleted (a victim's deletion ends within seconds)."""


_LISTS_AT_ONCE = 4
"""PodLists a relist publishes at once (the queue takes in one while the next is sent)."""

_MAX_LIST_BYTES = MAX_MSG_SIZE // 2
"""Bytes of manifests a PodList holds at most (one pod alone may take `MAX_MANIFEST_SIZE`)."""


def submit_lists(submits: Sequence[Publication], size: int) -> list[Publication]:
    """Pod submissions (one pod each) as PodList messages (`kubus.api.submission.pod_list`) of
    up to ``size`` pods and `_MAX_LIST_BYTES`, in their order: one message stored and read
    where there were hundreds. Its id is the digest of its pods' ids (`msgids.submit_list`),
    so a publish repeated after a lost ack is stored once; a pod alone goes as itself."""
    out: list[Publication] = []
    group: list[Publication] = []
    size_now = 0

    def close() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            out.append(Publication(PODS_SUBMIT, pod_list([p.payload for p in group]),
                                   msgids.submit_list(p.msg_id for p in group)))  # fmt: skip
        group.clear()

    for submit in submits:
        if group and (len(group) >= size or size_now + len(submit.payload) > _MAX_LIST_BYTES):
            close()
            size_now = 0
        group.append(submit)
        size_now += len(submit.payload) + 1
    close()
    return out


@dataclass(slots=True)
class _Seen:
    """What the mirror last did about one pod."""

    key: str
    """namespace/name."""
    digest: str = ""
    """The id of the manifest last submitted (`msgids.submit`: its sha256 in it), "" for none."""
    node: str = ""
    """The node it was recorded on ("" while not bound)."""
    phase: str = ""
    """The apiserver's status.phase when it was recorded on its node, or finished."""
    terminating: bool = False
    """It had a deletionTimestamp when it was recorded on its node."""


@dataclass(frozen=True, slots=True)
class _ApiPod:
    """The few fields of an apiserver Pod the mirror reads before deciding anything."""

    uid: str
    namespace: str
    name: str
    scheduler: str
    node: str
    phase: str
    terminating: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, codec.JSONValue]) -> _ApiPod | None:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        uid, name = meta.get("uid"), meta.get("name")
        if not isinstance(uid, str) or not uid or not isinstance(name, str) or not name:
            return None
        return cls(
            uid=uid,
            namespace=str(meta.get("namespace") or "default"),
            name=name,
            scheduler=str(spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME),
            node=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase") or "Pending"),
            terminating=bool(meta.get("deletionTimestamp")),
        )


class PodMirror:
    """Keeps kubus's pods those of the apiserver (see the module docstring). One reflector
    feeds it, one event at a time."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        profiles: Collection[str],
        nc: NATS | None = None,
        log: StructuredLogger,
        submit_batch: int = 256,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.js = js
        self.nc = nc
        """Where pods the apiserver deleted are said gone (`APISERVER_DELETED`); None: not said."""
        self.profiles = frozenset(profiles)
        self.log = log.bind(part="pods")
        self.submit_batch = submit_batch
        self.clock = clock
        self._seen: dict[str, _Seen] = {}
        self._unreadable = Throttle(60.0)
        self._settling: dict[str, tuple[float, str, bytes]] = {}
        """Uid -> (when to look, node, the object as JSON) of pods kubus's binder is binding. As
        JSON, not the parsed object: thousands of these live for seconds, and their dicts and
        lists would be the cyclic collector's work at every pass (a tenth of the watcher's CPU,
        py-spy); one bytes object is none, and only a pod its binder did not record is parsed
        again."""
        self._evicting: OrderedDict[str, None] = OrderedDict()
        """Uids of the preemption victims being deleted (`evicting`), oldest first."""

    def evicting(self, uid: str) -> None:
        """Pod ``uid`` is a preemption victim the status writer deletes now: its room was given
        back when kubus evicted it, so its deletion beginning (deletionTimestamp) needs no stamp
        on a room it no longer holds."""
        self._evicting[uid] = None
        if len(self._evicting) > _EVICTING_KEPT:
            self._evicting.popitem(last=False)

    # -- what the reflector delivers -------------------------------------------------------------

    async def replace(self, objects: Sequence[Mapping[str, codec.JSONValue]]) -> None:
        """Every pod the apiserver has now (the first list, or a relist after 410 Gone): each
        one applied, and the pods kubus holds that are not among them deleted (they went while
        nobody watched). Submissions go as PodLists (`submit_lists`), published as they fill."""
        pending: list[Publication] = []
        seen: set[str] = set()
        for obj in objects:
            pod = _ApiPod.of(obj)
            if pod is None:
                continue
            seen.add(pod.uid)
            publication = await self._apply(pod, obj)
            if publication is not None:
                pending.append(publication)
                if len(pending) >= self.submit_batch * _LISTS_AT_ONCE:
                    await publish_durable_many(self.js, submit_lists(pending, self.submit_batch))
                    pending = []
        if pending:
            await publish_durable_many(self.js, submit_lists(pending, self.submit_batch))
        gone = [uid for uid in await self._held() if uid not in seen]
        for record in await self.store.get_pods(gone):
            if record is not None and record.phase in (PodPhase.PENDING, *_ON_NODE):
                await self._delete(record.uid, record.namespace, record.name, gone=True)
        for uid in [uid for uid in self._seen if uid not in seen]:
            del self._seen[uid]
        self.log.info("pods listed", pods=len(seen), deleted_meanwhile=len(gone))

    async def changed(self, obj: Mapping[str, codec.JSONValue]) -> None:
        """A pod added or changed."""
        pod = _ApiPod.of(obj)
        if pod is None:
            return
        publication = await self._apply(pod, obj)
        if publication is not None:
            await publish_durable_many(self.js, [publication])

    async def deleted(self, obj: Mapping[str, codec.JSONValue]) -> None:
        """A pod deleted from the apiserver."""
        pod = _ApiPod.of(obj)
        if pod is None:
            return
        seen = self._seen.pop(pod.uid, None)
        self._evicting.pop(pod.uid, None)
        if seen is not None or pod.node or pod.scheduler in self.profiles:
            await self._delete(pod.uid, pod.namespace, pod.name, gone=True)

    # -- one pod ---------------------------------------------------------------------------------

    async def _apply(self, pod: _ApiPod, obj: Mapping[str, codec.JSONValue]) -> Publication | None:
        """Bring kubus in step with one apiserver pod; the submission to publish, if any."""
        seen = self._seen.get(pod.uid)
        if pod.phase in ("Succeeded", "Failed"):
            if seen is None or seen.phase != pod.phase:
                await self._finished(pod)
                self._seen[pod.uid] = _Seen(pod.key, node=pod.node, phase=pod.phase)
            return None
        if pod.node:
            if (
                seen is not None
                and seen.node == pod.node
                and seen.phase == pod.phase
                and seen.terminating == pod.terminating
            ):
                return None
            if (
                seen is not None
                and seen.digest
                and not seen.node
                and pod.phase == "Pending"
                and not pod.terminating
            ):
                # Submitted by us, bound now: kubus's binder, which records it; checked later.
                self._seen[pod.uid] = _Seen(pod.key, node=pod.node, phase=pod.phase)
                self._settling[pod.uid] = (self.clock() + SETTLE, pod.node, codec.dumps(obj))
                return None
            self._settling.pop(pod.uid, None)
            if pod.terminating and pod.uid in self._evicting:  # evicted by kubus: its room is given back
                self._seen[pod.uid] = _Seen(pod.key, node=pod.node, phase=pod.phase, terminating=True)
                return None
            if await self._placed(pod, obj):
                self._seen[pod.uid] = _Seen(pod.key, node=pod.node, phase=pod.phase, terminating=pod.terminating)
            return None
        if pod.scheduler not in self.profiles:
            return None  # another scheduler's, not bound yet: nothing of kubus's
        if pod.terminating:  # kube does not schedule a pod being deleted
            if seen is not None and seen.digest:
                self._seen.pop(pod.uid, None)
                await self._delete(pod.uid, pod.namespace, pod.name, gone=False)
            return None
        manifest = pod_from_api(obj)
        msg_id = msgids.submit(pod.namespace, pod.name, manifest)  # the manifest's digest in it
        if seen is not None and seen.digest == msg_id:
            return None
        self._seen[pod.uid] = _Seen(pod.key, digest=msg_id)
        return Publication(PODS_SUBMIT, manifest, msg_id)

    async def settle(self) -> None:
        """Record in the store the bindings kubus's binder has not recorded in time: the pods
        due are read at once (phase and node), and only those the store does not have bound to
        their apiserver node are recorded here; not those over in kubus meanwhile (preempted,
        deleted, finished: the apiserver's deletion or end follows)."""
        now = self.clock()
        due = [(uid, entry) for uid, entry in self._settling.items() if entry[0] <= now]
        if not due:
            return
        placements = await self.store.pod_placements([uid for uid, _ in due])
        for (uid, entry), placement in zip(due, placements, strict=True):
            if self._settling.get(uid) is not entry:
                continue  # changed (or settled) while the store was read: the newer entry decides
            del self._settling[uid]
            _, node, raw = entry
            recorded = placement is not None and placement[0] in _BOUND and placement[1] == node
            if recorded or (placement is not None and placement[0].terminal):
                continue  # its binder recorded it, or it is over in kubus
            obj = codec.loads(raw)
            assert isinstance(obj, dict)  # it was a JSON object when it was kept
            pod = _ApiPod.of(obj)
            if pod is not None:
                self.log.info("binding not recorded by a binder: recording it", pod=pod.key, node=pod.node)
                await self._placed(pod, obj)

    async def _placed(self, pod: _ApiPod, obj: Mapping[str, codec.JSONValue]) -> bool:
        """Record a pod the apiserver has on its node; False when it cannot be yet (its node is
        not known yet: the next event or relist tries again) or cannot be read (said)."""
        manifest = pod_from_api(obj)
        try:
            parsed = parse_pod(codec.loads(manifest), source=APISERVER)
        except ManifestError as exc:
            if (dropped := self._unreadable.allow()) is not None:
                self.log.warning("bound pod unreadable: its room is not counted", pod=pod.key, node=pod.node,
                                 error=str(exc), unlogged_before=dropped)  # fmt: skip
            return True  # nothing more to do until it changes
        record = PodRecord.of(parsed, manifest, now=self.clock())
        devices = await self._devices(parsed, pod.node)
        try:
            reservation = Reservation.of(
                PodInfo.of(parsed, devices), pod.node, attempt=NO_ATTEMPT, profile=pod.scheduler, now=self.clock()
            )
        except ValueError as exc:
            self.log.warning("bound pod's GPUs unreadable: its room is not counted", pod=pod.key, error=str(exc))
            return True
        running = pod.phase == "Running"
        code, phase, other = await self.store.observe_placed(record, reservation, running=running)
        if code is StoreCode.CONFLICT:  # kubus had it elsewhere: the apiserver is the truth
            await self.store.release(other, pod.uid)
            self.log.warning("pod bound elsewhere than kubus had it", pod=pod.key, node=pod.node, kubus_node=other)
            code, phase, other = await self.store.observe_placed(record, reservation, running=running, moved=True)
        if code is StoreCode.NODE_GONE:
            self.log.info("pod bound to a node not known yet", pod=pod.key, node=pod.node)
            return False
        if code is StoreCode.OK:
            kind = EventKind.POD_RUNNING if phase is PodPhase.RUNNING else EventKind.POD_BOUND
            at, profile = self.clock(), pod.scheduler
            await publish_durable_many(
                self.js, [announcements.pod_event(kind, pod.key, pod.uid, at=at, node=pod.node, profile=profile)]
            )
        return True

    async def _devices(self, pod: Pod, node: str) -> tuple[int, ...]:
        """The GPU devices a bound pod holds: those kubus's binder pinned (`kubus.io/gpu-devices`),
        else what the store holds for it there, else GPUFit's pick of the node's free ones, else
        the first ones (the kubelet admitted it: its room is taken whatever is left)."""
        request = pod_gpu_request(pod)
        if request is None:
            return ()
        pinned = pod_gpu_devices(pod)
        if pinned:
            return pinned
        held = await self.store.reservation(node, pod.metadata.uid)
        if held is not None and len(held.gpu_devices) == request.count:
            return tuple(held.gpu_devices)
        info = await self.store.node_info(node)
        if info is None:
            return tuple(range(request.count))
        picked = pick_devices(request, info)
        return picked if len(picked) == request.count else tuple(range(request.count))

    async def _finished(self, pod: _ApiPod) -> None:
        """The apiserver says the pod succeeded or failed: so does the store, its room given
        back, and everyone told (its room may be what an unschedulable pod waits for)."""
        phase = PodPhase.SUCCEEDED if pod.phase == "Succeeded" else PodPhase.FAILED
        write = await self.store.transition(pod.uid, phase, expected_phases=_ON_NODE | {PodPhase.PENDING})
        if write.code is StoreCode.NOT_FOUND:
            return
        record = await self.store.get_pod(pod.uid)
        node = (record.node if record is not None else "") or pod.node
        if node:
            await self.store.release(node, pod.uid)
        if write.ok:
            await publish_durable_many(
                self.js,
                [announcements.pod_event(EventKind.POD_FINISHED, pod.key, pod.uid, at=self.clock(), node=node,
                                         profile=pod.scheduler, phase=str(phase))],
            )  # fmt: skip

    async def _delete(self, uid: str, namespace: str, name: str, *, gone: bool) -> None:
        """Delete the pod through the queue (its one home for deletions), by uid; ``gone``: the
        apiserver has it no more, said to the binders too (`APISERVER_DELETED`, a notice: one
        lost costs a preemptor's binder a look at the apiserver)."""
        data = encode(PodDeletion(namespace=namespace, name=name, uid=uid))
        await publish_durable_many(
            self.js, [Publication(PODS_DELETE, data, msgids.delete(namespace, name, uid, 0))]
        )
        if gone and self.nc is not None:
            await self.nc.publish(APISERVER_DELETED, data)

    async def _held(self) -> set[str]:
        """The uids of the pods kubus holds as not over (Pending, Reserved, Bound, Running)."""
        out: set[str] = set()
        for phase in (PodPhase.PENDING, *_ON_NODE):
            out |= await self.store.pod_uids_in_phase(phase)
        return out
