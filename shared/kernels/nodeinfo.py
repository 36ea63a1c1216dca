"""NodeInfo: one node and the pods on it, aggregated as kube-scheduler's framework.NodeInfo does.

This is the per-node truth the node table (`kubus.kernels.node_table`) keeps in step with its
arrays, and what node-at-a-time plugins (`kubus.framework.nodewise`) read. It lives with the node
table, below the framework, so that the kernels never import the framework. Adding and removing pods is
incremental: O(resources of the pod), never a rescan of the node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kubus.api.gpus import GPURequest, pod_gpu_request
from kubus.api.objects import Node, Pod
from kubus.api.pod_affinity import PodAffinityTerms
from kubus.api.requests import pod_nonzero_requests, pod_requests

DEFAULT_BIND_ALL_HOST_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod with what scheduling derives from it, computed once."""

    pod: Pod
    requests: dict[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    host_ports: tuple[tuple[str, str, int], ...]
    """(hostIP, protocol, hostPort) for every container port with hostPort > 0, sanitized."""
    gpu: GPURequest | None
    gpu_devices: tuple[int, ...] = ()
    """Indices of the node's GPUs this pod holds (empty until placed)."""
    affinity: PodAffinityTerms | None = None
    """Its podAffinity / podAntiAffinity terms, resolved (None: it has none)."""
    start_time: float = 0.0
    """When it started on its node (seconds since the epoch; kube's pod.Status.StartTime): the
    time it was reserved there; 0 when unknown. Preemption prefers to evict the newest."""
    label_key: tuple[str, tuple[tuple[str, str], ...], bool] = field(init=False, repr=False, compare=False)
    """(namespace, sorted labels, terminating): the pod's group in
    `kubus.kernels.pod_index.PodIndex`, computed once here (the pod's labels and deletionTimestamp
    as they were when this PodInfo was made)."""

    def __post_init__(self) -> None:
        meta = self.pod.metadata
        key = (meta.namespace, tuple(sorted(meta.labels.items())), meta.deletion_timestamp is not None)
        object.__setattr__(self, "label_key", key)

    @classmethod
    def of(cls, pod: Pod, gpu_devices: tuple[int, ...] = (), start_time: float = 0.0) -> PodInfo:
        cpu, mem = pod_nonzero_requests(pod)
        return cls(
            pod=pod,
            requests=pod_requests(pod),
            non_zero_cpu=cpu,
            non_zero_memory=mem,
            host_ports=pod_host_ports(pod),
            gpu=pod_gpu_request(pod),
            gpu_devices=gpu_devices,
            affinity=PodAffinityTerms.of(pod),
            start_time=start_time,
        )

    def for_pod(self, pod: Pod, gpu_devices: tuple[int, ...] = ()) -> PodInfo:
        """``pod``'s PodInfo from this one of another pod of its class (`pod_class_key`: equal
        namespace, labels, annotations and spec, so equal requests, ports, GPU request and
        affinity terms), on ``gpu_devices``: nothing derived again."""
        return PodInfo(
            pod,
            self.requests,
            self.non_zero_cpu,
            self.non_zero_memory,
            self.host_ports,
            self.gpu,
            gpu_devices,
            self.affinity,
            self.start_time,
        )

    def placed_on(self, gpu_devices: tuple[int, ...]) -> PodInfo:
        return self.for_pod(self.pod, gpu_devices)


def pod_host_ports(pod: Pod) -> tuple[tuple[str, str, int], ...]:
    """Host ports a pod wants, as kube's getContainerPorts + HostPortInfo.sanitize see them.

    Regular containers and restartable (sidecar) init containers count; plain init containers
    have exited before the pod runs, so they do not.
    """
    ports = []
    containers = list(pod.spec.containers) + [c for c in pod.spec.init_containers if c.restart_policy == "Always"]
    for container in containers:
        for p in container.ports:
            if p.host_port <= 0:
                continue
            ports.append((p.host_ip or DEFAULT_BIND_ALL_HOST_IP, p.protocol or "TCP", p.host_port))
    return tuple(ports)


def host_port_conflicts(used: Counter[tuple[str, str, int]], ip: str, protocol: str, port: int) -> bool:
    """kube's HostPortInfo.CheckConflict: 0.0.0.0 conflicts with every IP on the same port."""
    if port <= 0:
        return False
    if ip == DEFAULT_BIND_ALL_HOST_IP:
        return any(u_proto == protocol and u_port == port for (_, u_proto, u_port) in used)
    return used[(ip, protocol, port)] > 0 or used[(DEFAULT_BIND_ALL_HOST_IP, protocol, port)] > 0


@dataclass(slots=True, eq=False)
class NodeInfo:
    """A node, the pods assigned to it (bound, reserved or assumed) and their sums."""

    node: Node
    pods: dict[str, PodInfo] = field(default_factory=dict)
    """Pod key (namespace/name) -> PodInfo."""
    requested: Counter[str] = field(default_factory=Counter)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    used_ports: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    gpu_free_memory: list[int] = field(default_factory=list)
    """Free memory per GPU device, bytes, indexed like node.gpus."""
    gpu_pod_count: list[int] = field(default_factory=list)
    """Pods holding each GPU device."""
    generation: int = 0
    """Bumped by every `add_pod` and `remove_pod`: what was derived from the pods on the node at
    one generation still holds while it is unchanged (the same NodeInfo object)."""

    def __post_init__(self) -> None:
        if not self.gpu_free_memory:
            self.gpu_free_memory = [g.memory for g in self.node.gpus]
            self.gpu_pod_count = [0] * len(self.node.gpus)

    @property
    def name(self) -> str:
        return self.node.metadata.name

    @property
    def allocatable(self) -> dict[str, int]:
        return self.node.status.allocatable

    def add_pod(self, info: PodInfo) -> None:
        """Account a pod on this node. Raises KeyError if the pod is already here."""
        key = info.pod.key
        if key in self.pods:
            raise KeyError(f"pod {key} is already on node {self.name}")
        self.pods[key] = info
        self.generation += 1
        requested = self.requested
        for name, qty in info.requests.items():
            requested[name] += qty
        self.non_zero_cpu += info.non_zero_cpu
        self.non_zero_memory += info.non_zero_memory
        if info.host_ports:
            self.used_ports.update(info.host_ports)
        if info.gpu is not None:
            self._account_gpus(info, +1)

    def remove_pod(self, key: str) -> PodInfo:
        """Forget a pod on this node and return it. Raises KeyError if it is not here."""
        info = self.pods.pop(key)
        self.generation += 1
        requested = self.requested
        for name, qty in info.requests.items():
            requested[name] -= qty
        self.non_zero_cpu -= info.non_zero_cpu
        self.non_zero_memory -= info.non_zero_memory
        if info.host_ports:
            # every count stays positive: the ports this pod's removal took to 0 go
            used = self.used_ports
            used.subtract(info.host_ports)
            for port in info.host_ports:
                if port in used and used[port] <= 0:
                    del used[port]
        if info.gpu is not None:
            self._account_gpus(info, -1)
        return info

    def _account_gpus(self, info: PodInfo, sign: int) -> None:
        if info.gpu is None:
            return
        for d in info.gpu_devices:
            if not 0 <= d < len(self.gpu_free_memory):
                continue  # a device the node no longer reports; nothing to account against
            self.gpu_free_memory[d] -= sign * gpu_memory_taken(info.gpu, self.node.gpus[d].memory)
            self.gpu_pod_count[d] += sign


def gpu_memory_taken(request: GPURequest, device_memory: int) -> int:
    """Memory a GPU request holds on one device: all of it for a whole GPU, its share otherwise."""
    return request.memory if request.shared else device_memory
