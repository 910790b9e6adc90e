"""fused_linear_cross_entropy: the loss of an LM head without its logits (the contract, stated once here).

Semantics (Liger-Kernel's ``LigerFusedLinearCrossEntropyFunction`` and flash-linear-attention's
``FusedLinearCrossEntropyLoss``; ``F.cross_entropy(F.linear(input, lm_weight, bias), target, ...)`` in torch):
- ``input [..., H]`` hidden states (flattened to N rows), ``lm_weight [V, H]`` the head, ``bias`` None or ``[V]``,
  ``target [...]`` = input.shape[:-1] class indices (int64 or int32), each in [0, V) or ``ignore_index``
  (IndexError naming the value and V otherwise); ``ce_weight`` None or ``[V]`` per-class weights.
- The loss of ``cross_entropy`` (``tileport.ops.cross_entropy``'s row contract: label smoothing as torch's, Gemma 2's
  ``softcap``, the z-loss ``lse_square_scale * lse^2``, included in the loss) over the logits
  ``input @ lm_weight.T + bias``; ``reduction`` "none" (per row, input.shape[:-1]), "sum", or "mean" (the
  cross-entropy term over the non-ignored targets' summed class weights, as torch's; the z-loss over their count).
  The loss (and the z-loss, ``return_z_loss=True``: ``(loss, z_loss)``) in fp32 (fp64 for fp64 inputs), as Liger's.
- Never an [N, V] tensor: rows go in chunks (``chunk_size`` rows; default Liger's heuristic, a chunk's logits about
  the size of the hidden states); each chunk's logits are made by torch's matmul (following ``torch.autocast``:
  the logits in its dtype where it is on), and turned into loss and gradient in place by the cross_entropy row
  kernel of the backend chosen (``backend=``); the gradients of input (its dtype), lm_weight and bias are
  accumulated chunk by chunk, the head's and the bias's in ``accum_dtype`` (Liger-Kernel's name): torch.float32 by
  default (fp64 for fp64), rounded once to their dtypes, or None for lm_weight's own dtype (no buffer wider than
  the head; each chunk's product rounded into the sum).
- For "sum" and "mean" the gradients are made in the forward (Liger's scheme) and the backward scales them by the
  loss's gradient; the head's gradient is narrowed to its dtype over the front of its fp32 accumulator's storage,
  so it holds that storage (twice its own bytes for a 16-bit head) until it is freed. "none", a gradient reaching
  the z-loss, or a second backward through a retained graph make them again from the saved inputs, chunk by chunk.
- ``FusedLinearCrossEntropyLoss``: the module form, ``forward(input, lm_weight, target, bias=None)``.
"""

from __future__ import annotations

from .function import fused_linear_cross_entropy
from .module import FusedLinearCrossEntropyLoss

OP = "fused_linear_cross_entropy"
__all__ = ["FusedLinearCrossEntropyLoss", "fused_linear_cross_entropy"]
fused_linear_cross_entropy.__module__ = FusedLinearCrossEntropyLoss.__module__ = __name__  # the public names' home
