"""rms_norm as the torch composite, the precision benchmark: fp32 math (fp64 for fp64), torch's mean."""

from __future__ import annotations

import torch

from . import compute_dtype


def _scale(weight, offset: float, cdt):
    return None if weight is None else weight.to(cdt) + offset


def forward(x, weight, eps: float, offset: float, casting: str, output_dtype: torch.dtype, out=None):
    """(y, rstd) for rows ``x[M, D]``: rstd = rsqrt(mean(x^2) + eps), y = x * rstd * (weight + offset).

    casting "llama": x * rstd and the weight are rounded to x's dtype and multiplied there (HF LlamaRMSNorm).
    """
    cdt = compute_dtype(x.dtype)
    xf = x.to(cdt)
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
    n = xf * rstd.unsqueeze(-1)
    w = _scale(weight, offset, cdt)
    if w is None:
        y = n
    elif casting == "llama":
        y = n.to(x.dtype) * w.to(x.dtype)
    else:
        y = n * w
    y = y.to(output_dtype)
    if out is not None:
        out[0].copy_(y)
        out[1].copy_(rstd)
        return out
    return y, rstd


def backward(x, rstd, dy, weight, offset: float, casting: str, eps: float | None = None):
    """(dx in x's dtype, dweight in the compute dtype or None): with n = x * rstd and g = dy * (w + offset),
    dx = (g - n * mean(g * n)) * rstd and dweight = sum over rows of dy * n (n rounded to x's dtype for llama).

    In fp64 (the golden) at D = 1 with the forward's ``eps``: dx = g * rstd * eps / (x^2 + eps), the same value
    without the cancellation that fp64 itself rounds to noise or 0 once eps / x^2 nears 2^-53 (as l2norm's).
    Otherwise, and in fp32 (the benchmark), ``eps`` is not used."""
    cdt = compute_dtype(x.dtype)
    xf, r, gy = x.to(cdt), rstd.to(cdt).unsqueeze(-1), dy.to(cdt)
    n = xf * r
    w = _scale(weight, offset, cdt)
    g = gy if w is None else gy * w
    if eps is not None and cdt == torch.float64 and x.shape[-1] == 1:
        dx = (g * r * eps / (xf * xf + eps)).to(x.dtype)
    else:
        dx = ((g - n * (g * n).mean(-1, keepdim=True)) * r).to(x.dtype)
    if w is None:
        return dx, None
    nd = n.to(x.dtype).to(cdt) if casting == "llama" else n
    return dx, (gy * nd).sum(0)
