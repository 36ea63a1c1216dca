"""The CuPy path places every pod exactly where the numpy path does.

Runs where CuPy and a CUDA GPU are present (`KUBUS_BACKEND` is ignored here); skipped,
visibly, elsewhere.
"""

from __future__ import annotations

import pytest

from kubus.framework.config import default_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.kernels.backend import NUMPY, Backend, select_backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry
from kubus.synthetic import make_nodes, make_pods

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy_backend() -> Backend:
    backend = select_backend("auto")
    if backend.name != "cupy":
        pytest.skip("CuPy with a CUDA GPU is not available on this machine")
    return backend


def _placements(backend: Backend, n_nodes: int, n_pods: int, batch: int, pct: int | None) -> list:
    registry = in_tree_registry()
    profile = default_config(registry=registry).profiles[0]
    table = NodeTable(backend, seed=3)
    table.add_nodes(make_nodes(n_nodes, seed=5))
    scheduler = Scheduler(Framework.from_profile(profile, registry, percentage_of_nodes_to_score=pct), table, seed=3)
    pods = make_pods(n_pods, seed=6)
    out = []
    for i in range(0, len(pods), batch):
        out += [(r.pod.name, r.node, r.gpu_devices, r.message) for r in scheduler.schedule(pods[i : i + batch])]
    return out


@pytest.mark.parametrize(
    ("n_nodes", "n_pods", "batch", "pct"), [(300, 400, 1, 100), (2000, 1500, 256, None), (500, 3000, 512, 100)]
)
def test_cupy_places_like_numpy(cupy_backend: Backend, n_nodes: int, n_pods: int, batch: int, pct: int | None) -> None:
    expected = _placements(NUMPY, n_nodes, n_pods, batch, pct)
    got = _placements(cupy_backend, n_nodes, n_pods, batch, pct)
    assert got == expected
    assert any(node is None for _, node, _, _ in expected), "the case should include unschedulable pods"


def test_device_table_syncs_only_changed_rows(cupy_backend: Backend) -> None:
    table = NodeTable(cupy_backend, seed=0)
    table.add_nodes(make_nodes(100, seed=1))
    view = table.view()
    before = cupy_backend.to_host(view.req).copy()
    from kubus.kernels.nodeinfo import PodInfo

    pod = make_pods(1, seed=2)[0]
    table.assume(PodInfo.of(pod), 7)
    after = cupy_backend.to_host(table.view().req)
    changed = {int(r) for r in (after != before).any(axis=1).nonzero()[0]}
    assert changed == {7}
