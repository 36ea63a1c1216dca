"""Coscheduling: gang scheduling, as kubernetes-sigs/scheduler-plugins' Coscheduling defines it.

A pod labelled ``scheduling.x-k8s.io/pod-group: <name>`` belongs to the PodGroup ``<name>`` of its
namespace; the group's ``minMember`` pods are placed together or not at all:

- QueueSort keeps a group's members together in the queue (priority, then the group's creation
  time, then the group's key), so they are tried one after another.
- PreFilter rejects (UnschedulableAndUnresolvable) a member whose group is unknown, has fewer
  than ``minMember`` pods, or whose ``minResources`` the cluster's free room cannot hold.
- Permit makes members wait, holding their nodes, until ``minMember`` of them are placed
  (assigned + waiting + this one); the last one allows them all. The wait ends after the
  group's ``scheduleTimeoutSeconds``, else the args' ``permitWaitingTimeSeconds`` (default
  60; 0 also means 60, as in scheduler-plugins).
- PostFilter (a member found no node) and Unreserve (a member failed after Reserve) reject the
  group's members that hold room: the waiting ones, and the ones reserved earlier in the same
  batch, which the cycle brings to Permit only after the batch (their Permit refuses them). A
  gang never binds partially, and one that cannot fit gives its room back in the batch that
  found it out. In PostFilter, when gangs created later hold room, their members are rejected
  instead (kubus: the room goes to the gang created first, so two gangs that fit alone but not
  together cannot fail each other in turn). While the members a group still lacks are at most
  ``podGroupRejectPercentage`` (default 10) of ``minMember``, PostFilter rejects nothing.
- With ``podGroupBackoffSeconds`` > 0, a group PostFilter rejected that has at least
  ``minMember`` pods is backed off: PreFilter refuses its members (``podGroup <key> failed
  recently``, unresolvable) for that long. They come back, as in scheduler-plugins, on the next
  cluster event Coscheduling registers or the unschedulable timeout.

Pods in no group pass every point untouched. The plugin is not in kube's default profile: a
profile enables it (``multiPoint``) and disables PrioritySort, as scheduler-plugins' configs do.

Permit's ActivateSiblings is the queue's: a member's RESERVED outcome moves its siblings to the
activeQ (`SchedulingQueue.activate_siblings`).

Args: `CoschedulingArgs` (``pluginConfig: [{name: Coscheduling, args:
{permitWaitingTimeSeconds: 10}}]``).

Differences from scheduler-plugins: no PodGroup status updates; a new sibling pod is not a
cluster event in kubus, so a member PreFilter rejected for lack of siblings retries on capacity
events or the unschedulable timeout. The backoff lives in the memory of the cycle that holds the
profile, as scheduler-plugins' lives in the scheduler's: a new cycle (restart, failover) starts
with none.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from kubus.api.objects import Pod
from kubus.api.podgroups import DEFAULT_SCHEDULE_TIMEOUT, PodGroup, pod_group_key
from kubus.framework.config.args import CoschedulingArgs
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterDiagnosis, PostFilterResult, WaitingPod
from kubus.framework.podgroups import PodGroups
from kubus.framework.queueing_hints import (
    NODE_ADDED,
    NODE_UPDATED,
    POD_FREED,
    ClusterEventWithHint,
    events_on,
)
from kubus.framework.status import Status
from kubus.framework.waiting import WaitingPods
from kubus.plugins.priority_sort import QueuedPodInfo

if TYPE_CHECKING:
    from kubus.kernels.node_table import NodeTable
    from kubus.kernels.nodeinfo import NodeInfo

__all__ = ["Coscheduling"]


class Coscheduling:
    """QueueSort, PreFilter, PostFilter, Reserve/Unreserve and Permit of scheduler-plugins'
    Coscheduling. ``handle`` is the framework's handle (`kubus.framework.waiting.WaitingPods`):
    the waiting pods, and the pod groups through ``handle.pod_groups``."""

    name: ClassVar[str] = "Coscheduling"
    args_type: ClassVar[type] = CoschedulingArgs

    def __init__(
        self,
        args: CoschedulingArgs | None = None,
        handle: WaitingPods | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``args``: a `CoschedulingArgs` (None: scheduler-plugins' defaults). ``clock``: seconds,
        for the group backoff."""
        self.args = args if args is not None else CoschedulingArgs()
        self.handle = handle if handle is not None else WaitingPods()
        self._clock = clock
        self._backed_off: dict[str, float] = {}
        """Group key -> when its backoff ends (``clock`` seconds)."""

    # -- reading the handle ----------------------------------------------------------------------

    @property
    def _groups(self) -> PodGroups:
        return self.handle.pod_groups

    def _group(self, pod: Pod) -> tuple[str | None, PodGroup | None]:
        key = pod_group_key(pod)
        return key, (self._groups.get(key) if key is not None else None)

    def _waiting_members(self, key: str) -> list[WaitingPod]:
        """The group's pods waiting on Permit (allowed ones still count until they bind)."""
        return [w for w in self.handle.iterate_over_waiting_pods() if w.group == key]

    def _held(self, key: str) -> int:
        """The group's members holding room now: waiting on Permit, or reserved earlier in this
        batch and not at Permit yet (kube's one-pod cycle would have them waiting)."""
        return len({w.uid for w in self._waiting_members(key)} | set(self.handle.reserved_members(key)))

    def _younger_holding_groups(self, key: str, group: PodGroup) -> list[str]:
        """The groups created after ``group`` (then by key) with members holding room."""
        mine = (group.creation_timestamp, key)
        holding = {w.group for w in self.handle.iterate_over_waiting_pods() if w.group}
        out = set()
        for other_key in holding | self.handle.reserved_groups():
            other = self._groups.get(other_key) if other_key != key else None
            if other is not None and (other.creation_timestamp, other_key) > mine:
                out.add(other_key)
        return sorted(out)

    def backed_off(self, key: str) -> bool:
        """Whether the group ``key`` is in its backoff now (forgets the backoffs that ended)."""
        now = self._clock()
        for other in [k for k, until in self._backed_off.items() if until <= now]:
            del self._backed_off[other]
        return key in self._backed_off

    def _back_off(self, key: str, group: PodGroup) -> None:
        """scheduler-plugins' BackoffPodGroup, when the args ask for it and the group has the
        pods to form it (a group short of pods is PreFilter's business)."""
        backoff = self.args.pod_group_backoff_seconds
        if backoff > 0 and self._groups.members(key) >= group.min_member:
            self._backed_off[key] = self._clock() + backoff

    def _reject_held(self, key: str, message: str) -> None:
        """Reject the group's members that hold room: the waiting ones now, the reserved ones at
        their Permit."""
        for waiting in self._waiting_members(key):
            waiting.reject(self.name, message)
        self.handle.reject_reserved(key, message)

    # -- QueueSort -------------------------------------------------------------------------------

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Higher priority first; then the earlier of the group's creation time (the pod's queue
        time for a pod in no group); then by group key (pod key): a group's members stay
        together."""
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, info: QueuedPodInfo) -> tuple[int, float, str]:
        """A key equivalent to `less`, for sorted() and heaps."""
        key, group = self._group(info.pod)
        if key is None or group is None:
            return (-info.pod.spec.priority, info.timestamp, info.pod.key)
        return (-info.pod.spec.priority, group.creation_timestamp, key)

    # -- PreFilter -------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, table: NodeTable) -> tuple[frozenset[str] | None, Status]:
        key, group = self._group(pod)
        if key is None:
            return None, Status.success()
        if group is None:
            return None, Status.unschedulable(f"PodGroup {key} not found", resolvable=False)
        if self._backed_off and self.backed_off(key):
            return None, Status.unschedulable(f"podGroup {key} failed recently", resolvable=False)
        members = self._groups.members(key)
        if members < group.min_member:
            return None, Status.unschedulable(
                f"pre-filter pod {pod.name} cannot find enough sibling pods, "
                f"current pods number: {members}, minMember of group: {group.min_member}",
                resolvable=False,
            )
        if group.min_resources:
            gap = _resource_gap(table, group)
            if gap:
                shown = ", ".join(f"{name}: {amount}" for name, amount in sorted(gap.items()))
                return None, Status.unschedulable(f"resource gap: {{{shown}}}", resolvable=False)
        return None, Status.success()

    # -- PostFilter ------------------------------------------------------------------------------

    def post_filter(self, state: CycleState, pod: Pod, diagnosis: FilterDiagnosis) -> PostFilterResult:
        key, group = self._group(pod)
        if key is None or group is None:
            return PostFilterResult(Status.unschedulable("can not find pod group"))
        # Members already placed or holding room (scheduler-plugins counts the snapshot's assumed
        # pods).
        placed = self._groups.assigned(key) + self._held(key)
        if placed >= group.min_member:
            # Enough members are placed: the group does not need this one.
            return PostFilterResult(Status.unschedulable())
        if (group.min_member - placed) * 100 <= self.args.pod_group_reject_percentage * group.min_member:
            # A small gap (default at most 10%): later members may still close it, let the others
            # wait.
            return PostFilterResult(Status.unschedulable())
        younger = self._younger_holding_groups(key, group)
        if younger:
            # kubus: room held by the members of gangs created later goes to this one
            # (the gang created first has precedence, as scheduler-plugins' QueueSort orders
            # them), so two gangs that fit alone but not together cannot fail each other in turn
            # for ever. This one keeps its waiting members: its next attempt completes it.
            for other in younger:
                self._reject_held(other, f"PodGroup {key}, created earlier, takes the room")
            return PostFilterResult(
                Status.unschedulable(f"PodGroup {key} waits for the room of later PodGroups {', '.join(younger)}")
            )
        # If this member cannot be placed, its siblings very likely cannot either: give back the
        # room the waiting ones hold now rather than at their timeout.
        self._reject_held(key, "optimistic rejection in PostFilter")
        self._back_off(key, group)
        message = f"PodGroup {key} gets rejected due to Pod {pod.name} is unschedulable even after PostFilter"
        return PostFilterResult(Status.unschedulable(message))

    # -- Reserve ---------------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """A member holds room from here until its Permit (see `_held`)."""
        key = pod_group_key(pod)
        if key is not None:
            self.handle.note_reserved(pod.metadata.uid or pod.key, key)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> None:
        """A member failed after Reserve: reject the group's members holding room. Idempotent."""
        key, group = self._group(pod)
        if key is None:
            return
        self.handle.forget_reserved(pod.metadata.uid or pod.key)
        if group is not None:
            self._reject_held(key, f"rejected because a member of PodGroup {key} was unreserved")

    # -- Permit ----------------------------------------------------------------------------------

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        key, group = self._group(pod)
        if key is None:
            return Status.success(), 0.0
        uid = pod.metadata.uid or pod.key
        rejected = self.handle.take_reserved(uid)
        if rejected:
            return Status.unschedulable(rejected), 0.0
        if group is None:
            return Status.unschedulable("PodGroup not found"), 0.0
        waiting = [w for w in self._waiting_members(key) if w.uid != uid]
        if self._groups.assigned(key) + len(waiting) + 1 >= group.min_member:
            for member in waiting:
                member.allow(self.name)
            return Status.success(), 0.0
        timeout = group.schedule_timeout_seconds
        if timeout is None:
            timeout = self.args.permit_waiting_time_seconds or DEFAULT_SCHEDULE_TIMEOUT
        return Status.wait(f"waiting for PodGroup {key} to have {group.min_member} members"), float(timeout)

    # -- requeueing ------------------------------------------------------------------------------

    def events_to_register(self) -> tuple[ClusterEventWithHint, ...]:
        """Room freed or added may let a rejected gang fit (scheduler-plugins registers Pod Add
        and PodGroup Add/Update, which are no cluster events in kubus)."""
        return events_on((*POD_FREED, NODE_ADDED, NODE_UPDATED))


def _resource_gap(table: NodeTable, group: PodGroup) -> dict[str, int]:
    """What of ``group.min_resources`` the nodes' free room cannot hold (scheduler-plugins'
    CheckClusterResource): each node's allocatable less what its pods outside the group request,
    taken node after node. Empty when it all fits."""
    gap = {name: amount for name, amount in group.min_resources.items() if amount > 0}
    for info in table.node_infos():
        if not gap:
            break
        own: dict[str, int] = {}
        for placed in info.pods.values():
            if pod_group_key(placed.pod) == group.key:
                for name, amount in placed.requests.items():
                    own[name] = own.get(name, 0) + amount
        for name in list(gap):
            free = info.allocatable.get(name, 0) - (info.requested.get(name, 0) - own.get(name, 0))
            gap[name] -= max(free, 0)
            if gap[name] <= 0:
                del gap[name]
    return gap
