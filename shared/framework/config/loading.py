"""Loading a KubeSchedulerConfiguration: YAML, the top level, profiles and their pluginConfig
(see kubus.framework.config for what is checked)."""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

import yaml

from kubus.api.objects import DEFAULT_SCHEDULER_NAME
from kubus.core.codec import JSONMapping, JSONValue
from kubus.framework.config._fields import (
    _INT64_MAX,
    FieldError,
    as_list,
    check_fields,
    child,
    integer,
    mapping,
    string,
    type_name,
)
from kubus.framework.config.args import DecodableArgs
from kubus.framework.config.catalog import PluginCatalog, PluginInfo, catalog_of
from kubus.framework.config.defaults import KUBE_IN_TREE_PLUGINS, REMOVED_PLUGINS
from kubus.framework.config.model import (
    API_VERSION,
    KIND,
    ClientConnection,
    ConfigError,
    PluginRef,
    ProfileConfig,
    SchedulerConfiguration,
)
from kubus.framework.config.multipoint import (
    check_registered,
    decode_plugins,
    default_plugin_sets,
    expand,
    merge_plugin_set,
    score_weights,
)
from kubus.framework.registry import ExtensionPoint

# --- YAML -----------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys, as kube's strict decoding does."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Hashable, JSONValue]:
    loader.flatten_mapping(node)
    seen: set[Hashable] = set()
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


def _parse_yaml(text: str, source: str | None) -> JSONValue:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"invalid YAML: {e.problem}", source=source, path=where) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}", source=source) from None


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _decode_other_args(args_type: type, m: JSONMapping, path: str) -> object:
    """Args of an out-of-tree plugin: `args_type.from_config(mapping)` if it has one (a
    ValueError or TypeError it raises becomes a ConfigError at `path`), else a dataclass built
    from the camelCase keys of its fields (lists become tuples)."""
    from_config = getattr(args_type, "from_config", None)
    if callable(from_config):
        try:
            return from_config(dict(m))
        except (ValueError, TypeError) as e:
            raise FieldError(path, str(e)) from None
    if not is_dataclass(args_type):
        raise FieldError(
            path,
            f"cannot decode args into {args_type.__qualname__}: give it a from_config(mapping) "
            "classmethod or make it a dataclass",
        )
    by_key = {_camel(f.name): f for f in fields(args_type) if f.init}
    check_fields(m, path, by_key)
    for key, f in by_key.items():
        if key not in m and f.default is MISSING and f.default_factory is MISSING:
            raise FieldError(child(path, key), "required")
    kwargs = {by_key[k].name: tuple(v) if isinstance(v, list) else v for k, v in m.items()}
    try:
        return args_type(**kwargs)
    except (ValueError, TypeError) as e:
        raise FieldError(path, str(e)) from None


def _decode_args(name: str, args_type: type | None, raw: object, path: str) -> object | None:
    """`pluginConfig[].args` of plugin `name` -> an instance of its args type, with kube's
    defaults and validation. `apiVersion`/`kind` may be given (kind `<name>Args`)."""
    m = dict(mapping(raw, path))
    api_version = m.pop("apiVersion", None)
    if api_version is not None and api_version != API_VERSION:
        raise FieldError(child(path, "apiVersion"), f'unsupported value "{api_version}" (want {API_VERSION})')
    kind = m.pop("kind", None)
    if kind is not None and kind != f"{name}Args":
        raise FieldError(child(path, "kind"), f'args for plugin {name} must be of kind {name}Args, not "{kind}"')
    if args_type is None:
        if m:
            raise FieldError(path, f'unknown field "{next(iter(m))}": plugin "{name}" takes no args')
        return None
    if isinstance(args_type, DecodableArgs):  # every in-tree args type decodes itself
        decoded: object = args_type.decode_config(m, path)
        return decoded
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
    pct = integer(v, path)
    if not 0 <= pct <= 100:
        raise FieldError(path, f"invalid value {pct}: not in valid range [0-100]")
    return pct


def _decode_profile(
    m: JSONMapping,
    name: str,
    catalog: Mapping[str, PluginInfo],
    ignored: list[str],
    ignored_prefix: str,
) -> ProfileConfig:
    pct = _percentage(m.get("percentageOfNodesToScore"), "percentageOfNodesToScore")
    if m.get("percentageOfPlacementsToScore") is not None:
        ignored.append(f"{ignored_prefix}.percentageOfPlacementsToScore")

    custom = decode_plugins(m.get("plugins"), "plugins")
    for key, custom_set in custom.items():
        for j, disabled in enumerate(custom_set.disabled):
            # kube drops an unknown name here in silence; a typo would leave the plugin running.
            # Names kube knows and kubus lacks (the volume plugins) stay accepted.
            if disabled != "*" and disabled not in KUBE_IN_TREE_PLUGINS and disabled not in REMOVED_PLUGINS:
                check_registered(disabled, f"plugins.{key}.disabled[{j}].name", catalog)
    defaults = default_plugin_sets()
    merged = {k: merge_plugin_set(defaults[k], custom[k]) for k in defaults}
    for pset in merged.values():
        for e in pset.enabled:
            check_registered(e.name, e.origin, catalog)
    expanded = expand(merged, catalog)

    sorts = expanded[ExtensionPoint.QUEUE_SORT]
    if len(sorts) != 1:
        got = f" ({', '.join(e.name for e in sorts)})" if sorts else ""
        raise FieldError("plugins", f"only one queue sort plugin required, but got {len(sorts)}{got}")
    if not expanded[ExtensionPoint.BIND]:
        raise FieldError("plugins", "at least one bind plugin is needed")
    plugins = {point: tuple(PluginRef(e.name) for e in entries) for point, entries in expanded.items()}
    plugins[ExtensionPoint.SCORE] = score_weights(merged, expanded[ExtensionPoint.SCORE])

    args: dict[str, object] = {}
    seen: dict[str, int] = {}
    for i, pc in enumerate(as_list(m.get("pluginConfig"), "pluginConfig")):
        path = f"pluginConfig[{i}]"
        pm = mapping(pc, path, allow_none=False)
        check_fields(pm, path, ("name", "args"))
        pname = string(pm.get("name", ""), child(path, "name"))
        if not pname:
            raise FieldError(child(path, "name"), "required")
        if pname in seen:
            raise FieldError(path, f'duplicate config for plugin "{pname}" (also pluginConfig[{seen[pname]}])')
        seen[pname] = i
        if pname not in catalog and pname in KUBE_IN_TREE_PLUGINS:
            ignored.append(f"{ignored_prefix}.pluginConfig[{i}] ({pname})")
            continue
        check_registered(pname, child(path, "name"), catalog)
        decoded = _decode_args(pname, catalog[pname].args_type, pm.get("args"), child(path, "args"))
        if decoded is not None:
            args[pname] = decoded
    for entries in expanded.values():
        for e in entries:
            args_type = catalog[e.name].args_type
            if e.name in args or args_type is None:
                continue
            try:  # kube appends default args for every enabled plugin that has an args type
                args[e.name] = _decode_args(e.name, args_type, None, "args")
            except FieldError as err:
                raise FieldError("pluginConfig", f'plugin "{e.name}" needs args: {err.path}: {err.problem}') from None

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
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfPlacementsToScore",
    "extenders",
    "delayCacheUntilActive",
)


def _read(path_or_text: str | os.PathLike[str] | JSONMapping, source: str | None) -> tuple[JSONValue, str | None]:
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
    path_or_text: str | os.PathLike[str] | JSONMapping,
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
    catalog = catalog_of(registry)
    raw, source = _read(path_or_text, source)
    try:
        return _load(raw, catalog, source)
    except FieldError as e:
        raise ConfigError(e.problem, source=source, path=e.path) from None


def default_config(registry: PluginCatalog) -> SchedulerConfiguration:
    """What an empty KubeSchedulerConfiguration becomes: one `default-scheduler` profile with
    the default plugins (DEFAULT_PLUGINS) and kube's global defaults. Raises ConfigError when
    the registry lacks a default plugin."""
    return load_config({"apiVersion": API_VERSION, "kind": KIND}, registry=registry, source="defaults")


def _load(raw: JSONValue, catalog: Mapping[str, PluginInfo], source: str | None) -> SchedulerConfiguration:
    if not isinstance(raw, Mapping):
        raise FieldError("", f"expected a {KIND} mapping, got {type_name(raw)}")
    m = mapping(raw, "")
    api_version = m.get("apiVersion")
    if api_version is None:
        raise FieldError("apiVersion", f"required (kubus reads {API_VERSION})")
    if api_version != API_VERSION:
        raise FieldError("apiVersion", f'"{api_version}" is not supported (kubus reads {API_VERSION})')
    kind = m.get("kind")
    if kind != KIND:
        raise FieldError("kind", "required" if kind is None else f'"{kind}" is not supported (want {KIND})')
    check_fields(m, "", _TOP_FIELDS)
    ignored = [k for k in _IGNORED_TOP_FIELDS if m.get(k) is not None]

    parallelism = 16 if m.get("parallelism") is None else integer(m["parallelism"], "parallelism")
    if parallelism <= 0:
        raise FieldError(
            "parallelism",
            f"invalid value {parallelism}: should be an integer value greater than zero",
        )
    pct = _percentage(m.get("percentageOfNodesToScore"), "percentageOfNodesToScore")
    initial = (
        1
        if m.get("podInitialBackoffSeconds") is None
        else integer(m["podInitialBackoffSeconds"], "podInitialBackoffSeconds", maximum=_INT64_MAX)
    )
    if initial <= 0:
        raise FieldError("podInitialBackoffSeconds", f"invalid value {initial}: must be greater than 0")
    maximum = (
        10
        if m.get("podMaxBackoffSeconds") is None
        else integer(m["podMaxBackoffSeconds"], "podMaxBackoffSeconds", maximum=_INT64_MAX)
    )
    if maximum < initial:
        raise FieldError(
            "podMaxBackoffSeconds",
            f"invalid value {maximum}: must be greater than or equal to PodInitialBackoffSeconds",
        )

    raw_profiles = as_list(m.get("profiles"), "profiles") or [{}]
    profiles: list[ProfileConfig] = []
    first_index: dict[str, int] = {}
    for i, rp in enumerate(raw_profiles):
        pm = mapping(rp, f"profiles[{i}]", allow_none=False)
        name_raw = pm.get("schedulerName")
        if name_raw is None and len(raw_profiles) == 1:
            name_raw = DEFAULT_SCHEDULER_NAME  # kube names a lone profile, and only a lone one
        scope = f"profiles[{i}]"
        try:
            if name_raw is None:
                raise FieldError("schedulerName", "required")
            name = string(name_raw, "schedulerName")
            if not name:
                raise FieldError("schedulerName", "required")
            if name in first_index:
                raise FieldError(
                    "schedulerName",
                    f'duplicate value "{name}" (also profiles[{first_index[name]}].schedulerName)',
                )
            first_index[name] = i
            scope = f'profile "{name}"'
            check_fields(pm, "", _PROFILE_FIELDS)
            profiles.append(_decode_profile(pm, name, catalog, ignored, f"profiles[{i}]"))
        except FieldError as e:
            raise ConfigError(e.problem, source=source, scope=scope, path=e.path) from None

    _check_common_queue_sort(profiles, source)
    try:
        connection = _client_connection(m.get("clientConnection"), ignored)
    except FieldError as e:
        raise ConfigError(e.problem, source=source, path=e.path) from None
    return SchedulerConfiguration(
        profiles=tuple(profiles),
        percentage_of_nodes_to_score=0 if pct is None else pct,
        pod_initial_backoff_seconds=initial,
        pod_max_backoff_seconds=maximum,
        parallelism=parallelism,
        client_connection=connection,
        ignored_fields=tuple(ignored),
    )


_CLIENT_CONNECTION_FIELDS = ("kubeconfig", "acceptContentTypes", "contentType", "qps", "burst")
_JSON = "application/json"


def _client_connection(raw: object, ignored: list[str]) -> ClientConnection:
    """``clientConnection``, validated as kube validates it (burst not negative); the content
    types other than JSON noted in ``ignored`` (kubus speaks JSON)."""
    m = mapping(raw, "clientConnection")
    if not m:
        return ClientConnection()
    check_fields(m, "clientConnection", _CLIENT_CONNECTION_FIELDS)
    qps_raw = m.get("qps")
    if qps_raw is not None and (isinstance(qps_raw, bool) or not isinstance(qps_raw, int | float)):
        raise FieldError("clientConnection.qps", f"expected a number, got {type_name(qps_raw)}")
    burst = None if m.get("burst") is None else integer(m["burst"], "clientConnection.burst")
    if burst is not None and burst < 0:
        raise FieldError("clientConnection.burst", f"invalid value {burst}: must be non-negative")
    kubeconfig = None if m.get("kubeconfig") is None else string(m["kubeconfig"], "clientConnection.kubeconfig")
    content_type = m.get("contentType")
    if content_type is not None and string(content_type, "clientConnection.contentType") not in ("", _JSON):
        ignored.append("clientConnection.contentType")
    accept = m.get("acceptContentTypes")
    if accept is not None and string(accept, "clientConnection.acceptContentTypes") not in ("", _JSON):
        ignored.append("clientConnection.acceptContentTypes")
    return ClientConnection(
        qps=None if qps_raw is None else float(qps_raw), burst=burst, kubeconfig=kubeconfig or None
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
