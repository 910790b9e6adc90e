"""softmax and log_softmax (one interface, ``ops/_softmax.py``): golden, any dim, edges, errors, compile."""

import math

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark

OPS = ["softmax", "log_softmax"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _fns(op):
    return getattr(tileport, op), getattr(tileport, f"{op}_fwd"), getattr(tileport, f"{op}_bwd")


def _check(op, x, dy, golden, backend=None, dim=-1):
    _, fwd, bwd = _fns(op)
    y, yb = fwd(x, dim, backend=backend), fwd(x, dim, backend="torch")
    dx, dxb = bwd(y, dy, dim, backend=backend), bwd(yb, dy, dim, backend="torch")
    gold = golden(op, x=x, dy=dy, dim=dim)
    assert y.dtype == dx.dtype == x.dtype and y.shape == dx.shape == x.shape
    assert_dual_benchmark(y, gold["y"], yb, dtype=x.dtype)
    # dx's golden is the float64 backward of the float64 y: judged against the benchmark's own error
    assert_dual_benchmark(dx, gold["dx"], dxb, dtype=x.dtype)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("D", [1, 7, 100, 4097])
def test_tilelang_matches_golden(op, dtype, D, golden, randn):
    _check(op, randn(64, D, dtype=dtype, scale=3.0), randn(64, D, dtype=dtype, seed=1), golden)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_interpreter_matches_golden(op, dtype, golden, randn):
    """256 rows: at 33, one near-cancelling log_softmax dx (dy = exp(y) * sum(dy) to 1e-4, the fp32 y's rounding
    amplified) held most of the fp32 MERE, and torch's fp32 roundings landed nearer there on an AVX2 CPU (ratio
    2.23, typical 0.5 to 0.9, as the TileLang kernel's, which computes it exactly from y: 2.67 at that case)."""
    _check(op, randn(256, 200, dtype=dtype, scale=3.0), randn(256, 200, dtype=dtype, seed=3), golden, backend="triton")


@pytest.mark.parametrize("op", OPS)
def test_rows_of_64k_and_logits_far_apart(op, golden, randn):
    """A vocabulary-sized row, and logits 30 apart (most of the mass in a few columns, the rest underflowing)."""
    _check(op, randn(4, 65536, scale=30.0), randn(4, 65536, seed=2), golden)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", ["tilelang", "torch", "triton"])
def test_any_dim_and_strided_inputs_give_the_bits_of_contiguous_last_dim_rows(op, backend, randn):
    function, fwd, bwd = _fns(op)
    x, dy = randn(6, 50, 7), randn(6, 50, 7, seed=1)
    for dim in (0, 1, -1):
        y = fwd(x, dim, backend=backend)
        ref = fwd(x.movedim(dim, -1).contiguous(), -1, backend=backend).movedim(-1, dim)
        assert torch.equal(y, ref), dim
        assert torch.equal(
            bwd(y, dy, dim, backend=backend), bwd(ref.contiguous(), dy.contiguous(), dim, backend=backend)
        )
        torch.testing.assert_close(y, getattr(torch, op)(x, dim), rtol=1e-5, atol=1e-6)
    t = x.transpose(0, 2)  # strided
    assert torch.equal(fwd(t, -1, backend=backend), fwd(t.contiguous(), -1, backend=backend))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", ["tilelang", "triton"])
def test_inf_and_nan_rows_as_torch(op, backend):
    inf, nan = math.inf, math.nan
    x = torch.tensor([[1.0, inf, 0.0], [-inf, -inf, -inf], [1.0, nan, 2.0], [-inf, 1.0, 2.0], [1.0, 2.0, 3.0]])
    y = _fns(op)[1](x, backend=backend)
    torch.testing.assert_close(y, getattr(torch, op)(x, -1), equal_nan=True)


@pytest.mark.parametrize("op", OPS)
def test_empty_inputs(op):
    for shape in ((0, 5), (3, 0), (2, 0, 4)):
        y = _fns(op)[1](torch.randn(shape), -1)
        assert y.shape == shape


@pytest.mark.parametrize("op", OPS)
def test_autograd_module_and_errors(op, randn):
    function, fwd, bwd = _fns(op)
    x = randn(5, 9, 33, scale=2.0).requires_grad_()
    xr = x.detach().clone().requires_grad_()
    layer = getattr(tileport, {"softmax": "Softmax", "log_softmax": "LogSoftmax"}[op])(dim=1)
    layer(x).pow(2).sum().backward()
    getattr(torch, op)(xr, 1).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(IndexError, match=r"dim must be in \[-3, 2\] for a 3-dim input, got 3"):
        function(x, 3)
    with pytest.raises(TypeError, match="dim must be an int, got float"):
        function(x, 1.0)
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        function(torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"dy must have y's shape \(2, 3\)"):
        bwd(torch.rand(2, 3), torch.rand(3, 2))


@pytest.mark.parametrize("op", OPS)
def test_custom_ops_opcheck_and_fullgraph_compile(op, randn):
    from torch._dynamo.testing import CompileCounter

    function = _fns(op)[0]
    x = randn(3, 4, 16)
    fwd_op, bwd_op = getattr(torch.ops.tileport, f"{op}_fwd").default, getattr(torch.ops.tileport, f"{op}_bwd").default
    for d in (2, 0):
        torch.library.opcheck(fwd_op, (x, d, None))
        torch.library.opcheck(bwd_op, (fwd_op(x, d, None), randn(3, 4, 16, seed=1), d, None))
    counter = CompileCounter()
    compiled = torch.compile(lambda t: function(t * 2.0, 1).pow(2).sum(), fullgraph=True, backend=counter, dynamic=True)
    for rows in (5, 9):
        t = torch.randn(rows, 8, 16, requires_grad=True)
        out = compiled(t)
        out.backward()
        te = t.detach().clone().requires_grad_()
        ref = function(te * 2.0, 1).pow(2).sum()
        ref.backward()
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        torch.testing.assert_close(t.grad, te.grad, rtol=0, atol=0)
    assert counter.frame_count == 1
