"""Preemption's potential victims: a node's pods of lower priority, most important first, with
what they add to the table's usage columns (`Deltas`), remembered per node while it is unchanged
(`VictimCache`), and a what-if copy of the usage columns they are taken off and put back on
(`Shadow`)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kubus.api.objects import PODS
from kubus.kernels.backend import Array
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo, gpu_memory_taken

__all__ = ["Deltas", "Shadow", "VictimCache", "Victims", "by_importance"]


@dataclass(frozen=True, slots=True)
class Deltas:
    """What pods add to the usage columns of their rows, one column (index) per pod: as
    NodeInfo.add_pod accounts them and NodeTable writes them."""

    m: np.ndarray
    """[resources + 2, pods]: the requests by `NodeTable.resource_index` (1 for `pods`), then
    the non-zero cpu and memory."""
    gpus: dict[int, list[tuple[int, int]]]
    """Pod index -> (device, memory it takes there) for the pods that hold GPUs."""

    @classmethod
    def of(cls, table: NodeTable, pods: Sequence[PodInfo], rows: Sequence[int]) -> Deltas:
        """The deltas of ``pods``, each on the node of the same place in ``rows``."""
        n = len(pods)
        r = len(table.resources)
        m = np.zeros((r + 2, n), dtype=np.int64)
        requests = [info.requests for info in pods]
        named: set[str] = set().union(*requests)
        for name, i in table.resource_index.items():
            if name == PODS:
                m[i] = 1
            elif name in named:  # (a resource none of them requests stays 0)
                m[i] = [q.get(name, 0) for q in requests]
        m[r] = [info.non_zero_cpu for info in pods]
        m[r + 1] = [info.non_zero_memory for info in pods]
        gpus: dict[int, list[tuple[int, int]]] = {}
        for j, info in enumerate(pods):
            if info.gpu is not None and info.gpu_devices:
                node = table.node_info(rows[j])
                devices = node.node.gpus
                gpus[j] = [
                    (d, gpu_memory_taken(info.gpu, devices[d].memory))
                    for d in info.gpu_devices
                    if 0 <= d < len(node.gpu_free_memory)
                ]
        return cls(m, gpus)

    def sums(self, starts: Sequence[int]) -> Deltas:
        """The deltas of consecutive runs of pods, each starting at ``starts`` (ascending, each
        run non-empty, the last to the end)."""
        at = np.asarray(starts, dtype=np.intp)
        gpus: dict[int, list[tuple[int, int]]] = {}
        if self.gpus:
            run = np.searchsorted(at, np.fromiter(self.gpus, dtype=np.intp), side="right") - 1
            for k, entries in zip(run.tolist(), self.gpus.values(), strict=True):
                gpus.setdefault(k, []).extend(entries)
        return Deltas(np.add.reduceat(self.m, at, axis=1), gpus)

    def split(self, starts: Iterable[int]) -> list[Deltas]:
        """The deltas cut into consecutive runs, each starting at ``starts`` (ascending, the
        first at 0, the last to the end)."""
        at = np.fromiter(starts, dtype=np.intp)
        bounds = [*at.tolist(), self.m.shape[1]]
        gpus: list[dict[int, list[tuple[int, int]]]] = [{} for _ in range(len(at))]
        if self.gpus:
            run = np.searchsorted(at, np.fromiter(self.gpus, dtype=np.intp), side="right") - 1
            for k, (j, entries) in zip(run.tolist(), self.gpus.items(), strict=True):
                gpus[k][j - bounds[k]] = entries
        return [Deltas(self.m[:, s:e], g) for s, e, g in zip(bounds, bounds[1:], gpus, strict=False)]

    @staticmethod
    def concat(parts: Sequence[Deltas]) -> Deltas:
        """``parts`` side by side, in order."""
        gpus: dict[int, list[tuple[int, int]]] = {}
        at = 0
        for part in parts:
            if part.gpus:
                for j, entries in part.gpus.items():
                    gpus[at + j] = entries
            at += part.m.shape[1]
        return Deltas(np.concatenate([p.m for p in parts], axis=1), gpus)

    def take(self, pods: np.ndarray) -> Deltas:
        """The deltas of the pods at ``pods``, in that order."""
        gpus = {k: self.gpus[j] for k, j in enumerate(pods.tolist()) if j in self.gpus} if self.gpus else {}
        return Deltas(self.m[:, pods], gpus)


@dataclass(frozen=True, slots=True)
class Victims:
    """One node's potential victims for one priority (its pods of lower priority) and what the
    dry run derives from them: valid while the node's NodeInfo object keeps its generation."""

    info: NodeInfo
    name: str
    """The node's."""
    generation: int
    priority: int
    resources: int
    """len(table.resources) when made."""
    pods: tuple[PodInfo, ...]
    """In the node's order."""
    priorities: np.ndarray
    """Each pod's priority (int64), in the node's order."""
    starts: np.ndarray
    """Each pod's `start_time` (float64, inf when unknown), in the node's order."""
    by_importance: tuple[int, ...]
    """Indices into ``pods``, most important first (`importance`; equals keep their order)."""
    deltas: Deltas
    """One column per pod."""
    total: Deltas
    """One column: all of them."""


class VictimCache:
    """Row -> its `Victims` as a dry run last found them, for one node table: the nodes a
    preemption did not change are not gone through again by the next one."""

    def __init__(self) -> None:
        self._table: weakref.ref[NodeTable] | None = None
        self._rows: dict[int, Victims] = {}
        self._totals = np.zeros((0, 0), dtype=np.int64)
        """Column ``row``: the ``total`` of the row's `Victims` (its m), for `totals`."""
        self._gpu_totals: dict[int, list[tuple[int, int]]] = {}

    def of(self, table: NodeTable, rows: list[int], priority: int) -> list[Victims]:
        """The `Victims` of each row (a node) for a pod of ``priority``."""
        resources = len(table.resources)
        if self._table is None or self._table() is not table:
            self._table = weakref.ref(table)
            self._rows = {}
            self._gpu_totals = {}
        if self._totals.shape[0] != resources + 2 or self._totals.shape[1] < table.rows:
            self._totals = np.zeros((resources + 2, max(table.rows, 64)), dtype=np.int64)
            self._rows = {}
            self._gpu_totals = {}
        cache = self._rows
        infos = table.infos
        out: list[Victims | None] = []
        missing: list[tuple[int, int, NodeInfo, list[PodInfo]]] = []
        for k, row in enumerate(rows):
            info = infos[row]
            assert info is not None
            v = cache.get(row)
            if (
                v is None
                or v.info is not info
                or v.generation != info.generation
                or v.priority != priority
                or v.resources != resources
            ):
                lower = [p for p in info.pods.values() if p.pod.spec.priority < priority]
                missing.append((k, row, info, lower))
                v = None
            out.append(v)
        if missing:
            pods = [p for *_, lower in missing for p in lower]
            spans: dict[int, tuple[int, int]] = {}
            at = 0
            for k, _, _, lower in missing:
                spans[k] = (at, at + len(lower))
                at += len(lower)
            with_pods = {k: span for k, span in spans.items() if span[1] > span[0]}
            empty = Deltas.of(table, [], [])
            parts: dict[int, tuple[Deltas, Deltas]] = {}
            if with_pods:
                deltas = Deltas.of(table, pods, [row for _, row, _, lower in missing for _ in lower])
                starts = [s for s, _ in with_pods.values()]
                each = deltas.split(starts)
                totals = deltas.sums(starts).split(range(len(with_pods)))
                parts = {k: (d, t) for k, d, t in zip(with_pods, each, totals, strict=True)}
            orders, priorities, start_times = by_importance(with_pods, pods)
            for k, row, info, lower in missing:
                start, end = spans[k]
                d, t = parts.get(k, (empty, empty))
                order = tuple(j - start for j in orders.get(k, ()))
                v = cache[row] = Victims(
                    info, info.name, info.generation, priority, resources, tuple(lower),
                    priorities[start:end], start_times[start:end], order, d, t,
                )  # fmt: skip
                out[k] = v
                self._totals[:, row] = t.m[:, 0] if t.m.shape[1] else 0
                if t.gpus:
                    self._gpu_totals[row] = t.gpus[0]
                else:
                    self._gpu_totals.pop(row, None)
        return [v for v in out if v is not None]

    def totals(self, rows: list[int]) -> Deltas:
        """The ``total`` of each row's `Victims` (as `of` last made them), side by side."""
        gpus = self._gpu_totals
        at = {k: gpus[row] for k, row in enumerate(rows) if row in gpus} if gpus else {}
        return Deltas(self._totals[:, rows], at)


class Shadow:
    """The table's usage columns (`USAGE_COLUMNS`) as a what-if: a copy that pods are taken off
    and put back on (`change`) without touching the table, for the plugins that read pods only
    through those arrays. Rows it changed stay changed: the dry run examines each row once."""

    def __init__(self, table: NodeTable) -> None:
        self.base = table.view()
        self.host = table.usage_copy()
        self.backend = table.backend
        self._device: dict[str, Array] | None = None
        self._dirty: set[int] = set()
        self._view: TableView | None = None

    def change(self, rows: np.ndarray, deltas: Deltas, sign: int) -> None:
        """Add (``sign`` 1) or take off (-1) ``deltas``, column k on ``rows[k]`` (distinct rows)."""
        if not len(rows):
            return
        h = self.host
        m = deltas.m if sign > 0 else -deltas.m
        r = len(m) - 2
        h["req"][:, rows] += m[:r]
        h["nz_cpu"][rows] += m[r]
        h["nz_mem"][rows] += m[r + 1]
        for k, entries in deltas.gpus.items():
            row = int(rows[k])
            for device, memory in entries:
                h["gpu_free"][row, device] -= sign * memory
                h["gpu_pods"][row, device] += sign
        if self.backend.on_device:
            self._dirty.update(rows.tolist())
            self._view = None

    def view(self) -> TableView:
        """The table's view with the copy in place of its usage columns."""
        if self._view is not None:
            return self._view
        if not self.backend.on_device:
            self._view = self.base.replacing(dict(self.host))  # the arrays it changes in place
            return self._view
        xp = self.backend.xp
        if self._device is None:
            self._device = {k: xp.asarray(v) for k, v in self.host.items()}
        elif self._dirty:
            rows = np.fromiter(self._dirty, dtype=np.intp, count=len(self._dirty))
            d_rows = xp.asarray(rows)
            for k, v in self.host.items():
                if k == "req":
                    self._device[k][:, d_rows] = xp.asarray(v[:, rows])
                else:
                    self._device[k][d_rows] = xp.asarray(v[rows])
        self._dirty.clear()
        self._view = self.base.replacing(self._device)
        return self._view


def by_importance(
    spans: dict[int, tuple[int, int]], pods: Sequence[PodInfo]
) -> tuple[dict[int, list[int]], np.ndarray, np.ndarray]:
    """For each run ``pods[start:end]`` of ``spans`` (together, ``pods`` in order): its indices
    most important first (`importance`; equals keep their order), as ``sorted(range(start, end),
    key=...)``; and every pod's priority and `start_time`."""
    if not spans:
        return {}, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    n = len(spans)
    starts = np.fromiter((s for s, _ in spans.values()), dtype=np.intp, count=n)
    lengths = np.fromiter((e - s for s, e in spans.values()), dtype=np.intp, count=n)
    ends = np.cumsum(lengths)
    run = np.repeat(np.arange(n), lengths)
    at = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
    chosen = [pods[j] for j in at.tolist()]
    priority = np.fromiter((p.pod.spec.priority for p in chosen), dtype=np.int64, count=len(chosen))
    started = np.fromiter((p.start_time for p in chosen), dtype=np.float64, count=len(chosen))
    started = np.where(started > 0, started, np.inf)  # `start_time`
    ordered = at[np.lexsort((at, started, -priority, run))].tolist()
    bounds = ends.tolist()
    runs = {i: ordered[b - e : b] for i, e, b in zip(spans, lengths.tolist(), bounds, strict=True)}
    return runs, priority, started
