"""ImageLocality (Score): prefer nodes that already have the pod's container images, weighted by
image size and by how many nodes share the image (spread), as kube does."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kubus.api.objects import Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE, Rows
from kubus.kernels.backend import Array
from kubus.kernels.node_table import TableView

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def normalized_image_name(name: str) -> str:
    """kube's normalizedImageName: an image without a tag or digest means `:latest`."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


class ImageLocality:
    name: ClassVar[str] = "ImageLocality"
    placement_sensitive: ClassVar[bool] = False
    reads_table_only: ClassVar[bool] = True

    def __init__(self, args: object = None, handle: object = None) -> None:
        # images of a pod -> (table, nodes_version, scores of every row): replicas share images
        self._cache: dict[tuple[str, ...], tuple[object, int, Array]] = {}

    def score(self, state: CycleState, pod: Pod, view: TableView, rows: Rows) -> Array:
        images = tuple(c.image for c in pod.spec.init_containers + pod.spec.containers)
        hit = self._cache.get(images)
        table = view.table
        if hit is None or hit[0] is not table or hit[1] != table.nodes_version:
            if len(self._cache) > 4096:
                self._cache.clear()
            hit = (table, table.nodes_version, view.xp.asarray(self._score_all(pod, view)))
            self._cache[images] = hit
        return hit[2][rows]

    def _score_all(self, pod: Pod, view: TableView) -> np.ndarray:
        table = view.table
        total_nodes = len(table)
        acc = np.zeros(table.rows, dtype=np.int64)
        containers = pod.spec.init_containers + pod.spec.containers
        for container in containers:
            holders = table.images.get(normalized_image_name(container.image))
            if not holders:
                continue
            spread = len(holders) / total_nodes
            where = np.fromiter(holders.keys(), dtype=np.intp, count=len(holders))
            sizes = np.fromiter(holders.values(), dtype=np.int64, count=len(holders))
            # int64(float64(size) * spread), as kube's scaledImageScore
            acc[where] += (sizes.astype(np.float64) * spread).astype(np.int64)
        max_threshold = MAX_CONTAINER_THRESHOLD * len(containers)
        clamped = np.clip(acc, MIN_THRESHOLD, max_threshold)
        return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)
