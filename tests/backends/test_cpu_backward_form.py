"""The CPU norms' backward picks its form per row (``norm_stats.NEAR_PARALLEL``): rows whose x and dy are nearly
parallel take the exact fp64 eps form, the others g - x * k with k from the row's fp64 sums (fp64 for an fp32 dx,
fp32 pairs for a 16-bit one). Both sides of the rule against the float64 golden, through the public API."""

import pytest
import torch

import tileport
from tileport.backends.tilelang.cpu.norm_stats import NEAR_PARALLEL

D = 64


def _rows(sin2: float, scale: float, dtype, seed=0):
    """x and dy of 8 rows whose angle has sin^2 = ``sin2``: dy = 3 x + a component orthogonal to x."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(8, D, generator=gen, dtype=torch.float64) + 2) * scale
    x = x.to(dtype).double()
    p = torch.randn(8, D, generator=gen, dtype=torch.float64)
    p -= (p * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True) * x  # orthogonal to x
    along = 3 * x
    p *= (sin2 / (1 - sin2)) ** 0.5 * along.norm(dim=-1, keepdim=True) / p.norm(dim=-1, keepdim=True)
    return x.to(dtype), (along + p).to(dtype)


def _error(dx, gold) -> float:
    """The largest norm-wise relative error of a row of ``dx``."""
    return ((dx.double() - gold).norm(dim=-1) / gold.norm(dim=-1)).max().item()


def _dx(op, x, dy, eps):
    """dx of ``op`` given the forward's eps, the float64 golden's, and the fp32 form's (no eps)."""
    if op == "l2norm":
        _, r = tileport.l2norm_fwd(x, eps)
        dx, fp32_form = tileport.l2norm_bwd(x, r, dy, eps=eps), tileport.l2norm_bwd(x, r, dy)
        gold = torch.func.vjp(lambda t: t / (t * t).sum(-1, keepdim=True).add(eps).sqrt(), x.double())[1](dy.double())[
            0
        ]
    else:
        _, r = tileport.rms_norm_fwd(x, None, eps)
        dx, fp32_form = tileport.rms_norm_bwd(x, r, dy, eps=eps)[0], tileport.rms_norm_bwd(x, r, dy)[0]
        gold = torch.func.vjp(lambda t: t * (t * t).mean(-1, keepdim=True).add(eps).rsqrt(), x.double())[1](
            dy.double()
        )[0]
    return dx, gold, fp32_form


@pytest.mark.parametrize("op", ["l2norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_parallel_rows_take_the_exact_form(op, dtype):
    """dy = 2 x (exact in every dtype), x ~ 1000 and eps 1e-12: dx = rstd * eps' * dy / (ss + eps') is below fp64's
    resolution of g - x * k (eps' / ss ~ 2^-76), so k's rounding alone (2^-53 |x k|) would be 2^20 times dx; the
    exact form's products cancel exactly and leave the eps term. Within rounding of the golden only if these
    rows take the exact form (with the choice forced off, this test and the D = 1 ones in the ops' tests fail)."""
    x, _ = _rows(0.0, 1000.0, dtype)
    eps = 1e-12
    dx = _dx(op, x, 2 * x, eps)[0]
    # the golden in closed form (autograd in fp64 leaves its own cancellation, 2^-53, as noise here):
    # g - x * k = 2 x (1 - ss / (ss + eps')) = 2 x eps' / (ss + eps')
    xd = x.double()
    ss, n = (xd * xd).sum(-1, keepdim=True), 1 if op == "l2norm" else D
    gold = 2 * xd * (n * eps) / (ss + n * eps) / (ss / n + eps).sqrt()
    assert _error(dx, gold) <= 4 * torch.finfo(dtype).eps


@pytest.mark.parametrize("op", ["l2norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("sin2", [4 * NEAR_PARALLEL, NEAR_PARALLEL / 4], ids=["outside-the-rule", "inside-the-rule"])
def test_rows_near_the_threshold_meet_the_golden(op, dtype, sin2):
    """Rows at either side of the threshold: dy's component across x is 2^-9 or 2^-11 of dy, so g - x * k cancels
    by that much. The form taken is within two output roundings of the golden norm-wise on both sides (the fast
    form's error from k's rounding is 2^-53 |x k|, far below fp32's), where the fp32 form (no eps: fp32 sums)
    loses about 2^-24 |x k|, 2^9-2^11 times an ulp of dx (bf16: the output's own rounding, 2^-9, hides it)."""
    x, dy = _rows(sin2, 1.0, dtype, seed=1)
    dx, gold, fp32_form = _dx(op, x, dy, 1e-6)
    err = _error(dx, gold)
    assert err <= 2 * torch.finfo(dtype).eps
    if dtype == torch.float32:
        assert _error(fp32_form, gold) > 8 * err
