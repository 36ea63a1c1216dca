"""`kubus get events`: every pod's events, identical ones collapsed with their count, as kubectl
shows them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TextIO

from kubus.cli.connect import open_store
from kubus.cli.kube_objects import CollapsedEvent, collapse_events, event_object
from kubus.cli.not_found import NotFoundError, not_found, report
from kubus.cli.output import Listing, Output, format_age, output_of
from kubus.cli.pods import list_pods
from kubus.core.settings import ConnectionSettings
from kubus.store.cluster_state import ClusterState

__all__ = ["event_age", "event_listing", "get_events"]


def event_age(event: CollapsedEvent, now: float) -> str:
    """When an event was seen, as kubectl writes it: '12s', or '3s (x4 over 40s)' for one seen
    several times."""
    if event.count > 1:
        return f"{format_age(now - event.last)} (x{event.count} over {format_age(now - event.first)})"
    return format_age(now - event.first)


async def event_listing(
    store: ClusterState, *, namespace: str | None, output: Output, pod: str | None = None, names: Sequence[str] = ()
) -> tuple[Listing, list[str]]:
    """Every pod's events (of one namespace unless None; of one pod with ``pod``; those named
    ``names``), identical ones collapsed with their count, by when they were last seen, each as
    a v1 Event with its table row. Raises NotFoundError for an unknown ``pod``."""
    if pod is not None:
        record = await store.find_pod(namespace or "default", pod)
        if record is None:
            raise NotFoundError(not_found("pods", pod, namespace or "default"))
        pods = [record]
    else:
        pods = await list_pods(store, namespace)
    histories = await store.events_of([p.uid for p in pods])
    now = time.time()
    found = sorted(
        ((c, p) for p, history in zip(pods, histories, strict=True) for c in collapse_events(history)),
        key=lambda cp: (cp[0].last, cp[0].first),
    )
    header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    if output.format == "wide":
        header += ["SOURCE", "FIRST SEEN", "COUNT", "NAME"]
    across = namespace is None and pod is None
    if across:
        header.insert(0, "NAMESPACE")
    listing = Listing("event", header, colour_column=2 if across else 1, single=len(names) == 1)
    wanted = set(names)
    for c, p in found:
        obj = event_object(c, p)
        if wanted and obj["metadata"]["name"] not in wanted:
            continue
        wanted.discard(obj["metadata"]["name"])
        row = [event_age(c, now), c.type, c.reason, f"pod/{p.name}", c.message]
        if output.format == "wide":
            row += [c.source or "-", format_age(now - c.first), str(c.count), obj["metadata"]["name"]]
        listing.rows.append((obj, [p.namespace, *row] if across else row))
    missing = [not_found("events", name, namespace) for name in names if name in wanted]
    return listing, missing


async def get_events(
    settings: ConnectionSettings,
    out: TextIO,
    *,
    namespace: str | None,
    pod: str | None,
    output: str | Output,
    names: Sequence[str] = (),
) -> int:
    """`kubus get events`: every pod's events (of one namespace unless None; of one pod with
    ``pod``), identical ones collapsed as kubectl shows them, by when they were last seen.
    Raises NotFoundError for an unknown ``pod``; exit status 1 when one of ``names`` is not
    found."""
    shape = output if isinstance(output, Output) else output_of(output)
    async with open_store(settings) as store:
        listing, missing = await event_listing(store, namespace=namespace, output=shape, pod=pod, names=names)
    return report(listing, missing, out, shape, empty="No events found.")
