"""layer_norm as torch's own (``torch.native_layer_norm`` and its backward), the precision benchmark: fp32
math for 16-bit inputs (fp64 for fp64: the golden)."""

from __future__ import annotations

import torch

from . import compute_dtype


def _param(p, cdt):
    return None if p is None else p.to(cdt)


def forward(x, weight, bias, eps: float, output_dtype: torch.dtype, out=None):
    """(y, mean, rstd) for rows ``x[M, D]``: y = (x - mean) * rstd * weight + bias."""
    cdt = compute_dtype(x.dtype)
    y, mean, rstd = torch.native_layer_norm(x.to(cdt), x.shape[-1:], _param(weight, cdt), _param(bias, cdt), eps)
    y, mean, rstd = y.to(output_dtype), mean.view(-1), rstd.view(-1)
    if out is not None:
        for o, v in zip(out, (y, mean, rstd)):
            o.copy_(v)
        return out
    return y, mean, rstd


def backward(x, mean, rstd, dy, weight, bias, eps: float | None = None):
    """(dx in x's dtype, dweight or None, dbias or None in the compute dtype), from the statistics given
    (``eps`` is not used: torch's backward takes none)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    cdt = compute_dtype(x.dtype)
    stat = lambda t: t.to(cdt).view(-1, 1)  # noqa: E731 (torch keeps them as (M, 1))
    w = _param(weight, cdt)
    b = x.new_zeros(x.shape[-1:], dtype=cdt) if with_dbias else None  # torch reads only its presence
    mask = [True, w is not None, with_dbias]
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        dy.to(cdt), x.to(cdt), x.shape[-1:], stat(mean), stat(rstd), w, b, mask
    )
    return dx.to(x.dtype), dw, db
