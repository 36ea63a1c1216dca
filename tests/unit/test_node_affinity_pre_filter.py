"""NodeAffinity's PreFilter, vectorized and reference alike: kube's node-name narrowing of the
required terms, and "pod affinity terms conflict" when every term's names conflict."""

from __future__ import annotations

import pytest
from builders import make_node, make_pod
from support import without_post_filter

from kubus.api.objects import (
    Affinity,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    SelectorOperator,
)
from kubus.api.objects import NodeAffinity as NodeAffinitySpec
from kubus.framework.config import default_config
from kubus.framework.cycle_state import CycleState
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code, Status
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo
from kubus.plugins import in_tree_registry
from kubus.plugins.node_affinity import ERR_REASON_CONFLICT, NodeAffinity
from kubus_reference import ReferenceScheduler, reference_profile
from kubus_reference.node_affinity import NodeAffinity as ReferenceNodeAffinity

IN, NOT_IN = SelectorOperator.IN, SelectorOperator.NOT_IN
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def names(op: SelectorOperator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement("metadata.name", op, values)


def pod(*terms: NodeSelectorTerm) -> Pod:
    affinity = Affinity(node_affinity=NodeAffinitySpec(required=NodeSelector(terms)))
    return make_pod(uid="u-p", affinity=affinity)


def node(name: str) -> Node:
    return make_node(name, allocatable={"cpu": 4000, "memory": 8 * 1024**3, "pods": 110})


ZONE_A = NodeSelectorRequirement("zone", IN, ("a",))
CASES = [
    ("one term of names", pod(NodeSelectorTerm(match_fields=(names(IN, "n1", "n2"),))), {"n1", "n2"}, None),
    (
        "a term's name requirements are intersected",
        pod(NodeSelectorTerm(match_fields=(names(IN, "n1", "n2"), names(IN, "n2", "n3")))),
        {"n2"},
        None,
    ),
    (
        "terms are united",
        pod(NodeSelectorTerm(match_fields=(names(IN, "n1"),)), NodeSelectorTerm(match_fields=(names(IN, "n3"),))),
        {"n1", "n3"},
        None,
    ),
    (
        "a term without names allows every node",
        pod(NodeSelectorTerm(match_fields=(names(IN, "n1"),)), NodeSelectorTerm(match_expressions=(ZONE_A,))),
        None,
        None,
    ),
    ("NotIn does not narrow", pod(NodeSelectorTerm(match_fields=(names(NOT_IN, "n1"),))), None, None),
    ("no terms: no narrowing (Filter rejects)", pod(), None, None),
    (
        "a term's names conflict",
        pod(NodeSelectorTerm(match_fields=(names(IN, "n1"), names(IN, "n2")))),
        None,
        ERR_REASON_CONFLICT,
    ),
    (
        "every term's names conflict",
        pod(
            NodeSelectorTerm(match_fields=(names(IN, "n1"), names(IN, "n2"))),
            NodeSelectorTerm(match_fields=(names(IN, "n3"), names(IN, "n2"))),
        ),
        None,
        ERR_REASON_CONFLICT,
    ),
    (
        "one term's conflict leaves the other's names",
        pod(
            NodeSelectorTerm(match_fields=(names(IN, "n1"), names(IN, "n2"))),
            NodeSelectorTerm(match_fields=(names(IN, "n3"),)),
        ),
        {"n3"},
        None,
    ),
]


@pytest.mark.parametrize(("name", "p", "want_names", "conflict"), CASES, ids=[c[0] for c in CASES])
def test_pre_filter_vectorized_and_reference(name, p, want_names, conflict) -> None:
    want_status = Status.success() if conflict is None else Status(UU, (conflict,))
    want = (None if want_names is None else frozenset(want_names), want_status)
    table = NodeTable(capacity=8)
    table.add_nodes([node(n) for n in ("n1", "n2", "n3")])
    assert NodeAffinity().pre_filter(CycleState(), p, table) == want
    assert ReferenceNodeAffinity().pre_filter(CycleState(), p, list(table.node_infos())) == want


def test_conflicting_terms_reject_the_pod_with_kubes_reason() -> None:
    p = pod(NodeSelectorTerm(match_fields=(names(IN, "n1"), names(IN, "n2"))))
    nodes = [node(n) for n in ("n1", "n2", "n3")]
    registry = in_tree_registry()
    profile = without_post_filter(default_config(registry=registry).profiles[0])
    table = NodeTable(capacity=8)
    table.add_nodes(nodes)
    got = Scheduler(Framework.from_profile(profile, registry), table).schedule([p])[0]
    ref = ReferenceScheduler(reference_profile(profile, None)).schedule(p, [NodeInfo(n) for n in nodes])
    assert got.node is None and ref.node is None
    assert got.message == ref.message == "0/3 nodes are available: pod affinity terms conflict."
