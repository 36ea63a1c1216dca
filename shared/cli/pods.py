"""`kubus get pods` and `kubus get pods -w`: the pods Redis holds, as kubectl shows them (a table,
`kubus.cli.output`, or v1 Pods, `kubus.cli.kube_objects`), and each change of one as the services
announce it on the bus."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from kubus.api.objects import LabelSelector
from kubus.api.pod_affinity import selector_matches
from kubus.bus.connection import settle
from kubus.bus.messages import ClusterEvent, decode, expand
from kubus.bus.subjects import EVENTS_STREAM, POD_BATCH_EVENTS, POD_EVENTS, EventKind
from kubus.cli.connect import open_bus, open_store
from kubus.cli.kube_objects import pod_object
from kubus.cli.not_found import not_found, report
from kubus.cli.output import Listing, Output, format_age, output_of, print_listing
from kubus.core import codec
from kubus.core.settings import ConnectionSettings
from kubus.store.cluster_state import ClusterState
from kubus.store.permits import PermitState
from kubus.store.records import PodPhase, PodRecord

__all__ = [
    "POD_COLUMNS",
    "POD_WIDE_COLUMNS",
    "WATCH_HEARTBEAT",
    "format_devices",
    "get_pods",
    "list_pods",
    "pod_listing",
    "watch_pods",
]


async def list_pods(store: ClusterState, namespace: str | None) -> list[PodRecord]:
    """The newest pod of every namespace/name (of one namespace unless None), sorted by key."""
    index = await store.redis.hgetall(store.keys.pod_keys_index())
    pairs = sorted((codec.text(k), codec.text(v)) for k, v in index.items())
    if namespace is not None:
        pairs = [(k, u) for k, u in pairs if k.partition("/")[0] == namespace]
    return [p for p in await store.get_pods([u for _, u in pairs]) if p is not None]


def format_devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices) if devices else "-"


def _pod_labels(record: PodRecord) -> dict[str, str]:
    """The labels of the pod's stored manifest (validated at submit)."""
    try:
        labels = codec.loads(record.manifest).get("metadata", {}).get("labels") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


POD_COLUMNS = ("NAMESPACE", "NAME", "PHASE", "NODE", "GPUS", "AGE", "REASON")


POD_WIDE_COLUMNS = ("SCHEDULER", "ATTEMPTS", "MESSAGE")


async def pod_listing(
    store: ClusterState,
    *,
    namespace: str | None,
    output: Output,
    names: Sequence[str] = (),
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
) -> tuple[Listing, list[str]]:
    """The pods `kubus get pods` shows (of ``namespace``, every one for None; those ``names``
    when given; Deleted ones only with ``show_deleted``; only those whose labels ``selector``
    matches), each as a v1 Pod with its table row (NAMESPACE only across namespaces), and a
    NotFound line per name that is not there."""
    missing: list[str] = []
    if names:
        where = namespace or "default"
        pods = []
        for name in dict.fromkeys(names):
            record = await store.find_pod(where, name)
            if record is None or (record.phase is PodPhase.DELETED and not show_deleted):
                missing.append(not_found("pods", name, where))
            else:
                pods.append(record)
    else:
        pods = await list_pods(store, namespace)
        if not show_deleted:
            pods = [p for p in pods if p.phase is not PodPhase.DELETED]
    if selector is not None:
        pods = [p for p in pods if selector_matches(selector, _pod_labels(p))]
    reserved = [p.uid for p in pods if p.phase is PodPhase.RESERVED]
    waits = await store.permit_states(reserved) if reserved else {}
    waiting = {uid: w for uid, w in waits.items() if w is not None and w.pending and not w.rejected}
    # the events give the conditions' times and startTime: read them only for the objects' sake
    histories = await store.events_of([p.uid for p in pods]) if pods and not output.table else [[] for _ in pods]
    now = time.time()
    header = [*POD_COLUMNS, *(POD_WIDE_COLUMNS if output.format == "wide" else ())]
    across = namespace is None and not names
    listing = Listing("pod", header if across else header[1:], colour_column=2 if across else 1)
    listing.single = len(names) == 1
    for p, events in zip(pods, histories, strict=True):
        wait = waiting.get(p.uid)
        row = _pod_row(p, now, wait, output.format)
        listing.rows.append((pod_object(p, events=events, waiting=wait), row if across else row[1:]))
    return listing, missing


def _no_pods(namespace: str | None) -> str:
    return f"No pods found in {'any namespace' if namespace is None else f'namespace {namespace}'}."


async def get_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str | Output,
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
    names: Sequence[str] = (),
) -> int:
    """`kubus get pods [NAME...]`: one row per pod (Deleted ones hidden unless ``show_deleted``;
    only those whose labels ``selector`` matches, when given), or the v1 Pods. Exit status 1
    when a name is not found (each said on stderr), else 0."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_store(settings) as store:
        listing, missing = await pod_listing(
            store, namespace=namespace, output=shape, names=names, show_deleted=show_deleted, selector=selector
        )
    return report(listing, missing, out, shape, empty=_no_pods(namespace))


def _pod_row(p: PodRecord, now: float, wait: PermitState | None, output: str) -> list[str]:
    # The reason of the last failure is kept after the pod moves on; show it while it matters.
    showing_reason = p.phase in (PodPhase.PENDING, PodPhase.FAILED)
    # A pod waiting on Permit holds its reservation: Reserved, and what it waits for.
    phase = f"Waiting ({', '.join(sorted(wait.pending))})" if wait is not None else str(p.phase)
    row = [
        p.namespace,
        p.name,
        phase,
        p.node or "<none>",
        format_devices(p.gpu_devices),
        format_age(now - p.created_at) if p.created_at else "-",
        (p.reason if showing_reason else "") or "-",
    ]
    if output == "wide":
        row += [p.profile, str(p.attempts), (p.message if showing_reason else "") or "-"]
    return row


_EVENT_PHASES = {
    EventKind.POD_ACCEPTED.value: PodPhase.PENDING,
    EventKind.POD_UNSCHEDULABLE.value: PodPhase.PENDING,
    EventKind.POD_UNRESERVED.value: PodPhase.PENDING,
    EventKind.POD_BOUND.value: PodPhase.BOUND,
    EventKind.POD_RUNNING.value: PodPhase.RUNNING,
    EventKind.POD_FINISHED.value: PodPhase.SUCCEEDED,
    EventKind.POD_DELETED.value: PodPhase.DELETED,
}
"""The phase each pod event announces (a finished pod: Succeeded, or Failed as Redis says)."""


WATCH_HEARTBEAT = 2.0
"""Seconds between the server's heartbeats to `kubus get pods -w`: two missed ones and the watch
resumes its consumer where it left off."""


async def watch_pods(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    output: str | Output,
    selector: LabelSelector | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """`kubus get pods -w`: after the list, one line for each change of a pod (of the namespace,
    matching ``selector``) as the services announce it on the bus, read again from Redis, until
    ``stop`` is set or the command is interrupted (Ctrl-C: exit 0). A JSON/YAML watch prints one
    Pod per change (YAML documents separated by ---)."""
    shape = output if isinstance(output, Output) else output_of(output)
    changed: asyncio.Queue[ClusterEvent] = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        try:
            event = decode(ClusterEvent, msg.data)
        except ValueError:
            return  # not ours to judge here: the queue counts and reports bad events
        for one in expand(event):  # a pods.* event: a line for each of its pods
            changed.put_nowait(one)

    stop = stop or asyncio.Event()
    async with open_bus(settings, "kubus-cli-watch") as (nc, js), open_store(settings) as store:
        # An ordered consumer on the events stream, not a plain subscription: after a lost
        # connection nats-py notices the gap (sequence or missed heartbeats) and resumes from the
        # last event it delivered, so the changes announced meanwhile are shown too.
        sub = await js.subscribe(
            POD_EVENTS,
            stream=EVENTS_STREAM.name,
            config=ConsumerConfig(filter_subjects=[POD_EVENTS, POD_BATCH_EVENTS]),
            cb=on_event,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            idle_heartbeat=WATCH_HEARTBEAT,
        )
        await settle(nc)  # subscribed before the list is read: no change between them is missed
        try:
            await get_pods(settings, out, namespace=namespace, output=shape, selector=selector)
            out.flush()
            stopping = asyncio.create_task(stop.wait())
            while not stop.is_set():
                getting = asyncio.create_task(changed.get())
                done, _ = await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if getting not in done:
                    getting.cancel()
                    break
                event = getting.result()
                pod_ns, _, name = event.name.partition("/")
                phase = _EVENT_PHASES.get(event.kind)
                if phase is None or (namespace is not None and pod_ns != namespace):
                    continue
                record = await store.find_pod(pod_ns, name)
                if record is None or (selector is not None and not selector_matches(selector, _pod_labels(record))):
                    continue
                # the pod as the event found it: by the time Redis is read it may have moved on
                if phase is PodPhase.SUCCEEDED and record.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
                    phase = record.phase
                record = replace(record, phase=phase, node=event.node or record.node)
                row = _pod_row(record, time.time(), None, shape.format)
                change = Listing("pod", [], [(pod_object(record), row if namespace is None else row[1:])])
                change.colour_column, change.single = (2 if namespace is None else 1), True
                if shape.format == "yaml":
                    out.write("---\n")
                print_listing(change, out, replace(shape, headers=False))
                out.flush()
        finally:
            await sub.unsubscribe()
    return 0
