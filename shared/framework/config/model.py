"""What a loaded KubeSchedulerConfiguration is: its profiles, their plugins and args, and the
global settings; ConfigError for one that cannot be accepted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubus.core.errors import KubusError
from kubus.framework.registry import ExtensionPoint

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


class ConfigError(KubusError, ValueError):
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
class ClientConnection:
    """``clientConnection``: how kubus's parts that call the Kubernetes API (the watcher and the
    binders, in cluster mode) connect, as kube-scheduler reads it. ``contentType`` and
    ``acceptContentTypes`` are not honoured (kubus speaks JSON): set to anything else, they are
    listed in `SchedulerConfiguration.ignored_fields`."""

    qps: float | None = None
    """Requests per second each part makes at most (client-go's token bucket); None or 0: the
    part's own default (200; kube-scheduler's is 50); below 0: no limit (as client-go)."""
    burst: int | None = None
    """Requests let through at once before ``qps`` paces them; None or 0: the part's default
    (400; kube-scheduler's is 100)."""
    kubeconfig: str | None = None
    """The kubeconfig file, when no ``--kubeconfig`` is given (then $KUBECONFIG, ~/.kube/config,
    the in-cluster service account, as kubectl looks)."""

    def pace(
        self, qps: float | None, burst: int | None, *, default_qps: float, default_burst: int
    ) -> tuple[float, int]:
        """(qps, burst) for a client: the flags' ``qps``/``burst`` where given, else these, else
        the defaults; a negative qps is no limit (0 for `kubus.kubeapi.KubeClient`)."""
        chosen_qps = qps if qps is not None else self.qps or default_qps
        chosen_burst = burst if burst is not None else self.burst or default_burst
        return (0.0 if chosen_qps < 0 else chosen_qps), chosen_burst


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
    client_connection: ClientConnection = ClientConnection()
    """``clientConnection``: the watcher's and binders' pace and kubeconfig (cluster mode)."""
    ignored_fields: tuple[str, ...] = ()
    """Fields kube knows that this config sets and kubus accepts without using them
    (leaderElection, extenders, clientConnection.contentType, pluginConfig of plugins kubus
    lacks...): every service says so at start (`ignored_warnings`)."""

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


_WHY_IGNORED = {
    "leaderElection": "kubus elects each profile's active cycle through its own lease in Redis",
    "extenders": "kubus calls no scheduler extenders",
    "enableProfiling": "profile kubus's services with KUBUS_PROFILE_DIR",
    "enableContentionProfiling": "profile kubus's services with KUBUS_PROFILE_DIR",
    "delayCacheUntilActive": "every kubus cycle keeps its node table warm",
    "percentageOfPlacementsToScore": "kubus has no placement scoring (a kube alpha field)",
    "clientConnection.contentType": "kubus speaks JSON to the Kubernetes API",
    "clientConnection.acceptContentTypes": "kubus speaks JSON to the Kubernetes API",
}


def ignored_warnings(config: SchedulerConfiguration) -> list[str]:
    """One line per field of ``config`` that kubus accepts without honouring it (never silent:
    the services log these at start, `kubus up` and `kubus simulate` print them)."""
    lines = []
    for name in config.ignored_fields:
        key = name.rsplit(".", 1)[-1] if name.startswith("profiles[") else name
        why = _WHY_IGNORED.get(key, "a plugin kubus does not have" if ".pluginConfig[" in name else "")
        lines.append(f"config field {name} is not honoured" + (f": {why}" if why else ""))
    return lines
