"""l2norm edge cases that must work: empties, D = 1, zero rows, nan/inf rows, threads."""

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import tileport

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def l2_golden(golden, x, eps=1e-6):
    """(y, rstd) of the float64 golden."""
    g = golden("l2norm", x=x, eps=eps)
    return g["y"], g["rstd"]


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
@pytest.mark.parametrize("shape", [(0, 16), (3, 0, 8), (0,), (4, 0)])
def test_empty_inputs(shape, backend):
    x = torch.randn(shape)
    y, rstd = tileport.l2norm_fwd(x, eps=0.25, backend=backend)
    assert y.shape == x.shape and rstd.shape == x.shape[:-1]
    if rstd.numel():  # D = 0: the sum over an empty row is 0
        assert torch.all(rstd == 2.0)
    dx = tileport.l2norm_bwd(x, rstd, torch.randn(shape), backend=backend)
    assert dx.shape == x.shape
    xg = x.clone().requires_grad_()
    tileport.l2norm(xg, backend=backend).sum().backward()
    assert xg.grad.shape == x.shape


@pytest.mark.parametrize("dtype", DTYPES)
def test_d_equals_one(dtype, golden):
    x = torch.tensor([[3.0], [-0.5], [0.0]]).to(dtype)
    y, rstd = tileport.l2norm_fwd(x)
    yg, rg = l2_golden(golden, x)
    torch.testing.assert_close(y.double(), yg.to(dtype).double(), rtol=0, atol=0)
    torch.testing.assert_close(rstd.double(), rg, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_rows_give_zero_output_and_finite_gradient(dtype):
    x = torch.zeros(4, 300, dtype=dtype)
    x[1] = 1.0
    y, rstd = tileport.l2norm_fwd(x)
    assert torch.all(y[0] == 0) and torch.all(y[2:] == 0)
    assert rstd[0].item() == pytest.approx(1 / math.sqrt(1e-6), rel=1e-6)
    xg = x.clone().requires_grad_()
    tileport.l2norm(xg).backward(torch.ones(4, 300, dtype=dtype))
    assert torch.isfinite(xg.grad.float()).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_values_affect_only_their_row(dtype, bad):
    x = torch.randn(5, 257).to(dtype)
    x[2, 100] = bad
    y, rstd = tileport.l2norm_fwd(x)
    clean = [0, 1, 3, 4]
    y_ref, r_ref = tileport.l2norm_fwd(x[clean])
    assert torch.equal(y[clean], y_ref) and torch.equal(rstd[clean], r_ref)
    assert not torch.isfinite(y[2].float()).all()
    yt, rt = tileport.l2norm_fwd(x, backend="torch")
    assert torch.equal(torch.isnan(y), torch.isnan(yt)) and torch.equal(torch.isnan(rstd), torch.isnan(rt))
    dx = tileport.l2norm_bwd(x, rstd, torch.ones_like(x))
    assert torch.isfinite(dx[clean].float()).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_concurrent_calls_from_python_threads(dtype):
    xs = [torch.randn(64 + i, 384).to(dtype) for i in range(16)]
    expected = [tileport.l2norm_fwd(x) for x in xs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(tileport.l2norm_fwd, xs * 4))
    for i, (y, r) in enumerate(got):
        ye, re_ = expected[i % len(xs)]
        assert torch.equal(y, ye) and torch.equal(r, re_)


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
def test_out_writes_into_given_tensors(backend, randn):
    x = randn(3, 5, 64, dtype=torch.bfloat16)
    y, rstd = torch.empty_like(x), torch.empty(3, 5)
    got = tileport.l2norm_fwd(x, out=(y, rstd), backend=backend)
    assert got[0] is y and got[1] is rstd
    ye, re = tileport.l2norm_fwd(x, backend=backend)
    assert torch.equal(y, ye) and torch.equal(rstd, re)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_large_given_outputs_take_the_streaming_kernel_and_agree(dtype, randn):
    from tileport.backends.tilelang.cpu.l2norm import STREAM_BYTES

    rows = STREAM_BYTES // (1024 * dtype.itemsize) + 1  # just past the threshold
    x = randn(rows, 1024, dtype=dtype)
    y, rstd = torch.empty_like(x), torch.empty(rows)
    tileport.l2norm_fwd(x, out=(y, rstd))
    keys = {k for r in tileport.kernel_cache_info() for k in r["keys"]}
    name = str(dtype).removeprefix("torch.")
    assert str(("streaming=True", f"x={name}", f"y={name}")) in keys
    yf, rf = tileport.l2norm_fwd(x)  # a fresh output: plain stores, the same bits
    assert torch.equal(y, yf) and torch.equal(rstd, rf)
