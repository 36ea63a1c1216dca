"""The nodewise reference scheduler: kube's schedulePod, FitError text, sampling, tie-break and
sequential placement."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from builders import make_node, make_pod

from kubus.api.objects import (
    Affinity,
    Container,
    GPUDevice,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    Pod,
    PodSpec,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
)
from kubus.api.objects import (
    NodeAffinity as NodeAffinitySpec,
)
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus.kernels.tiebreak import node_tie_hash, pod_tie_hash, tie_key
from kubus_reference import (
    GPUFit,
    ImageLocality,
    NodeAffinity,
    NodeName,
    NodePorts,
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeUnschedulable,
    PluginScore,
    ReferenceProfile,
    ReferenceScheduler,
    TaintToleration,
    fit_error_message,
    num_feasible_nodes_to_find,
)

GI = 1024**3
_names = itertools.count()
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
WEIGHTS = {"TaintToleration": 3, "NodeAffinity": 2}


def default_profile(pct: int | None = None) -> ReferenceProfile:
    plugins = [
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(),
        NodeAffinity(),
        NodePorts(),
        NodeResourcesFit(),
        NodeResourcesBalancedAllocation(),
        ImageLocality(),
        GPUFit(),
    ]
    return ReferenceProfile.of(plugins, WEIGHTS, pct)


def node(
    name: str, cpu: int = 4000, mem: int = 8 * GI, *, taints=(), unschedulable=False, labels=None, gpus=()
) -> NodeInfo:
    alloc = {"cpu": cpu, "memory": mem, "pods": 110}
    return NodeInfo(
        make_node(name, labels=labels, allocatable=alloc, taints=taints, unschedulable=unschedulable, gpu_devices=gpus)
    )


def pod(
    cpu: int = 100, mem: int = 100 * 1024 * 1024, *, uid: str = "", affinity=None, annotations=None, extra=None
) -> Pod:
    name = f"pod-{next(_names)}"
    requests = {"cpu": cpu, "memory": mem, **(extra or {})}
    return make_pod(name, uid=uid or name, annotations=annotations, requests=requests, affinity=affinity)


def name_terms(*names: str) -> Affinity:
    terms = tuple(
        NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", SelectorOperator.IN, (n,)),))
        for n in names
    )
    return Affinity(node_affinity=NodeAffinitySpec(required=NodeSelector(terms)))


TAINT = Taint("k", "v", TaintEffect.NO_SCHEDULE)


# ---- kube's helpers


@pytest.mark.parametrize(
    ("pct", "nodes", "want"),
    [
        (None, 0, 0),
        (None, 50, 50),
        (None, 99, 99),
        (None, 100, 100),
        (None, 150, 100),
        (None, 1000, 420),
        (None, 6000, 300),
        (0, 1000, 420),
        (10, 5000, 500),
        (1, 5000, 100),
        (100, 5000, 5000),
        (50, 20, 20),
    ],
)
def test_num_feasible_nodes_to_find(pct, nodes, want) -> None:
    assert num_feasible_nodes_to_find(pct, nodes) == want


def test_fit_error_message_sorts_count_reason_strings() -> None:
    statuses = {f"n{i}": Status(Code.UNSCHEDULABLE, ("node(s) were unschedulable",)) for i in range(10)}
    statuses.update(
        {"a": Status(Code.UNSCHEDULABLE, ("Insufficient cpu",)), "b": Status(Code.UNSCHEDULABLE, ("Insufficient cpu",))}
    )
    # "10 ..." sorts before "2 ..." as strings do
    assert (
        fit_error_message(12, statuses)
        == "0/12 nodes are available: 10 node(s) were unschedulable, 2 Insufficient cpu."
    )
    assert fit_error_message(3, {"a": Status(Code.UNSCHEDULABLE)}) == "0/3 nodes are available:"
    assert fit_error_message(3, {}, Status(UU, ("x",)), "x") == "0/3 nodes are available: x."


# ---- unschedulable pods


def test_no_nodes() -> None:
    result = ReferenceScheduler(default_profile()).schedule(pod(), [])
    assert result.node is None
    assert result.status == Status(UU, ("no nodes available to schedule pods",))
    assert result.message == "no nodes available to schedule pods"


def test_fit_error_counts_every_reason_of_every_node() -> None:
    nodes = [
        node("n1", cpu=100),
        node("n2", taints=[TAINT]),
        node("n3", unschedulable=True),
        node("n4", cpu=100, mem=GI // 2),
    ]
    result = ReferenceScheduler(default_profile()).schedule(pod(cpu=500, mem=GI), nodes)
    assert result.node is None
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/4 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint {k: v}, "
        "1 node(s) were unschedulable, 2 Insufficient cpu."
    )
    assert result.reasons == {
        "Insufficient cpu": 2,
        "Insufficient memory": 1,
        "node(s) had untolerated taint {k: v}": 1,
        "node(s) were unschedulable": 1,
    }
    assert result.filter_reasons == {
        "n1": "NodeResourcesFit: Insufficient cpu",
        "n2": "TaintToleration: node(s) had untolerated taint {k: v}",
        "n3": "NodeUnschedulable: node(s) were unschedulable",
        "n4": "NodeResourcesFit: Insufficient cpu, Insufficient memory",
    }
    assert result.evaluated == 4


def test_pre_filter_rejection_names_the_reason_once() -> None:
    conflict = Affinity(
        node_affinity=NodeAffinitySpec(
            required=NodeSelector(
                (
                    NodeSelectorTerm(
                        match_fields=(
                            NodeSelectorRequirement("metadata.name", SelectorOperator.IN, ("n1",)),
                            NodeSelectorRequirement("metadata.name", SelectorOperator.IN, ("n2",)),
                        )
                    ),
                )
            )
        )
    )
    sched = ReferenceScheduler(default_profile())
    result = sched.schedule(pod(affinity=conflict), [node("n1"), node("n2"), node("n3")])
    assert result.message == "0/3 nodes are available: pod affinity terms conflict."
    assert result.status.code is Code.UNSCHEDULABLE and result.status.plugin == "NodeAffinity"
    assert result.filter_reasons == {n: "NodeAffinity: pod affinity terms conflict" for n in ("n1", "n2", "n3")}
    assert sched.next_start_node_index == 0


def test_nodes_left_out_by_pre_filter_count_as_one_reason() -> None:
    nodes = [node("n1", taints=[TAINT]), node("n2"), node("n3")]
    result = ReferenceScheduler(default_profile()).schedule(pod(affinity=name_terms("n1")), nodes)
    assert result.message == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    assert result.filter_reasons["n2"] == "NodeAffinity: node(s) didn't satisfy plugin(s) [NodeAffinity]"
    assert result.evaluated == 1


class Narrow:
    """A PreFilter plugin that allows a fixed set of node names."""

    def __init__(self, name: str, names: set[str]) -> None:
        self.name, self.names = name, names

    def pre_filter(self, state, pod, nodes):
        return frozenset(self.names), Status.success()


class Verdict:
    """A PreFilter plugin returning a fixed status, recording that it ran."""

    def __init__(self, name: str, status: Status) -> None:
        self.name, self.status, self.ran = name, status, 0

    def pre_filter(self, state, pod, nodes):
        self.ran += 1
        return None, self.status


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ([Narrow("A", set())], "node(s) didn't satisfy plugin A"),
        ([Narrow("B", {"n1"}), Narrow("A", {"n2"})], "node(s) didn't satisfy plugin(s) [A B] simultaneously"),
    ],
)
def test_empty_pre_filter_intersection(plugins, message) -> None:
    profile = ReferenceProfile(pre_filter=plugins, filter=[NodeName()])
    result = ReferenceScheduler(profile).schedule(pod(), [node("n1"), node("n2")])
    assert result.status == Status(Code.UNSCHEDULABLE, (f"0/2 nodes are available: {message}.",))
    assert result.filter_reasons == {"n1": message, "n2": message}


def test_pre_filter_unschedulable_runs_the_rest_and_unresolvable_stops() -> None:
    first = Verdict("First", Status.unschedulable("first says no"))
    later = Verdict("Later", Status.unschedulable("later says no"))
    profile = ReferenceProfile(pre_filter=[first, later])
    result = ReferenceScheduler(profile).schedule(pod(), [node("n1")])
    assert (first.ran, later.ran) == (1, 1)
    assert result.message == "0/1 nodes are available: later says no."
    assert result.status.plugin == "Later"

    stop = Verdict("Stop", Status.unschedulable("stop", resolvable=False))
    never = Verdict("Never", Status.success())
    result = ReferenceScheduler(ReferenceProfile(pre_filter=[stop, never])).schedule(pod(), [node("n1")])
    assert never.ran == 0 and result.message == "0/1 nodes are available: stop."


def test_pre_filter_error() -> None:
    profile = ReferenceProfile(pre_filter=[Verdict("Bad", Status.error("kaput"))])
    result = ReferenceScheduler(profile).schedule(pod(), [node("n1")])
    assert result.status.code is Code.ERROR
    assert result.message == 'running PreFilter plugin "Bad": kaput'


class Boom:
    name = "Boom"

    def filter(self, state, pod, node_info):
        return Status.error("boom") if node_info.name == "n2" else Status.success()


def test_filter_error() -> None:
    profile = ReferenceProfile(filter=[Boom()], score=[(NodeResourcesFit(), 1)])
    sched = ReferenceScheduler(profile)
    result = sched.schedule(pod(), [node("n1"), node("n2"), node("n3")])
    assert result.status.code is Code.ERROR
    assert result.message == 'running "Boom" filter plugin: boom'
    # kube advances the start index by the nodes it recorded (n1 feasible), not the failing one
    assert sched.next_start_node_index == 1


# ---- scoring and choosing


def test_scores_are_normalized_weighted_and_summed() -> None:
    nodes = [node("n1", taints=[Taint("a", "b", TaintEffect.PREFER_NO_SCHEDULE)]), node("n2", cpu=8000)]
    profile = ReferenceProfile(
        filter=[NodeResourcesFit()],
        pre_filter=[NodeResourcesFit()],
        pre_score=[TaintToleration()],
        score=[(TaintToleration(), 3), (NodeResourcesFit(), 1)],
    )
    result = ReferenceScheduler(profile).schedule(pod(cpu=1000, mem=GI), nodes)
    assert result.node == "n2"
    assert result.scores == {
        "n1": {"TaintToleration": PluginScore(1, 0, 0), "NodeResourcesFit": PluginScore(81, 81, 81)},
        "n2": {"TaintToleration": PluginScore(0, 100, 300), "NodeResourcesFit": PluginScore(87, 87, 87)},
    }
    assert result.total == {"n1": 81, "n2": 387}


def test_a_single_feasible_node_is_chosen_without_scoring() -> None:
    result = ReferenceScheduler(default_profile()).schedule(pod(), [node("n1", cpu=10), node("n2")])
    assert result.node == "n2"
    assert result.scores == {} and result.total == {}
    assert result.feasible == ("n2",) and result.evaluated == 2


def test_ties_go_to_the_smallest_tie_key() -> None:
    names = [f"node-{i}" for i in range(6)]
    winners = set()
    for seed in range(8):
        p = pod(uid="the-pod")
        result = ReferenceScheduler(default_profile(), seed=seed).schedule(p, [node(n) for n in names])
        assert len(set(result.total.values())) == 1
        want = min(names, key=lambda n, s=seed: tie_key(pod_tie_hash(s, "the-pod"), node_tie_hash(s, n)))
        assert result.node == want
        again = ReferenceScheduler(default_profile(), seed=seed).schedule(p, [node(n) for n in reversed(names)])
        assert again.node == want
        winners.add(want)
    assert len(winners) > 1


def test_tie_key_uses_the_pod_key_without_uid() -> None:
    p = Pod(ObjectMeta(name="no-uid", namespace="ns"), PodSpec(containers=(Container("c"),)))
    names = [f"node-{i}" for i in range(4)]
    result = ReferenceScheduler(default_profile(), seed=3).schedule(p, [node(n) for n in names])
    assert result.node == min(names, key=lambda n: tie_key(pod_tie_hash(3, "ns/no-uid"), node_tie_hash(3, n)))


class Wild:
    name = "Wild"

    def score(self, state, pod, node_info):
        return 150


def test_scores_out_of_range_are_an_error() -> None:
    profile = ReferenceProfile(score=[(Wild(), 1)])
    result = ReferenceScheduler(profile, percentage_of_nodes_to_score=100).schedule(pod(), [node("n1"), node("n2")])
    assert result.status.code is Code.ERROR
    assert "invalid score 150" in result.message


def test_pre_score_error() -> None:
    bad = Affinity(
        node_affinity=NodeAffinitySpec(
            preferred=(
                PreferredSchedulingTerm(
                    1, NodeSelectorTerm((NodeSelectorRequirement("a", SelectorOperator.GT, ("x",)),))
                ),
            )
        )
    )
    result = ReferenceScheduler(default_profile()).schedule(pod(affinity=bad), [node("n1"), node("n2")])
    assert result.status.code is Code.ERROR
    assert result.message.startswith('running PreScore plugin "NodeAffinity": ')


# ---- sampling (numFeasibleNodesToFind, nextStartNodeIndex)


def test_sampling_rotates_the_start_node() -> None:
    nodes = [node(f"n{i:03d}") for i in range(150)]
    sched = ReferenceScheduler(default_profile())
    first = sched.schedule(pod(), nodes)
    assert len(first.feasible) == 100 and first.feasible[0] == "n000" and first.evaluated == 100
    assert sched.next_start_node_index == 100
    second = sched.schedule(pod(), nodes)
    assert second.feasible[:2] == ("n100", "n101") and second.feasible[-1] == "n049"
    assert sched.next_start_node_index == 50


def test_sampling_counts_rejected_nodes_as_examined() -> None:
    nodes = [node(f"n{i:03d}", taints=[TAINT] if i % 3 == 0 else ()) for i in range(150)]
    sched = ReferenceScheduler(default_profile())
    result = sched.schedule(pod(), nodes)
    assert len(result.feasible) == 100 and result.evaluated == 150
    assert sched.next_start_node_index == 0


def test_profile_percentage_wins_over_global() -> None:
    nodes = [node(f"n{i:03d}") for i in range(300)]
    sched = ReferenceScheduler(default_profile(pct=50), percentage_of_nodes_to_score=10)
    assert len(sched.schedule(pod(), nodes).feasible) == 150
    sched = ReferenceScheduler(default_profile(), percentage_of_nodes_to_score=10)
    assert len(sched.schedule(pod(), nodes).feasible) == 100


def test_narrowed_nodes_start_at_the_index_modulo_their_count() -> None:
    nodes = [node(f"n{i}") for i in range(10)]
    sched = ReferenceScheduler(default_profile())
    sched.next_start_node_index = 4
    result = sched.schedule(pod(affinity=name_terms("n2", "n5", "n7")), nodes)
    assert result.feasible == ("n5", "n7", "n2")
    assert sched.next_start_node_index == 7


def test_without_score_plugins_the_first_feasible_node_wins() -> None:
    profile = ReferenceProfile(pre_filter=[NodeResourcesFit()], filter=[NodeResourcesFit()])
    sched = ReferenceScheduler(profile)
    nodes = [node("n0"), node("n1", cpu=10), node("n2"), node("n3")]
    got = [sched.schedule(pod(), nodes).node for _ in range(4)]
    assert got == ["n0", "n2", "n3", "n0"]


def test_without_filter_or_score_plugins_nodes_take_turns() -> None:
    sched = ReferenceScheduler(ReferenceProfile())
    nodes = [node("n0"), node("n1"), node("n2")]
    assert [sched.schedule(pod(), nodes).node for _ in range(4)] == ["n0", "n1", "n2", "n0"]


# ---- Reserve and sequential placement


class Deny:
    name = "Deny"

    def __init__(self) -> None:
        self.unreserved = 0

    def reserve(self, state, pod, node_info):
        return Status.unschedulable("no room at the inn")

    def unreserve(self, state, pod, node_info):
        self.unreserved += 1


def test_reserve_rejection_undoes_and_fails_the_pod() -> None:
    gpu, deny = GPUFit(), Deny()
    profile = ReferenceProfile(reserve=[gpu, deny])
    result = ReferenceScheduler(profile).schedule(pod(), [node("n1")])
    assert result.node is None
    assert result.status == Status(Code.UNSCHEDULABLE, ("0/1 nodes are available: 1 no room at the inn.",), "Deny")
    assert deny.unreserved == 1


def test_schedule_all_respects_capacity() -> None:
    nodes = [node("n1", cpu=1000, mem=4 * GI), node("n2", cpu=1000, mem=4 * GI)]
    results = ReferenceScheduler(default_profile(), seed=7).schedule_all([pod(cpu=400) for _ in range(5)], nodes)
    placed = Counter(r.node for r in results if r.node)
    assert placed == {"n1": 2, "n2": 2}
    assert results[-1].node is None
    assert results[-1].message == "0/2 nodes are available: 2 Insufficient cpu."
    for n in nodes:
        assert n.requested["cpu"] <= n.allocatable["cpu"] and len(n.pods) == 2


def test_schedule_all_spreads_by_least_allocated() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    results = ReferenceScheduler(default_profile()).schedule_all([pod(cpu=1000, mem=GI) for _ in range(3)], nodes)
    assert sorted(r.node for r in results) == ["n1", "n2", "n3"]


def test_schedule_all_records_gpu_devices() -> None:
    devices = tuple(GPUDevice(i, f"GPU-{i}", "A100", 40 * GI) for i in range(2))
    nodes = [node("g1", gpus=devices)]
    shared = {"kubus.io/gpu-memory": "30Gi"}
    results = ReferenceScheduler(default_profile()).schedule_all(
        [pod(annotations=shared), pod(annotations=shared), pod(annotations=shared)], nodes
    )
    assert [r.gpu_devices for r in results[:2]] == [(0,), (1,)]
    assert results[2].node is None
    assert results[2].message == "0/1 nodes are available: 1 node(s) didn't have enough free GPU memory."
    assert nodes[0].gpu_free_memory == [10 * GI, 10 * GI]
    assert nodes[0].gpu_pod_count == [1, 1]


def test_plugin_names_and_profile_points() -> None:
    import kubus_reference as reference

    names = [cls.name for cls in reference.ALL_PLUGINS]
    assert names == [
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "GPUFit",
        "DefaultBinder",
    ]
    profile = default_profile()
    assert [p.name for p in profile.pre_filter] == ["NodeAffinity", "NodePorts", "NodeResourcesFit", "GPUFit"]
    assert [p.name for p in profile.filter] == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "GPUFit",
    ]
    assert [(p.name, w) for p, w in profile.score] == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
        ("GPUFit", 1),
    ]
    assert [p.name for p in profile.reserve] == ["GPUFit"]
