"""rope: rotary position embedding (the contract, stated once here).

Semantics (flash-attention's and flash-linear-attention's ``rotary_embedding``; vLLM's and FlagGems'
``apply_rotary_pos_emb(..., position_ids, rotary_interleaved)``):
- ``q [B, T, Hq, D]``, ``k [B, T, Hk, D]`` (GQA: Hk may differ from Hq; ``k=None`` rotates q alone), ``cos`` and
  ``sin [T_ro, R/2]`` in q's dtype, ``R <= D`` and even: the first R columns of each head are rotated, the last
  ``D - R`` pass through unchanged (partial rotary).
- The table row a token ``(b, t)`` takes is ``p = position_ids[b, t]`` where given (an integer ``[B, T]``
  tensor), else ``p = t + offset + offsets[b]`` (``offset`` an int, ``offsets`` an optional integer ``[B]``
  tensor; negative for left-padded rows). A token whose ``p`` falls outside ``[0, T_ro)`` gets zeros in its
  rotated columns (its pass-through columns are copied as for any token).
- With ``c = cos[p, i]`` and ``s = sin[p, i]`` for ``i`` in ``[0, R/2)``, the pair ``(x1, x2)`` is
  ``(x[i], x[i + R/2])`` (GPT-NeoX halves, ``interleaved=False``) or ``(x[2i], x[2i + 1])`` (GPT-J pairs,
  ``interleaved=True``), and ``o1 = x1 * c - x2 * s``, ``o2 = x2 * c + x1 * s``. Math in fp32 (fp64 for fp64),
  each product rounded before the sum, no fused multiply-add (so fp32 is bit for bit with transformers'
  ``q * cos + rotate_half(q) * sin``), rounded once to q's dtype.
- Backward: ``dq`` is ``dq_out`` rotated by minus the angle (the forward with ``s`` negated: ``conjugate``),
  likewise ``dk``; cos, sin and the integer tensors have no gradient.
- Empty inputs give empty outputs; ``R = 0`` copies; ``T_ro = 0`` zeros every rotated column.

What a backend's ``rope`` kernel module gives (called by the interface for a non-empty ``q``; every tensor has
stride 1 in its last dimension, any other strides, and is on one device):

    forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int) -> (q_out, k_out)
    backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int) -> (dq, dk)

``k`` / ``dk_out`` may be None (then the second result is None) or empty (then an empty result);
``position_ids`` ([B, T], int32 or int64) and ``offsets`` ([B], int32 or int64) may be None; outputs are
allocated ``torch.empty_like(input)`` (the input's memory format kept: a transposed ``[B, H, T, D]`` input gives
an output contiguous in that order).
"""
