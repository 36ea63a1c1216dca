"""The CuPy path places every pod exactly where the numpy path does.

Runs where CuPy and a CUDA GPU are present (`KUBUS_BACKEND` is ignored here); skipped,
visibly, elsewhere. These tests need no NATS or Redis: on a GPU machine without the test
servers' packages, ``pytest --noconftest tests/gpu`` runs them (kubus itself and its runtime
dependencies are all they import).
"""

from __future__ import annotations

import pytest
import yaml

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.synthetic import make_nodes, make_pods
from kubus.cli.workload import (
    POD_CONSTRAINT_WORKLOADS,
    cpu_node_template,
    pod_constraint_pods,
    pod_constraints_scheduler_config,
)
from kubus.framework.config import default_config, load_config
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.gpu_agent.simulation import simulated_nodes
from kubus.kernels.backend import NUMPY, Backend, BackendUnavailable, select_backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy_backend() -> Backend:
    try:
        return select_backend("cupy")
    except BackendUnavailable:
        pytest.skip("CuPy with a CUDA GPU is not available on this machine")


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
    ("n_nodes", "n_pods", "batch", "pct", "full"),
    [(300, 400, 1, 100, False), (2000, 1500, 256, None, False), (500, 3000, 512, 100, True), (200, 1500, 1, 100, True)],
)
def test_cupy_places_like_numpy(
    cupy_backend: Backend, n_nodes: int, n_pods: int, batch: int, pct: int | None, full: bool
) -> None:
    expected = _placements(NUMPY, n_nodes, n_pods, batch, pct)
    got = _placements(cupy_backend, n_nodes, n_pods, batch, pct)
    assert got == expected
    # a full cluster also checks that both paths agree on who does not fit
    assert any(node is None for _, node, _, _ in expected) == full


def test_device_table_syncs_only_changed_rows(cupy_backend: Backend) -> None:
    table = NodeTable(cupy_backend, seed=0)
    table.add_nodes(make_nodes(100, seed=1))
    view = table.view()
    before = cupy_backend.to_host(view.req).copy()
    from kubus.kernels.nodeinfo import PodInfo

    pod = make_pods(1, seed=2)[0]
    table.assume(PodInfo.of(pod), 7)
    after = cupy_backend.to_host(table.view().req)
    changed_nodes = {int(n) for n in (after != before).any(axis=0).nonzero()[0]}  # req is resources x nodes
    assert changed_nodes == {7}


def _workload_placements(backend: Backend, workload: str, n_nodes: int, batch: int) -> list:
    """scheduler_perf's pod-constraint workloads as `kubus bench --workload` runs them (its
    scheduler configuration, the agent's simulated nodes), scaled to ``n_nodes``: where each
    measured pod goes and whom it preempts."""
    w = POD_CONSTRAINT_WORKLOADS[workload]
    registry = in_tree_registry()
    config = load_config(pod_constraints_scheduler_config(), registry=registry)
    framework = Framework.from_profile(
        config.profiles[0], registry, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score
    )
    table = NodeTable(backend, seed=1, capacity=n_nodes)
    table.add_nodes(simulated_nodes(parse_node(yaml.safe_load(cpu_node_template(w.zones))), n_nodes))
    scheduler = Scheduler(framework, table, seed=1)
    scale = n_nodes / w.nodes
    init, measured = pod_constraint_pods(w, max(1, int(w.init_pods * scale)), max(1, int(w.measured_pods * scale)))
    for start in range(0, len(init), 256):
        scheduler.schedule([parse_pod(p) for p in init[start : start + 256]])
    out = []
    pods = [parse_pod(p) for p in measured]
    for start in range(0, len(pods), batch):
        out += [
            (r.pod.name, r.node, sorted(v.pod.name for v in r.preempted), r.message)
            for r in scheduler.schedule(pods[start : start + batch])
        ]
    return out


@pytest.mark.parametrize("workload", list(POD_CONSTRAINT_WORKLOADS))
@pytest.mark.parametrize("batch", [1, 256])
def test_cupy_places_and_preempts_like_numpy_in_the_pod_constraint_workloads(
    cupy_backend: Backend, workload: str, batch: int
) -> None:
    expected = _workload_placements(NUMPY, workload, 400, batch)
    got = _workload_placements(cupy_backend, workload, 400, batch)
    assert got == expected
    assert any(node is not None for _, node, _, _ in expected)
