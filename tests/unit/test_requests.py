"""kubus.api.requests against kube's tables (component-helpers resource helpers_test.go, and the
scheduler's NonZeroRequested/NonMissingContainerRequests behaviour)."""

from __future__ import annotations

import pytest
from builders import make_pod
from hypothesis import given
from hypothesis import strategies as st

from kubus.api.objects import Container, Pod
from kubus.api.requests import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    pod_nonzero_requests,
    pod_requests,
)

Gi = 2**30
Mi = 2**20


def c(name: str = "c", restart: str | None = None, **requests: int) -> Container:
    """A container; cpu in milli-CPU, memory in bytes."""
    return Container(name=name, requests=dict(requests), restart_policy=restart)


def sidecar(name: str = "s", **requests: int) -> Container:
    return c(name, restart="Always", **requests)


def pod(
    containers: list[Container] | None = None,
    init: list[Container] | None = None,
    overhead: dict[str, int] | None = None,
) -> Pod:
    return make_pod(containers=containers or (), init_containers=init or (), overhead=overhead)


# TestPodResourceRequests / TestPodRequestsAndLimits / TestPodResourceLimits (the same
# aggregation applies to requests and limits) from helpers_test.go, CPU in cores * 1000.
KUBE_CASES = [
    pytest.param(pod([c(cpu=1000)], init=[c("i", cpu=4000)]), {"cpu": 4000}, id="nil options, larger init container"),
    pytest.param(
        pod([c("a", cpu=2000), c("b", cpu=3000)], init=[c("i", cpu=2000)]),
        {"cpu": 5000},
        id="nil options, larger containers",
    ),
    pytest.param(
        pod([c("a", cpu=2000), c("b", cpu=3000)], init=[c("i", cpu=2000)], overhead={"cpu": 1000, "memory": Gi}),
        {"cpu": 6000, "memory": Gi},
        id="pod overhead included",
    ),
    pytest.param(pod(overhead={"cpu": 5000, "memory": 5}), {"cpu": 5000, "memory": 5}, id="just-overhead"),
    pytest.param(
        pod([c(cpu=1000, memory=10)], overhead={"cpu": 5000, "memory": 5}),
        {"cpu": 6000, "memory": 15},
        id="req-and-overhead",
    ),
    pytest.param(
        pod([c("a", cpu=1000, memory=5), c("b", cpu=4000, memory=12)]),
        {"cpu": 5000, "memory": 17},
        id="two container no overhead",
    ),
    pytest.param(
        pod(
            [c("a", cpu=1000, memory=5), c("b", cpu=4000, memory=12)],
            init=[c("small", cpu=1000, memory=5), c("big", cpu=40000, memory=120)],
            overhead={"cpu": 3000, "memory": 8},
        ),
        {"cpu": 43000, "memory": 128},
        id="two container with overhead, massive init (overhead on top)",
    ),
    pytest.param(pod([c(cpu=1000)], init=[sidecar(cpu=1000)]), {"cpu": 2000}, id="restartable init container"),
    pytest.param(
        pod(
            [c(cpu=1000)],
            init=[c("i1", cpu=5000), sidecar("r1", cpu=1000), sidecar("r2", cpu=2000), sidecar("r3", cpu=3000)],
        ),
        {"cpu": 7000},  # max(5, restartable (3+2+1) + regular (1)) = 7
        id="multiple restartable init containers",
    ),
    pytest.param(
        pod(
            [c(cpu=1000)],
            init=[
                c("i1", cpu=5000),
                sidecar("r1", cpu=1000),
                sidecar("r2", cpu=2000),
                c("i2", cpu=5000),
                sidecar("r3", cpu=3000),
            ],
        ),
        # i2 needs 5 + the restartable ones started before it (1+2) = 8; r3 starts after
        {"cpu": 8000},
        id="multiple restartable and regular init containers",
    ),
    pytest.param(
        pod([c(cpu=100_000)], init=[sidecar("r1", cpu=10_000), c("i1", cpu=200_000)]),
        {"cpu": 210_000},
        id="restartable-init, init and regular",
    ),
    pytest.param(
        pod([c(), c("b", cpu=2000, memory=2 * Gi)]),
        {"cpu": 2000, "memory": 2 * Gi},
        id="one requesting and one empty container",
    ),
    pytest.param(
        pod([c(cpu=1000)], init=[c("i", cpu=2000, memory=2 * Gi), c("j")]),
        {"cpu": 2000, "memory": 2 * Gi},
        id="one requesting and one empty init container",
    ),
    # fit.go's computePodResourceRequest comment: IC1 2/1G, IC2 2/3G, C1 2/1G, C2 1/1G -> 3/3G.
    pytest.param(
        pod(
            [c("c1", cpu=2000, memory=10**9), c("c2", cpu=1000, memory=10**9)],
            init=[c("ic1", cpu=2000, memory=10**9), c("ic2", cpu=2000, memory=3 * 10**9)],
        ),
        {"cpu": 3000, "memory": 3 * 10**9},
        id="computePodResourceRequest example",
    ),
    pytest.param(pod([c(cpu=0)]), {"cpu": 0}, id="explicit zero keeps its key"),
    pytest.param(
        pod([c(**{"nvidia.com/gpu": 2}), c("b", **{"nvidia.com/gpu": 1})], init=[c("i", **{"nvidia.com/gpu": 4})]),
        {"nvidia.com/gpu": 4},
        id="extended resources aggregate the same way",
    ),
    pytest.param(pod(), {}, id="no containers"),
]


@pytest.mark.parametrize(("p", "expected"), KUBE_CASES)
def test_pod_requests_kube_table(p: Pod, expected: dict[str, int]) -> None:
    assert pod_requests(p) == expected


def test_pod_requests_returns_a_new_dict() -> None:
    p = pod([c(cpu=1000)])
    first = pod_requests(p)
    first["cpu"] = 0
    assert pod_requests(p) == {"cpu": 1000}
    assert p.spec.containers[0].requests == {"cpu": 1000}


D_CPU, D_MEM = DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(pod([c()]), (D_CPU, D_MEM), id="no requests: defaults"),
        pytest.param(pod([c(cpu=500)]), (500, D_MEM), id="cpu given, memory defaulted"),
        pytest.param(pod([c(memory=Gi)]), (D_CPU, Gi), id="memory given, cpu defaulted"),
        pytest.param(pod([c(cpu=0, memory=0)]), (0, 0), id="explicit zeros stay zero"),
        pytest.param(pod([c("a", cpu=1000), c("b")]), (1000 + D_CPU, 2 * D_MEM), id="defaults apply per container"),
        pytest.param(
            pod([c(cpu=1000)], init=[c("i")]), (1000, D_MEM), id="init container without requests counts the defaults"
        ),
        pytest.param(pod([c()], init=[c("i", cpu=2000, memory=Gi)]), (2000, Gi), id="larger init container"),
        pytest.param(
            pod([c(cpu=1000)], init=[sidecar()]),
            (1000 + D_CPU, 2 * D_MEM),
            id="sidecar without requests adds the defaults",
        ),
        pytest.param(
            pod([c()], overhead={"cpu": 250, "memory": 64 * Mi}), (D_CPU + 250, D_MEM + 64 * Mi), id="overhead is added"
        ),
        pytest.param(
            pod(init=[c("i", cpu=1000)]), (1000, D_MEM), id="non missing container requests applied to init container"
        ),
        pytest.param(pod(), (0, 0), id="no containers"),
    ],
)
def test_pod_nonzero_requests(p: Pod, expected: tuple[int, int]) -> None:
    assert pod_nonzero_requests(p) == expected


def test_default_constants_match_kube() -> None:
    assert DEFAULT_MILLI_CPU_REQUEST == 100
    assert DEFAULT_MEMORY_REQUEST == 200 * 1024 * 1024


resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, 10**6), max_size=3)
containers = st.lists(resources, max_size=4)
inits = st.lists(st.tuples(resources, st.booleans()), max_size=4)


def reference(regular: list[dict[str, int]], init: list[tuple[dict[str, int], bool]], name: str) -> int:
    """The sidecar KEP formula for one resource, written out directly."""
    total = sum(r.get(name, 0) for r in regular) + sum(r.get(name, 0) for r, s in init if s)
    peak, started = 0, 0
    for r, is_sidecar in init:
        if is_sidecar:
            started += r.get(name, 0)
            peak = max(peak, started)
        else:
            peak = max(peak, r.get(name, 0) + started)
    return max(total, peak)


@given(regular=containers, init=inits)
def test_pod_requests_matches_the_kep_formula(
    regular: list[dict[str, int]], init: list[tuple[dict[str, int], bool]]
) -> None:
    p = pod(
        [c(f"c{i}", **r) for i, r in enumerate(regular)],
        init=[c(f"i{i}", restart="Always" if s else None, **r) for i, (r, s) in enumerate(init)],
    )
    got = pod_requests(p)
    for name in ("cpu", "memory", "nvidia.com/gpu"):
        assert got.get(name, 0) == reference(regular, init, name)
    cpu, memory = pod_nonzero_requests(p)
    assert cpu >= got.get("cpu", 0)
    assert memory >= got.get("memory", 0)
