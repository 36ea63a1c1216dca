"""PriorityClass (`scheduling.k8s.io/v1`) and kube's Priority admission: the priority and
preemption policy a pod gets from its class.

`resolve_priority` is the admission (plugin/pkg/admission/priority): a pod naming a class gets
its value and preemptionPolicy; a pod naming none gets the globalDefault class's name, value
and policy. kube's two system classes exist without being applied. What kubus cannot do as
kube does, it does this way:

- kubus's Pod has no "unset" priority or preemptionPolicy (they read 0 and
  PreemptLowerPriority when absent), so those values count as not given: a pod that gives
  ``priority: 0`` with a class of another value, or ``PreemptLowerPriority`` with a ``Never``
  class, is admitted with the class's values (kube refuses it).
- A pod naming no class while no class is globalDefault keeps its own ``priority`` and
  ``preemptionPolicy`` (kube refuses any but 0 and PreemptLowerPriority): kubus manifests set
  ``priority`` directly since before kubus had PriorityClasses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from kubus.api.objects import Pod, PreemptionPolicy
from kubus.core.errors import KubusError

__all__ = [
    "HIGHEST_USER_DEFINABLE_PRIORITY",
    "SYSTEM_CLUSTER_CRITICAL",
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_NODE_CRITICAL",
    "SYSTEM_PRIORITY_CLASSES",
    "SYSTEM_PRIORITY_CLASS_PREFIX",
    "PriorityClass",
    "PriorityError",
    "check_priority_class",
    "default_priority_class",
    "resolve_priority",
    "system_class_problem",
]

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
"""The largest value of a class that is not a system class."""

SYSTEM_CRITICAL_PRIORITY = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
"""Class names with this prefix are reserved for kube's system classes."""
SYSTEM_CLUSTER_CRITICAL = "system-cluster-critical"
SYSTEM_NODE_CRITICAL = "system-node-critical"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    """int32; at most HIGHEST_USER_DEFINABLE_PRIORITY unless a system class."""
    global_default: bool = False
    """The class of pods that name none (at most one class is)."""
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    description: str = ""


SYSTEM_PRIORITY_CLASSES: Mapping[str, PriorityClass] = MappingProxyType(
    {
        SYSTEM_CLUSTER_CRITICAL: PriorityClass(
            SYSTEM_CLUSTER_CRITICAL,
            SYSTEM_CRITICAL_PRIORITY,
            description="Used for system critical pods that must run in the cluster, but can be moved to "
            "another node if necessary.",
        ),
        SYSTEM_NODE_CRITICAL: PriorityClass(
            SYSTEM_NODE_CRITICAL,
            SYSTEM_CRITICAL_PRIORITY + 1000,
            description="Used for system critical pods that must not be moved from their current node.",
        ),
    }
)
"""kube's built-in classes, which exist in every cluster without being applied."""


class PriorityError(KubusError):
    """kube's Priority admission, or PriorityClass validation, refuses: ``str()`` is kube's
    message, ``field`` the field path it is about (``spec.priorityClassName``, ``value``...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def system_class_problem(name: str, value: int, global_default: bool) -> str | None:
    """Why a class named ``system-...`` is not one of kube's system classes as they are
    (IsKnownSystemPriorityClass), or None when it is."""
    known = SYSTEM_PRIORITY_CLASSES.get(name)
    if known is None:
        return f"{name} is not a known system priority class"
    if value != known.value:
        return f"value of {name} PriorityClass must be {known.value}"
    if global_default != known.global_default:
        return f"globalDefault of {name} PriorityClass must be {str(known.global_default).lower()}"
    return None


def default_priority_class(classes: Iterable[PriorityClass]) -> PriorityClass | None:
    """The globalDefault class, None without one. Were there several (two writers racing), the
    one of the lowest value, as kube picks (then the first name, so the choice is stable)."""
    defaults = [c for c in classes if c.global_default]
    return min(defaults, key=lambda c: (c.value, c.name)) if defaults else None


def check_priority_class(new: PriorityClass, existing: Iterable[PriorityClass]) -> None:
    """Whether ``new`` may be stored where ``existing`` are (kube's admission and update
    validation): a second globalDefault is refused, and so is a changed value or
    preemptionPolicy of a class that exists. Raises PriorityError."""
    for old in existing:
        if old.name == new.name:
            if old.value != new.value:
                raise PriorityError("value", "may not be changed in an update.")
            if old.preemption_policy is not new.preemption_policy:
                raise PriorityError("preemptionPolicy", "field is immutable")
        elif new.global_default and old.global_default:
            raise PriorityError(
                "globalDefault", f"PriorityClass {old.name} is already marked as default. Only one default can exist"
            )


def resolve_priority(pod: Pod, classes: Mapping[str, PriorityClass]) -> Pod:
    """The pod as kube's Priority admission lets it in: its class's value and preemptionPolicy
    (and the globalDefault class's name when it names none), or the pod itself when it names
    no class and none is globalDefault. ``classes`` maps names to the applied classes; the
    system classes need not be among them. Idempotent: a resolved pod resolves to itself.

    Raises PriorityError, with kube's message, for a class that does not exist and for a pod
    whose own priority or preemptionPolicy differs from its class's (see the module docstring
    for what counts as given)."""
    spec = pod.spec
    name = spec.priority_class_name
    if name:
        found = classes.get(name) or SYSTEM_PRIORITY_CLASSES.get(name)
        if found is None:
            raise PriorityError("spec.priorityClassName", f"no PriorityClass with name {name} was found")
        pc = found
    else:
        default = default_priority_class(classes.values())
        if default is None:
            return pod
        pc = default
    if spec.priority != 0 and spec.priority != pc.value:
        raise PriorityError(
            "spec.priority",
            f"the integer value of priority ({spec.priority}) must not be provided in pod spec; priority "
            f"admission controller computed {pc.value} from the given PriorityClass name",
        )
    if spec.preemption_policy is not PreemptionPolicy.PREEMPT_LOWER_PRIORITY and (
        spec.preemption_policy is not pc.preemption_policy
    ):
        raise PriorityError(
            "spec.preemptionPolicy",
            f"the string value of PreemptionPolicy ({spec.preemption_policy}) must not be provided in pod spec; "
            f"priority admission controller computed {pc.preemption_policy} from the given PriorityClass name",
        )
    if (spec.priority_class_name, spec.priority, spec.preemption_policy) == (pc.name, pc.value, pc.preemption_policy):
        return pod
    return replace(
        pod,
        spec=replace(spec, priority_class_name=pc.name, priority=pc.value, preemption_policy=pc.preemption_policy),
    )
