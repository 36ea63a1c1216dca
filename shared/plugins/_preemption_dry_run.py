"""Preemption's dry run (kube's SelectVictimsOnNode) over many nodes at once: take the potential
victims off, check the pod fits, reprieve them in rounds; the outcomes kept per kind of pod
(`OutcomeCache`). See `kubus.plugins.default_preemption` for the algorithm."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from kubus.api.disruption import PodDisruptionBudget
from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import (
    FilterPlugin,
    FilterResult,
    Rejection,
    has_pre_filter_extensions,
    is_cluster_scoped,
    is_placement_sensitive,
)
from kubus.framework.pod_classes import PodClassKey
from kubus.framework.runtime import Framework
from kubus.framework.status import Code, Status
from kubus.kernels.backend import Array
from kubus.kernels.node_table import NodeTable, TableView
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins._preemption_budgets import split_indices_by_pdb_violation
from kubus.plugins._preemption_candidates import PRIORITY_OFFSET, Candidate, importance
from kubus.plugins._preemption_victims import Deltas, Shadow, VictimCache, Victims

__all__ = [
    "ERR_NO_VICTIMS",
    "NO_VICTIMS",
    "DryRun",
    "OutcomeCache",
    "Outcomes",
    "Plan",
    "extension_error",
    "plan_scores",
    "reads_view_only",
    "rejection_status",
    "status_of",
]


ERR_NO_VICTIMS = "No preemption victims found for incoming pod"
NO_VICTIMS = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_VICTIMS,))


# ---- the dry run over many rows at once ---------------------------------------------------------


def reads_view_only(plugin: object) -> bool:
    """Whether a Filter plugin sees the pods on a node only through the view's usage arrays
    (its ``reads_view_only`` ClassVar, `kubus.framework.interface`; default False)."""
    return bool(getattr(plugin, "reads_view_only", False))


class DryRun:
    """SelectVictimsOnNode for a set of rows at once. `evaluate` may change the node table (takes
    pods off, puts some back); `restore` puts every pod back, in each node's order. One use.

    Pods are taken off in one of two ways. On a what-if copy of the table's usage arrays
    (`Shadow`), the table untouched, when every Filter plugin that runs for the pod is either
    one that placements cannot change or one that reads pods only through those arrays
    (`reads_view_only`: NodeResourcesFit, GPUFit), and no PreFilter plugin keeps what-if state.
    Else on the table itself (`NodeTable.forget` / `assume`), with RemovePod / AddPod on each
    row's CycleState. Even then, the leading Filter plugins the copy can answer (when no
    RemovePod runs: its errors come first) run on it before the table changes, so that the nodes
    they reject with every potential victim gone are never taken apart.
    """

    def __init__(
        self,
        framework: Framework,
        table: NodeTable,
        state: CycleState,
        pod: Pod,
        pdbs: Sequence[PodDisruptionBudget],
        allowed: Sequence[int],
        *,
        shadow: bool = True,
        victims: VictimCache | None = None,
    ) -> None:
        self.fw = framework
        self.victims = VictimCache() if victims is None else victims
        self.table = table
        self.backend = table.backend
        self.state = state
        self.pod = pod
        self.priority = pod.spec.priority
        self.pdbs = pdbs
        self.allowed = allowed
        skip = state.skip_filter_plugins
        self.filters: list[FilterPlugin] = [p for p in framework.filter if p.name not in skip]
        """The Filter plugins that run for the pod, in order."""
        self.stateful = any(has_pre_filter_extensions(p) and p.name not in skip for p in framework.pre_filter)
        """Some PreFilter plugin keeps what-if state: each node gets its own CycleState."""
        self.per_row = [p for p in self.filters if is_cluster_scoped(p) or has_pre_filter_extensions(p)]
        """Run one row at a time, with the row's CycleState (kube's way)."""
        per_row = {p.name for p in self.per_row}
        self.sensitive = [p for p in self.filters if p.name not in per_row and is_placement_sensitive(p)]
        """Row-local plugins whose answer pods change: run over many rows in one call."""
        on_copy = [
            p.name not in per_row and (not is_placement_sensitive(p) or reads_view_only(p)) for p in self.filters
        ]
        self.mutates = not shadow or self.stateful or not all(on_copy)
        """Pods are taken off the table itself (else only off the `Shadow`)."""
        self.lead = 0
        if shadow and not self.stateful:
            self.lead = next((k for k, ok in enumerate(on_copy) if not ok), len(on_copy))
        """The leading Filter plugins that run on the `Shadow` before the table changes (every
        one of them when the table never does)."""
        self.row_local = not self.mutates and not self.per_row
        """Each row's outcome reads that row alone (every Filter plugin row-local, on the
        `Shadow`): it may come from, and go to, ``outcomes``."""
        self.outcomes: Outcomes | None = None
        """Row -> (its NodeInfo, generation, node name, outcome) from earlier dry runs for the same
        kind of pod (`OutcomeCache.rows`); None: none kept."""
        self._shadow: Shadow | None = None
        self._order: dict[int, list[str]] = {}
        """Row -> its pods' keys, in order, before the dry run touched it."""
        self._off: dict[int, dict[str, PodInfo]] = {}
        """Row -> the pods taken off it now."""
        self._states: dict[int, CycleState] = {}

    # ---- the algorithm ---------------------------------------------------------------------------

    def evaluate(self, rows: np.ndarray) -> list[tuple[str, Candidate | Status]]:
        """Per row (in order): its node's name and a Candidate, or the Status saying why the
        node is none (from ``outcomes`` where the node is unchanged since it was kept there)."""
        if self.outcomes is None:
            return self._evaluate(rows)
        cache = self.outcomes
        infos = self.table.infos
        named: list[tuple[str, Candidate | Status] | None] = []
        todo: list[int] = []
        for k, row in enumerate(rows.tolist()):
            info = infos[row]
            hit = cache.get(row)
            if hit is not None and hit[0] is info and info is not None and hit[1] == info.generation:
                named.append((hit[2], hit[3]))
            else:
                named.append(None)
                todo.append(k)
        if todo:
            for k, (name, outcome) in zip(todo, self._evaluate(rows[todo]), strict=True):
                row = int(rows[k])
                info = infos[row]
                assert info is not None
                cache[row] = (info, info.generation, name, outcome)
                named[k] = (name, outcome)
        return [n for n in named if n is not None]

    def _evaluate(self, rows: np.ndarray) -> list[tuple[str, Candidate | Status]]:
        """`evaluate`, every row dry-run now."""
        outcomes: list[Candidate | Status | None] = [None] * len(rows)
        table = self.table
        row_of = rows.tolist()
        found = self.victims.of(table, row_of, self.priority)
        live: list[int] = []
        """Positions in ``rows`` still in the running."""
        for i, v in enumerate(found):
            if v.pods:
                live.append(i)
            else:
                outcomes[i] = NO_VICTIMS

        # does the pod fit with every potential victim gone? first the plugins the copy answers
        shadow: Shadow | None = None
        if (self.lead or not self.mutates) and live:
            shadow = self._shadow_of()
            at = [row_of[i] for i in live]
            shadow.change(np.asarray(at, dtype=np.intp), self.victims.totals(at), -1)
            live = self._drop_rejected(
                live, at, self._first_rejections(at, self.filters[: self.lead], shadow.view()), outcomes
            )
        if self.mutates:
            kept = []
            for i in live:
                error = self._take_off(row_of[i], found[i].pods)
                if error is None:
                    kept.append(i)
                else:
                    outcomes[i] = error
            at = [row_of[i] for i in kept]
            live = self._drop_rejected(
                kept, at, self._first_rejections(at, self.filters[self.lead :], table.view()), outcomes
            )

        plans: dict[int, Plan] = {}
        for i in live:
            v = found[i]
            violating, others = split_indices_by_pdb_violation(v.by_importance, v.pods, self.pdbs, self.allowed)
            plans[i] = Plan(row_of[i], v, violating + others, len(violating), bool(violating) and bool(others))

        # the reprieve, in rounds: round k puts back every node's k-th pod
        if self.mutates:
            self._reprieve_on_table(plans, outcomes)
        elif plans:
            assert shadow is not None
            self._reprieve_on_shadow(plans, shadow)

        scores = plan_scores([plan for plan in plans.values() if plan.victims])
        for i, plan in plans.items():
            name = plan.found.name
            if not plan.victims:
                outcomes[i] = Status(Code.ERROR, (f'expected at least one victim pod on node "{name}"',))
                continue
            victims = [plan.found.pods[j] for j in plan.victims]
            if plan.resort:
                victims.sort(key=importance)
            outcomes[i] = Candidate(name, tuple(victims), plan.violations, next(scores))
        named: list[tuple[str, Candidate | Status]] = []
        for v, outcome in zip(found, outcomes, strict=True):
            assert outcome is not None
            named.append((v.name, outcome))
        return named

    @staticmethod
    def _drop_rejected(
        live: list[int], rows: list[int], rejected: dict[int, Status], outcomes: list[Candidate | Status | None]
    ) -> list[int]:
        """``live`` (positions of ``rows``) less those ``rejected`` (row -> Status), whose
        outcomes it sets."""
        if not rejected:
            return live
        kept = []
        for i, row in zip(live, rows, strict=True):
            status = rejected.get(row)
            if status is None:
                kept.append(i)
            else:
                outcomes[i] = status
        return kept

    def _reprieve_on_table(self, plans: dict[int, Plan], outcomes: list[Candidate | Status | None]) -> None:
        for k in itertools.count():
            batch = [i for i, plan in plans.items() if k < len(plan.order)]
            if not batch:
                break
            placed: list[int] = []
            for i in batch:
                plan = plans[i]
                error = self._put_back(plan.row, plan.found.pods[plan.order[k]])
                if error is not None:
                    outcomes[i] = error
                    del plans[i]
                else:
                    placed.append(i)
            fits = self._fits([plans[i].row for i in placed])
            for i, ok in zip(placed, fits.tolist(), strict=True):
                if ok:
                    continue
                plan = plans[i]
                victim = plan.order[k]
                error = self._take_off(plan.row, [plan.found.pods[victim]])
                if error is not None:
                    outcomes[i] = error
                    del plans[i]
                    continue
                plan.victims.append(victim)
                if k < plan.num_violating:
                    plan.violations += 1

    def _reprieve_on_shadow(self, plans: dict[int, Plan], shadow: Shadow) -> None:
        items = list(plans.values())
        n = len(items)
        lengths = np.fromiter((len(plan.order) for plan in items), dtype=np.intp, count=n)
        width = int(lengths.max())
        order = np.zeros((n, width), dtype=np.intp)
        for p, plan in enumerate(items):
            order[p, : len(plan.order)] = plan.order
        # the plans' deltas side by side: plan p's pod j at its offset + j
        deltas = Deltas.concat([plan.found.deltas for plan in items])
        offset = np.cumsum(lengths) - lengths
        plan_rows = np.fromiter((plan.row for plan in items), dtype=np.intp, count=n)
        evicted = np.zeros((n, width), dtype=bool)
        for k in range(width):
            act = np.flatnonzero(lengths > k)
            rows = plan_rows[act]
            back = order[act, k] + offset[act]
            shadow.change(rows, deltas.take(back), +1)
            bad = ~self._fits_row_local(rows, shadow.view())
            if bad.any():
                shadow.change(rows[bad], deltas.take(back[bad]), -1)
                evicted[act[bad], k] = True
        first = np.fromiter((plan.num_violating for plan in items), dtype=np.intp, count=n)
        violations = (evicted & (np.arange(width)[None, :] < first[:, None])).sum(axis=1).tolist()
        at, ks = np.nonzero(evicted)
        flat = order[at, ks].tolist()
        ends = np.cumsum(evicted.sum(axis=1)).tolist()
        begin = 0
        for plan, end, count in zip(items, ends, violations, strict=True):
            plan.victims = flat[begin:end]
            plan.violations = count
            begin = end

    def restore(self) -> None:
        """Every pod taken off back on its node, the node's pods in their first order."""
        for row, off in self._off.items():
            if off:
                self.table.assume_many(off.values(), row)
        for row, order in self._order.items():
            node = self.table.node_info(row)
            if list(node.pods) != order:
                node.pods = {key: node.pods[key] for key in order}
        self._off.clear()
        self._order.clear()
        self._states.clear()

    def _shadow_of(self) -> Shadow:
        if self._shadow is None:
            self._shadow = Shadow(self.table)
        return self._shadow

    # ---- taking pods off and putting them back -----------------------------------------------------

    def _take_off(self, row: int, infos: Sequence[PodInfo]) -> Status | None:
        """kube's removePod for each pod, in order: off the node, then RemovePod of the PreFilter
        plugins on the row's state. The Error status when one fails (the pods after it stay)."""
        if row not in self._order:
            self._order[row] = list(self.table.node_info(row).pods)
            if self.stateful:
                self._states[row] = self.state.clone()
        off = self._off.setdefault(row, {})
        state = self._states.get(row)
        if state is None:
            for info in self.table.forget_many([info.pod.key for info in infos], row):
                off[info.pod.key] = info
            return None
        node = self.table.node_info(row)
        for info in infos:
            key = info.pod.key
            off[key] = self.table.forget(key, row)
            status = self.fw.run_remove_pod(state, self.pod, info, node)
            if not status.is_success:
                return extension_error("RemovePod", status)
        return None

    def _put_back(self, row: int, info: PodInfo) -> Status | None:
        """kube's addPod: on the node, then AddPod of the PreFilter plugins on the row's state."""
        self._off[row].pop(info.pod.key)
        self.table.assume(info, row)
        state = self._states.get(row)
        if state is None:
            return None
        status = self.fw.run_add_pod(state, self.pod, info, self.table.node_info(row))
        return None if status.is_success else extension_error("AddPod", status)

    # ---- Filter over many rows ---------------------------------------------------------------------

    def _state(self, row: int) -> CycleState:
        return self._states.get(row, self.state)

    def _first_rejections(self, rows: list[int], plugins: Sequence[FilterPlugin], view: TableView) -> dict[int, Status]:
        """kube's RunFilterPlugins on each row, ``plugins`` (in order) on ``view``: row -> the
        Status of the first plugin that rejects it, for the rows some plugin rejects."""
        out: dict[int, Status] = {}
        if not rows or not plugins:
            return out
        rows_h = np.asarray(rows, dtype=np.intp)
        alive = np.ones(len(rows_h), dtype=bool)
        to_host = self.backend.to_host
        per_row = {id(p) for p in self.per_row}
        d_rows = self.backend.asarray(rows_h)
        for plugin in plugins:
            if not alive.any():
                break
            if id(plugin) in per_row:
                for j in np.flatnonzero(alive).tolist():
                    row = rows[j]
                    res = plugin.filter(self._state(row), self.pod, view, self.backend.asarray(rows_h[j : j + 1]))
                    if not to_host(res.passed)[0]:
                        out[row] = rejection_status(plugin.name, res, 0, to_host)
                        alive[j] = False
                continue
            res = plugin.filter(self.state, self.pod, view, d_rows)
            passed = to_host(res.passed)
            newly = alive & ~passed
            if newly.any():
                # rows the same rejections mask share one Status
                hit = [to_host(rej.mask)[newly] for rej in res.rejections]
                masks = np.stack(hit, axis=1) if hit else np.zeros((int(newly.sum()), 0), dtype=bool)
                shared: dict[bytes, Status] = {}
                for j, hits in zip(np.flatnonzero(newly).tolist(), masks, strict=True):
                    key = hits.tobytes()
                    status = shared.get(key)
                    if status is None:
                        status = shared[key] = status_of(plugin.name, itertools.compress(res.rejections, hits))
                    out[rows[j]] = status
                alive &= passed
        return out

    def _fits_row_local(self, rows: np.ndarray, view: TableView) -> np.ndarray:
        """Whether every row-local plugin that placements can change passes on each row."""
        ok = np.ones(len(rows), dtype=bool)
        if self.sensitive and len(rows):
            d_rows = self.backend.asarray(rows)
            to_host = self.backend.to_host
            for plugin in self.sensitive:
                ok &= to_host(plugin.filter(self.state, self.pod, view, d_rows).passed)
        return ok

    def _fits(self, rows: list[int]) -> np.ndarray:
        """Whether the pod fits on each row (every plugin that placements can change passes:
        the others passed when every victim was off and cannot have changed since)."""
        rows_h = np.asarray(rows, dtype=np.intp)
        view = self.table.view()
        ok = self._fits_row_local(rows_h, view)
        if self.per_row:
            for j in np.flatnonzero(ok).tolist():
                row = rows[j]
                one = self.backend.asarray(rows_h[j : j + 1])
                for plugin in self.per_row:
                    if not self.backend.to_host(plugin.filter(self._state(row), self.pod, view, one).passed)[0]:
                        ok[j] = False
                        break
        return ok


@dataclass(slots=True)
class Plan:
    """One node's reprieve: the potential victims in reprieve order and what came of them."""

    row: int
    found: Victims
    order: list[int]
    """Budget-violating pods first, then the others; each most important first (indices into
    ``found.pods``)."""
    num_violating: int
    resort: bool
    """Both kinds present: kube sorts the victims by importance again."""
    victims: list[int] = field(default_factory=list)
    violations: int = 0


def plan_scores(plans: Sequence[Plan]) -> Iterator[tuple[int, int, int, int, float]]:
    """`pick_scores` of the candidate each plan (with victims) makes, in order, worked out for
    all of them at once: reductions over their victims' priorities and start times side by side."""
    if not plans:
        return iter(())
    counts = np.fromiter((len(p.victims) for p in plans), dtype=np.intp, count=len(plans))
    sizes = np.fromiter((len(p.found.pods) for p in plans), dtype=np.intp, count=len(plans))
    at = np.fromiter(itertools.chain.from_iterable(p.victims for p in plans), dtype=np.intp, count=int(counts.sum()))
    at += np.repeat(np.cumsum(sizes) - sizes, counts)
    priority = np.concatenate([p.found.priorities for p in plans])[at]
    started = np.concatenate([p.found.starts for p in plans])[at]
    first = np.cumsum(counts) - counts
    top = np.maximum.reduceat(priority, first)
    total = np.add.reduceat(priority, first)
    earliest = np.minimum.reduceat(np.where(priority == np.repeat(top, counts), started, np.inf), first)
    return (
        (-p.violations, -t, -(s + PRIORITY_OFFSET * n), -n, e)
        for p, t, s, n, e in zip(plans, top.tolist(), total.tolist(), counts.tolist(), earliest.tolist(), strict=True)
    )


Outcomes = dict[int, tuple[NodeInfo, int, str, "Candidate | Status"]]
"""Row -> (its NodeInfo, generation, node name, the dry run's outcome there)."""

_Kind = tuple[PodClassKey, int, tuple[int, ...], tuple[int, ...]]
"""`OutcomeCache`'s kind of pod: (its class key, the table's resources, the budgets' ids, allowed)."""


class OutcomeCache:
    """Per kind of pod, the dry run's outcome for each row (`DryRun.outcomes`), for one node
    table: a preemption changes one node, so the next pod of the same kind, examining mostly the
    same nodes, reuses what the last dry run found on the others. A kind is what the outcome
    depends on besides the row: the pod as Filter plugins see it (`pod_class_key`), the table's
    resources and the budgets with their disruptionsAllowed. The few kinds used last are kept."""

    KINDS: ClassVar[int] = 8

    def __init__(self) -> None:
        self._table: weakref.ref[NodeTable] | None = None
        self._kinds: dict[_Kind, tuple[Sequence[PodDisruptionBudget], Outcomes]] = {}
        """Kind -> (its budgets, kept alive so that their ids in the kind stay theirs; outcomes)."""

    def rows(
        self, table: NodeTable, pod_key: PodClassKey, budgets: Sequence[PodDisruptionBudget], allowed: Sequence[int]
    ) -> Outcomes:
        """The outcomes kept for the kind on ``table`` (filled in by the dry run)."""
        if self._table is None or self._table() is not table:
            self._table = weakref.ref(table)
            self._kinds = {}
        kind = (pod_key, len(table.resources), tuple(map(id, budgets)), tuple(allowed))
        kept = self._kinds.pop(kind, None)
        if kept is None:
            kept = (budgets, {})
            while len(self._kinds) >= self.KINDS:
                del self._kinds[next(iter(self._kinds))]  # the one used longest ago
        self._kinds[kind] = kept  # last in the order: used now
        return kept[1]


def status_of(plugin: str, rejections: Iterable[Rejection]) -> Status:
    """A node's Status from the rejections of one plugin that masked it: its reasons, and the
    gravest code (an Error reads as kube's RunFilterPlugins words it)."""
    hits = list(rejections)
    reasons = tuple(r.reason for r in hits)
    codes = {r.code for r in hits}
    if Code.ERROR in codes:
        return Status(Code.ERROR, (f'running "{plugin}" filter plugin: {", ".join(reasons)}',), plugin)
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if Code.UNSCHEDULABLE_AND_UNRESOLVABLE in codes else Code.UNSCHEDULABLE
    return Status(code, reasons, plugin)


def rejection_status(plugin: str, res: FilterResult, j: int, to_host: Callable[[Array], np.ndarray]) -> Status:
    return status_of(plugin, [rej for rej in res.rejections if to_host(rej.mask)[j]])


def extension_error(operation: str, status: Status) -> Status:
    """kube's words for a PreFilterExtensions failure."""
    return Status(
        Code.ERROR, (f'running {operation} on PreFilter plugin "{status.plugin}": {status.message()}',), status.plugin
    )
