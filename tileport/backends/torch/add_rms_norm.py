"""add_rms_norm as the torch composite, the precision benchmark: the add in fp32 (fp64 for fp64) rounded to
residual_out's dtype, then rms_norm's composite over residual_out; the backward as torch's autograd does it
(rms_norm's dx rounded to residual_out's dtype, then the direct gradient added there)."""

from __future__ import annotations

import torch

from . import compute_dtype, rms_norm


def forward(x, residual, weight, eps: float, offset: float, residual_dtype: torch.dtype, output_dtype: torch.dtype):
    """(y, residual_out, rstd) for rows ``x[M, D]`` and ``residual[M, D]``."""
    cdt = compute_dtype(x.dtype)
    s = (x.to(cdt) + residual.to(cdt)).to(residual_dtype)
    y, rstd = rms_norm.forward(s, weight, eps, offset, "fp32", output_dtype)
    return y, s, rstd


def backward(residual_out, rstd, dy, dresidual_out, weight, offset: float, eps: float | None = None):
    """(dsum in residual_out's dtype, dweight in the compute dtype or None)."""
    dx, dw = rms_norm.backward(residual_out, rstd, dy, weight, offset, "fp32", eps)
    return (dx if dresidual_out is None else dx + dresidual_out.to(dx.dtype)), dw
