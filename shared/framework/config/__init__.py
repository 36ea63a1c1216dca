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

Modules: `model` (what a loaded configuration is), `args` (the in-tree plugins' args types, each
decoding itself), `defaults` (kube's default plugins), `multipoint` (merging plugin sets and
expanding multiPoint), `catalog` (what loading needs of the registry), `loading` (YAML, the top
level and profiles).

Deliberate differences from kube, each stricter or simpler, never silently different:
- a negative plugin weight is an error (kube lets it through and inverts the score);
- `pluginConfig` for a name that is neither registered nor a kube in-tree plugin is an error
  (kube keeps it unused); args for a registered plugin without an args type must be empty
  (the first field given is named);
- the queue sort of all profiles is compared after defaulting and expansion (the plugin that
  will actually run, and its args); kube compares the literal `queueSort` sections;
- a node affinity `matchFields` key other than `metadata.name` is an error;
- extenders, leaderElection and the other fields kubus has no use for are accepted, listed in
  `SchedulerConfiguration.ignored_fields` and said at start (`ignored_warnings`);
- ``clientConnection`` paces the watcher and binders (qps, burst) and names their kubeconfig;
  its content types are not honoured (kubus speaks JSON).
"""

from kubus.api.objects import DEFAULT_SCHEDULER_NAME
from kubus.framework.config.args import (
    DEFAULT_RESOURCE_SPEC,
    MAX_CUSTOM_PRIORITY_SCORE,
    CoschedulingArgs,
    DecodableArgs,
    DefaultingType,
    DefaultPreemptionArgs,
    GPUArgs,
    GPUMode,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    PodTopologySpreadArgs,
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    ScoringStrategyType,
    UtilizationShapePoint,
)
from kubus.framework.config.catalog import PluginCatalog
from kubus.framework.config.defaults import (
    DEFAULT_PLUGINS,
    KUBE_DEFAULT_PLUGINS,
    KUBE_IN_TREE_PLUGINS,
    OMITTED_KUBE_DEFAULT_PLUGINS,
    REMOVED_PLUGINS,
)
from kubus.framework.config.loading import default_config, load_config
from kubus.framework.config.model import (
    API_VERSION,
    KIND,
    ClientConnection,
    ConfigError,
    PluginRef,
    ProfileConfig,
    SchedulerConfiguration,
    ignored_warnings,
    num_feasible_nodes_to_find,
)
from kubus.framework.config.multipoint import MAX_TOTAL_SCORE
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.registry import ExtensionPoint

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
    "ClientConnection",
    "ConfigError",
    "CoschedulingArgs",
    "DecodableArgs",
    "DefaultPreemptionArgs",
    "DefaultingType",
    "ExtensionPoint",
    "GPUArgs",
    "GPUMode",
    "InterPodAffinityArgs",
    "NodeAffinityArgs",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFitArgs",
    "PluginCatalog",
    "PluginRef",
    "PodTopologySpreadArgs",
    "ProfileConfig",
    "RequestedToCapacityRatioParam",
    "ResourceSpec",
    "SchedulerConfiguration",
    "ScoringStrategy",
    "ScoringStrategyType",
    "UtilizationShapePoint",
    "default_config",
    "ignored_warnings",
    "load_config",
    "num_feasible_nodes_to_find",
]
