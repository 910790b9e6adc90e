"""l2norm: the interface layer (checks, dispatch, custom ops, autograd, module).

Contract (flash-linear-attention's l2norm, stated once here):
- Forward over the last dimension of ``x[..., D]``: ``rstd = 1 / sqrt(sum(x^2, -1) + eps)``, ``y = x * rstd``.
  Math in fp32 (fp64 for fp64 inputs). ``y`` has ``output_dtype`` (default x's dtype); ``rstd`` has shape
  ``x.shape[:-1]`` and dtype fp32 (fp64 for fp64 inputs). eps (default 1e-6) is added to the sum of squares.
- Backward: ``dx = dy * rstd - sum(dy * y, -1) * y * rstd`` in fp32, returned in x's dtype. Saved for backward:
  ``x`` and ``rstd``; ``y`` is recomputed in fp32 inside the backward kernel (a y saved in fp16/bf16 fails the
  dual-benchmark max-relative-error ratio where dx is near zero). Given the forward's ``eps`` (autograd gives it),
  a backend with the precision for it computes the same dx without the cancellation of ``1 - y^2`` where
  ``sum(x^2) >> eps``: ``dx = rstd * (dy - x * sum(x * dy) / (sum(x^2) + eps))`` (TileLang CPU, in fp64);
  the fp32 backends (torch, Triton, TileLang CUDA/Ascend) keep the fp32 form, whose dx component along x is
  then rounding noise.
- Empty inputs give empty outputs; D = 0 gives rstd = 1 / sqrt(eps). Rows holding nan/inf affect only that row.

The interface (checks, dispatch, the custom ops ``tileport::l2norm_fwd`` / ``_bwd`` under torch.compile,
autograd, the module) is derived from the spec (``spec.py``).
"""

from __future__ import annotations

from .spec import DEFAULT_EPS, SPEC  # noqa: F401

OP = "l2norm"
_API = SPEC.api
l2norm, l2norm_fwd, l2norm_bwd = _API.function, _API.forward, _API.backward
L2Norm = _API.module("L2Norm", "``torch.nn.Module`` form of :func:`l2norm` (no parameters).")
