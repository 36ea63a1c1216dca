"""`kubus apply`, `kubus get`, `kubus top` and `kubus delete`: the cluster as kubectl users know it.

apply validates every manifest locally first (nothing is stored or published if one is wrong),
stores the Namespaces, PriorityClasses, PodDisruptionBudgets, workloads (Services,
ReplicationControllers, ReplicaSets, StatefulSets) and PodGroups in Redis, then
publishes each pod on its own to ``kubus.pods.submit``; get and top read Redis (get prints v1
objects, `kubus.cli.kube_objects`, or tables, `kubus.cli.output`); delete publishes a
PodDeletion and waits until the queue has recorded it.

Each command lives in a module of its own, re-exported here: `kubus.cli.applying` (apply),
`kubus.cli.submitting` (the pods a client publishes), `kubus.cli.pods`, `kubus.cli.nodes` and
`kubus.cli.events` (get), `kubus.cli.top`, `kubus.cli.deleting` and `kubus.cli.not_found`
(kubectl's NotFound). This module holds `get_resources`, the `get` of several types at once.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from kubus.api.objects import LabelSelector
from kubus.api.quantity import format_bytes, format_cpu
from kubus.cli.applying import APPLY_TIMEOUT, ApplyObjects, apply, read_apply_manifests, read_pod_manifests
from kubus.cli.connect import open_store
from kubus.cli.deleting import delete_objects, delete_pod, delete_pods
from kubus.cli.events import event_age, event_listing, get_events
from kubus.cli.nodes import get_nodes, node_listing, nodes_in_use
from kubus.cli.not_found import NotFoundError, not_found, report
from kubus.cli.output import Listing, Output, format_age, print_listing, write_table
from kubus.cli.pods import POD_COLUMNS, POD_WIDE_COLUMNS, WATCH_HEARTBEAT, get_pods, list_pods, pod_listing, watch_pods
from kubus.cli.submitting import SubmitManifest, pod_manifests, submit
from kubus.cli.top import GPU_BAR_WIDTH, gpu_bar, top_nodes, top_pods
from kubus.core.settings import ConnectionSettings

__all__ = [
    "APPLY_TIMEOUT",
    "GPU_BAR_WIDTH",
    "POD_COLUMNS",
    "POD_WIDE_COLUMNS",
    "WATCH_HEARTBEAT",
    "ApplyObjects",
    "NotFoundError",
    "SubmitManifest",
    "apply",
    "delete_objects",
    "delete_pod",
    "delete_pods",
    "event_age",
    "event_listing",
    "format_age",
    "format_bytes",
    "format_cpu",
    "get_events",
    "get_nodes",
    "get_pods",
    "get_resources",
    "gpu_bar",
    "list_pods",
    "node_listing",
    "nodes_in_use",
    "not_found",
    "pod_listing",
    "pod_manifests",
    "read_apply_manifests",
    "read_pod_manifests",
    "report",
    "submit",
    "top_nodes",
    "top_pods",
    "watch_pods",
    "write_table",
]


async def get_resources(
    settings: ConnectionSettings,
    out: TextIO,
    groups: Sequence[tuple[str, Sequence[str]]],
    *,
    namespace: str | None,
    output: Output,
    show_deleted: bool = False,
    selector: LabelSelector | None = None,
) -> int:
    """`kubus get pod/web node/sim-00001 ...`: each resource's listing (`pod_listing`,
    `node_listing`, `event_listing`), tables one after the other (a blank line between), or one
    v1 List of them all for -o json|yaml|jsonpath|name, as kubectl prints them. Exit status 1
    when a name is not found."""
    listings: list[Listing] = []
    missing: list[str] = []
    async with open_store(settings) as store:
        for plural, names in groups:
            if plural == "pods":
                found = await pod_listing(
                    store, namespace=namespace, output=output, names=names, show_deleted=show_deleted, selector=selector
                )
            elif plural == "nodes":
                found = await node_listing(store, output=output, names=names, selector=selector)
            else:
                found = await event_listing(store, namespace=namespace, output=output, names=names)
            listings.append(found[0])
            missing += found[1]
    if output.table or output.format == "custom-columns":
        shown = [listing for listing in listings if listing.rows]
        for i, listing in enumerate(shown):
            if i:
                out.write("\n")
            print_listing(listing, out, output)
    else:
        every = Listing("", [], [row for listing in listings for row in listing.rows])
        if every.rows or not missing:
            print_listing(every, out, output)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0
