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

from __future__ import annotations

import torch

from .spec import SPEC

OP = "rope"
_API = SPEC.api
rope_fwd, rope_bwd = (
    _API.forward,
    _API.backward,
)  # the declaration's forms: position_ids, offsets [B], offset int


def rope(
    q,
    k,
    cos,
    sin,
    *,
    interleaved=False,
    position_ids=None,
    seqlen_offsets=0,
    cu_seqlens=None,
    backend=None,
):
    """``(q_out, k_out)``: q and k rotated by the angles of their positions (``k=None``: ``(q_out, None)``).

    flash-attention / flash-linear-attention semantics: q [B, T, Hq, D], k [B, T, Hk, D], cos/sin [T_ro, R/2]
    (R <= D: the last D - R columns pass through); ``interleaved``: GPT-J pairs instead of GPT-NeoX halves. A
    token's table row is ``position_ids[b, t]`` where given, else ``t + seqlen_offsets`` (an int, or a [B] integer
    tensor); ``cu_seqlens`` ([N + 1] integer offsets into a packed q [1, total, H, D]) starts each sequence at
    position 0 (plus its ``seqlen_offsets``: an int or [N]). A position outside [0, T_ro) gives zeros in the rotated
    columns. Differentiable in q and k."""
    offset, offsets = _offsets(seqlen_offsets)
    if cu_seqlens is not None:
        if position_ids is not None:
            raise ValueError("give position_ids or cu_seqlens, not both (cu_seqlens sets each token's position)")
        position_ids = packed_positions(q, cu_seqlens, offset, offsets)
        offset, offsets = 0, None
    elif position_ids is not None and (offsets is not None or offset != 0):
        raise ValueError("give position_ids or seqlen_offsets, not both (position_ids are the positions themselves)")
    return _API.function(
        q,
        k,
        cos,
        sin,
        position_ids,
        offsets,
        interleaved=interleaved,
        offset=offset,
        backend=backend,
    )


def _offsets(seqlen_offsets) -> tuple[int, torch.Tensor | None]:
    """``seqlen_offsets`` as the declaration's (offset int, offsets tensor or None)."""
    if isinstance(seqlen_offsets, torch.Tensor):
        return 0, seqlen_offsets
    if isinstance(seqlen_offsets, bool) or not isinstance(seqlen_offsets, int):
        raise TypeError(f"seqlen_offsets must be an int or an integer tensor, got {type(seqlen_offsets).__name__}")
    return seqlen_offsets, None


def packed_positions(q: torch.Tensor, cu_seqlens, offset: int, offsets) -> torch.Tensor:
    """The [1, total] positions of a packed batch: each token's index within its sequence, plus its sequence's
    offset. ValueError for cu_seqlens that do not cut q's tokens into sequences."""
    if (
        not isinstance(cu_seqlens, torch.Tensor)
        or cu_seqlens.dtype not in (torch.int32, torch.int64)
        or cu_seqlens.dim() != 1
    ):
        got = (
            f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
            if isinstance(cu_seqlens, torch.Tensor)
            else type(cu_seqlens).__name__
        )
        raise TypeError(f"cu_seqlens must be a 1-dim int32 or int64 tensor, got {got}")
    if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[0] != 1:
        raise ValueError(f"with cu_seqlens, q must be packed as [1, total, H, D], got {tuple(getattr(q, 'shape', ()))}")
    total, n = q.shape[1], cu_seqlens.numel() - 1
    cu = cu_seqlens.to(device=q.device, dtype=torch.int64)
    if n < 0 or int(cu[0]) != 0 or int(cu[-1]) != total or bool((cu.diff() < 0).any()):
        raise ValueError(f"cu_seqlens must rise from 0 to q's total tokens {total}, got {cu_seqlens.tolist()}")
    if offsets is not None and tuple(offsets.shape) != (n,):
        raise ValueError(
            f"with cu_seqlens, seqlen_offsets must be an int or a [{n}] tensor (one per sequence), got "
            f"{tuple(offsets.shape)}"
        )
    seq = torch.repeat_interleave(torch.arange(n, device=q.device), cu.diff(), output_size=total)
    pos = torch.arange(total, device=q.device) - cu[:-1][seq] + offset
    if offsets is not None:
        pos = pos + offsets.to(device=q.device, dtype=torch.int64)[seq]
    return pos.view(1, total)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, *, backend=None):
    """A drop-in for transformers' ``apply_rotary_pos_emb``: q, k [B, H, T, D] (``unsqueeze_dim=1``; [B, T, H, D]
    with 2), cos/sin [B or 1, T, R] in q's dtype with their halves repeated (as transformers' rotary embeddings
    build them: only the first half is read), ``q * cos + rotate_half(q) * sin`` over the first R <= D columns
    (partial rotary, as Phi-3's and Qwen3-Next's: the last D - R pass through); bit for bit with transformers' in
    fp32. ``position_ids`` is unused, as in transformers. Returns ``(q_embed, k_embed)`` in q's layout."""
    if unsqueeze_dim not in (1, 2):
        raise ValueError(f"unsqueeze_dim must be 1 (q [B, H, T, D]) or 2 (q [B, T, H, D]), got {unsqueeze_dim!r}")
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        raise ValueError(
            f"q must be 4-dim and cos, sin [B or 1, T, R] alike, got q {tuple(q.shape)}, cos {tuple(cos.shape)}, "
            "sin "
            f"{tuple(sin.shape)}"
        )
    qv, kv = (q.transpose(1, 2), k.transpose(1, 2)) if unsqueeze_dim == 1 else (q, k)
    b, t, _, d = qv.shape
    r = cos.shape[2]
    if cos.shape[1] != t or r > d or r % 2 or cos.shape[0] not in (1, b):
        raise ValueError(
            f"cos and sin must be [{b} or 1, {t}, R] (an even R <= {d}) for q of [B, T, D] = [{b}, {t}, {d}], got "
            f"{tuple(cos.shape)}"
        )
    half = r // 2
    if cos.shape[0] == 1:
        table_c, table_s, pos = cos[0, :, :half], sin[0, :, :half], None
    else:
        table_c, table_s = (
            cos.reshape(b * t, r)[:, :half],
            sin.reshape(b * t, r)[:, :half],
        )
        pos = torch.arange(b * t, device=q.device).view(b, t)
    qo, ko = _API.function(qv, kv, table_c, table_s, pos, None, backend=backend)
    return (qo.transpose(1, 2), ko.transpose(1, 2)) if unsqueeze_dim == 1 else (qo, ko)
