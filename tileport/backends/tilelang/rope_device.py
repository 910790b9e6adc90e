"""rope's TileLang device kernels (CUDA, Ascend arch35): what every target shares around its ``build``, written
once: the kernels a target lowers for ``tileport lower`` and each token's table row, made on the host."""

from __future__ import annotations

import torch


def lowered_for(build, bucket, pair_chunk):
    """A target's ``lowered(dtype, dim, rotary_dim=None, interleaved=False)`` over its builder and chunk sizes."""

    def lowered(dtype: torch.dtype, dim: int, rotary_dim: int | None = None, interleaved: bool = False) -> dict:
        """{kernel name: prim_func} for heads of ``dim`` columns, the first ``rotary_dim`` (default: all) rotated
        (its bucket sets the pair chunk), for ``tileport lower``."""
        if rotary_dim is not None and not (0 <= rotary_dim <= dim and rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim must be even and in [0, {dim}], got {rotary_dim}")
        w, pairs = bucket(dim), pair_chunk(dim if rotary_dim is None else rotary_dim)
        return {
            "rope_fwd": build(w, pairs, dtype, interleaved, False),
            "rope_bwd": build(w, pairs, dtype, interleaved, True),
        }

    return lowered


def table_rows(position_ids, offsets, offset: int, B: int, T_: int, rows: int, device) -> torch.Tensor:
    """Each token's table row as int32 [B * T]: ``position_ids``, else ``t + offset + offsets[b]``, clamped to
    [-1, rows] (off the table either way, whatever the integer's width)."""
    if position_ids is not None:
        p = position_ids.expand(B, T_)
    else:
        p = torch.arange(T_, device=device, dtype=torch.int64)[None, :] + offset
        p = p + offsets.to(torch.int64)[:, None] if offsets is not None else p.expand(B, T_)
    return p.clamp(-1, rows).to(torch.int32).reshape(B * T_).contiguous()
