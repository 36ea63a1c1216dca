"""PodDisruptionBudgets (`kubus.api.disruption`): which pods a budget covers, and how many of
them may be disrupted, as kube's disruption controller counts (placed pods are the expected and
the healthy ones)."""

from __future__ import annotations

import pytest
from builders import make_pod

from kubus.api.disruption import IntOrPercent, PodDisruptionBudget, disruptions_allowed, pdb_matches, scaled_value
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, ObjectMeta, Pod, PodSpec, SelectorOperator

WEB = LabelSelector({"app": "web"})


def pod(name: str, *, app: str = "web", namespace: str = "prod", node: str = "n1") -> Pod:
    return make_pod(name, namespace=namespace, labels={"app": app}, node_name=node)


def budget(
    *, min_available: IntOrPercent | None = None, max_unavailable: IntOrPercent | None = None
) -> PodDisruptionBudget:
    return PodDisruptionBudget("prod", "web", WEB, min_available, max_unavailable)


FIVE = [pod(f"w{i}") for i in range(5)]
"""Five placed pods the budget selects..."""
NOISE = [
    pod("pending", node=""),  # not placed: neither expected nor healthy
    pod("db", app="db"),  # not selected
    pod("elsewhere", namespace="dev"),  # another namespace
]
"""...and three it does not count."""


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "allowed"),
    [
        (3, None, 2),  # 5 healthy, 3 wanted
        (5, None, 0),
        (7, None, 0),  # never below 0
        (0, None, 5),
        ("50%", None, 2),  # ceil(2.5) = 3 wanted
        ("40%", None, 3),  # exactly 2 wanted
        ("100%", None, 0),
        ("0%", None, 5),
        (None, 1, 1),
        (None, 0, 0),
        (None, 9, 5),  # desiredHealthy clamps at 0
        (None, "30%", 2),  # ceil(1.5) = 2 may be unavailable
        (None, "20%", 1),
        (None, "100%", 5),
        (None, None, 0),  # neither: no disruption (kube's expected count stays 0)
    ],
)
def test_disruptions_allowed(
    min_available: IntOrPercent | None, max_unavailable: IntOrPercent | None, allowed: int
) -> None:
    pdb = budget(min_available=min_available, max_unavailable=max_unavailable)
    assert disruptions_allowed(pdb, FIVE + NOISE) == allowed


@pytest.mark.parametrize("pdb", [budget(min_available=0), budget(max_unavailable="100%"), budget(min_available="0%")])
def test_no_placed_pod_means_no_disruption(pdb: PodDisruptionBudget) -> None:
    assert disruptions_allowed(pdb, NOISE) == 0
    assert disruptions_allowed(pdb, []) == 0


def test_an_empty_selector_covers_the_namespace_and_a_nil_one_nothing() -> None:
    everything = PodDisruptionBudget("prod", "all", LabelSelector(), max_unavailable=1)
    nothing = PodDisruptionBudget("prod", "none", None, min_available=0)
    assert [p.name for p in FIVE + NOISE if pdb_matches(everything, p)] == [p.name for p in FIVE] + ["pending", "db"]
    assert not any(pdb_matches(nothing, p) for p in FIVE + NOISE)
    assert disruptions_allowed(everything, FIVE + NOISE) == 1  # 6 placed in prod, 5 must stay
    assert disruptions_allowed(nothing, FIVE + NOISE) == 0


def test_match_expressions_count() -> None:
    not_canary = LabelSelector(
        {"app": "web"}, (LabelSelectorRequirement("track", SelectorOperator.NOT_IN, ("canary",)),)
    )
    pdb = PodDisruptionBudget("prod", "stable", not_canary, max_unavailable=0)
    canary = Pod(ObjectMeta(name="c", namespace="prod", labels={"app": "web", "track": "canary"}), PodSpec())
    assert pdb_matches(pdb, FIVE[0]) and not pdb_matches(pdb, canary)


def test_scaled_value_is_kubes() -> None:
    assert scaled_value(3, 10, round_up=True) == 3
    assert scaled_value("25%", 10, round_up=True) == 3
    assert scaled_value("25%", 10, round_up=False) == 2
    assert scaled_value("0%", 10, round_up=True) == 0
    with pytest.raises(ValueError, match="not a percentage"):
        scaled_value("25", 10, round_up=True)
