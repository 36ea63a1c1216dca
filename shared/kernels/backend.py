"""Array backend: numpy everywhere, CuPy where a CUDA GPU is present.

`KUBUS_BACKEND=auto|numpy|cupy` chooses; auto takes CuPy only when it imports and sees a GPU.
numpy is the reference: the CuPy path must give the same placements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

BACKENDS = ("auto", "numpy", "cupy")


class BackendUnavailable(RuntimeError):
    """KUBUS_BACKEND=cupy was asked for on a machine where CuPy or a GPU is missing."""


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    xp: ModuleType
    """The array module: numpy or cupy."""

    @property
    def on_device(self) -> bool:
        return self.xp is not np

    def asarray(self, host: Any) -> Any:
        """Host data (list or numpy array) as an array of this backend."""
        return self.xp.asarray(host)

    def to_host(self, arr: Any) -> np.ndarray:
        """An array of this backend as a numpy array (no copy on numpy)."""
        return arr if self.xp is np else self.xp.asnumpy(arr)


NUMPY = Backend("numpy", np)


def _cupy() -> ModuleType | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # ImportError, or CUDA present but unusable: both mean "no GPU here"
        return None


def select_backend(name: str | None = None) -> Backend:
    """The backend named by `name`, else by KUBUS_BACKEND, else auto.

    Raises ValueError for an unknown name and BackendUnavailable when cupy is demanded but absent.
    """
    choice = (name or os.environ.get("KUBUS_BACKEND") or "auto").strip().lower()
    if choice not in BACKENDS:
        raise ValueError(f"KUBUS_BACKEND={choice!r} is not one of {', '.join(BACKENDS)}")
    if choice == "numpy":
        return NUMPY
    cupy = _cupy()
    if cupy is not None:
        return Backend("cupy", cupy)
    if choice == "cupy":
        raise BackendUnavailable("KUBUS_BACKEND=cupy but CuPy with a CUDA GPU is not available")
    return NUMPY
