"""The plugin interfaces of kubus's framework: kube-scheduler's extension points, vectorized.

The one deliberate difference from kube-scheduler: Filter and Score see the whole node table.
`filter` returns a FilterResult (which nodes pass, and why the others do not) for a set of
rows at once; `score` returns an int64 score per row. `rows` is either `slice(None)` (every
row of the table) or an index array (a few rows, when the scheduler recomputes the node a
placement just touched). Plugins must accept both and must not raise on rows that hold no
node or that failed an earlier filter (compute anything there; it is masked out).

A plugin written one node at a time, the kube way, plugs in through
`kubus.framework.adapter.NodewisePlugin`.

`placement_sensitive` tells the batch scheduler whether a plugin's answer for a node can change
when a pod is placed on that node (resources, ports, GPUs: yes; labels, taints, images: no).
Getting it wrong breaks batch == one-by-one, so the default is True.

`reads_view_only` (default False) tells the preemption dry run
(`kubus.plugins.default_preemption`) that a placement-sensitive Filter plugin reads the pods on
a node only through the view's arrays (`req`, `nz_cpu`, `nz_mem`, `gpu_free`, `gpu_pods`: the
`kubus.kernels.node_table.USAGE_COLUMNS`), never through `view.table`'s NodeInfos or indexes
(NodeResourcesFit, GPUFit: True; NodePorts reads `port_rows` and `used_ports`: False). The dry
run then evaluates it on a what-if copy of those arrays instead of taking pods off the table.
A wrong True makes preemption choose victims from a stale picture.

`reads_table_only` (default False) tells the batch scheduler that a plugin's PreFilter, Filter,
PreScore and Score read nothing but the pod, the CycleState and the node table (its arrays,
NodeInfos, pod indexes and namespaces): nothing a batch boundary can change behind the table's
back (Coscheduling reads the waiting pods and pod groups: False). When every such plugin of a
profile says so, a pod class's evaluation is kept from one batch to the next while the table is
unchanged. A wrong True lets a pod be decided on a stale evaluation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, runtime_checkable

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array, ArrayModule

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kubus.framework.runtime import Framework
    from kubus.kernels.node_table import NodeTable, TableView
    from kubus.kernels.nodeinfo import NodeInfo, PodInfo

Rows = slice | Array
"""slice(None) for all rows, or an integer index array (numpy or CuPy)."""

PluginInstance: TypeAlias = Any
"""A plugin object as its factory made it. Any: the extension points it implements (which of the
Protocols below) are found at run time, from its methods (`extension_points_of`) and the
profile, not from its static type; the framework files it under those Protocols as it is."""

ALL_ROWS = slice(None)
MAX_NODE_SCORE = 100


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason a filter rejects some nodes: `mask[i]` True means row i is rejected for it."""

    reason: str
    mask: Array
    code: Code = Code.UNSCHEDULABLE


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What a filter says about a set of rows.

    `passed[i]` is True when row i passes; every rejected row is in at least one rejection's
    mask, and may be in several (NodeResourcesFit reports every insufficient resource).
    """

    passed: Array
    rejections: tuple[Rejection, ...] = ()

    @classmethod
    def single(cls, passed: Array, reason: str, code: Code = Code.UNSCHEDULABLE) -> FilterResult:
        return cls(passed, (Rejection(reason, ~passed, code),))

    @classmethod
    def of(cls, xp: ArrayModule, rejections: Sequence[Rejection], n: int) -> FilterResult:
        """Combine rejections over n rows: a row passes when no rejection masks it."""
        if not rejections:
            return cls(xp.ones(n, dtype=bool))
        rejected = rejections[0].mask.copy()
        for r in rejections[1:]:
            rejected |= r.mask
        return cls(~rejected, tuple(rejections))


class Plugin(Protocol):
    name: ClassVar[str]


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: Pod) -> Status: ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    # Any: the queued pod's type (kubus.plugins.priority_sort.QueuedPodInfo) is of a layer above.
    def less(self, a: Any, b: Any) -> bool:
        """True when queued pod `a` should be scheduled before `b`."""
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[frozenset[str] | None, Status]:
        """Prepare for Filter. Returns the node names the pod can only go to (None: any) and a
        Status: Skip means this plugin's Filter is not run for the pod."""
        ...


@runtime_checkable
class PreFilterExtensions(Plugin, Protocol):
    """What a PreFilter plugin that keeps state about other pods defines (kube's
    PreFilterExtensions): how its CycleState changes when a pod is added to or removed from a
    node in a what-if (preemption removing victims, nominated pods added)."""

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_to_add: PodInfo, node_info: NodeInfo) -> Status: ...

    def remove_pod(
        self, state: CycleState, pod_to_schedule: Pod, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    placement_sensitive: ClassVar[bool]

    def filter(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> FilterResult: ...


@dataclass(frozen=True, slots=True)
class FilterDiagnosis:
    """What PostFilter learns of a pod's failed Filter (kube's NodeToStatusMap, summarized)."""

    num_nodes: int
    """Nodes the pod was filtered against."""
    reasons: Mapping[str, int]
    """Reason -> how many nodes gave it (the "0/N nodes are available" histogram)."""
    unschedulable_plugins: frozenset[str]
    """The plugins that rejected the pod."""
    table: NodeTable | None = None
    """The node table the pod was filtered against (the scheduler's; a PostFilter plugin may
    change it only to undo what it changed, e.g. a preemption dry run)."""
    framework: Framework | None = None
    """The profile's `kubus.framework.runtime.Framework`, for dry runs of its Filter plugins."""
    resolvable: NDArray[np.bool_] | None = None
    """Host bool per row: the row holds a node and no filter rejected it UnschedulableAndUnresolvable:
    where removing pods could help, the candidates of preemption."""

    @property
    def resolvable_nodes(self) -> tuple[str, ...]:
        """The names of the `resolvable` rows, in row order."""
        if self.table is None or self.resolvable is None:
            return ()
        table = self.table
        return tuple(table.node_info(int(r)).name for r in range(table.rows) if self.resolvable[r])


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """What a PostFilter plugin did: its Status (Success when it made the pod schedulable later,
    e.g. by preemption) and the node it nominates, if any."""

    status: Status
    nominated_node: str = ""
    victims: tuple[PodInfo, ...] = ()
    """Preemption: the pods to evict from ``nominated_node`` so the pod fits there."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, state: CycleState, pod: Pod, diagnosis: FilterDiagnosis) -> PostFilterResult:
        """Run after Filter found no node: kube runs PostFilter plugins in order until one
        returns Success (or an Error); Unschedulable passes to the next."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: Pod, table: NodeTable) -> Status:
        """Prepare for Score. Skip means this plugin's Score is not run for the pod."""
        ...


@runtime_checkable
class ClusterScopedPlugin(Plugin, Protocol):
    """A Filter or Score plugin whose answer for a node depends on pods on *other* nodes (the
    node's topology domain, or the whole cluster): InterPodAffinity, PodTopologySpread.

    After each placement of a batch the scheduler asks ``placement_affects``; when True it runs
    the plugin's PreFilter and Filter (and PreScore and Score, once the pod's class is scored)
    again over every row, with the placed pod in the table (`NodeTable.pods`). A Skip from
    PreFilter/PreScore then is the plugin passing every node / scoring nothing, so a plugin
    that skipped at first (no existing anti-affinity yet) is still asked."""

    def placement_affects(self, state: CycleState, pod: Pod, placed: PodInfo) -> bool:
        """Whether placing ``placed`` (on any node) can change this plugin's Filter or Score for
        ``pod`` (``state`` is the pod's, after its PreFilter). False must be exact: a wrong
        False breaks batch == one by one. Reads of ``placed`` only what `pod_class_key` covers
        (namespace, labels, annotations, spec): the scheduler keeps the answer per class of
        placed pods."""
        ...


@runtime_checkable
class FeasibleNodesPreScorePlugin(Plugin, Protocol):
    """A PreScore plugin that reads the feasible nodes, as kube passes them to PreScore (after
    percentageOfNodesToScore sampling): PodTopologySpread. The scheduler runs its PreScore and
    Score at every decision, over the sampled feasible rows only (never cached per class)."""

    def pre_score_feasible(self, state: CycleState, pod: Pod, table: NodeTable, rows: NDArray[np.intp]) -> Status:
        """PreScore with ``rows``: a host int array of the feasible rows being scored."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    placement_sensitive: ClassVar[bool]

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        """int64 score per row, 0..MAX_NODE_SCORE after normalization."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize_score(self, state: CycleState, pod: Pod, xp: ArrayModule, scores: Array) -> Array:
        """Scores of the nodes being scored (int64 array) -> normalized scores (new array)."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status: ...

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        """Undo reserve. Idempotent."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        """Success, Unschedulable (reject), or Wait with a timeout in seconds (kube caps it at
        15 minutes). A waiting pod keeps its reservation until every plugin it waits on allows
        it (`WaitingPod.allow`), one rejects it, or the timeout passes."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | Awaitable[Status]:
        """Before Bind, in the binder (may be a coroutine). Not Success: Unreserve, hand back."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status | Awaitable[Status]:
        """Bind plugins run in order until one does not Skip: Success records the binding in the
        store (exactly once, as DefaultBinder does); anything else fails the bind."""
        ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> Awaitable[None] | None:
        """After a successful bind, informational (errors are logged)."""
        ...


class WaitingPod(Protocol):
    """A pod waiting on Permit, as plugins see it through the framework handle."""

    @property
    def uid(self) -> str: ...

    @property
    def key(self) -> str:
        """namespace/name"""
        ...

    @property
    def node(self) -> str: ...

    @property
    def pending_plugins(self) -> frozenset[str]:
        """The Permit plugins it still waits on."""
        ...

    @property
    def group(self) -> str:
        """The pod group (namespace/name) it belongs to, else empty."""
        ...

    def allow(self, plugin: str) -> None:
        """``plugin`` lets the pod go; it is bound once no plugin holds it."""
        ...

    def reject(self, plugin: str, message: str) -> None:
        """Fail the pod's Permit: Unreserve, back to the queue with ``message``."""
        ...


class FrameworkHandle(Protocol):
    """What the framework gives a plugin's factory (``factory(args, handle)``), as kube's
    framework.Handle: here, the pods waiting on Permit."""

    def get_waiting_pod(self, uid: str) -> WaitingPod | None: ...

    def iterate_over_waiting_pods(self) -> Sequence[WaitingPod]: ...


def is_placement_sensitive(plugin: object) -> bool:
    return bool(getattr(plugin, "placement_sensitive", True))


def reads_table_only(plugin: object) -> bool:
    return bool(getattr(plugin, "reads_table_only", False))


def is_cluster_scoped(plugin: object) -> bool:
    return callable(getattr(plugin, "placement_affects", None))


def has_pre_filter_extensions(plugin: object) -> bool:
    """isinstance(plugin, `PreFilterExtensions`) as the runtime Protocol check decides it (a name,
    and add_pod / remove_pod that are not None), without the cost of the Protocol machinery."""
    return (
        hasattr(plugin, "name")
        and getattr(plugin, "add_pod", None) is not None
        and getattr(plugin, "remove_pod", None) is not None
    )


def needs_feasible_nodes(plugin: object) -> bool:
    return callable(getattr(plugin, "pre_score_feasible", None))


__all__ = [
    "ALL_ROWS",
    "MAX_NODE_SCORE",
    "BindPlugin",
    "ClusterScopedPlugin",
    "FeasibleNodesPreScorePlugin",
    "FilterDiagnosis",
    "FilterPlugin",
    "FilterResult",
    "FrameworkHandle",
    "NormalizeScorePlugin",
    "PermitPlugin",
    "Plugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterExtensions",
    "PreFilterPlugin",
    "PreScorePlugin",
    "QueueSortPlugin",
    "Rejection",
    "ReservePlugin",
    "Rows",
    "ScorePlugin",
    "WaitingPod",
    "has_pre_filter_extensions",
    "is_cluster_scoped",
    "is_placement_sensitive",
    "needs_feasible_nodes",
    "reads_table_only",
]
