"""Plug a plugin written one node at a time, the kube-scheduler way, into the vectorized framework.

A nodewise plugin has kube's signatures: `filter(state, pod, node_info) -> Status`,
`score(state, pod, node_info) -> int`, `pre_filter(state, pod, node_infos)`,
`pre_score(state, pod, node_infos)`, `normalize_score(state, pod, {node: score})`,
`reserve(state, pod, node_info)`. `nodewise_spec(cls)` registers such a class; the framework
then calls it once per node. Same results as a vectorized plugin, at Python speed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kubus.api.objects import Pod
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.interface import FilterResult, PluginInstance, Rejection, Rows
from kubus.framework.registry import PluginSpec, extension_points_of
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo


def _with_snapshot(state: CycleState, table: NodeTable) -> None:
    """Nodewise plugins find every node of the cycle in the state, as kube's reach its snapshot."""
    if state.get(SNAPSHOT_STATE_KEY) is None:
        state.write(SNAPSHOT_STATE_KEY, list(table.node_infos()))


def _rows(view: TableView, rows: Rows) -> np.ndarray:
    if isinstance(rows, slice):
        return np.arange(view.table.rows)[rows]
    return view.table.backend.to_host(rows)


class NodewisePlugin:
    """A vectorized face on a nodewise plugin instance."""

    def __init__(self, inner: PluginInstance) -> None:
        self.inner = inner
        self.name: str = inner.name
        self.placement_sensitive: bool = getattr(inner, "placement_sensitive", True)

    # Any: whatever the wrapped plugin has under that name.
    def __getattr__(self, name: str) -> Any:
        # extension points that see no node (pre_enqueue, less, permit, bind...) pass straight through
        return getattr(self.inner, name)

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[frozenset[str] | None, Status]:
        _with_snapshot(state, table)
        result: tuple[frozenset[str] | None, Status] = self.inner.pre_filter(state, pod, list(table.node_infos()))
        return result

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult:
        _with_snapshot(state, view.table)
        rows_h = _rows(view, rows)
        passed = np.zeros(len(rows_h), dtype=bool)
        by_reason: dict[tuple[str, Code], np.ndarray] = {}
        for i, row in enumerate(rows_h):
            info = view.table.infos[row]
            if info is None:
                continue
            status = self.inner.filter(state, pod, info)
            if status.is_success:
                passed[i] = True
                continue
            for reason in status.reasons or (status.code.name,):
                by_reason.setdefault((reason, status.code), np.zeros(len(rows_h), dtype=bool))[i] = True
        xp = view.xp
        rejections = tuple(Rejection(r, xp.asarray(m), code) for (r, code), m in by_reason.items())
        return FilterResult(xp.asarray(passed), rejections)

    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        _with_snapshot(state, table)
        status: Status = self.inner.pre_score(state, pod, list(table.node_infos()))
        return status

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        _with_snapshot(state, view.table)
        infos: list[NodeInfo | None] = view.table.infos
        out = [0 if infos[r] is None else int(self.inner.score(state, pod, infos[r])) for r in _rows(view, rows)]
        return view.xp.asarray(np.array(out, dtype=np.int64))

    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        normalize = getattr(self.inner, "normalize_score", None)
        if normalize is None:
            return scores
        # kube passes (node, score) pairs; the position stands in for the node name
        values = {str(i): int(v) for i, v in enumerate(np.asarray(xp.asnumpy(scores) if xp is not np else scores))}
        normalize(state, pod, values)
        return xp.asarray(np.array([values[str(i)] for i in range(len(values))], dtype=np.int64))

    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        status: Status = self.inner.reserve(state, pod, node_info)
        return status

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        unreserve = getattr(self.inner, "unreserve", None)
        if unreserve is not None:
            unreserve(state, pod, node_info)


def nodewise_spec(plugin_class: type, args_type: type | None = None) -> PluginSpec:
    """A registry entry for a nodewise plugin class: its own extension points, adapted instances."""
    base = PluginSpec.from_class(plugin_class, args_type)

    def factory(args: object, handle: object) -> NodewisePlugin:
        adapted = NodewisePlugin(base.factory(args, handle))
        if not hasattr(plugin_class, "normalize_score"):
            adapted.normalize_score = None  # type: ignore[assignment,method-assign]
        return adapted

    return PluginSpec(base.name, factory, extension_points_of(plugin_class), base.args_type)
