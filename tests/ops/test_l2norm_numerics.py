"""l2norm forward and backward on the default CPU backend against the float64 golden (dual benchmark L0)."""

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark, compare, retest

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DIMS = [1, 7, 100, 512, 4097]


def l2_golden(golden, x, eps=1e-6):
    """(y, rstd) of the float64 golden."""
    g = golden("l2norm", x=x, eps=eps)
    return g["y"], g["rstd"]


def _check_fwd(x, golden, eps=1e-6, output_dtype=None):
    y, rstd = tileport.l2norm_fwd(x, eps, output_dtype)
    yb, rb = tileport.l2norm_fwd(x, eps, output_dtype, backend="torch")
    yg, rg = l2_golden(golden, x, eps)
    assert y.dtype == (output_dtype or x.dtype) and y.shape == x.shape
    assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
    assert_dual_benchmark(y, yg, yb, dtype=y.dtype)
    assert_dual_benchmark(rstd, rg, rb, dtype=torch.float32)
    return y, rstd


def _check_bwd(x, dy, golden, eps=1e-6):
    _, rstd = tileport.l2norm_fwd(x, eps)
    _, rb = tileport.l2norm_fwd(x, eps, backend="torch")
    dx = tileport.l2norm_bwd(x, rstd, dy, eps=eps)  # as autograd and verify call it
    dxb = tileport.l2norm_bwd(x, rb, dy, backend="torch")
    assert dx.dtype == x.dtype and dx.shape == x.shape
    assert_dual_benchmark(dx, golden("l2norm", x=x, dy=dy, eps=eps)["dx"], dxb, dtype=x.dtype)
    return dx


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", DIMS)
def test_forward_and_backward_match_golden(dtype, D, golden, randn):
    x = randn(64, D, dtype=dtype)
    dy = randn(64, D, dtype=dtype, seed=1)
    _check_fwd(x, golden)
    _check_bwd(x, dy, golden)


@pytest.mark.parametrize("mu,eps", [(64, 1e-5), (1000, 1e-12)], ids=["L1-case-4124", "below-fp64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)  # fp16: such a dx (~1e-11) underflows
def test_backward_with_eps_keeps_the_component_along_x(dtype, mu, eps, golden):
    """At D = 1, dx = dy * rstd * eps / (x^2 + eps): with x ~ N(64, 2.5) and eps 1e-5, 1 - y^2 ~ 2e-9 is below
    fp32's resolution; with x ~ 1000 and eps 1e-12 it is below fp64's too. Given eps, the CPU kernel is within
    rounding of the golden; the fp32 form (no eps) is noise or 0 there, which is why the eps form exists (L1
    cases 4124, 6686, 8080 and 9680 failed on it)."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(432, 1, generator=gen) * 2.5 + mu).to(dtype)
    dy = torch.randn(432, 1, generator=gen).to(dtype)
    _, r = tileport.l2norm_fwd(x, eps)
    g = golden("l2norm", x=x, dy=dy, eps=eps)["dx"]

    def max_rel(a):
        return ((a.double() - g).abs() / g.abs()).max().item()

    dx = tileport.l2norm_bwd(x, r, dy, eps=eps)
    assert max_rel(dx) <= 4 * torch.finfo(dtype).eps  # rounded rstd, the output rounding, fp64 cancellation (~0.4 ulp)
    assert max_rel(tileport.l2norm_bwd(x, r, dy)) > 0.5
    xg = x.clone().requires_grad_()
    tileport.l2norm(xg, eps).backward(dy)
    assert torch.equal(xg.grad, dx), "autograd passes the forward's eps to the backward"


def test_default_backend_on_cpu_is_tilelang():
    x = torch.randn(4, 16)
    assert tileport.backends.REGISTRY.resolve("l2norm", x.device, (x.dtype,)).name == "tilelang"


@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-6, 1e-2, 1.0])
def test_eps_values(eps, golden, randn):
    x = randn(33, 100, scale=0.05)  # small rows: eps is a visible part of the sum
    _check_fwd(x, golden, eps)

    def backward_verdict(seed):
        xs, dy = randn(33, 100, seed=seed, scale=0.05), randn(33, 100, seed=seed + 1000)
        _, r = tileport.l2norm_fwd(xs, eps)
        _, rb = tileport.l2norm_fwd(xs, eps, backend="torch")
        dx, dxb = tileport.l2norm_bwd(xs, r, dy), tileport.l2norm_bwd(xs, rb, dy, backend="torch")
        return compare(dx, golden("l2norm", x=xs, dy=dy, eps=eps)["dx"], dxb)

    # dx cancels to near zero here, so its MARE ratio swings with summation order on either side (a reordered
    # torch composite scores up to ~40x on some seeds); the standard settles such cases by its retest rule.
    if not backward_verdict(3).passed:
        result = retest(backward_verdict, seeds=range(100, 150))
        assert result.passed, result.failures


@pytest.mark.parametrize("dtype", DTYPES)
def test_three_dim_input(dtype, golden, randn):
    x = randn(3, 11, 96, dtype=dtype)
    _check_fwd(x, golden)
    _check_bwd(x, randn(3, 11, 96, dtype=dtype, seed=2), golden)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.transpose(0, 1),  # last dim strided: copied to unit-stride rows
        lambda t: t[:, 5:105],  # row stride 160, unit-stride rows: read in place
        lambda t: t[::3],  # every third row
        lambda t: t.unsqueeze(0).expand(2, -1, -1)[..., :100],  # 3-D, row stride 0 between the copies
    ],
    ids=["transposed", "sliced-cols", "strided-rows", "expanded"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(view, dtype, golden, randn):
    base = randn(160, 160, dtype=dtype)
    x = view(base)
    assert not x.is_contiguous()
    y, rstd = _check_fwd(x, golden)
    y_c, rstd_c = tileport.l2norm_fwd(x.contiguous())
    assert torch.equal(y, y_c) and torch.equal(rstd, rstd_c)
    dy = view(randn(160, 160, dtype=dtype, seed=5))
    dx = _check_bwd(x, dy, golden)
    assert torch.equal(dx, tileport.l2norm_bwd(x.contiguous(), rstd_c, dy.contiguous(), eps=1e-6))


@pytest.mark.parametrize(
    "x_dtype,out_dtype",
    [(torch.float16, torch.float32), (torch.float32, torch.bfloat16), (torch.bfloat16, torch.float16)],
)
def test_output_dtype(x_dtype, out_dtype, golden, randn):
    x = randn(17, 300, dtype=x_dtype)
    _check_fwd(x, golden, output_dtype=out_dtype)
    y = tileport.l2norm(x.requires_grad_(), output_dtype=out_dtype)
    y.backward(randn(17, 300, dtype=out_dtype, seed=4))
    assert x.grad.dtype == x_dtype


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_very_large_rows(dtype, golden, randn):
    """fp32 accuracy at D = 65536 needs the blocked sum: a running sum per lane fails MARE by 10-18x."""
    x = randn(4, 65536, dtype=dtype)
    _check_fwd(x, golden)
    _check_bwd(x, randn(4, 65536, dtype=dtype, seed=9), golden)


def test_float64_runs_on_torch_backend_and_gradchecks():
    x = torch.randn(5, 3, 13, dtype=torch.float64, requires_grad=True)
    y, rstd = tileport.l2norm_fwd(x.detach())
    assert rstd.dtype == torch.float64
    assert torch.autograd.gradcheck(tileport.l2norm, (x,))
    assert torch.autograd.gradcheck(lambda t: tileport.l2norm(t, eps=0.5), (x,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tilelang_matches_torch_backend(dtype, randn):
    """Same math, different summation order: rstd within a few fp32 ulp, y and dx within 1 ulp of dtype."""
    x = randn(128, 777, dtype=dtype)
    dy = randn(128, 777, dtype=dtype, seed=7)
    y, r = tileport.l2norm_fwd(x, backend="tilelang")
    yt, rt = tileport.l2norm_fwd(x, backend="torch")
    torch.testing.assert_close(r, rt, rtol=4e-7, atol=0)
    ulp = max(torch.finfo(dtype).eps, 4e-7)  # fp32: y inherits rstd's few-ulp difference
    torch.testing.assert_close(y.float(), yt.float(), rtol=ulp, atol=ulp * 2**-6)
    dx = tileport.l2norm_bwd(x, r, dy, backend="tilelang")
    dxt = tileport.l2norm_bwd(x, rt, dy, backend="torch")
    torch.testing.assert_close(dx.float(), dxt.float(), rtol=2 * ulp, atol=1e-5 if dtype == torch.float32 else 2 * ulp)


def test_autograd_matches_torch_autograd(randn):
    x = randn(9, 4, 50).requires_grad_()
    xr = x.detach().clone().requires_grad_()
    dy = randn(9, 4, 50, seed=1)
    tileport.l2norm(x).backward(dy)
    (xr * torch.rsqrt(xr.pow(2).sum(-1, keepdim=True) + 1e-6)).backward(dy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-6)


def test_module(randn):
    layer = tileport.L2Norm(eps=1e-3, output_dtype=torch.float32)
    x = randn(6, 40, dtype=torch.bfloat16)
    torch.testing.assert_close(layer(x), tileport.l2norm(x, eps=1e-3, output_dtype=torch.float32), rtol=0, atol=0)
    assert "eps=0.001" in repr(layer)


def _verdicts(d, dtype, seed, golden, rows=16):
    """Dual-benchmark verdicts of y, rstd and dx for one seeded (rows, d) case."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=g).to(dtype)
    dy = torch.randn(rows, d, generator=g).to(dtype)
    (y, r), (yb, rb), (yg, rg) = tileport.l2norm_fwd(x), tileport.l2norm_fwd(x, backend="torch"), l2_golden(golden, x)
    dx, dxb = tileport.l2norm_bwd(x, r, dy), tileport.l2norm_bwd(x, rb, dy, backend="torch")
    return {
        "y": compare(y, yg, yb, dtype=dtype),
        "rstd": compare(r, rg, rb, dtype=torch.float32),
        "dx": compare(dx, golden("l2norm", x=x, dy=dy)["dx"], dxb, dtype=dtype),
    }


@pytest.mark.slow
def test_forty_random_widths_few_kernels_all_pass_the_dual_benchmark(golden):
    """Issue 10's bar: 40 random D in [1, 20000], fp32 and bf16, forward and backward, a handful of kernels.
    A check that fails on its first seed is settled by the standard's retest rule over 200 new seeds (a
    ratio of 16 rows' rstd values is noisy)."""
    gen = torch.Generator().manual_seed(10)
    widths = torch.randint(1, 20001, (40,), generator=gen).tolist()

    def compiled():
        return sum(r["kernels"] for r in tileport.kernel_cache_info() if r["backend"] == "tilelang")

    before = compiled()
    for i, d in enumerate(widths):
        for dtype in (torch.float32, torch.bfloat16):
            for name, verdict in _verdicts(d, dtype, i, golden).items():
                if not verdict.passed:
                    result = retest(
                        lambda seed, d=d, dtype=dtype, name=name: _verdicts(d, dtype, seed, golden)[name],
                        range(1000, 1200),
                    )
                    assert result.passed, (d, dtype, name, result.failures)
    assert compiled() - before <= 4, "more than one kernel per (direction, dtype) for 40 widths"
