"""fused_recurrent_gated_delta_rule as a torch composite: the recurrence token by token as transformers'
``torch_recurrent_gated_delta_rule`` and fla's kernel compute it (the state and the math in fp32, o rounded to q's
dtype; fp64 for fp64): the precision standard's same-dtype benchmark of the decode step."""

from __future__ import annotations

import torch

from .. import sequences
from . import compute_dtype


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    dt, st = q.dtype, compute_dtype(q.dtype)
    lengths = sequences.lengths(B, T, cu_seqlens, initial_state)
    q, k = (x.to(st).repeat_interleave(HV // H, dim=2) for x in (q, k))
    v = v.to(st)
    g = torch.zeros(B, T, HV, dtype=st, device=q.device) if g is None else g.to(st)
    beta = torch.ones(B, T, HV, dtype=st, device=q.device) if beta is None else beta.to(st)
    o = torch.empty(B, T, HV, V, dtype=st, device=q.device)
    cuts = (
        [(b, 0, T) for b in range(B)]
        if cu_seqlens is None
        else [(0, a, e) for a, e in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())]
    )
    finals = []
    for n, ((b, start, end), _) in enumerate(zip(cuts, lengths)):
        S = q.new_zeros(HV, K, V) if initial_state is None else initial_state[n].to(st)
        for t in range(start, end):
            S = S * g[b, t].exp()[:, None, None]
            d = (v[b, t] - (S * k[b, t][:, :, None]).sum(-2)) * beta[b, t][:, None]
            S = S + k[b, t][:, :, None] * d[:, None, :]
            o[b, t] = (S * q[b, t][:, :, None]).sum(-2) * scale
        finals.append(S)
    final = torch.stack(finals) if initial_state is not None else None
    return o.to(dt), final
