"""The node table: every node of the cluster as a structure of arrays, for vectorized plugins.

One row per node. NodeInfo objects (`kubus.kernels.nodeinfo`) are the per-node truth; the
arrays are derived from them and rewritten one row at a time when a node or a pod on it changes,
so placing a pod costs O(resources), not O(nodes). Rows of removed nodes are tombstoned
(`valid` False) and reused.

Columns:
- `alloc[r, row]`, `req[r, row]`: allocatable and requested per resource `r` (see `resources`);
  for `pods`, `req` is the number of pods on the node. Integers in base units. Resource-major,
  so one resource over all nodes is a contiguous vector.
- `nz_cpu`, `nz_mem`: the non-zero requests kube's scoring uses (missing requests counted at
  their defaults).
- `unschedulable`, `taint_set`: spec.unschedulable; an id into `taint_sets` (0 = untainted).
- labels: one int32 column per label key, values interned per key (0 = label absent).
- GPUs: `gpu_total`, `gpu_free` (bytes), `gpu_healthy`, `gpu_model` (interned, 0 = none),
  `gpu_pods` (pods holding the device), shaped [rows, max GPUs per node]; padding is unhealthy.
- `node_hash`: the seeded per-node hash the tie-break uses.

On a GPU (CuPy backend) the arrays live on the device; `view()` copies only rows changed since
the last view.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

import numpy as np

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.objects import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Node, Taint
from kubus.api.workloads import NO_WORKLOADS, Workloads
from kubus.kernels.backend import NUMPY, Array, Backend
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.kernels.pod_index import PodIndex
from kubus.kernels.tiebreak import node_tie_hash

BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)

# name -> (dtype, trailing shape kind): "r" per resource, "g" per GPU, "" scalar per row.
_COLUMNS: dict[str, tuple[type, str]] = {
    "valid": (np.bool_, ""),
    "alloc": (np.int64, "r"),
    "req": (np.int64, "r"),
    "nz_cpu": (np.int64, ""),
    "nz_mem": (np.int64, ""),
    "unschedulable": (np.bool_, ""),
    "taint_set": (np.int32, ""),
    "node_hash": (np.uint64, ""),
    "gpu_count": (np.int32, ""),
    "gpu_total": (np.int64, "g"),
    "gpu_free": (np.int64, "g"),
    "gpu_healthy": (np.bool_, "g"),
    "gpu_model": (np.int32, "g"),
    "gpu_pods": (np.int32, "g"),
}


USAGE_COLUMNS = ("req", "nz_cpu", "nz_mem", "gpu_free", "gpu_pods")
"""The columns the pods on a node change (`NodeTable.assume` / `forget`); the others are the
node's own."""


def _at(column: str, rows: slice | Array) -> Array:
    """Index of `rows` in a column: resource columns are resource-major."""
    return (slice(None), rows) if _COLUMNS[column][1] == "r" else rows


_V = TypeVar("_V")
_N = TypeVar("_N")


class Interned(Generic[_V, _N]):
    """Values (strings, taint sets) of type _V to small integers, 0 reserved for "none" (`none`,
    of type _N, at 0 of `values` and not in `ids`)."""

    __slots__ = ("ids", "values")

    def __init__(self, none: _N) -> None:
        self.ids: dict[_V, int] = {}
        self.values: list[_V | _N] = [none]

    def id(self, value: _V) -> int:
        i = self.ids.get(value)
        if i is None:
            i = self.ids[value] = len(self.values)
            self.values.append(value)
        return i

    def __len__(self) -> int:
        return len(self.values)


JOURNAL_LIMIT = 50_000
"""Entries `NodeTable.journal` holds at most before it is turned off."""


class TableView:
    """The table's arrays on the backend, consistent as of one `NodeTable.view()` call."""

    def __init__(self, table: NodeTable, arrays: dict[str, Array], labels: dict[str, Array]) -> None:
        self.table = table
        self.xp = table.backend.xp
        self._arrays = arrays
        self._labels = labels
        # the columns as plain attributes (view.alloc, view.req, ...): kernels read them many
        # times per decision, and an instance attribute is found without a __getattr__ call
        self.__dict__.update(arrays)

    def __getattr__(self, name: str) -> Array:
        # Reached only for a name that is not a column; declared so that type checkers know
        # the columns (set in __init__) are there.
        raise AttributeError(name)

    def label(self, key: str) -> Array | None:
        """The interned column of label `key`, or None when no node has the key."""
        return self._labels.get(key)

    def replacing(self, arrays: dict[str, Array]) -> TableView:
        """This view with some arrays replaced (same names, shapes and backend), the others
        shared: e.g. a what-if of the usage columns (`USAGE_COLUMNS`)."""
        return TableView(self.table, {**self._arrays, **arrays}, self._labels)


class NodeTable:
    """All nodes as arrays, plus their NodeInfos. Not thread-safe: one scheduling loop owns it."""

    def __init__(self, backend: Backend = NUMPY, *, seed: int = 0, capacity: int = 64) -> None:
        self.backend = backend
        self.seed = seed
        self.resources: list[str] = list(BASE_RESOURCES)
        self.resource_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.infos: list[NodeInfo | None] = []
        self.row_of: dict[str, int] = {}
        self._free_rows: list[int] = []
        self.taint_sets: Interned[tuple[Taint, ...], tuple[Taint, ...]] = Interned(())
        self.taint_sets.values[0] = ()
        self.taint_sets.ids[()] = 0
        self.label_values: dict[str, Interned[str, None]] = {}
        self.gpu_models: Interned[str, None] = Interned(None)
        self.images: dict[str, dict[int, int]] = {}
        """Image name as the node reports it -> {row: size in bytes} for nodes that have it."""
        self.port_rows: dict[tuple[str, int], set[int]] = {}
        """(protocol, hostPort) -> rows where some pod uses that host port."""
        self.pods = PodIndex()
        """The pods on the nodes, grouped by labels and by affinity terms (for the plugins
        that look at other pods)."""
        self.disruption_budgets: tuple[PodDisruptionBudget, ...] = ()
        """The cluster's PodDisruptionBudgets (preemption prefers victims that violate none);
        set as `namespaces` is."""
        self.namespaces: dict[str, dict[str, str]] = {}
        """Namespace name -> its labels, for namespaceSelectors (InterPodAffinity). Whoever fills
        the table sets it (simulate from Namespace manifests, the cycle from the store); a
        namespace not in it has no labels."""
        self.workloads: Workloads = NO_WORKLOADS
        """The cluster's Services, ReplicationControllers, ReplicaSets and StatefulSets, whose
        selectors PodTopologySpread's default constraints select pods by; set as `namespaces`
        is. Schedulers keep their pod classes only while it stays equal."""
        self.version = 0
        """Bumped on every change; caches key on it."""
        self.nodes_version = 0
        """Bumped when a node is added, updated or removed (not when pods come and go)."""
        self.journal: list[tuple[PodInfo, int, bool, int]] | None = None
        """None, or, once a Scheduler turned it on, (pod, row, forgotten, `version` after) of each
        pod assumed (forgotten False) or forgotten since it last emptied it: what changed pod by
        pod, for caches that follow such changes instead of starting over. Turned off (None)
        when it outgrows `JOURNAL_LIMIT`."""
        self._cap = 0
        self._gpus = 0
        self._host: dict[str, np.ndarray] = {}
        self._labels: dict[str, np.ndarray] = {}
        self._valid_rows: np.ndarray = np.empty(0, dtype=np.intp)
        self._valid_rows_version = -1
        # device mirror (CuPy only): arrays, rows changed since the last view, full re-upload flag
        self._device: dict[str, Array] = {}
        self._device_labels: dict[str, Array] = {}
        self._dirty: set[int] = set()
        self._stale = True
        # host view (numpy): slices of the host arrays, live; made again only when rows or the
        # arrays themselves change (`_layout`), not per call: a decision asks for it many times
        self._layout = 0
        self._host_view: tuple[tuple[int, int], TableView] | None = None
        self._allocate(capacity, 0)

    # ---- shape -------------------------------------------------------------------------------

    def _shape(self, kind: str, cap: int, gpus: int) -> tuple[int, ...]:
        return {"": (cap,), "r": (len(self.resources), cap), "g": (cap, gpus)}[kind]

    def _allocate(self, cap: int, gpus: int) -> None:
        """Grow every array to `cap` rows and `gpus` GPUs per row, keeping contents."""
        old = self._host
        new: dict[str, np.ndarray] = {}
        for name, (dtype, kind) in _COLUMNS.items():
            arr: np.ndarray = np.zeros(self._shape(kind, cap, gpus), dtype=dtype)
            if name in old:
                src = old[name]
                arr[tuple(slice(0, s) for s in src.shape)] = src
            new[name] = arr
        for key, col in self._labels.items():
            grown = np.zeros(cap, dtype=np.int32)
            grown[: len(col)] = col
            self._labels[key] = grown
        self._host, self._cap, self._gpus = new, cap, gpus
        self._stale = True
        self._layout += 1

    def _add_resource(self, name: str) -> int:
        self.resource_index[name] = len(self.resources)
        self.resources.append(name)
        for col in ("alloc", "req"):
            a = self._host[col]
            self._host[col] = np.concatenate([a, np.zeros((1, a.shape[1]), dtype=a.dtype)], axis=0)
        self._stale = True
        self._layout += 1
        return self.resource_index[name]

    # ---- nodes -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of nodes (valid rows)."""
        return len(self.row_of)

    @property
    def rows(self) -> int:
        """Number of rows, tombstones included: the length of every column."""
        return len(self.infos)

    def __contains__(self, name: str) -> bool:
        return name in self.row_of

    def node_info(self, row_or_name: int | str) -> NodeInfo:
        row = self.row_of[row_or_name] if isinstance(row_or_name, str) else row_or_name
        info = self.infos[row]
        if info is None:
            raise KeyError(f"row {row} holds no node")
        return info

    def node_infos(self) -> Iterator[NodeInfo]:
        """The nodes in row order (the order sampling and explain use)."""
        return (i for i in self.infos if i is not None)

    def valid_rows(self) -> np.ndarray:
        """Host array of the rows that hold a node, ascending."""
        if self._valid_rows_version != self.nodes_version:
            self._valid_rows = np.flatnonzero(self._host["valid"][: self.rows])
            self._valid_rows_version = self.nodes_version
        return self._valid_rows

    def set_node(self, node: Node) -> int:
        """Add a node or replace its spec/status, keeping the pods on it. Returns its row."""
        row = self.row_of.get(node.name)
        if row is None:
            return self._add_node(node)
        old = self.infos[row]
        assert old is not None
        info = NodeInfo(node)
        for pod_info in old.pods.values():
            info.add_pod(pod_info)
        self._forget_row_indexes(row, old)
        self.infos[row] = info
        self.nodes_version += 1
        self._write_row(row)
        return row

    def add_nodes(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            self.set_node(node)

    def _add_node(self, node: Node) -> int:
        if self._free_rows:
            row = self._free_rows.pop()
            self.infos[row] = NodeInfo(node)
        else:
            row = len(self.infos)
            self.infos.append(NodeInfo(node))
            if row >= self._cap:
                self._allocate(max(64, self._cap * 2), self._gpus)
        self.row_of[node.name] = row
        self._host["node_hash"][row] = node_tie_hash(self.seed, node.name)
        self.nodes_version += 1
        self._write_row(row)
        return row

    def remove_node(self, name: str) -> NodeInfo:
        """Drop a node (and forget its pods). Raises KeyError for an unknown node."""
        row = self.row_of.pop(name)
        info = self.infos[row]
        assert info is not None
        self._forget_row_indexes(row, info)
        for pod_info in info.pods.values():
            self.pods.remove(row, pod_info)
        self.infos[row] = None
        self._free_rows.append(row)
        for name, arr in self._host.items():
            arr[_at(name, row)] = 0
        for col in self._labels.values():
            col[row] = 0
        self.nodes_version += 1
        self._touch(row)
        return info

    # ---- pods --------------------------------------------------------------------------------

    def assume(self, pod_info: PodInfo, node: int | str) -> None:
        """Account a pod on a node (bound, reserved or assumed). Raises KeyError if already there."""
        row = self.row_of[node] if isinstance(node, str) else node
        info = self.node_info(row)
        self._add(row, info, pod_info)
        self._write_pods_usage(row, info, (pod_info,))
        self._note(row, (pod_info,), forgotten=False)

    def forget(self, pod_key: str, node: int | str) -> PodInfo:
        """Undo `assume`. Raises KeyError if the pod is not on that node."""
        row = self.row_of[node] if isinstance(node, str) else node
        info = self.node_info(row)
        pod_info = self._remove(row, info, pod_key)
        self._write_pods_usage(row, info, (pod_info,))
        self._note(row, (pod_info,), forgotten=True)
        return pod_info

    def assume_many(self, pod_infos: Iterable[PodInfo], node: int | str) -> None:
        """`assume` each pod, in order, on one node; its row is written once. Raises KeyError
        if one is there already (the pods before it are then on the node)."""
        row = self.row_of[node] if isinstance(node, str) else node
        info = self.node_info(row)
        added: list[PodInfo] = []
        try:
            for pod_info in pod_infos:
                self._add(row, info, pod_info)
                added.append(pod_info)
        finally:
            self._write_pods_usage(row, info, added)
            self._note(row, added, forgotten=False)

    def forget_many(self, pod_keys: Iterable[str], node: int | str) -> list[PodInfo]:
        """`forget` each pod, in order, on one node; its row is written once. Returns their
        PodInfos. Raises KeyError for a pod not on the node (the pods before it are then off)."""
        row = self.row_of[node] if isinstance(node, str) else node
        info = self.node_info(row)
        removed: list[PodInfo] = []
        try:
            for key in pod_keys:
                removed.append(self._remove(row, info, key))
            return removed
        finally:
            self._write_pods_usage(row, info, removed)
            self._note(row, removed, forgotten=True)

    def _note(self, row: int, pod_infos: Sequence[PodInfo], *, forgotten: bool) -> None:
        journal = self.journal
        if journal is not None:
            journal.extend((p, row, forgotten, self.version) for p in pod_infos)
            if len(journal) > JOURNAL_LIMIT:
                self.journal = None  # nobody took it in for long: whoever reads it starts over

    def _add(self, row: int, info: NodeInfo, pod_info: PodInfo) -> None:
        info.add_pod(pod_info)
        self.pods.add(row, pod_info)
        for _ip, proto, port in pod_info.host_ports:
            self.port_rows.setdefault((proto, port), set()).add(row)

    def _remove(self, row: int, info: NodeInfo, pod_key: str) -> PodInfo:
        pod_info = info.remove_pod(pod_key)
        self.pods.remove(row, pod_info)
        for _ip, proto, port in pod_info.host_ports:
            if not any(p == proto and q == port for (_, p, q) in info.used_ports):
                self.port_rows.get((proto, port), set()).discard(row)
        return pod_info

    # ---- labels on the host ------------------------------------------------------------------

    def host_label(self, key: str) -> np.ndarray | None:
        """Host copy-free column of label ``key`` over `rows` (interned ids, 0 = absent), or
        None when no node has the key. Topology domains are its ids: per-domain sums are a
        bincount over it, `label_values[key]` names them."""
        col = self._labels.get(key)
        return None if col is None else col[: self.rows]

    def domains(self, key: str) -> int:
        """Number of ids label ``key`` can have (0 included): the minlength of a bincount."""
        values = self.label_values.get(key)
        return 1 if values is None else len(values)

    # ---- rows --------------------------------------------------------------------------------

    def _forget_row_indexes(self, row: int, info: NodeInfo) -> None:
        for image in info.node.status.images:
            for name in image.names:
                rows = self.images.get(name)
                if rows is not None:
                    rows.pop(row, None)
        for _ip, proto, port in info.used_ports:
            self.port_rows.get((proto, port), set()).discard(row)

    def _write_row(self, row: int) -> None:
        info = self.infos[row]
        assert info is not None
        node = info.node
        h = self._host
        if len(node.gpus) > self._gpus:
            self._allocate(self._cap, len(node.gpus))
            h = self._host
        h["valid"][row] = True
        h["alloc"][:, row] = 0
        for name, qty in node.status.allocatable.items():
            i = self.resource_index.get(name)
            if i is None:
                i = self._add_resource(name)
                h = self._host
            h["alloc"][i, row] = qty
        h["unschedulable"][row] = node.spec.unschedulable
        h["taint_set"][row] = self.taint_sets.id(tuple(node.spec.taints))
        for key, col in self._labels.items():
            if key not in node.metadata.labels:
                col[row] = 0
        for key, value in node.metadata.labels.items():
            label_col = self._labels.get(key)
            if label_col is None:
                label_col = self._labels[key] = np.zeros(self._cap, dtype=np.int32)
                self.label_values[key] = Interned(None)
                self._stale = True
                self._layout += 1
            label_col[row] = self.label_values[key].id(value)
        g = len(node.gpus)
        h["gpu_count"][row] = g
        for name in ("gpu_total", "gpu_healthy", "gpu_model"):
            h[name][row] = 0
        for d, gpu in enumerate(node.gpus):
            h["gpu_total"][row, d] = gpu.memory
            h["gpu_healthy"][row, d] = gpu.healthy
            h["gpu_model"][row, d] = self.gpu_models.id(gpu.model)
        for image in node.status.images:
            for name in image.names:
                self.images.setdefault(name, {})[row] = image.size_bytes
        for _ip, proto, port in info.used_ports:
            self.port_rows.setdefault((proto, port), set()).add(row)
        self._write_usage(row, info)

    def _write_usage(self, row: int, info: NodeInfo) -> None:
        h = self._host
        req = h["req"][:, row]
        req[:] = 0
        for name, qty in info.requested.items():
            if qty == 0:
                continue
            i = self.resource_index.get(name)
            if i is None:
                i = self._add_resource(name)
                h = self._host
                req = h["req"][:, row]
            req[i] = qty
        req[self.resource_index[PODS]] = len(info.pods)
        h["nz_cpu"][row] = info.non_zero_cpu
        h["nz_mem"][row] = info.non_zero_memory
        h["gpu_free"][row] = 0
        h["gpu_pods"][row] = 0
        g = len(info.gpu_free_memory)
        h["gpu_free"][row, :g] = info.gpu_free_memory
        h["gpu_pods"][row, :g] = info.gpu_pod_count
        self._touch(row)

    def _write_pods_usage(self, row: int, info: NodeInfo, pod_infos: Iterable[PodInfo]) -> None:
        """`_write_usage` after ``pod_infos`` came or went: only the entries they change."""
        h = self._host
        index = self.resource_index
        req = h["req"]
        requested = info.requested
        gpus = False
        for pod_info in pod_infos:
            for name in pod_info.requests:
                if name == PODS:
                    continue
                i = index.get(name)
                if i is None:
                    if requested[name]:
                        self._write_usage(row, info)  # a resource new to the table
                        return
                    continue
                req[i, row] = requested[name]
            gpus = gpus or (pod_info.gpu is not None and bool(pod_info.gpu_devices))
        req[index[PODS], row] = len(info.pods)
        h["nz_cpu"][row] = info.non_zero_cpu
        h["nz_mem"][row] = info.non_zero_memory
        if gpus:
            g = len(info.gpu_free_memory)
            h["gpu_free"][row, :g] = info.gpu_free_memory
            h["gpu_pods"][row, :g] = info.gpu_pod_count
        self._touch(row)

    def usage_copy(self) -> dict[str, np.ndarray]:
        """Host copies of the `USAGE_COLUMNS`, trimmed to `rows` (e.g. for `TableView.replacing`)."""
        n = self.rows
        return {k: self._host[k][_at(k, slice(0, n))].copy() for k in USAGE_COLUMNS}

    def _touch(self, row: int) -> None:
        self.version += 1
        if self.backend.on_device:
            self._dirty.add(row)

    # ---- the backend view --------------------------------------------------------------------

    def view(self) -> TableView:
        """The arrays on the backend, trimmed to `rows`. On numpy these are the host arrays."""
        n = self.rows
        if not self.backend.on_device:
            key = (n, self._layout)
            if self._host_view is None or self._host_view[0] != key:
                arrays = {k: v[_at(k, slice(0, n))] for k, v in self._host.items()}
                labels = {k: v[:n] for k, v in self._labels.items()}
                self._host_view = (key, TableView(self, arrays, labels))
            return self._host_view[1]
        xp = self.backend.xp
        if self._stale or self._device["valid"].shape[0] != n:
            self._device = {k: xp.asarray(v[_at(k, slice(0, n))]) for k, v in self._host.items()}
            self._device_labels = {k: xp.asarray(v[:n]) for k, v in self._labels.items()}
            self._stale = False
        elif self._dirty:
            rows = np.fromiter(self._dirty, dtype=np.intp)
            d_rows = xp.asarray(rows)
            for k, v in self._host.items():
                self._device[k][_at(k, d_rows)] = xp.asarray(v[_at(k, rows)])
            for k, v in self._labels.items():
                self._device_labels[k][d_rows] = xp.asarray(v[rows])
        self._dirty.clear()
        return TableView(self, self._device, self._device_labels)

    def nbytes(self) -> int:
        """Bytes held by the host arrays (the memory-per-node figure of the benchmark)."""
        return sum(a.nbytes for a in self._host.values()) + sum(a.nbytes for a in self._labels.values())


__all__ = ["BASE_RESOURCES", "USAGE_COLUMNS", "Interned", "NodeTable", "TableView"]
