"""Nodewise NodeAffinity, ported from kube's nodeaffinity/node_affinity_test.go tables, and a
cross-check of the nodewise selector and toleration rules against `kubus.api.matching`."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from builders import make_pod
from hypothesis import given
from hypothesis import strategies as st

from kubus.api import matching
from kubus.api.objects import (
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    Pod,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from kubus.framework.cycle_state import CycleState
from kubus.framework.status import Code, Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference import node_affinity as na
from kubus_reference._selectors import (
    ParsedTerm,
    labels_selector_matches,
    parse_int64,
    tolerates_taint,
)

IN, NOT_IN, EXISTS = SelectorOperator.IN, SelectorOperator.NOT_IN, SelectorOperator.EXISTS
DNE, GT, LT = SelectorOperator.DOES_NOT_EXIST, SelectorOperator.GT, SelectorOperator.LT
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
POD_REASON = Status(UU, ("node(s) didn't match Pod's node affinity/selector",))
ENFORCED_REASON = Status(UU, ("node(s) didn't match scheduler-enforced node affinity",))


def req(key: str, op: SelectorOperator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, tuple(values))


def term(*exprs: NodeSelectorRequirement, fields: tuple[NodeSelectorRequirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=tuple(exprs), match_fields=fields)


def name_in(*names: str) -> NodeSelectorRequirement:
    return req("metadata.name", IN, *names)


def required(*terms: NodeSelectorTerm) -> NodeAffinity:
    return NodeAffinity(required=NodeSelector(tuple(terms)))


def preferred(*weighted: tuple[int, NodeSelectorTerm]) -> NodeAffinity:
    return NodeAffinity(preferred=tuple(PreferredSchedulingTerm(w, t) for w, t in weighted))


def pod(selector: dict[str, str] | None = None, affinity: NodeAffinity | None = None) -> Pod:
    aff = Affinity(node_affinity=affinity) if affinity is not None else None
    return make_pod(node_selector=selector, affinity=aff)


def info(name: str = "node1", labels: dict[str, str] | None = None) -> NodeInfo:
    return NodeInfo(Node(ObjectMeta(name=name, labels=dict(labels or {}))))


@dataclass
class Args:
    added_affinity: NodeAffinity | None


# ---- Filter and PreFilter (TestNodeAffinity)

FILTER = [
    ("missing labels", pod({"foo": "bar"}), {}, "node1", POD_REASON),
    ("same labels", pod({"foo": "bar"}), {"foo": "bar"}, "node1", None),
    ("node labels are superset", pod({"foo": "bar"}), {"foo": "bar", "baz": "blah"}, "node1", None),
    ("node labels are subset", pod({"foo": "bar", "baz": "blah"}), {"foo": "bar"}, "node1", POD_REASON),
    ("empty selector value needs the label", pod({"foo": ""}), {}, "node1", POD_REASON),
    ("In matches", pod(affinity=required(term(req("foo", IN, "bar", "value2")))), {"foo": "bar"}, "node1", None),
    (
        "Gt matches",
        pod(affinity=required(term(req("kernel-version", GT, "0204")))),
        {"kernel-version": "0206"},
        "node1",
        None,
    ),
    (
        "Gt doesn't match",
        pod(affinity=required(term(req("kernel-version", GT, "0204")))),
        {"kernel-version": "0204"},
        "node1",
        POD_REASON,
    ),
    ("Lt matches", pod(affinity=required(term(req("n", LT, "3")))), {"n": "-4"}, "node1", None),
    (
        "Lt on a negative bound never matches: kube rejects '-3' as a label value",
        pod(affinity=required(term(req("n", LT, "-3")))),
        {"n": "-4"},
        "node1",
        POD_REASON,
    ),
    ("Gt on a non-integer label", pod(affinity=required(term(req("n", GT, "1")))), {"n": "2x"}, "node1", POD_REASON),
    ("Gt on a label with a space", pod(affinity=required(term(req("n", GT, "1")))), {"n": " 2"}, "node1", POD_REASON),
    (
        "Gt on a label with underscores",
        pod(affinity=required(term(req("n", GT, "1")))),
        {"n": "1_000"},
        "node1",
        POD_REASON,
    ),
    (
        "NotIn matches",
        pod(affinity=required(term(req("mem-type", NOT_IN, "DDR", "DDR2")))),
        {"mem-type": "DDR3"},
        "node1",
        None,
    ),
    (
        "NotIn without the label matches",
        pod(affinity=required(term(req("mem-type", NOT_IN, "DDR")))),
        {},
        "node1",
        None,
    ),
    ("Exists matches", pod(affinity=required(term(req("GPU", EXISTS)))), {"GPU": "NVIDIA-GRID-K1"}, "node1", None),
    ("DoesNotExist", pod(affinity=required(term(req("GPU", DNE)))), {"GPU": "x"}, "node1", POD_REASON),
    (
        "In doesn't match",
        pod(affinity=required(term(req("foo", IN, "value1", "value2")))),
        {"foo": "bar"},
        "node1",
        POD_REASON,
    ),
    ("empty term matches nothing", pod(affinity=required(term())), {"foo": "bar"}, "node1", POD_REASON),
    ("no terms match nothing", pod(affinity=required()), {"foo": "bar"}, "node1", POD_REASON),
    (
        "terms ORed, one matches",
        pod(affinity=required(term(req("foo", IN, "x")), term(req("diffkey", IN, "wrong", "value2")))),
        {"diffkey": "value2"},
        "node1",
        None,
    ),
    (
        "expressions ANDed, partially matching",
        pod(affinity=required(term(req("foo", EXISTS), req("foo", IN, "value1", "value2")))),
        {"foo": "bar"},
        "node1",
        POD_REASON,
    ),
    (
        "nodeSelector and affinity both satisfied",
        pod({"foo": "bar"}, required(term(req("foo", EXISTS)))),
        {"foo": "bar"},
        "node1",
        None,
    ),
    (
        "affinity matches, nodeSelector doesn't",
        pod({"foo": "bar"}, required(term(req("foo", EXISTS)))),
        {"foo": "barrrrrr"},
        "node1",
        POD_REASON,
    ),
    (
        "invalid value in a term: the term matches no node",
        pod(affinity=required(term(req("foo", NOT_IN, "invalid value: ___@#$%^")))),
        {"foo": "bar"},
        "node1",
        POD_REASON,
    ),
    (
        "an invalid term does not spoil a valid one",
        pod(affinity=required(term(req("foo", NOT_IN)), term(req("foo", IN, "bar")))),
        {"foo": "bar"},
        "node1",
        None,
    ),
    (
        "Gt with two values is invalid",
        pod(affinity=required(term(req("n", GT, "1", "2")))),
        {"n": "5"},
        "node1",
        POD_REASON,
    ),
    (
        "Exists with values is invalid",
        pod(affinity=required(term(req("n", EXISTS, "1")))),
        {"n": "5"},
        "node1",
        POD_REASON,
    ),
    ("matchFields In matches", pod(affinity=required(term(fields=(name_in("node1"),)))), {}, "node1", None),
    ("matchFields In doesn't match", pod(affinity=required(term(fields=(name_in("node1"),)))), {}, "node2", POD_REASON),
    (
        "matchFields NotIn",
        pod(affinity=required(term(fields=(req("metadata.name", NOT_IN, "node1"),)))),
        {},
        "node2",
        None,
    ),
    (
        "matchFields In with two values is invalid",
        pod(affinity=required(term(fields=(name_in("node1", "node2"),)))),
        {},
        "node1",
        POD_REASON,
    ),
    (
        "two terms: fields don't match, expressions do",
        pod(affinity=required(term(fields=(name_in("node1"),)), term(req("foo", IN, "bar")))),
        {"foo": "bar"},
        "node2",
        None,
    ),
    (
        "one term: fields don't match, expressions do",
        pod(affinity=required(term(req("foo", IN, "bar"), fields=(name_in("node1"),)))),
        {"foo": "bar"},
        "node2",
        POD_REASON,
    ),
    (
        "one term: both match",
        pod(affinity=required(term(req("foo", IN, "bar"), fields=(name_in("node1"),)))),
        {"foo": "bar"},
        "node1",
        None,
    ),
]


@pytest.mark.parametrize(("name", "p", "labels", "node_name", "want"), FILTER, ids=[t[0] for t in FILTER])
@pytest.mark.parametrize("run_pre_filter", [True, False])
def test_filter(name, p, labels, node_name, want, run_pre_filter) -> None:
    plugin, state, ni = na.NodeAffinity(), CycleState(), info(node_name, labels)
    if run_pre_filter:
        _, st = plugin.pre_filter(state, p, [ni])
        assert st.is_success
    got = plugin.filter(state, p, ni)
    assert got == (want or Status.success())


PRE_FILTER = [
    ("no affinity, no selector: skip", pod(), None, Status.skip()),
    ("preferred only: skip", pod(affinity=preferred((1, term(req("a", EXISTS))))), None, Status.skip()),
    ("selector only", pod({"a": "b"}), None, Status.success()),
    ("empty terms", pod(affinity=required()), None, Status.success()),
    ("terms without names", pod(affinity=required(term(req("a", EXISTS)))), None, Status.success()),
    ("one name", pod(affinity=required(term(fields=(name_in("node1"),)))), {"node1"}, Status.success()),
    (
        "a term without a name allows every node",
        pod(affinity=required(term(fields=(name_in("node1"),)), term(req("foo", IN, "bar")))),
        None,
        Status.success(),
    ),
    (
        "two terms of node names",
        pod(affinity=required(term(fields=(name_in("node1"),)), term(fields=(name_in("node2"),)))),
        {"node1", "node2"},
        Status.success(),
    ),
    (
        "name requirements of a term are intersected",
        pod(affinity=required(term(fields=(name_in("node1", "node2"), name_in("node2", "node3"))))),
        {"node2"},
        Status.success(),
    ),
    (
        "conflicting name requirements",
        pod(affinity=required(term(fields=(name_in("node1"), name_in("node2"))))),
        None,
        Status(UU, ("pod affinity terms conflict",)),
    ),
    (
        "NotIn names don't narrow",
        pod(affinity=required(term(fields=(req("metadata.name", NOT_IN, "node1"),)))),
        None,
        Status.success(),
    ),
]


@pytest.mark.parametrize(("name", "p", "names", "status"), PRE_FILTER, ids=[t[0] for t in PRE_FILTER])
def test_pre_filter(name, p, names, status) -> None:
    got_names, got_status = na.NodeAffinity().pre_filter(CycleState(), p, [])
    assert got_status == status
    assert got_names == (None if names is None else frozenset(names))


def test_pre_filter_does_not_skip_with_added_affinity() -> None:
    plugin = na.NodeAffinity(Args(required(term(req("zone", IN, "foo")))))
    assert plugin.pre_filter(CycleState(), pod(), []) == (None, Status.success())


ADDED = Args(required(term(req("zone", IN, "foo"))))


@pytest.mark.parametrize(
    ("p", "labels", "want"),
    [
        (pod(affinity=required(term(req("zone", IN, "foo"), req("bar", EXISTS)))), {"zone": "foo", "bar": "x"}, None),
        (pod(affinity=required(term(req("bar", EXISTS)))), {"zone": "foo"}, POD_REASON),
        (pod(affinity=required(term(req("bar", EXISTS)))), {"zone": "bar", "bar": "x"}, ENFORCED_REASON),
        (pod(), {"zone": "bar"}, ENFORCED_REASON),
    ],
    ids=["matches both", "matches added, not the pod's", "doesn't match added", "added only"],
)
def test_filter_with_added_affinity(p, labels, want) -> None:
    plugin, state, ni = na.NodeAffinity(ADDED), CycleState(), info("node1", labels)
    plugin.pre_filter(state, p, [ni])
    assert plugin.filter(state, p, ni) == (want or Status.success())


def test_invalid_added_affinity_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"addedAffinity\.requiredDuringScheduling"):
        na.NodeAffinity(Args(required(term(req("a", GT, "x")))))
    with pytest.raises(ValueError, match=r"addedAffinity\.preferredDuringScheduling"):
        na.NodeAffinity(Args(preferred((1, term(req("a", IN))))))


# ---- Score (TestNodeAffinityPriority)

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = preferred((2, term(req("foo", IN, "bar"))))
AFFINITY3 = preferred(
    (2, term(req("foo", IN, "bar"))),
    (4, term(req("key", IN, "value"))),
    (5, term(req("foo", IN, "bar"), req("key", IN, "value"), req("az", IN, "az1"))),
)
AFFINITY4 = preferred((2, term(req("foo", IN, "somethingElse"))))


def run_score(plugin: na.NodeAffinity, p: Pod, nodes: list[NodeInfo]) -> Status | list[int]:
    state = CycleState()
    st = plugin.pre_score(state, p, nodes)
    if not st.is_success:
        return st
    raw = {n.name: plugin.score(state, p, n) for n in nodes}
    plugin.normalize_score(state, p, raw)
    return list(raw.values())


THREE = [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)]
SCORE = [
    ("no affinity: skip", None, pod(), THREE, Status.skip()),
    ("no node matches", None, pod(affinity=AFFINITY4), THREE, [0, 0, 0]),
    ("only node1 matches", None, pod(affinity=AFFINITY1), THREE, [100, 0, 0]),
    (
        "all match with different priorities",
        None,
        pod(affinity=AFFINITY3),
        [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
        [18, 100, 36],
    ),
    (
        "added affinity",
        Args(preferred((5, term(req("key", IN, "value"))))),
        pod(),
        [("node1", LABEL1), ("node2", LABEL2)],
        [0, 100],
    ),
    (
        "added affinity and pod preferences",
        Args(preferred((3, term(req("key", IN, "value"))))),
        pod(affinity=AFFINITY3),
        [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
        [14, 100, 50],
    ),
    ("weight 0 terms are dropped", None, pod(affinity=preferred((0, term(req("foo", EXISTS))))), THREE, [0, 0, 0]),
    (
        "matchFields in preferences",
        None,
        pod(affinity=preferred((7, term(fields=(name_in("node2"),))))),
        THREE,
        [0, 100, 0],
    ),
]


@pytest.mark.parametrize(("name", "args", "p", "nodes", "want"), SCORE, ids=[t[0] for t in SCORE])
def test_score(name, args, p, nodes, want) -> None:
    assert run_score(na.NodeAffinity(args), p, [info(n, labels) for n, labels in nodes]) == want


def test_pre_score_error_for_invalid_preferred_term() -> None:
    st = na.NodeAffinity().pre_score(CycleState(), pod(affinity=preferred((1, term(req("a", GT, "x"))))), [])
    assert st.code is Code.ERROR


def test_score_without_pre_score_computes_preferences() -> None:
    plugin, p = na.NodeAffinity(), pod(affinity=AFFINITY3)
    assert plugin.score(CycleState(), p, info("n", LABEL5)) == 11


# ---- Cross-check with kubus.api.matching on valid inputs

keys = st.sampled_from(["a", "b", "example.com/c"])
values = st.sampled_from(["", "x", "y", "1", "30", "007"])
int_values = st.sampled_from(["1", "30", "007", "0"])


@st.composite
def requirements(draw) -> NodeSelectorRequirement:
    op = draw(st.sampled_from(list(SelectorOperator)))
    if op in (IN, NOT_IN):
        vals = draw(st.lists(values, min_size=1, max_size=3))
    elif op in (GT, LT):
        vals = [draw(int_values)]
    else:
        vals = []
    return NodeSelectorRequirement(draw(keys), op, tuple(vals))


label_sets = st.dictionaries(keys, values, max_size=3)


@given(st.lists(requirements(), min_size=1, max_size=3), label_sets, st.sampled_from(["n1", "n2"]))
def test_valid_terms_agree_with_kubus_api_matching(reqs, labels, node_name) -> None:
    t = term(*reqs, fields=(name_in("n1"),))
    assert ParsedTerm.parse(t).errors == ()
    assert ParsedTerm.parse(t).matches(labels, node_name) == matching.term_matches(t, labels, node_name)


@given(st.dictionaries(keys, values, max_size=2), label_sets)
def test_node_selector_agrees_with_kubus_api_matching(selector, labels) -> None:
    assert labels_selector_matches(selector, labels) == matching.labels_match(selector, labels)


@given(
    st.builds(
        Toleration,
        key=st.sampled_from(["", "a", "b"]),
        operator=st.sampled_from(list(TolerationOperator)),
        value=st.sampled_from(["", "x"]),
        effect=st.sampled_from([None, *TaintEffect]),
    ),
    st.builds(
        Taint,
        key=st.sampled_from(["a", "b"]),
        value=st.sampled_from(["", "x"]),
        effect=st.sampled_from(list(TaintEffect)),
    ),
)
def test_tolerations_agree_with_kubus_api_matching(toleration, taint) -> None:
    assert tolerates_taint(toleration, taint) == matching.tolerates(toleration, taint)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("12", 12),
        ("+12", 12),
        ("-12", -12),
        ("007", 7),
        (" 1", None),
        ("1_0", None),
        ("", None),
        ("٣", None),
        (str(2**63), None),
        (str(-(2**63)), -(2**63)),
    ],
)
def test_parse_int64_is_go_strconv(text: str, want: int | None) -> None:
    assert parse_int64(text) == want
