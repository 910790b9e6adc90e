"""The standard's inf/nan rule (clause 5.3.3), position by position over the output under test ``a``, the
float64 golden ``g`` (rounded to the output's dtype: a value beyond fp16's range is inf in any fp16
implementation) and the same-dtype benchmark ``b``:

- correct where ``a`` equals ``b`` (the same inf/nan, or both finite), or where ``g`` is inf/nan and ``a``
  equals it;
- an error only where ``g`` is inf/nan, ``a`` differs from it and ``b`` matches it;
- where ``g``, ``a`` and ``b`` all differ, the position needs investigation: reported, not failed.

Where ``g`` is finite and ``a`` is inf/nan unlike ``b``, the metrics see an infinite error. Positions where
``a`` and ``b`` share an inf/nan are left out of both sides' metrics (clause 5.3.3 calls them correct).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FINITE, NAN, POS_INF, NEG_INF = 0, 1, 2, 3


def classes(t: torch.Tensor) -> torch.Tensor:
    """Per element: FINITE, NAN, POS_INF or NEG_INF (int8)."""
    c = torch.zeros(t.shape, dtype=torch.int8)
    c[torch.isnan(t)] = NAN
    c[torch.isposinf(t)] = POS_INF
    c[torch.isneginf(t)] = NEG_INF
    return c


@dataclass(frozen=True)
class Positions:
    """Masks over (samples, elements)."""

    error: torch.Tensor  # the golden is inf/nan, the benchmark matches it, the output does not
    review: torch.Tensor  # golden, output and benchmark all differ at an inf/nan
    shared: torch.Tensor  # output and benchmark hold the same inf/nan: correct, out of the metrics


def positions(a: torch.Tensor, g_out: torch.Tensor, b: torch.Tensor | None = None) -> Positions | None:
    """Clause 5.3.3 over same-shaped ``a``, ``g_out`` (the golden in the output's dtype) and ``b``; None when
    all three are finite everywhere (the common case: nothing to classify). Without a benchmark, the golden
    stands in for it: ``a`` must then hold the golden's inf/nan exactly."""
    if all(bool(torch.isfinite(t).all()) for t in ((a, g_out) if b is None else (a, g_out, b))):
        return None
    ca, cg = classes(a), classes(g_out)
    cb = cg if b is None else classes(b)
    golden_nf = cg != FINITE
    ok = (ca == cb) | (golden_nf & (ca == cg))
    return Positions(
        error=~ok & golden_nf & (cb == cg), review=~ok & golden_nf & (cb != cg), shared=(ca == cb) & (ca != FINITE)
    )
