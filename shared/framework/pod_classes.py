"""Pod classes: pods whose scheduling inputs are identical share one evaluation of PreFilter,
Filter, PreScore and Score over the node table, kept in step with the table by the placements
made since (`Placements`), and kept from one batch to the next while nothing else changed it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterPlugin, PluginInstance, is_cluster_scoped
from kubus.framework.runtime import Framework, PodScores, PointTimer
from kubus.framework.status import Status
from kubus.kernels.backend import Array
from kubus.kernels.nodeinfo import PodInfo

__all__ = ["Placements", "PodClass", "PodClassKey", "cluster_plugins", "journal_unbroken", "pod_class_key"]

PodClassKey: TypeAlias = tuple[str, str, str, str, tuple[str, str, str] | None]
"""`pod_class_key`: (namespace, labels, annotations, spec as text, the controller's (apiVersion,
kind, name) or None)."""


@dataclass(slots=True)
class PodClass:
    """Pods whose scheduling inputs are identical share one evaluation."""

    pod: Pod
    state: CycleState
    status: Status
    """Non-success when PreFilter or PreScore rejected or failed the class."""
    candidates: Array = None
    """bool per row: a node, and allowed by PreFilter results."""
    static_pass: Array = None
    """bool per row: passes every filter plugin whose answer placements cannot change."""
    sensitive_pass: Array = None
    """bool per row: passes every placement-sensitive (row-local) filter plugin."""
    cluster_pass: dict[str, Array] = field(default_factory=dict)
    """Cluster-scoped filter plugin -> bool per row (all True while its PreFilter skips)."""
    feasible: Array = None
    sensitive_filters: tuple[FilterPlugin, ...] = ()
    cluster_plugins: tuple[PluginInstance, ...] = ()
    """The profile's cluster-scoped Filter/Score plugins: asked after every placement."""
    stale: set[str] = field(default_factory=set)
    """Cluster-scoped plugins a placement affected: rerun over every row before deciding."""
    placed: list[tuple[PodInfo, int]] = field(default_factory=list)
    """The pods placed (and rows) since this class last decided, for the PreFilter plugins with
    AddPod: their state moves by these pods instead of being made again over the whole table."""
    evicted: bool = False
    """Pods were evicted since this class last decided: every stale PreFilter runs again."""
    scores: PodScores | None = None
    """PreScore and Score over every row, once a decision first needed them."""
    narrowed_by: tuple[str, ...] = ()
    """PreFilter plugins that limited the pod to some nodes (sorted)."""
    plugin_timer: PointTimer | None = None
    """The Scheduler's timer when this class's plugins are timed one by one (sampled), else None."""
    dirty: list[int] = field(default_factory=list)
    """Rows placements touched since this class's rows were last refreshed: stale until
    `_refresh_rows`, which runs when a decision examines one of them (`Scheduler._sample`)."""
    diagnosis: tuple[int, str, dict[str, int], tuple[str, ...]] | None = None
    """(table.version, message, reasons, plugins) of the last failure, reused until the table changes."""
    seen: int = 0
    """How many of the scheduler's placements (`Scheduler._placements`, counted from the first
    kept) this class has taken into `dirty`, `placed`, `evicted` and `stale`."""
    last_call: int = 0
    """The `Scheduler.schedule` call that last used this class (`KEEP_UNUSED_CALLS`)."""
    affected_by: dict[PodClassKey, frozenset[str]] = field(default_factory=dict)
    """A placed pod's class key -> the `cluster_plugins` whose `placement_affects` said True for
    it: pods of one class get the same answers, and a batch places many pods of few classes."""
    pod_info: PodInfo | None = None
    """The class's pod's PodInfo, once a pod of the class was placed: the others' are made from it."""
    key: PodClassKey | None = None
    """The class's key (`pod_class_key`): this one object in every placement of its pods, so
    that sets and dicts of placements' keys compare them by identity, not character by character."""

    def combine(self) -> None:
        """`feasible` from the static, sensitive and cluster-scoped passes."""
        feasible = self.static_pass & self.sensitive_pass
        for passed in self.cluster_pass.values():
            feasible &= passed
        self.feasible = feasible


@dataclass(slots=True)
class Placements:
    """The placements a Scheduler made while its classes are kept, counted from `base` (the
    first one kept), as parallel lists that a class takes in by slices."""

    base: int = 0
    rows: list[int] = field(default_factory=list)
    pairs: list[tuple[PodInfo, int]] = field(default_factory=list)
    """(pod, row) of each placement."""
    keys: list[PodClassKey] = field(default_factory=list)
    """The placed pod's class key (`pod_class_key`) of each placement."""
    evictions: list[int] = field(default_factory=list)
    """Ascending indices (counted as `base` is) of the placements that evicted pods."""

    @property
    def end(self) -> int:
        return self.base + len(self.rows)

    def add(self, placed: PodInfo, row: int, evicted: bool, key: PodClassKey) -> None:
        if evicted:
            self.evictions.append(self.end)
        self.rows.append(row)
        self.pairs.append((placed, row))
        self.keys.append(key)

    def drop_before(self, oldest: int) -> None:
        """Forget the placements before index ``oldest`` (every kept class has taken them in)."""
        n = oldest - self.base
        del self.rows[:n], self.pairs[:n], self.keys[:n]
        self.evictions = [i for i in self.evictions if i >= oldest]
        self.base = oldest


def cluster_plugins(fw: Framework) -> tuple[PluginInstance, ...]:
    """The profile's cluster-scoped Filter and Score plugins, each once, in profile order."""
    found: dict[str, PluginInstance] = {}
    for plugin in (*fw.filter, *(p for p, _ in fw.score)):
        if is_cluster_scoped(plugin):
            found.setdefault(plugin.name, plugin)
    return tuple(found.values())


def journal_unbroken(journal: Sequence[tuple[PodInfo, int, bool, int]], since: int, now: int) -> bool:
    """Whether the journal accounts for every change of the table from version ``since`` to
    ``now``: each change bumps the version by one, so the versions it noted are exactly those."""
    versions = sorted({entry[3] for entry in journal})
    return versions == list(range(since + 1, now + 1))


def pod_class_key(pod: Pod) -> PodClassKey:
    """Pods with equal keys get equal Filter/Score results (all plugins read only these: the
    namespace, labels, annotations, controller (default topology spreading's workload) and spec;
    not the name or uid)."""
    m = pod.metadata
    controller = m.controller
    return (
        m.namespace,
        repr(sorted(m.labels.items())),
        repr(sorted(m.annotations.items())),
        repr(pod.spec),
        None if controller is None else (controller.api_version, controller.kind, controller.name),
    )
