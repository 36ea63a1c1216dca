"""Out-of-tree plugins: the test package tests/plugins/kubus-test-plugins, installed into the venv,
registers a Filter, a Permit and a Bind plugin under the `kubus.plugins` entry points; every
command and service that builds a registry finds them."""

from __future__ import annotations

import asyncio
import importlib.metadata
from pathlib import Path

import pytest
from builders import make_node, make_pod

from kubus.api.objects import Node, Pod
from kubus.cli.commands import scheduler_config
from kubus.cli.describe import explain_pod
from kubus.core import codec
from kubus.framework.config import load_config
from kubus.framework.cycle_state import CycleState
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code
from kubus.kernels.backend import NUMPY
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry
from kubus.store.records import PodRecord

try:
    import kubus_test_plugins as tp
except ModuleNotFoundError:  # pragma: no cover - the venv was not made by `make`
    pytest.fail(
        "the test plugin package is not installed: .venv/bin/pip install -e tests/plugins/kubus-test-plugins",
        pytrace=False,
    )


def node(name: str, **labels: str) -> Node:
    return make_node(name, labels=labels, allocatable={"cpu": 4000, "memory": 8 * 1024**3, "pods": 110})


def pod(name: str = "p", **annotations: str) -> Pod:
    return make_pod(name, uid=f"u-{name}", annotations=annotations)


def test_the_package_is_installed_under_the_entry_point_group() -> None:
    names = {ep.name for ep in importlib.metadata.entry_points(group="kubus.plugins")}
    assert {"RejectLabeled", "DenyAnnotated", "RecordingBinder"} <= names


def test_the_registry_loads_all_three_with_their_extension_points() -> None:
    registry = in_tree_registry(entry_points=True)
    assert registry.get("RejectLabeled").extension_points == {ExtensionPoint.FILTER}
    assert registry.get("DenyAnnotated").extension_points == {ExtensionPoint.PERMIT}
    assert registry.get("RecordingBinder").extension_points == {ExtensionPoint.BIND}
    assert "RejectLabeled" not in in_tree_registry()  # only on request


def test_multi_point_places_each_where_it_plugs_in() -> None:
    registry = in_tree_registry(entry_points=True)
    profile = load_config(tp.SCHEDULER_CONFIG, registry=registry).profiles[0]
    fw = Framework.from_profile(profile, registry)
    assert [p.name for p in fw.filter][-1] == "RejectLabeled"
    assert [p.name for p in fw.permit] == ["DenyAnnotated"]
    assert [p.name for p in fw.bind] == ["DefaultBinder", "RecordingBinder"]


def test_reject_labeled_filters_the_labeled_nodes() -> None:
    registry = in_tree_registry(entry_points=True)
    profile = load_config(tp.SCHEDULER_CONFIG, registry=registry).profiles[0]
    table = NodeTable(NUMPY, capacity=8)
    table.add_nodes([node("a", **{tp.REJECT_LABEL: "true"}), node("b", **{tp.REJECT_LABEL: "false"}), node("c")])
    results = Scheduler(Framework.from_profile(profile, registry), table).schedule([pod()], explain=True)
    explain = results[0].explain or {}
    assert explain["a"].filter == f"RejectLabeled: {tp.REJECT_REASON}"
    assert explain["b"].filter == explain["c"].filter == "ok"
    assert results[0].node in ("b", "c")


def test_deny_annotated_rejects_at_permit() -> None:
    plugin = tp.DenyAnnotated()
    status, timeout = plugin.permit(CycleState(), pod(**{tp.DENY_PERMIT_ANNOTATION: ""}), "a")
    assert status.code is Code.UNSCHEDULABLE and status.message() == tp.DENY_PERMIT_REASON and timeout == 0.0
    status, _ = plugin.permit(CycleState(), pod(), "a")
    assert status.is_success


def test_recording_binder_binds_only_annotated_pods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "binds.log"
    monkeypatch.setenv(tp.BIND_LOG_ENV, str(log))
    plugin = tp.RecordingBinder()
    assert plugin.bind(CycleState(), pod("skipped"), "a").is_skip
    assert not log.exists()
    assert plugin.bind(CycleState(), pod("recorded", **{tp.BIND_RECORDER_ANNOTATION: "yes"}), "a").is_success
    assert log.read_text() == "default/recorded a\n"


def test_cli_config_validation_knows_them(tmp_path: Path) -> None:
    """`kubus up`, `kubus describe` and the demo validate the config through scheduler_config."""
    config = tmp_path / "sched.yaml"
    config.write_text(tp.SCHEDULER_CONFIG)
    profile = scheduler_config(str(config)).profiles[0]
    assert "RejectLabeled" in {ref.name for ref in profile.plugins[ExtensionPoint.FILTER]}


class _Snapshot:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    async def load_snapshot(self) -> list[tuple[Node, list[object]]]:
        return [(n, []) for n in self.nodes]


def test_describe_explains_with_out_of_tree_plugins() -> None:
    config = load_config(tp.SCHEDULER_CONFIG, registry=in_tree_registry(entry_points=True))
    manifest = codec.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }
    )
    record = PodRecord(uid="u-p", namespace="default", name="p", profile="default-scheduler", manifest=manifest)
    state = _Snapshot([node("a", **{tp.REJECT_LABEL: "true"}), node("b")])
    ex = asyncio.run(explain_pod(state, record, config, NUMPY))  # type: ignore[arg-type]
    assert ex is not None and ex.result is not None and ex.result.node == "b"
    assert ex.groups == [("RejectLabeled", tp.REJECT_REASON, ["a"])]


def test_the_services_build_with_them(tmp_path: Path) -> None:
    from kubus.cycle.__main__ import build as build_cycle
    from kubus.cycle.__main__ import parse_args as cycle_args
    from kubus.queue.__main__ import build as build_queue
    from kubus.queue.__main__ import parse_args as queue_args

    config = tmp_path / "sched.yaml"
    config.write_text(tp.SCHEDULER_CONFIG)
    cycle = build_cycle(cycle_args(["--profile", "default-scheduler", "--config", str(config), "--backend", "numpy"]))
    assert {"RejectLabeled", "DenyAnnotated", "RecordingBinder"} <= set(cycle.framework.plugins)
    queue = build_queue(queue_args(["--config", str(config)]))
    assert set(queue.queues) == {"default-scheduler"}
