"""fused_recurrent_gated_delta_rule on the CPU: each token's step batched over every (sequence, value head), its
reads of the state fused into one product: [k; q]^T S gives both S^T k and S^T q of the old state, from which
v' = beta (v - e S^T k) and o = scale (e S^T q + (k.q) v') follow without the new state (e = exp(g)); then the
state is written once, S <- e S + k v'^T. fp32 math and state, o rounded to q's dtype."""

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
    N, R = len(lengths), HV // H
    firsts = [b * T for b in range(B)] if cu_seqlens is None else cu_seqlens[:-1].tolist()
    qf, kf = (x.reshape(B * T, H, 1, K).to(F32) for x in (q, k))
    vf = v.reshape(B * T, HV, V).to(F32)
    e = torch.ones(B * T, HV, dtype=F32) if g is None else g.reshape(B * T, HV).to(F32).exp()
    bt = torch.ones(B * T, HV, dtype=F32) if beta is None else beta.reshape(B * T, HV).to(F32)
    qk = torch.cat((kf, qf), 2)  # [BT, H, 2, K]: the two rows that read the state
    kq = (kf * qf).sum(-1)  # [BT, H, 1]
    S = torch.zeros(N, HV, K, V, dtype=F32) if initial_state is None else initial_state.to(F32, copy=True)
    o = torch.empty(B * T, HV, V, dtype=F32)
    for active, tokens in _steps(lengths, firsts):
        n = len(active)
        whole = n == N and active == list(range(N))
        idx = torch.tensor(tokens)
        s = S if whole else S[active]
        rows = qk[idx].unsqueeze(2).expand(n, H, R, 2, K).reshape(n * HV, 2, K)
        ab = torch.bmm(rows, s.view(n * HV, K, V)).view(n, HV, 2, V)  # one read of the state
        et, btk = e[idx][..., None], bt[idx][..., None]
        d = btk * (vf[idx] - et * ab[:, :, 0])
        o[idx] = scale * (et * ab[:, :, 1] + kq[idx].repeat_interleave(R, 1) * d)
        kr = kf[idx].view(n, H, 1, K).expand(n, H, R, K).reshape(n * HV, K, 1)
        s.mul_(et[..., None]).view(n * HV, K, V).baddbmm_(kr, d.view(n * HV, 1, V))
        if not whole:
            S[active] = s
    final = None if initial_state is None else S
    return o.view(B, T, HV, V).to(q.dtype), final
