"""rope as the torch composite, the precision benchmark (and, in float64, the golden): the table rows gathered by
position, each pair rotated in fp32 (fp64 for fp64) with every product rounded before the sum, as transformers'
``q * cos + rotate_half(q) * sin`` does."""

from __future__ import annotations

import torch

from . import compute_dtype


def _positions(q, position_ids, offsets, offset: int):
    """Each token's table row p [B, T]: position_ids, else t + offset + offsets[b]."""
    if position_ids is not None:
        return position_ids.long()
    B, T = q.shape[:2]
    p = torch.arange(T, device=q.device).expand(B, T) + offset
    return p if offsets is None else p + offsets.long()[:, None]


def _rows(table, p, cdt):
    """table[p] in cdt [B, T, R/2], zero where p is outside the table."""
    n = table.shape[0]
    rows = table.to(cdt)[p.clamp(0, max(n - 1, 0))] if n else table.new_zeros(*p.shape, table.shape[1], dtype=cdt)
    return torch.where(((p >= 0) & (p < n))[..., None], rows, 0)


def _rotate(x, c, s, interleaved: bool, into=None):
    """x [B, T, H, D] with its first R = 2 * c.shape[-1] columns rotated by (c, s) [B, T, R/2], the rest copied."""
    if x is None:
        return None
    r2, cdt = c.shape[-1], c.dtype
    xr = x[..., : 2 * r2].to(cdt)
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else (xr[..., :r2], xr[..., r2:])
    c, s = c[:, :, None], s[:, :, None]  # one table row for all of a token's heads
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = torch.empty_like(x) if into is None else into
    out[..., : 2 * r2] = torch.stack((o1, o2), -1).flatten(-2) if interleaved else torch.cat((o1, o2), -1)
    out[..., 2 * r2 :] = x[..., 2 * r2 :]
    return out


def forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    """(q_out, k_out): the pairs (x1, x2) of the first R columns of each head become (x1 c - x2 s, x2 c + x1 s)
    with c, s the token's table row; k_out is None where k is; ``out``: written into."""
    cdt = compute_dtype(q.dtype)
    p = _positions(q, position_ids, offsets, offset)
    c, s = _rows(cos, p, cdt), _rows(sin, p, cdt)
    qo, ko = out if out is not None else (None, None)
    return _rotate(q, c, s, interleaved, qo), _rotate(k, c, s, interleaved, ko)


def backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """(dq, dk): the gradients rotated by minus the angle, i.e. the forward with sin negated."""
    return forward(dq_out, dk_out, cos, -sin, position_ids, offsets, interleaved, offset)
