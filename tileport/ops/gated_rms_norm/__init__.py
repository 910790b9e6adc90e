"""gated_rms_norm: RMS normalization gated by an activation of a second input (the output norm of gated
linear attention, flash-linear-attention's ``FusedRMSNormGated``, and Mamba2's ``RMSNormGated``).

Contract (stated once here):
- Inputs ``x[..., D]`` and ``gate`` of x's shape (any floating dtype), ``weight`` (D,) or None (no scale).
  ``a = act(gate)``: ``silu`` (alias ``swish``: ``gate * sigmoid(gate)``) or ``sigmoid``, in fp32.
- ``norm_before_gate=True``: ``rstd = 1 / sqrt(mean(x^2, -1) + eps)``, ``y = x * rstd * weight * a``.
  ``norm_before_gate=False``: ``z = x * a``, ``rstd = 1 / sqrt(mean(z^2, -1) + eps)``, ``y = z * rstd * weight``.
  Math in fp32 (fp64 for fp64 inputs), ``y`` rounded once to ``output_dtype`` (default x's dtype); ``rstd``
  shape ``x.shape[:-1]``, fp32 (fp64 for fp64 inputs). ``eps`` finite and >= 0.
- Backward from ``x``, ``gate``, ``rstd``, ``dy``, the weight and the forward's attributes, with
  ``n = u * rstd`` (``u`` = x, or z) and ``g`` the gradient reaching n (``dy * weight * a``, or ``dy * weight``):
  ``du = (g - n * mean(g * n)) * rstd``; then ``dx = du`` and ``dgate = dy * weight * n * act'(gate)``
  (norm before gate), or ``dx = du * a`` and ``dgate = du * x * act'(gate)``; ``dweight = sum over rows of
  dy * n * a`` (or ``dy * n``), reduced in fp32 deterministically, in the weight's dtype; None without a
  weight. dx and dgate in x's and the gate's dtypes. Saved for backward: ``x``, ``gate``, ``weight``, ``rstd``.
- Empty inputs: no rows gives empty outputs (dweight zeros); D = 0 gives rstd nan. Rows holding nan/inf
  affect only their row of y, dx and dgate (and dweight).

The interface (checks, dispatch, the custom ops ``tileport::gated_rms_norm_fwd`` / ``_bwd`` under
torch.compile, autograd, the module) is derived from the spec (``spec.py``).
"""

from __future__ import annotations

from .spec import ACTIVATIONS, DEFAULT_EPS, SPEC  # noqa: F401

OP = "gated_rms_norm"
_API = SPEC.api
gated_rms_norm, gated_rms_norm_fwd, gated_rms_norm_bwd = _API.function, _API.forward, _API.backward
GatedRMSNorm = _API.module(
    "GatedRMSNorm",
    "Gated RMSNorm as a module: ``GatedRMSNorm(hidden_size, eps, activation, norm_before_gate)``, "
    "``forward(x, gate)``; the weight starts at ones (``elementwise_affine=False``: none).",
)
