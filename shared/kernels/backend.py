"""Array backend: numpy everywhere, CuPy on a CUDA GPU when asked for.

`KUBUS_BACKEND=auto|numpy|cupy` chooses; auto is numpy (`AUTO_REASON`), cupy needs CuPy and a
GPU. numpy is the reference: the CuPy path must give the same placements.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from kubus.core.errors import KubusError

BACKENDS = ("auto", "numpy", "cupy")

Array: TypeAlias = Any
"""An array of the backend: a numpy.ndarray, or a cupy.ndarray on a GPU. Any: CuPy ships no type
hints, and numpy's NDArray would refuse a cupy array (and its dtypes are set per column at run
time). Host-only arrays are typed `numpy.typing.NDArray` instead."""
ArrayModule: TypeAlias = ModuleType
"""The array module, numpy or cupy (`Backend.xp`); its attributes are untyped (ModuleType)."""

log = logging.getLogger(__name__)
_logged: set[tuple[str, str]] = set()


class BackendUnavailable(KubusError, RuntimeError):
    """KUBUS_BACKEND=cupy was asked for on a machine where CuPy or a GPU is missing."""


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    xp: ArrayModule
    """The array module: numpy or cupy."""

    @property
    def on_device(self) -> bool:
        return self.xp is not np

    def asarray(self, host: Sequence[int] | NDArray[np.generic]) -> Array:
        """Host data (list or numpy array) as an array of this backend."""
        return self.xp.asarray(host)

    def to_host(self, arr: Array) -> np.ndarray:
        """An array of this backend as a numpy array (no copy on numpy)."""
        host: np.ndarray = arr if self.xp is np else self.xp.asnumpy(arr)
        return host


NUMPY = Backend("numpy", np)


def _cupy() -> tuple[ModuleType | None, str]:
    """(cupy, "") when CuPy imports and sees a CUDA device, else (None, why not)."""
    try:
        import cupy
    except ImportError:
        return None, "cupy not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device"
    except Exception as e:  # CUDA present but unusable (no driver, driver too old...): no GPU here
        return None, f"CUDA unusable: {type(e).__name__}: {e}"
    return cupy, ""


def _chose(backend: Backend, why: str) -> Backend:
    """Log, once per process and outcome, which backend was chosen and why."""
    if (backend.name, why) not in _logged:
        _logged.add((backend.name, why))
        log.info("array backend=%s reason=%r", backend.name, why)
    return backend


AUTO_REASON = (
    "auto: numpy, also where a GPU is (measured on an H100, bench/scheduling.py: CuPy took 5-7 ms "
    "per pod up to 10,000 nodes against numpy's 0.5-1.7, and won only at 100,000 nodes, 7.7 against "
    "11.7 ms: its kernels are launched per plugin and per pod); --backend cupy to use the GPU"
)
"""Why auto is numpy: the CuPy path places pods like numpy but is slower at the sizes clusters have."""


def select_backend(name: str | None = None) -> Backend:
    """The backend named by `name`, else by KUBUS_BACKEND, else auto (numpy: `AUTO_REASON`).

    Raises ValueError for an unknown name and BackendUnavailable when cupy is demanded but absent.
    """
    choice = (name or os.environ.get("KUBUS_BACKEND") or "auto").strip().lower()
    if choice not in BACKENDS:
        raise ValueError(f"KUBUS_BACKEND={choice!r} is not one of {', '.join(BACKENDS)}")
    if choice == "numpy":
        return _chose(NUMPY, "numpy asked for")
    if choice == "auto":
        return _chose(NUMPY, AUTO_REASON)
    cupy, why_not = _cupy()
    if cupy is None:
        raise BackendUnavailable(f"KUBUS_BACKEND=cupy but CuPy with a CUDA GPU is not available ({why_not})")
    return _chose(Backend("cupy", cupy), "cupy asked for: CuPy sees a CUDA device")
