"""chunk_gated_delta_rule as a torch composite: the chunk algorithm (chunks of 64, the WY representation) as fla's
Triton kernels compute it, in the input dtype. It is the precision standard's same-dtype benchmark: the products'
operands and results in q's dtype (the gate's cumulative sum, the decays and the triangular solve in fp32, the state
carried between chunks in fp32 and rounded to q's dtype where a product reads it, as fla's ``chunk_fwd_h`` stores
it); fp64 throughout for fp64 inputs. Its backward is torch.autograd through the same steps.
"""

from __future__ import annotations

import torch

from .. import sequences
from . import compute_dtype

C = 64


def _sequence(q, k, v, g, beta, h0, scale: float):
    """One batch of equal-length sequences: q, k [B, T, H, K], v [B, T, HV, V], g, beta [B, T, HV], h0 [B, HV, K,
    V] (fp32 or fp64) -> (o [B, T, HV, V] in q's dtype, the final state)."""
    dt, st = q.dtype, compute_dtype(q.dtype)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if 0 in (T, HV, K, V):  # no token, or states of no element: nothing flows
        return v.new_zeros(B, T, HV, V), h0.to(st)
    q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
    pad = -T % C

    def chunks(x, dtype):  # [B, T, HV, ...] -> [B, HV, n, C, ...], the tail padded with zeros
        x = x.to(dtype).movedim(1, 2)
        x = torch.nn.functional.pad(x, (0, 0, 0, pad) if x.dim() == 4 else (0, pad))
        return x.reshape(B, HV, -1, C, *x.shape[3:])

    qc, kc, vc = chunks(q, dt), chunks(k, dt), chunks(v, dt)
    gc, bc = chunks(g, st).cumsum(-1), chunks(beta, st)
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    decay = (gc[..., :, None] - gc[..., None, :]).masked_fill(~lower, -torch.inf).exp()
    a = ((kc @ kc.transpose(-1, -2)).to(st) * decay * bc[..., None]).tril(-1)
    eye = torch.eye(C, dtype=st, device=q.device)
    tinv = torch.linalg.solve_triangular(a + eye, eye.expand_as(a), upper=False, unitriangular=True).to(dt)
    w = tinv @ (kc * (bc * gc.exp())[..., None].to(dt))
    u = tinv @ (vc * bc[..., None].to(dt))
    qe = qc * (gc.exp() * scale)[..., None].to(dt)
    p = ((qc @ kc.transpose(-1, -2)).to(st) * decay * scale).to(dt)
    kd = kc * (gc[..., -1:] - gc).exp()[..., None].to(dt)
    gam = gc[..., -1].exp()
    S, outs = h0.to(st), []
    for i in range(qc.shape[2]):
        s = S.to(dt)
        vn = u[:, :, i] - w[:, :, i] @ s
        outs.append(qe[:, :, i] @ s + p[:, :, i] @ vn)
        S = S * gam[:, :, i, None, None] + (kd[:, :, i].transpose(-1, -2) @ vn).to(st)
    o = torch.stack(outs, 2).reshape(B, HV, -1, V)[:, :, :T].movedim(1, 2)
    return o, S


def _forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o, final state) of every sequence: the batch's, or each packed sequence's in turn."""
    B, HV, K, V = q.shape[0], v.shape[2], k.shape[3], v.shape[3]
    st = compute_dtype(q.dtype)
    sequences.lengths(B, q.shape[1], cu_seqlens, initial_state)
    if cu_seqlens is None:
        h0 = initial_state if initial_state is not None else q.new_zeros(B, HV, K, V, dtype=st)
        return _sequence(q, k, v, g, beta, h0, scale)
    cu = cu_seqlens.tolist()
    outs, finals = [], []
    for n, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        h0 = initial_state[n : n + 1] if initial_state is not None else q.new_zeros(1, HV, K, V, dtype=st)
        o, ht = _sequence(*(x[:, s:e] for x in (q, k, v, g, beta)), h0, scale)
        outs.append(o)
        finals.append(ht)
    return torch.cat(outs, 1), torch.cat(finals, 0)


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o in q's dtype, final state in fp32 (fp64 for fp64), or None without an initial state)."""
    with torch.no_grad():
        o, ht = _forward(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    return o.to(q.dtype), (ht if initial_state is not None else None)


def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float):
    """(dq, dk, dv, dg, dbeta, dinitial_state): the vector-Jacobian product of the forward's steps (torch.func.vjp,
    which differentiates inside a custom op too, where autograd's recording is off)."""
    primals = [q, k, v, g, beta] + ([initial_state] if initial_state is not None else [])

    def steps(*xs):
        o, ht = _forward(*xs[:5], xs[5] if len(xs) > 5 else None, cu_seqlens, scale)
        return o, ht

    (o, ht), vjp = torch.func.vjp(steps, *primals)
    dht = torch.zeros_like(ht) if dfinal_state is None or initial_state is None else dfinal_state.to(ht.dtype)
    grads = vjp((do.to(o.dtype), dht))
    dq, dk, dv, dg, db = (d.to(x.dtype) for d, x in zip(grads[:5], primals[:5]))
    return dq, dk, dv, dg, db, (grads[5].to(initial_state.dtype) if initial_state is not None else None)
