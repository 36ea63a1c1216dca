"""Why a pod fits no node: kube's FitError message and reason histogram, each node's rejection
(the first Filter plugin that rejected it, as kube's RunFilterPlugins stops there), and the nodes
where removing pods might help (preemption's candidates)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from kubus.framework.pod_classes import PodClass
from kubus.framework.results import NodeExplain
from kubus.framework.runtime import Framework, go_list
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable

__all__ = [
    "NO_NODES_IN_CLUSTER",
    "NO_NODE_AVAILABLE",
    "diagnose",
    "fit_error_message",
    "plugin_reason",
    "plugins_of",
    "resolvable",
]

NO_NODE_AVAILABLE = "0/{} nodes are available"
NO_NODES_IN_CLUSTER = "no nodes available to schedule pods"


def fit_error_message(num_nodes: int, reasons: Counter[str] | dict[str, int]) -> str:
    """kube's FitError.Error(): "0/N nodes are available: <count reason>, ... ." (sorted)."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    msg = NO_NODE_AVAILABLE.format(num_nodes) + ":"
    if parts:
        msg += " " + ", ".join(parts) + "."
    return msg


def plugin_reason(plugin: str, reasons: Sequence[str]) -> str:
    """How a node's rejection reads in explain: "<Plugin>: reason, reason" (no plugin: the reasons)."""
    text = ", ".join(reasons)
    return f"{plugin}: {text}" if plugin else text


def plugins_of(status: Status) -> tuple[str, ...]:
    return (status.plugin,) if status.plugin else ()


def diagnose(
    framework: Framework, table: NodeTable, cls: PodClass, per_node: dict[str, NodeExplain] | None
) -> tuple[str, dict[str, int], tuple[str, ...]]:
    """Run the filters over every candidate node and attribute each rejection to the first
    plugin that rejected the node, as kube's RunFilterPlugins stops at the first failure.
    Returns the message, the reason histogram and the plugins that rejected some node; fills
    ``per_node`` (node name -> its rejection, or "ok") when given."""
    backend = table.backend
    alive = backend.to_host(cls.candidates).copy()
    reasons: Counter[str] = Counter()
    node_reasons: dict[int, str] = {}
    plugins: set[str] = set()
    if cls.narrowed_by:
        # kube gives nodes a PreFilter result left out one status of their own
        reason = f"node(s) didn't satisfy plugin(s) {go_list(cls.narrowed_by)}"
        left_out = table.valid_rows()[~alive[table.valid_rows()]]
        if len(left_out):
            plugins.update(cls.narrowed_by)
            reasons[reason] += len(left_out)
            text = plugin_reason(", ".join(cls.narrowed_by), [reason])
            node_reasons.update((int(r), text) for r in left_out)
    for plugin, res in framework.run_filter(cls.state, cls.pod, table.view()):
        if res is None:
            continue
        passed = backend.to_host(res.passed)
        rejected = alive & ~passed
        if rejected.any():
            plugins.add(plugin.name)
            per_row: dict[int, list[str]] = {}
            for rej in res.rejections:
                hit = rejected & backend.to_host(rej.mask)
                count = int(hit.sum())
                if count:
                    reasons[rej.reason] += count
                    if per_node is not None:
                        for r in np.flatnonzero(hit):
                            per_row.setdefault(int(r), []).append(rej.reason)
            for row, rs in per_row.items():
                node_reasons[row] = plugin_reason(plugin.name, rs)
        alive &= passed
    message = fit_error_message(len(table), reasons)
    if per_node is not None:
        for r in table.valid_rows():
            name = table.node_info(int(r)).name
            per_node[name] = NodeExplain(node_reasons.get(int(r), "ok"))
    return message, dict(reasons), tuple(sorted(plugins))


def resolvable(framework: Framework, table: NodeTable, cls: PodClass) -> np.ndarray:
    """Host bool per row: nodes where removing pods might help (kube's
    nodesWherePreemptionMightHelp): a node, not rejected UnschedulableAndUnresolvable by the
    first filter that rejected it (nor left out by a PreFilter result)."""
    backend = table.backend
    valid = np.zeros(table.rows, dtype=bool)
    valid[table.valid_rows()] = True
    status = cls.status
    if not status.is_success:
        return valid if status.code is Code.UNSCHEDULABLE else np.zeros(table.rows, dtype=bool)
    alive = backend.to_host(cls.candidates).copy()
    result = alive.copy()
    for _, res in framework.run_filter(cls.state, cls.pod, table.view()):
        if res is None:
            continue
        rejected = alive & ~backend.to_host(res.passed)
        for rej in res.rejections:
            if rej.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                result &= ~(rejected & backend.to_host(rej.mask))
        alive &= ~rejected
    return result
