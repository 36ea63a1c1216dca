"""The extension points that run one pod at a time (kubus.framework.runtime), with kube's rules,
and Permit in `kubus simulate`: a pod that waits holds its node until allowed, or gives it back."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from kubus.api.manifests import parse_manifests
from kubus.api.objects import Pod
from kubus.api.synthetic import make_nodes, make_pods
from kubus.cli.simulate import SCHEDULED, UNSCHEDULABLE, simulate
from kubus.framework.config import default_config, load_config
from kubus.framework.cycle_state import CycleState
from kubus.framework.interface import FilterDiagnosis, FilterResult, PostFilterResult
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import MAX_PERMIT_TIMEOUT, Framework
from kubus.framework.scheduling import Scheduler
from kubus.framework.status import Code, Status
from kubus.framework.waiting import WaitingPods
from kubus.kernels.backend import select_backend
from kubus.kernels.node_table import NodeTable
from kubus.plugins import in_tree_registry

POD = parse_manifests("{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}").pods[0]


def plugin(name: str, **methods: Any) -> type:
    """A plugin class named ``name`` with these methods (each ``f(self, *args)``)."""
    return type(name, (), {"name": name, "__init__": lambda self, args=None, handle=None: None, **methods})


def framework(**points: list[Any]) -> Framework:
    return Framework(**{point: tuple(cls() for cls in classes) for point, classes in points.items()})


def test_permit_rejection_wins_and_waits_collect_their_timeouts() -> None:
    wait_a = plugin("A", permit=lambda self, s, p, n: (Status.wait(), 5.0))
    wait_b = plugin("B", permit=lambda self, s, p, n: (Status.wait(), 10_000.0))
    allow = plugin("C", permit=lambda self, s, p, n: (Status.success(), 0.0))
    deny = plugin("D", permit=lambda self, s, p, n: (Status.unschedulable("no"), 0.0))
    waits = framework(permit=[wait_a, allow, wait_b]).run_permit(CycleState(), POD, "n1")
    assert waits.status.is_wait and dict(waits.waiting_on) == {"A": 5.0, "B": MAX_PERMIT_TIMEOUT}
    assert waits.timeout == 5.0
    denied = framework(permit=[wait_a, deny, allow]).run_permit(CycleState(), POD, "n1")
    assert (denied.status.code, denied.status.plugin, denied.status.reasons) == (Code.UNSCHEDULABLE, "D", ("no",))
    assert framework(permit=[allow]).run_permit(CycleState(), POD, "n1").status.is_success


def test_a_permit_plugin_that_raises_is_an_error_naming_it() -> None:
    def boom(self: object, *args: object) -> tuple[Status, float]:
        raise RuntimeError("bug")

    verdict = framework(permit=[plugin("Boom", permit=boom)]).run_permit(CycleState(), POD, "n1")
    assert verdict.status.code is Code.ERROR and verdict.status.plugin == "Boom"


def test_unreserve_runs_in_reverse_reserve_order_even_past_a_failure() -> None:
    calls: list[str] = []

    def reserving(name: str, ok: bool = True, raises: bool = False) -> type:
        def unreserve(self: object, *args: object) -> None:
            calls.append(f"unreserve {name}")
            if raises:
                raise RuntimeError("bug")

        def reserve(self: object, *args: object) -> Status:
            calls.append(f"reserve {name}")
            return Status.success() if ok else Status.unschedulable("full")

        return plugin(name, reserve=reserve, unreserve=unreserve)

    fw = framework(reserve=[reserving("A"), reserving("B", raises=True), reserving("C", ok=False)])
    status = fw.run_reserve(CycleState(), POD, None)  # type: ignore[arg-type]
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE, "C")
    assert calls == ["reserve A", "reserve B", "reserve C", "unreserve C", "unreserve B", "unreserve A"]


def test_post_filter_stops_at_the_first_success_and_passes_unschedulable_on() -> None:
    no = plugin("No", post_filter=lambda self, s, p, d: PostFilterResult(Status.unschedulable("cannot help")))
    yes = plugin("Yes", post_filter=lambda self, s, p, d: PostFilterResult(Status.success(), "n7"))
    never = plugin("Never", post_filter=lambda self, s, p, d: pytest.fail("ran after a Success"))
    diagnosis = FilterDiagnosis(3, {"Insufficient cpu": 3}, frozenset({"NodeResourcesFit"}))
    result = framework(post_filter=[no, yes, never]).run_post_filter(CycleState(), POD, diagnosis)
    assert result is not None and (result.status.plugin, result.nominated_node) == ("Yes", "n7")
    only_no = framework(post_filter=[no]).run_post_filter(CycleState(), POD, diagnosis)
    assert only_no is not None and only_no.status.message() == "cannot help"
    assert framework().run_post_filter(CycleState(), POD, diagnosis) is None


async def test_bind_plugins_run_until_one_does_not_skip_and_may_be_coroutines() -> None:
    async def later(self: object, *args: object) -> Status:
        return Status.success()

    skip = plugin("Skip", bind=lambda self, s, p, n: Status.skip())
    async_bind = plugin("Async", bind=later)
    never = plugin("Never", bind=lambda self, s, p, n: pytest.fail("ran after a bind"))
    assert (await framework(bind=[skip, async_bind, never]).run_bind(CycleState(), POD, "n1")).plugin == "Async"
    all_skip = await framework(bind=[skip]).run_bind(CycleState(), POD, "n1")
    assert all_skip.code is Code.ERROR
    assert framework(bind=[plugin("DefaultBinder", bind=lambda *a: Status.success())]).binds_plainly
    assert not framework(bind=[skip]).binds_plainly


# ---- Permit in kubus simulate --------------------------------------------------------------------


class Pair:
    """Permit of a two-pod gang (label gang=<name>): the first waits, the second allows it."""

    name: ClassVar[str] = "Pair"

    def __init__(self, args: object = None, handle: WaitingPods | None = None) -> None:
        assert handle is not None
        self.handle = handle

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        gang = pod.metadata.labels.get("gang")
        if gang is None:
            return Status.success(), 0.0
        mates = [w for w in self.handle.iterate_over_waiting_pods() if w.key.startswith(f"default/{gang}-")]
        if mates:
            for mate in mates:
                mate.allow(self.name)
            return Status.success(), 0.0
        return Status.wait(), 30.0


CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "2", memory: 4Gi, pods: "10"}}
"""


def pods(*specs: tuple[str, str]) -> str:
    docs = [
        f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{gang: {gang}}}}}
spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]}}
"""
        for name, gang in specs
    ]
    return "".join(docs)


def run(text: str) -> dict[str, tuple[str, str]]:
    registry = in_tree_registry()
    registry.register(Pair)
    config = load_config(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{schedulerName: default-scheduler, plugins: {permit: {enabled: [{name: Pair}]}}}]\n",
        registry=registry,
    )
    outcomes, _ = simulate(parse_manifests(CLUSTER + text), config, backend=select_backend("numpy"), registry=registry)
    return {o.pod.name: (o.status, o.message) for o in outcomes}


def test_simulate_places_a_waiting_pod_once_a_plugin_allows_it() -> None:
    result = run(pods(("a-1", "a"), ("a-2", "a")))
    assert result == {"a-1": (SCHEDULED, ""), "a-2": (SCHEDULED, "")}


def test_simulate_gives_back_the_node_of_a_pod_still_waiting_at_the_end() -> None:
    # b-1 waits alone and times out; its 500m went back, so the node is not counted full.
    result = run(pods(("b-1", "b")))
    assert result["b-1"] == (UNSCHEDULABLE, "rejected due to timeout waiting on Pair")


def test_pre_filter_extensions_run_for_the_plugins_that_have_them() -> None:
    calls: list[str] = []

    def add_pod(self: object, state: CycleState, pod: Pod, other: object, node: object) -> Status:
        calls.append(f"add {type(self).__name__}")
        return Status.success()

    def remove_pod(self: object, state: CycleState, pod: Pod, other: object, node: object) -> Status:
        calls.append(f"remove {type(self).__name__}")
        return Status.unschedulable("cannot undo")

    pre_filter = lambda self, *args: (None, Status.success())  # noqa: E731
    stateful = plugin("Stateful", pre_filter=pre_filter, add_pod=add_pod, remove_pod=remove_pod)
    plain = plugin("Plain", pre_filter=pre_filter)
    fw = framework(pre_filter=[plain, stateful])
    assert fw.run_add_pod(CycleState(), POD, None, None).is_success  # type: ignore[arg-type]
    removed = fw.run_remove_pod(CycleState(), POD, None, None)  # type: ignore[arg-type]
    assert (removed.code, removed.plugin) == (Code.UNSCHEDULABLE, "Stateful")
    assert calls == ["add Stateful", "remove Stateful"]


# ---- the array extension points (PreFilter to NormalizeScore), run by the runtime too ---------


def test_pre_filter_intersects_node_sets_records_skips_and_names_the_failing_plugin() -> None:
    only = lambda *names: lambda self, *args: (frozenset(names), Status.success())  # noqa: E731
    skips = plugin("Skips", pre_filter=lambda self, *args: (None, Status.skip()))
    ab, bc, cd = (plugin(a + b, pre_filter=only(a.lower(), b.lower())) for a, b in ("AB", "BC", "CD"))
    state = CycleState()
    timed: list[tuple[ExtensionPoint, str]] = []
    fw = framework(pre_filter=[skips, ab, bc])
    result = fw.run_pre_filter(state, POD, None, timer=lambda point, name, s: timed.append((point, name)))  # type: ignore[arg-type]
    assert (result.status.is_success, result.allowed, result.narrowed_by) == (True, frozenset({"b"}), ("AB", "BC"))
    assert state.skip_filter_plugins == {"Skips"}
    assert timed == [(ExtensionPoint.PRE_FILTER, name) for name in ("Skips", "AB", "BC")]
    empty = framework(pre_filter=[ab, cd]).run_pre_filter(CycleState(), POD, None)  # type: ignore[arg-type]
    assert empty.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and empty.narrowed_by == ("AB", "CD")
    assert empty.status.reasons == ("node(s) didn't satisfy plugin(s) [AB CD] simultaneously",)
    no = plugin("No", pre_filter=lambda self, *args: (None, Status.unschedulable("no")))
    failed = framework(pre_filter=[no, ab]).run_pre_filter(CycleState(), POD, None)  # type: ignore[arg-type]
    assert (failed.status.code, failed.status.plugin, failed.narrowed_by) == (Code.UNSCHEDULABLE, "No", ())


def test_filter_runs_every_plugin_a_skipped_one_without_a_result() -> None:
    passing = FilterResult(np.ones(3, dtype=bool))
    a = plugin("A", filter=lambda self, *args: passing)
    b = plugin("B", filter=lambda self, *args: pytest.fail("its PreFilter said Skip"))
    state = CycleState()
    state.skip_filter_plugins.add("B")
    results = framework(filter=[a, b]).run_filter(state, POD, None)  # type: ignore[arg-type]
    assert [(p.name, r) for p, r in results] == [("A", passing), ("B", None)]


def test_the_scheduler_times_every_point_and_the_plugins_of_a_sampled_class() -> None:
    timed: set[tuple[ExtensionPoint, str]] = set()
    registry = in_tree_registry()
    profile = default_config(registry=registry).profiles[0]
    table = NodeTable(select_backend("numpy"), seed=1)
    table.add_nodes(make_nodes(8, seed=2))
    scheduler = Scheduler(
        Framework.from_profile(profile, registry), table, timer=lambda point, name, s: timed.add((point, name))
    )
    assert scheduler.schedule(make_pods(1, seed=3, gpu_fraction=0.0))[0].scheduled
    points = {point for point, name in timed if not name}
    # Each point as itself, as kube's framework reports them (PreFilter apart from Filter).
    assert points == {
        ExtensionPoint.PRE_FILTER,
        ExtensionPoint.FILTER,
        ExtensionPoint.PRE_SCORE,
        ExtensionPoint.SCORE,
        ExtensionPoint.RESERVE,
    }
    sampled = {point for point, name in timed if name}  # the first class is sampled
    assert sampled == {ExtensionPoint.PRE_FILTER, ExtensionPoint.FILTER, ExtensionPoint.PRE_SCORE, ExtensionPoint.SCORE}
