"""The seeded tie-break among nodes with equal best scores.

kube-scheduler picks uniformly at random among the top-scored nodes. kubus picks the node with
the smallest key `mix(node_hash ^ pod_hash)`: as fair as random across pods, but a function of
(seed, pod, node) alone, so a run is reproducible and a batch decides exactly as one-by-one
scheduling does, whatever order nodes were evaluated in.
"""

from __future__ import annotations

import hashlib

from kubus.kernels.backend import Array, ArrayModule

_MASK = (1 << 64) - 1


def stable_hash(seed: int, text: str) -> int:
    """A 64-bit hash of `text` under `seed`, the same on every machine and run."""
    h = hashlib.blake2b(text.encode(), digest_size=8, key=seed.to_bytes(8, "little", signed=False))
    return int.from_bytes(h.digest(), "little")


def mix(x: int) -> int:
    """splitmix64's finalizer, on one integer."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def mix_array(xp: ArrayModule, x: Array) -> Array:
    """splitmix64's finalizer over a uint64 array (numpy or CuPy), equal to `mix` elementwise."""
    x = x.astype(xp.uint64, copy=True)
    x ^= x >> xp.uint64(30)
    x *= xp.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> xp.uint64(27)
    x *= xp.uint64(0x94D049BB133111EB)
    x ^= x >> xp.uint64(31)
    return x


def pod_tie_hash(seed: int, pod_uid_or_key: str) -> int:
    return stable_hash(seed, "pod/" + pod_uid_or_key)


def node_tie_hash(seed: int, node_name: str) -> int:
    return stable_hash(seed, "node/" + node_name)


def tie_key(pod_hash: int, node_hash: int) -> int:
    """The key one node gets for one pod; the smallest key wins among equal scores."""
    return mix(pod_hash ^ node_hash)


def tie_keys(xp: ArrayModule, pod_hash: int, node_hashes: Array) -> Array:
    """`tie_key` for many nodes at once; node_hashes is a uint64 array."""
    return mix_array(xp, node_hashes ^ xp.uint64(pod_hash))


__all__ = ["mix", "mix_array", "node_tie_hash", "pod_tie_hash", "stable_hash", "tie_key", "tie_keys"]
