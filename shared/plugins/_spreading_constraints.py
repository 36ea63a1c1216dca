"""PodTopologySpread's constraints: a pod's topologySpreadConstraints resolved as kube resolves
them (`SpreadConstraint`), and the selector of the default ones (kube's DefaultSelector)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubus.api.matching import labels_match
from kubus.api.objects import (
    LabelSelector,
    LabelSelectorRequirement,
    Pod,
    SelectorOperator,
    Taint,
    TaintEffect,
    TopologySpreadConstraint,
)
from kubus.api.pod_affinity import selector_matches
from kubus.api.workloads import ReplicaSet, ReplicationController, StatefulSet, Workloads

__all__ = [
    "DO_NOT_SCHEDULE",
    "HONOR",
    "IGNORE",
    "LABEL_HOSTNAME",
    "LABEL_TOPOLOGY_ZONE",
    "SCHEDULE_ANYWAY",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "SpreadConstraint",
    "default_selector",
    "do_not_schedule_taint",
    "spread_constraints",
]


DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"

SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_TOPOLOGY_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY),
)
"""kube's systemDefaultConstraints (`defaultingType: System`)."""


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """kube's internal topologySpreadConstraint: a pod's constraint with its selector resolved
    (matchLabelKeys merged in) and its defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    """None selects no pod (kube's labels.Nothing for a nil labelSelector)."""
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool

    def selects(self, namespace: str, pod_namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` counts for a pod in ``pod_namespace``."""
        return namespace == pod_namespace and selector_matches(self.selector, labels)


def spread_constraints(
    constraints: Sequence[TopologySpreadConstraint], pod_labels: Mapping[str, str], action: str
) -> tuple[SpreadConstraint, ...]:
    """kube's filterTopologySpreadConstraints: the constraints with `whenUnsatisfiable ==
    action`, each with the pod's values of its matchLabelKeys ANDed into its selector (``key In
    (value)`` for each key the pod has; a nil selector stays nil), minDomains defaulting to 1,
    nodeAffinityPolicy to Honor and nodeTaintsPolicy to Ignore."""
    out = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector = c.label_selector
        if c.match_label_keys and selector is not None:
            extra = tuple(
                LabelSelectorRequirement(key, SelectorOperator.IN, (pod_labels[key],))
                for key in c.match_label_keys
                if key in pod_labels
            )
            if extra:
                selector = LabelSelector(dict(selector.match_labels), selector.match_expressions + extra)
        out.append(
            SpreadConstraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=selector,
                min_domains=1 if c.min_domains is None else c.min_domains,
                honor_node_affinity=c.node_affinity_policy in (None, HONOR),
                honor_node_taints=c.node_taints_policy == HONOR,
            )
        )
    return tuple(out)


def default_selector(pod: Pod, workloads: Workloads) -> LabelSelector | None:
    """kube's helper.DefaultSelector: the labels of every Service of the pod's namespace whose
    ``spec.selector`` selects ``pod`` (a Service without one selects none), merged; then the pod's
    controller, looked up by name in its namespace: a v1 ReplicationController's selector merged
    into those labels, an apps/v1 ReplicaSet's or StatefulSet's label selector ANDed (its
    matchLabels as `In` requirements, so that a key it shares with the merged labels is
    required twice, as kube's selector.Add does). None when that selects by nothing (kube's
    ``selector.Empty()``): no default constraints then."""
    if not workloads:
        return None
    labels = pod.metadata.labels
    merged: dict[str, str] = {}
    for service in workloads.services(pod.namespace):
        if service.selector is not None and labels_match(service.selector, labels):
            merged.update(service.selector)
    added: tuple[LabelSelectorRequirement, ...] = ()
    owner = pod.metadata.controller
    if owner is not None:
        group_version = _group_version(owner.api_version)
        found = workloads.get(owner.kind, pod.namespace, owner.name)
        if isinstance(found, ReplicationController) and group_version == ("", "v1"):
            merged.update(found.selector)
        elif isinstance(found, ReplicaSet | StatefulSet) and group_version == ("apps", "v1") and found.selector:
            own = found.selector
            in_ = SelectorOperator.IN
            added = (
                *(LabelSelectorRequirement(k, in_, (v,)) for k, v in own.match_labels.items()),
                *own.match_expressions,
            )
    if not merged and not added:
        return None
    return LabelSelector(merged, added)


def _group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: ``v1`` is the core group's, ``apps/v1`` (group, version); None for
    more than one slash (kube's parse error)."""
    if api_version.count("/") > 1:
        return None
    group, _, version = api_version.rpartition("/")
    return group, version


def do_not_schedule_taint(taint: Taint) -> bool:
    return taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
