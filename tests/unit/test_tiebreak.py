import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kubus.kernels.tiebreak import mix, node_tie_hash, pod_tie_hash, stable_hash, tie_key, tie_keys


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50), st.integers(0, 2**64 - 1))
def test_array_form_equals_scalar_form(nodes: list[int], pod: int) -> None:
    keys = tie_keys(np, pod, np.array(nodes, dtype=np.uint64))
    assert [int(k) for k in keys] == [tie_key(pod, n) for n in nodes]


def test_hash_depends_on_seed_and_text_only() -> None:
    assert stable_hash(7, "node-1") == stable_hash(7, "node-1")
    assert stable_hash(7, "node-1") != stable_hash(8, "node-1")
    assert node_tie_hash(0, "a") != pod_tie_hash(0, "a")


def test_mix_spreads_consecutive_inputs() -> None:
    # the winner among tied nodes must not simply follow node order
    winners = {min(range(16), key=lambda n: mix(p ^ n)) for p in range(200)}
    assert len(winners) == 16
