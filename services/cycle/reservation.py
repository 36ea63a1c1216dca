"""What a placed pod asks Redis to hold for it: its `Reservation` (`ReservationMaker`)."""

from __future__ import annotations

from kubus.api.attempts import Attempt
from kubus.cycle.batch import Batch, uid
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import ScheduleResult
from kubus.kernels import NodeTable, PodInfo
from kubus.plugins.gpu_fit import GPUFit
from kubus.plugins.node_resources_fit import NodeResourcesFit
from kubus.store import Reservation


class ReservationMaker:
    """Makes a placed pod's reservation as the profile's plugins count it: the requests
    NodeResourcesFit ignores are left out, and GPUFit's mode lets RESERVE pick other devices."""

    def __init__(self, *, framework: Framework, profile: str) -> None:
        self.profile = profile
        fit = framework.plugins.get("NodeResourcesFit")
        self._fit: NodeResourcesFit | None = fit if isinstance(fit, NodeResourcesFit) else None
        gpu_fit = framework.plugins.get("GPUFit")
        self._gpu_pick = gpu_fit.mode if isinstance(gpu_fit, GPUFit) else ""
        """GPUFit's mode: RESERVE may pick other devices the same way when the chosen ones
        were taken by another profile meanwhile ('' without GPUFit: the devices stand)."""

    def __call__(
        self, batch: Batch, result: ScheduleResult, pod_info: PodInfo, attempt: Attempt, table: NodeTable
    ) -> Reservation:
        """The pod's reservation on its node. Raises ValueError when it cannot be made."""
        return Reservation.of(
            pod_info,
            result.node or "",
            profile=self.profile,
            token=batch.token,
            attempt=attempt,
            ignored=self._ignored(pod_info.requests),
            namespace_labels=table.namespaces.get(result.pod.namespace),
            gpu_pick=self._gpu_pick if uid(result.pod) not in batch.victims else "",
        )

    def _ignored(self, requests: dict[str, int]) -> tuple[str, ...]:
        """The requests NodeResourcesFit ignores (ignoredResources/Groups): Redis skips them too."""
        return self._fit.ignored_requests(requests) if self._fit is not None else ()
