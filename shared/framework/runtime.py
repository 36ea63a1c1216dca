"""Framework: one scheduler profile, its plugins instantiated and ordered per extension point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubus.framework.config import ProfileConfig
from kubus.framework.interface import (
    BindPlugin,
    FilterPlugin,
    PermitPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from kubus.framework.registry import ExtensionPoint

if TYPE_CHECKING:
    from kubus.framework.registry import Registry


@dataclass(frozen=True, slots=True)
class Framework:
    """The plugins of one profile, in the order they run at each extension point."""

    scheduler_name: str = "default-scheduler"
    pre_enqueue: tuple[PreEnqueuePlugin, ...] = ()
    queue_sort: QueueSortPlugin | None = None
    pre_filter: tuple[PreFilterPlugin, ...] = ()
    filter: tuple[FilterPlugin, ...] = ()
    pre_score: tuple[PreScorePlugin, ...] = ()
    score: tuple[tuple[ScorePlugin, int], ...] = ()
    """(plugin, weight) pairs."""
    reserve: tuple[ReservePlugin, ...] = ()
    permit: tuple[PermitPlugin, ...] = ()
    bind: tuple[BindPlugin, ...] = ()
    percentage_of_nodes_to_score: int | None = None
    """None: kube's adaptive percentage."""
    plugins: Mapping[str, Any] = field(default_factory=dict)
    """Every plugin instance of the profile by name."""

    @classmethod
    def from_profile(
        cls,
        profile: ProfileConfig,
        registry: Registry,
        *,
        percentage_of_nodes_to_score: int | None = None,
        handle: Any = None,
    ) -> Framework:
        """Instantiate a profile's plugins from the registry (one instance per plugin name).

        The profile's own percentageOfNodesToScore wins over the global one, as in kube.
        """
        instances: dict[str, Any] = {}

        def get(name: str) -> Any:
            if name not in instances:
                spec = registry.get(name)
                instances[name] = spec.factory(profile.plugin_args.get(name), handle)
            return instances[name]

        def at(point: ExtensionPoint) -> Sequence[Any]:
            return [get(ref.name) for ref in profile.plugins.get(point, ())]

        sorts = at(ExtensionPoint.QUEUE_SORT)
        pct = profile.percentage_of_nodes_to_score
        return cls(
            scheduler_name=profile.scheduler_name,
            pre_enqueue=tuple(at(ExtensionPoint.PRE_ENQUEUE)),
            queue_sort=sorts[0] if sorts else None,
            pre_filter=tuple(at(ExtensionPoint.PRE_FILTER)),
            filter=tuple(at(ExtensionPoint.FILTER)),
            pre_score=tuple(at(ExtensionPoint.PRE_SCORE)),
            score=tuple((get(r.name), r.weight) for r in profile.plugins.get(ExtensionPoint.SCORE, ())),
            reserve=tuple(at(ExtensionPoint.RESERVE)),
            permit=tuple(at(ExtensionPoint.PERMIT)),
            bind=tuple(at(ExtensionPoint.BIND)),
            percentage_of_nodes_to_score=pct if pct is not None else percentage_of_nodes_to_score,
            plugins=instances,
        )
