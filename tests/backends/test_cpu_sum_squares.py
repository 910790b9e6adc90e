"""The CPU forwards' sum of squares (``rowwise.row_sum_squares64``): per 64 columns the squares are added in fp32
(at most three roundings of positive terms), the blocks and the remaining columns in fp64. Its error must stay
below 3 * 2^-24 of the sum for every D, so the rstd is within 2.5 * 2^-24 of the float64 golden's (1.5 from
the sum through the square root, one rounding to fp32); a running fp32 sum per lane would miss that by
thousands of ulps on long rows (constant rows of 2^20: about 6000 * 2^-24)."""

import pytest
import torch

import tileport

U = 2.0**-24
EPS = 1e-6


def _rstd(op, x):
    if op == "l2norm":
        return tileport.l2norm_fwd(x, EPS)[1], 1 / ((x.double() ** 2).sum(-1) + EPS).sqrt()
    return tileport.rms_norm_fwd(x, None, EPS)[1], 1 / ((x.double() ** 2).mean(-1) + EPS).sqrt()


def _rel(r, gold) -> float:
    return ((r.double() - gold) / gold).abs().max().item()


@pytest.mark.parametrize("op", ["l2norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_rows_rstd_within_the_blocked_sums_bound(op, dtype):
    gen = torch.Generator().manual_seed(0)
    D = 2**20
    x = torch.cat([torch.full((1, D), 1 + 2**-7), torch.rand(2, D, generator=gen) + 0.5]).to(dtype)
    r, gold = _rstd(op, x)
    assert _rel(r, gold) <= 2.5 * U


@pytest.mark.parametrize("op", ["l2norm", "rms_norm"])
def test_one_large_square_per_block_keeps_the_bound(op):
    """A block whose first square dwarfs the others (each FMA rounds away most of a small term) and rows of
    every length around the 64-column block and the 16-lane vector."""
    gen = torch.Generator().manual_seed(1)
    for D in (1, 15, 16, 17, 48, 63, 64, 65, 127, 128, 129, 200, 4097):
        x = torch.rand(4, D, generator=gen) * 1e-3 + 1e-4
        x[:, ::64] = 1e3
        r, gold = _rstd(op, x)
        assert _rel(r, gold) <= 2.5 * U, D
