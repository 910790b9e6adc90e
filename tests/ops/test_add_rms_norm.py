"""add_rms_norm: numerics against the float64 golden (dual benchmark) on every CPU backend, autograd through
both outputs against torch's, residual_in_fp32, custom ops and torch.compile, edge cases and input errors."""

import math

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark

BACKENDS = ["tilelang", "triton", "torch"]
X = torch.randn(4, 16)


def _inputs(randn, M, D, dtype, weighted=True):
    x, r = randn(M, D, dtype=dtype), randn(M, D, dtype=dtype, seed=1, scale=3.0)
    w = (1.0 + 0.5 * randn(D, seed=2)).to(dtype) if weighted else None
    return x, r, w, randn(M, D, dtype=dtype, seed=3), randn(M, D, dtype=dtype, seed=4)


def _run(x, r, w, dy, dres, backend, rdt=None, eps=1e-6):
    y, s, rstd = tileport.add_rms_norm_fwd(x, r, w, eps, residual_dtype=rdt, backend=backend)
    dsum, dw = tileport.add_rms_norm_bwd(s, rstd, dy, w, dresidual_out=dres.to(s.dtype), eps=eps, backend=backend)
    return {"y": y, "residual_out": s, "rstd": rstd, "dx": dsum.to(x.dtype)} | ({} if dw is None else {"dweight": dw})


@pytest.mark.parametrize("backend", ["tilelang", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("D", [1, 100, 4097])
@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "no-weight"])
def test_forward_backward_match_golden(backend, dtype, D, weighted, golden, randn):
    x, r, w, dy, dres = _inputs(randn, 48, D, dtype, weighted)
    got = _run(x, r, w, dy, dres, backend)
    bm = _run(x, r, w, dy, dres, "torch")
    gold = golden("add_rms_norm", x=x, residual=r, weight=w, dy=dy, dresidual_out=dres)
    assert got["residual_out"].dtype == dtype and torch.equal(got["residual_out"], (x.float() + r.float()).to(dtype))
    assert set(got) == set(bm)
    for name in got:
        assert_dual_benchmark(
            got[name],
            gold[name],
            bm[name],
            dtype=torch.float32 if name in ("rstd", "dweight") and dtype != torch.float32 else dtype,
        )


@pytest.mark.parametrize("backend", ["tilelang", "triton"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_residual_in_fp32_keeps_the_sum_and_its_gradient_in_fp32(backend, dtype, randn):
    x, r, w, dy, dres = _inputs(randn, 32, 300, dtype)
    y, s, rstd = tileport.add_rms_norm_fwd(x, r, w, residual_dtype=torch.float32, backend=backend)
    assert s.dtype == torch.float32 and y.dtype == dtype
    assert torch.equal(s, x.float() + r.float())  # no rounding to the 16-bit dtype
    yb, sb, rb = tileport.add_rms_norm_fwd(x, r, w, residual_dtype=torch.float32, backend="torch")
    torch.testing.assert_close(rstd, rb, rtol=2e-7, atol=0)
    dsum, _ = tileport.add_rms_norm_bwd(s, rstd, dy, w, dresidual_out=dres.float(), backend=backend)
    assert dsum.dtype == torch.float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_autograd_through_both_outputs_matches_torch(backend, randn):
    """d/dx and d/dresidual of loss(y) + loss(residual_out), and dweight, against torch's autograd of the
    composite in float64."""
    x, r, w, dy, dres = _inputs(randn, 16, 64, torch.float32)
    leaves = [t.clone().requires_grad_() for t in (x, r, w)]
    y, s = tileport.add_rms_norm(*leaves, backend=backend)
    torch.autograd.backward((y, s), (dy, dres))
    ref = [t.double().requires_grad_() for t in (x, r, w)]
    s64 = ref[0] + ref[1]
    y64 = s64 * torch.rsqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-6) * ref[2]
    torch.autograd.backward((y64, s64), (dy.double(), dres.double()))
    for ours, theirs in zip(leaves, ref):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-4, atol=1e-5)
    assert torch.equal(leaves[0].grad, leaves[1].grad)  # dx = dresidual: the gradient of the sum


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_give_the_bits_of_their_contiguous_copies(backend, randn):
    base = randn(24, 2, 300, dtype=torch.bfloat16)
    x, r = base[:, 1, :], randn(300, 24, dtype=torch.bfloat16, seed=1).t()  # strided rows, transposed
    w = randn(600, dtype=torch.bfloat16, seed=2)[::2]
    got = tileport.add_rms_norm_fwd(x, r, w, backend=backend)
    want = tileport.add_rms_norm_fwd(x.contiguous(), r.contiguous(), w.contiguous(), backend=backend)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    dy, dres = randn(300, 24, dtype=torch.bfloat16, seed=3).t(), base[:, 0, :]
    g1 = tileport.add_rms_norm_bwd(got[1], got[2], dy, w, dresidual_out=dres, backend=backend)
    g2 = tileport.add_rms_norm_bwd(
        got[1], got[2], dy.contiguous(), w.contiguous(), dresidual_out=dres.contiguous(), backend=backend
    )
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_rows_affect_only_their_row(backend, randn):
    x, r, w, dy, dres = _inputs(randn, 6, 100, torch.float32)
    bad = x.clone()
    bad[1, 3], bad[4, 7] = math.nan, math.inf
    y, s, rstd = tileport.add_rms_norm_fwd(bad, r, w, backend=backend)
    y0, s0, r0 = tileport.add_rms_norm_fwd(x, r, w, backend=backend)
    clean = [0, 2, 3, 5]
    assert torch.equal(y[clean], y0[clean]) and torch.equal(s[clean], s0[clean]) and torch.equal(rstd[clean], r0[clean])
    assert torch.isnan(y[1]).all() and not torch.isfinite(y[4]).all()
    d, _ = tileport.add_rms_norm_bwd(s, rstd, dy, w, dresidual_out=dres, backend=backend)
    d0, _ = tileport.add_rms_norm_bwd(s0, r0, dy, w, dresidual_out=dres, backend=backend)
    assert torch.equal(d[clean], d0[clean])


@pytest.mark.parametrize("backend", ["tilelang", "torch"])
@pytest.mark.parametrize("shape", [(0, 16), (3, 0, 8), (4, 0)])
def test_empty_inputs(shape, backend):
    x, r, w = torch.randn(shape), torch.randn(shape), torch.randn(shape[-1])
    y, s, rstd = tileport.add_rms_norm_fwd(x, r, w, backend=backend)
    assert y.shape == s.shape == x.shape and rstd.shape == x.shape[:-1]
    if rstd.numel():  # D = 0: the mean of nothing is nan, as torch's mean
        assert torch.isnan(rstd).all()
    dsum, dw = tileport.add_rms_norm_bwd(
        s, rstd, torch.randn(shape), w, dresidual_out=torch.randn(shape), backend=backend
    )
    assert dsum.shape == x.shape and torch.equal(dw, torch.zeros_like(w))


def test_module_returns_the_norm_and_the_residual_stream(randn):
    layer = tileport.AddRMSNorm(64, eps=1e-5, residual_in_fp32=True, dtype=torch.bfloat16)
    assert torch.equal(layer.weight, torch.ones(64, dtype=torch.bfloat16))
    x, r = randn(3, 5, 64, dtype=torch.bfloat16), randn(3, 5, 64, dtype=torch.bfloat16, seed=1)
    y, s = layer(x, r)
    assert y.dtype == torch.bfloat16 and s.dtype == torch.float32 and y.shape == s.shape == x.shape
    torch.testing.assert_close(y, tileport.rms_norm(s, layer.weight.float(), 1e-5).to(torch.bfloat16), rtol=0, atol=0)
    assert tileport.AddRMSNorm(8, elementwise_affine=False).weight is None
    assert "residual_in_fp32=True" in repr(layer)


def test_custom_ops_pass_opcheck_and_compile_fullgraph_without_recompiling():
    from torch._dynamo.testing import CompileCounter

    x, r, w = torch.randn(3, 4, 16), torch.randn(3, 4, 16), torch.randn(16)
    args = (x, r, w, 1e-6, 0.0, torch.float32, torch.float32, None)
    torch.library.opcheck(torch.ops.tileport.add_rms_norm_fwd.default, args)
    _, s, rstd = torch.ops.tileport.add_rms_norm_fwd(*args)
    torch.library.opcheck(
        torch.ops.tileport.add_rms_norm_bwd.default,
        (s, rstd, torch.randn(3, 4, 16), torch.randn(3, 4, 16), w, 0.0, 1e-6, None),
    )
    torch.library.opcheck(
        torch.ops.tileport.add_rms_norm_bwd.default, (s, rstd, torch.randn(3, 4, 16), None, None, 0.0, 1e-6, None)
    )

    counter = CompileCounter()
    layer = tileport.AddRMSNorm(64)

    def f(a, b):
        y, res = layer(a * 2.0, b)
        return (y * res).sum()

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for rows in (5, 9, 17):
        a, b = torch.randn(rows, 64, requires_grad=True), torch.randn(rows, 64, requires_grad=True)
        out = compiled(a, b)
        out.backward()
        ae, be = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        ref = f(ae, be)
        ref.backward()
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        torch.testing.assert_close(a.grad, ae.grad, rtol=0, atol=0)
        torch.testing.assert_close(b.grad, be.grad, rtol=0, atol=0)
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"x": torch.ones(4, 16, dtype=torch.int32)}, TypeError, "x must have a floating dtype"),
        ({"residual": torch.ones(4, 15)}, ValueError, r"residual must have x's shape \(4, 16\), got \(4, 15\)"),
        ({"residual": torch.ones(4, 16, dtype=torch.int64)}, TypeError, "residual must have a floating dtype"),
        ({"residual": None}, TypeError, "residual must be a torch.Tensor"),
        ({"weight": torch.ones(15)}, ValueError, r"weight must have shape x.shape\[-1:\] = \(16,\), got \(15,\)"),
        ({"eps": -1e-6}, ValueError, "eps must be finite and >= 0"),
        ({"eps": math.nan}, ValueError, "eps must be finite and >= 0"),
        ({"offset": math.inf}, ValueError, "offset must be finite"),
        ({"residual_dtype": torch.int32}, TypeError, "residual_dtype must be None or a floating torch.dtype"),
        ({"output_dtype": "fp16"}, TypeError, "output_dtype must be None or a floating torch.dtype"),
    ],
)
def test_forward_errors_name_the_argument(kwargs, error, message):
    args = {"x": X, "residual": torch.ones(4, 16), "weight": torch.ones(16)} | kwargs
    for fn in (tileport.add_rms_norm, tileport.add_rms_norm_fwd):
        with pytest.raises(error, match=message):
            fn(**args)


def test_backward_errors_name_the_argument():
    _, s, rstd = tileport.add_rms_norm_fwd(X, X)
    dy = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"dy must have residual_out's shape \(4, 16\), got \(4, 15\)"):
        tileport.add_rms_norm_bwd(s, rstd, torch.randn(4, 15))
    with pytest.raises(ValueError, match=r"dresidual_out must have residual_out's shape \(4, 16\), got \(2, 16\)"):
        tileport.add_rms_norm_bwd(s, rstd, dy, dresidual_out=torch.randn(2, 16))
    with pytest.raises(ValueError, match=r"rstd must have shape residual_out.shape\[:-1\] = \(4,\), got \(5,\)"):
        tileport.add_rms_norm_bwd(s, torch.ones(5), dy)
    with pytest.raises(ValueError, match="eps must be finite and >= 0"):
        tileport.add_rms_norm_bwd(s, rstd, dy, eps=-1.0)
