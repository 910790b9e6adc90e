"""log_softmax: the interface layer (the softmax family's shared interface, ``ops/_softmax.py``).

Contract (``torch.log_softmax``, stated once here):
- Forward over ``dim`` (any, default the last) of ``x``: ``y = (x - max) - log(sum(exp(x - max)))``, the max
  subtracted first. Math in fp32 (fp64 for fp64 inputs; the per-row log in fp64); ``y`` in x's dtype, with x's
  shape. A row that is all -inf gives nan, as torch; a row holding nan gives nan.
- Backward from the forward's output: ``dx = dy - exp(y) * sum(dy)`` over ``dim``, in fp32, returned in y's
  dtype. Saved for backward: ``y``.
- Empty inputs give empty outputs. ``dim`` out of range raises IndexError; non-floating inputs TypeError.
"""

from __future__ import annotations

from .._softmax import family

OP = "log_softmax"
_F = family(OP, "LogSoftmax")
log_softmax_fwd, log_softmax_bwd, log_softmax, LogSoftmax = _F.forward, _F.backward, _F.function, _F.module
