"""rms_norm edge cases: empties, non-contiguous inputs (same bits), nan/inf rows, thread counts, the module."""

import math

import pytest
import torch

import tileport

BACKENDS = ["tilelang", "torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_give_the_bits_of_their_contiguous_copies(backend, randn):
    base, wbase = randn(24, 2, 300, dtype=torch.bfloat16), randn(600, dtype=torch.bfloat16, seed=4)
    x, w = base[:, 1, :], wbase[::2]  # strided rows, strided weight
    dy = randn(300, 24, dtype=torch.bfloat16, seed=5).t()  # transposed
    y, r = tileport.rms_norm_fwd(x, w, backend=backend)
    yc, rc = tileport.rms_norm_fwd(x.contiguous(), w.contiguous(), backend=backend)
    assert torch.equal(y, yc) and torch.equal(r, rc)
    dx, dw = tileport.rms_norm_bwd(x, r, dy, w, backend=backend, eps=1e-6)
    dxc, dwc = tileport.rms_norm_bwd(x.contiguous(), rc, dy.contiguous(), w.contiguous(), backend=backend, eps=1e-6)
    assert torch.equal(dx, dxc) and torch.equal(dw, dwc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_rows_affect_only_their_row(backend, randn):
    x, w, dy = randn(6, 100), randn(100, seed=1), randn(6, 100, seed=2)
    bad = x.clone()
    bad[1, 3], bad[4, 7] = math.nan, math.inf
    y, r = tileport.rms_norm_fwd(bad, w, backend=backend)
    y0, r0 = tileport.rms_norm_fwd(x, w, backend=backend)
    clean = [0, 2, 3, 5]
    assert torch.equal(y[clean], y0[clean]) and torch.equal(r[clean], r0[clean])
    assert torch.isnan(y[1]).all() and not torch.isfinite(y[4]).all()
    dx, _ = tileport.rms_norm_bwd(bad, r, dy, w, backend=backend)
    dx0, _ = tileport.rms_norm_bwd(x, r0, dy, w, backend=backend)
    assert torch.equal(dx[clean], dx0[clean])


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
@pytest.mark.parametrize("shape", [(0, 16), (3, 0, 8), (4, 0)])
def test_empty_inputs(shape, backend):
    x = torch.randn(shape)
    w = torch.randn(shape[-1])
    y, rstd = tileport.rms_norm_fwd(x, w, backend=backend)
    assert y.shape == x.shape and rstd.shape == x.shape[:-1]
    if rstd.numel():  # D = 0: the mean of nothing is nan, as torch's mean
        assert torch.isnan(rstd).all()
    dx, dw = tileport.rms_norm_bwd(x, rstd, torch.randn(shape), w, backend=backend)
    assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(w))


def test_module_is_a_drop_in_for_torch_rmsnorm(randn):
    ours, theirs = tileport.RMSNorm((4, 64), eps=1e-5), torch.nn.RMSNorm((4, 64), eps=1e-5)
    assert ours.weight.shape == theirs.weight.shape == (4, 64)
    with torch.no_grad():
        w = randn(4, 64, seed=9)
        ours.weight.copy_(w)
        theirs.weight.copy_(w)
    x = randn(3, 4, 64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=2e-6, atol=2e-6)
    ours(x).sum().backward()
    theirs(x).sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-4)
    assert tileport.RMSNorm(64, elementwise_affine=False).weight is None
    assert torch.equal(tileport.RMSNorm(8, offset=1.0).weight, torch.zeros(8))  # Gemma: scale (0 + 1) starts at 1


def test_module_refuses_input_of_the_wrong_trailing_shape():
    with pytest.raises(ValueError, match=r"RMSNorm over \(64,\) expects input of shape \[\*, 64\], got \(2, 32\)"):
        tileport.RMSNorm(64)(torch.randn(2, 32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [5, 100])  # within one block of rows, and across the blocks' partials
def test_an_inf_gradient_column_sums_to_inf_not_nan(backend, rows):
    """dweight sums dy * n over rows: with dy all inf and n > 0 that is +inf, as torch's sum gives (a
    compensated sum whose compensation goes inf - inf = nan must not turn it into nan)."""
    x = torch.rand(rows, 7) + 0.1
    dy, w = torch.full((rows, 7), math.inf), torch.rand(7) + 0.5
    _, rstd = tileport.rms_norm_fwd(x, w, backend="torch")
    _, dw = tileport.rms_norm_bwd(x, rstd, dy, w, backend=backend)
    assert torch.isposinf(dw).all(), dw
