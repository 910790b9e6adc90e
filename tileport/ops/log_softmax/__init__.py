"""log_softmax: the interface layer, derived from its spec (the softmax family shares its declaration,
``ops/_softmax_spec.py``).

Contract (``torch.log_softmax``, stated once here):
- Forward over ``dim`` (any, default the last) of ``x``: ``y = (x - max) - log(sum(exp(x - max)))``, the max
  subtracted first. Math in fp32 (fp64 for fp64 inputs; the per-row log in fp64); ``y`` in x's dtype, with x's
  shape. A row that is all -inf gives nan, as torch; a row holding nan gives nan.
- Backward from the forward's output: ``dx = dy - exp(y) * sum(dy)`` over ``dim``, in fp32, returned in y's
  dtype. Saved for backward: ``y``.
- Empty inputs give empty outputs. ``dim`` out of range raises IndexError; non-floating inputs TypeError.
"""

from __future__ import annotations

from .spec import SPEC

OP = "log_softmax"
_API = SPEC.api
log_softmax, log_softmax_fwd, log_softmax_bwd = _API.function, _API.forward, _API.backward
LogSoftmax = _API.module(
    "LogSoftmax", "``log_softmax`` over ``dim`` (default the last) as a module: ``torch.nn.LogSoftmax`` with a dim."
)
