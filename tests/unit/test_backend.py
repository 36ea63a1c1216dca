import numpy as np
import pytest

from kubus.kernels.backend import NUMPY, BackendUnavailable, select_backend


def test_numpy_is_chosen_explicitly() -> None:
    assert select_backend("numpy") is NUMPY


def test_unknown_backend_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_BACKEND", "tpu")
    with pytest.raises(ValueError, match="KUBUS_BACKEND='tpu' is not one of auto, numpy, cupy"):
        select_backend()


def test_auto_falls_back_to_numpy_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBUS_BACKEND", "auto")
    backend = select_backend()
    try:
        import cupy

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    assert backend.name == ("cupy" if has_gpu else "numpy")
    assert isinstance(backend.to_host(backend.asarray([1, 2])), np.ndarray)


def test_demanding_cupy_without_it_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    if select_backend("auto").name == "cupy":
        pytest.skip("a GPU is present; the failure path cannot happen here")
    with pytest.raises(BackendUnavailable):
        select_backend("cupy")
