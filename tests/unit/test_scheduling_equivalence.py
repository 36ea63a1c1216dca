"""The vectorized scheduler decides exactly as the one-node-at-a-time reference does, and a batch
decides exactly as one-by-one scheduling does, on randomized clusters and workloads.

Clusters are small and tight on purpose, so that pods compete, nodes fill up, ties happen and
every filter reason shows up.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from support import without_post_filter

from kubus.api.gpus import GPU_COUNT_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_MODEL_ANNOTATION
from kubus.api.objects import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    NVIDIA_GPU,
    PODS,
    Affinity,
    Container,
    ContainerImage,
    ContainerPort,
    GPUDevice,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    PreferredSchedulingTerm,
    SelectorOperator,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from kubus.framework.adapter import NodewisePlugin, nodewise_spec
from kubus.framework.config import load_config
from kubus.framework.registry import ExtensionPoint, Registry
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import KEEP_UNUSED_CALLS, Scheduler
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import NodeInfo, PodInfo
from kubus.plugins import DefaultPreemption, in_tree_registry
from kubus_reference import ALL_PLUGINS, ReferenceScheduler, reference_profile

GI = 1024**3
MODELS = ("H100", "A100", "L4")
IMAGES = ("nginx:1.27", "python", "redis:7", "trainer:v1")
LABEL_VALUES = {"zone": ("a", "b", "c"), "pool": ("cpu", "gpu"), "rank": ("1", "5", "10", "x")}


def random_node(rng: random.Random, i: int) -> Node:
    labels = {k: rng.choice(v) for k, v in LABEL_VALUES.items() if rng.random() < 0.8}
    taints = []
    for key, value, effect in (
        ("gpu", "true", TaintEffect.NO_SCHEDULE),
        ("spot", "", TaintEffect.PREFER_NO_SCHEDULE),
        ("dedicated", "db", TaintEffect.NO_EXECUTE),
        ("slow", "yes", TaintEffect.PREFER_NO_SCHEDULE),
    ):
        if rng.random() < 0.2:
            taints.append(Taint(key, value, effect))
    rng.shuffle(taints)
    alloc = {
        CPU: rng.choice((0, 500, 1000, 2000, 4000)),
        MEMORY: rng.choice((0, 1, 2, 4, 8)) * GI,
        PODS: rng.choice((1, 3, 10, 110)),
    }
    if rng.random() < 0.5:
        alloc[EPHEMERAL_STORAGE] = rng.choice((0, 5, 10)) * GI
    if rng.random() < 0.3:
        alloc["example.com/fpga"] = rng.choice((0, 1, 2))
    gpus = ()
    if rng.random() < 0.4:
        count = rng.choice((1, 2, 4))
        model = rng.choice(MODELS)
        gpus = tuple(
            GPUDevice(d, f"GPU-{i}-{d}", model, rng.choice((16, 40, 80)) * GI, healthy=rng.random() > 0.15)
            for d in range(count)
        )
        alloc[NVIDIA_GPU] = sum(g.healthy for g in gpus)
    images = tuple(
        ContainerImage((img if ":" in img else img + ":latest",), rng.choice((10, 300, 900, 3000)) * 1024**2)
        for img in IMAGES
        if rng.random() < 0.4
    )
    return Node(
        ObjectMeta(name=f"n{i:03d}", namespace="", labels=labels),
        NodeSpec(unschedulable=rng.random() < 0.1, taints=tuple(taints)),
        NodeStatus(capacity=dict(alloc), allocatable=alloc, images=images),
        gpus=gpus,
    )


def random_requirement(rng: random.Random) -> NodeSelectorRequirement:
    key = rng.choice((*LABEL_VALUES, "missing"))
    op = rng.choice(list(SelectorOperator))
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        return NodeSelectorRequirement("rank", op, (rng.choice(("2", "6")),))
    if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST):
        return NodeSelectorRequirement(key, op)
    return NodeSelectorRequirement(key, op, tuple(rng.sample(LABEL_VALUES.get(key, ("q",)), 1)))


def random_pod(rng: random.Random, i: int, node_names: list[str]) -> Pod:
    requests = {}
    if rng.random() < 0.8:
        requests[CPU] = rng.choice((0, 100, 300, 700, 1500))
    if rng.random() < 0.8:
        requests[MEMORY] = rng.choice((0, 256 * 1024**2, GI, 3 * GI))
    if rng.random() < 0.2:
        requests[EPHEMERAL_STORAGE] = rng.choice((1, 4)) * GI
    if rng.random() < 0.15:
        requests["example.com/fpga"] = 1
    annotations = {}
    if rng.random() < 0.3:
        if rng.random() < 0.5:
            requests[NVIDIA_GPU] = rng.choice((1, 2))
        else:
            annotations[GPU_MEMORY_ANNOTATION] = rng.choice(("8Gi", "20Gi", "50Gi"))
            if rng.random() < 0.3:
                annotations[GPU_COUNT_ANNOTATION] = "2"
        if rng.random() < 0.3:
            annotations[GPU_MODEL_ANNOTATION] = rng.choice(MODELS)
    tolerations = tuple(
        t
        for t in (
            Toleration("gpu", TolerationOperator.EQUAL, "true", TaintEffect.NO_SCHEDULE),
            Toleration("spot", TolerationOperator.EXISTS),
            Toleration(operator=TolerationOperator.EXISTS, effect=TaintEffect.NO_EXECUTE),
            Toleration("node.kubernetes.io/unschedulable", TolerationOperator.EXISTS),
        )
        if rng.random() < 0.3
    )
    node_selector = {"zone": rng.choice(LABEL_VALUES["zone"])} if rng.random() < 0.15 else {}
    affinity = None
    if rng.random() < 0.35:
        terms = tuple(
            NodeSelectorTerm(tuple(random_requirement(rng) for _ in range(rng.randint(0, 2))))
            for _ in range(rng.randint(1, 2))
        )
        if rng.random() < 0.15:
            terms = (
                NodeSelectorTerm(
                    match_fields=(
                        NodeSelectorRequirement(
                            "metadata.name", SelectorOperator.IN, tuple(rng.sample(node_names, min(3, len(node_names))))
                        ),
                    )
                ),
            )
        preferred = tuple(
            PreferredSchedulingTerm(rng.randint(1, 100), NodeSelectorTerm((random_requirement(rng),)))
            for _ in range(rng.randint(0, 3))
        )
        affinity = Affinity(NodeAffinity(NodeSelector(terms) if rng.random() < 0.7 else None, preferred))
    ports = (
        (ContainerPort(80, host_port=rng.choice((8080, 9090)), protocol=rng.choice(("TCP", "UDP"))),)
        if rng.random() < 0.15
        else ()
    )
    init = (
        (Container("init", rng.choice(IMAGES), requests={CPU: rng.choice((100, 2500))}),) if rng.random() < 0.15 else ()
    )
    return Pod(
        ObjectMeta(name=f"p{i:03d}", uid=f"uid-{i}", annotations=annotations),
        PodSpec(
            containers=(Container("c", rng.choice(IMAGES), requests=requests, ports=ports),),
            init_containers=init,
            node_name=rng.choice(node_names) if rng.random() < 0.03 else "",
            node_selector=node_selector,
            affinity=affinity,
            tolerations=tolerations,
        ),
    )


@dataclass(frozen=True)
class Case:
    nodes: list[Node]
    pods: list[Pod]
    pct: int | None
    config: str
    batches: list[int]


CONFIGS = {
    "default": "",
    "most": """
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GPUFit, weight: 2}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResourceGroups: [example.com]
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 2}, {name: memory, weight: 1}, {name: nvidia.com/gpu, weight: 3}]
  - name: GPUFit
    args: {mode: spread}
""",
    "ratio": """
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GPUFit}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 3}, {name: ephemeral-storage, weight: 1}]
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 10}, {utilization: 40, score: 3}, {utilization: 100, score: 7}]
  - name: NodeResourcesBalancedAllocation
    args:
      resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}, {name: ephemeral-storage, weight: 1}]
""",
}


@st.composite
def cases(draw: st.DrawFn) -> Case:
    rng = random.Random(draw(st.integers(0, 2**32)))
    nodes = [random_node(rng, i) for i in range(draw(st.integers(1, 40)))]
    names = [n.name for n in nodes]
    pods = [random_pod(rng, i, names) for i in range(draw(st.integers(1, 40)))]
    pct = draw(st.sampled_from((None, 100, 1, 30)))
    batches = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6))
    return Case(nodes, pods, pct, draw(st.sampled_from(sorted(CONFIGS))), batches)


def _config(name: str):
    registry = in_tree_registry()
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + CONFIGS[name]
    return registry, without_post_filter(load_config(text, registry=registry).profiles[0])


def reference(case: Case) -> list[tuple]:
    return [(r.pod.name, r.node, r.message, r.gpu_devices) for r in _reference_results(case)]


def vectorized(case: Case, batches: list[int], *, holes: int = 0) -> list[tuple]:
    """The case scheduled in ``batches``; with ``holes``, that many nodes interleaved with the
    case's are added and removed first, leaving rows without a node among the case's."""
    registry, profile = _config(case.config)
    table = NodeTable(seed=7, capacity=8)
    gone = [dataclasses.replace(n, metadata=dataclasses.replace(n.metadata, name=f"gone-{i}"))
            for i, n in enumerate(case.nodes[:holes])]  # fmt: skip
    for i, node in enumerate(case.nodes):
        if i < holes and i % 2:
            table.set_node(gone[i])
        table.set_node(node)
    for node in gone[1::2]:
        table.remove_node(node.name)
    scheduler = Scheduler(
        Framework.from_profile(profile, registry, percentage_of_nodes_to_score=case.pct), table, seed=7
    )
    out, i, b = [], 0, 0
    while i < len(case.pods):
        size = batches[b % len(batches)]
        out += [(r.pod.name, r.node, r.message, r.gpu_devices) for r in scheduler.schedule(case.pods[i : i + size])]
        i, b = i + size, b + 1
    return out


@settings(max_examples=150)
@given(cases())
def test_vectorized_equals_reference_one_by_one(case: Case) -> None:
    assert vectorized(case, [1]) == reference(case)


@settings(max_examples=150)
@given(cases())
def test_batches_equal_one_by_one(case: Case) -> None:
    assert vectorized(case, case.batches) == vectorized(case, [1])


@st.composite
def sampled_cases(draw: st.DrawFn) -> Case:
    """Clusters past kube's 100 nodes, where a pod examines only some of them (from where the
    last one stopped), with pods of a few recurring classes: the rows placements touch are
    reached again only when the examination comes round to them."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    nodes = [random_node(rng, i) for i in range(draw(st.integers(150, 400)))]
    names = [n.name for n in nodes]
    shapes = [random_pod(rng, i, names) for i in range(draw(st.integers(1, 4)))]
    pods = _copies(rng, shapes, draw(st.integers(20, 70)), 0)
    pct = draw(st.sampled_from((None, 1, 5, 30)))
    batches = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    return Case(nodes, pods, pct, draw(st.sampled_from(sorted(CONFIGS))), batches)


@settings(max_examples=40, deadline=None)
@given(sampled_cases(), st.sampled_from((0, 60)))
def test_sampled_clusters_decide_as_the_reference_in_batches(case: Case, holes: int) -> None:
    """A batch decides as the reference does one pod at a time where each pod examines only
    part of the cluster (rows placements touched are refreshed when reached, not at once),
    also with rows that lost their node among the others."""
    assert vectorized(case, case.batches, holes=holes) == reference(case)


@settings(max_examples=60)
@given(cases())
def test_explain_matches_reference_detail(case: Case) -> None:
    """With every node scored, explain shows the reference's per-node reasons and scores."""
    case = Case(case.nodes, case.pods[:6], 100, case.config, [1])
    registry, profile = _config(case.config)
    table = NodeTable(seed=7)
    table.add_nodes(case.nodes)
    scheduler = Scheduler(Framework.from_profile(profile, registry, percentage_of_nodes_to_score=100), table, seed=7)
    got = [scheduler.schedule([p], explain=True)[0] for p in case.pods]
    ref_profile_results = _reference_results(case)
    for mine, ref in zip(got, ref_profile_results, strict=True):
        assert mine.node == ref.node
        rejected = {n: e.filter for n, e in mine.explain.items() if e.filter != "ok"}
        assert rejected == ref.filter_reasons
        if ref.total and len(ref.total) > 1:
            for node, per_plugin in ref.scores.items():
                assert {p: (s.raw, s.normalized, s.weighted) for p, s in mine.explain[node].scores.items()} == {
                    p: tuple(s) for p, s in per_plugin.items()
                }
            assert {n: e.total for n, e in mine.explain.items() if e.total is not None} == ref.total


def _reference_results(case: Case) -> list:
    """The nodewise plugins of the same profile, run by the reference scheduler."""
    _, profile = _config(case.config)
    infos = [NodeInfo(n) for n in case.nodes]
    return ReferenceScheduler(reference_profile(profile, case.pct), seed=7).schedule_all(case.pods, infos)


def test_placed_pods_never_overcommit() -> None:
    rng = random.Random(11)
    nodes = [random_node(rng, i) for i in range(30)]
    pods = [random_pod(rng, i, [n.name for n in nodes]) for i in range(300)]
    case = Case(nodes, [p for p in pods if not p.spec.node_name], 100, "ratio", [7])
    placed = vectorized(case, case.batches)
    by_node: dict[str, NodeInfo] = {n.name: NodeInfo(n) for n in nodes}
    pods_by_name = {p.name: p for p in case.pods}
    for name, node, _msg, devices in placed:
        if node:
            by_node[node].add_pod(PodInfo.of(pods_by_name[name], devices))
    assert any(node for _, node, _, _ in placed) and any(node is None for _, node, _, _ in placed)
    for info in by_node.values():
        for resource, used in info.requested.items():
            assert used <= info.allocatable.get(resource, 0), (info.name, resource)
        assert len(info.pods) <= info.allocatable[PODS]
        assert all(free >= 0 for free in info.gpu_free_memory), info.name


@settings(max_examples=40)
@given(cases())
def test_nodewise_plugins_through_the_adapter_decide_alike(case: Case) -> None:
    """Every plugin registered the kube way (one node at a time) through the adapter: same
    placements and messages as the vectorized plugins."""
    adapted = Registry(nodewise_spec(cls) for cls in ALL_PLUGINS)
    adapted.register(DefaultPreemption)  # in the default profile; left out below (PostFilter)
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + CONFIGS[case.config]
    profile = without_post_filter(load_config(text, registry=adapted).profiles[0])
    table = NodeTable(seed=7)
    table.add_nodes(case.nodes)
    fw = Framework.from_profile(profile, adapted, percentage_of_nodes_to_score=case.pct)
    assert all(isinstance(p, NodewisePlugin) for p in fw.filter)
    scheduler = Scheduler(fw, table, seed=7)
    got = [(r.pod.name, r.node, r.message, r.gpu_devices) for r in scheduler.schedule(case.pods)]
    assert got == vectorized(case, [1])


def _copies(rng: random.Random, shapes: list[Pod], count: int, start: int) -> list[Pod]:
    """``count`` pods, each a renamed copy of one of ``shapes``: pod classes that recur."""
    out = []
    for i in range(start, start + count):
        shape = rng.choice(shapes)
        meta = dataclasses.replace(shape.metadata, name=f"c{i:03d}", uid=f"uid-c{i:03d}")
        out.append(dataclasses.replace(shape, metadata=meta))
    return out


def _change_between_batches(rng: random.Random, tables: list[NodeTable], nodes: list[Node]) -> None:
    """The same change, picked at random, to each table: what events and resyncs do to the
    cycle's table between two batches (or nothing, the common case)."""
    what = rng.choice(("nothing", "nothing", "forget", "move", "relabel", "add"))
    first = tables[0]
    placed = [(key, info.name) for info in first.node_infos() for key in sorted(info.pods)]
    if what in ("forget", "move") and placed:
        key, node = rng.choice(placed)
        elsewhere = rng.choice([n.name for n in nodes])
        for table in tables:
            pod_info = table.forget(key, node)
            if what == "move" and key not in table.node_info(elsewhere).pods:
                table.assume(PodInfo.of(pod_info.pod), elsewhere)
    elif what == "relabel":
        node = rng.choice(nodes)
        labels = {**node.metadata.labels, "zone": rng.choice(LABEL_VALUES["zone"])}
        changed = dataclasses.replace(node, metadata=dataclasses.replace(node.metadata, labels=labels))
        for table in tables:
            table.set_node(changed)
    elif what == "add":
        extra = random_node(rng, 100 + len(first))
        for table in tables:
            table.set_node(extra)


@settings(max_examples=80)
@given(cases(), st.integers(0, 2**32))
def test_classes_kept_across_batches_decide_as_a_fresh_scheduler_does(case: Case, seed: int) -> None:
    """A Scheduler keeps its pod classes from one batch to the next; whatever changes the table
    in between (a pod forgotten or moved, a node relabelled or added) it decides each batch
    exactly as a Scheduler made anew for that batch does."""
    rng = random.Random(seed)
    registry, profile = _config(case.config)
    tables = []
    for _ in range(2):
        table = NodeTable(seed=7, capacity=8)
        table.add_nodes(case.nodes)
        tables.append(table)
    kept = Scheduler(
        Framework.from_profile(profile, registry, percentage_of_nodes_to_score=case.pct), tables[0], seed=7
    )
    start_index, done = 0, 0
    for size in case.batches * 2:
        batch = _copies(rng, case.pods[:3], size, done)
        done += size
        fresh = Scheduler(
            Framework.from_profile(profile, registry, percentage_of_nodes_to_score=case.pct), tables[1], seed=7
        )
        fresh.next_start_node_index = start_index
        want = [(r.pod.name, r.node, r.message, r.gpu_devices) for r in fresh.schedule(batch)]
        start_index = fresh.next_start_node_index
        assert [(r.pod.name, r.node, r.message, r.gpu_devices) for r in kept.schedule(batch)] == want
        _change_between_batches(rng, tables, case.nodes)


def test_a_class_is_kept_through_pods_coming_and_going_and_evaluated_again_after_a_node_change() -> None:
    rng = random.Random(5)
    nodes = [random_node(rng, i) for i in range(12)]
    shape = Pod(
        ObjectMeta(name="shape", namespace="default"), PodSpec(containers=(Container("c", requests={CPU: 10}),))
    )
    pods = _copies(rng, [shape], 12, 0)
    registry, profile = _config("default")
    table = NodeTable(seed=7)
    table.add_nodes(nodes)
    evaluations = []

    def timer(point: ExtensionPoint, plugin: str, seconds: float) -> None:
        if point is ExtensionPoint.FILTER and not plugin:
            evaluations.append(seconds)  # one per evaluation of a class

    scheduler = Scheduler(Framework.from_profile(profile, registry), table, seed=7, timer=timer)
    placed = scheduler.schedule(pods[:3])
    assert len(evaluations) == 1
    scheduler.schedule(pods[3:6])
    assert len(evaluations) == 1  # only this scheduler changed the table: the class is kept
    # Someone else takes a pod off a node and puts one on (events, a resync): taken in as
    # placements are, the class is kept (and decides as a fresh one would, see above).
    table.forget(placed[0].pod.key, placed[0].node or "")
    table.assume(PodInfo.of(pods[11]), nodes[0].name)
    scheduler.schedule(pods[6:9])
    assert len(evaluations) == 1
    relabelled = dataclasses.replace(nodes[1], metadata=dataclasses.replace(nodes[1].metadata, labels={"x": "y"}))
    table.set_node(relabelled)  # a node changed: every class starts over
    scheduler.schedule(pods[9:11])
    assert len(evaluations) == 2

    adapted = Registry(nodewise_spec(cls) for cls in ALL_PLUGINS)
    adapted.register(DefaultPreemption)
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" + CONFIGS["default"]
    nodewise = without_post_filter(load_config(text, registry=adapted).profiles[0])
    evaluations.clear()
    scheduler = Scheduler(Framework.from_profile(nodewise, adapted), table, seed=7, timer=timer)
    scheduler.schedule(_copies(rng, [shape], 2, 20))
    scheduler.schedule(_copies(rng, [shape], 2, 30))
    assert len(evaluations) == 2  # plugins that may read more than the table: nothing is kept


def test_a_class_outlives_a_few_calls_that_do_not_use_it() -> None:
    """The cycle retries a batch's refused pods in a second call, with few classes: the others
    are kept for the next batch, and dropped only after KEEP_UNUSED_CALLS calls without them."""
    rng = random.Random(6)
    nodes = [random_node(rng, i) for i in range(12)]
    small, large = (
        Pod(ObjectMeta(name=name, namespace="default"), PodSpec(containers=(Container("c", requests={CPU: cpu}),)))
        for name, cpu in (("small", 10), ("large", 20))
    )
    registry, profile = _config("default")
    table = NodeTable(seed=7)
    table.add_nodes(nodes)
    evaluated: list[str] = []

    def timer(point: ExtensionPoint, plugin: str, seconds: float) -> None:
        if point is ExtensionPoint.FILTER and not plugin:
            evaluated.append("class")

    scheduler = Scheduler(Framework.from_profile(profile, registry), table, seed=7, timer=timer)
    scheduler.schedule(_copies(rng, [small], 2, 0) + _copies(rng, [large], 2, 10))
    assert len(evaluated) == 2
    for i in range(KEEP_UNUSED_CALLS - 1):
        scheduler.schedule(_copies(rng, [small], 1, 20 + i))  # `large` unused
    scheduler.schedule(_copies(rng, [large], 1, 30))
    assert len(evaluated) == 2  # kept through the calls without it
    for i in range(KEEP_UNUSED_CALLS):
        scheduler.schedule(_copies(rng, [small], 1, 40 + i))
    scheduler.schedule(_copies(rng, [large], 1, 50))
    assert len(evaluated) == 3  # dropped after KEEP_UNUSED_CALLS calls without it: evaluated anew
