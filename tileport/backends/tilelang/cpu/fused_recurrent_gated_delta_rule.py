"""fused_recurrent_gated_delta_rule on the CPU: each token's step batched over every (sequence, value head) as the
recurrence states it (S <- e S; v' = beta (v - S^T k); S <- S + k v'^T; o = scale S^T q, e = exp(g)), the state
updated in place; fp32 math and state, o rounded to q's dtype. o is read from the new state, not rewritten as
e S^T q + (k.q) v' of the old one: the same value, but not the same infinities and nans."""

from __future__ import annotations

import torch

from ... import sequences

PACKED_CHECKS = ()  # no TileLang loop of its own to read: the step's products are torch's
F32 = torch.float32


def _steps(lengths: list[int], firsts: list[int]):
    """Per step j: the sequences (longest first) that have a j-th token, and those tokens' indices."""
    order = sorted(range(len(lengths)), key=lambda n: -lengths[n])
    for j in range(max(lengths, default=0)):
        active = [n for n in order if lengths[n] > j]
        yield active, [firsts[n] + j for n in active]


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    lengths = sequences.lengths(B, T, cu_seqlens, initial_state)
    if 0 in (T, HV, K, V):  # no token, or states of no element: o is 0, the states pass through
        return torch.zeros_like(v), None if initial_state is None else initial_state.to(F32, copy=True)
    N, R = len(lengths), HV // H
    firsts = [b * T for b in range(B)] if cu_seqlens is None else cu_seqlens[:-1].tolist()
    qf, kf = (x.reshape(B * T, H, 1, K).to(F32) for x in (q, k))
    vf = v.reshape(B * T, HV, V).to(F32)
    e = torch.ones(B * T, HV, dtype=F32) if g is None else g.reshape(B * T, HV).to(F32).exp()
    bt = torch.ones(B * T, HV, dtype=F32) if beta is None else beta.reshape(B * T, HV).to(F32)
    S = torch.zeros(N, HV, K, V, dtype=F32) if initial_state is None else initial_state.to(F32, copy=True)
    o = torch.empty(B * T, HV, V, dtype=F32)
    for active, tokens in _steps(lengths, firsts):
        n = len(active)
        whole = n == N and active == list(range(N))
        idx = torch.tensor(tokens)
        s = (S if whole else S[active]).view(n * HV, K, V)

        kt, qt = (x[idx].expand(n, H, R, K).reshape(n * HV, 1, K) for x in (kf, qf))  # per value head
        s.mul_(e[idx].view(n * HV, 1, 1))
        d = (vf[idx].view(n * HV, 1, V) - torch.bmm(kt, s)).mul_(bt[idx].view(n * HV, 1, 1))
        s.baddbmm_(kt.transpose(1, 2), d)
        o[idx] = torch.bmm(qt, s).view(n, HV, V).mul_(scale)
        if not whole:
            S[active] = s.view(n, HV, K, V)
    final = None if initial_state is None else S
    return o.view(B, T, HV, V).to(q.dtype), final
