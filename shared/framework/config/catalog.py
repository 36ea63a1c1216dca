"""What loading a configuration needs to know of the plugins: per name, the extension points it
implements and its args type."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from kubus.framework.config.args import BUILTIN_ARGS_TYPES
from kubus.framework.registry import ExtensionPoint, PluginSpec, Registry

PluginCatalog: TypeAlias = Registry | Mapping[str, PluginSpec | Iterable[ExtensionPoint | str]]
"""What load_config needs to know of the plugins: a Registry, or a mapping name -> PluginSpec or
name -> extension points (ExtensionPoint or their config names, e.g. "filter")."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    points: frozenset[ExtensionPoint]
    args_type: type | None


def catalog_of(registry: PluginCatalog) -> dict[str, PluginInfo]:
    if isinstance(registry, Registry):
        items: Iterable[tuple[str, PluginSpec | Iterable[ExtensionPoint | str]]] = ((s.name, s) for s in registry)
    elif isinstance(registry, Mapping):
        items = registry.items()
    else:
        raise TypeError(f"registry must be a Registry or a mapping, not {type(registry).__name__}")
    out: dict[str, PluginInfo] = {}
    for name, v in items:
        if isinstance(v, PluginSpec):
            points, args_type = v.extension_points, v.args_type
        else:
            points, args_type = frozenset(ExtensionPoint(p) for p in v), None
        out[name] = PluginInfo(frozenset(points), args_type or BUILTIN_ARGS_TYPES.get(name))
    return out
