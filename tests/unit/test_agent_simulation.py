"""Simulated nodes from a template, and simulated pod lifetimes."""

from __future__ import annotations

import pytest

from kubus.api.manifests import parse_node
from kubus.api.synthetic import simulated_zones
from kubus.gpu_agent.simulation import pod_duration, simulated_node_names, simulated_nodes


def template():  # type: ignore[no-untyped-def]
    return parse_node(
        {
            "kind": "Node",
            "metadata": {"name": "tpl", "labels": {"pool": "a"}, "uid": "fixed-uid"},
            "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi"}},
        }
    )


def test_nodes_are_the_template_renamed() -> None:
    nodes = simulated_nodes(template(), 3, "gpu-")
    assert [n.name for n in nodes] == ["gpu-00000", "gpu-00001", "gpu-00002"]
    assert [n.metadata.labels["kubernetes.io/hostname"] for n in nodes] == [n.name for n in nodes]
    assert all(n.metadata.labels["pool"] == "a" for n in nodes)
    assert all(n.spec == template().spec and n.status == template().status for n in nodes)
    uids = [n.metadata.uid for n in nodes]
    assert len(set(uids)) == 3 and "fixed-uid" not in uids
    # Same name, same uid: a restarted simulation registers the same nodes.
    assert [n.metadata.uid for n in simulated_nodes(template(), 3, "gpu-")] == uids


def test_names_and_counts_are_checked() -> None:
    assert list(simulated_node_names(2)) == ["sim-00000", "sim-00001"]
    assert list(simulated_node_names(100_001))[-1] == "sim-100000"
    with pytest.raises(ValueError, match="not valid"):
        simulated_nodes(template(), 1, "Bad_")
    with pytest.raises(ValueError, match="expected 1 to"):
        simulated_nodes(template(), 0)


def test_durations_are_jittered_deterministically_per_pod() -> None:
    assert pod_duration("a", 0) == 0.0
    assert pod_duration("a", 30) == 30.0
    durations = [pod_duration(f"uid-{i}", 30, 0.5) for i in range(2000)]
    assert all(15.0 <= d <= 45.0 for d in durations)
    assert min(durations) < 17 and max(durations) > 43  # spread over the whole range
    assert 29 < sum(durations) / len(durations) < 31
    assert pod_duration("uid-7", 30, 0.5) == durations[7]
    with pytest.raises(ValueError, match="jitter"):
        pod_duration("a", 30, 1.5)


def zoned(zones: str):  # type: ignore[no-untyped-def]
    return parse_node(
        {
            "kind": "Node",
            "metadata": {
                "name": "tpl",
                "labels": {"pool": "a", "topology.kubernetes.io/zone": "template-zone"},
                "annotations": {"kubus.io/simulated-zones": zones},
            },
            "status": {"capacity": {"cpu": "4", "memory": "32Gi"}},
        }
    )


def test_zones_annotation_spreads_nodes_round_robin() -> None:
    assert simulated_zones(template()) == ()
    assert "topology.kubernetes.io/zone" not in simulated_nodes(template(), 2)[1].metadata.labels
    tpl = zoned(" moon-1, moon-2 ,moon-3")
    assert simulated_zones(tpl) == ("moon-1", "moon-2", "moon-3")
    nodes = simulated_nodes(tpl, 7)
    assert [n.metadata.labels["topology.kubernetes.io/zone"] for n in nodes] == [
        "moon-1", "moon-2", "moon-3", "moon-1", "moon-2", "moon-3", "moon-1",
    ]  # fmt: skip
    assert all(n.metadata.labels["pool"] == "a" for n in nodes)
    assert [n.metadata.labels["kubernetes.io/hostname"] for n in nodes] == [n.name for n in nodes]
    assert [n.metadata.labels["topology.kubernetes.io/zone"] for n in simulated_nodes(zoned("zone1"), 3)] == [
        "zone1"
    ] * 3
    assert tpl.metadata.labels["topology.kubernetes.io/zone"] == "template-zone"  # the template is untouched


@pytest.mark.parametrize(
    ("zones", "expected"),
    [
        ("", "zone 1 is empty"),
        ("moon-1,,moon-3", "zone 2 is empty"),
        ("moon-1,", "zone 2 is empty"),
        ("moon-1,-bad-", "zone 2 ('-bad-') is not a valid label value"),
    ],
)
def test_bad_zones_annotation_is_one_clear_error(zones: str, expected: str) -> None:
    with pytest.raises(ValueError, match=r"kubus\.io/simulated-zones") as info:
        simulated_nodes(zoned(zones), 3)
    assert expected in str(info.value) and "\n" not in str(info.value)
