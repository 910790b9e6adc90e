"""add_rms_norm in Triton: rms_norm's kernels (``triton/rms_norm.py``) with their residual paths. The forward
reads x and residual, writes residual_out = x + residual (fp32 add, rounded once) and normalizes it; the
backward adds the gradient reaching residual_out directly to rms_norm's dx over residual_out."""

from __future__ import annotations

import torch

from .. import outputs
from . import rms_norm


def forward(x, residual, weight, eps: float, offset: float, residual_dtype: torch.dtype, output_dtype: torch.dtype):
    """(y, residual_out, rstd) for non-empty 2-D ``x`` and ``residual`` with unit-stride rows."""
    s = outputs.empty(tuple(x.shape), residual_dtype, x.device)
    y, rstd = rms_norm.forward(x, weight, eps, offset, "fp32", output_dtype, residual=residual, residual_out=s)
    return y, s, rstd


def backward(residual_out, rstd, dy, dresidual_out, weight, offset: float, eps: float):
    """(dsum in residual_out's dtype, dweight fp32 or None)."""
    return rms_norm.backward(residual_out, rstd, dy, weight, offset, "fp32", eps, dres=dresidual_out)
