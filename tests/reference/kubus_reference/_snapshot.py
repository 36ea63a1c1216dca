"""The cycle's node snapshot, for plugins that look at every node (kube's SnapshotSharedLister).

kube's plugins reach all nodes through their framework handle; here the scheduler writes the
snapshot into the cycle state before PreFilter, under SNAPSHOT_STATE_KEY.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubus.framework.cycle_state import SNAPSHOT_STATE_KEY, CycleState
from kubus.kernels.nodeinfo import NodeInfo


def snapshot_node_infos(state: CycleState, fallback: Sequence[NodeInfo]) -> Sequence[NodeInfo]:
    """Every node of the cycle's snapshot; `fallback` when no scheduler wrote one (unit tests)."""
    nodes = state.get(SNAPSHOT_STATE_KEY)
    return fallback if nodes is None else nodes
