"""ScheduleResult.plugins: which plugins rejected an unschedulable pod (what the cycle reports to
the queue for its QueueingHints)."""

from __future__ import annotations

from builders import make_node, make_pod
from support import without_post_filter

from kubus.api.objects import (
    CPU,
    MEMORY,
    PODS,
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    SelectorOperator,
    Taint,
    TaintEffect,
)
from kubus.framework.config import default_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels import NodeTable
from kubus.plugins import in_tree_registry

GI = 1024**3


def scheduler(*nodes: Node) -> Scheduler:
    registry = in_tree_registry()
    profile = without_post_filter(default_config(registry).profiles[0])
    table = NodeTable()
    table.add_nodes(nodes)
    return Scheduler(Framework.from_profile(profile, registry), table)


def node(name: str, cpu: int = 4000, *, taints: tuple[Taint, ...] = (), unschedulable: bool = False) -> Node:
    alloc = {CPU: cpu, MEMORY: 8 * GI, PODS: 110}
    return make_node(name, allocatable=alloc, taints=taints, unschedulable=unschedulable)


def pod(name: str = "p", cpu: int = 1000, **spec: object) -> Pod:
    return make_pod(name, uid=f"uid-{name}", image="busybox", requests={CPU: cpu}, **spec)  # type: ignore[arg-type]


def test_a_placed_pod_names_no_plugin() -> None:
    [result] = scheduler(node("n1")).schedule([pod()])
    assert result.node == "n1" and result.plugins == ()


def test_every_filter_plugin_that_rejected_some_node_is_named_once_sorted() -> None:
    s = scheduler(
        node("small", cpu=500),
        node("tainted", taints=(Taint("gpu", "true", TaintEffect.NO_SCHEDULE),)),
        node("cordoned", unschedulable=True),
        node("small-2", cpu=100),
    )
    [result] = s.schedule([pod(cpu=1000)])
    assert result.node is None
    assert result.plugins == ("NodeResourcesFit", "NodeUnschedulable", "TaintToleration")
    assert result.message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
        "1 node(s) were unschedulable, 2 Insufficient cpu."
    )


def test_a_node_is_charged_to_the_first_plugin_that_rejected_it_only() -> None:
    # The cordoned node is also too small, but NodeUnschedulable runs first: kube stops there.
    [result] = scheduler(node("cordoned", cpu=100, unschedulable=True)).schedule([pod(cpu=1000)])
    assert result.plugins == ("NodeUnschedulable",)


def test_later_pods_of_a_class_reuse_the_diagnosis_with_its_plugins() -> None:
    results = scheduler(node("n1", cpu=1500)).schedule([pod("a"), pod("b"), pod("c")])
    assert [r.node for r in results] == ["n1", None, None]
    assert [r.plugins for r in results] == [(), ("NodeResourcesFit",), ("NodeResourcesFit",)]


def pinned_to(*names: str) -> Affinity:
    term = NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", SelectorOperator.IN, names),))
    return Affinity(NodeAffinity(NodeSelector((term,))))


def test_a_pre_filter_that_left_the_nodes_out_is_named() -> None:
    [result] = scheduler(node("n1")).schedule([pod(affinity=pinned_to("x"))])
    assert result.node is None
    assert result.plugins == ("NodeAffinity",)
    assert result.message == "0/1 nodes are available: 1 node(s) didn't satisfy plugin(s) [NodeAffinity]."


def test_a_pre_filter_that_narrows_to_no_node_at_all_is_named() -> None:
    [result] = scheduler(node("n1")).schedule([pod(affinity=pinned_to())])
    assert result.node is None
    assert result.plugins == ("NodeAffinity",)
    # names that no node can have: NodeAffinity's PreFilter rejects the pod itself, as kube's does
    assert result.message == "0/1 nodes are available: pod affinity terms conflict."


def test_an_empty_cluster_names_no_plugin() -> None:
    [result] = scheduler().schedule([pod()])
    assert result.node is None and result.plugins == ()
