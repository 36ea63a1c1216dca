import logging

import numpy as np
import pytest

from kubus.kernels.backend import NUMPY, BackendUnavailable, _logged, select_backend


def test_numpy_is_chosen_explicitly() -> None:
    assert select_backend("numpy") is NUMPY


def test_unknown_backend_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_BACKEND", "tpu")
    with pytest.raises(ValueError, match="KUBUS_BACKEND='tpu' is not one of auto, numpy, cupy"):
        select_backend()


def test_auto_is_numpy_gpu_or_not_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KUBUS_BACKEND", "auto")
    caplog.set_level(logging.INFO, logger="kubus.kernels.backend")
    _logged.clear()
    backend = select_backend()
    assert backend is NUMPY
    assert isinstance(backend.to_host(backend.asarray([1, 2])), np.ndarray)
    assert any("--backend cupy" in r.getMessage() for r in caplog.records)


def test_cupy_is_used_only_where_it_works_and_demanding_it_elsewhere_fails_loudly() -> None:
    try:
        import cupy

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        assert select_backend("cupy").name == "cupy"
        return
    with pytest.raises(BackendUnavailable, match="KUBUS_BACKEND=cupy but CuPy with a CUDA GPU is not available"):
        select_backend("cupy")
