"""KubeSchedulerConfiguration loading: kube's defaults, merge, multiPoint expansion, validation,
plugin args. Cases marked "kube:" are ported from kube's own tests (default_plugins_test.go,
defaults_test.go, framework_test.go TestNewFrameworkMultiPointExpansion, validation_test.go,
validation_pluginargs_test.go, schedule_one_test.go)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from kubus.api.objects import (
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    SelectorOperator,
)
from kubus.framework.config import (
    DEFAULT_PLUGINS,
    KUBE_DEFAULT_PLUGINS,
    OMITTED_KUBE_DEFAULT_PLUGINS,
    ClientConnection,
    ConfigError,
    DefaultPreemptionArgs,
    ExtensionPoint,
    GPUArgs,
    GPUMode,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    PluginRef,
    PodTopologySpreadArgs,
    ProfileConfig,
    RequestedToCapacityRatioParam,
    ResourceSpec,
    SchedulerConfiguration,
    ScoringStrategy,
    ScoringStrategyType,
    UtilizationShapePoint,
    default_config,
    ignored_warnings,
    load_config,
    multipoint,
    num_feasible_nodes_to_find,
)
from kubus.framework.config.multipoint import Entry, PluginSet, merge_plugin_set
from kubus.framework.registry import PluginSpec, Registry
from kubus.plugins import in_tree_registry

EP = ExtensionPoint
HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "scheduler-config.yaml"


# --- dummy plugins with the extension points of kube's (and kubus's GPUFit) -----------------


class _Plugin:
    name: ClassVar[str]

    def __init__(self, args: object = None, handle: object = None) -> None:
        self.args = args


class _PreEnqueue:
    def pre_enqueue(self, pod: Any) -> None: ...


class _QueueSort:
    def less(self, a: Any, b: Any) -> bool:
        return False


class _PreFilter:
    def pre_filter(self, state: Any, pod: Any, table: Any) -> None: ...


class _Filter:
    def filter(self, state: Any, pod: Any, view: Any, rows: Any) -> None: ...


class _PreScore:
    def pre_score(self, state: Any, pod: Any, table: Any) -> None: ...


class _Score:
    def score(self, state: Any, pod: Any, view: Any, rows: Any) -> None: ...


class _Reserve:
    def reserve(self, state: Any, pod: Any, node_info: Any) -> None: ...

    def unreserve(self, state: Any, pod: Any, node_info: Any) -> None: ...


class _Bind:
    def bind(self, state: Any, pod: Any, node_name: str) -> None: ...


class SchedulingGates(_Plugin, _PreEnqueue):
    name = "SchedulingGates"


class PrioritySort(_Plugin, _QueueSort):
    name = "PrioritySort"


class NodeUnschedulable(_Plugin, _Filter):
    name = "NodeUnschedulable"


class NodeName(_Plugin, _Filter):
    name = "NodeName"


class TaintToleration(_Plugin, _Filter, _PreScore, _Score):
    name = "TaintToleration"


class NodeAffinityPlugin(_Plugin, _PreFilter, _Filter, _PreScore, _Score):
    name = "NodeAffinity"


class NodePorts(_Plugin, _PreFilter, _Filter):
    name = "NodePorts"


class NodeResourcesFit(_Plugin, _PreFilter, _Filter, _Score):
    name = "NodeResourcesFit"


class NodeResourcesBalancedAllocation(_Plugin, _PreScore, _Score):
    name = "NodeResourcesBalancedAllocation"


class ImageLocality(_Plugin, _Score):
    name = "ImageLocality"


class DefaultBinder(_Plugin, _Bind):
    name = "DefaultBinder"


class PodTopologySpread(_Plugin, _PreFilter, _Filter, _Score):
    name = "PodTopologySpread"

    def pre_score_feasible(self, state: Any, pod: Any, table: Any, rows: Any) -> None: ...


class InterPodAffinity(_Plugin, _PreFilter, _Filter, _PreScore, _Score):
    name = "InterPodAffinity"


class DefaultPreemption(_Plugin):
    name = "DefaultPreemption"

    def post_filter(self, state: Any, pod: Any, diagnosis: Any) -> None: ...


class GPUFit(_Plugin, _PreFilter, _Filter, _PreScore, _Score, _Reserve):
    name = "GPUFit"


class OtherSort(_Plugin, _QueueSort):
    name = "OtherSort"


class CustomFilter(_Plugin, _Filter):
    name = "CustomFilter"


class BarBinder(_Plugin, _Bind):
    name = "BarBinder"


@dataclass(frozen=True, slots=True)
class SortArgs:
    reverse: bool = False


class ArgsSort(_Plugin, _QueueSort):
    name = "ArgsSort"
    args_type: ClassVar[type] = SortArgs


@dataclass(frozen=True, slots=True)
class ZoneArgs:
    preferred_zone: str
    zone_weights: tuple[int, ...] = ()


class ZonePreference(_Plugin, _Score):
    name = "ZonePreference"
    args_type: ClassVar[type] = ZoneArgs


class RatioArgs:
    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> RatioArgs:
        ratio = raw.get("ratio", 0.5)
        if not 0 <= ratio <= 1:
            raise ValueError(f"ratio: invalid value {ratio}: not in [0, 1]")
        return cls(ratio)


class Ratio(_Plugin, _Score):
    name = "Ratio"
    args_type: ClassVar[type] = RatioArgs


KUBE_LIKE = [
    SchedulingGates,
    PrioritySort,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinityPlugin,
    NodePorts,
    NodeResourcesFit,
    PodTopologySpread,
    InterPodAffinity,
    DefaultPreemption,
    NodeResourcesBalancedAllocation,
    ImageLocality,
    DefaultBinder,
    GPUFit,
]
EXTRA = [OtherSort, CustomFilter, BarBinder, ArgsSort, ZonePreference, Ratio]
REGISTRY = Registry(KUBE_LIKE + EXTRA)
KNOWN = ", ".join(sorted(REGISTRY.names()))


def load(text: str, **kw: Any) -> SchedulerConfiguration:
    return load_config(HEADER + text, registry=kw.pop("registry", REGISTRY), **kw)


def error(text: str, **kw: Any) -> str:
    with pytest.raises(ConfigError) as e:
        load(text, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def lists(profile: ProfileConfig) -> dict[str, list[Any]]:
    """Non-empty extension points -> plugin names (score: (name, weight))."""
    out: dict[str, list[Any]] = {}
    for point, refs in profile.plugins.items():
        if refs:
            out[point.value] = [(r.name, r.weight) if point is EP.SCORE else r.name for r in refs]
    return out


DEFAULT_LISTS = {
    "preEnqueue": ["SchedulingGates"],
    "queueSort": ["PrioritySort"],
    "preFilter": ["NodeAffinity", "NodePorts", "NodeResourcesFit", "PodTopologySpread", "InterPodAffinity"],
    "filter": [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    ],
    "preScore": [
        "TaintToleration",
        "NodeAffinity",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
    ],
    "score": [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ],
    "postFilter": ["DefaultPreemption"],
    "bind": ["DefaultBinder"],
}


# --- defaults -------------------------------------------------------------------------------


def test_kube_default_plugin_list() -> None:
    # kube: TestApplyFeatureGates "Feature gates disabled" (current list, volume limits merged)
    assert [(p.name, p.weight) for p in KUBE_DEFAULT_PLUGINS] == [
        ("SchedulingGates", 0),
        ("PrioritySort", 0),
        ("NodeUnschedulable", 0),
        ("NodeName", 0),
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodePorts", 0),
        ("NodeResourcesFit", 1),
        ("VolumeRestrictions", 0),
        ("NodeVolumeLimits", 0),
        ("VolumeBinding", 0),
        ("VolumeZone", 0),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DefaultPreemption", 0),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
        ("DefaultBinder", 0),
    ]
    assert set(OMITTED_KUBE_DEFAULT_PLUGINS) == {
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
    }
    assert [p.name for p in DEFAULT_PLUGINS] == [
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "DefaultPreemption",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "DefaultBinder",
    ]


def test_default_config() -> None:
    # kube: TestSchedulerDefaults "empty config"
    cfg = default_config(REGISTRY)
    assert cfg.percentage_of_nodes_to_score == 0
    assert cfg.pod_initial_backoff_seconds == 1
    assert cfg.pod_max_backoff_seconds == 10
    assert cfg.parallelism == 16
    assert cfg.ignored_fields == ()
    (profile,) = cfg.profiles
    assert profile.scheduler_name == "default-scheduler"
    assert profile.percentage_of_nodes_to_score is None
    assert lists(profile) == DEFAULT_LISTS
    assert set(profile.plugins) == set(ExtensionPoint)
    assert [r.name for r in profile.enabled(EP.POST_FILTER)] == ["DefaultPreemption"]
    # kube appends default args for the enabled plugins that have an args type
    assert profile.plugin_args == {
        "InterPodAffinity": InterPodAffinityArgs(),
        "PodTopologySpread": PodTopologySpreadArgs(),
        "DefaultPreemption": DefaultPreemptionArgs(),
        "NodeAffinity": NodeAffinityArgs(),
        "NodeResourcesFit": NodeResourcesFitArgs(),
        "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocationArgs(),
    }
    fit = profile.plugin_args["NodeResourcesFit"]
    assert isinstance(fit, NodeResourcesFitArgs)
    assert fit.scoring_strategy == ScoringStrategy(
        ScoringStrategyType.LEAST_ALLOCATED, (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))
    )


def test_empty_config_equals_defaults() -> None:
    assert load("") == default_config(REGISTRY)
    # kube: "no scheduler name": a lone profile is named default-scheduler
    assert load("profiles: [{}]") == default_config(REGISTRY)


def test_registry_as_a_mapping_of_extension_points() -> None:
    catalog = {s.name: [p.value for p in s.extension_points] for s in REGISTRY}
    assert load_config(HEADER, registry=catalog) == default_config(REGISTRY)
    specs = {s.name: s for s in REGISTRY}
    assert load_config(HEADER, registry=specs) == default_config(REGISTRY)


def test_default_plugin_missing_from_the_registry() -> None:
    partial = Registry([c for c in KUBE_LIKE if c is not ImageLocality])
    with pytest.raises(ConfigError) as e:
        default_config(partial)
    known = ", ".join(sorted(partial.names()))
    assert str(e.value) == (
        'defaults: profile "default-scheduler": plugins.multiPoint (kubus default): '
        f'plugin "ImageLocality" is not registered (known: {known})'
    )
    # disabling it is enough
    cfg = load("profiles: [{plugins: {multiPoint: {disabled: [{name: ImageLocality}]}}}]", registry=partial)
    assert ("ImageLocality", 1) not in lists(cfg.profiles[0])["score"]


def test_disabling_plugins_kubus_lacks_still_loads() -> None:
    cfg = load(
        """
profiles:
  - plugins:
      multiPoint:
        disabled: [{name: VolumeBinding}]
      filter:
        disabled: [{name: VolumeRestrictions}, {name: NodeVolumeLimits}, {name: VolumeZone}]
"""
    )
    assert lists(cfg.profiles[0]) == DEFAULT_LISTS


def test_custom_binder_replaces_default() -> None:
    # kube: TestSchedulerDefaults "two profiles", second profile
    cfg = load(
        """
profiles:
  - schedulerName: default-scheduler
  - schedulerName: custom-scheduler
    plugins:
      bind:
        enabled: [{name: BarBinder}]
        disabled: [{name: DefaultBinder}]
"""
    )
    assert lists(cfg.profile("custom-scheduler"))["bind"] == ["BarBinder"]
    assert lists(cfg.profile("default-scheduler")) == DEFAULT_LISTS
    assert cfg.scheduler_names == ("default-scheduler", "custom-scheduler")


def test_profile_lookup() -> None:
    cfg = default_config(REGISTRY)
    with pytest.raises(KeyError) as e:
        cfg.profile("gpu")
    assert e.value.args[0] == 'no profile with schedulerName "gpu" (profiles: default-scheduler)'


# --- mergePlugins (kube: TestMergePlugins) --------------------------------------------------


def _set(enabled: list[Any] = (), disabled: list[str] = ()) -> PluginSet:  # type: ignore[assignment]
    return PluginSet(tuple(Entry(*e) if isinstance(e, tuple) else Entry(e) for e in enabled), tuple(disabled))


def _names(pset: PluginSet) -> list[Any]:
    return [(e.name, e.weight) if e.weight else e.name for e in pset.enabled]


@pytest.mark.parametrize(
    ("default", "custom", "enabled", "disabled"),
    [
        pytest.param(
            _set(["D1", "D2"]),
            _set(["Custom"]),
            ["D1", "D2", "Custom"],
            [],
            id="AppendCustomPlugin",
        ),
        pytest.param(
            _set(["D1", "D2"]),
            _set(["Custom", "D2"], ["D2"]),
            ["D1", "Custom", "D2"],
            ["D2"],
            id="InsertAfterDefaultPlugins2",
        ),
        pytest.param(
            _set(["D1", "D2"]),
            _set(["Custom", "D1", "D2"], ["*"]),
            ["Custom", "D1", "D2"],
            ["*"],
            id="InsertBeforeAllPlugins",
        ),
        pytest.param(
            _set(["D1", "D2"]),
            _set(["D2", "D1"], ["*"]),
            ["D2", "D1"],
            ["*"],
            id="ReorderDefaultPlugins",
        ),
        pytest.param(_set(["D1", "D2"]), _set(), ["D1", "D2"], [], id="ApplyNilCustomPlugin"),
        pytest.param(
            _set(["P1", "P2", "P3"]),
            _set([("P1", 2), ("P3", 3)]),
            [("P1", 2), "P2", ("P3", 3)],
            [],
            id="CustomPluginOverrideDefaultPlugin",
        ),
        pytest.param(
            _set(["P1", "P2", "P3"]),
            _set([("P2", 2), ("P1", 1)]),
            [("P1", 1), ("P2", 2), "P3"],
            [],
            id="OrderPreserveAfterOverride",
        ),
        pytest.param(
            _set(["P1", "P2", "P3"]),
            _set(["P1", ("P2", 2), "P3", ("P2", 4)]),
            ["P1", ("P2", 4), "P3", ("P2", 2)],
            [],
            id="RepeatedCustomPlugin",
        ),
        pytest.param(
            _set(["D1", "D2"]),
            _set(["Custom", "Custom2"], ["D2"]),
            ["D1", "Custom", "Custom2"],
            ["D2"],
            id="Append disabled Multipoint plugins",
        ),
        pytest.param(
            _set(["Default"]),
            _set([("Default", 5)]),
            [("Default", 5)],
            [],
            id="override default MultiPoint plugins with custom value",
        ),
        pytest.param(
            _set(["Default"], ["D2"]),
            _set(["Custom"]),
            ["Default", "Custom"],
            ["D2"],
            id="disabled MultiPoint plugin in default set",
        ),
        pytest.param(
            _set(["Default"]),
            _set([], ["Default"]),
            [],
            ["Default"],
            id="multipoint with only disabled gets merged",
        ),
    ],
)
def test_merge_plugin_set(default: PluginSet, custom: PluginSet, enabled: list[Any], disabled: list[str]) -> None:
    merged = merge_plugin_set(default, custom)
    assert _names(merged) == enabled
    assert list(merged.disabled) == disabled


# --- multiPoint expansion (kube: TestNewFrameworkMultiPointExpansion) -----------------------

ALL_BUT_PRE_ENQUEUE = [p for p in ExtensionPoint if p is not EP.PRE_ENQUEUE]
EXPANSION_CATALOG = {
    "TestPlugin": ALL_BUT_PRE_ENQUEUE,  # kube's TestPlugin implements every point but PreEnqueue
    "ScorePlugin1": [EP.PRE_SCORE, EP.SCORE],
    "ScorePlugin2": [EP.SCORE],
    "ScoreWithNormalizePlugin1": [EP.SCORE],
    "QueueSortPlugin": [EP.QUEUE_SORT],
    "BindPlugin": [EP.BIND],
}


def _all_points(weight: int = 1) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {p.value: ["TestPlugin"] for p in ALL_BUT_PRE_ENQUEUE}
    out["score"] = [("TestPlugin", weight)]
    return out


def expand(plugins: str) -> dict[str, list[Any]]:
    """Load one profile whose multiPoint drops kubus's defaults ("*"), like kube's raw test
    profiles, with the plugins of kube's framework test."""
    cfg = load_config(
        HEADER + "profiles:\n  - plugins:\n" + "\n".join("      " + x for x in plugins.split("\n")),
        registry=EXPANSION_CATALOG,
    )
    return lists(cfg.profiles[0])


TP_SP1 = "multiPoint: {enabled: [{name: TestPlugin}, {name: ScorePlugin1}], disabled: [{name: '*'}]}"


def test_plugin_expansion() -> None:
    got = expand("multiPoint: {enabled: [{name: TestPlugin, weight: 5}], disabled: [{name: '*'}]}")
    assert got == _all_points(5)


def test_disable_multipoint_plugin_at_some_extension_points() -> None:
    got = expand(
        "multiPoint: {enabled: [{name: TestPlugin}], disabled: [{name: '*'}]}\n"
        "preScore: {disabled: [{name: TestPlugin}]}\n"
        "score: {disabled: [{name: TestPlugin}]}"
    )
    want = _all_points()
    del want["preScore"], want["score"]
    assert got == want


def test_multiple_multipoint_plugins() -> None:
    got = expand("multiPoint: {enabled: [{name: TestPlugin}, {name: ScorePlugin1}], disabled: [{name: '*'}]}")
    want = _all_points()
    want["preScore"] = ["TestPlugin", "ScorePlugin1"]
    want["score"] = [("TestPlugin", 1), ("ScorePlugin1", 1)]
    assert got == want


def test_disable_multipoint_extension() -> None:
    got = expand(TP_SP1 + "\npreScore: {disabled: [{name: '*'}]}")
    want = _all_points()
    del want["preScore"]
    want["score"] = [("TestPlugin", 1), ("ScorePlugin1", 1)]
    assert got == want


def test_reorder_multipoint_plugins_specified_extension_takes_precedence() -> None:
    got = expand(
        "multiPoint:\n"
        "  enabled: [{name: ScoreWithNormalizePlugin1}, {name: TestPlugin}, {name: ScorePlugin1}]\n"
        "  disabled: [{name: '*'}]\n"
        "score: {enabled: [{name: ScorePlugin1}, {name: TestPlugin}]}"
    )
    want = _all_points()
    want["preScore"] = ["TestPlugin", "ScorePlugin1"]
    want["score"] = [("ScorePlugin1", 1), ("TestPlugin", 1), ("ScoreWithNormalizePlugin1", 1)]
    assert got == want


def test_reorder_only_when_the_plugin_is_in_multipoint() -> None:
    got = expand(
        TP_SP1 + "\nscore:\n  enabled: [{name: ScoreWithNormalizePlugin1}, {name: ScorePlugin1}, {name: TestPlugin}]"
    )
    want = _all_points()
    want["preScore"] = ["TestPlugin", "ScorePlugin1"]
    want["score"] = [("ScorePlugin1", 1), ("TestPlugin", 1), ("ScoreWithNormalizePlugin1", 1)]
    assert got == want


def test_override_multipoint_plugin_weights() -> None:
    got = expand(TP_SP1 + "\nscore: {enabled: [{name: ScorePlugin1, weight: 5}, {name: TestPlugin, weight: 3}]}")
    want = _all_points()
    want["preScore"] = ["TestPlugin", "ScorePlugin1"]
    want["score"] = [("ScorePlugin1", 5), ("TestPlugin", 3)]
    assert got == want


def test_disable_and_enable_multipoint_plugins_with_star() -> None:
    got = expand(
        "multiPoint:\n"
        "  enabled: [{name: QueueSortPlugin}, {name: BindPlugin}, {name: ScorePlugin1}]\n"
        "  disabled: [{name: '*'}]"
    )
    assert got == {
        "queueSort": ["QueueSortPlugin"],
        "preScore": ["ScorePlugin1"],
        "score": [("ScorePlugin1", 1)],
        "bind": ["BindPlugin"],
    }


def test_disable_and_enable_multipoint_plugin_by_name() -> None:
    # enabled wins over disabled within one set
    got = expand(
        "multiPoint:\n"
        "  enabled: [{name: BindPlugin}, {name: QueueSortPlugin}, {name: ScorePlugin1}]\n"
        "  disabled: [{name: ScorePlugin1}, {name: '*'}]"
    )
    assert got == {
        "queueSort": ["QueueSortPlugin"],
        "preScore": ["ScorePlugin1"],
        "score": [("ScorePlugin1", 1)],
        "bind": ["BindPlugin"],
    }


def test_multipoint_plugin_registered_twice() -> None:
    with pytest.raises(ConfigError) as e:
        expand("multiPoint: {enabled: [{name: TestPlugin}, {name: TestPlugin}], disabled: [{name: '*'}]}")
    assert str(e.value) == (
        'profile "default-scheduler": plugins.multiPoint.enabled[1]: '
        'plugin "TestPlugin" is enabled twice through multiPoint'
    )


def test_override_weights_and_avoid_loading_twice() -> None:
    got = expand(
        TP_SP1 + "\n"
        "score:\n"
        "  enabled:\n"
        "    [{name: ScorePlugin1, weight: 5}, {name: ScorePlugin2, weight: 5},"
        " {name: TestPlugin, weight: 3}]"
    )
    want = _all_points()
    want["preScore"] = ["TestPlugin", "ScorePlugin1"]
    want["score"] = [("ScorePlugin1", 5), ("TestPlugin", 3), ("ScorePlugin2", 5)]
    assert got == want


# --- merging with kubus's defaults ----------------------------------------------------------


def test_specific_score_entry_goes_first_with_its_weight() -> None:
    cfg = load("profiles: [{plugins: {score: {enabled: [{name: ImageLocality, weight: 5}]}}}]")
    assert lists(cfg.profiles[0])["score"] == [
        ("ImageLocality", 5),
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
    ]


def test_specific_score_entry_without_weight_overrides_multipoint_weight() -> None:
    # kube's getScoreWeights takes the first entry, score.enabled before multiPoint.enabled
    cfg = load("profiles: [{plugins: {score: {enabled: [{name: NodeAffinity}]}}}]")
    assert lists(cfg.profiles[0])["score"][:2] == [("NodeAffinity", 1), ("TaintToleration", 3)]


def test_multipoint_reconfigures_default_in_place() -> None:
    cfg = load("profiles: [{plugins: {multiPoint: {enabled: [{name: TaintToleration, weight: 7}]}}}]")
    assert lists(cfg.profiles[0])["score"][0] == ("TaintToleration", 7)
    assert lists(cfg.profiles[0])["filter"] == DEFAULT_LISTS["filter"]


def test_disable_a_default_at_one_extension_point() -> None:
    cfg = load("profiles: [{plugins: {preScore: {disabled: [{name: TaintToleration}]}}}]")
    got = lists(cfg.profiles[0])
    assert got["preScore"] == [
        "NodeAffinity",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
    ]
    assert got["score"] == DEFAULT_LISTS["score"]


def test_disable_all_scores_and_enable_one() -> None:
    cfg = load(
        "profiles: [{plugins: {score: {enabled: [{name: NodeResourcesFit, weight: 4}], disabled: [{name: '*'}]}}}]"
    )
    got = lists(cfg.profiles[0])
    assert got["score"] == [("NodeResourcesFit", 4)]
    assert got["preScore"] == DEFAULT_LISTS["preScore"]


def test_append_custom_filter_after_defaults() -> None:
    cfg = load("profiles: [{plugins: {filter: {enabled: [{name: CustomFilter}]}}}]")
    assert lists(cfg.profiles[0])["filter"] == DEFAULT_LISTS["filter"] + ["CustomFilter"]


def test_enable_gpufit_through_multipoint() -> None:
    cfg = load("profiles: [{plugins: {multiPoint: {enabled: [{name: GPUFit, weight: 5}]}}}]")
    got = lists(cfg.profiles[0])
    assert got["preFilter"][-1] == "GPUFit"
    assert got["filter"][-1] == "GPUFit"
    assert got["preScore"][-1] == "GPUFit"
    assert got["score"][-1] == ("GPUFit", 5)
    assert got["reserve"] == ["GPUFit"]
    assert cfg.profiles[0].plugin_args["GPUFit"] == GPUArgs(GPUMode.BINPACK)


def test_replace_queue_sort() -> None:
    cfg = load("profiles: [{plugins: {queueSort: {enabled: [{name: OtherSort}], disabled: [{name: '*'}]}}}]")
    assert lists(cfg.profiles[0])["queueSort"] == ["OtherSort"]


# --- plugin errors --------------------------------------------------------------------------


def test_enabling_an_unregistered_plugin() -> None:
    msg = error("profiles: [{schedulerName: x, plugins: {filter: {enabled: [{name: Foo}]}}}]")
    assert msg == (f'profile "x": plugins.filter.enabled[0]: plugin "Foo" is not registered (known: {KNOWN})')


def test_enabling_a_kube_plugin_kubus_lacks() -> None:
    msg = error("profiles: [{plugins: {multiPoint: {enabled: [{name: VolumeBinding}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.multiPoint.enabled[0]: plugin "VolumeBinding" '
        f"is not registered: kubus does not model volumes (known: {KNOWN})"
    )


def test_enabling_a_removed_plugin() -> None:
    # kube: bad-removed-plugins
    msg = error("profiles: [{plugins: {score: {enabled: [{name: EBSLimits, weight: 2}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.score.enabled[0]: '
        'plugin "EBSLimits" was removed in kubescheduler.config.k8s.io/v1'
    )


def test_plugin_enabled_where_it_does_not_plug_in() -> None:
    msg = error("profiles: [{plugins: {bind: {enabled: [{name: NodeName}]}}}]")
    assert msg == ('profile "default-scheduler": plugins.bind.enabled[0]: plugin "NodeName" does not extend bind')


def test_plugin_enabled_twice_at_one_point() -> None:
    msg = error("profiles: [{plugins: {filter: {enabled: [{name: CustomFilter}, {name: CustomFilter}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.filter.enabled[1]: plugin "CustomFilter" is enabled twice at filter'
    )


def test_repeated_custom_plugin_is_rejected() -> None:
    # kube: RepeatedCustomPlugin merges into a duplicate that framework creation rejects
    msg = error("profiles: [{plugins: {multiPoint: {enabled: [{name: GPUFit}, {name: GPUFit, weight: 4}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.multiPoint.enabled[1]: '
        'plugin "GPUFit" is enabled twice through multiPoint'
    )


def test_two_queue_sorts() -> None:
    msg = error("profiles: [{plugins: {queueSort: {enabled: [{name: OtherSort}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins: only one queue sort plugin required, but got 2 (PrioritySort, OtherSort)'
    )


def test_no_queue_sort() -> None:
    msg = error("profiles: [{plugins: {queueSort: {disabled: [{name: '*'}]}}}]")
    assert msg == 'profile "default-scheduler": plugins: only one queue sort plugin required, but got 0'


def test_no_bind_plugin() -> None:
    msg = error("profiles: [{plugins: {bind: {disabled: [{name: DefaultBinder}]}}}]")
    assert msg == 'profile "default-scheduler": plugins: at least one bind plugin is needed'


def test_negative_weight() -> None:
    msg = error("profiles: [{plugins: {score: {enabled: [{name: ImageLocality, weight: -1}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.score.enabled[0].weight: invalid value -1: '
        "must not be negative (0 or unset means the default, 1)"
    )


def test_weight_must_fit_int32() -> None:
    msg = error("profiles: [{plugins: {score: {enabled: [{name: ImageLocality, weight: 2147483648}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.score.enabled[0].weight: invalid value 2147483648: '
        "out of range for a 32-bit integer"
    )


def test_score_weight_overflow(monkeypatch: pytest.MonkeyPatch) -> None:
    # kube checks weight * MaxNodeScore against MaxTotalScore; shrink the bound to reach it
    monkeypatch.setattr(multipoint, "MAX_TOTAL_SCORE", 1200)
    assert load("")  # 3+2+1+2+2+1+1 = 12 -> 1200: exactly fits
    msg = error("profiles: [{plugins: {score: {enabled: [{name: ImageLocality, weight: 2}]}}}]")
    assert msg == 'profile "default-scheduler": plugins.score: total score of Score plugins could overflow'


def test_plugin_entry_fields_are_strict() -> None:
    msg = error("profiles: [{plugins: {filter: {enabled: [{name: NodeName, wieght: 1}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.filter.enabled[0]: unknown field "wieght" (known fields: name, weight)'
    )
    msg = error("profiles: [{plugins: {filter: {enabled: [{weight: 1}]}}}]")
    assert msg == 'profile "default-scheduler": plugins.filter.enabled[0].name: required'
    msg = error("profiles: [{plugins: {filters: {}}}]")
    assert msg == (
        'profile "default-scheduler": plugins: unknown field "filters" (known fields: multiPoint, '
        "preEnqueue, queueSort, preFilter, filter, postFilter, preScore, score, reserve, permit, "
        "preBind, bind, postBind, placementGenerate, placementScore, placementFeasible, "
        "podGroupPostFilter)"
    )


def test_placement_extension_points() -> None:
    cfg = load("profiles: [{plugins: {placementScore: {disabled: [{name: '*'}]}}}]")
    assert lists(cfg.profiles[0]) == DEFAULT_LISTS
    msg = error("profiles: [{plugins: {placementScore: {enabled: [{name: X}]}}}]")
    assert msg == (
        'profile "default-scheduler": plugins.placementScore.enabled[0]: '
        "kubus does not support the placementScore extension point (kube's workload scheduling)"
    )


# --- top level ------------------------------------------------------------------------------


def test_api_version_and_kind() -> None:
    reg = REGISTRY
    with pytest.raises(ConfigError) as e:
        load_config("kind: KubeSchedulerConfiguration\n", registry=reg)
    assert str(e.value) == "apiVersion: required (kubus reads kubescheduler.config.k8s.io/v1)"
    with pytest.raises(ConfigError) as e:
        load_config(
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            registry=reg,
        )
    assert str(e.value) == (
        'apiVersion: "kubescheduler.config.k8s.io/v1beta3" is not supported '
        "(kubus reads kubescheduler.config.k8s.io/v1)"
    )
    with pytest.raises(ConfigError) as e:
        load_config("apiVersion: kubescheduler.config.k8s.io/v1\nkind: Pod\n", registry=reg)
    assert str(e.value) == 'kind: "Pod" is not supported (want KubeSchedulerConfiguration)'
    with pytest.raises(ConfigError) as e:
        load_config("apiVersion: kubescheduler.config.k8s.io/v1\n", registry=reg)
    assert str(e.value) == "kind: required"
    with pytest.raises(ConfigError) as e:
        load_config("- a\n- b\n", registry=reg)
    assert str(e.value) == "expected a KubeSchedulerConfiguration mapping, got list"


def test_unknown_top_level_field() -> None:
    assert error("healthzBindAddress: 0.0.0.0:10251") == (
        'unknown field "healthzBindAddress" (known fields: apiVersion, kind, parallelism, '
        "leaderElection, clientConnection, enableProfiling, enableContentionProfiling, "
        "percentageOfNodesToScore, percentageOfPlacementsToScore, podInitialBackoffSeconds, "
        "podMaxBackoffSeconds, profiles, extenders, delayCacheUntilActive)"
    )


def test_unknown_profile_field() -> None:
    assert error("profiles: [{schedulerName: gpu, plugin: {}}]") == (
        'profile "gpu": unknown field "plugin" (known fields: schedulerName, '
        "percentageOfNodesToScore, percentageOfPlacementsToScore, plugins, pluginConfig)"
    )


def test_fields_kubus_ignores() -> None:
    cfg = load(
        """
leaderElection: {leaderElect: true, resourceLock: leases}
clientConnection: {kubeconfig: /etc/kubernetes/scheduler.conf, qps: 50}
enableProfiling: true
delayCacheUntilActive: true
extenders:
  - urlPrefix: http://127.0.0.1:8888/
    filterVerb: filter
profiles:
  - schedulerName: default-scheduler
    pluginConfig:
      - name: VolumeBinding
        args: {bindTimeoutSeconds: 600}
      - name: VolumeZone
        args: {}
"""
    )
    assert cfg.ignored_fields == (
        "leaderElection",
        "enableProfiling",
        "extenders",
        "delayCacheUntilActive",
        "profiles[0].pluginConfig[0] (VolumeBinding)",
        "profiles[0].pluginConfig[1] (VolumeZone)",
    )
    assert lists(cfg.profiles[0]) == DEFAULT_LISTS
    warnings = ignored_warnings(cfg)
    assert warnings[0] == (
        "config field leaderElection is not honoured: kubus elects each profile's active cycle through its own "
        "lease in Redis"
    )
    assert (
        warnings[-1]
        == "config field profiles[0].pluginConfig[1] (VolumeZone) is not honoured: a plugin kubus does not have"
    )
    assert len(warnings) == len(cfg.ignored_fields)


def test_client_connection_paces_the_api_clients_as_kube_reads_it() -> None:
    """qps, burst and kubeconfig are honoured (the watcher's and binders' pace, their
    kubeconfig); a content type other than JSON is accepted and said to be ignored; a negative
    burst is refused as kube refuses it."""
    cfg = load("clientConnection: {kubeconfig: /etc/kubernetes/scheduler.conf, qps: 5000, burst: 5000}")
    assert cfg.client_connection == ClientConnection(
        qps=5000.0, burst=5000, kubeconfig="/etc/kubernetes/scheduler.conf"
    )
    assert cfg.ignored_fields == ()
    assert load("parallelism: 16").client_connection == ClientConnection()
    # The pace a part uses: its flags, else the configuration, else its own default.
    assert cfg.client_connection.pace(None, None, default_qps=200, default_burst=400) == (5000.0, 5000)
    assert cfg.client_connection.pace(10.0, None, default_qps=200, default_burst=400) == (10.0, 5000)
    assert ClientConnection().pace(None, None, default_qps=200, default_burst=400) == (200, 400)
    assert ClientConnection(qps=-1).pace(None, None, default_qps=200, default_burst=400) == (0.0, 400)
    proto = load("clientConnection: {contentType: application/vnd.kubernetes.protobuf, qps: -1}")
    assert proto.client_connection.qps == -1.0
    assert proto.ignored_fields == ("clientConnection.contentType",)
    assert ignored_warnings(proto) == [
        "config field clientConnection.contentType is not honoured: kubus speaks JSON to the Kubernetes API"
    ]
    assert error("clientConnection: {burst: -1}") == "clientConnection.burst: invalid value -1: must be non-negative"
    assert error("clientConnection: {qps: fast}").startswith("clientConnection.qps: expected a number")
    assert error("clientConnection: {qbs: 1}").startswith('clientConnection: unknown field "qbs"')


def test_duplicate_yaml_field() -> None:
    msg = error("kind: KubeSchedulerConfiguration\n", source="sched.yaml")
    assert msg == 'sched.yaml: line 3, column 1: invalid YAML: duplicate field "kind"'


def test_invalid_yaml() -> None:
    msg = error("profiles: [\n", source="sched.yaml")
    assert msg.startswith("sched.yaml: line 4, column 1: invalid YAML: ")


def test_global_settings() -> None:
    cfg = load("parallelism: 8\npercentageOfNodesToScore: 35\npodInitialBackoffSeconds: 2\npodMaxBackoffSeconds: 2\n")
    assert (
        cfg.parallelism,
        cfg.percentage_of_nodes_to_score,
        cfg.pod_initial_backoff_seconds,
        cfg.pod_max_backoff_seconds,
    ) == (8, 35, 2, 2)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # kube: bad-parallelism-invalid-value
        (
            "parallelism: 0",
            "parallelism: invalid value 0: should be an integer value greater than zero",
        ),
        ("parallelism: '16'", "parallelism: expected an integer, got string '16'"),
        ("parallelism: true", "parallelism: expected an integer, got boolean True"),
        # kube: bad-percentage-of-nodes-to-score
        (
            "percentageOfNodesToScore: 101",
            "percentageOfNodesToScore: invalid value 101: not in valid range [0-100]",
        ),
        (
            "percentageOfNodesToScore: -1",
            "percentageOfNodesToScore: invalid value -1: not in valid range [0-100]",
        ),
        (
            "podInitialBackoffSeconds: 0",
            "podInitialBackoffSeconds: invalid value 0: must be greater than 0",
        ),
        (
            "podInitialBackoffSeconds: 20",
            "podMaxBackoffSeconds: invalid value 10: must be greater than or equal to PodInitialBackoffSeconds",
        ),
        (
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4",
            "podMaxBackoffSeconds: invalid value 4: must be greater than or equal to PodInitialBackoffSeconds",
        ),
        ("profiles: {}", "profiles: expected a list, got mapping"),
        ("profiles: [null]", "profiles[0]: expected a mapping, got null"),
    ],
)
def test_global_validation(text: str, want: str) -> None:
    assert error(text) == want


def test_profile_percentage() -> None:
    cfg = load("profiles: [{percentageOfNodesToScore: 50}]")
    assert cfg.profiles[0].percentage_of_nodes_to_score == 50
    assert error("profiles: [{schedulerName: a, percentageOfNodesToScore: 101}]") == (
        'profile "a": percentageOfNodesToScore: invalid value 101: not in valid range [0-100]'
    )


def test_scheduler_names() -> None:
    # kube: scheduler-name-not-set, repeated-scheduler-name
    assert error("profiles: [{schedulerName: a}, {}]") == "profiles[1]: schedulerName: required"
    assert error("profiles: [{}, {schedulerName: a}]") == "profiles[0]: schedulerName: required"
    assert error("profiles: [{schedulerName: ''}]") == "profiles[0]: schedulerName: required"
    assert error("profiles: [{schedulerName: 7}]") == ("profiles[0]: schedulerName: expected a string, got number")
    assert error("profiles: [{schedulerName: a}, {schedulerName: b}, {schedulerName: a}]") == (
        'profiles[2]: schedulerName: duplicate value "a" (also profiles[0].schedulerName)'
    )


def test_queue_sort_must_be_common() -> None:
    # kube: different-queue-sort, one-empty-queue-sort
    other = "{queueSort: {enabled: [{name: OtherSort}], disabled: [{name: '*'}]}}"
    assert error(f"profiles: [{{schedulerName: a}}, {{schedulerName: b, plugins: {other}}}]") == (
        'profile "b": plugins.queueSort: queue sort must be the same for all profiles: '
        '"OtherSort" here, "PrioritySort" in profile "a"'
    )
    cfg = load(f"profiles: [{{schedulerName: a, plugins: {other}}}, {{schedulerName: b, plugins: {other}}}]")
    assert [lists(p)["queueSort"] for p in cfg.profiles] == [["OtherSort"], ["OtherSort"]]


def test_queue_sort_args_must_be_common() -> None:
    # kube: mismatch-queue-sort (args)
    sort = "{queueSort: {enabled: [{name: ArgsSort}], disabled: [{name: '*'}]}}"
    text = (
        f"profiles:\n"
        f"  - {{schedulerName: a, plugins: {sort}}}\n"
        f"  - {{schedulerName: b, plugins: {sort},"
        f" pluginConfig: [{{name: ArgsSort, args: {{reverse: true}}}}]}}\n"
    )
    assert error(text) == (
        'profile "b": pluginConfig: args of queue sort plugin "ArgsSort" must be the same for all '
        'profiles (they differ from profile "a")'
    )
    same = text.replace(
        "plugins: " + sort + "}",
        "plugins: " + sort + ", pluginConfig: [{name: ArgsSort, args: {reverse: true}}]}",
        1,
    )
    cfg = load(same)
    assert cfg.profile("a").plugin_args["ArgsSort"] == SortArgs(reverse=True)


# --- pluginConfig ---------------------------------------------------------------------------


def test_duplicate_plugin_config() -> None:
    # kube: duplicated-plugin-config
    assert error("profiles: [{pluginConfig: [{name: NodeResourcesFit}, {name: NodeResourcesFit}]}]") == (
        'profile "default-scheduler": pluginConfig[1]: duplicate config for plugin '
        '"NodeResourcesFit" (also pluginConfig[0])'
    )


def test_plugin_config_for_unknown_plugin() -> None:
    assert error("profiles: [{pluginConfig: [{name: FooPlugin}]}]") == (
        f'profile "default-scheduler": pluginConfig[0].name: plugin "FooPlugin" is not registered (known: {KNOWN})'
    )
    assert error("profiles: [{pluginConfig: [{name: GCEPDLimits}]}]") == (
        'profile "default-scheduler": pluginConfig[0].name: plugin "GCEPDLimits" was removed in '
        "kubescheduler.config.k8s.io/v1"
    )


def test_plugin_config_kind_must_match() -> None:
    # kube: invalid-plugin-args (args of another plugin's type)
    text = "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: {kind: NodeAffinityArgs}}]}]"
    assert error(text) == (
        'profile "default-scheduler": pluginConfig[0].args.kind: args for plugin NodeResourcesFit '
        'must be of kind NodeResourcesFitArgs, not "NodeAffinityArgs"'
    )
    ok = (
        "profiles: [{pluginConfig: [{name: NodeResourcesFit, args:"
        " {apiVersion: kubescheduler.config.k8s.io/v1, kind: NodeResourcesFitArgs}}]}]"
    )
    assert load(ok) == default_config(REGISTRY)


def test_plugin_without_args_type_takes_no_args() -> None:
    assert load("profiles: [{pluginConfig: [{name: NodeName, args: {}}]}]") == default_config(REGISTRY)
    assert error("profiles: [{pluginConfig: [{name: NodeName, args: {x: 1}}]}]") == (
        'profile "default-scheduler": pluginConfig[0].args: unknown field "x": plugin "NodeName" takes no args'
    )


def test_every_in_tree_plugin_refuses_an_unknown_args_field_naming_it() -> None:
    registry = in_tree_registry()
    for spec in registry:
        text = f"profiles: [{{pluginConfig: [{{name: {spec.name}, args: {{bogusField: 1}}}}]}}]"
        with pytest.raises(ConfigError) as err:
            load_config(HEADER + text, registry=registry)
        assert str(err.value).startswith(
            'profile "default-scheduler": pluginConfig[0].args: unknown field "bogusField"'
        ), spec.name


def args_of(plugin: str, args: str) -> Any:
    cfg = load(f"profiles: [{{pluginConfig: [{{name: {plugin}, args: {args}}}]}}]")
    return cfg.profiles[0].plugin_args[plugin]


def args_error(plugin: str, args: str) -> str:
    msg = error(f"profiles: [{{pluginConfig: [{{name: {plugin}, args: {args}}}]}}]")
    prefix = 'profile "default-scheduler": pluginConfig[0].args'
    assert msg.startswith(prefix)
    return msg[len(prefix) :]


def test_node_resources_fit_args_defaults() -> None:
    # kube: TestPluginArgsDefaults "NodeResourcesFitArgs not set" / "Resources empty"
    assert args_of("NodeResourcesFit", "{}") == NodeResourcesFitArgs()
    assert args_of("NodeResourcesFit", "{scoringStrategy: {type: MostAllocated}}") == (
        NodeResourcesFitArgs(
            scoring_strategy=ScoringStrategy(
                ScoringStrategyType.MOST_ALLOCATED,
                (ResourceSpec("cpu", 1), ResourceSpec("memory", 1)),
            )
        )
    )
    got = args_of(
        "NodeResourcesFit",
        "{ignoredResources: [example.com], ignoredResourceGroups: [example.com],"
        " scoringStrategy: {type: LeastAllocated, resources:"
        " [{name: cpu, weight: 1}, {name: memory, weight: 10}, {name: nvidia.com/gpu}]}}",
    )
    assert got == NodeResourcesFitArgs(
        ("example.com",),
        ("example.com",),
        ScoringStrategy(
            ScoringStrategyType.LEAST_ALLOCATED,
            (ResourceSpec("cpu", 1), ResourceSpec("memory", 10), ResourceSpec("nvidia.com/gpu", 1)),
        ),
    )


def test_requested_to_capacity_ratio() -> None:
    got = args_of(
        "NodeResourcesFit",
        "{scoringStrategy: {type: RequestedToCapacityRatio, requestedToCapacityRatio:"
        " {shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]}}}",
    )
    assert got.scoring_strategy == ScoringStrategy(
        ScoringStrategyType.REQUESTED_TO_CAPACITY_RATIO,
        (ResourceSpec("cpu", 1), ResourceSpec("memory", 1)),
        RequestedToCapacityRatioParam((UtilizationShapePoint(0, 0), UtilizationShapePoint(100, 10))),
    )


QUALIFIED = (
    "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 "
    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
)
RTCR = "{scoringStrategy: {type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: %s}}}"


@pytest.mark.parametrize(
    ("args", "want"),
    [
        # kube: TestValidateFitArgs
        (
            "{ignoredResources: [longvalue%s]}" % ("a" * 64),
            f'.ignoredResources[0]: invalid value "longvalue{"a" * 64}": {QUALIFIED}',
        ),
        (
            "{ignoredResources: [example.com/]}",
            f'.ignoredResources[0]: invalid value "example.com/": {QUALIFIED}',
        ),
        (
            "{ignoredResources: [example.com/aaa/bbb]}",
            f'.ignoredResources[0]: invalid value "example.com/aaa/bbb": {QUALIFIED}',
        ),
        (
            "{ignoredResourceGroups: [example.com/]}",
            ".ignoredResourceGroups[0]: invalid value \"example.com/\": resource group name can't contain '/'",
        ),
        (
            "{ignoredResourceGroups: [%s]}" % ("a" * 64),
            f'.ignoredResourceGroups[0]: invalid value "{"a" * 64}": {QUALIFIED}',
        ),
        (
            "{ignoredResourceGroups: [example.com/aa]}",
            ".ignoredResourceGroups[0]: invalid value \"example.com/aa\": resource group name can't contain '/'",
        ),
        (
            "{scoringStrategy: {type: Invalid}}",
            '.scoringStrategy.type: unsupported value "Invalid" (supported: "LeastAllocated", '
            '"MostAllocated", "RequestedToCapacityRatio")',
        ),
        (
            "{scoringStrategy: {resources: [{name: cpu}]}}",
            '.scoringStrategy.type: unsupported value "" (supported: "LeastAllocated", '
            '"MostAllocated", "RequestedToCapacityRatio")',
        ),
        # kube: TestValidate{Least,Most}AllocatedScoringStrategy
        (
            "{scoringStrategy: {type: LeastAllocated, resources: [{name: cpu, weight: 101}]}}",
            ".scoringStrategy.resources[0].weight: invalid value 101: resource weight of cpu not "
            "in valid range (0, 100]",
        ),
        (
            "{scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: -1}]}}",
            ".scoringStrategy.resources[0].weight: invalid value -1: resource weight of cpu not "
            "in valid range (0, 100]",
        ),
        (
            "{scoringStrategy: {type: MostAllocated, resources:"
            " [{name: cpu, weight: 1}, {name: memory, weight: 101}]}}",
            ".scoringStrategy.resources[1].weight: invalid value 101: resource weight of memory "
            "not in valid range (0, 100]",
        ),
        # kube: TestValidateRequestedToCapacityRatioScoringStrategy
        (
            "{scoringStrategy: {type: RequestedToCapacityRatio}}",
            ".scoringStrategy.requestedToCapacityRatio: required: must be specified when type is "
            "RequestedToCapacityRatio",
        ),
        (
            RTCR % "[]",
            ".scoringStrategy.requestedToCapacityRatio.shape: required: at least one point must be specified",
        ),
        (
            RTCR % "[{utilization: -1, score: 3}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[0].utilization: invalid value -1: "
            "not in valid range [0, 100]",
        ),
        (
            RTCR % "[{utilization: 101, score: 3}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[0].utilization: invalid value 101: "
            "not in valid range [0, 100]",
        ),
        (
            RTCR % "[{utilization: 10, score: 3}, {utilization: 10, score: 3}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[1].utilization: invalid value 10: "
            "values must be sorted in increasing order",
        ),
        (
            RTCR % "[{utilization: 10, score: 3}, {utilization: 20, score: 3}, {utilization: 15, score: 3}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[2].utilization: invalid value 15: "
            "values must be sorted in increasing order",
        ),
        (
            RTCR % "[{utilization: 10, score: -1}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[0].score: invalid value -1: not in valid range [0, 10]",
        ),
        (
            RTCR % "[{utilization: 10, score: 11}]",
            ".scoringStrategy.requestedToCapacityRatio.shape[0].score: invalid value 11: not in valid range [0, 10]",
        ),
        (
            "{scoringStrategy: {type: LeastAllocated, requestedToCapacityRatio: {shape: []}}}",
            ".scoringStrategy.requestedToCapacityRatio: forbidden: must be nil when type is not "
            "RequestedToCapacityRatio",
        ),
        (
            "{scoringStrategy: {type: LeastAllocated, resource: []}}",
            '.scoringStrategy: unknown field "resource" (known fields: type, resources, requestedToCapacityRatio)',
        ),
        (
            "{ignoredResource: [cpu]}",
            ': unknown field "ignoredResource" (known fields: ignoredResources, '
            "ignoredResourceGroups, scoringStrategy)",
        ),
    ],
)
def test_node_resources_fit_args_validation(args: str, want: str) -> None:
    assert args_error("NodeResourcesFit", args) == want


def test_node_resources_fit_valid_names() -> None:
    assert args_of("NodeResourcesFit", "{ignoredResources: [example.com, cpu, a.b/c-d_e.f]}")


def test_balanced_allocation_args() -> None:
    # kube: TestPluginArgsDefaults NodeResourcesBalancedAllocationArgs cases
    plugin = "NodeResourcesBalancedAllocation"
    assert args_of(plugin, "{}") == NodeResourcesBalancedAllocationArgs(
        (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))
    )
    assert args_of(plugin, "{resources: [{name: scalar.io/scalar1, weight: 1}]}") == (
        NodeResourcesBalancedAllocationArgs((ResourceSpec("scalar.io/scalar1", 1),))
    )
    assert args_of(
        plugin,
        "{resources: [{name: cpu}, {name: scalar.io/scalar0}, {name: scalar.io/scalar1, weight: 1}]}",
    ) == NodeResourcesBalancedAllocationArgs(
        (
            ResourceSpec("cpu", 1),
            ResourceSpec("scalar.io/scalar0", 1),
            ResourceSpec("scalar.io/scalar1", 1),
        )
    )
    # kube: ValidateNodeResourcesBalancedAllocationArgs
    assert args_error(plugin, "{resources: [{name: cpu, weight: 2}]}") == (
        ".resources[0].weight: invalid value 2: must be 1"
    )
    assert args_error(plugin, "{resources: [{name: cpu}, {name: cpu}]}") == (
        '.resources[1].name: duplicate value "cpu"'
    )


def test_node_affinity_args() -> None:
    got = args_of(
        "NodeAffinity",
        """
{addedAffinity: {
  requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
    {matchExpressions: [{key: nvidia.com/gpu.present, operator: In, values: ["true"]},
                        {key: cores, operator: Gt, values: ["8"]}]},
    {matchFields: [{key: metadata.name, operator: NotIn, values: [node-1]}]}]},
  preferredDuringSchedulingIgnoredDuringExecution: [
    {weight: 10, preference: {matchExpressions: [{key: zone, operator: Exists}]}}]}}
""",
    )
    assert got == NodeAffinityArgs(
        NodeAffinity(
            required=NodeSelector(
                (
                    NodeSelectorTerm(
                        match_expressions=(
                            NodeSelectorRequirement("nvidia.com/gpu.present", SelectorOperator.IN, ("true",)),
                            NodeSelectorRequirement("cores", SelectorOperator.GT, ("8",)),
                        )
                    ),
                    NodeSelectorTerm(
                        match_fields=(NodeSelectorRequirement("metadata.name", SelectorOperator.NOT_IN, ("node-1",)),)
                    ),
                )
            ),
            preferred=(
                PreferredSchedulingTerm(
                    10,
                    NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("zone", SelectorOperator.EXISTS),)),
                ),
            ),
        )
    )
    assert args_of("NodeAffinity", "{}") == NodeAffinityArgs()


REQ = "{addedAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [%s]}}}"
REQ_PATH = ".addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"


@pytest.mark.parametrize(
    ("term", "want"),
    [
        (
            "{matchExpressions: [{key: foo, operator: Equals, values: [a]}]}",
            '.matchExpressions[0].operator: unsupported value "Equals" (supported: "In", '
            '"NotIn", "Exists", "DoesNotExist", "Gt", "Lt")',
        ),
        (
            "{matchExpressions: [{key: foo, operator: In}]}",
            ".matchExpressions[0].values: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            "{matchExpressions: [{key: foo, operator: Exists, values: [a]}]}",
            ".matchExpressions[0].values: values set must be empty for exists and does not exist",
        ),
        (
            "{matchExpressions: [{key: foo, operator: Gt, values: ['1', '2']}]}",
            ".matchExpressions[0].values: for 'Gt', 'Lt' operators, exactly one value is required",
        ),
        (
            "{matchExpressions: [{key: foo, operator: Lt, values: [abc]}]}",
            ".matchExpressions[0].values: for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "{matchExpressions: [{key: 'foo bar', operator: Exists}]}",
            f'.matchExpressions[0].key: invalid value "foo bar": {QUALIFIED}',
        ),
        (
            "{matchExpressions: [{key: foo, operator: In, values: ['-a']}]}",
            '.matchExpressions[0].values[0]: invalid value "-a": must be a valid label value: at '
            "most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric "
            "(or empty)",
        ),
        (
            "{matchFields: [{key: metadata.name, operator: In, values: [a, b]}]}",
            ".matchFields[0].values: must have one element",
        ),
        (
            "{matchFields: [{key: metadata.name, operator: Exists}]}",
            '.matchFields[0].operator: unsupported value "Exists" (supported: "In", "NotIn")',
        ),
        (
            "{matchFields: [{key: metadata.labels, operator: In, values: [a]}]}",
            '.matchFields[0].key: unsupported value "metadata.labels" (supported: "metadata.name")',
        ),
        (
            "{matchLabels: {a: b}}",
            ': unknown field "matchLabels" (known fields: matchExpressions, matchFields)',
        ),
    ],
)
def test_node_affinity_args_validation(term: str, want: str) -> None:
    assert args_error("NodeAffinity", REQ % term) == REQ_PATH + want


def test_gpu_args() -> None:
    assert args_of("GPUFit", "{}") == GPUArgs(GPUMode.BINPACK)
    assert args_of("GPUFit", "{mode: spread}") == GPUArgs(GPUMode.SPREAD)
    assert args_of("GPUFit", "{mode: spread}").mode == "spread"
    assert args_error("GPUFit", "{mode: pack}") == ('.mode: unsupported value "pack" (supported: "binpack", "spread")')
    assert args_error("GPUFit", "{mode: binpack, gpus: 2}") == (': unknown field "gpus" (known fields: mode)')


def test_out_of_tree_dataclass_args() -> None:
    assert args_of("ZonePreference", "{preferredZone: a, zoneWeights: [1, 2]}") == ZoneArgs("a", (1, 2))
    assert args_error("ZonePreference", "{zone: a}") == (
        ': unknown field "zone" (known fields: preferredZone, zoneWeights)'
    )
    # an enabled plugin whose args have a required field needs a pluginConfig
    assert error("profiles: [{plugins: {score: {enabled: [{name: ZonePreference}]}}}]") == (
        'profile "default-scheduler": pluginConfig: plugin "ZonePreference" needs args: args.preferredZone: required'
    )


def test_out_of_tree_from_config_args() -> None:
    assert args_of("Ratio", "{ratio: 0.25}").ratio == 0.25
    assert args_error("Ratio", "{ratio: 2}") == ": ratio: invalid value 2: not in [0, 1]"
    cfg = load("profiles: [{plugins: {multiPoint: {enabled: [{name: Ratio}]}}}]")
    assert cfg.profiles[0].plugin_args["Ratio"].ratio == 0.5


# --- files and sources ----------------------------------------------------------------------


def test_load_from_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sched.yaml"
    path.write_text(HEADER + "profiles: [{schedulerName: x, plugins: {filter: {enabled: [{name: Foo}]}}}]\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, registry=REGISTRY)
    assert str(e.value) == (
        f'{path}: profile "x": plugins.filter.enabled[0]: plugin "Foo" is not registered (known: {KNOWN})'
    )
    assert (e.value.source, e.value.scope, e.value.path) == (
        str(path),
        'profile "x"',
        "plugins.filter.enabled[0]",
    )
    assert e.value.problem.startswith('plugin "Foo" is not registered')
    with pytest.raises(ConfigError) as e:
        load_config(str(path), registry=REGISTRY, source="configmap kube-system/sched")
    assert str(e.value).startswith('configmap kube-system/sched: profile "x": ')


def test_missing_file() -> None:
    with pytest.raises(ConfigError) as e:
        load_config("/nonexistent/sched.yaml", registry=REGISTRY)
    assert str(e.value) == "/nonexistent/sched.yaml: cannot read the file: No such file or directory"


def test_json_text_and_mappings() -> None:
    text = '{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}'
    assert load_config(text, registry=REGISTRY) == default_config(REGISTRY)
    assert load_config(yaml.safe_load(HEADER), registry=REGISTRY) == default_config(REGISTRY)


# --- the example in deploy/ -----------------------------------------------------------------


def test_example_config() -> None:
    cfg = load_config(EXAMPLE, registry=REGISTRY)
    assert cfg.scheduler_names == ("default-scheduler", "gpu-binpack")
    assert cfg.ignored_fields == ()
    default, gpu = cfg.profiles
    assert lists(default) == DEFAULT_LISTS
    assert gpu.percentage_of_nodes_to_score == 100
    got = lists(gpu)
    assert got["filter"] == DEFAULT_LISTS["filter"] + ["GPUFit"]
    assert got["reserve"] == ["GPUFit"]
    assert got["preScore"] == ["TaintToleration", "NodeAffinity", "PodTopologySpread", "InterPodAffinity", "GPUFit"]
    assert got["score"] == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("ImageLocality", 1),
        ("GPUFit", 5),
    ]
    assert gpu.plugin_args["GPUFit"] == GPUArgs(GPUMode.BINPACK)
    assert gpu.plugin_args["NodeResourcesFit"] == NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            ScoringStrategyType.MOST_ALLOCATED,
            (ResourceSpec("nvidia.com/gpu", 5), ResourceSpec("cpu", 1), ResourceSpec("memory", 1)),
        )
    )


# --- numFeasibleNodesToFind (kube: TestNumFeasibleNodesToFind) ------------------------------


@pytest.mark.parametrize(
    ("percentage", "nodes", "want"),
    [
        (None, 10, 10),  # not set, nodes not more than 100
        (40, 10, 10),  # set, nodes not more than 100
        (None, 1000, 420),  # not set: adaptive 50 - 1000/125 = 42%
        (40, 1000, 400),
        (None, 6000, 300),  # adaptive bottoms out at 5%
        (40, 6000, 2400),
        (0, 6000, 300),  # 0 is adaptive too
        (70, 6000, 4200),  # a profile's percentage
        (100, 100_000, 100_000),
        (1, 5000, 100),  # never fewer than 100
        (None, 99, 99),
        (None, 100, 100),
        (None, 100_000, 5000),
    ],
)
def test_num_feasible_nodes_to_find(percentage: int | None, nodes: int, want: int) -> None:
    assert num_feasible_nodes_to_find(percentage, nodes) == want


def test_plugin_ref_and_spec_types() -> None:
    assert PluginRef("X") == PluginRef("X", 0)
    assert isinstance(REGISTRY.get("GPUFit"), PluginSpec)
