"""The node table's incremental updates leave it exactly as a table built from scratch."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubus.api.objects import CPU, PODS, Node, NodeStatus, ObjectMeta
from kubus.api.synthetic import make_node, make_pod
from kubus.kernels.node_table import NodeTable
from kubus.kernels.nodeinfo import PodInfo


def _canonical(table: NodeTable) -> dict:
    """Everything the plugins can observe, by node name (row numbers may differ)."""
    view = table.view()
    out = {}
    for info in table.node_infos():
        row = table.row_of[info.name]
        res = {r: int(view.alloc[i, row]) for i, r in enumerate(table.resources)}
        req = {r: int(view.req[i, row]) for i, r in enumerate(table.resources)}
        labels = {
            key: table.label_values[key].values[int(view.label(key)[row])]
            for key in table.label_values
            if int(view.label(key)[row]) != 0
        }
        g = int(view.gpu_count[row])
        out[info.name] = {
            "alloc": {k: v for k, v in res.items() if v},
            "req": {k: v for k, v in req.items() if v},
            "nz": (int(view.nz_cpu[row]), int(view.nz_mem[row])),
            "unschedulable": bool(view.unschedulable[row]),
            "taints": table.taint_sets.values[int(view.taint_set[row])],
            "labels": labels,
            "gpus": [
                (
                    int(view.gpu_total[row, d]),
                    int(view.gpu_free[row, d]),
                    bool(view.gpu_healthy[row, d]),
                    table.gpu_models.values[int(view.gpu_model[row, d])],
                    int(view.gpu_pods[row, d]),
                )
                for d in range(g)
            ],
            "images": sorted(name for name, rows in table.images.items() if row in rows),
            "ports": sorted(key for key, rows in table.port_rows.items() if row in rows),
            "used_ports": sorted(info.used_ports.items()),
            "requested": sorted((k, v) for k, v in info.requested.items() if v),
            "hash": int(view.node_hash[row]),
            "valid": bool(view.valid[row]),
        }
    assert int(view.valid.sum()) == len(table)
    return out


@settings(max_examples=60)
@given(st.integers(0, 2**32), st.integers(5, 120))
def test_incremental_updates_equal_a_fresh_build(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    table = NodeTable(seed=3, capacity=2)
    nodes: dict[str, Node] = {}
    placed: dict[str, tuple[str, PodInfo]] = {}
    counter = 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.3 or not nodes:
            node = make_node(rng, rng.randrange(40))
            nodes[node.name] = node
            table.set_node(node)  # add, or replace keeping its pods
        elif op < 0.4:
            name = rng.choice(sorted(nodes))
            del nodes[name]
            table.remove_node(name)
            placed = {k: v for k, v in placed.items() if v[0] != name}
        elif op < 0.8:
            node = rng.choice(sorted(nodes))
            infos = []
            for _ in range(rng.choice((1, 1, 3))):
                counter += 1
                info = PodInfo.of(make_pod(rng, counter), (0,) if nodes[node].gpus else ())
                infos.append(info)
                placed[info.pod.key] = (node, info)
            if len(infos) == 1:
                table.assume(infos[0], node)
            else:
                table.assume_many(infos, node)
        elif placed:
            key = rng.choice(sorted(placed))
            node, _ = placed.pop(key)
            if rng.random() < 0.5:
                table.forget(key, node)
            else:  # with the node's other pods, at times
                keys = [key] + [k for k, (n, _) in placed.items() if n == node and rng.random() < 0.5]
                for k in keys[1:]:
                    del placed[k]
                assert [i.pod.key for i in table.forget_many(keys, node)] == keys
    fresh = NodeTable(seed=3)
    fresh.add_nodes(nodes.values())
    for node, info in placed.values():
        fresh.assume(info, node)
    assert _canonical(table) == _canonical(fresh)


def test_removed_rows_are_reused_and_tombstoned() -> None:
    rng = random.Random(1)
    table = NodeTable()
    for i in range(3):
        table.set_node(make_node(rng, i))
    table.remove_node("node-000001")
    assert len(table) == 2 and table.rows == 3
    assert not bool(table.view().valid[1])
    assert list(table.valid_rows()) == [0, 2]
    row = table.set_node(make_node(rng, 7))
    assert row == 1 and len(table) == 3


def test_new_resources_and_gpu_widths_grow_the_arrays() -> None:
    table = NodeTable(capacity=1)
    table.set_node(Node(ObjectMeta("a"), status=NodeStatus(allocatable={CPU: 1000, PODS: 10})))
    rng = random.Random(2)
    gpu_node = next(n for n in (make_node(rng, i, gpu_fraction=1.0) for i in range(20)) if len(n.gpus) == 8)
    table.set_node(gpu_node)
    table.set_node(Node(ObjectMeta("c"), status=NodeStatus(allocatable={"example.com/fpga": 2, PODS: 1})))
    view = table.view()
    assert view.gpu_total.shape == (3, 8)
    assert int(view.alloc[table.resource_index["example.com/fpga"], 2]) == 2
    assert int(view.alloc[table.resource_index[CPU], 0]) == 1000


def test_assuming_a_pod_twice_is_refused() -> None:
    rng = random.Random(3)
    table = NodeTable()
    table.set_node(make_node(rng, 0, gpu_fraction=0.0))
    info = PodInfo.of(make_pod(rng, 0, gpu_fraction=0.0))
    table.assume(info, "node-000000")
    with pytest.raises(KeyError, match="already on node"):
        table.assume(info, "node-000000")
    assert table.forget(info.pod.key, "node-000000") is info
    assert int(np.asarray(table.view().req).sum()) == 0


def test_a_pods_info_made_from_another_of_its_class_equals_its_own() -> None:
    from kubus.api.manifests import parse_pod
    from kubus.cli.workload import mixed_workload
    from kubus.framework.scheduling import pod_class_key

    manifests = mixed_workload(400)
    for i, manifest in enumerate(manifests):
        manifest["metadata"]["uid"] = f"uid-{i}"
    pods = [parse_pod(m) for m in manifests]
    first: dict[object, PodInfo] = {}
    pairs = 0
    for pod in pods:
        key = pod_class_key(pod)
        if key not in first:
            first[key] = PodInfo.of(pod)
            continue
        for devices in ((), (1, 3)):
            made = first[key].for_pod(pod, devices)
            assert made == PodInfo.of(pod, devices) and made.label_key == PodInfo.of(pod).label_key
            assert made.pod is pod
        pairs += 1
    assert pairs > 300  # most pods share a class with an earlier one
