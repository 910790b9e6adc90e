"""softmax as torch's own (``torch._softmax`` and its backward), the precision benchmark: fp32 math for
16-bit inputs (fp64 for fp64: the golden)."""

from __future__ import annotations

import torch

from . import compute_dtype


def forward(x):
    """y over the last dimension of rows ``x[M, D]``, in x's dtype."""
    return torch._softmax(x.to(compute_dtype(x.dtype)), -1, False).to(x.dtype)


def backward(y, dy):
    """dx = y * (dy - sum(dy * y)) over the last dimension, in y's dtype."""
    cdt = compute_dtype(y.dtype)
    return torch._softmax_backward_data(dy.to(cdt), y.to(cdt), -1, cdt).to(y.dtype)
