"""The sequences of a recurrent operator's batch: B sequences of T tokens, or the packed ones ``cu_seqlens`` cuts
from a batch of one (flash-attention's convention), checked once for every backend and for the public fronts."""

from __future__ import annotations

import torch


def lengths(B: int, T: int, cu_seqlens: torch.Tensor | None, states: torch.Tensor | None = None) -> list[int]:
    """Each sequence's token count: ``[T] * B``, or the differences of ``cu_seqlens`` ([N + 1] int64, from 0 to T
    without decreasing, B = 1). ``states``: a per-sequence tensor ([N, ...]) whose N must match. TypeError or
    ValueError naming what is wrong."""
    if cu_seqlens is None:
        found = [T] * B
    else:
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int64 or cu_seqlens.dim() != 1:
            got = (
                f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
                if isinstance(cu_seqlens, torch.Tensor)
                else type(cu_seqlens).__name__
            )
            raise TypeError(f"cu_seqlens must be a 1-dim int64 tensor [N + 1], got {got}")
        if B != 1:
            raise ValueError(
                f"with cu_seqlens the batch must be packed as B = 1 (its T tokens cut into sequences), got B = {B}"
            )
        cu = cu_seqlens.tolist()
        if not cu or cu[0] != 0 or cu[-1] != T or any(b < a for a, b in zip(cu, cu[1:])):
            shown = f"{cu[:8]}{' ...' if len(cu) > 8 else ''}"
            raise ValueError(f"cu_seqlens must rise from 0 to the T = {T} tokens without decreasing, got {shown}")
        found = [b - a for a, b in zip(cu, cu[1:])]
    if states is not None and states.shape[0] != len(found):
        what = "the packed sequences (len(cu_seqlens) - 1)" if cu_seqlens is not None else "the batch B"
        raise ValueError(
            f"initial_state has N = {states.shape[0]} (its dim 0) but there are {len(found)} sequences ({what})"
        )
    return found
