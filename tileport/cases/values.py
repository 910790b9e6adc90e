"""Tensor values of a case: the standard's distributions (section 2; numbers in ``precision/standard.py``),
its outliers (5.1.2), the special scenarios' fills (2.1), and the suite's own stress ranges.

Values are drawn in fp32 (fp64 for fp64 cases) from the case's generator, then cast by the caller.
"""

from __future__ import annotations

import math

import torch

from ..precision.standard import NORMAL_MU, NORMAL_SIGMA, OUTLIER_FACTOR, OUTLIER_PER, TINY_BOUND, UNIFORM_BOUND
from .schema import Domain, ValueRange

STANDARD = ("uniform", "normal", "tiny", "outliers")  # the standard's distributions
FILLS = {"nan": (math.nan,), "inf": (math.inf,), "-inf": (-math.inf,), "mixed_inf": (math.inf, -math.inf)}
# Magnitudes of a suite's `large` range per dtype: near the top of what the dtype holds, below its overflow
# on a cast (fp16 max 65504). fp32 math squares them: the sum of squares may overflow in fp32.
LARGE = {
    torch.float16: (1e3, 6e4),
    torch.bfloat16: (1e15, 1e18),
    torch.float32: (1e15, 1e18),
    torch.float64: (1e15, 1e18),
}


def _math_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _uniform(shape, bound, dt, gen):
    return (torch.rand(shape, generator=gen, dtype=dt) * 2 - 1) * bound


def outlier_count(n: int) -> int:
    """k = max(1, floor(n / 1000)) positions of an n-element tensor (0 for an empty one)."""
    return max(1, n // OUTLIER_PER) if n else 0


def add_outliers(v: torch.Tensor, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """k distinct positions, uniformly at random, multiplied by 1000, or by less where that would leave the
    dtype's finite range (the standard: regenerate or lower the factor)."""
    flat = v.view(-1)
    k = outlier_count(flat.numel())
    if k:
        where = torch.randperm(flat.numel(), generator=gen)[:k]
        peak = float(flat[where].abs().max())
        factor = min(OUTLIER_FACTOR, 0.5 * torch.finfo(dtype).max / peak) if peak > 0 else OUTLIER_FACTOR
        flat[where] *= factor
    return v


def standard_values(
    kind: str, shape, dtype: torch.dtype, mu: float, sigma: float, gen: torch.Generator
) -> torch.Tensor:
    """One input's values from the standard's distribution ``kind``."""
    dt = _math_dtype(dtype)
    if kind == "uniform":
        return _uniform(shape, UNIFORM_BOUND, dt, gen)
    if kind == "tiny":
        return _uniform(shape, TINY_BOUND, dt, gen)
    if kind == "normal":
        return torch.randn(shape, generator=gen, dtype=dt) * sigma + mu
    if kind == "outliers":
        return add_outliers(_uniform(shape, UNIFORM_BOUND, dt, gen), dtype, gen)
    raise ValueError(f"unknown distribution {kind!r}; the standard's are {', '.join(STANDARD)}")


def draw_mu_sigma(rng) -> tuple[float, float]:
    """N(mu, sigma)'s parameters for one case, drawn as the standard says."""
    return float(rng.uniform(*NORMAL_MU)), float(rng.uniform(*NORMAL_SIGMA))


def suite_values(r: ValueRange, shape, dtype: torch.dtype, near_eps: float, gen: torch.Generator) -> torch.Tensor:
    """One input's values from a suite's own range (tileport's stress cases beyond the standard's mix)."""
    dt = _math_dtype(dtype)
    if r.kind == "normal":
        return torch.randn(shape, generator=gen, dtype=dt) * r.scale
    if r.kind == "uniform":
        return torch.rand(shape, generator=gen, dtype=dt) * (r.high - r.low) + r.low
    if r.kind == "near_eps":  # per row, magnitudes within a factor 10 of where the op's eps decides the row
        rows = torch.rand(shape[:-1] + (1,), generator=gen, dtype=dt) * 2 - 1
        return torch.randn(shape, generator=gen, dtype=dt) * near_eps * 10.0**rows
    lo, hi = LARGE[dtype]  # large
    mag = 10.0 ** (torch.rand(shape, generator=gen, dtype=dt) * (math.log10(hi) - math.log10(lo)) + math.log10(lo))
    return mag * torch.sign(torch.randn(shape, generator=gen, dtype=dt))


def fill(shape, dtype: torch.dtype, what: str, gen: torch.Generator) -> torch.Tensor:
    """Every element nan, inf or -inf, or a random mix of inf and -inf."""
    values = FILLS[what]
    if len(values) == 1:
        return torch.full(shape, values[0], dtype=_math_dtype(dtype))
    signs = torch.randint(0, 2, shape, generator=gen).to(_math_dtype(dtype)) * 2 - 1
    return signs * math.inf


def plant(v: torch.Tensor, scenario: str | None, gen: torch.Generator) -> torch.Tensor:
    """tileport's row scenarios on the primary input: rows of zeros, or inf/nan in a few rows (only those
    rows may change in the output)."""
    if scenario == "zero_rows" and v.numel():
        v.view(-1, v.shape[-1])[::2] = 0.0
    elif scenario == "infnan_rows" and v.numel():
        rows = v.view(-1, v.shape[-1])
        cols = torch.randint(0, rows.shape[1], (3,), generator=gen)
        rows[1, cols[0]], rows[3, cols[1]], rows[5, cols[2]] = math.inf, -math.inf, math.nan
    return v


def integer_values(
    kind: str, shape, low: int, high: int, outside: float, allowed: tuple[int, ...], ignore: float, gen: torch.Generator
) -> torch.Tensor:
    """An integer tensor's values (int64): uniform in [low, high) (``lengths``: [low, high]); a share ``outside``
    of the elements out of that range, half below low (negative where low is 0), half at or past high, within one
    range's width; a share ``ignore`` set to one of the ``allowed`` values (ignore_index). An empty range puts every
    element outside."""
    high = high + 1 if kind == "lengths" else high
    width = max(1, high - low)
    inside = torch.randint(low, high, shape, generator=gen) if high > low else torch.full(shape, low, dtype=torch.int64)
    u = torch.rand(shape, generator=gen)
    below = low - 1 - torch.randint(0, width, shape, generator=gen)
    above = max(high, low) + torch.randint(0, width, shape, generator=gen)
    out_share = 1.0 if high <= low else outside
    v = torch.where(u < out_share / 2, below, torch.where(u < out_share, above, inside))
    if allowed and ignore:
        pick = torch.tensor(allowed, dtype=torch.int64)[torch.randint(0, len(allowed), shape, generator=gen)]
        v = torch.where(torch.rand(shape, generator=gen) < ignore, pick, v)
    return v


def admits(domain: Domain | None, fill_name: str) -> bool:
    """Whether a special scenario's fill (``FILLS``) lies in an input's domain: any without one; -inf in a
    nonpositive one unbounded below; nan and the infinities in no other (the standard: the special values stay
    within the operator's valid input range, like every generated value)."""
    if domain is None:
        return True
    return domain.kind == "nonpositive" and domain.low == -math.inf and fill_name == "-inf"


def in_domain(v: torch.Tensor, domain: Domain, attrs: dict, gen: torch.Generator) -> torch.Tensor:
    """A floating input's drawn values brought into its valid domain (``schema.Domain``)."""
    if domain.kind == "nonpositive":
        v = (-v.abs()).clamp_min(domain.low)
        if domain.zeros:
            v = torch.where(torch.rand(v.shape, generator=gen, dtype=v.dtype) < domain.zeros, 0.0, v)
        return v
    if domain.kind == "unit_interval":
        return torch.sigmoid(v)
    if domain.unless and attrs.get(domain.unless):  # unit_rows: the operator normalizes the rows itself
        return v
    norm = v.square().sum(-1, keepdim=True).sqrt()
    return torch.where(norm > 0, v / norm, v)


def offsets(count: int, total: int, least: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` cumulative offsets (int64) rising from 0 to ``total``: count - 1 sequences of at least ``least``
    tokens each, the rest spread by cuts drawn uniformly (many short sequences where the rest is small)."""
    n = max(count - 1, 0)
    if n == 0:
        return torch.zeros(count, dtype=torch.int64)
    least = min(least, total // n)  # too few tokens for the least length (an empty scenario): shorter sequences
    rest = total - n * least
    cuts = torch.randint(0, rest + 1, (n - 1,), generator=gen).sort().values
    edges = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.tensor([rest])])
    lengths = edges.diff() + least
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
