"""Simulated nodes and pod lifetimes: one agent process plays N nodes of a template.

Node ``i`` (0-based) of a simulation is the template renamed ``<prefix><i:05d>`` (``sim-00042``),
with its ``kubernetes.io/hostname`` label and a uid derived from that name, so a restarted
simulation registers exactly the same nodes. A simulated pod runs for the configured duration,
stretched by a jitter drawn from its uid (the same after a restart), then succeeds.

Zones: a template annotated ``kubus.io/simulated-zones: "moon-1,moon-2,moon-3"`` spreads its
nodes over those zones round-robin: node ``i`` gets the label
``topology.kubernetes.io/zone: zones[i % len(zones)]`` (replacing any zone label of the
template; the annotation stays on the nodes). Entries are comma-separated and trimmed; each must
be a non-empty label value; a zone listed twice gets twice the nodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace

from kubus.api.objects import Node
from kubus.api.synthetic import ZONE_LABEL, simulated_zones
from kubus.gpu_agent.inventory import renamed

__all__ = [
    "MAX_SIMULATED_NODES",
    "pod_duration",
    "simulated_node_names",
    "simulated_nodes",
]

MAX_SIMULATED_NODES = 100_000
"""The most nodes one agent process simulates (kubus' cluster size)."""


def simulated_node_names(count: int, prefix: str = "sim-") -> Iterator[str]:
    """The names of a simulation's nodes: ``<prefix>00000`` ... in order."""
    return (f"{prefix}{i:05d}" for i in range(count))


def simulated_nodes(template: Node, count: int, prefix: str = "sim-") -> list[Node]:
    """``count`` copies of ``template`` named by `simulated_node_names`, spread over the zones of
    `simulated_zones` (node ``i`` in ``zones[i % len(zones)]``). Raises ValueError for a count
    outside 1..MAX_SIMULATED_NODES, a prefix that makes invalid node names or a bad zone list."""
    if not 1 <= count <= MAX_SIMULATED_NODES:
        raise ValueError(f"--simulate: expected 1 to {MAX_SIMULATED_NODES} nodes, got {count}")
    zones = simulated_zones(template)
    nodes = [renamed(template, name) for name in simulated_node_names(count, prefix)]
    if not zones:
        return nodes
    return [_in_zone(node, zones[i % len(zones)]) for i, node in enumerate(nodes)]


def _in_zone(node: Node, zone: str) -> Node:
    meta = replace(node.metadata, labels={**node.metadata.labels, ZONE_LABEL: zone})
    return replace(node, metadata=meta)


def pod_duration(uid: str, base: float, jitter: float = 0.0) -> float:
    """How long the pod ``uid`` runs, in seconds: ``base`` stretched by a factor in
    ``[1 - jitter, 1 + jitter]`` drawn deterministically from the uid. 0 (``base`` <= 0) means
    forever. Raises ValueError for a jitter outside [0, 1]."""
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"pod duration jitter: expected a fraction in [0, 1], got {jitter}")
    if base <= 0:
        return 0.0
    if jitter == 0:
        return base
    draw = int.from_bytes(hashlib.blake2b(uid.encode(), digest_size=8).digest(), "big") / 2**64
    return max(base * (1.0 + jitter * (2.0 * draw - 1.0)), 1e-3)  # never 0: that would mean forever
