"""Scheduler configuration: KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`),
accepted as kube-scheduler accepts it.

`load_config` decodes the YAML strictly (an unknown or duplicate field is an error, as kube's
strict decoding makes it), applies kube's v1 defaults (`SetDefaults_KubeSchedulerConfiguration`,
`getDefaultPlugins`, `mergePlugins`), expands `multiPoint` into the extension points each
plugin implements (`expandMultiPointPlugins`), resolves score weights (`getScoreWeights`), decodes
and validates `pluginConfig` args into typed dataclasses with kube's defaults, and validates the
whole as kube does (`ValidateKubeSchedulerConfiguration`, the framework's checks for one queue
sort plugin and at least one bind plugin). Which plugins exist, and where each plugs in, comes
from the plugin registry passed in.

The default plugin set is kube's, less the plugins kubus does not implement
(OMITTED_KUBE_DEFAULT_PLUGINS says which and why). A config that disables one of those still
loads; one that enables a plugin the registry does not know is an error.

Every mistake raises ConfigError: one line naming the source file, the profile, the field path
and the problem, e.g.
`sched.yaml: profile "gpu": plugins.filter.enabled[0]: plugin "Foo" is not registered (known: ...)`.

Deliberate differences from kube, each stricter or simpler, never silently different:
- a negative plugin weight is an error (kube lets it through and inverts the score);
- `pluginConfig` for a name that is neither registered nor a kube in-tree plugin is an error
  (kube keeps it unused); args for a registered plugin without an args type must be empty;
- the queue sort of all profiles is compared after defaulting and expansion (the plugin that
  will actually run, and its args); kube compares the literal `queueSort` sections;
- a node affinity `matchFields` key other than `metadata.name` is an error;
- extenders are accepted and ignored (listed in `SchedulerConfiguration.ignored_fields`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeAlias

import yaml

from kubus.api.names import is_qualified_name, is_valid_label_value
from kubus.api.objects import (
    CPU,
    MEMORY,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    SelectorOperator,
)
from kubus.framework.registry import ExtensionPoint, PluginSpec, Registry

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"

MAX_NODE_SCORE = 100
"""The highest score a Score plugin gives a node (after normalization)."""
MAX_TOTAL_SCORE = 2**63 - 1
"""Bound on the sum over score plugins of weight × MAX_NODE_SCORE (kube's MaxTotalScore)."""
MAX_CUSTOM_PRIORITY_SCORE = 10
"""Highest score of a RequestedToCapacityRatio shape point (kube's MaxCustomPriorityScore)."""
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A configuration kubus cannot accept. `str()` is one line:
    `<source>: <profile>: <field path>: <problem>`, each part present when known."""

    def __init__(self, problem: str, *, source: str | None = None, scope: str | None = None, path: str = "") -> None:
        self.source = source
        """The file (or the `source` given to load_config); None for text without one."""
        self.scope = scope
        """`profile "<name>"`, or `profiles[<i>]` when the profile has no usable name."""
        self.path = path
        """Field path inside the scope, kube style: `plugins.filter.enabled[0]`."""
        self.problem = " ".join(problem.split("\n"))
        super().__init__(": ".join(p for p in (source, scope, path, self.problem) if p))


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginRef:
    """A plugin enabled at one extension point."""

    name: str
    weight: int = 0
    """At SCORE, the resolved weight (>= 1). Elsewhere 0: weights only matter for Score."""


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One scheduling profile, defaulted, expanded and validated."""

    scheduler_name: str
    """Pods with this `spec.schedulerName` are scheduled by this profile."""
    plugins: Mapping[ExtensionPoint, tuple[PluginRef, ...]] = field(default_factory=dict)
    """Plugins per extension point, in the order they run, after merging with the defaults and
    expanding multiPoint. Every ExtensionPoint is a key (an empty tuple where none). Read-only."""
    plugin_args: Mapping[str, object] = field(default_factory=dict)
    """Plugin name -> decoded args (e.g. NodeResourcesFitArgs), for every plugin with an args
    type that the profile enables (kube's defaults when the config gives none) or configures.
    Plugins without an args type are absent. Read-only."""
    percentage_of_nodes_to_score: int | None = None
    """The profile's own percentageOfNodesToScore; None: use the global one."""

    def enabled(self, point: ExtensionPoint) -> tuple[PluginRef, ...]:
        """The plugins at `point`, in order (empty when none)."""
        return tuple(self.plugins.get(point, ()))


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    """A whole KubeSchedulerConfiguration, as kubus uses it."""

    profiles: tuple[ProfileConfig, ...]
    """At least one; scheduler names are unique; all share one queue sort plugin and its args."""
    percentage_of_nodes_to_score: int | None = 0
    """Global percentageOfNodesToScore, 0..100. 0 (kube's default) and None both mean adaptive
    (50% minus 1% per 125 nodes, at least 5%); see num_feasible_nodes_to_find."""
    pod_initial_backoff_seconds: int = 1
    """Backoff of a pod after its first failed attempt, seconds (> 0)."""
    pod_max_backoff_seconds: int = 10
    """Backoff cap, seconds (>= pod_initial_backoff_seconds)."""
    parallelism: int = 16
    """kube's parallelism (> 0). Accepted and stored; kubus's kernels do not use it."""
    ignored_fields: tuple[str, ...] = ()
    """Fields kube knows that this config sets and kubus accepts without using them
    (leaderElection, clientConnection, extenders, pluginConfig of plugins kubus lacks...)."""

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        return tuple(p.scheduler_name for p in self.profiles)

    def profile(self, scheduler_name: str) -> ProfileConfig:
        """The profile named `scheduler_name`. Raises KeyError naming the known ones."""
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        raise KeyError(
            f'no profile with schedulerName "{scheduler_name}" (profiles: {", ".join(self.scheduler_names)})'
        )


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes the scheduler looks for before it stops filtering: kube's
    `numFeasibleNodesToFind` (schedule_one.go). `percentage` is the profile's
    percentageOfNodesToScore when set, else the global one; 0 or None is adaptive."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * pct // 100, MIN_FEASIBLE_NODES_TO_FIND)


# --- plugin args ----------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    """Args of NodeResourcesBalancedAllocation."""

    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCE_SPEC
    """Resources whose balance is scored; every weight is 1 (kube requires it)."""


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    """Args of NodeAffinity."""

    added_affinity: NodeAffinity | None = None
    """Applied to every pod in addition to its own node affinity (nodes must satisfy both)."""


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


_BUILTIN_ARGS_TYPES: dict[str, type] = {
    "NodeResourcesFit": NodeResourcesFitArgs,
    "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocationArgs,
    "NodeAffinity": NodeAffinityArgs,
    "GPUFit": GPUArgs,
}
"""Args types of kubus's in-tree plugins, by name: used when the registry gives none."""


# --- default plugins ------------------------------------------------------------------------

KUBE_DEFAULT_PLUGINS: tuple[PluginRef, ...] = (
    PluginRef("SchedulingGates"),
    PluginRef("PrioritySort"),
    PluginRef("NodeUnschedulable"),
    PluginRef("NodeName"),
    PluginRef("TaintToleration", 3),
    PluginRef("NodeAffinity", 2),
    PluginRef("NodePorts"),
    PluginRef("NodeResourcesFit", 1),
    PluginRef("VolumeRestrictions"),
    PluginRef("NodeVolumeLimits"),
    PluginRef("VolumeBinding"),
    PluginRef("VolumeZone"),
    PluginRef("PodTopologySpread", 2),
    PluginRef("InterPodAffinity", 2),
    PluginRef("DefaultPreemption"),
    PluginRef("NodeResourcesBalancedAllocation", 1),
    PluginRef("ImageLocality", 1),
    PluginRef("DefaultBinder"),
)
"""kube's `getDefaultPlugins()` multiPoint list with its weights (feature gates off: newer kube
also inserts DynamicResources and NodeDeclaredFeatures, which kubus does not have either)."""

OMITTED_KUBE_DEFAULT_PLUGINS: Mapping[str, str] = {
    "VolumeRestrictions": "kubus does not model volumes",
    "NodeVolumeLimits": "kubus does not model volumes",
    "VolumeBinding": "kubus does not model volumes",
    "VolumeZone": "kubus does not model volumes",
    "PodTopologySpread": "not implemented in kubus yet",
    "InterPodAffinity": "not implemented in kubus yet",
    "DefaultPreemption": "not implemented in kubus yet: kubus does not preempt",
}
"""kube default plugins that kubus's default set leaves out, and why."""

DEFAULT_PLUGINS: tuple[PluginRef, ...] = tuple(
    p for p in KUBE_DEFAULT_PLUGINS if p.name not in OMITTED_KUBE_DEFAULT_PLUGINS
)
"""kubus's default multiPoint set: KUBE_DEFAULT_PLUGINS in kube's order, less the omitted ones."""

KUBE_IN_TREE_PLUGINS: frozenset[str] = frozenset(
    [p.name for p in KUBE_DEFAULT_PLUGINS] + ["DynamicResources", "NodeDeclaredFeatures"]
)
"""kube's in-tree plugin names: `pluginConfig` for one the registry lacks is accepted and ignored
(a kube config configuring, say, PodTopologySpread still loads)."""

REMOVED_PLUGINS: frozenset[str] = frozenset(["AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"])
"""Plugins kube's v1 validation rejects as removed (validation.go invalidPluginsByVersion)."""

_PLACEMENT_POINTS = (
    "placementGenerate",
    "placementScore",
    "placementFeasible",
    "podGroupPostFilter",
)
"""Feature-gated workload extension points of newer kube: accepted only when enabling nothing."""
_MULTI_POINT = "multiPoint"


# --- the registry's view --------------------------------------------------------------------

PluginCatalog: TypeAlias = Registry | Mapping[str, PluginSpec | Iterable[ExtensionPoint | str]]
"""What load_config needs to know of the plugins: a Registry, or a mapping name -> PluginSpec or
name -> extension points (ExtensionPoint or their config names, e.g. "filter")."""


@dataclass(frozen=True, slots=True)
class _PluginInfo:
    points: frozenset[ExtensionPoint]
    args_type: type | None


def _catalog(registry: PluginCatalog) -> dict[str, _PluginInfo]:
    if isinstance(registry, Registry):
        items: Iterable[tuple[str, Any]] = ((s.name, s) for s in registry)
    elif isinstance(registry, Mapping):
        items = registry.items()
    else:
        raise TypeError(f"registry must be a Registry or a mapping, not {type(registry).__name__}")
    out: dict[str, _PluginInfo] = {}
    for name, v in items:
        if isinstance(v, PluginSpec):
            points, args_type = v.extension_points, v.args_type
        else:
            points, args_type = frozenset(ExtensionPoint(p) for p in v), None
        out[name] = _PluginInfo(frozenset(points), args_type or _BUILTIN_ARGS_TYPES.get(name))
    return out


# --- decoding helpers -----------------------------------------------------------------------


class _FieldError(Exception):
    """A problem at a field path inside the current scope (top level or one profile)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Mapping):
        return "mapping"
    if isinstance(v, (list, tuple)):
        return "list"
    return type(v).__name__


def _mapping(v: object, path: str, *, allow_none: bool = True) -> Mapping[str, Any]:
    if v is None and allow_none:
        return {}
    if not isinstance(v, Mapping):
        raise _FieldError(path, f"expected a mapping, got {_type_name(v)}")
    for k in v:
        if not isinstance(k, str):
            raise _FieldError(path, f"field names must be strings, got {k!r}")
    return v


def _check_fields(m: Mapping[str, Any], path: str, known: Iterable[str]) -> None:
    known = tuple(known)
    for k in m:
        if k not in known:
            raise _FieldError(path, f'unknown field "{k}" (known fields: {", ".join(known)})')


def _list(v: object, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _FieldError(path, f"expected a list, got {_type_name(v)}")
    return v


def _str(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise _FieldError(path, f"expected a string, got {_type_name(v)}")
    return v


def _int(v: object, path: str, *, maximum: int = _INT32_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _FieldError(path, f"expected an integer, got {_type_name(v)} {v!r}")
    if not -maximum - 1 <= v <= maximum:
        raise _FieldError(path, f"invalid value {v}: out of range for a {maximum.bit_length() + 1}-bit integer")
    return v


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _check_qualified_name(v: str, path: str) -> None:
    """kube's IsQualifiedName: [DNS-subdomain prefix '/'] name, name <= 63 characters."""
    if not is_qualified_name(v):
        raise _FieldError(
            path,
            f'invalid value "{v}": must be a qualified name: an optional DNS subdomain prefix '
            "and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric",
        )


# --- YAML -----------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys, as kube's strict decoding does."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f'duplicate field "{key}"', key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str | None) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"invalid YAML: {e.problem}", source=source, path=where) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}", source=source) from None


# --- plugins: decode, merge, expand ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    weight: int = 0
    origin: str = ""
    """Field path the entry came from, for errors."""


@dataclass(frozen=True, slots=True)
class _PluginSet:
    enabled: tuple[_Entry, ...] = ()
    disabled: tuple[str, ...] = ()


def _decode_plugin(raw: object, path: str, *, enabled: bool) -> _Entry:
    m = _mapping(raw, path, allow_none=False)
    _check_fields(m, path, ("name", "weight"))
    if "name" not in m:
        raise _FieldError(_child(path, "name"), "required")
    name = _str(m["name"], _child(path, "name"))
    if not name:
        raise _FieldError(_child(path, "name"), "required")
    weight = 0
    if enabled and m.get("weight") is not None:
        weight = _int(m["weight"], _child(path, "weight"))
        if weight < 0:
            raise _FieldError(
                _child(path, "weight"),
                f"invalid value {weight}: must not be negative (0 or unset means the default, 1)",
            )
    return _Entry(name, weight, path)


def _decode_plugin_set(raw: object, path: str) -> _PluginSet:
    m = _mapping(raw, path)
    _check_fields(m, path, ("enabled", "disabled"))
    enabled = tuple(
        _decode_plugin(p, f"{_child(path, 'enabled')}[{i}]", enabled=True)
        for i, p in enumerate(_list(m.get("enabled"), _child(path, "enabled")))
    )
    disabled = tuple(
        _decode_plugin(p, f"{_child(path, 'disabled')}[{i}]", enabled=False).name
        for i, p in enumerate(_list(m.get("disabled"), _child(path, "disabled")))
    )
    return _PluginSet(enabled, disabled)


def _decode_plugins(raw: object, path: str) -> dict[str, _PluginSet]:
    """`plugins` -> config key (multiPoint or an ExtensionPoint value) -> PluginSet."""
    m = _mapping(raw, path)
    keys = (_MULTI_POINT, *(p.value for p in ExtensionPoint), *_PLACEMENT_POINTS)
    _check_fields(m, path, keys)
    sets = {k: _decode_plugin_set(m.get(k), _child(path, k)) for k in keys}
    for k in _PLACEMENT_POINTS:
        if sets[k].enabled:
            raise _FieldError(
                sets[k].enabled[0].origin,
                f"kubus does not support the {k} extension point (kube's workload scheduling)",
            )
    return {k: sets[k] for k in keys[: 1 + len(ExtensionPoint)]}


def _merge_plugin_set(default: _PluginSet, custom: _PluginSet) -> _PluginSet:
    """kube's mergePluginSet: the custom set's enabled plugins replace same-named defaults in
    place (the last custom entry of a name wins that place), the rest are appended in order;
    disabled names (or "*") drop defaults. Duplicates survive, for expansion to reject."""
    disabled = custom.disabled + default.disabled
    disabled_names = set(disabled)
    custom_by_name = {e.name: (i, e) for i, e in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[_Entry] = []
    if "*" not in disabled_names:
        for d in default.enabled:
            if d.name in disabled_names:
                continue
            if d.name in custom_by_name:
                i, d = custom_by_name[d.name]
                replaced.add(i)
            enabled.append(d)
    enabled.extend(e for i, e in enumerate(custom.enabled) if i not in replaced)
    return _PluginSet(tuple(enabled), disabled)


def _default_plugin_sets() -> dict[str, _PluginSet]:
    origin = "plugins.multiPoint (kubus default)"
    sets = {p.value: _PluginSet() for p in ExtensionPoint}
    sets[_MULTI_POINT] = _PluginSet(tuple(_Entry(p.name, p.weight, origin) for p in DEFAULT_PLUGINS))
    return sets


def _check_registered(name: str, origin: str, catalog: Mapping[str, _PluginInfo]) -> None:
    if name in catalog:
        return
    if name in REMOVED_PLUGINS:
        raise _FieldError(origin, f'plugin "{name}" was removed in {API_VERSION}')
    known = ", ".join(sorted(catalog)) or "none"
    why = OMITTED_KUBE_DEFAULT_PLUGINS.get(name)
    hint = f": {why}" if why else ""
    raise _FieldError(origin, f'plugin "{name}" is not registered{hint} (known: {known})')


def _expand(
    merged: Mapping[str, _PluginSet], catalog: Mapping[str, _PluginInfo]
) -> dict[ExtensionPoint, tuple[_Entry, ...]]:
    """kube's updatePluginList + expandMultiPointPlugins, per extension point: the specific
    entries first where they override a multiPoint plugin (in their own order), then the
    multiPoint plugins implementing the point and not disabled there, then the other specific
    entries. A point with disabled "*" gets no multiPoint plugins."""
    multi = merged[_MULTI_POINT].enabled
    out: dict[ExtensionPoint, tuple[_Entry, ...]] = {}
    for point in ExtensionPoint:
        pset = merged[point.value]
        specific: set[str] = set()
        for e in pset.enabled:
            if point not in catalog[e.name].points:
                raise _FieldError(e.origin, f'plugin "{e.name}" does not extend {point.value}')
            if e.name in specific:
                raise _FieldError(e.origin, f'plugin "{e.name}" is enabled twice at {point.value}')
            specific.add(e.name)
        if "*" in pset.disabled:
            out[point] = pset.enabled
            continue
        disabled = set(pset.disabled)
        overrides: set[str] = set()
        from_multi: list[_Entry] = []
        for e in multi:
            if point not in catalog[e.name].points or e.name in disabled:
                continue
            if e.name in specific:
                overrides.add(e.name)
                continue
            if any(m.name == e.name for m in from_multi):
                raise _FieldError(e.origin, f'plugin "{e.name}" is enabled twice through multiPoint')
            from_multi.append(e)
        out[point] = (
            tuple(e for e in pset.enabled if e.name in overrides)
            + tuple(from_multi)
            + tuple(e for e in pset.enabled if e.name not in overrides)
        )
    return out


def _score_weights(merged: Mapping[str, _PluginSet], score: tuple[_Entry, ...]) -> tuple[PluginRef, ...]:
    """kube's getScoreWeights: a plugin's weight comes from its first entry in score.enabled,
    then multiPoint.enabled (so a specific entry wins even when it leaves the weight unset);
    0 means 1. The weighted maximum scores must sum to at most MAX_TOTAL_SCORE."""
    weights: dict[str, int] = {}
    for e in merged[ExtensionPoint.SCORE.value].enabled + merged[_MULTI_POINT].enabled:
        weights.setdefault(e.name, e.weight or 1)
    refs: list[PluginRef] = []
    total = 0
    for e in score:
        w = weights[e.name]
        if w * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
            raise _FieldError("plugins.score", "total score of Score plugins could overflow")
        total += w * MAX_NODE_SCORE
        refs.append(PluginRef(e.name, w))
    return tuple(refs)


# --- plugin args: decode and validate -------------------------------------------------------


def _decode_resources(raw: object, path: str) -> tuple[ResourceSpec, ...]:
    out: list[ResourceSpec] = []
    for i, r in enumerate(_list(raw, path)):
        p = f"{path}[{i}]"
        m = _mapping(r, p, allow_none=False)
        _check_fields(m, p, ("name", "weight"))
        name = _str(m.get("name", ""), _child(p, "name"))
        weight = 0 if m.get("weight") is None else _int(m["weight"], _child(p, "weight"), maximum=_INT64_MAX)
        out.append(ResourceSpec(name, weight or 1))  # kube defaults 0 (or unset) to 1
    return tuple(out)


def _decode_shape(raw: object, path: str) -> tuple[UtilizationShapePoint, ...]:
    points: list[UtilizationShapePoint] = []
    for i, r in enumerate(_list(raw, path)):
        p = f"{path}[{i}]"
        m = _mapping(r, p, allow_none=False)
        _check_fields(m, p, ("utilization", "score"))
        points.append(
            UtilizationShapePoint(
                _int(m.get("utilization", 0), _child(p, "utilization")),
                _int(m.get("score", 0), _child(p, "score")),
            )
        )
    # kube's validateFunctionShape
    if not points:
        raise _FieldError(path, "required: at least one point must be specified")
    for i in range(1, len(points)):
        if points[i - 1].utilization >= points[i].utilization:
            raise _FieldError(
                f"{path}[{i}].utilization",
                f"invalid value {points[i].utilization}: values must be sorted in increasing order",
            )
    for i, pt in enumerate(points):
        if not 0 <= pt.utilization <= 100:
            raise _FieldError(
                f"{path}[{i}].utilization",
                f"invalid value {pt.utilization}: not in valid range [0, 100]",
            )
        if not 0 <= pt.score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise _FieldError(
                f"{path}[{i}].score",
                f"invalid value {pt.score}: not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]",
            )
    return tuple(points)


def _decode_scoring_strategy(raw: object, path: str) -> ScoringStrategy:
    if raw is None:
        return ScoringStrategy()
    m = _mapping(raw, path)
    _check_fields(m, path, ("type", "resources", "requestedToCapacityRatio"))
    type_path = _child(path, "type")
    type_raw = _str(m.get("type", ""), type_path)
    try:
        stype = ScoringStrategyType(type_raw)
    except ValueError:
        supported = ", ".join(f'"{t.value}"' for t in ScoringStrategyType)
        raise _FieldError(type_path, f'unsupported value "{type_raw}" (supported: {supported})') from None
    res_path = _child(path, "resources")
    resources = _decode_resources(m.get("resources"), res_path) or DEFAULT_RESOURCE_SPEC
    for i, r in enumerate(resources):
        if not 0 < r.weight <= 100:
            raise _FieldError(
                f"{res_path}[{i}].weight",
                f"invalid value {r.weight}: resource weight of {r.name} not in valid range (0, 100]",
            )
    rtcr_path = _child(path, "requestedToCapacityRatio")
    rtcr: RequestedToCapacityRatioParam | None = None
    if stype is ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO:
        if m.get("requestedToCapacityRatio") is None:
            raise _FieldError(rtcr_path, "required: must be specified when type is RequestedToCapacityRatio")
        rm = _mapping(m["requestedToCapacityRatio"], rtcr_path)
        _check_fields(rm, rtcr_path, ("shape",))
        rtcr = RequestedToCapacityRatioParam(_decode_shape(rm.get("shape"), _child(rtcr_path, "shape")))
    elif m.get("requestedToCapacityRatio") is not None:
        raise _FieldError(rtcr_path, "forbidden: must be nil when type is not RequestedToCapacityRatio")
    return ScoringStrategy(stype, resources, rtcr)


def _decode_fit_args(m: Mapping[str, Any], path: str) -> NodeResourcesFitArgs:
    _check_fields(m, path, ("ignoredResources", "ignoredResourceGroups", "scoringStrategy"))
    ir_path = _child(path, "ignoredResources")
    ignored = tuple(_str(v, f"{ir_path}[{i}]") for i, v in enumerate(_list(m.get("ignoredResources"), ir_path)))
    for i, v in enumerate(ignored):
        _check_qualified_name(v, f"{ir_path}[{i}]")
    ig_path = _child(path, "ignoredResourceGroups")
    groups = tuple(_str(v, f"{ig_path}[{i}]") for i, v in enumerate(_list(m.get("ignoredResourceGroups"), ig_path)))
    for i, g in enumerate(groups):
        if "/" in g:
            raise _FieldError(f"{ig_path}[{i}]", f"invalid value \"{g}\": resource group name can't contain '/'")
        _check_qualified_name(g, f"{ig_path}[{i}]")
    strategy = _decode_scoring_strategy(m.get("scoringStrategy"), _child(path, "scoringStrategy"))
    return NodeResourcesFitArgs(ignored, groups, strategy)


def _decode_balanced_args(m: Mapping[str, Any], path: str) -> NodeResourcesBalancedAllocationArgs:
    _check_fields(m, path, ("resources",))
    res_path = _child(path, "resources")
    resources = _decode_resources(m.get("resources"), res_path) or DEFAULT_RESOURCE_SPEC
    seen: set[str] = set()
    for i, r in enumerate(resources):
        if r.name in seen:
            raise _FieldError(f"{res_path}[{i}].name", f'duplicate value "{r.name}"')
        seen.add(r.name)
        if r.weight != 1:
            raise _FieldError(f"{res_path}[{i}].weight", f"invalid value {r.weight}: must be 1")
    return NodeResourcesBalancedAllocationArgs(resources)


_SELECTOR_OPERATORS = tuple(op.value for op in SelectorOperator)
_NODE_NAME_FIELD = "metadata.name"


def _decode_requirement(raw: object, path: str, *, is_field: bool) -> NodeSelectorRequirement:
    """A NodeSelectorRequirement, validated as kube's nodeaffinity parser does (labels'
    NewRequirement for matchExpressions; one In/NotIn value for matchFields)."""
    m = _mapping(raw, path, allow_none=False)
    _check_fields(m, path, ("key", "operator", "values"))
    key = _str(m.get("key", ""), _child(path, "key"))
    op_raw = _str(m.get("operator", ""), _child(path, "operator"))
    values_path = _child(path, "values")
    values = tuple(_str(v, f"{values_path}[{i}]") for i, v in enumerate(_list(m.get("values"), values_path)))
    supported = _SELECTOR_OPERATORS[:2] if is_field else _SELECTOR_OPERATORS
    if op_raw not in supported:
        listed = ", ".join(f'"{s}"' for s in supported)
        raise _FieldError(_child(path, "operator"), f'unsupported value "{op_raw}" (supported: {listed})')
    op = SelectorOperator(op_raw)
    if is_field:
        if key != _NODE_NAME_FIELD:
            raise _FieldError(_child(path, "key"), f'unsupported value "{key}" (supported: "{_NODE_NAME_FIELD}")')
        if len(values) != 1:
            raise _FieldError(values_path, "must have one element")
        return NodeSelectorRequirement(key, op, values)
    _check_qualified_name(key, _child(path, "key"))
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        raise _FieldError(values_path, "for 'in', 'notin' operators, values set can't be empty")
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        raise _FieldError(values_path, "values set must be empty for exists and does not exist")
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        if len(values) != 1:
            raise _FieldError(values_path, "for 'Gt', 'Lt' operators, exactly one value is required")
        if not _INTEGER.fullmatch(values[0]) or not -(2**63) <= int(values[0]) < 2**63:
            raise _FieldError(values_path, "for 'Gt', 'Lt' operators, the value must be an integer")
    for i, v in enumerate(values):
        if not is_valid_label_value(v):
            raise _FieldError(
                f"{values_path}[{i}]",
                f'invalid value "{v}": must be a valid label value: at most 63 alphanumerics, '
                "'-', '_' or '.', starting and ending with an alphanumeric (or empty)",
            )
    return NodeSelectorRequirement(key, op, values)


def _decode_term(raw: object, path: str) -> NodeSelectorTerm:
    m = _mapping(raw, path)
    _check_fields(m, path, ("matchExpressions", "matchFields"))
    exprs_path, fields_path = _child(path, "matchExpressions"), _child(path, "matchFields")
    return NodeSelectorTerm(
        match_expressions=tuple(
            _decode_requirement(r, f"{exprs_path}[{i}]", is_field=False)
            for i, r in enumerate(_list(m.get("matchExpressions"), exprs_path))
        ),
        match_fields=tuple(
            _decode_requirement(r, f"{fields_path}[{i}]", is_field=True)
            for i, r in enumerate(_list(m.get("matchFields"), fields_path))
        ),
    )


def _decode_node_affinity(raw: object, path: str) -> NodeAffinity:
    """A core/v1 NodeAffinity in its JSON shape -> kubus.api.objects.NodeAffinity."""
    m = _mapping(raw, path)
    req_key, pref_key = (
        "requiredDuringSchedulingIgnoredDuringExecution",
        "preferredDuringSchedulingIgnoredDuringExecution",
    )
    _check_fields(m, path, (req_key, pref_key))
    required: NodeSelector | None = None
    if m.get(req_key) is not None:
        req_path = _child(path, req_key)
        rm = _mapping(m[req_key], req_path)
        _check_fields(rm, req_path, ("nodeSelectorTerms",))
        terms_path = _child(req_path, "nodeSelectorTerms")
        required = NodeSelector(
            tuple(
                _decode_term(t, f"{terms_path}[{i}]")
                for i, t in enumerate(_list(rm.get("nodeSelectorTerms"), terms_path))
            )
        )
    pref_path = _child(path, pref_key)
    preferred: list[PreferredSchedulingTerm] = []
    for i, t in enumerate(_list(m.get(pref_key), pref_path)):
        p = f"{pref_path}[{i}]"
        tm = _mapping(t, p, allow_none=False)
        _check_fields(tm, p, ("weight", "preference"))
        preferred.append(
            PreferredSchedulingTerm(
                weight=_int(tm.get("weight", 0), _child(p, "weight")),
                preference=_decode_term(tm.get("preference"), _child(p, "preference")),
            )
        )
    return NodeAffinity(required=required, preferred=tuple(preferred))


def _decode_node_affinity_args(m: Mapping[str, Any], path: str) -> NodeAffinityArgs:
    _check_fields(m, path, ("addedAffinity",))
    if m.get("addedAffinity") is None:
        return NodeAffinityArgs()
    return NodeAffinityArgs(_decode_node_affinity(m["addedAffinity"], _child(path, "addedAffinity")))


def _decode_gpu_args(m: Mapping[str, Any], path: str) -> GPUArgs:
    _check_fields(m, path, ("mode",))
    if m.get("mode") is None:
        return GPUArgs()
    mode_path = _child(path, "mode")
    raw = _str(m["mode"], mode_path)
    try:
        return GPUArgs(GPUMode(raw))
    except ValueError:
        supported = ", ".join(f'"{x.value}"' for x in GPUMode)
        raise _FieldError(mode_path, f'unsupported value "{raw}" (supported: {supported})') from None


_ARGS_DECODERS: dict[type, Callable[[Mapping[str, Any], str], object]] = {
    NodeResourcesFitArgs: _decode_fit_args,
    NodeResourcesBalancedAllocationArgs: _decode_balanced_args,
    NodeAffinityArgs: _decode_node_affinity_args,
    GPUArgs: _decode_gpu_args,
}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _decode_other_args(args_type: type, m: Mapping[str, Any], path: str) -> object:
    """Args of an out-of-tree plugin: `args_type.from_config(mapping)` if it has one (a
    ValueError or TypeError it raises becomes a ConfigError at `path`), else a dataclass built
    from the camelCase keys of its fields (lists become tuples)."""
    from_config = getattr(args_type, "from_config", None)
    if callable(from_config):
        try:
            return from_config(dict(m))
        except (ValueError, TypeError) as e:
            raise _FieldError(path, str(e)) from None
    if not is_dataclass(args_type):
        raise _FieldError(
            path,
            f"cannot decode args into {args_type.__qualname__}: give it a from_config(mapping) "
            "classmethod or make it a dataclass",
        )
    by_key = {_camel(f.name): f for f in fields(args_type) if f.init}
    _check_fields(m, path, by_key)
    for key, f in by_key.items():
        if key not in m and f.default is MISSING and f.default_factory is MISSING:
            raise _FieldError(_child(path, key), "required")
    kwargs = {by_key[k].name: tuple(v) if isinstance(v, list) else v for k, v in m.items()}
    try:
        return args_type(**kwargs)
    except (ValueError, TypeError) as e:
        raise _FieldError(path, str(e)) from None


def _decode_args(name: str, args_type: type | None, raw: object, path: str) -> object | None:
    """`pluginConfig[].args` of plugin `name` -> an instance of its args type, with kube's
    defaults and validation. `apiVersion`/`kind` may be given (kind `<name>Args`)."""
    m = dict(_mapping(raw, path))
    api_version = m.pop("apiVersion", None)
    if api_version is not None and api_version != API_VERSION:
        raise _FieldError(_child(path, "apiVersion"), f'unsupported value "{api_version}" (want {API_VERSION})')
    kind = m.pop("kind", None)
    if kind is not None and kind != f"{name}Args":
        raise _FieldError(_child(path, "kind"), f'args for plugin {name} must be of kind {name}Args, not "{kind}"')
    if args_type is None:
        if m:
            raise _FieldError(path, f'plugin "{name}" takes no args')
        return None
    decoder = _ARGS_DECODERS.get(args_type)
    if decoder is not None:
        return decoder(m, path)
    return _decode_other_args(args_type, m, path)


# --- profiles -------------------------------------------------------------------------------

_PROFILE_FIELDS = (
    "schedulerName",
    "percentageOfNodesToScore",
    "percentageOfPlacementsToScore",
    "plugins",
    "pluginConfig",
)


def _percentage(v: object, path: str) -> int | None:
    if v is None:
        return None
    pct = _int(v, path)
    if not 0 <= pct <= 100:
        raise _FieldError(path, f"invalid value {pct}: not in valid range [0-100]")
    return pct


def _decode_profile(
    m: Mapping[str, Any],
    name: str,
    catalog: Mapping[str, _PluginInfo],
    ignored: list[str],
    ignored_prefix: str,
) -> ProfileConfig:
    pct = _percentage(m.get("percentageOfNodesToScore"), "percentageOfNodesToScore")
    if m.get("percentageOfPlacementsToScore") is not None:
        ignored.append(f"{ignored_prefix}.percentageOfPlacementsToScore")

    custom = _decode_plugins(m.get("plugins"), "plugins")
    defaults = _default_plugin_sets()
    merged = {k: _merge_plugin_set(defaults[k], custom[k]) for k in defaults}
    for pset in merged.values():
        for e in pset.enabled:
            _check_registered(e.name, e.origin, catalog)
    expanded = _expand(merged, catalog)

    sorts = expanded[ExtensionPoint.QUEUE_SORT]
    if len(sorts) != 1:
        got = f" ({', '.join(e.name for e in sorts)})" if sorts else ""
        raise _FieldError("plugins", f"only one queue sort plugin required, but got {len(sorts)}{got}")
    if not expanded[ExtensionPoint.BIND]:
        raise _FieldError("plugins", "at least one bind plugin is needed")
    plugins = {point: tuple(PluginRef(e.name) for e in entries) for point, entries in expanded.items()}
    plugins[ExtensionPoint.SCORE] = _score_weights(merged, expanded[ExtensionPoint.SCORE])

    args: dict[str, object] = {}
    seen: dict[str, int] = {}
    for i, pc in enumerate(_list(m.get("pluginConfig"), "pluginConfig")):
        path = f"pluginConfig[{i}]"
        pm = _mapping(pc, path, allow_none=False)
        _check_fields(pm, path, ("name", "args"))
        pname = _str(pm.get("name", ""), _child(path, "name"))
        if not pname:
            raise _FieldError(_child(path, "name"), "required")
        if pname in seen:
            raise _FieldError(path, f'duplicate config for plugin "{pname}" (also pluginConfig[{seen[pname]}])')
        seen[pname] = i
        if pname not in catalog and pname in KUBE_IN_TREE_PLUGINS:
            ignored.append(f"{ignored_prefix}.pluginConfig[{i}] ({pname})")
            continue
        _check_registered(pname, _child(path, "name"), catalog)
        decoded = _decode_args(pname, catalog[pname].args_type, pm.get("args"), _child(path, "args"))
        if decoded is not None:
            args[pname] = decoded
    for entries in expanded.values():
        for e in entries:
            args_type = catalog[e.name].args_type
            if e.name in args or args_type is None:
                continue
            try:  # kube appends default args for every enabled plugin that has an args type
                args[e.name] = _decode_args(e.name, args_type, None, "args")
            except _FieldError as err:
                raise _FieldError("pluginConfig", f'plugin "{e.name}" needs args: {err.path}: {err.problem}') from None

    return ProfileConfig(
        scheduler_name=name,
        plugins=plugins,
        plugin_args=args,
        percentage_of_nodes_to_score=pct,
    )


# --- the whole configuration ----------------------------------------------------------------

_TOP_FIELDS = (
    "apiVersion",
    "kind",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "percentageOfPlacementsToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "delayCacheUntilActive",
)
_IGNORED_TOP_FIELDS = (
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfPlacementsToScore",
    "extenders",
    "delayCacheUntilActive",
)


def _read(path_or_text: str | os.PathLike[str] | Mapping[str, Any], source: str | None) -> tuple[Any, str | None]:
    if isinstance(path_or_text, Mapping):
        return path_or_text, source
    if isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str) and "\n" not in path_or_text and not path_or_text.lstrip().startswith("{")
    ):
        path = Path(path_or_text)
        source = source or str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read the file: {e.strerror or e}", source=source) from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"cannot read the file: not UTF-8 ({e.reason})", source=source) from None
        return _parse_yaml(text, source), source
    if isinstance(path_or_text, str):
        return _parse_yaml(path_or_text, source), source
    raise TypeError(f"load_config takes a path, YAML text or a mapping, not {type(path_or_text).__name__}")


def load_config(
    path_or_text: str | os.PathLike[str] | Mapping[str, Any],
    *,
    registry: PluginCatalog,
    source: str | None = None,
) -> SchedulerConfiguration:
    """Load a KubeSchedulerConfiguration: defaulted, expanded and validated as kube-scheduler
    does (see the module docstring for the few deliberate differences).

    `path_or_text`: a path (os.PathLike, or a one-line string not starting with "{"), YAML or
    JSON text, or an already parsed mapping. `registry`: the plugins that exist (a Registry, or
    a mapping name -> PluginSpec / extension points). `source`: the name errors give the
    config (default: the file path; none for text).

    Pure: reads the file, builds nothing. Raises ConfigError (one line) on any mistake.
    """
    catalog = _catalog(registry)
    raw, source = _read(path_or_text, source)
    try:
        return _load(raw, catalog, source)
    except _FieldError as e:
        raise ConfigError(e.problem, source=source, path=e.path) from None


def default_config(registry: PluginCatalog) -> SchedulerConfiguration:
    """What an empty KubeSchedulerConfiguration becomes: one `default-scheduler` profile with
    the default plugins (DEFAULT_PLUGINS) and kube's global defaults. Raises ConfigError when
    the registry lacks a default plugin."""
    return load_config({"apiVersion": API_VERSION, "kind": KIND}, registry=registry, source="defaults")


def _load(raw: Any, catalog: Mapping[str, _PluginInfo], source: str | None) -> SchedulerConfiguration:
    if not isinstance(raw, Mapping):
        raise _FieldError("", f"expected a {KIND} mapping, got {_type_name(raw)}")
    m = _mapping(raw, "")
    api_version = m.get("apiVersion")
    if api_version is None:
        raise _FieldError("apiVersion", f"required (kubus reads {API_VERSION})")
    if api_version != API_VERSION:
        raise _FieldError("apiVersion", f'"{api_version}" is not supported (kubus reads {API_VERSION})')
    kind = m.get("kind")
    if kind != KIND:
        raise _FieldError("kind", "required" if kind is None else f'"{kind}" is not supported (want {KIND})')
    _check_fields(m, "", _TOP_FIELDS)
    ignored = [k for k in _IGNORED_TOP_FIELDS if m.get(k) is not None]

    parallelism = 16 if m.get("parallelism") is None else _int(m["parallelism"], "parallelism")
    if parallelism <= 0:
        raise _FieldError(
            "parallelism",
            f"invalid value {parallelism}: should be an integer value greater than zero",
        )
    pct = _percentage(m.get("percentageOfNodesToScore"), "percentageOfNodesToScore")
    initial = (
        1
        if m.get("podInitialBackoffSeconds") is None
        else _int(m["podInitialBackoffSeconds"], "podInitialBackoffSeconds", maximum=_INT64_MAX)
    )
    if initial <= 0:
        raise _FieldError("podInitialBackoffSeconds", f"invalid value {initial}: must be greater than 0")
    maximum = (
        10
        if m.get("podMaxBackoffSeconds") is None
        else _int(m["podMaxBackoffSeconds"], "podMaxBackoffSeconds", maximum=_INT64_MAX)
    )
    if maximum < initial:
        raise _FieldError(
            "podMaxBackoffSeconds",
            f"invalid value {maximum}: must be greater than or equal to PodInitialBackoffSeconds",
        )

    raw_profiles = _list(m.get("profiles"), "profiles") or [{}]
    profiles: list[ProfileConfig] = []
    first_index: dict[str, int] = {}
    for i, rp in enumerate(raw_profiles):
        pm = _mapping(rp, f"profiles[{i}]", allow_none=False)
        name_raw = pm.get("schedulerName")
        if name_raw is None and len(raw_profiles) == 1:
            name_raw = DEFAULT_SCHEDULER_NAME  # kube names a lone profile, and only a lone one
        scope = f"profiles[{i}]"
        try:
            if name_raw is None:
                raise _FieldError("schedulerName", "required")
            name = _str(name_raw, "schedulerName")
            if not name:
                raise _FieldError("schedulerName", "required")
            if name in first_index:
                raise _FieldError(
                    "schedulerName",
                    f'duplicate value "{name}" (also profiles[{first_index[name]}].schedulerName)',
                )
            first_index[name] = i
            scope = f'profile "{name}"'
            _check_fields(pm, "", _PROFILE_FIELDS)
            profiles.append(_decode_profile(pm, name, catalog, ignored, f"profiles[{i}]"))
        except _FieldError as e:
            raise ConfigError(e.problem, source=source, scope=scope, path=e.path) from None

    _check_common_queue_sort(profiles, source)
    return SchedulerConfiguration(
        profiles=tuple(profiles),
        percentage_of_nodes_to_score=0 if pct is None else pct,
        pod_initial_backoff_seconds=initial,
        pod_max_backoff_seconds=maximum,
        parallelism=parallelism,
        ignored_fields=tuple(ignored),
    )


def _check_common_queue_sort(profiles: list[ProfileConfig], source: str | None) -> None:
    """kube requires one queue for all profiles: the same queue sort plugin, the same args."""
    first = profiles[0]
    (sort,) = first.plugins[ExtensionPoint.QUEUE_SORT]
    for p in profiles[1:]:
        (other,) = p.plugins[ExtensionPoint.QUEUE_SORT]
        scope = f'profile "{p.scheduler_name}"'
        if other.name != sort.name:
            raise ConfigError(
                f'queue sort must be the same for all profiles: "{other.name}" here, '
                f'"{sort.name}" in profile "{first.scheduler_name}"',
                source=source,
                scope=scope,
                path="plugins.queueSort",
            )
        if p.plugin_args.get(other.name) != first.plugin_args.get(sort.name):
            raise ConfigError(
                f'args of queue sort plugin "{sort.name}" must be the same for all profiles '
                f'(they differ from profile "{first.scheduler_name}")',
                source=source,
                scope=scope,
                path="pluginConfig",
            )


__all__ = [
    "API_VERSION",
    "DEFAULT_PLUGINS",
    "DEFAULT_RESOURCE_SPEC",
    "DEFAULT_SCHEDULER_NAME",
    "KIND",
    "KUBE_DEFAULT_PLUGINS",
    "KUBE_IN_TREE_PLUGINS",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MAX_NODE_SCORE",
    "MAX_TOTAL_SCORE",
    "OMITTED_KUBE_DEFAULT_PLUGINS",
    "REMOVED_PLUGINS",
    "ConfigError",
    "ExtensionPoint",
    "GPUArgs",
    "GPUMode",
    "NodeAffinityArgs",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFitArgs",
    "PluginCatalog",
    "PluginRef",
    "ProfileConfig",
    "RequestedToCapacityRatioParam",
    "ResourceSpec",
    "SchedulerConfiguration",
    "ScoringStrategy",
    "ScoringStrategyType",
    "UtilizationShapePoint",
    "default_config",
    "load_config",
    "num_feasible_nodes_to_find",
]
