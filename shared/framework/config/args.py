"""The args types of kubus's in-tree plugins (kube's NodeResourcesFitArgs, ...), each decoding
and validating itself from `pluginConfig[].args` with kube's defaults (`decode_config`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from kubus.api.node_affinity import Validation, decode_node_affinity
from kubus.api.objects import CPU, MEMORY, NodeAffinity
from kubus.framework.config._fields import (
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
    def decode_config(cls, m: Mapping[str, Any], path: str) -> NodeResourcesFitArgs:
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
    def decode_config(cls, m: Mapping[str, Any], path: str) -> NodeResourcesBalancedAllocationArgs:
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
    def decode_config(cls, m: Mapping[str, Any], path: str) -> NodeAffinityArgs:
        """The args at `path`, validated as ValidateNodeAffinityArgs does (kube's nodeaffinity
        parser). Raises FieldError."""
        check_fields(m, path, ("addedAffinity",))
        if m.get("addedAffinity") is None:
            return cls()
        added = decode_node_affinity(
            ConfigReader(), m["addedAffinity"], child(path, "addedAffinity"), Validation.PLUGIN_ARGS
        )
        return cls(added)


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
    def decode_config(cls, m: Mapping[str, Any], path: str) -> GPUArgs:
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


@runtime_checkable
class DecodableArgs(Protocol):
    """An args type that decodes itself from a pluginConfig entry's `args` (every in-tree one).
    An out-of-tree args type may instead have `from_config(mapping)`, or be a plain dataclass."""

    @classmethod
    def decode_config(cls, m: Mapping[str, Any], path: str) -> Any:
        """The args at field path `path`, with defaults, validated. Raises FieldError."""
        ...


BUILTIN_ARGS_TYPES: dict[str, type] = {
    "NodeResourcesFit": NodeResourcesFitArgs,
    "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocationArgs,
    "NodeAffinity": NodeAffinityArgs,
    "GPUFit": GPUArgs,
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
