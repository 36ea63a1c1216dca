"""What a pod asks of a node: kube's `resourcehelper.PodRequests`, as the scheduler uses it.

`pod_requests` is what NodeResourcesFit's `computePodResourceRequest` and NodeInfo's
`Requested` add up; `pod_nonzero_requests` is what the scoring plugins (LeastAllocated,
MostAllocated, BalancedAllocation) and NodeInfo's `NonZeroRequested` add up. Both follow the
sidecar KEP (753) formula:

    requests = max( sum(containers) + sum(restartable init containers),
                    max over init containers i of: init i + restartable init containers before i )
               + overhead

per resource. A restartable init container is one with `restartPolicy: Always` (a sidecar): it
keeps running next to the regular containers, so it adds to the sum; a plain init container runs
alone, next to only the sidecars started before it.

Requests already hold the API server's defaulting (a limit without a request is the request;
see kubus.api.manifests). Pod-level resources (`spec.resources`) are not modelled. Like kube's
ResourceList, a resource requested explicitly as 0 keeps its key.

One difference that only sub-unit values can show: kube sums exact quantities and rounds the
total up, kubus rounds each container's quantity up when the manifest is read (objects hold
integers), so two containers asking 0.5m CPU each sum to 2m here, 1m in kube.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubus.api.objects import CPU, MEMORY, Pod

DEFAULT_MILLI_CPU_REQUEST = 100
"""kube's schedutil.DefaultMilliCPURequest: 0.1 core, for a container that requests no CPU."""

DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""kube's schedutil.DefaultMemoryRequest: 200 MiB, for a container that requests no memory."""

_NON_MISSING = {CPU: DEFAULT_MILLI_CPU_REQUEST, MEMORY: DEFAULT_MEMORY_REQUEST}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def _max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if name not in total or amount > total[name]:
            total[name] = amount


def _with_defaults(requests: Mapping[str, int], defaults: Mapping[str, int] | None) -> Mapping[str, int]:
    """kube's applyNonMissing: fill in resources the container does not mention (0 stays 0)."""
    if not defaults:
        return requests
    filled = dict(requests)
    for name, amount in defaults.items():
        filled.setdefault(name, amount)
    return filled


def _aggregate(pod: Pod, defaults: Mapping[str, int] | None) -> dict[str, int]:
    """kube's aggregateContainerResourcesByFn over spec requests, then + overhead."""
    result: dict[str, int] = {}
    for container in pod.spec.containers:
        _add(result, _with_defaults(container.requests, defaults))

    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in pod.spec.init_containers:
        requests = _with_defaults(container.requests, defaults)
        if container.restart_policy == "Always":
            _add(result, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max(init_peak, running)
    _max(result, init_peak)

    _add(result, pod.spec.overhead)
    return result


def pod_requests(pod: Pod) -> dict[str, int]:
    """kube's `PodRequests(pod, PodResourcesOptions{})`, in kubus base units; a new dict."""
    return _aggregate(pod, None)


def pod_nonzero_requests(pod: Pod) -> tuple[int, int]:
    """(milli-CPU, memory bytes) as kube's scoring counts them, overhead included.

    The same aggregation as `pod_requests`, but every container (init containers too) that does
    not mention `cpu` counts DEFAULT_MILLI_CPU_REQUEST, and one that does not mention `memory`
    counts DEFAULT_MEMORY_REQUEST (kube's `NonMissingContainerRequests`); an explicit 0 stays 0.
    """
    total = _aggregate(pod, _NON_MISSING)
    return total.get(CPU, 0), total.get(MEMORY, 0)
