"""Plugin sets: decoding `plugins`, merging them with the defaults (kube's mergePluginSet),
expanding multiPoint into the extension points each plugin implements (expandMultiPointPlugins)
and resolving score weights (getScoreWeights)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubus.framework.config._fields import FieldError, as_list, check_fields, child, integer, mapping, string
from kubus.framework.config.catalog import PluginInfo
from kubus.framework.config.defaults import DEFAULT_PLUGINS, OMITTED_KUBE_DEFAULT_PLUGINS, REMOVED_PLUGINS
from kubus.framework.config.model import API_VERSION, PluginRef
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.registry import ExtensionPoint

MAX_TOTAL_SCORE = 2**63 - 1
"""Bound on the sum over score plugins of weight × MAX_NODE_SCORE (kube's MaxTotalScore)."""
_PLACEMENT_POINTS = (
    "placementGenerate",
    "placementScore",
    "placementFeasible",
    "podGroupPostFilter",
)
"""Feature-gated workload extension points of newer kube: accepted only when enabling nothing."""
_MULTI_POINT = "multiPoint"


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    weight: int = 0
    origin: str = ""
    """Field path the entry came from, for errors."""


@dataclass(frozen=True, slots=True)
class PluginSet:
    enabled: tuple[Entry, ...] = ()
    disabled: tuple[str, ...] = ()


def _decode_plugin(raw: object, path: str, *, enabled: bool) -> Entry:
    m = mapping(raw, path, allow_none=False)
    check_fields(m, path, ("name", "weight"))
    if "name" not in m:
        raise FieldError(child(path, "name"), "required")
    name = string(m["name"], child(path, "name"))
    if not name:
        raise FieldError(child(path, "name"), "required")
    weight = 0
    if enabled and m.get("weight") is not None:
        weight = integer(m["weight"], child(path, "weight"))
        if weight < 0:
            raise FieldError(
                child(path, "weight"),
                f"invalid value {weight}: must not be negative (0 or unset means the default, 1)",
            )
    return Entry(name, weight, path)


def _decode_plugin_set(raw: object, path: str) -> PluginSet:
    m = mapping(raw, path)
    check_fields(m, path, ("enabled", "disabled"))
    enabled = tuple(
        _decode_plugin(p, f"{child(path, 'enabled')}[{i}]", enabled=True)
        for i, p in enumerate(as_list(m.get("enabled"), child(path, "enabled")))
    )
    disabled = tuple(
        _decode_plugin(p, f"{child(path, 'disabled')}[{i}]", enabled=False).name
        for i, p in enumerate(as_list(m.get("disabled"), child(path, "disabled")))
    )
    return PluginSet(enabled, disabled)


def decode_plugins(raw: object, path: str) -> dict[str, PluginSet]:
    """`plugins` -> config key (multiPoint or an ExtensionPoint value) -> PluginSet."""
    m = mapping(raw, path)
    keys = (_MULTI_POINT, *(p.value for p in ExtensionPoint), *_PLACEMENT_POINTS)
    check_fields(m, path, keys)
    sets = {k: _decode_plugin_set(m.get(k), child(path, k)) for k in keys}
    for k in _PLACEMENT_POINTS:
        if sets[k].enabled:
            raise FieldError(
                sets[k].enabled[0].origin,
                f"kubus does not support the {k} extension point (kube's workload scheduling)",
            )
    return {k: sets[k] for k in keys[: 1 + len(ExtensionPoint)]}


def merge_plugin_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """kube's mergePluginSet: the custom set's enabled plugins replace same-named defaults in
    place (the last custom entry of a name wins that place), the rest are appended in order;
    disabled names (or "*") drop defaults. Duplicates survive, for expansion to reject."""
    disabled = custom.disabled + default.disabled
    disabled_names = set(disabled)
    custom_by_name = {e.name: (i, e) for i, e in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[Entry] = []
    if "*" not in disabled_names:
        for d in default.enabled:
            if d.name in disabled_names:
                continue
            if d.name in custom_by_name:
                i, d = custom_by_name[d.name]
                replaced.add(i)
            enabled.append(d)
    enabled.extend(e for i, e in enumerate(custom.enabled) if i not in replaced)
    return PluginSet(tuple(enabled), disabled)


def default_plugin_sets() -> dict[str, PluginSet]:
    origin = "plugins.multiPoint (kubus default)"
    sets = {p.value: PluginSet() for p in ExtensionPoint}
    sets[_MULTI_POINT] = PluginSet(tuple(Entry(p.name, p.weight, origin) for p in DEFAULT_PLUGINS))
    return sets


def check_registered(name: str, origin: str, catalog: Mapping[str, PluginInfo]) -> None:
    if name in catalog:
        return
    if name in REMOVED_PLUGINS:
        raise FieldError(origin, f'plugin "{name}" was removed in {API_VERSION}')
    known = ", ".join(sorted(catalog)) or "none"
    why = OMITTED_KUBE_DEFAULT_PLUGINS.get(name)
    hint = f": {why}" if why else ""
    raise FieldError(origin, f'plugin "{name}" is not registered{hint} (known: {known})')


def expand(
    merged: Mapping[str, PluginSet], catalog: Mapping[str, PluginInfo]
) -> dict[ExtensionPoint, tuple[Entry, ...]]:
    """kube's updatePluginList + expandMultiPointPlugins, per extension point: the specific
    entries first where they override a multiPoint plugin (in their own order), then the
    multiPoint plugins implementing the point and not disabled there, then the other specific
    entries. A point with disabled "*" gets no multiPoint plugins."""
    multi = merged[_MULTI_POINT].enabled
    out: dict[ExtensionPoint, tuple[Entry, ...]] = {}
    for point in ExtensionPoint:
        pset = merged[point.value]
        specific: set[str] = set()
        for e in pset.enabled:
            if point not in catalog[e.name].points:
                raise FieldError(e.origin, f'plugin "{e.name}" does not extend {point.value}')
            if e.name in specific:
                raise FieldError(e.origin, f'plugin "{e.name}" is enabled twice at {point.value}')
            specific.add(e.name)
        if "*" in pset.disabled:
            out[point] = pset.enabled
            continue
        disabled = set(pset.disabled)
        overrides: set[str] = set()
        from_multi: list[Entry] = []
        for e in multi:
            if point not in catalog[e.name].points or e.name in disabled:
                continue
            if e.name in specific:
                overrides.add(e.name)
                continue
            if any(m.name == e.name for m in from_multi):
                raise FieldError(e.origin, f'plugin "{e.name}" is enabled twice through multiPoint')
            from_multi.append(e)
        out[point] = (
            tuple(e for e in pset.enabled if e.name in overrides)
            + tuple(from_multi)
            + tuple(e for e in pset.enabled if e.name not in overrides)
        )
    return out


def score_weights(merged: Mapping[str, PluginSet], score: tuple[Entry, ...]) -> tuple[PluginRef, ...]:
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
            raise FieldError("plugins.score", "total score of Score plugins could overflow")
        total += w * MAX_NODE_SCORE
        refs.append(PluginRef(e.name, w))
    return tuple(refs)
