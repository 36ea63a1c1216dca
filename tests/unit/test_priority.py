"""kube's Priority admission (`kubus.api.priority.resolve_priority`) and its PriorityClass checks,
rule by rule, with kube's messages."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import make_pod

from kubus.api.objects import Pod, PreemptionPolicy
from kubus.api.priority import (
    SYSTEM_CLUSTER_CRITICAL,
    SYSTEM_NODE_CRITICAL,
    PriorityClass,
    PriorityError,
    check_priority_class,
    default_priority_class,
    resolve_priority,
    system_class_problem,
)

NEVER, PREEMPT = PreemptionPolicy.NEVER, PreemptionPolicy.PREEMPT_LOWER_PRIORITY
HIGH = PriorityClass("high", 1000)
QUIET = PriorityClass("quiet", 500, preemption_policy=NEVER)
DEFAULT = PriorityClass("fallback", -7, global_default=True, preemption_policy=NEVER)
CLASSES = {c.name: c for c in (HIGH, QUIET)}


def pod(class_name: str = "", priority: int = 0, policy: PreemptionPolicy = PREEMPT) -> Pod:
    return make_pod(priority_class=class_name, priority=priority, policy=policy)


def resolved(p: Pod) -> tuple[str, int, PreemptionPolicy]:
    return p.spec.priority_class_name, p.spec.priority, p.spec.preemption_policy


def refusal(p: Pod, classes: dict[str, PriorityClass]) -> tuple[str, str]:
    with pytest.raises(PriorityError) as info:
        resolve_priority(p, classes)
    return info.value.field, str(info.value)


def test_a_named_class_gives_its_value_and_preemption_policy() -> None:
    assert resolved(resolve_priority(pod("high"), CLASSES)) == ("high", 1000, PREEMPT)
    assert resolved(resolve_priority(pod("quiet"), CLASSES)) == ("quiet", 500, NEVER)


def test_the_system_classes_exist_without_being_applied() -> None:
    assert resolved(resolve_priority(pod(SYSTEM_NODE_CRITICAL), {})) == (SYSTEM_NODE_CRITICAL, 2000001000, PREEMPT)
    assert resolve_priority(pod(SYSTEM_CLUSTER_CRITICAL), {}).spec.priority == 2_000_000_000


def test_an_unknown_class_is_refused_with_kubes_message() -> None:
    assert refusal(pod("nope"), CLASSES) == ("spec.priorityClassName", "no PriorityClass with name nope was found")


def test_no_class_takes_the_global_default_with_its_name() -> None:
    classes = {**CLASSES, DEFAULT.name: DEFAULT}
    assert resolved(resolve_priority(pod(), classes)) == ("fallback", -7, NEVER)
    assert resolved(resolve_priority(pod("high"), classes)) == ("high", 1000, PREEMPT)  # a named class wins


def test_no_class_and_no_default_keeps_the_pod_as_written() -> None:
    p = pod(priority=42, policy=NEVER)  # kube would refuse both; kubus manifests set them directly
    assert resolve_priority(p, CLASSES) is p
    assert resolve_priority(pod(), {}).spec.priority == 0


def test_a_priority_that_differs_from_the_class_is_refused() -> None:
    assert refusal(pod("high", priority=5), CLASSES) == (
        "spec.priority",
        "the integer value of priority (5) must not be provided in pod spec; priority admission controller "
        "computed 1000 from the given PriorityClass name",
    )
    assert refusal(pod(priority=5), {DEFAULT.name: DEFAULT})[0] == "spec.priority"  # the default's value counts
    assert resolve_priority(pod("high", priority=1000), CLASSES).spec.priority == 1000  # the same: fine


def test_a_preemption_policy_that_differs_from_the_class_is_refused() -> None:
    assert refusal(pod("high", policy=NEVER), CLASSES) == (
        "spec.preemptionPolicy",
        "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission "
        "controller computed PreemptLowerPriority from the given PriorityClass name",
    )
    assert resolved(resolve_priority(pod("quiet", policy=NEVER), CLASSES)) == ("quiet", 500, NEVER)


def test_resolution_is_idempotent() -> None:
    classes = {**CLASSES, DEFAULT.name: DEFAULT}
    for p in (pod(), pod("high"), pod("quiet"), pod(SYSTEM_NODE_CRITICAL)):
        once = resolve_priority(p, classes)
        assert resolve_priority(once, classes) is once


def test_the_default_is_the_lowest_of_several_as_kube_picks_after_a_race() -> None:
    a, b = replace(DEFAULT, name="a", value=3), replace(DEFAULT, name="b", value=-3)
    assert default_priority_class([HIGH, a, b]) == b
    assert default_priority_class([HIGH, QUIET]) is None


def test_system_class_problems_are_kubes() -> None:
    assert system_class_problem(SYSTEM_CLUSTER_CRITICAL, 2_000_000_000, False) is None
    assert system_class_problem("system-x", 1, False) == "system-x is not a known system priority class"
    assert system_class_problem(SYSTEM_NODE_CRITICAL, 1, False) == (
        "value of system-node-critical PriorityClass must be 2000001000"
    )
    assert system_class_problem(SYSTEM_NODE_CRITICAL, 2_000_001_000, True) == (
        "globalDefault of system-node-critical PriorityClass must be false"
    )


def test_a_class_is_checked_against_the_stored_ones() -> None:
    check_priority_class(DEFAULT, [HIGH, QUIET])
    check_priority_class(HIGH, [HIGH, DEFAULT])  # the same again
    check_priority_class(replace(HIGH, description="new"), [HIGH])
    check_priority_class(DEFAULT, [DEFAULT])  # the default itself, again
    with pytest.raises(PriorityError) as info:
        check_priority_class(replace(HIGH, global_default=True), [HIGH, DEFAULT])
    assert (info.value.field, str(info.value)) == (
        "globalDefault",
        "PriorityClass fallback is already marked as default. Only one default can exist",
    )
    with pytest.raises(PriorityError) as info:
        check_priority_class(replace(HIGH, value=1), [HIGH])
    assert (info.value.field, str(info.value)) == ("value", "may not be changed in an update.")
    with pytest.raises(PriorityError) as info:
        check_priority_class(replace(HIGH, preemption_policy=NEVER), [HIGH])
    assert (info.value.field, str(info.value)) == ("preemptionPolicy", "field is immutable")
