"""The agent's admission: the real-state check of a bound pod against the node and its running pods."""

from __future__ import annotations

from typing import Any

from kubus.api.manifests import parse_node, parse_pod
from kubus.api.objects import Node
from kubus.core import codec
from kubus.gpu_agent.admission import Verdict, admit
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import Reservation

GI = 1024**3


def node(*, cpu: str = "4", pods: int = 10, gpus: int = 2, unhealthy: tuple[int, ...] = ()) -> Node:
    meta: dict[str, Any] = {"name": "n1"}
    if gpus:
        devices = [{"index": i, "model": "H100", "memory": "80Gi", "healthy": i not in unhealthy} for i in range(gpus)]
        meta["annotations"] = {"kubus.io/gpus": codec.dumps(devices).decode()}
    return parse_node(
        {"kind": "Node", "metadata": meta, "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": pods}}}
    )


def pod(
    name: str,
    *,
    cpu: str = "1",
    whole: int = 0,
    shared: str | None = None,
    devices: tuple[int, ...] = (),
    host_port: int | None = None,
    host_ip: str | None = None,
) -> Reservation:
    requests: dict[str, Any] = {"cpu": cpu, "memory": "1Gi"}
    if whole:
        requests["nvidia.com/gpu"] = whole
    container: dict[str, Any] = {"name": "c", "image": "i", "resources": {"requests": requests}}
    if host_port:
        port: dict[str, Any] = {"containerPort": 80, "hostPort": host_port}
        if host_ip:
            port["hostIP"] = host_ip
        container["ports"] = [port]
    annotations = {"kubus.io/gpu-memory": shared} if shared else {}
    parsed = parse_pod(
        {"kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": {"containers": [container]}}
    )
    return Reservation.of(PodInfo.of(parsed).placed_on(devices), "n1", attempt=1)


def test_a_pod_that_fits_is_admitted() -> None:
    assert admit(node(), pod("a"), [pod("b"), pod("c")]) == Verdict(True)


def test_resources_are_checked_against_the_running_pods() -> None:
    verdict = admit(node(cpu="4"), pod("a", cpu="2"), [pod("b", cpu="1500m"), pod("c", cpu="1")])
    assert verdict == Verdict(
        False, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 2500, capacity: 4000"
    )
    # The pod itself among the running ones (a redelivery) does not count against itself.
    assert admit(node(cpu="4"), pod("a", cpu="3"), [pod("a", cpu="3"), pod("b", cpu="1")]).admitted


def test_pods_are_counted() -> None:
    verdict = admit(node(pods=2), pod("a"), [pod("b"), pod("c")])
    assert (verdict.admitted, verdict.reason) == (False, "OutOfpods")


def test_host_ports_follow_kube_rules() -> None:
    assert admit(node(), pod("a", host_port=80), [pod("b", host_port=80)]).reason == "NodePorts"
    assert admit(node(), pod("a", host_port=80, host_ip="10.0.0.1"), [pod("b", host_port=80)]).reason == "NodePorts"
    two_ips = admit(node(), pod("a", host_port=80, host_ip="10.0.0.1"), [pod("b", host_port=80, host_ip="10.0.0.2")])
    assert two_ips.admitted
    assert admit(node(), pod("a", host_port=81), [pod("b", host_port=80)]).admitted


def test_whole_gpus_must_exist_be_healthy_and_free() -> None:
    assert admit(node(), pod("a", whole=1, devices=(1,)), [pod("b", whole=1, devices=(0,))]).admitted
    busy = admit(node(), pod("a", whole=1, devices=(0,)), [pod("b", whole=1, devices=(0,))])
    assert (busy.reason, busy.message) == ("UnexpectedAdmissionError", "gpu 0 is in use by pod default/b")
    missing = admit(node(gpus=2), pod("a", whole=1, devices=(5,)), [])
    assert missing.message == "gpu 5 does not exist on node n1"
    assert admit(node(unhealthy=(1,)), pod("a", whole=1, devices=(1,)), []).message == "gpu 1 on node n1 is unhealthy"
    # The hardware has the last word (NVML): a device the node lists as healthy but that fails now.
    assert not admit(node(), pod("a", whole=1, devices=(0,)), [], device_healthy=lambda i: i != 0).admitted
    assert admit(node(), pod("a", whole=1, devices=(1,)), [], device_healthy=lambda i: i != 0).admitted


def test_shared_gpus_need_memory_left() -> None:
    slices = [pod("b", shared="40Gi", devices=(0,)), pod("c", shared="30Gi", devices=(0,))]
    assert admit(node(), pod("a", shared="10Gi", devices=(0,)), slices).admitted
    full = admit(node(), pod("a", shared="20Gi", devices=(0,)), slices)
    assert (full.admitted, full.message) == (False, f"gpu 0 has {10 * GI} bytes free, the pod wants {20 * GI}")
    # A device held whole has no memory left to share.
    assert not admit(node(), pod("a", shared="1Gi", devices=(0,)), [pod("b", whole=1, devices=(0,))]).admitted
