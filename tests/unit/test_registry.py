"""The plugin registry: specs from classes, registration, and out-of-tree entry points."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from kubus.framework.registry import (
    ENTRY_POINT_GROUP,
    ExtensionPoint,
    PluginSpec,
    Registry,
    RegistryError,
    extension_points_of,
    load_entry_point_plugins,
)

EP = ExtensionPoint


class FilterScore:
    name: ClassVar[str] = "FilterScore"

    def __init__(self, args: object = None, handle: object = None) -> None:
        self.args, self.handle = args, handle

    def pre_filter(self, state, pod, table):  # type: ignore[no-untyped-def]
        ...

    def filter(self, state, pod, view, rows):  # type: ignore[no-untyped-def]
        ...

    def score(self, state, pod, view, rows):  # type: ignore[no-untyped-def]
        ...


class Everything:
    name: ClassVar[str] = "Everything"

    def pre_enqueue(self, pod): ...  # type: ignore[no-untyped-def]
    def less(self, a, b): ...  # type: ignore[no-untyped-def]
    def pre_filter(self, state, pod, table): ...  # type: ignore[no-untyped-def]
    def filter(self, state, pod, view, rows): ...  # type: ignore[no-untyped-def]
    def post_filter(self, state, pod, statuses): ...  # type: ignore[no-untyped-def]
    def pre_score(self, state, pod, table): ...  # type: ignore[no-untyped-def]
    def score(self, state, pod, view, rows): ...  # type: ignore[no-untyped-def]
    def reserve(self, state, pod, node_info): ...  # type: ignore[no-untyped-def]
    def unreserve(self, state, pod, node_info): ...  # type: ignore[no-untyped-def]
    def permit(self, state, pod, node_name): ...  # type: ignore[no-untyped-def]
    def pre_bind(self, state, pod, node_name): ...  # type: ignore[no-untyped-def]
    def bind(self, state, pod, node_name): ...  # type: ignore[no-untyped-def]
    def post_bind(self, state, pod, node_name): ...  # type: ignore[no-untyped-def]


@dataclass(frozen=True, slots=True)
class FooArgs:
    level: int = 1


def test_extension_points_are_read_off_the_methods() -> None:
    assert extension_points_of(FilterScore) == {EP.PRE_FILTER, EP.FILTER, EP.SCORE}
    assert extension_points_of(Everything) == frozenset(ExtensionPoint)


def test_inherited_methods_count() -> None:
    class Child(FilterScore):
        name: ClassVar[str] = "Child"

        def bind(self, state, pod, node_name):  # type: ignore[no-untyped-def]
            ...

    assert PluginSpec.from_class(Child).extension_points == {
        EP.PRE_FILTER,
        EP.FILTER,
        EP.SCORE,
        EP.BIND,
    }


def test_reserve_needs_unreserve() -> None:
    class HalfReserve:
        name: ClassVar[str] = "HalfReserve"

        def reserve(self, state, pod, node_info):  # type: ignore[no-untyped-def]
            ...

    with pytest.raises(RegistryError) as e:
        PluginSpec.from_class(HalfReserve)
    assert str(e.value) == (
        "plugin class test_reserve_needs_unreserve.<locals>.HalfReserve defines reserve "
        "but not unreserve: a Reserve plugin needs both"
    )


def test_extension_point_names_are_kubes() -> None:
    assert [p.value for p in ExtensionPoint] == [
        "preEnqueue",
        "queueSort",
        "preFilter",
        "filter",
        "postFilter",
        "preScore",
        "score",
        "reserve",
        "permit",
        "preBind",
        "bind",
        "postBind",
    ]
    assert ExtensionPoint("filter") is EP.FILTER


def test_from_class_needs_a_name() -> None:
    class Nameless:
        def filter(self, state, pod, view, rows):  # type: ignore[no-untyped-def]
            ...

    with pytest.raises(RegistryError) as e:
        PluginSpec.from_class(Nameless)
    assert str(e.value) == ("plugin class test_from_class_needs_a_name.<locals>.Nameless has no `name: ClassVar[str]`")
    with pytest.raises(RegistryError, match="not a plugin class"):
        PluginSpec.from_class(FilterScore())  # type: ignore[arg-type]


def test_args_type_from_argument_or_class_attribute() -> None:
    assert PluginSpec.from_class(FilterScore).args_type is None
    assert PluginSpec.from_class(FilterScore, args_type=FooArgs).args_type is FooArgs

    class WithArgs(FilterScore):
        name: ClassVar[str] = "WithArgs"
        args_type: ClassVar[type] = FooArgs

    assert PluginSpec.from_class(WithArgs).args_type is FooArgs


def test_default_factory_passes_what_the_constructor_takes() -> None:
    class NoArgs:
        name: ClassVar[str] = "NoArgs"

        def bind(self, state, pod, node_name):  # type: ignore[no-untyped-def]
            ...

    class OnlyArgs(NoArgs):
        name: ClassVar[str] = "OnlyArgs"

        def __init__(self, args: object) -> None:
            self.args = args

    handle = object()
    full = PluginSpec.from_class(FilterScore).factory(FooArgs(2), handle)
    assert (full.args, full.handle) == (FooArgs(2), handle)
    assert isinstance(PluginSpec.from_class(NoArgs).factory(None, handle), NoArgs)
    assert PluginSpec.from_class(OnlyArgs).factory(FooArgs(3), handle).args == FooArgs(3)


def test_explicit_factory() -> None:
    made = []

    def factory(args: object, handle: object) -> FilterScore:
        made.append((args, handle))
        return FilterScore(args, handle)

    spec = PluginSpec.from_class(FilterScore, factory=factory)
    spec.factory("a", "h")
    assert made == [("a", "h")]


def test_spec_validation() -> None:
    with pytest.raises(RegistryError, match="non-empty string other than"):
        PluginSpec("*", FilterScore, frozenset())
    with pytest.raises(RegistryError, match="factory is not callable"):
        PluginSpec("X", None, frozenset())  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="not extension points"):
        PluginSpec("X", FilterScore, frozenset({"filter"}))  # type: ignore[arg-type]
    spec = PluginSpec("X", FilterScore, [EP.FILTER])  # type: ignore[arg-type]
    assert spec.extension_points == frozenset({EP.FILTER})


def test_register_get_names_contains() -> None:
    reg = Registry([FilterScore])
    spec = reg.register(Everything)
    assert spec.name == "Everything"
    assert reg.names() == ("FilterScore", "Everything")
    assert "FilterScore" in reg and "Nope" not in reg
    assert len(reg) == 2
    assert [s.name for s in reg] == ["FilterScore", "Everything"]
    assert reg.get("Everything") is spec
    with pytest.raises(KeyError) as e:
        reg.get("Nope")
    assert e.value.args[0] == 'plugin "Nope" is not registered (known: Everything, FilterScore)'


def test_duplicate_registration_is_an_error() -> None:
    reg = Registry([FilterScore])
    with pytest.raises(RegistryError) as e:
        reg.register(PluginSpec.from_class(FilterScore))
    assert str(e.value) == 'plugin "FilterScore" is already registered'


# --- out-of-tree plugins through entry points: a fake distribution on sys.path ---------------


def _fake_distribution(root: Path, dist: str, entry_points: dict[str, str], group: str, module: str, code: str) -> None:
    (root / f"{module}.py").write_text(code)
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")


_PLUGIN_MODULE = """
from dataclasses import dataclass
from typing import ClassVar

from kubus.framework.registry import ExtensionPoint, PluginSpec


@dataclass(frozen=True)
class ZoneArgs:
    zone: str = "a"


class ZonePreference:
    name: ClassVar[str] = "ZonePreference"
    args_type: ClassVar[type] = ZoneArgs

    def __init__(self, args, handle):
        self.args = args

    def score(self, state, pod, view, rows):
        return None


class Gate:
    name: ClassVar[str] = "Gate"

    def pre_enqueue(self, pod):
        return None


GATE_SPEC = PluginSpec(
    "GateSpec", lambda args, handle: Gate(), frozenset({ExtensionPoint.PRE_ENQUEUE})
)

NOT_A_PLUGIN = 42
"""


@pytest.fixture
def group() -> str:
    """A fresh entry point group per test, so installed distributions cannot interfere."""
    return f"kubus.plugins.test-{uuid.uuid4().hex}"


def test_load_entry_point_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str) -> None:
    module = f"kubus_fake_{uuid.uuid4().hex}"
    _fake_distribution(
        tmp_path,
        "kubus-fake-plugins",
        {"ZonePreference": f"{module}:ZonePreference", "GateSpec": f"{module}:GATE_SPEC"},
        group,
        module,
        _PLUGIN_MODULE,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry([FilterScore])
    loaded = load_entry_point_plugins(reg, group=group)
    assert [s.name for s in loaded] == ["GateSpec", "ZonePreference"]
    assert reg.names() == ("FilterScore", "GateSpec", "ZonePreference")
    zone = reg.get("ZonePreference")
    assert zone.extension_points == {EP.SCORE}
    assert zone.args_type is not None and zone.args_type.__name__ == "ZoneArgs"
    assert zone.factory(zone.args_type("b"), None).args.zone == "b"
    assert reg.get("GateSpec").extension_points == {EP.PRE_ENQUEUE}


def test_default_group_is_kubus_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ENTRY_POINT_GROUP == "kubus.plugins"
    module = f"kubus_fake_{uuid.uuid4().hex}"
    name = f"Gate{uuid.uuid4().hex[:8]}"
    code = _PLUGIN_MODULE.replace('"Gate"', f'"{name}"')
    _fake_distribution(tmp_path, "kubus-fake-default", {name: f"{module}:Gate"}, ENTRY_POINT_GROUP, module, code)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry()
    load_entry_point_plugins(reg)
    assert name in reg


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("{module}:Missing", "cannot be loaded: AttributeError: "),
        ("kubus_no_such_module_{uid}:Thing", "cannot be loaded: ModuleNotFoundError: "),
        ("{module}:NOT_A_PLUGIN", "must name a plugin class or a PluginSpec, not 42"),
        ("{module}:Gate", 'names the plugin "Gate"; the two names must match'),
    ],
)
def test_broken_entry_point_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str, target: str, problem: str
) -> None:
    uid = uuid.uuid4().hex
    module = f"kubus_fake_{uid}"
    target = target.format(module=module, uid=uid)
    _fake_distribution(tmp_path, "kubus-broken", {"Broken": target}, group, module, _PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError) as e:
        load_entry_point_plugins(Registry(), group=group)
    prefix = f'entry point "Broken = {target}" (group {group}, distribution kubus-broken): '
    assert str(e.value).startswith(prefix + problem)


def test_module_that_fails_on_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str) -> None:
    module = f"kubus_fake_{uuid.uuid4().hex}"
    _fake_distribution(tmp_path, "kubus-raises", {"Boom": f"{module}:Boom"}, group, module, "1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError) as e:
        load_entry_point_plugins(Registry(), group=group)
    assert str(e.value) == (
        f'entry point "Boom = {module}:Boom" (group {group}, distribution kubus-raises): '
        "cannot be loaded: ZeroDivisionError: division by zero"
    )
    assert isinstance(e.value.__cause__, ZeroDivisionError)


def test_entry_point_clashing_with_a_registered_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    module = f"kubus_fake_{uuid.uuid4().hex}"
    code = _PLUGIN_MODULE.replace('"ZonePreference"', '"FilterScore"')
    _fake_distribution(tmp_path, "kubus-clash", {"FilterScore": f"{module}:ZonePreference"}, group, module, code)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError) as e:
        load_entry_point_plugins(Registry([FilterScore]), group=group)
    assert str(e.value) == (
        f'entry point "FilterScore = {module}:ZonePreference" (group {group}, '
        'distribution kubus-clash): plugin "FilterScore" is already registered'
    )


def test_no_entry_points_registers_nothing(group: str) -> None:
    reg = Registry()
    assert load_entry_point_plugins(reg, group=group) == ()
    assert len(reg) == 0
