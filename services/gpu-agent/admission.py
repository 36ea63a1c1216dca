"""Admission: does a bound pod fit the node as it really is, next to the pods running there?

The scheduler decided on Redis' accounting; the node's agent checks again against its own view,
as kubelet's admission does (its reasons too: ``OutOfcpu``, ``OutOfpods``, ...): the node's real
allocatable minus the pods running on it now, the host ports they hold, and for GPUs the actual
devices, which must exist, be healthy (NVML, when present) and be free (a whole device held by
nobody else; a shared one with the slice's memory left).

Pure and synchronous, so an agent can decide and record a pod in one step, with no other
admission on the node in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kubus.api.objects import PODS, Node
from kubus.store import Reservation

__all__ = ["Verdict", "admit"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Admitted, or why not: ``reason`` CamelCase as kubelet's, ``message`` one line."""

    admitted: bool
    reason: str = ""
    message: str = ""


_ADMITTED = Verdict(True)


def admit(
    node: Node,
    pod: Reservation,
    running: Iterable[Reservation],
    *,
    device_healthy: Callable[[int], bool] | None = None,
) -> Verdict:
    """Whether ``pod`` (its reservation: requests, ports, devices) can start on ``node`` next to
    the ``running`` pods (not including ``pod``). ``device_healthy`` asks the hardware about a
    GPU (NVML); without it the node's own GPU list is trusted. The first failing check wins,
    in kubelet's order: pods, resources, host ports, GPU devices."""
    others = [r for r in running if r.pod_uid != pod.pod_uid]
    allocatable: Mapping[str, int] = node.status.allocatable

    capacity = allocatable.get(PODS, 0)
    if len(others) + 1 > capacity:
        return Verdict(False, "OutOfpods", f"Node didn't have enough resource: pods, capacity: {capacity}")

    for resource, wanted in pod.requests.items():
        if wanted <= 0 or resource == PODS or resource in pod.ignored:
            continue
        used = sum(r.requests.get(resource, 0) for r in others)
        have = allocatable.get(resource, 0)
        if wanted > have - used:
            return Verdict(
                False,
                f"OutOf{resource}",
                f"Node didn't have enough resource: {resource}, requested: {wanted}, used: {used}, capacity: {have}",
            )

    for ip, protocol, port in pod.host_ports:
        for other in others:
            for other_ip, other_protocol, other_port in other.host_ports:
                same_port = (protocol, port) == (other_protocol, other_port)
                if same_port and (ip == other_ip or "0.0.0.0" in (ip, other_ip)):
                    return Verdict(False, "NodePorts", f"host port {protocol}/{port} is in use by pod {other.pod_key}")

    devices = {g.index: g for g in node.gpus}
    for index in pod.gpu_devices:
        device = devices.get(index)
        if device is None:
            return Verdict(False, "UnexpectedAdmissionError", f"gpu {index} does not exist on node {node.name}")
        if not device.healthy or (device_healthy is not None and not device_healthy(index)):
            return Verdict(False, "UnexpectedAdmissionError", f"gpu {index} on node {node.name} is unhealthy")
        holders = [r for r in others if index in r.gpu_devices]
        if not pod.gpu_shared:
            if holders:
                return Verdict(False, "UnexpectedAdmissionError", f"gpu {index} is in use by pod {holders[0].pod_key}")
            continue
        used = sum(device.memory if not r.gpu_shared else r.gpu_memory for r in holders)
        if device.memory - used < pod.gpu_memory:
            return Verdict(
                False,
                "UnexpectedAdmissionError",
                f"gpu {index} has {device.memory - used} bytes free, the pod wants {pod.gpu_memory}",
            )
    return _ADMITTED
