"""layer_norm forward and backward against the float64 golden (dual benchmark L0), on every CPU backend."""

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DIMS = [1, 7, 100, 512, 4097]


def _param(D, dtype, seed, center):
    g = torch.Generator().manual_seed(seed)
    return (center + 0.5 * torch.randn(D, generator=g)).to(dtype)


def _check(x, w, b, dy, golden, backend=None, eps=1e-5):
    y, mean, rstd = tileport.layer_norm_fwd(x, w, b, eps, backend=backend)
    yb, mb, rb = tileport.layer_norm_fwd(x, w, b, eps, backend="torch")
    dx, dw, db = tileport.layer_norm_bwd(x, mean, rstd, dy, w, bias=b, backend=backend)
    dxb, dwb, dbb = tileport.layer_norm_bwd(x, mb, rb, dy, w, bias=b, backend="torch")
    gold = golden("layer_norm", x=x, weight=w, bias=b, dy=dy, eps=eps)
    assert y.dtype == x.dtype and mean.dtype == rstd.dtype == torch.float32 and dx.dtype == x.dtype
    assert_dual_benchmark(y, gold["y"], yb, dtype=x.dtype)
    assert_dual_benchmark(mean, gold["mean"], mb, dtype=torch.float32)
    assert_dual_benchmark(rstd, gold["rstd"], rb, dtype=torch.float32)
    assert_dual_benchmark(dx, gold["dx"], dxb, dtype=x.dtype)
    for p, grad, gname, bench in ((w, dw, "dweight", dwb), (b, db, "dbias", dbb)):
        if p is None:
            assert grad is None
        else:
            assert grad.dtype == p.dtype and grad.shape == p.shape
            assert_dual_benchmark(grad, gold[gname], bench, dtype=p.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", DIMS)
def test_tilelang_forward_backward_with_weight_and_bias_match_golden(dtype, D, golden, randn):
    x, dy = randn(64, D, dtype=dtype, scale=2.0), randn(64, D, dtype=dtype, seed=1)
    _check(x, _param(D, dtype, 5, 1.0), _param(D, dtype, 6, 0.0), dy, golden)


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_parameters_and_with_one_of_them(dtype, golden, randn):
    x, dy = randn(48, 300, dtype=dtype), randn(48, 300, dtype=dtype, seed=2)
    _check(x, None, None, dy, golden)
    _check(x, _param(300, dtype, 5, 1.0), None, dy, golden)
    _check(x, None, _param(300, dtype, 6, 0.0), dy, golden)


@pytest.mark.parametrize("backend", ["tilelang", "triton"])
def test_rows_with_a_large_mean_keep_their_spread(backend, golden):
    """Values near 1000 with unit spread: E[x^2] - mean^2 in fp32 would lose the spread (~1e6 against ~1e6, an
    rstd off by percents); the two-pass variance keeps rstd within 1e-6. y's error is at most torch's fp32
    layer_norm's on both backends (an fp64 mean rounded once; a plain fp32 sum of x, as the upstream Triton
    kernels', put the mean off by ~1e-4, 1.5x torch's error)."""
    g = torch.Generator().manual_seed(0)
    x = 1000.0 + torch.randn(64, 1000, generator=g)
    gold = golden("layer_norm", x=x)
    y, _, rstd = tileport.layer_norm_fwd(x, backend=backend)
    yt = torch.nn.functional.layer_norm(x, (1000,))
    err = lambda t: (t.double() - gold["y"]).abs().max().item()  # noqa: E731
    assert err(y) <= err(yt)
    torch.testing.assert_close(rstd.double(), gold["rstd"], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_interpreter_matches_golden(dtype, golden, randn):
    x, dy = randn(33, 200, dtype=dtype), randn(33, 200, dtype=dtype, seed=3)
    _check(x, _param(200, dtype, 5, 1.0), _param(200, dtype, 6, 0.0), dy, golden, backend="triton")


def test_matches_torch_layer_norm_and_its_autograd(randn):
    x = randn(16, 5, 256, scale=3.0).requires_grad_()
    w, b = _param(256, torch.float32, 5, 1.0).requires_grad_(), _param(256, torch.float32, 6, 0.0).requires_grad_()
    y = tileport.layer_norm(x, w, b, eps=1e-5)
    xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, w, b))
    yr = torch.nn.functional.layer_norm(xr, (256,), wr, br, 1e-5)
    torch.testing.assert_close(y, yr, rtol=2e-6, atol=2e-6)
    dy = torch.randn_like(y)
    y.backward(dy)
    yr.backward(dy)
    for ours, theirs in ((x, xr), (w, wr), (b, br)):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-4)


def test_float64_inputs_run_on_the_torch_reference(randn):
    x = randn(4, 32).double()
    y, mean, rstd = tileport.layer_norm_fwd(x, torch.ones(32, dtype=torch.float64))
    assert y.dtype == mean.dtype == rstd.dtype == torch.float64


@pytest.mark.parametrize("shape", [(7, 33), (2, 3, 150)])
def test_golden_backward_is_torch_float64_where_rows_have_spread(shape):
    """The spec's golden states the backward as the contract does; on ordinary rows it is torch's float64."""
    from tileport.ops.catalog import get

    g = torch.Generator().manual_seed(3)
    x, dy = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 5 for _ in range(2))
    w, b = (torch.randn(shape[-1:], generator=g, dtype=torch.float64) for _ in range(2))
    inputs = {"x": x, "dy": dy, "weight": w, "bias": b, "eps": 1e-5}
    ours, theirs = get("layer_norm").run_golden(inputs, True), get("layer_norm").run(inputs, "torch", True)
    assert ours.keys() == theirs.keys()
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-12, atol=1e-12)


def test_golden_backward_at_one_element_rows_is_the_math():
    """At D = 1 every row equals its mean: xhat is 0, so dx and dweight are 0 for a finite gradient and
    dweight is inf * 0 = nan for an inf one (torch's float64 backward leaves an fma residue there instead)."""
    from tileport.ops.catalog import get

    x = torch.tensor([[2.5], [-1.3], [0.7]], dtype=torch.float64)
    one = torch.ones(1, dtype=torch.float64)
    finite = get("layer_norm").run_golden({"x": x, "dy": torch.full_like(x, 3.0), "weight": one, "eps": 1e-5}, True)
    assert torch.equal(finite["dx"], torch.zeros_like(x)) and torch.equal(
        finite["dweight"], torch.zeros(1, dtype=torch.float64)
    )
    inf = get("layer_norm").run_golden(
        {"x": x[:1, 0], "dy": torch.full((1,), float("inf"), dtype=torch.float64), "weight": one, "eps": 1e-5}, True
    )
    assert inf["dweight"].isnan().all()
    y, mean, rstd = tileport.layer_norm_fwd(x[:1, 0].float(), one.float(), None, 1e-5)
    _, dw, _ = tileport.layer_norm_bwd(x[:1, 0].float(), mean, rstd, torch.full((1,), float("inf")), one.float())
    assert dw.isnan().all()  # the kernel agrees with the golden


def _centred_rows(mu, rows=16, D=1000):
    g = torch.Generator().manual_seed(3)
    return (mu + 3 * torch.randn(rows, D, dtype=torch.float64, generator=g)).float()


@pytest.mark.parametrize("mu", [0.0, 100.0])
def test_y_is_the_centred_value_rounded_once(mu):
    """The TileLang forward's y (plain form, fp32) is (x - mean) * rstd about the fp64 mean, rounded once: the
    correctly rounded value in (nearly) every element. Written as (x * rstd + c) + c', 73% of the elements
    matched at mean 100 and 98% at mean 0 (two roundings)."""
    x = _centred_rows(mu)
    y, _, rstd = tileport.layer_norm_fwd(x, None, None, 1e-5, backend="tilelang")
    x64 = x.double()
    exact = ((x64 - x64.mean(-1, keepdim=True)) * rstd.double()[:, None]).float()
    assert (y == exact).double().mean().item() >= 0.9999


def test_backward_centres_on_the_exact_mean_the_saved_fp32_mean_stands_for():
    """One row at mean 100: dweight = dy * xhat alone. About the saved fp32 mean, xhat carried that mean's
    rounding (up to 4e-6 on every x - mean: relative errors up to 2.4e-3 where x is near the mean); about the
    fp64 mean it is within two roundings of the golden's."""
    x = _centred_rows(100.0, rows=1)
    dy = torch.randn(1, x.shape[1], generator=torch.Generator().manual_seed(4))
    _, mean, rstd = tileport.layer_norm_fwd(x, None, None, 1e-5, backend="tilelang")
    _, dw, _ = tileport.layer_norm_bwd(x, mean, rstd, dy, torch.ones(x.shape[1]), backend="tilelang")
    x64 = x.double()
    gold = (dy.double() * (x64 - x64.mean(-1, keepdim=True)) * rstd.double()[:, None])[0]
    assert ((dw.double() - gold).abs() / gold.abs()).max().item() < 3 * 2.0**-24


def test_backward_uses_a_given_mean_that_is_not_the_rows_as_given():
    """Statistics that are not the row's own (here its mean + 0.5) are taken as given: xhat about them."""
    x = _centred_rows(100.0, rows=1)
    dy = torch.randn(1, x.shape[1], generator=torch.Generator().manual_seed(4))
    _, mean, rstd = tileport.layer_norm_fwd(x, None, None, 1e-5, backend="tilelang")
    given = mean + 0.5
    _, dw, _ = tileport.layer_norm_bwd(x, given, rstd, dy, torch.ones(x.shape[1]), backend="tilelang")
    gold = (dy.double() * (x.double() - given.double()[:, None]) * rstd.double()[:, None])[0]
    assert ((dw.double() - gold).abs() / gold.abs()).max().item() < 3 * 2.0**-24


def _row_and_fp64_rstd(seed=3):
    """One row (seed 3: its fp32 rstd rounds by +0.75 ulp of the fp64 one) and that fp64 rstd."""
    x = (3 * torch.randn(1, 1000, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))).float()
    x64 = x.double()
    return x, 1 / torch.sqrt(((x64 - x64.mean(-1, keepdim=True)) ** 2).mean(-1) + 1e-5)


def test_backward_given_eps_scales_by_the_fp64_rstd_the_saved_one_rounds():
    """Given the forward's eps, dweight = dy * xhat carries no bias from the saved rstd's rounding (0.75 ulp
    here, the same for every element of the row: what layer_norm's L1 fp32 dweight on two rows kept against the
    golden); without eps the saved rstd is used as given and the bias is that rounding."""
    x, r64 = _row_and_fp64_rstd()
    dy = torch.randn(1, x.shape[1], generator=torch.Generator().manual_seed(4))
    _, mean, rstd = tileport.layer_norm_fwd(x, None, None, 1e-5, backend="tilelang")
    rounding = ((rstd.double() - r64) / r64).item()
    assert abs(rounding) > 0.7 * 2.0**-24
    gold = (dy.double() * (x.double() - x.double().mean(-1, keepdim=True)) * r64[:, None])[0]
    bias = {}
    for eps in (1e-5, None):
        _, dw, _ = tileport.layer_norm_bwd(x, mean, rstd, dy, torch.ones(x.shape[1]), backend="tilelang", eps=eps)
        bias[eps] = ((dw.double() - gold) / gold).mean().item()
    assert abs(bias[1e-5]) < 0.15 * 2.0**-24
    assert abs(bias[None] - rounding) < 0.1 * 2.0**-24


def test_backward_given_eps_uses_a_given_rstd_that_is_not_the_forwards_as_given():
    """An rstd that is not the forward's rounded (here 1.5 times it) is taken as given even with eps."""
    x, _ = _row_and_fp64_rstd()
    dy = torch.randn(1, x.shape[1], generator=torch.Generator().manual_seed(4))
    _, mean, rstd = tileport.layer_norm_fwd(x, None, None, 1e-5, backend="tilelang")
    given = rstd * 1.5
    _, dw, _ = tileport.layer_norm_bwd(x, mean, given, dy, torch.ones(x.shape[1]), backend="tilelang", eps=1e-5)
    gold = (dy.double() * (x.double() - x.double().mean(-1, keepdim=True)) * given.double()[:, None])[0]
    assert ((dw.double() - gold).abs() / gold.abs()).max().item() < 3 * 2.0**-24
