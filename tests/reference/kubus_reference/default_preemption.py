"""DefaultPreemption the kube way, one node at a time, over NodeInfo copies: the oracle the
vectorized plugin (`kubus.plugins.default_preemption`) is tested against. It shares no code with
that plugin beyond `kubus.api` and the framework's types (Status, CycleState, NodeInfo).

After pkg/scheduler/framework/preemption/preemption.go (Preempt, findCandidates,
DryRunPreemption, SelectCandidate, pickOneNodeForPreemption) and
pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go (PostFilter,
SelectVictimsOnNode, PodEligibleToPreemptOthers, filterPodsWithPDBViolation), with kube's
DryRunPreemption run sequentially (parallelism 1, as kube's own tests pin it) from a given
offset; victims of equal importance keep their node's pod order (a stable sort), and a pod with
no start time started "now". kube's extenders and nominated pods do not exist in kubus, so
PodEligibleToPreemptOthers' rule about pods terminating on the nominated node never applies;
terminating pods (deletionTimestamp set) are victims like any other, as in kube 1.28.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kubus.api.disruption import PodDisruptionBudget, disruptions_allowed
from kubus.api.objects import Pod, PreemptionPolicy
from kubus.api.pod_affinity import selector_matches
from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus_reference.scheduler import ReferenceProfile, go_list

__all__ = ["ReferenceCandidate", "ReferencePreemption", "ReferencePreemptionResult"]

_MAX_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ReferenceCandidate:
    node: str
    victims: tuple[PodInfo, ...]
    num_pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class ReferencePreemptionResult:
    status: Status
    """The plugin's: Success, or Unschedulable/Error with kube's "preemption: ..." message."""
    node: str = ""
    victims: tuple[PodInfo, ...] = ()
    candidates: tuple[ReferenceCandidate, ...] = ()
    statuses: dict[str, Status] = field(default_factory=dict)
    """DryRunPreemption's statuses of the nodes examined that are not candidates."""


def _start(info: PodInfo) -> float:
    """GetPodStartTime: time.Now() for a pod without a start time."""
    return info.start_time if info.start_time else math.inf


def _more_important(info: PodInfo) -> tuple[int, float]:
    return -info.pod.spec.priority, _start(info)


class ReferencePreemption:
    """DefaultPreemption over a reference profile's nodewise plugins. Not thread-safe."""

    name = "DefaultPreemption"

    def __init__(
        self,
        profile: ReferenceProfile,
        min_candidate_nodes_percentage: int = 10,
        min_candidate_nodes_absolute: int = 100,
    ) -> None:
        self.profile = profile
        self.min_candidate_nodes_percentage = min_candidate_nodes_percentage
        self.min_candidate_nodes_absolute = min_candidate_nodes_absolute

    # ---- a scheduling cycle that ends in PostFilter ------------------------------------------------

    def schedule_and_preempt(
        self,
        pod: Pod,
        node_infos: Sequence[NodeInfo],
        pdbs: Sequence[PodDisruptionBudget] = (),
        offset: int = 0,
        *,
        every_candidate: bool = False,
    ) -> ReferencePreemptionResult | None:
        """PreFilter and Filter on every node as kube's scheduling cycle runs them, then
        PostFilter. None when some node fits the pod (no preemption). ``every_candidate``: the
        dry run examines every potential node (numCandidates = their number)."""
        state = CycleState()
        state.write(SNAPSHOT_STATE_KEY, node_infos)
        statuses: dict[str, Status] = {}
        allowed: frozenset[str] | None = None
        narrowing: list[str] = []
        rejected: Status | None = None
        for plugin in self.profile.pre_filter:
            names, status = plugin.pre_filter(state, pod, node_infos)
            if status.is_skip:
                state.skip_filter_plugins.add(plugin.name)
                continue
            if not status.is_success:
                if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    rejected = status
                    break
                if status.code is Code.UNSCHEDULABLE:
                    rejected = status
                    continue
                raise AssertionError(f"PreFilter error: {status}")
            if names is not None:
                narrowing.append(plugin.name)
                allowed = frozenset(names) if allowed is None else allowed & names
        if rejected is not None:
            statuses = {info.name: rejected for info in node_infos}
        else:
            for info in node_infos:
                if allowed is not None and info.name not in allowed:
                    reason = f"node(s) didn't satisfy plugin(s) {go_list(sorted(narrowing))}"
                    statuses[info.name] = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,))
                    continue
                status = self.run_filter_plugins(state, pod, info)
                if status.is_success:
                    return None
                statuses[info.name] = status
        return self.post_filter(state, pod, node_infos, statuses, pdbs, offset, every_candidate=every_candidate)

    # ---- PostFilter ---------------------------------------------------------------------------------

    def post_filter(
        self,
        state: CycleState,
        pod: Pod,
        node_infos: Sequence[NodeInfo],
        statuses: dict[str, Status],
        pdbs: Sequence[PodDisruptionBudget] = (),
        offset: int = 0,
        *,
        every_candidate: bool = False,
    ) -> ReferencePreemptionResult:
        """DefaultPreemption.PostFilter + Evaluator.Preempt. ``statuses``: every node's Filter
        status (kube's NodeToStatusMap)."""
        if pod.spec.preemption_policy is PreemptionPolicy.NEVER:
            return ReferencePreemptionResult(
                Status.unschedulable("preemption: not eligible due to preemptionPolicy=Never.")
            )
        if not node_infos:
            return ReferencePreemptionResult(Status.error("preemption: no nodes available"))
        potential = [
            info for info in node_infos if info.name in statuses and statuses[info.name].code is Code.UNSCHEDULABLE
        ]
        candidates: list[ReferenceCandidate] = []
        dry_statuses: dict[str, Status] = {}
        errors: list[str] = []
        if potential:
            num = len(potential) if every_candidate else self.num_candidates(len(potential))
            candidates, dry_statuses, errors = self.dry_run(state, pod, node_infos, potential, pdbs, offset, num)
        if not candidates:
            if errors:
                unique = list(dict.fromkeys(errors))
                text = unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"
                return ReferencePreemptionResult(Status.error(f"preemption: {text}"), statuses=dry_statuses)
            reasons: Counter[str] = Counter()
            for status in dry_statuses.values():
                for reason in status.reasons:
                    reasons[reason] += 1
            absent = len(node_infos) - len(dry_statuses)
            if absent > 0:
                reasons["Preemption is not helpful for scheduling"] += absent
            parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
            message = f"0/{len(node_infos)} nodes are available:"
            if parts:
                message += " " + ", ".join(parts) + "."
            return ReferencePreemptionResult(Status.unschedulable(f"preemption: {message}"), statuses=dry_statuses)
        best = self.pick_one_node_for_preemption(candidates)
        return ReferencePreemptionResult(
            Status.success(), best.node, best.victims, tuple(candidates), statuses=dry_statuses
        )

    def num_candidates(self, num_nodes: int) -> int:
        """calculateNumCandidates."""
        n = num_nodes * self.min_candidate_nodes_percentage // 100
        n = max(n, self.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def dry_run(
        self,
        state: CycleState,
        pod: Pod,
        node_infos: Sequence[NodeInfo],
        potential: Sequence[NodeInfo],
        pdbs: Sequence[PodDisruptionBudget],
        offset: int,
        num_candidates: int,
    ) -> tuple[list[ReferenceCandidate], dict[str, Status], list[str]]:
        """DryRunPreemption, one node after the other: (candidates, statuses, error messages)."""
        allowed = [self.disruptions_allowed(pdb, node_infos) for pdb in pdbs]
        clean: list[ReferenceCandidate] = []
        violating: list[ReferenceCandidate] = []
        statuses: dict[str, Status] = {}
        errors: list[str] = []
        for i in range(len(potential)):
            original = potential[(offset + i) % len(potential)]
            copy = NodeInfo(original.node)
            for info in original.pods.values():
                copy.add_pod(info)
            victims, violations, status = self.select_victims_on_node(state.clone(), pod, copy, pdbs, allowed)
            if status.is_success and victims:
                candidate = ReferenceCandidate(copy.name, tuple(victims), violations)
                target = clean if violations == 0 else violating
                if len(target) < num_candidates:
                    target.append(candidate)
                if clean and len(clean) + len(violating) >= num_candidates:
                    break
                continue
            if status.is_success:
                status = Status(Code.ERROR, (f'expected at least one victim pod on node "{copy.name}"',))
            if status.code is Code.ERROR:
                errors.append(status.message())
            statuses[copy.name] = status
        return clean + violating, statuses, errors

    def select_victims_on_node(
        self,
        state: CycleState,
        pod: Pod,
        node_info: NodeInfo,
        pdbs: Sequence[PodDisruptionBudget],
        allowed: Sequence[int],
    ) -> tuple[list[PodInfo], int, Status]:
        """SelectVictimsOnNode on ``node_info`` (a copy: changed) and ``state`` (a clone)."""
        potential = [info for info in node_info.pods.values() if info.pod.spec.priority < pod.spec.priority]
        for info in potential:
            error = self._remove(state, pod, info, node_info)
            if error is not None:
                return [], 0, error
        if not potential:
            return [], 0, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("No preemption victims found for incoming pod",))
        status = self.run_filter_plugins(state, pod, node_info)
        if not status.is_success:
            return [], 0, status
        potential.sort(key=_more_important)
        violating, others = self.filter_pods_with_pdb_violation(potential, pdbs, allowed)
        victims: list[PodInfo] = []
        num_violating = 0
        for group, counts in ((violating, True), (others, False)):
            for info in group:
                node_info.add_pod(info)
                error = self._extension(state, pod, info, node_info, "AddPod")
                if error is not None:
                    return [], 0, error
                if self.run_filter_plugins(state, pod, node_info).is_success:
                    continue
                error = self._remove(state, pod, info, node_info)
                if error is not None:
                    return [], 0, error
                victims.append(info)
                num_violating += counts
        if violating and others:
            victims.sort(key=_more_important)
        return victims, num_violating, Status.success()

    def _remove(self, state: CycleState, pod: Pod, info: PodInfo, node_info: NodeInfo) -> Status | None:
        node_info.remove_pod(info.pod.key)
        return self._extension(state, pod, info, node_info, "RemovePod")

    def _extension(self, state: CycleState, pod: Pod, info: PodInfo, node_info: NodeInfo, op: str) -> Status | None:
        """RunPreFilterExtensionAddPod / RemovePod: the plugins that did not skip, in order."""
        for plugin in self.profile.pre_filter:
            method = getattr(plugin, "add_pod" if op == "AddPod" else "remove_pod", None)
            if method is None or plugin.name in state.skip_filter_plugins:
                continue
            status: Status = method(state, pod, info, node_info)
            if not status.is_success:
                return Status(Code.ERROR, (f'running {op} on PreFilter plugin "{plugin.name}": {status.message()}',))
        return None

    def run_filter_plugins(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """RunFilterPlugins: the first plugin that does not pass decides."""
        for plugin in self.profile.filter:
            if plugin.name in state.skip_filter_plugins:
                continue
            status: Status = plugin.filter(state, pod, node_info)
            if not status.is_success:
                if not status.is_rejected:
                    return Status(
                        Code.ERROR, (f'running "{plugin.name}" filter plugin: {status.message()}',), plugin.name
                    )
                return status.with_plugin(plugin.name)
        return Status.success()

    # ---- PodDisruptionBudgets -------------------------------------------------------------------------

    @staticmethod
    def disruptions_allowed(pdb: PodDisruptionBudget, node_infos: Sequence[NodeInfo]) -> int:
        """status.disruptionsAllowed, the disruption controller's, over the placed pods."""
        placed = [
            replace(info.pod, spec=replace(info.pod.spec, node_name=node.name))
            for node in node_infos
            for info in node.pods.values()
        ]
        return disruptions_allowed(pdb, placed)

    @staticmethod
    def filter_pods_with_pdb_violation(
        pods: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget], allowed: Sequence[int]
    ) -> tuple[list[PodInfo], list[PodInfo]]:
        left = list(allowed)
        violating: list[PodInfo] = []
        others: list[PodInfo] = []
        for info in pods:
            pod = info.pod
            violated = False
            if pod.metadata.labels:
                for i, pdb in enumerate(pdbs):
                    if pdb.namespace != pod.namespace:
                        continue
                    selector = pdb.selector
                    # a nil or empty selector matches nothing here
                    if selector is None or (not selector.match_labels and not selector.match_expressions):
                        continue
                    if not selector_matches(selector, pod.metadata.labels):
                        continue
                    left[i] -= 1
                    if left[i] < 0:
                        violated = True
            (violating if violated else others).append(info)
        return violating, others

    # ---- pickOneNodeForPreemption --------------------------------------------------------------------

    @staticmethod
    def pick_one_node_for_preemption(candidates: Sequence[ReferenceCandidate]) -> ReferenceCandidate:
        def earliest_start_of_highest(c: ReferenceCandidate) -> float:
            earliest = _start(c.victims[0])
            top = c.victims[0].pod.spec.priority
            for v in c.victims:
                if v.pod.spec.priority == top:
                    earliest = min(earliest, _start(v))
                elif v.pod.spec.priority > top:
                    top, earliest = v.pod.spec.priority, _start(v)
            return earliest

        funcs = (
            lambda c: -c.num_pdb_violations,
            lambda c: -c.victims[0].pod.spec.priority,
            lambda c: -sum(v.pod.spec.priority + _MAX_INT32 + 1 for v in c.victims),
            lambda c: -len(c.victims),
            earliest_start_of_highest,
        )
        selected = list(candidates)
        for f in funcs:
            best: list[ReferenceCandidate] = []
            top: float = -math.inf
            for c in selected:
                score = f(c)
                if score > top:
                    top, best = score, []
                if score == top:
                    best.append(c)
            if len(best) == 1:
                return best[0]
            selected = best
        return selected[0]
