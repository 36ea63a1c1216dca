"""PodDisruptionBudget (`policy/v1`): how many of the pods it selects may be disrupted (evicted,
preempted) at once, with the semantics of kube's disruption controller.

kube counts a budget's pods against its controllers' scale (a Deployment's replicas); kubus has
no controllers, so the pods the budget selects that are placed are both the expected pods and
the base of percentages (`disruptions_allowed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kubus.api.objects import LabelSelector, Pod
from kubus.api.pod_affinity import selector_matches

__all__ = [
    "UNHEALTHY_POD_EVICTION_POLICIES",
    "IntOrPercent",
    "PodDisruptionBudget",
    "disruptions_allowed",
    "pdb_matches",
    "scaled_value",
]

IntOrPercent = int | str
"""kube's IntOrString as budgets use it: a count, or a percentage such as ``"50%"``."""

UNHEALTHY_POD_EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")

_PERCENT = re.compile(r"[0-9]+%")


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None = None
    """The pods of the namespace it covers: None selects none, an empty selector every one."""
    min_available: IntOrPercent | None = None
    """Pods that must stay available; at most one of min_available and max_unavailable is set."""
    max_unavailable: IntOrPercent | None = None
    """Pods that may be unavailable at once."""
    unhealthy_pod_eviction_policy: str | None = None
    """IfHealthyBudget or AlwaysAllow; None is IfHealthyBudget."""

    @property
    def key(self) -> str:
        """namespace/name"""
        return f"{self.namespace}/{self.name}"


def pdb_matches(pdb: PodDisruptionBudget, pod: Pod) -> bool:
    """Whether the budget covers the pod: same namespace, and its selector matches the pod's labels."""
    return pod.namespace == pdb.namespace and selector_matches(pdb.selector, pod.metadata.labels)


def scaled_value(value: IntOrPercent, total: int, *, round_up: bool) -> int:
    """kube's GetScaledValueFromIntOrPercent: a count as is, a percentage of ``total`` rounded up
    or down. Raises ValueError for a string that is not a percentage."""
    if isinstance(value, int):
        return value
    if not _PERCENT.fullmatch(value):
        raise ValueError(f"invalid value for IntOrString: {value!r} is not a percentage")
    scaled = int(value[:-1]) * total
    return -(-scaled // 100) if round_up else scaled // 100


def disruptions_allowed(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> int:
    """How many more of the budget's pods may be disrupted now (status.disruptionsAllowed), as
    kube's disruption controller computes it, never below 0.

    ``pods`` are the pods to look at, placed or not; those the budget selects (`pdb_matches`)
    and that are placed (they carry spec.nodeName) are both the expected pods and the healthy
    ones; kube takes the expected count from the pods' controllers, which kubus has not.
    minAvailable N wants N healthy, a percentage that share of the expected pods, rounded up;
    maxUnavailable wants the expected pods less N (or the percentage, rounded up). With neither
    set, or no expected pod, none may be disrupted (kube's rule: a budget that sees no pod yet
    is safe when its first pods appear).
    """
    healthy = sum(1 for pod in pods if pod.spec.node_name and pdb_matches(pdb, pod))
    expected = healthy
    if pdb.max_unavailable is not None:
        desired = max(0, expected - scaled_value(pdb.max_unavailable, expected, round_up=True))
    elif pdb.min_available is not None:
        desired = scaled_value(pdb.min_available, expected, round_up=True)
    else:
        return 0
    return max(0, healthy - desired) if expected > 0 else 0
