"""CycleState: per-pod, per-cycle scratch space that plugins share, as in kube-scheduler."""

from __future__ import annotations

from typing import Any, TypeAlias

GPU_DEVICES_STATE_KEY = "GPUFit/devices"
"""Where a Reserve plugin leaves the GPU device indices it picked; the scheduler records them on
the pod's PodInfo (and the binder on the binding)."""

SNAPSHOT_STATE_KEY = "kubus/snapshot"
"""Every NodeInfo of the cycle's snapshot, for nodewise plugins that look at all nodes (kube's
SnapshotSharedLister): written by the reference scheduler and by the adapter."""


StateData: TypeAlias = Any
"""A value a plugin keeps in the CycleState (kube's StateData). Any: each plugin reads back the
type it wrote under its own key; the state is a store of values of many types keyed by string,
so a precise type would take a cast at every read."""


class CycleState:
    """Data plugins write in PreFilter/PreScore and read later in the same cycle.

    Keys are by convention the writing plugin's name plus a suffix. Values are treated as
    immutable once written: `clone()` is shallow, as kube's Clone() is for immutable data.
    """

    __slots__ = ("_data", "skip_filter_plugins", "skip_score_plugins")

    def __init__(self) -> None:
        self._data: dict[str, StateData] = {}
        self.skip_filter_plugins: set[str] = set()
        """Plugins whose PreFilter returned Skip: their Filter is not run for this pod."""
        self.skip_score_plugins: set[str] = set()
        """Plugins whose PreScore returned Skip: their Score is not run for this pod."""

    def read(self, key: str) -> StateData:
        """The value at `key`. Raises KeyError naming the key when nothing was written there."""
        try:
            return self._data[key]
        except KeyError:
            raise KeyError(f"cycle state has no {key!r}") from None

    def get(self, key: str, default: StateData = None) -> StateData:
        return self._data.get(key, default)

    def write(self, key: str, value: StateData) -> None:
        self._data[key] = value

    def clone(self) -> CycleState:
        c = CycleState()
        c._data = dict(self._data)
        c.skip_filter_plugins = set(self.skip_filter_plugins)
        c.skip_score_plugins = set(self.skip_score_plugins)
        return c
