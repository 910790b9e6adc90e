"""rms_norm forward and backward against the float64 golden (dual benchmark L0), on every CPU backend."""

import math

import pytest
import torch

import tileport
from tileport.precision import assert_dual_benchmark

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DIMS = [1, 7, 100, 512, 4097]


def _weight(D, dtype, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (1.0 + 0.5 * torch.randn(D, generator=g)).to(dtype)


def _check(x, w, dy, golden, backend=None, eps=1e-6, offset=0.0):
    y, rstd = tileport.rms_norm_fwd(x, w, eps, offset=offset, backend=backend)
    yb, rb = tileport.rms_norm_fwd(x, w, eps, offset=offset, backend="torch")
    dx, dw = tileport.rms_norm_bwd(x, rstd, dy, w, offset=offset, backend=backend, eps=eps)  # as autograd calls it
    dxb, dwb = tileport.rms_norm_bwd(x, rb, dy, w, offset=offset, backend="torch")
    gold = golden("rms_norm", x=x, weight=w, dy=dy, eps=eps) if offset == 0 else None
    if gold is None:  # the golden with an offset: the same math on float64 weight + offset
        wd = None if w is None else w.double() + offset
        gold = golden("rms_norm", x=x, weight=wd, dy=dy, eps=eps)
    assert y.dtype == x.dtype and rstd.dtype == torch.float32 and dx.dtype == x.dtype
    assert_dual_benchmark(y, gold["y"], yb, dtype=x.dtype)
    assert_dual_benchmark(rstd, gold["rstd"], rb, dtype=torch.float32)
    assert_dual_benchmark(dx, gold["dx"], dxb, dtype=x.dtype)
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        assert_dual_benchmark(dw, gold["dweight"], dwb, dtype=w.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", DIMS)
def test_tilelang_forward_backward_with_weight_match_golden(dtype, D, golden, randn):
    _check(randn(64, D, dtype=dtype), _weight(D, dtype), randn(64, D, dtype=dtype, seed=1), golden)


@pytest.mark.parametrize("mu,eps", [(64, 1e-5), (1000, 1e-12)], ids=["near-fp32", "below-fp64"])
@pytest.mark.parametrize("weighted", [False, True], ids=["no-weight", "weight"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)  # fp16: such a dx (~1e-11) underflows
def test_backward_with_eps_keeps_the_component_along_x(dtype, weighted, mu, eps, golden):
    """At D = 1, dx = g * rstd * eps / (x^2 + eps) with g = dy * w: below fp32's resolution for x ~ 64 and eps
    1e-5, below fp64's for x ~ 1000 and eps 1e-12. Given eps, the CPU kernel is within rounding of the golden;
    the fp32 form is noise or 0 there (as l2norm's)."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(432, 1, generator=gen) * 2.5 + mu).to(dtype)
    dy = torch.randn(432, 1, generator=gen).to(dtype)
    w = (1.0 + 0.5 * torch.randn(1, generator=gen)).to(dtype) if weighted else None
    _, r = tileport.rms_norm_fwd(x, w, eps)
    g = golden("rms_norm", x=x, weight=w, dy=dy, eps=eps)["dx"]

    def max_rel(a):
        return ((a.double() - g).abs() / g.abs()).max().item()

    dx, _ = tileport.rms_norm_bwd(x, r, dy, w, eps=eps)
    assert max_rel(dx) <= 4 * torch.finfo(dtype).eps  # rounded rstd, g * w in fp32, the output rounding
    assert max_rel(tileport.rms_norm_bwd(x, r, dy, w)[0]) > 0.5
    xg = x.clone().requires_grad_()
    tileport.rms_norm(xg, w, eps).backward(dy)
    assert torch.equal(xg.grad, dx), "autograd passes the forward's eps to the backward"


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_weight_and_with_gemma_offset(dtype, golden, randn):
    x, dy = randn(48, 300, dtype=dtype), randn(48, 300, dtype=dtype, seed=2)
    _check(x, None, dy, golden)
    _check(x, 0.1 * _weight(300, dtype), dy, golden, offset=1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_interpreter_matches_golden(dtype, golden, randn):
    _check(
        randn(33, 200, dtype=dtype), _weight(200, dtype), randn(33, 200, dtype=dtype, seed=3), golden, backend="triton"
    )


def test_matches_torch_rms_norm_and_its_autograd(randn):
    x, w = randn(16, 5, 256).requires_grad_(), _weight(256, torch.float32).requires_grad_()
    y = tileport.rms_norm(x, w, eps=1e-5)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    yr = torch.nn.functional.rms_norm(xr, (256,), wr, 1e-5)
    torch.testing.assert_close(y, yr, rtol=2e-6, atol=2e-6)
    dy = torch.randn_like(y)
    y.backward(dy)
    yr.backward(dy)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["tilelang", "torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_llama_casting_is_bit_exact_with_hf_llama_rmsnorm(backend, dtype, randn):
    x, w = randn(40, 320, dtype=dtype), _weight(320, dtype)
    # HF LlamaRMSNorm.forward, written out
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    hf = w * h.to(dtype)
    y = tileport.rms_norm(x, w, 1e-6, casting="llama", backend=backend)
    assert torch.equal(y, hf)
    assert not torch.equal(tileport.rms_norm(x, w, 1e-6, backend=backend), hf)  # fp32 casting rounds once: differs


def test_rstd_and_offset_semantics(randn):
    x = randn(8, 64)
    y, rstd = tileport.rms_norm_fwd(x, torch.zeros(64), offset=1.0)
    expected = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), expected, rtol=1e-6, atol=0)
    torch.testing.assert_close(y, tileport.rms_norm(x), rtol=0, atol=0)  # (0 + 1) scale is no scale


def test_float64_inputs_run_on_the_torch_reference(randn):
    x = randn(4, 32).double()
    y, rstd = tileport.rms_norm_fwd(x, torch.ones(32, dtype=torch.float64))
    assert y.dtype == rstd.dtype == torch.float64


@pytest.mark.parametrize("with_eps", [True, False], ids=["eps-form", "fp32-form"])
def test_one_rows_dweight_is_its_term_rounded_once(with_eps):
    """dweight of one row is dy * x * rstd itself. Given eps, rstd is the fp64 value the saved fp32 one stands
    for and the term is rounded once: (nearly) every element is the golden's correctly rounded. Without eps the
    term is rounded once with the given rstd. Written dy * (x * rstd) with the fp32 rstd, about half of the
    elements matched (two roundings plus rstd's own)."""
    g = torch.Generator().manual_seed(6)
    x, dy = 3 * torch.randn(1, 4096, generator=g), torch.randn(1, 4096, generator=g)
    w = torch.ones(4096)
    _, rstd = tileport.rms_norm_fwd(x, w, 1e-6, backend="tilelang")
    _, dw = tileport.rms_norm_bwd(x, rstd, dy, w, backend="tilelang", eps=1e-6 if with_eps else None)
    x64 = x.double()
    r64 = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) if with_eps else rstd.double()[:, None]
    exact = (dy.double() * x64 * r64)[0].float()
    assert (dw == exact).double().mean().item() >= 0.999


def test_dweight_over_many_rows_is_its_terms_sum_rounded_once():
    """dweight over 4096 rows (128 blocks of 32 rows, each a compensated fp32 partial): the blocks are summed in
    fp64 and rounded once, so each column is the sum of its terms (each rounded once) correctly rounded, but
    for near-ties. Summed as an fp32 tree over the blocks (8 levels, a rounding each), about half the columns
    missed it; that lost add_rms_norm's L1 case 9060 (D = 12 over 4560 rows) to torch's fp32 sum."""
    g = torch.Generator().manual_seed(7)
    x, dy = 3 + torch.randn(4096, 64, generator=g), torch.randn(4096, 64, generator=g)
    w = torch.ones(64)
    _, rstd = tileport.rms_norm_fwd(x, w, 1e-6, backend="tilelang")
    _, dw = tileport.rms_norm_bwd(x, rstd, dy, w, backend="tilelang", eps=1e-6)
    x64 = x.double()
    terms = (dy.double() * x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)).float()
    exact = terms.double().sum(0).float()
    assert (dw == exact).double().mean().item() >= 0.95


@pytest.mark.parametrize("ulps", [0, 1, -1])
def test_a_forward_rstd_an_ulp_off_stands_for_the_fp64_one(ulps):
    """The forward's rstd is within 2.5 * 2^-24 of the fp64 value (its sum of squares in fp32 blocks); given eps,
    the backward takes any rstd that near as that value (norm_stats.FORWARD_RSTD): dweight of one row is then
    the golden term rounded once (an ulp is at most 2 * 2^-24 of the value). An rstd 1% away is a different rstd and is
    used as given."""
    g = torch.Generator().manual_seed(6)
    x, dy = 3 * torch.randn(1, 4096, generator=g), torch.randn(1, 4096, generator=g)
    w = torch.ones(4096)
    x64 = x.double()
    r64 = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    given = r64.float().view(1)
    for _ in range(abs(ulps)):
        given = torch.nextafter(given, torch.tensor(math.inf if ulps > 0 else 0.0))
    _, dw = tileport.rms_norm_bwd(x, given, dy, w, backend="tilelang", eps=1e-6)
    assert (dw == (dy.double() * x64 * r64)[0].float()).double().mean().item() >= 0.999
    other = given * 1.01
    _, dw = tileport.rms_norm_bwd(x, other, dy, w, backend="tilelang", eps=1e-6)
    assert (dw == (dy.double() * x64 * other.double())[0].float()).double().mean().item() >= 0.99
