"""The args types of kubus's in-tree plugins (kube's NodeResourcesFitArgs, ...), each decoding
and validating itself from `pluginConfig[].args` with kube's defaults (`decode_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from kubus.api.node_affinity import Validation, decode_node_affinity
from kubus.api.objects import CPU, MEMORY, NodeAffinity, TopologySpreadConstraint
from kubus.api.podgroups import DEFAULT_SCHEDULE_TIMEOUT
from kubus.core.codec import JSONMapping
from kubus.framework.config._fields import (
    _INT32_MAX,
    _INT64_MAX,
    ConfigReader,
    FieldError,
    as_list,
    check_fields,
    check_qualified_name,
    child,
    integer,
    mapping,
    string,
    type_name,
)

MAX_CUSTOM_PRIORITY_SCORE = 10
"""Highest score of a RequestedToCapacityRatio shape point (kube's MaxCustomPriorityScore)."""


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """A resource and its weight in a score."""

    name: str
    """Resource name: `cpu`, `memory`, `nvidia.com/gpu`..."""
    weight: int = 1
    """Relative weight; 0 in a config means the default, 1."""


DEFAULT_RESOURCE_SPEC: tuple[ResourceSpec, ...] = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


class ScoringStrategyType(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"
    REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


@dataclass(frozen=True, slots=True)
class UtilizationShapePoint:
    utilization: int
    """x: utilization in percent, 0..100."""
    score: int
    """y: score at that utilization, 0..MAX_CUSTOM_PRIORITY_SCORE (10)."""


@dataclass(frozen=True, slots=True)
class RequestedToCapacityRatioParam:
    shape: tuple[UtilizationShapePoint, ...]
    """Points of a piecewise linear function, utilization strictly increasing."""


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: ScoringStrategyType = ScoringStrategyType.LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCE_SPEC
    """Resources scored, with weights 1..100. Default cpu:1, memory:1."""
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None
    """Set exactly when type is RequestedToCapacityRatio."""


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """Args of NodeResourcesFit (kube's NodeResourcesFitArgs)."""

    ignored_resources: tuple[str, ...] = ()
    """Resources the filter ignores (not the score)."""
    ignored_resource_groups: tuple[str, ...] = ()
    """Resource name prefixes (`example.com` ignores `example.com/*`) the filter ignores."""
    scoring_strategy: ScoringStrategy = ScoringStrategy()
    """How nodes are scored. Default LeastAllocated over cpu:1, memory:1."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> NodeResourcesFitArgs:
        """The args at `path` (a pluginConfig entry's `args`, without apiVersion and kind), with
        kube's defaults, validated as ValidateNodeResourcesFitArgs does. Raises FieldError."""
        check_fields(m, path, ("ignoredResources", "ignoredResourceGroups", "scoringStrategy"))
        ir_path = child(path, "ignoredResources")
        ignored = tuple(string(v, f"{ir_path}[{i}]") for i, v in enumerate(as_list(m.get("ignoredResources"), ir_path)))
        for i, v in enumerate(ignored):
            check_qualified_name(v, f"{ir_path}[{i}]")
        ig_path = child(path, "ignoredResourceGroups")
        groups = tuple(
            string(v, f"{ig_path}[{i}]") for i, v in enumerate(as_list(m.get("ignoredResourceGroups"), ig_path))
        )
        for i, g in enumerate(groups):
            if "/" in g:
                raise FieldError(f"{ig_path}[{i}]", f"invalid value \"{g}\": resource group name can't contain '/'")
            check_qualified_name(g, f"{ig_path}[{i}]")
        strategy = _decode_scoring_strategy(m.get("scoringStrategy"), child(path, "scoringStrategy"))
        return cls(ignored, groups, strategy)


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    """Args of NodeResourcesBalancedAllocation."""

    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCE_SPEC
    """Resources whose balance is scored; every weight is 1 (kube requires it)."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> NodeResourcesBalancedAllocationArgs:
        """The args at `path`, with kube's defaults, validated as
        ValidateNodeResourcesBalancedAllocationArgs does. Raises FieldError."""
        check_fields(m, path, ("resources",))
        res_path = child(path, "resources")
        resources = _decode_resources(m.get("resources"), res_path) or DEFAULT_RESOURCE_SPEC
        seen: set[str] = set()
        for i, r in enumerate(resources):
            if r.name in seen:
                raise FieldError(f"{res_path}[{i}].name", f'duplicate value "{r.name}"')
            seen.add(r.name)
            if r.weight != 1:
                raise FieldError(f"{res_path}[{i}].weight", f"invalid value {r.weight}: must be 1")
        return cls(resources)


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    """Args of NodeAffinity."""

    added_affinity: NodeAffinity | None = None
    """Applied to every pod in addition to its own node affinity (nodes must satisfy both)."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> NodeAffinityArgs:
        """The args at `path`, validated as ValidateNodeAffinityArgs does (kube's nodeaffinity
        parser). Raises FieldError."""
        check_fields(m, path, ("addedAffinity",))
        if m.get("addedAffinity") is None:
            return cls()
        added = decode_node_affinity(
            ConfigReader(), m["addedAffinity"], child(path, "addedAffinity"), Validation.PLUGIN_ARGS
        )
        return cls(added)


MAX_HARD_POD_AFFINITY_WEIGHT = 100
"""Highest InterPodAffinity hardPodAffinityWeight (kube's validateHardPodAffinityWeight)."""


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    """Args of InterPodAffinity (kube's InterPodAffinityArgs)."""

    hard_pod_affinity_weight: int = 1
    """Score weight of an existing pod's required pod affinity term that the incoming pod
    matches (the "symmetric" weight), 0..100; 0 turns that part of the score off."""
    ignore_preferred_terms_of_existing_pods: bool = False
    """Skip Score when the incoming pod has no preferred pod (anti-)affinity terms, ignoring the
    existing pods' terms (kube's flag; a pod with preferred terms is scored as usual)."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> InterPodAffinityArgs:
        """The args at `path`, with kube's defaults (hardPodAffinityWeight 1), validated as
        ValidateInterPodAffinityArgs does. Raises FieldError."""
        check_fields(m, path, ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"))
        weight = 1
        if m.get("hardPodAffinityWeight") is not None:
            w_path = child(path, "hardPodAffinityWeight")
            weight = integer(m["hardPodAffinityWeight"], w_path)
            if not 0 <= weight <= MAX_HARD_POD_AFFINITY_WEIGHT:
                raise FieldError(
                    w_path, f"invalid value {weight}: not in valid range [0, {MAX_HARD_POD_AFFINITY_WEIGHT}]"
                )
        ignore = False
        if m.get("ignorePreferredTermsOfExistingPods") is not None:
            raw = m["ignorePreferredTermsOfExistingPods"]
            if not isinstance(raw, bool):
                raise FieldError(
                    child(path, "ignorePreferredTermsOfExistingPods"),
                    f"expected a boolean, got {type_name(raw)} {raw!r}",
                )
            ignore = raw
        return cls(weight, ignore)


DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE = 100


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    """Args of DefaultPreemption (kube's DefaultPreemptionArgs): how many nodes the preemption
    dry run must find as candidates before it stops looking, max(percentage of the nodes where
    preemption might help, absolute), never more than those nodes."""

    min_candidate_nodes_percentage: int = DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE
    """0..100 (kube's default 10)."""
    min_candidate_nodes_absolute: int = DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE
    """0 or more (kube's default 100); not 0 together with a 0 percentage."""

    def validate(self, path: str = "") -> None:
        """kube's ValidateDefaultPreemptionArgs (the first problem it reports). Raises FieldError."""
        pct_path = child(path, "minCandidateNodesPercentage")
        abs_path = child(path, "minCandidateNodesAbsolute")
        pct, absolute = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        if not 0 <= pct <= 100:
            raise FieldError(pct_path, f"invalid value {pct}: not in valid range [0, 100]")
        if absolute < 0:
            raise FieldError(abs_path, f"invalid value {absolute}: not in valid range [0, inf)")
        if pct == 0 and absolute == 0:
            raise FieldError(
                pct_path, f"invalid value {pct}: cannot be zero at the same time as minCandidateNodesAbsolute"
            )

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> DefaultPreemptionArgs:
        """The args at `path`, with kube's v1 defaults (10 and 100 when unset; an explicit 0
        stays 0), validated as ValidateDefaultPreemptionArgs does. Raises FieldError."""
        check_fields(m, path, ("minCandidateNodesPercentage", "minCandidateNodesAbsolute"))
        values = []
        for key, default in (
            ("minCandidateNodesPercentage", DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE),
            ("minCandidateNodesAbsolute", DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE),
        ):
            values.append(default if m.get(key) is None else integer(m[key], child(path, key)))
        args = cls(values[0], values[1])
        args.validate(path)
        return args


class DefaultingType(StrEnum):
    """PodTopologySpreadArgs.defaultingType: where the default constraints come from."""

    SYSTEM = "System"
    """kube's built-in constraints (hostname maxSkew 3, zone maxSkew 5, both ScheduleAnyway)."""
    LIST = "List"
    """The `defaultConstraints` of the args."""


WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
NODE_INCLUSION_POLICIES = ("Honor", "Ignore")


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    """Args of PodTopologySpread (kube's PodTopologySpreadArgs).

    Default constraints apply to a pod without topologySpreadConstraints of its own, with a
    label selector kube builds from the Services, ReplicationControllers, ReplicaSets and
    StatefulSets that select the pod. kubus has none of those objects, so that selector is
    always empty and, as in kube for a pod no such object selects, the default constraints (the
    System ones or a List) apply to no pod: they load and validate, and change nothing (see
    `kubus.plugins.pod_topology_spread`).
    """

    default_constraints: tuple[TopologySpreadConstraint, ...] = ()
    """The constraints of `List` defaulting (no labelSelector: it is deduced per pod)."""
    defaulting_type: DefaultingType = DefaultingType.SYSTEM
    """`System` (kube's v1 default) or `List`."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> PodTopologySpreadArgs:
        """The args at `path`, with kube's v1 defaults (defaultingType System), validated as
        ValidatePodTopologySpreadArgs does; stricter in one point: nodeAffinityPolicy and
        nodeTaintsPolicy must be Honor or Ignore (kube takes any other value for Ignore).
        Raises FieldError."""
        check_fields(m, path, ("defaultConstraints", "defaultingType"))
        dc_path = child(path, "defaultConstraints")
        raw_constraints = as_list(m.get("defaultConstraints"), dc_path)
        dt_path = child(path, "defaultingType")
        raw_type = m.get("defaultingType")
        defaulting = DefaultingType.SYSTEM
        if raw_type is not None and raw_type != "":
            text = string(raw_type, dt_path)
            try:
                defaulting = DefaultingType(text)
            except ValueError:
                supported = ", ".join(f'"{x.value}"' for x in DefaultingType)
                raise FieldError(dt_path, f'unsupported value "{text}" (supported: {supported})') from None
        if defaulting is DefaultingType.SYSTEM and raw_constraints:
            raise FieldError(dt_path, f'invalid value "{defaulting.value}": when .defaultConstraints are not empty')
        constraints = tuple(_decode_default_constraint(raw, f"{dc_path}[{i}]") for i, raw in enumerate(raw_constraints))
        seen: dict[tuple[str, str], int] = {}
        for i, c in enumerate(constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                pair_text = f"{{{c.topology_key}, {c.when_unsatisfiable}}}"
                raise FieldError(
                    f"{dc_path}[{i}]", f'duplicate value "{pair_text}" (also defaultConstraints[{seen[pair]}])'
                )
            seen[pair] = i
        return cls(constraints, defaulting)


class GPUMode(StrEnum):
    BINPACK = "binpack"
    """Prefer nodes and GPUs that are already the most used: fill partly used GPUs first and
    keep whole GPUs (and whole nodes) free for large jobs."""
    SPREAD = "spread"
    """Prefer the least used nodes and GPUs: spread load, less contention per GPU."""


@dataclass(frozen=True, slots=True)
class GPUArgs:
    """Args of kubus's GPUFit plugin (`pluginConfig: [{name: GPUFit, args: {mode: spread}}]`)."""

    mode: GPUMode = GPUMode.BINPACK
    """`binpack` (default) or `spread`: how GPUFit scores nodes that fit (see GPUMode)."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> GPUArgs:
        """The args at `path`: `mode`, binpack by default. Raises FieldError."""
        check_fields(m, path, ("mode",))
        if m.get("mode") is None:
            return cls()
        mode_path = child(path, "mode")
        raw = string(m["mode"], mode_path)
        try:
            return cls(GPUMode(raw))
        except ValueError:
            supported = ", ".join(f'"{x.value}"' for x in GPUMode)
            raise FieldError(mode_path, f'unsupported value "{raw}" (supported: {supported})') from None


DEFAULT_PERMIT_WAITING_TIME_SECONDS = DEFAULT_SCHEDULE_TIMEOUT
"""scheduler-plugins' defaultPermitWaitingTimeSeconds (and its DefaultWaitTime): 60."""
DEFAULT_POD_GROUP_BACKOFF_SECONDS = 0
"""scheduler-plugins' defaultPodGroupBackoffSeconds: no backoff."""
DEFAULT_POD_GROUP_REJECT_PERCENTAGE = 10
"""scheduler-plugins' defaultPodGroupRejectPercentage."""


@dataclass(frozen=True, slots=True)
class CoschedulingArgs:
    """Args of Coscheduling, as scheduler-plugins defines them (its v1 CoschedulingArgs, same
    apiVersion as kube's args, kind CoschedulingArgs)."""

    permit_waiting_time_seconds: int = DEFAULT_PERMIT_WAITING_TIME_SECONDS
    """How long, in seconds, a group's members wait at Permit for the rest of the group when
    the PodGroup names no ``scheduleTimeoutSeconds`` (which wins when set). 0 means the default,
    60, as in scheduler-plugins (`GetWaitTimeDuration`); kube caps any Permit wait at 15 min."""
    pod_group_backoff_seconds: int = DEFAULT_POD_GROUP_BACKOFF_SECONDS
    """After PostFilter rejects a group that has at least ``minMember`` pods, PreFilter refuses
    its members (`podGroup <ns>/<name> failed recently`) for this many seconds. 0: off."""
    pod_group_reject_percentage: int = DEFAULT_POD_GROUP_REJECT_PERCENTAGE
    """0..100. PostFilter leaves a group's waiting members alone (no rejection, no backoff)
    while the members it still lacks are at most this percentage of ``minMember``."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> CoschedulingArgs:
        """The args at `path`, with scheduler-plugins' v1 defaults (60, 0 and 10 when unset),
        validated as its ValidateCoschedulingArgs does (the first problem, with its message).
        Raises FieldError."""
        known = {
            "permitWaitingTimeSeconds": DEFAULT_PERMIT_WAITING_TIME_SECONDS,
            "podGroupBackoffSeconds": DEFAULT_POD_GROUP_BACKOFF_SECONDS,
            "podGroupRejectPercentage": DEFAULT_POD_GROUP_REJECT_PERCENTAGE,
        }
        check_fields(m, path, known)
        values: dict[str, int] = {}
        for key, default in known.items():
            raw = m.get(key)
            values[key] = default if raw is None else integer(raw, child(path, key), maximum=_INT64_MAX)
        for key in ("permitWaitingTimeSeconds", "podGroupBackoffSeconds"):
            if values[key] < 0:
                raise FieldError(child(path, key), f"invalid value {values[key]}: must be greater than 0")
        pct = values["podGroupRejectPercentage"]
        if not 0 <= pct <= 100:
            raise FieldError(child(path, "podGroupRejectPercentage"), f"invalid value {pct}: must be between 0 and 100")
        return cls(values["permitWaitingTimeSeconds"], values["podGroupBackoffSeconds"], pct)


@runtime_checkable
class DecodableArgs(Protocol):
    """An args type that decodes itself from a pluginConfig entry's `args` (every in-tree one).
    An out-of-tree args type may instead have `from_config(mapping)`, or be a plain dataclass."""

    @classmethod
    def decode_config(cls, m: JSONMapping, path: str) -> object:
        """The args at field path `path`, with defaults, validated. Raises FieldError."""
        ...


BUILTIN_ARGS_TYPES: dict[str, type] = {
    "NodeResourcesFit": NodeResourcesFitArgs,
    "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocationArgs,
    "NodeAffinity": NodeAffinityArgs,
    "InterPodAffinity": InterPodAffinityArgs,
    "PodTopologySpread": PodTopologySpreadArgs,
    "DefaultPreemption": DefaultPreemptionArgs,
    "GPUFit": GPUArgs,
    "Coscheduling": CoschedulingArgs,
}
"""Args types of kubus's in-tree plugins, by name: used when the registry gives none."""


def _decode_resources(raw: object, path: str) -> tuple[ResourceSpec, ...]:
    out: list[ResourceSpec] = []
    for i, r in enumerate(as_list(raw, path)):
        p = f"{path}[{i}]"
        m = mapping(r, p, allow_none=False)
        check_fields(m, p, ("name", "weight"))
        name = string(m.get("name", ""), child(p, "name"))
        weight = 0 if m.get("weight") is None else integer(m["weight"], child(p, "weight"), maximum=_INT64_MAX)
        out.append(ResourceSpec(name, weight or 1))  # kube defaults 0 (or unset) to 1
    return tuple(out)


_CONSTRAINT_FIELDS = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)


def _decode_default_constraint(raw: object, path: str) -> TopologySpreadConstraint:
    """One of PodTopologySpreadArgs.defaultConstraints (a v1.TopologySpreadConstraint), checked
    as ValidatePodTopologySpreadArgs checks it."""
    m = mapping(raw, path, allow_none=False)
    check_fields(m, path, _CONSTRAINT_FIELDS)
    skew_path = child(path, "maxSkew")
    max_skew = integer(m.get("maxSkew", 0), skew_path, maximum=_INT32_MAX)
    if max_skew <= 0:
        raise FieldError(skew_path, f"invalid value {max_skew}: not in valid range (0, inf)")
    key_path = child(path, "topologyKey")
    key = string(m.get("topologyKey", ""), key_path)
    if not key:
        raise FieldError(key_path, "required: can not be empty")
    check_qualified_name(key, key_path)
    when_path = child(path, "whenUnsatisfiable")
    when = string(m.get("whenUnsatisfiable", ""), when_path)
    if not when:
        raise FieldError(when_path, "required: can not be empty")
    if when not in WHEN_UNSATISFIABLE:
        supported = ", ".join(f'"{w}"' for w in WHEN_UNSATISFIABLE)
        raise FieldError(when_path, f'unsupported value "{when}" (supported: {supported})')
    if m.get("labelSelector") is not None:
        raise FieldError(
            child(path, "labelSelector"),
            "forbidden: constraint must not define a selector, as they deduced for each pod",
        )
    min_domains = None
    if m.get("minDomains") is not None:
        min_domains = integer(m["minDomains"], child(path, "minDomains"), maximum=_INT32_MAX)
    policies: dict[str, str | None] = {}
    for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        value = m.get(name)
        if value is None:
            policies[name] = None
            continue
        policy = string(value, child(path, name))
        if policy not in NODE_INCLUSION_POLICIES:
            supported = ", ".join(f'"{p}"' for p in NODE_INCLUSION_POLICIES)
            raise FieldError(child(path, name), f'unsupported value "{policy}" (supported: {supported})')
        policies[name] = policy
    mlk_path = child(path, "matchLabelKeys")
    keys = tuple(string(v, f"{mlk_path}[{i}]") for i, v in enumerate(as_list(m.get("matchLabelKeys"), mlk_path)))
    for i, k in enumerate(keys):
        check_qualified_name(k, f"{mlk_path}[{i}]")
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=when,
        min_domains=min_domains,
        node_affinity_policy=policies["nodeAffinityPolicy"],
        node_taints_policy=policies["nodeTaintsPolicy"],
        match_label_keys=keys,
    )


def _decode_shape(raw: object, path: str) -> tuple[UtilizationShapePoint, ...]:
    points: list[UtilizationShapePoint] = []
    for i, r in enumerate(as_list(raw, path)):
        p = f"{path}[{i}]"
        m = mapping(r, p, allow_none=False)
        check_fields(m, p, ("utilization", "score"))
        points.append(
            UtilizationShapePoint(
                integer(m.get("utilization", 0), child(p, "utilization")),
                integer(m.get("score", 0), child(p, "score")),
            )
        )
    # kube's validateFunctionShape
    if not points:
        raise FieldError(path, "required: at least one point must be specified")
    for i in range(1, len(points)):
        if points[i - 1].utilization >= points[i].utilization:
            raise FieldError(
                f"{path}[{i}].utilization",
                f"invalid value {points[i].utilization}: values must be sorted in increasing order",
            )
    for i, pt in enumerate(points):
        if not 0 <= pt.utilization <= 100:
            raise FieldError(
                f"{path}[{i}].utilization",
                f"invalid value {pt.utilization}: not in valid range [0, 100]",
            )
        if not 0 <= pt.score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise FieldError(
                f"{path}[{i}].score",
                f"invalid value {pt.score}: not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]",
            )
    return tuple(points)


def _decode_scoring_strategy(raw: object, path: str) -> ScoringStrategy:
    if raw is None:
        return ScoringStrategy()
    m = mapping(raw, path)
    check_fields(m, path, ("type", "resources", "requestedToCapacityRatio"))
    type_path = child(path, "type")
    type_raw = string(m.get("type", ""), type_path)
    try:
        stype = ScoringStrategyType(type_raw)
    except ValueError:
        supported = ", ".join(f'"{t.value}"' for t in ScoringStrategyType)
        raise FieldError(type_path, f'unsupported value "{type_raw}" (supported: {supported})') from None
    res_path = child(path, "resources")
    resources = _decode_resources(m.get("resources"), res_path) or DEFAULT_RESOURCE_SPEC
    for i, r in enumerate(resources):
        if not 0 < r.weight <= 100:
            raise FieldError(
                f"{res_path}[{i}].weight",
                f"invalid value {r.weight}: resource weight of {r.name} not in valid range (0, 100]",
            )
    rtcr_path = child(path, "requestedToCapacityRatio")
    rtcr: RequestedToCapacityRatioParam | None = None
    if stype is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
        if m.get("requestedToCapacityRatio") is None:
            raise FieldError(rtcr_path, "required: must be specified when type is RequestedToCapacityRatio")
        rm = mapping(m["requestedToCapacityRatio"], rtcr_path)
        check_fields(rm, rtcr_path, ("shape",))
        rtcr = RequestedToCapacityRatioParam(_decode_shape(rm.get("shape"), child(rtcr_path, "shape")))
    elif m.get("requestedToCapacityRatio") is not None:
        raise FieldError(rtcr_path, "forbidden: must be nil when type is not RequestedToCapacityRatio")
    return ScoringStrategy(stype, resources, rtcr)
