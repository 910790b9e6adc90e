"""Shapes by the standard's rules (section 2): every dimension count a suite allows, each dimension's value
generalized in steps of 15 and 16 at L0 (values 15k, 16k) and random at L1 and L2, the last (reduced)
dimension at most the suite's ``max_dim`` and the total at most its ``max_length`` (and 2^31)."""

from __future__ import annotations

import math

import numpy as np

from ..precision.standard import DIM_STEPS, MAX_ELEMENTS


def draw_dim(rng: np.random.Generator, cap: int, generalized: bool) -> int:
    """One dimension in [1, cap], log-uniform (many small values, some large); at L0 a multiple of 15 or 16
    (1 where the cap is below 15)."""
    cap = max(1, cap)
    if generalized:
        step = int(rng.choice(DIM_STEPS))
        if cap < step:
            return 1
        return step * min(cap // step, int(math.exp(rng.uniform(0.0, math.log(cap // step + 1)))) or 1)
    return max(1, min(cap, int(math.exp(rng.uniform(0.0, math.log(cap + 1))))))


def draw_shape(
    rng: np.random.Generator, rank: int, max_dim: int, max_length: int, generalized: bool
) -> tuple[int, ...]:
    """A shape of ``rank`` dimensions: the last first (in half of the cases capped near the rank's fair share,
    so leading dimensions get room), then the leading ones sharing what is left of the budget."""
    budget = min(max_length, MAX_ELEMENTS)
    fair = max(1, int(4 * budget ** (1.0 / rank)))
    last = draw_dim(rng, min(max_dim, budget if rng.random() < 0.5 else fair), generalized)
    left = budget // last
    lead = []
    for i in range(rank - 1, 0, -1):  # i leading dimensions still to draw
        cap = max(1, min(left, 2 * round(left ** (1.0 / i))))
        d = draw_dim(rng, cap, generalized)
        lead.append(d)
        left //= d
    return (*lead, last)
