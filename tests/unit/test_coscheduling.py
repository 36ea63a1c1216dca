"""Coscheduling (scheduler-plugins' gang scheduling): each extension point with a WaitingPods
handle, then `kubus simulate` end to end."""

from __future__ import annotations

import pytest
from builders import GI, make_node, make_pod

from kubus.api.manifests import Manifests, parse_manifests
from kubus.api.objects import CPU, MEMORY, PODS, Node, Pod
from kubus.api.podgroups import DEFAULT_SCHEDULE_TIMEOUT, POD_GROUP_LABEL, PodGroup
from kubus.cli.simulate import SCHEDULED, UNSCHEDULABLE, PodOutcome, simulate
from kubus.framework.config import ConfigError, CoschedulingArgs, SchedulerConfiguration, default_config, load_config
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterDiagnosis
from kubus.framework.queueing_hints import ALL_EVENTS
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code
from kubus.framework.waiting import WaitingPods
from kubus.kernels import NodeTable
from kubus.kernels.backend import select_backend
from kubus.kernels.nodeinfo import PodInfo
from kubus.plugins import Coscheduling, QueuedPodInfo, in_tree_registry

NS = "default"


def node(name: str, cpu: int = 2000) -> Node:
    return make_node(name, allocatable={CPU: cpu, MEMORY: 8 * GI, PODS: 110})


def pod(name: str, group: str | None = None, *, cpu: int = 1000, priority: int = 0, created: float = 0.0) -> Pod:
    labels = {POD_GROUP_LABEL: group} if group else {}
    return make_pod(
        name,
        namespace=NS,
        uid=f"uid-{name}",
        labels=labels,
        created=created,
        image="busybox",
        requests={CPU: cpu},
        priority=priority,
    )


def plugin(
    *groups: PodGroup, members: dict[str, int] | None = None, assigned: dict[str, int] | None = None
) -> tuple[Coscheduling, WaitingPods]:
    handle = WaitingPods()
    handle.pod_groups.load(groups, members or {}, assigned or {})
    return Coscheduling(None, handle), handle


def wait(cs: Coscheduling, handle: WaitingPods, p: Pod) -> None:
    """Run Permit for ``p`` as the scheduler does: a pod told to wait joins the handle."""
    status, _ = cs.permit(CycleState(), p, "n1")
    assert status.is_wait, status
    handle.add(p.metadata.uid, p.key, "n1", 0, ["Coscheduling"], group=f"{NS}/{p.metadata.labels[POD_GROUP_LABEL]}")


GANG = PodGroup(NS, "gang", min_member=3, creation_timestamp=100.0)


# ---- the plugin, point by point ------------------------------------------------------------------


def test_registered_in_tree_but_not_in_the_default_profile() -> None:
    registry = in_tree_registry()
    assert "Coscheduling" in registry
    points = registry.get("Coscheduling").extension_points
    assert {ExtensionPoint.QUEUE_SORT, ExtensionPoint.PRE_FILTER, ExtensionPoint.POST_FILTER} <= points
    assert {ExtensionPoint.RESERVE, ExtensionPoint.PERMIT} <= points
    profile = default_config(registry).profiles[0]
    assert all(ref.name != "Coscheduling" for refs in profile.plugins.values() for ref in refs)


def test_less_orders_by_priority_then_group_creation_then_group_key() -> None:
    later = PodGroup(NS, "later", min_member=2, creation_timestamp=200.0)
    cs, _ = plugin(GANG, later)

    def q(p: Pod, ts: float) -> QueuedPodInfo:
        return QueuedPodInfo(pod=p, timestamp=ts)

    assert cs.less(q(pod("hi", priority=10), 999), q(pod("g", "gang"), 1))
    # the group's creation time, not the member's queue time
    assert cs.less(q(pod("g-1", "gang"), 500), q(pod("l-1", "later"), 1))
    assert cs.less(q(pod("plain", created=150), 150), q(pod("l-1", "later"), 1))
    assert not cs.less(q(pod("plain", created=150), 150), q(pod("g-1", "gang"), 900))
    # members of one group compare equal: they stay together in the queue
    a, b = q(pod("g-1", "gang"), 1), q(pod("g-2", "gang"), 2)
    assert not cs.less(a, b) and not cs.less(b, a)


def test_pre_filter() -> None:
    table = NodeTable()
    table.add_nodes([node("n1")])
    cs, _ = plugin(GANG, members={"default/gang": 2})
    names, status = cs.pre_filter(CycleState(), pod("plain"), table)
    assert names is None and status.is_success

    _, status = cs.pre_filter(CycleState(), pod("x", "nope"), table)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message() == "PodGroup default/nope not found"

    _, status = cs.pre_filter(CycleState(), pod("g-1", "gang"), table)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message() == (
        "pre-filter pod g-1 cannot find enough sibling pods, current pods number: 2, minMember of group: 3"
    )

    cs, _ = plugin(GANG, members={"default/gang": 3})
    assert cs.pre_filter(CycleState(), pod("g-1", "gang"), table)[1].is_success


def test_pre_filter_checks_min_resources_against_the_free_room_outside_the_group() -> None:
    table = NodeTable()
    table.add_nodes([node("n1", cpu=2000), node("n2", cpu=2000)])
    table.assume(PodInfo.of(pod("other", cpu=1000)), "n1")
    table.assume(PodInfo.of(pod("g-0", "big", cpu=1000)), "n2")  # the group's own room counts as free
    fits = PodGroup(NS, "big", min_member=1, min_resources={CPU: 3000})
    cs, _ = plugin(fits, members={"default/big": 1})
    assert cs.pre_filter(CycleState(), pod("g-1", "big"), table)[1].is_success
    too_big = PodGroup(NS, "big", min_member=1, min_resources={CPU: 3500})
    cs, _ = plugin(too_big, members={"default/big": 1})
    _, status = cs.pre_filter(CycleState(), pod("g-1", "big"), table)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message() == "resource gap: {cpu: 500}"


def test_permit_waits_until_min_member_then_allows_the_waiting_members() -> None:
    cs, handle = plugin(GANG, PodGroup(NS, "other", min_member=2, schedule_timeout_seconds=7))
    assert cs.permit(CycleState(), pod("plain"), "n1")[0].is_success
    status, timeout = cs.permit(CycleState(), pod("g-1", "gang"), "n1")
    assert status.is_wait and timeout == DEFAULT_SCHEDULE_TIMEOUT
    status, timeout = cs.permit(CycleState(), pod("o-1", "other"), "n1")
    assert status.is_wait and timeout == 7
    wait(cs, handle, pod("g-1", "gang"))
    wait(cs, handle, pod("g-2", "gang"))
    wait(cs, handle, pod("o-1", "other"))
    status, _ = cs.permit(CycleState(), pod("g-3", "gang"), "n1")
    assert status.is_success
    assert handle.allowed("uid-g-1") and handle.allowed("uid-g-2")
    assert not handle.allowed("uid-o-1")  # another group's member still waits


def test_permit_counts_assigned_members() -> None:
    cs, _ = plugin(GANG, assigned={"default/gang": 2})
    assert cs.permit(CycleState(), pod("g-3", "gang"), "n1")[0].is_success


def test_post_filter_rejects_the_waiting_members_of_the_group() -> None:
    cs, handle = plugin(GANG, PodGroup(NS, "other", min_member=2))
    wait(cs, handle, pod("g-1", "gang"))
    wait(cs, handle, pod("o-1", "other"))
    result = cs.post_filter(CycleState(), pod("g-2", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message() == (
        "PodGroup default/gang gets rejected due to Pod g-2 is unschedulable even after PostFilter"
    )
    assert handle.rejection("uid-g-1") == "Coscheduling: optimistic rejection in PostFilter"
    assert handle.get_waiting_pod("uid-o-1") is not None
    # a pod in no group: nothing to do
    assert not cs.post_filter(CycleState(), pod("plain"), FilterDiagnosis(1, {}, frozenset())).status.is_success


def test_post_filter_takes_the_room_of_gangs_created_later() -> None:
    """Two gangs that fit alone, not together, each holding some room: the one created first
    takes the later one's room (its own members keep waiting); the later one gives its own back.
    So they cannot fail each other in turn for ever."""
    late = PodGroup(NS, "late", min_member=3, creation_timestamp=200.0)
    cs, handle = plugin(GANG, late)
    for waiting in (pod("g-1", "gang"), pod("l-1", "late"), pod("l-2", "late")):
        wait(cs, handle, waiting)
    result = cs.post_filter(CycleState(), pod("g-2", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message() == "PodGroup default/gang waits for the room of later PodGroups default/late"
    assert (
        handle.rejection("uid-l-1")
        == handle.rejection("uid-l-2")
        == ("Coscheduling: PodGroup default/gang, created earlier, takes the room")
    )
    assert handle.get_waiting_pod("uid-g-1") is not None
    # the later gang, failing in turn, gives back its own room and leaves the earlier one's alone
    cs, handle = plugin(GANG, late)
    for waiting in (pod("g-1", "gang"), pod("l-1", "late")):
        wait(cs, handle, waiting)
    cs.post_filter(CycleState(), pod("l-2", "late"), FilterDiagnosis(1, {}, frozenset()))
    assert handle.rejection("uid-l-1") == "Coscheduling: optimistic rejection in PostFilter"
    assert handle.get_waiting_pod("uid-g-1") is not None


def test_post_filter_leaves_the_group_alone_when_enough_members_are_placed() -> None:
    cs, _ = plugin(GANG, assigned={"default/gang": 3})
    result = cs.post_filter(CycleState(), pod("g-4", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert result.status.code is Code.UNSCHEDULABLE and not result.status.reasons


def test_unreserve_rejects_the_waiting_members() -> None:
    cs, handle = plugin(GANG)
    wait(cs, handle, pod("g-1", "gang"))
    table = NodeTable()
    table.add_nodes([node("n1")])
    assert cs.reserve(CycleState(), pod("g-2", "gang"), table.node_info("n1")).is_success
    cs.unreserve(CycleState(), pod("g-2", "gang"), table.node_info("n1"))
    assert (
        handle.rejection("uid-g-1") == "Coscheduling: rejected because a member of PodGroup default/gang was unreserved"
    )
    cs.unreserve(CycleState(), pod("g-2", "gang"), table.node_info("n1"))  # idempotent


def test_post_filter_rejects_members_reserved_earlier_in_the_batch_at_their_permit() -> None:
    """The cycle runs Permit after the whole batch is reserved: members reserved before a sibling's
    PostFilter hold room as waiting ones would, count as placed, and are refused at Permit."""
    cs, handle = plugin(GANG)
    table = NodeTable()
    table.add_nodes([node("n1")])
    wait(cs, handle, pod("g-1", "gang"))
    assert cs.reserve(CycleState(), pod("g-2", "gang"), table.node_info("n1")).is_success
    assert handle.reserved_members("default/gang") == ["uid-g-2"]
    result = cs.post_filter(CycleState(), pod("g-3", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert result.status.message().startswith("PodGroup default/gang gets rejected")
    assert handle.rejection("uid-g-1") == "Coscheduling: optimistic rejection in PostFilter"
    status, _ = cs.permit(CycleState(), pod("g-2", "gang"), "n1")
    assert status.code is Code.UNSCHEDULABLE and status.message() == "optimistic rejection in PostFilter"
    assert handle.reserved_members("default/gang") == []
    # counted as placed: with 2 of 3 holding room, a gap above 10% still rejects; with the
    # group's third member reserved, PostFilter of a fourth leaves them alone
    cs, handle = plugin(PodGroup(NS, "gang", min_member=2), members={"default/gang": 3})
    for name in ("g-1", "g-2"):
        cs.reserve(CycleState(), pod(name, "gang"), table.node_info("n1"))
    result = cs.post_filter(CycleState(), pod("g-3", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert not result.status.reasons
    assert cs.permit(CycleState(), pod("g-1", "gang"), "n1")[0].is_wait
    # a new batch forgets them
    handle.load_states([])
    assert handle.reserved_members("default/gang") == []


def test_a_batch_larger_than_the_cluster_reserves_nothing_in_the_cycle() -> None:
    """The cycle service's Scheduler (Permit not run in it): 5 members, room for 4 in one batch.
    The fifth's PostFilter rejects the 4 placed before it; their Permit refuses each."""
    registry = in_tree_registry()
    profile = config().profiles[0]
    handle = WaitingPods()
    handle.pod_groups.load([PodGroup(NS, "big", min_member=5)], {"default/big": 5}, {})
    table = NodeTable(backend=select_backend("numpy"))
    table.add_nodes([node("n1"), node("n2")])
    framework = Framework.from_profile(profile, registry, handle=handle)
    members = [pod(f"big-{i}", "big") for i in range(5)]
    results = Scheduler(framework, table).schedule(members)
    assert [r.node is not None for r in results] == [True, True, True, True, False]
    assert "gets rejected" in results[4].message
    verdicts = [framework.run_permit(r.state or CycleState(), r.pod, r.node or "") for r in results[:4]]
    assert all(v.status.code is Code.UNSCHEDULABLE for v in verdicts), [v.status for v in verdicts]


def test_events_to_register_are_cluster_events() -> None:
    cs, _ = plugin()
    kinds = {e.kind for e in cs.events_to_register()}
    assert kinds and kinds <= ALL_EVENTS
    assert "pod.deleted" in kinds and "node.added" in kinds


# ---- kubus simulate, end to end --------------------------------------------------------------------

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
      disabled: [{name: PrioritySort}]
"""

CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {allocatable: {cpu: "2", memory: 8Gi, pods: "110"}}
"""


def config() -> SchedulerConfiguration:
    return load_config(CONFIG, registry=in_tree_registry())


def group_doc(name: str, min_member: int, minute: int = 0) -> str:
    return f"""---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: {name}, namespace: default, creationTimestamp: "2024-01-01T00:{minute:02d}:00Z"}}
spec: {{minMember: {min_member}}}
"""


def pod_doc(name: str, group: str | None = None, cpu: str = "1", minute: int = 0) -> str:
    labels = f"labels: {{{POD_GROUP_LABEL}: {group}}}, " if group else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, {labels}creationTimestamp: "2024-01-01T00:{minute:02d}:00Z"}}
spec: {{containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "{cpu}"}}}}}}]}}
"""


def run(text: str) -> dict[str, PodOutcome]:
    outcomes, _ = simulate(parse_manifests(CLUSTER + text), config(), backend=select_backend("numpy"))
    return {o.pod.name: o for o in outcomes}


def test_the_coscheduling_profile_replaces_priority_sort() -> None:
    [profile] = config().profiles
    assert [ref.name for ref in profile.plugins[ExtensionPoint.QUEUE_SORT]] == ["Coscheduling"]
    assert "Coscheduling" in [ref.name for ref in profile.plugins[ExtensionPoint.PERMIT]]


def test_a_whole_gang_is_placed() -> None:
    out = run(group_doc("gang", 3) + "".join(pod_doc(f"g-{i}", "gang") for i in range(3)))
    assert {name: o.status for name, o in out.items()} == dict.fromkeys(("g-0", "g-1", "g-2"), SCHEDULED)
    assert all(o.node for o in out.values())


def test_a_gang_built_directly_without_parse_manifests() -> None:
    manifests = Manifests(
        pods=[pod(f"g-{i}", "gang") for i in range(3)],
        nodes=[node("n1"), node("n2")],
        pod_groups=(GANG,),
    )
    outcomes, _ = simulate(manifests, config(), backend=select_backend("numpy"))
    assert [o.status for o in outcomes] == [SCHEDULED] * 3


def test_a_gang_short_of_members_is_not_placed() -> None:
    out = run(group_doc("gang", 3) + pod_doc("g-0", "gang") + pod_doc("g-1", "gang"))
    assert [o.status for o in out.values()] == [UNSCHEDULABLE] * 2
    assert "pre-filter pod g-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 3" in (
        out["g-0"].message
    )


def test_a_gang_larger_than_the_cluster_holds_no_node_at_the_end() -> None:
    gang = "".join(pod_doc(f"g-{i}", "big") for i in range(5))
    out = run(group_doc("big", 5) + gang + pod_doc("whole-node", cpu="2", minute=1))
    assert all(out[f"g-{i}"].status == UNSCHEDULABLE for i in range(5))
    assert out["whole-node"].status == SCHEDULED
    messages = [out[f"g-{i}"].message for i in range(5)]
    assert sum("PodGroup default/big gets rejected due to Pod" in m for m in messages) == 1
    assert sum("Coscheduling: optimistic rejection in PostFilter" in m for m in messages) == 4


def test_two_gangs_that_fit_alone_but_not_together_never_place_partially() -> None:
    interleaved = "".join(pod_doc(f"{g}-{i}", g) for i in range(3) for g in ("b", "a"))
    out = run(group_doc("a", 3, minute=0) + group_doc("b", 3, minute=1) + interleaved)
    assert [out[f"a-{i}"].status for i in range(3)] == [SCHEDULED] * 3
    assert [out[f"b-{i}"].status for i in range(3)] == [UNSCHEDULABLE] * 3
    placed: dict[str, int] = {}
    for o in out.values():
        if o.node:
            placed[o.node] = placed.get(o.node, 0) + 1
    assert all(n <= 2 for n in placed.values())


def test_a_plain_pod_in_a_coscheduling_profile_is_scheduled() -> None:
    out = run(pod_doc("plain"))
    assert out["plain"].status == SCHEDULED


# ---- CoschedulingArgs: scheduler-plugins' config, and what each field does -------------------------

# scheduler-plugins' published config for its second scheduler (the chart's scheduler-config
# with plugins.enabled [Coscheduling], plugins.disabled [PrioritySort]).
PUBLISHED_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: scheduling-plugins
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
      disabled: [{name: PrioritySort}]
  pluginConfig:
  - name: Coscheduling
    args: %s
"""


def coscheduling_args(args: str) -> CoschedulingArgs:
    cfg = load_config(PUBLISHED_CONFIG % args, registry=in_tree_registry())
    got = cfg.profile("scheduling-plugins").plugin_args["Coscheduling"]
    assert isinstance(got, CoschedulingArgs)
    return got


def coscheduling_args_error(args: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(PUBLISHED_CONFIG % args, registry=in_tree_registry())
    return str(err.value)


def test_scheduler_plugins_published_config_loads() -> None:
    assert coscheduling_args("{permitWaitingTimeSeconds: 10}") == CoschedulingArgs(10, 0, 10)
    typed = "{apiVersion: kubescheduler.config.k8s.io/v1, kind: CoschedulingArgs, permitWaitingTimeSeconds: 10}"
    assert coscheduling_args(typed) == CoschedulingArgs(10, 0, 10)
    every = "{permitWaitingTimeSeconds: 5, podGroupBackoffSeconds: 30, podGroupRejectPercentage: 0}"
    assert coscheduling_args(every) == CoschedulingArgs(5, 30, 0)
    # the plugin a framework builds from the profile gets them
    profile = load_config(PUBLISHED_CONFIG % "{permitWaitingTimeSeconds: 10}", registry=in_tree_registry()).profiles[0]
    framework = Framework.from_profile(profile, in_tree_registry(), handle=WaitingPods())
    [cs] = [p for p in framework.permit if isinstance(p, Coscheduling)]
    assert cs.args == CoschedulingArgs(10, 0, 10)


def test_coscheduling_args_defaults() -> None:
    # scheduler-plugins' SetDefaults_CoschedulingArgs (and podGroupRejectPercentage's 10)
    defaults = CoschedulingArgs()
    assert (defaults.permit_waiting_time_seconds, defaults.pod_group_backoff_seconds) == (60, 0)
    assert defaults.pod_group_reject_percentage == 10
    assert coscheduling_args("{}") == defaults
    assert coscheduling_args("null") == defaults
    # an enabled Coscheduling without pluginConfig gets the defaults, as kube appends them
    assert config().profiles[0].plugin_args["Coscheduling"] == defaults


def test_coscheduling_args_are_validated_as_scheduler_plugins_does() -> None:
    prefix = 'profile "scheduling-plugins": pluginConfig[0].args'
    assert coscheduling_args_error("{permitWaitingTimeSeconds: -1}") == (
        f"{prefix}.permitWaitingTimeSeconds: invalid value -1: must be greater than 0"
    )
    assert coscheduling_args_error("{podGroupBackoffSeconds: -5}") == (
        f"{prefix}.podGroupBackoffSeconds: invalid value -5: must be greater than 0"
    )
    assert coscheduling_args_error("{podGroupRejectPercentage: 101}") == (
        f"{prefix}.podGroupRejectPercentage: invalid value 101: must be between 0 and 100"
    )
    assert coscheduling_args_error("{permitWaitingTimeSeconds: '10'}") == (
        f"{prefix}.permitWaitingTimeSeconds: expected an integer, got string '10'"
    )
    # 0 is allowed (scheduler-plugins refuses only negatives)
    assert coscheduling_args("{permitWaitingTimeSeconds: 0, podGroupBackoffSeconds: 0}") == CoschedulingArgs(0, 0)
    # a field v1 does not have (v1beta2's deniedPGExpirationTimeSeconds) is named
    assert coscheduling_args_error("{permitWaitingTimeSeconds: 10, deniedPGExpirationTimeSeconds: 3}") == (
        f'{prefix}: unknown field "deniedPGExpirationTimeSeconds" (known fields: permitWaitingTimeSeconds, '
        "podGroupBackoffSeconds, podGroupRejectPercentage)"
    )
    assert coscheduling_args_error("{kind: NodeResourcesFitArgs}") == (
        f'{prefix}.kind: args for plugin Coscheduling must be of kind CoschedulingArgs, not "NodeResourcesFitArgs"'
    )


def test_without_disabling_priority_sort_the_profile_has_two_queue_sorts() -> None:
    # as kube: Coscheduling's QueueSort does not replace PrioritySort by itself
    text = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{schedulerName: scheduling-plugins, plugins: {multiPoint: {enabled: [{name: Coscheduling}]}}}]"
    )
    with pytest.raises(ConfigError, match="only one queue sort plugin required, but got 2"):
        load_config(text, registry=in_tree_registry())


def test_permit_waits_permit_waiting_time_seconds_unless_the_group_names_its_timeout() -> None:
    handle = WaitingPods()
    handle.pod_groups.load([GANG, PodGroup(NS, "other", min_member=2, schedule_timeout_seconds=7)], {}, {})
    cs = Coscheduling(CoschedulingArgs(permit_waiting_time_seconds=10), handle)
    status, timeout = cs.permit(CycleState(), pod("g-1", "gang"), "n1")
    assert status.is_wait and timeout == 10
    status, timeout = cs.permit(CycleState(), pod("o-1", "other"), "n1")
    assert status.is_wait and timeout == 7  # the PodGroup's scheduleTimeoutSeconds wins
    # 0 means the default wait, as scheduler-plugins' GetWaitTimeDuration
    zero = Coscheduling(CoschedulingArgs(permit_waiting_time_seconds=0), handle)
    assert zero.permit(CycleState(), pod("g-1", "gang"), "n1")[1] == DEFAULT_SCHEDULE_TIMEOUT
    # through the framework, as the cycle and kubus simulate run Permit
    profile = load_config(PUBLISHED_CONFIG % "{permitWaitingTimeSeconds: 10}", registry=in_tree_registry()).profiles[0]
    framework = Framework.from_profile(profile, in_tree_registry(), handle=handle)
    verdict = framework.run_permit(CycleState(), pod("g-1", "gang"), "n1")
    assert verdict.status.is_wait and verdict.waiting_on == {"Coscheduling": 10.0}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def backoff_plugin(seconds: int, members: int) -> tuple[Coscheduling, WaitingPods, FakeClock]:
    handle = WaitingPods()
    handle.pod_groups.load([GANG], {"default/gang": members}, {})
    clock = FakeClock()
    return Coscheduling(CoschedulingArgs(pod_group_backoff_seconds=seconds), handle, clock=clock), handle, clock


def test_a_group_post_filter_rejects_is_backed_off_for_pod_group_backoff_seconds() -> None:
    cs, handle, clock = backoff_plugin(30, members=3)
    table = NodeTable(select_backend("numpy"), capacity=4)
    table.add_nodes([node("n1")])
    assert cs.pre_filter(CycleState(), pod("g-1", "gang"), table)[1].is_success
    wait(cs, handle, pod("g-1", "gang"))
    result = cs.post_filter(CycleState(), pod("g-2", "gang"), FilterDiagnosis(1, {}, frozenset()))
    assert result.status.code is Code.UNSCHEDULABLE
    assert handle.rejection("uid-g-1") == "Coscheduling: optimistic rejection in PostFilter"
    _, status = cs.pre_filter(CycleState(), pod("g-3", "gang"), table)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message() == "podGroup default/gang failed recently"
    clock.now += 29.9
    assert not cs.pre_filter(CycleState(), pod("g-3", "gang"), table)[1].is_success
    clock.now += 0.1
    assert cs.pre_filter(CycleState(), pod("g-3", "gang"), table)[1].is_success
    assert not cs.backed_off("default/gang")


def test_no_backoff_when_off_or_when_the_group_lacks_pods() -> None:
    for seconds, members in ((0, 3), (30, 2)):
        cs, handle, _ = backoff_plugin(seconds, members)
        wait(cs, handle, pod("g-1", "gang"))
        cs.post_filter(CycleState(), pod("g-2", "gang"), FilterDiagnosis(1, {}, frozenset()))
        assert handle.rejection("uid-g-1")  # rejected all the same
        assert not cs.backed_off("default/gang"), (seconds, members)


def test_pod_group_reject_percentage_is_the_gap_post_filter_tolerates() -> None:
    # minMember 3, one member holding room: 2 of 3 (67%) still missing
    for percentage, rejects in ((0, True), (10, True), (66, True), (67, False), (100, False)):
        handle = WaitingPods()
        handle.pod_groups.load([GANG], {"default/gang": 3}, {})
        cs = Coscheduling(
            CoschedulingArgs(pod_group_backoff_seconds=30, pod_group_reject_percentage=percentage), handle
        )
        wait(cs, handle, pod("g-1", "gang"))
        result = cs.post_filter(CycleState(), pod("g-2", "gang"), FilterDiagnosis(1, {}, frozenset()))
        assert result.status.code is Code.UNSCHEDULABLE
        assert bool(handle.rejection("uid-g-1")) is rejects, percentage
        assert cs.backed_off("default/gang") is rejects, percentage
