"""softmax: the interface layer, derived from its spec (the softmax family shares its declaration,
``ops/_softmax_spec.py``).

Contract (``torch.softmax``, stated once here):
- Forward over ``dim`` (any, default the last) of ``x``: ``y = exp(x - max) / sum(exp(x - max))``, the max
  subtracted first (numerically stable for any magnitude). Math in fp32 (fp64 for fp64 inputs); ``y`` in x's
  dtype, with x's shape. A row that is all -inf (0 / 0), or holds +inf (inf - inf) or nan, is all nan, as
  torch's; -inf elsewhere in a row gives 0 there.
- Backward from the forward's output: ``dx = y * (dy - sum(dy * y))`` over ``dim``, in fp32, returned in y's
  dtype. Saved for backward: ``y``. Rows of 64K+ elements need no buffer beyond the output.
- Empty inputs give empty outputs. ``dim`` out of range raises IndexError; non-floating inputs TypeError.
"""

from __future__ import annotations

from .spec import SPEC

OP = "softmax"
_API = SPEC.api
softmax, softmax_fwd, softmax_bwd = _API.function, _API.forward, _API.backward
Softmax = _API.module(
    "Softmax", "``softmax`` over ``dim`` (default the last) as a module: ``torch.nn.Softmax`` with a dim."
)
