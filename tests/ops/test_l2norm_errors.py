"""Bad input to l2norm raises TypeError / ValueError naming the problem."""

import math

import pytest
import torch

import tileport
from tileport import BackendUnavailableError


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_non_floating_dtypes(dtype):
    x = torch.ones(4, 8, dtype=dtype)
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        tileport.l2norm(x)
    with pytest.raises(TypeError, match="floating dtype"):
        tileport.l2norm_fwd(x)


def test_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        tileport.l2norm([1.0, 2.0])


def test_zero_dim_tensor():
    with pytest.raises(ValueError, match="0-dim"):
        tileport.l2norm(torch.tensor(1.0))


@pytest.mark.parametrize("eps", [-1e-6, math.nan, math.inf, -math.inf])
def test_bad_eps_values(eps):
    with pytest.raises(ValueError, match="eps must be finite and >= 0"):
        tileport.l2norm(torch.randn(2, 4), eps=eps)
    with pytest.raises(ValueError, match="eps"):
        tileport.L2Norm(eps=eps)


@pytest.mark.parametrize("eps", ["1e-6", None, True, torch.tensor(1e-6)])
def test_bad_eps_types(eps):
    with pytest.raises(TypeError, match="eps must be a real number"):
        tileport.l2norm_fwd(torch.randn(2, 4), eps=eps)


@pytest.mark.parametrize("out", [torch.int32, "float16", torch.complex64])
def test_bad_output_dtype(out):
    with pytest.raises(TypeError, match="output_dtype must be None or a floating torch.dtype"):
        tileport.l2norm(torch.randn(2, 4), output_dtype=out)


def test_backward_shape_mismatches():
    x = torch.randn(3, 5, 8)
    _, rstd = tileport.l2norm_fwd(x)
    with pytest.raises(ValueError, match=r"dy must have x's shape \(3, 5, 8\), got \(3, 5, 7\)"):
        tileport.l2norm_bwd(x, rstd, torch.randn(3, 5, 7))
    with pytest.raises(ValueError, match=r"rstd must have shape x.shape\[:-1\] = \(3, 5\), got \(15,\)"):
        tileport.l2norm_bwd(x, rstd.reshape(-1), torch.randn(3, 5, 8))
    with pytest.raises(TypeError, match="rstd must be a floating"):
        tileport.l2norm_bwd(x, rstd.to(torch.int32), torch.randn(3, 5, 8))
    with pytest.raises(TypeError, match="dy must have a floating dtype"):
        tileport.l2norm_bwd(x, rstd, torch.ones(3, 5, 8, dtype=torch.int64))


def test_backward_device_mismatch():
    x = torch.randn(3, 8)
    _, rstd = tileport.l2norm_fwd(x)
    with pytest.raises(ValueError, match="one device"):
        tileport.l2norm_bwd(x, rstd, torch.empty(3, 8, device="meta"))


def test_device_no_backend_serves():
    with pytest.raises(BackendUnavailableError, match="no backend serves tensors on device 'meta'") as info:
        tileport.l2norm_fwd(torch.empty(4, 8, device="meta"))
    assert isinstance(info.value, ValueError)


def test_unknown_backend_name():
    with pytest.raises(BackendUnavailableError, match="unknown backend 'cutlass'; known backends: tilelang, torch"):
        tileport.l2norm(torch.randn(2, 4), backend="cutlass")


def test_forced_backend_that_cannot_run_says_why():
    x = torch.randn(2, 4, dtype=torch.float64)
    with pytest.raises(BackendUnavailableError, match="forced backend='tilelang' cannot run.*does not support float64"):
        tileport.l2norm(x, backend="tilelang")
    with pytest.raises(BackendUnavailableError, match="does not support float64"):
        tileport.l2norm(torch.randn(2, 4), output_dtype=torch.float64, backend="tilelang")


def test_environment_override(monkeypatch):
    monkeypatch.setenv("TILEPORT_BACKEND", "torch")
    x = torch.randn(2, 4, dtype=torch.float64)
    assert tileport.l2norm_fwd(x)[0].dtype == torch.float64
    monkeypatch.setenv("TILEPORT_BACKEND", "tilelang")
    with pytest.raises(BackendUnavailableError, match=r"\$TILEPORT_BACKEND='tilelang' cannot run"):
        tileport.l2norm_fwd(x)
    monkeypatch.setenv("TILEPORT_BACKEND", "nope")
    with pytest.raises(BackendUnavailableError, match="unknown backend 'nope'"):
        tileport.l2norm_fwd(x)


def test_bad_out_tensors_are_named():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match=r"out must be a \(y, rstd\) pair"):
        tileport.l2norm_fwd(x, out=torch.empty(4, 8))
    with pytest.raises(ValueError, match=r"out\[0\] \(y\) must be torch.float32 of shape \(4, 8\)"):
        tileport.l2norm_fwd(x, out=(torch.empty(4, 9), torch.empty(4)))
    with pytest.raises(ValueError, match=r"out\[1\] \(rstd\) must be torch.float32 of shape \(4,\)"):
        tileport.l2norm_fwd(x, out=(torch.empty(4, 8), torch.empty(4, dtype=torch.float16)))
    with pytest.raises(ValueError, match=r"out\[0\] \(y\) must be contiguous"):
        tileport.l2norm_fwd(x, out=(torch.empty(8, 4).t(), torch.empty(4)))
