"""The plugin registry: plugin name -> how to build the plugin and where it plugs in.

kube-scheduler's `runtime.Registry` maps a name to a factory; kubus keeps next to the factory
the extension points the plugin implements (read off its class) and the type of its args, so
configuration can be validated before any plugin is built.

Registering an in-tree plugin is one line, `registry.register(MyPlugin)`. Out-of-tree plugins
are found through the `kubus.plugins` entry point group, as `WithPlugin` does in Go:

    [project.entry-points."kubus.plugins"]
    MyPlugin = "mypkg.plugin:MyPlugin"

The entry point's name is the name configs use; it must equal the class's `name`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points

from kubus.core.errors import KubusError
from kubus.framework.interface import PluginInstance

ENTRY_POINT_GROUP = "kubus.plugins"


class ExtensionPoint(StrEnum):
    """The extension points a profile configures, by their KubeSchedulerConfiguration names.

    Listed in the order a pod meets them. NormalizeScore is part of Score, not a point of its
    own; multiPoint is configuration shorthand, expanded into these.
    """

    PRE_ENQUEUE = "preEnqueue"
    QUEUE_SORT = "queueSort"
    PRE_FILTER = "preFilter"
    FILTER = "filter"
    POST_FILTER = "postFilter"
    PRE_SCORE = "preScore"
    SCORE = "score"
    RESERVE = "reserve"
    PERMIT = "permit"
    PRE_BIND = "preBind"
    BIND = "bind"
    POST_BIND = "postBind"

    @property
    def label(self) -> str:
        """kube's name of the point in metrics: PreFilter, Filter, PostBind, ..."""
        return self.value[0].upper() + self.value[1:]


METHOD_EXTENSION_POINTS: dict[str, ExtensionPoint] = {
    "pre_enqueue": ExtensionPoint.PRE_ENQUEUE,
    "less": ExtensionPoint.QUEUE_SORT,
    "pre_filter": ExtensionPoint.PRE_FILTER,
    "filter": ExtensionPoint.FILTER,
    "post_filter": ExtensionPoint.POST_FILTER,
    "pre_score": ExtensionPoint.PRE_SCORE,
    "pre_score_feasible": ExtensionPoint.PRE_SCORE,
    "score": ExtensionPoint.SCORE,
    "reserve": ExtensionPoint.RESERVE,
    "permit": ExtensionPoint.PERMIT,
    "pre_bind": ExtensionPoint.PRE_BIND,
    "bind": ExtensionPoint.BIND,
    "post_bind": ExtensionPoint.POST_BIND,
}
"""Method a plugin class defines -> the extension point that makes it. A Reserve plugin must
define `unreserve` as well, as kube's ReservePlugin interface has both."""

PluginFactory = Callable[[object, object], PluginInstance]
"""`factory(args, handle) -> plugin`: args are the decoded plugin args (None for a plugin without
an args type); handle is the framework's handle, whatever the framework passes."""


class RegistryError(KubusError, ValueError):
    """A plugin that cannot be registered or loaded: duplicate name, bad class, broken entry
    point. The message names the plugin (and the entry point, for out-of-tree plugins)."""


def extension_points_of(cls: type) -> frozenset[ExtensionPoint]:
    """The extension points a plugin class implements, read off the methods it has (its own or
    inherited). Raises RegistryError when it has `reserve` without `unreserve` or the reverse."""
    points = frozenset(
        point for method, point in METHOD_EXTENSION_POINTS.items() if callable(getattr(cls, method, None))
    )
    has_reserve = callable(getattr(cls, "reserve", None))
    has_unreserve = callable(getattr(cls, "unreserve", None))
    if has_reserve != has_unreserve:
        present, missing = ("reserve", "unreserve") if has_reserve else ("unreserve", "reserve")
        raise RegistryError(
            f"plugin class {cls.__qualname__} defines {present} but not {missing}: a Reserve plugin needs both"
        )
    return points


def _default_factory(cls: type) -> PluginFactory:
    """`cls(args, handle)`, `cls(args)` or `cls()`, as many as the constructor takes
    positionally."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: assume the full one
        return lambda args, handle: cls(args, handle)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return lambda args, handle: cls(args, handle)
    if len(positional) == 1:
        return lambda args, handle: cls(args)
    return lambda args, handle: cls()


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """How to build one plugin and where it plugs in."""

    name: str
    """The name configurations use (`plugins.filter.enabled[].name`, `pluginConfig[].name`)."""
    factory: PluginFactory
    """`factory(args, handle) -> plugin instance`; called once per profile that uses it."""
    extension_points: frozenset[ExtensionPoint]
    """Where the plugin can be enabled; multiPoint expands to exactly these."""
    args_type: type | None = None
    """Type of the decoded `pluginConfig` args (a frozen dataclass), or None when the plugin
    takes none. kubus's own args types are in `kubus.framework.config`."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name == "*":
            raise RegistryError(f"plugin name must be a non-empty string other than '*', got {self.name!r}")
        if not callable(self.factory):
            raise RegistryError(f'plugin "{self.name}": factory is not callable')
        points = frozenset(self.extension_points)
        bad = [p for p in points if not isinstance(p, ExtensionPoint)]
        if bad:
            raise RegistryError(f'plugin "{self.name}": not extension points: {bad!r}')
        object.__setattr__(self, "extension_points", points)
        if self.args_type is not None and not isinstance(self.args_type, type):
            raise RegistryError(f'plugin "{self.name}": args_type must be a type, got {self.args_type!r}')

    @classmethod
    def from_class(
        cls,
        plugin_class: type,
        args_type: type | None = None,
        *,
        factory: PluginFactory | None = None,
    ) -> PluginSpec:
        """The spec of a plugin class: its `name` ClassVar, the extension points its methods make
        (see METHOD_EXTENSION_POINTS), and `args_type` (else the class's own `args_type`
        attribute, if it has one).

        The default factory calls `plugin_class(args, handle)`, `plugin_class(args)` or
        `plugin_class()`, whichever the constructor's positional parameters allow.
        Raises RegistryError when the class has no usable `name`.
        """
        if not isinstance(plugin_class, type):
            raise RegistryError(f"not a plugin class: {plugin_class!r}")
        name = getattr(plugin_class, "name", None)
        if not isinstance(name, str) or not name:
            raise RegistryError(f"plugin class {plugin_class.__qualname__} has no `name: ClassVar[str]`")
        if args_type is None:
            declared = getattr(plugin_class, "args_type", None)
            args_type = declared if isinstance(declared, type) else None
        return cls(
            name=name,
            factory=factory if factory is not None else _default_factory(plugin_class),
            extension_points=extension_points_of(plugin_class),
            args_type=args_type,
        )


class Registry:
    """Plugin name -> PluginSpec. Not thread-safe; build it once at startup, then only read."""

    __slots__ = ("_specs",)

    def __init__(self, plugins: Iterable[PluginSpec | type] = ()) -> None:
        self._specs: dict[str, PluginSpec] = {}
        for p in plugins:
            self.register(p)

    def register(self, plugin: PluginSpec | type) -> PluginSpec:
        """Add a plugin (a PluginSpec, or a plugin class for `PluginSpec.from_class`).
        Returns its spec. Raises RegistryError if the name is already registered."""
        spec = plugin if isinstance(plugin, PluginSpec) else PluginSpec.from_class(plugin)
        if spec.name in self._specs:
            raise RegistryError(f'plugin "{spec.name}" is already registered')
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> PluginSpec:
        """The spec registered as `name`. Raises KeyError naming it and the known names."""
        try:
            return self._specs[name]
        except KeyError:
            known = ", ".join(sorted(self._specs)) or "none"
            raise KeyError(f'plugin "{name}" is not registered (known: {known})') from None

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[PluginSpec]:
        return iter(tuple(self._specs.values()))

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self._specs)})"


def load_entry_point_plugins(registry: Registry, group: str = ENTRY_POINT_GROUP) -> tuple[PluginSpec, ...]:
    """Register every plugin advertised in the entry point `group` of the installed
    distributions, in entry point name order; returns their specs.

    Each entry point must name a plugin class or a PluginSpec, and its name must be the
    plugin's name. Raises RegistryError naming the entry point (and its distribution) when one
    cannot be imported, is not a plugin, or clashes with a registered name; plugins registered
    before the failure stay registered.
    """
    loaded: list[PluginSpec] = []
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        where = f'entry point "{ep.name} = {ep.value}" (group {group}'
        where += f", distribution {dist.name})" if dist is not None else ")"
        try:
            obj = ep.load()
        except Exception as e:
            raise RegistryError(f"{where}: cannot be loaded: {type(e).__name__}: {e}") from e
        try:
            if isinstance(obj, PluginSpec):
                spec = obj
            elif isinstance(obj, type):
                spec = PluginSpec.from_class(obj)
            else:
                raise RegistryError(f"must name a plugin class or a PluginSpec, not {obj!r}")
            if spec.name != ep.name:
                raise RegistryError(f'names the plugin "{spec.name}"; the two names must match')
            registry.register(spec)
        except RegistryError as e:
            raise RegistryError(f"{where}: {e}") from e
        loaded.append(spec)
    return tuple(loaded)


__all__ = [
    "ENTRY_POINT_GROUP",
    "METHOD_EXTENSION_POINTS",
    "ExtensionPoint",
    "PluginFactory",
    "PluginSpec",
    "Registry",
    "RegistryError",
    "extension_points_of",
    "load_entry_point_plugins",
]
