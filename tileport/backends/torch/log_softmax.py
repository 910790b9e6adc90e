"""log_softmax as torch's own (``torch._log_softmax`` and its backward), the precision benchmark: fp32 math
for 16-bit inputs (fp64 for fp64: the golden)."""

from __future__ import annotations

import torch

from . import compute_dtype


def forward(x):
    """y over the last dimension of rows ``x[M, D]``, in x's dtype."""
    return torch._log_softmax(x.to(compute_dtype(x.dtype)), -1, False).to(x.dtype)


def backward(y, dy):
    """dx = dy - exp(y) * sum(dy) over the last dimension, in y's dtype."""
    cdt = compute_dtype(y.dtype)
    return torch._log_softmax_backward_data(dy.to(cdt), y.to(cdt), -1, cdt).to(y.dtype)
