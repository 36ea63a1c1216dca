"""ImageLocality (PreScore, Score): favors nodes that already have the pod's images.

Each container image (init containers included) present on the node adds its size scaled by
the share of all nodes that have it; the sum is clamped to [23MB, 1000MB x containers] and
mapped to 0..100 with Go integer division. An image name without a tag matches the node's
`name:latest`. After kube's pkg/scheduler/framework/plugins/imagelocality/image_locality.go.

The image summaries (kube's ImageStateSummary) are computed over every node of the snapshot in
PreScore. The size is the one the scored node reports; kube's scheduler cache keeps the size
first reported by any node (the two differ only when nodes disagree on an image's size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kubus.api.objects import Node, Pod
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import MAX_NODE_SCORE
from kubus.framework.status import Status
from kubus.kernels.nodeinfo import NodeInfo
from kubus_reference._gomath import go_div, go_int64
from kubus_reference._snapshot import snapshot_node_infos

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB
DEFAULT_IMAGE_TAG = "latest"
PRE_SCORE_STATE_KEY = "PreScoreImageLocality"


@dataclass(frozen=True, slots=True)
class ImageSpread:
    """How many of the snapshot's nodes have each image name, out of how many nodes."""

    num_nodes: dict[str, int]
    total_num_nodes: int

    @classmethod
    def of(cls, node_infos: Sequence[NodeInfo]) -> ImageSpread:
        holders: dict[str, set[str]] = {}
        for info in node_infos:
            for name in node_image_sizes(info.node):
                holders.setdefault(name, set()).add(info.name)
        return cls({name: len(nodes) for name, nodes in holders.items()}, len(node_infos))


def normalized_image_name(name: str) -> str:
    """Append ":latest" when the name has no tag (no ':' after the last '/')."""
    if name.rfind(":") <= name.rfind("/"):
        name = name + ":" + DEFAULT_IMAGE_TAG
    return name


def node_image_sizes(node: Node) -> dict[str, int]:
    """Image name -> size in bytes, for every name of every image the node reports."""
    return {name: image.size_bytes for image in node.status.images for name in image.names}


def scaled_image_score(size: int, num_nodes: int, total_num_nodes: int) -> int:
    spread = float(num_nodes) / float(total_num_nodes)
    return go_int64(float(size) * spread)


def calculate_priority(sum_scores: int, num_containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return go_div(MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


def sum_image_scores(node: Node, pod: Pod, spread: ImageSpread) -> int:
    sizes = node_image_sizes(node)
    total = 0
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        name = normalized_image_name(container.image)
        if name in sizes:
            total += scaled_image_score(sizes[name], spread.num_nodes[name], spread.total_num_nodes)
    return total


class ImageLocality:
    name: ClassVar[str] = "ImageLocality"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_STATE_KEY, ImageSpread.of(snapshot_node_infos(state, nodes)))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        spread = state.get(PRE_SCORE_STATE_KEY)
        if spread is None:
            # kube's snapshot carries these counts precomputed; computing them once per cycle
            # keeps this O(1) per node when the profile enables no PreScore for this plugin
            spread = ImageSpread.of(snapshot_node_infos(state, [node_info]))
            state.write(PRE_SCORE_STATE_KEY, spread)
        num_containers = len(pod.spec.init_containers) + len(pod.spec.containers)
        return calculate_priority(sum_image_scores(node_info.node, pod, spread), num_containers)
