"""cross_entropy: the loss over a vocabulary, row by row (the contract, stated once here).

The declared operator works on rows: ``input [N, C]`` logits (a row per token, C classes, fp16 / bf16 / fp32 /
fp64), ``target [N]`` class indices (int64 or int32, each in [0, C) or equal to ``ignore_index``: IndexError
naming the value and C otherwise), ``weight`` None or ``[C]`` per-class weights in input's dtype (the front,
``tileport.cross_entropy``, also takes an fp32 weight beside 16-bit logits, as Liger-Kernel does: the kernels
read it as it is, but the TileLang device kernels, which round it to input's dtype). Attributes:
``ignore_index`` (int, -100), ``label_smoothing`` eps in [0, 1], ``lse_square_scale`` s >= 0 (the z-loss),
``softcap`` (0.0 = none, else > 0). ``tileport.cross_entropy`` (``F.cross_entropy``'s semantics) is a front over it
(``front.py``).

Per row r, t = target[r], w_c = weight[c] (1 without weight), W = sum_c w_c, in the statistics dtype (fp32 for
16-bit and fp32 logits, fp64 for fp64), 16-bit logits widened per element (never an fp32 copy of the row):
- z_c = softcap * tanh(x_c / softcap) (Gemma 2), x_c without softcap;
- lse = log sum_c exp(z_c), in blocks of the row with an online max and sum (any C; finite for bf16 logits of
  magnitude 1e4..6e4);
- loss_r = (1 - eps) w_t (lse - z_t) + (eps / C) sum_c w_c (lse - z_c) (torch's label smoothing);
- z_loss_r = s * lse^2;
- a row whose target is ``ignore_index``: loss_r = z_loss_r = 0 and a zero gradient row (lse still given).
A term whose scale is 0 is absent, not multiplied by 0 (so an inf or nan elsewhere does not leak into it):
eps = 0 has no smoothing term, s = 0 no z-loss (z_loss_r = 0, dz_loss never read), softcap = 0 no cap; an
ignored row is 0 whatever dloss and dz_loss hold. Non-finite logits follow torch's logsumexp (a row holding
+inf has lse = +inf, one of -inf only lse = -inf).
Outputs ``loss``, ``z_loss``, ``lse``: ``[N]`` in the statistics dtype; lse has no gradient.

Gradients, with p_c = exp(z_c - lse) and s_c = 1 - tanh^2(x_c / softcap) (1 without softcap), computed in the
statistics dtype and rounded once to input's dtype:
- dloss_r/dx_c = s_c [(1 - eps) w_t (p_c - [c == t]) + (eps / C)(W p_c - w_c)]
- dz_loss_r/dx_c = s_c 2 s lse p_c
- backward: dinput[r] = dloss[r] * dloss_r/dx + dz_loss[r] * dz_loss_r/dx (from input and the forward's lse).

What a backend's ``cross_entropy`` kernel module gives (called by the interface for a non-empty input, every
tensor with stride 1 in its last dimension, any row stride):

    forward(input, target, weight, ignore_index, label_smoothing, lse_square_scale, softcap,
            grad=None, scales=(1.0, 1.0), wide=False) -> (loss, z_loss, lse)
    backward(dloss, dz_loss, input, target, weight, lse,
             ignore_index, label_smoothing, lse_square_scale, softcap) -> dinput

``forward(..., grad=G, scales=(a, b))`` also writes ``G[r, c] = a * dloss_r/dx_c + b * dz_loss_r/dx_c`` (zero rows
where ignored) in the same pass as the loss; G is ``[N, C]`` in input's dtype and may be ``input`` itself (each
element read before it is written: the in-place backward of Liger-Kernel and flash-linear-attention). a and b
are Python floats (the reduction's scales). ``dz_loss`` may be None (no z-loss gradient). ``wide=True`` gives
loss and z_loss in fp64 (lse stays in the statistics dtype), for a caller that adds or sums the rows and rounds
once (the fused linear cross-entropy): a backend whose row math is fp64 hands over its values unrounded, one
whose math is narrower widens what it has.
"""

from __future__ import annotations

from .front import CrossEntropyLoss, cross_entropy  # noqa: F401  (torch's semantics over the rows)
from .spec import SPEC

OP = "cross_entropy"
_API = SPEC.api
cross_entropy_fwd, cross_entropy_bwd = _API.forward, _API.backward  # the declared row forms: (loss, z_loss, lse)
