"""PodTopologySpread's counting over the node table: the matching pods per row, the topology
key's label column, and the nodes a constraint's inclusion policies admit (per row, or one node)."""

from __future__ import annotations

import numpy as np

from kubus.api.matching import first_untolerated_taint, labels_match, node_selector_matches
from kubus.api.objects import Node, Pod
from kubus.api.pod_affinity import selector_key, selector_matches
from kubus.framework.interface import ALL_ROWS, Rows
from kubus.kernels.backend import Array
from kubus.kernels.node_table import NodeTable, TableView
from kubus.plugins._columns import labels_mask, selector_mask
from kubus.plugins._spreading_constraints import SpreadConstraint, do_not_schedule_taint

__all__ = ["InclusionMasks", "host_rows", "label_column", "matching_pods", "node_included", "valid_mask"]


class InclusionMasks:
    """The node inclusion policies as bool per row, each computed once, when first needed."""

    def __init__(self, table: NodeTable, pod: Pod) -> None:
        self.table = table
        self.pod = pod
        self._affinity: np.ndarray | None = None
        self._taints: np.ndarray | None = None

    def apply(self, c: SpreadConstraint, eligible: np.ndarray) -> np.ndarray:
        out = eligible
        if c.honor_node_affinity:
            out = out & self.affinity()
        if c.honor_node_taints:
            out = out & self.taints()
        return out

    def affinity(self) -> np.ndarray:
        """The pod's required node affinity (nodeSelector and required terms) per row: the
        masks NodeAffinity's Filter uses."""
        if self._affinity is None:
            table, pod = self.table, self.pod
            aff = pod.spec.affinity
            required = aff.node_affinity.required if aff is not None and aff.node_affinity is not None else None
            mask = np.ones(table.rows, dtype=bool)
            if pod.spec.node_selector or required is not None:
                view = table.view()
                ok = view.xp.ones(table.rows, dtype=bool)
                if pod.spec.node_selector:
                    ok &= labels_mask(view, pod.spec.node_selector, ALL_ROWS)
                if required is not None:
                    ok &= selector_mask(view, required, ALL_ROWS)
                mask = np.asarray(table.backend.to_host(ok), dtype=bool)
            self._affinity = mask
        return self._affinity

    def taints(self) -> np.ndarray:
        """No untolerated NoSchedule/NoExecute taint, per row (one answer per taint list)."""
        if self._taints is None:
            table = self.table
            tolerations = self.pod.spec.tolerations
            per_set = np.array(
                [
                    first_untolerated_taint(taints, tolerations, do_not_schedule_taint) is None
                    for taints in table.taint_sets.values
                ],
                dtype=bool,
            )
            self._taints = per_set[table.backend.to_host(table.view().taint_set)]
        return self._taints


def node_included(c: SpreadConstraint, pod: Pod, node: Node) -> bool:
    """kube's matchNodeInclusionPolicies for one node."""
    labels = node.metadata.labels
    if c.honor_node_affinity:
        if pod.spec.node_selector and not labels_match(pod.spec.node_selector, labels):
            return False
        aff = pod.spec.affinity
        required = aff.node_affinity.required if aff is not None and aff.node_affinity is not None else None
        if required is not None and not node_selector_matches(required, labels, node.name):
            return False
    if c.honor_node_taints:
        return first_untolerated_taint(node.spec.taints, pod.spec.tolerations, do_not_schedule_taint) is None
    return True


def label_column(table: NodeTable, key: str) -> np.ndarray:
    """A copy of the interned column of label ``key`` (all 0 when no node has it)."""
    col = table.host_label(key)
    return np.zeros(table.rows, dtype=np.int32) if col is None else col.copy()


def valid_mask(table: NodeTable) -> np.ndarray:
    mask = np.zeros(table.rows, dtype=bool)
    mask[table.valid_rows()] = True
    return mask


def matching_pods(table: NodeTable, pod: Pod, c: SpreadConstraint) -> np.ndarray:
    """Pods of the pod's namespace the constraint's selector selects, per row (int64), leaving
    out terminating ones (kube's countPodsMatchSelector skips a pod with a deletionTimestamp)."""
    if c.selector is None:
        return np.zeros(table.rows, dtype=np.int64)
    namespace, selector = pod.namespace, c.selector
    return table.pods.count(
        table.rows,
        lambda ns, labels: ns == namespace and selector_matches(selector, labels),
        ("PodTopologySpread", namespace, selector_key(selector)),
        terminating=False,
    )


def host_rows(view: TableView, rows: Rows) -> Array:
    """``rows`` as an index into host arrays: the slice itself, or a host int array."""
    if isinstance(rows, slice):
        return rows
    return view.table.backend.to_host(rows)
