"""rope's cases through transformers' form, ``tileport.apply_rotary_pos_emb``, for `tileport verify rope --impl
examples/impl/hf_rope.py:through_transformers_form`: the drop-in judged by the standard on every case of rope's
suite that transformers' function can express.

Each case becomes what a transformers model hands the function: q and k in its [B, H, T, D] layout (transposed
views of the case's [B, T, H, D] tensors), cos/sin [B, T, R] gathered per token at its position with the halves
repeated (zeros where the position is outside the table, which the contract rotates to zero), partial rotary
done as transformers' models do it (the first R columns rotated, the rest concatenated back). Interleaved
(GPT-J) pairs are not transformers' ``rotate_half``: those cases go through ``tileport.rope`` itself.
"""

import torch

import tileport
from tileport.ops.rope import SPEC


def _positions(q, position_ids, offsets, offset):
    if position_ids is not None:
        return position_ids.long()
    b, t = q.shape[:2]
    p = torch.arange(t, device=q.device).expand(b, t) + offset
    return p if offsets is None else p + offsets.long()[:, None]


def _full_width(table, p):
    """[B, T, R]: each token's table row at its position, halves repeated; zeros outside the table."""
    inside = ((p >= 0) & (p < table.shape[0]))[..., None]
    rows = (
        table[p.clamp(0, max(table.shape[0] - 1, 0))] if table.shape[0] else table.new_zeros(*p.shape, table.shape[1])
    )
    rows = torch.where(inside, rows, torch.zeros((), dtype=table.dtype))
    return torch.cat((rows, rows), -1)


def through_transformers_form(
    q, k=None, cos=None, sin=None, position_ids=None, offsets=None, interleaved=False, offset=0
):
    if interleaved:  # the declaration's differentiable form (an int offset and an offsets tensor at once)
        return SPEC.api.function(q, k, cos, sin, position_ids, offsets, interleaved=True, offset=offset)
    r = 2 * cos.shape[1]
    p = _positions(q, position_ids, offsets, offset)
    cos_f, sin_f = _full_width(cos, p), _full_width(sin, p)
    kk = q if k is None else k
    q_hf, k_hf = q[..., :r].transpose(1, 2), kk[..., :r].transpose(1, 2)  # [B, H, T, R], as a model holds them
    qo, ko = tileport.apply_rotary_pos_emb(q_hf, k_hf, cos_f, sin_f)
    q_out = torch.cat((qo.transpose(1, 2), q[..., r:]), -1)
    k_out = None if k is None else torch.cat((ko.transpose(1, 2), k[..., r:]), -1)
    return q_out, k_out
