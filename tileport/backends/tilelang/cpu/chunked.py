"""Gated delta rule's chunk algorithm on the CPU: chunks of 64 tokens, their matrix products in torch's matmul
(oneDNN / MKL GEMMs, fp32), the chunk-to-chunk state recurrence one batched product pair per step.

Per value head and chunk (positions r, s; gc the chunk's cumulative sum of g, gam its last):
    A  = strictly-lower(beta_r k_r.k_s exp(gc_r - gc_s)),   Tinv = (I + A)^-1   (the WY representation)
    W  = Tinv (beta exp(gc) k),   U = Tinv (beta v)
    V' = U - W S,   O = scale (exp(gc) q S + lower(q k^T exp(gc_r - gc_s)) V')
    S <- exp(gam) S + (exp(gam - gc) k)^T V'
Every exponent is of a difference gc_r - gc_s <= 0 (r >= s) or of gc itself, so no decay overflows however negative g
is. The backward differentiates these steps by hand (the reverse state recurrence dS, then every product batched),
recomputing the forward's intermediates from the inputs rather than saving them.

Chunks are laid out step-major: the sequences sorted by their chunk count (longest first), then for step j the j-th
chunk of every sequence that has one, so that each step of the recurrence reads contiguous slices and the states of
the sequences still running are the first rows of the state tensor. A sequence's tail chunk is padded with tokens of
k = v = q = 0, beta = 0 and g = 0, which leave the state unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import sequences

C = 64  # tokens per chunk (fla's chunk_size)
F32 = torch.float32
F64 = torch.float64


@dataclass(frozen=True)
class Layout:
    """Where each token of a [B, T] batch (or of B = 1 packed sequences) sits among the chunks.

    ``order``: the sequences, longest first; ``counts[j]``: how many sequences have a j-th chunk (they are the
    first ``counts[j]`` of ``order``); ``starts[j]``: the first chunk of step j. ``slots``: the token index of each
    of the NCH * C chunk positions (None: the batch is B sequences of T tokens, T a multiple of C, taken by a
    permuting view), ``valid`` which of them hold a token."""

    B: int
    T: int
    N: int
    NCH: int
    order: torch.Tensor | None
    counts: tuple[int, ...]
    starts: tuple[int, ...]
    slots: torch.Tensor | None
    valid: torch.Tensor | None

    @property
    def steps(self) -> int:
        return len(self.counts)


def layout(B: int, T: int, cu_seqlens: torch.Tensor | None, device, states=None) -> Layout:
    """The chunk layout of B sequences of T tokens, or of the packed sequences ``cu_seqlens`` cuts (B = 1);
    ``states`` ([N, ...]) checked against the sequences."""
    lengths = sequences.lengths(B, T, cu_seqlens, states)
    if cu_seqlens is None:
        nc = -(-T // C)
        counts, starts = (B,) * nc, tuple(j * B for j in range(nc))
        if T % C == 0:
            return Layout(B, T, B, B * nc, None, counts, starts, None, None)
        firsts, order = [b * T for b in range(B)], None
    else:
        firsts = cu_seqlens[:-1].tolist()
        order = sorted(range(len(lengths)), key=lambda n: -lengths[n])
    N = len(lengths)
    ranked = list(range(N)) if order is None else order
    nchunks = [-(-lengths[n] // C) for n in ranked]
    steps = max(nchunks, default=0)
    counts = tuple(sum(c > j for c in nchunks) for j in range(steps))
    starts = tuple(sum(counts[:j]) for j in range(steps))
    seq, step = [], []
    for j in range(steps):
        seq += ranked[: counts[j]]
        step += [j] * counts[j]
    seq_t = torch.tensor(seq, dtype=torch.long, device=device)
    first = torch.tensor(firsts, dtype=torch.long, device=device)[seq_t]
    length = torch.tensor(lengths, dtype=torch.long, device=device)[seq_t]
    within = torch.tensor(step, dtype=torch.long, device=device)[:, None] * C + torch.arange(C, device=device)
    valid = within < length[:, None]
    slots = torch.where(valid, first[:, None] + within, 0).reshape(-1)
    order_t = None if order is None else torch.tensor(order, dtype=torch.long, device=device)
    return Layout(B, T, N, len(seq), order_t, counts, starts, slots, valid.reshape(-1))


def to_chunks(lay: Layout, x: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D] (any strides, any float dtype) as fp32 chunks [NCH, H, C, D], padding zeroed."""
    H, D = x.shape[2], x.shape[3]
    if lay.slots is None:  # [B, nc * C, H, D] -> [nc, B, H, C, D]: one permuting copy
        nc = lay.T // C
        y = x.reshape(lay.B, nc, C, H, D).permute(1, 0, 3, 2, 4)
        return x.new_empty((lay.NCH, H, C, D), dtype=F32).copy_(y.reshape(lay.NCH, H, C, D))
    flat = x.reshape(lay.B * lay.T, H, D)
    y = flat.index_select(0, lay.slots).to(F32)
    y.masked_fill_(~lay.valid[:, None, None], 0.0)
    return y.view(lay.NCH, C, H, D).transpose(1, 2).contiguous()


def from_chunks(lay: Layout, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Chunks [NCH, H, C, D] back to tokens [B, T, H, D] in ``dtype`` (padding dropped)."""
    H, D = y.shape[1], y.shape[3]
    if lay.slots is None:
        nc = lay.T // C
        out = y.new_empty((lay.B, nc, C, H, D), dtype=dtype)
        out.copy_(y.view(nc, lay.B, H, C, D).permute(1, 0, 3, 2, 4))
        return out.view(lay.B, lay.T, H, D)
    rows = y.transpose(1, 2).reshape(lay.NCH * C, H, D)
    out = y.new_empty(lay.B * lay.T, H, D, dtype=dtype)
    out.index_copy_(0, lay.slots[lay.valid], rows[lay.valid].to(dtype))
    return out.view(lay.B, lay.T, H, D)


def _masks(device):
    lower = torch.ones(C, C, dtype=torch.bool, device=device).tril()
    return lower, lower.tril(-1)


@dataclass
class Chunks:
    """The forward's per-chunk quantities (fp32, [NCH, HV, ...]; q and k at their own H heads)."""

    q: torch.Tensor  # [NCH, H, C, K]
    k: torch.Tensor  # [NCH, H, C, K]
    v: torch.Tensor  # [NCH, HV, C, V]
    beta: torch.Tensor  # [NCH, HV, C]
    gc: torch.Tensor  # [NCH, HV, C]: cumulative g within the chunk
    decay: torch.Tensor  # [NCH, HV, C, C]: exp(gc_r - gc_s), r >= s; 0 above the diagonal
    kk: torch.Tensor  # [NCH, H, C, C]
    qk: torch.Tensor  # [NCH, H, C, C]
    tinv: torch.Tensor  # [NCH, HV, C, C]: (I + A)^-1
    w: torch.Tensor  # [NCH, HV, C, K]
    u: torch.Tensor  # [NCH, HV, C, V]
    kd: torch.Tensor  # [NCH, HV, C, K]: exp(gam - gc) k, what the chunk writes into the state


def prepare(lay: Layout, q, k, v, g, beta) -> Chunks:
    """The chunks of the inputs and the intra-chunk quantities: decays, kk^T, qk^T, the WY factors W and U."""
    qc, kc, vc = to_chunks(lay, q), to_chunks(lay, k), to_chunks(lay, v)
    gc = to_chunks(lay, g.unsqueeze(-1)).squeeze(-1).cumsum_(-1)
    bc = to_chunks(lay, beta.unsqueeze(-1)).squeeze(-1)
    NCH, H, HV = kc.shape[0], kc.shape[1], vc.shape[1]
    R = HV // H
    kk = kc @ kc.transpose(-1, -2)
    qk = qc @ kc.transpose(-1, -2)
    if q.device.type == "cpu":  # decay and Tinv = (I + A)^-1 per chunk and value head in one kernel, no LAPACK
        # tilelang: seconds to import, kept out of the start-up of chunked's importers (reference uses of its torch ops)
        from . import wy

        decay, tinv = wy.decay_and_inverse(kk, gc, bc)
    else:
        lower, strict = _masks(q.device)
        decay = (gc[..., :, None] - gc[..., None, :]).masked_fill_(~lower, -torch.inf).exp_()
        a = (kk.unsqueeze(2) * decay.view(NCH, H, R, C, C)).view(NCH, HV, C, C)
        a.mul_(bc[..., :, None]).masked_fill_(~strict, 0.0)
        a.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        eye = torch.eye(C, dtype=F32, device=q.device).expand_as(a)
        tinv = torch.linalg.solve_triangular(a, eye, upper=False, unitriangular=True)
    eg = gc.exp()
    x = (bc * eg).view(NCH, H, R, C, 1) * kc.unsqueeze(2)
    w = tinv @ x.view(NCH, HV, C, -1)
    u = tinv @ (bc[..., None] * vc)
    kd = (gc[..., -1:] - gc).exp_().view(NCH, H, R, C, 1) * kc.unsqueeze(2)
    return Chunks(qc, kc, vc, bc, gc, decay, kk, qk, tinv, w, u, kd.view(NCH, HV, C, -1))


def _sorted(lay: Layout, x: torch.Tensor | None, shape) -> torch.Tensor:
    """Per-sequence tensors [N, ...] in fp32, in the layout's order (longest first); zeros for None."""
    if x is None:
        return torch.zeros(shape, dtype=F32)
    return x.to(F32, copy=True) if lay.order is None else x.index_select(0, lay.order).to(F32)


def _unsorted(lay: Layout, x: torch.Tensor) -> torch.Tensor:
    return x if lay.order is None else torch.empty_like(x).index_copy_(0, lay.order, x)


def _next(lay: Layout, j: int) -> tuple[int, int]:
    """(count, first chunk) of step j + 1; (0, NCH) past the last step."""
    return (lay.counts[j + 1], lay.starts[j + 1]) if j + 1 < lay.steps else (0, lay.NCH)


def states(lay: Layout, ch: Chunks, h0: torch.Tensor | None):
    """The chunk-to-chunk recurrence: (the state entering each chunk [NCH, HV, K, V], V' [NCH, HV, C, V], the final
    states [N, HV, K, V] in sequence order), all fp32. Each step writes its new states where they are read next:
    the next step's rows of the state tensor for the sequences still running, the final states for those that end."""
    HV, K, V = ch.v.shape[1], ch.k.shape[-1], ch.v.shape[-1]
    init = _sorted(lay, h0, (lay.N, HV, K, V))
    hs = ch.u.new_empty(lay.NCH, HV, K, V)
    final = torch.empty_like(init)
    n0 = lay.counts[0] if lay.steps else 0
    hs[:n0] = init[:n0]
    final[n0:] = init[n0:]  # sequences of no token: their state passes through
    vn = torch.empty_like(ch.u)
    gam = ch.gc[..., -1].exp()[..., None, None]
    kdt = ch.kd.transpose(-1, -2).contiguous()  # the update's left operands [NCH, HV, K, C], once
    for j, (n, s0) in enumerate(zip(lay.counts, lay.starts)):
        cut = slice(s0, s0 + n)
        torch.baddbmm(
            ch.u[cut].view(n * HV, C, V),
            ch.w[cut].view(n * HV, C, K),
            hs[cut].view(n * HV, K, V),
            alpha=-1,
            out=vn[cut].view(n * HV, C, V),
        )
        n2, s2 = _next(lay, j)
        for lo, hi, into in ((0, n2, hs[s2 : s2 + n2]), (n2, n, final[n2:n])):  # running on, and ending here
            if hi > lo:
                rows = slice(s0 + lo, s0 + hi)
                torch.mul(hs[rows], gam[rows], out=into)
                into.view(-1, K, V).baddbmm_(kdt[rows].view(-1, K, C), vn[rows].view(-1, C, V))
    return hs, vn, _unsorted(lay, final)


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o [B, T, HV, V] in q's dtype, the final states [N, HV, K, V] fp32, or None without initial_state)."""
    B, T = q.shape[:2]
    lay = layout(B, T, cu_seqlens, q.device, initial_state)
    ch = prepare(lay, q, k, v, g, beta)
    hs, vn, final = states(lay, ch, initial_state)
    NCH, H, HV = ch.k.shape[0], ch.k.shape[1], ch.v.shape[1]
    R = HV // H
    qe = (ch.gc.exp() * scale).view(NCH, H, R, C, 1) * ch.q.unsqueeze(2)
    o = qe.view(NCH, HV, C, -1) @ hs
    p = (ch.qk.unsqueeze(2) * ch.decay.view(NCH, H, R, C, C)).view(NCH, HV, C, C).mul_(scale)
    o.view(-1, C, o.shape[-1]).baddbmm_(p.view(-1, C, C), vn.view(-1, C, vn.shape[-1]))
    return from_chunks(lay, o, q.dtype), (final if initial_state is not None else None)


def _by_group(x: torch.Tensor, H: int) -> torch.Tensor:
    """x [NCH, HV, ...] summed over each key head's group of value heads: [NCH, H, ...]."""
    NCH, HV = x.shape[:2]
    return x if HV == H else x.view(NCH, H, HV // H, *x.shape[2:]).sum(2)


def _straddling(pairs: torch.Tensor) -> torch.Tensor:
    """dg_t = sum over r >= t > s of pairs[r, s]: the gradient of g_t through the decays exp(gc_r - gc_s) whose span
    holds t. Summed only over the pairs that straddle t, it has no cancellation: the form that adds +pairs[r, s] at
    r and -pairs[r, s] at s, then a reverse cumulative sum, leaves fp32 residues of the large terms where the true
    gradient is tiny (a token of g = -20 cuts every span it lies in to exp(-20))."""
    return _before(pairs.double()).tril_().sum(-2)  # [r, t]: the pairs (r, s < t), summed over r >= t (fp64)


def _before(x: torch.Tensor) -> torch.Tensor:
    """The exclusive cumulative sum over the last dimension (shifted, not the inclusive one minus x: no residue)."""
    return torch.nn.functional.pad(x[..., :-1].cumsum(-1), (1, 0))


def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal, scale: float):
    """(dq, dk, dv, dg, dbeta, dinitial_state or None), each in its input's dtype: the forward's steps differentiated
    in reverse, its intermediates recomputed."""
    B, T = q.shape[:2]
    lay = layout(B, T, cu_seqlens, q.device, initial_state)
    ch = prepare(lay, q, k, v, g, beta)
    hs, vn, _ = states(lay, ch, initial_state)
    H, HV = ch.k.shape[1], ch.v.shape[1]
    K, V = ch.k.shape[-1], ch.v.shape[-1]
    doc = to_chunks(lay, do)
    NCH, R = ch.k.shape[0], HV // H
    eg, gam = ch.gc.exp(), ch.gc[..., -1]
    egam = gam.exp()

    def heads(x):  # [NCH, HV, ...] seen per key head: [NCH, H, R, ...], to broadcast q, k, kk, qk over its group
        return x.view(NCH, H, R, *x.shape[2:])

    q1, k1, kk1, qk1 = (x.unsqueeze(2) for x in (ch.q, ch.k, ch.kk, ch.qk))  # [NCH, H, 1, ...]
    p = (heads(ch.decay) * qk1).view(NCH, HV, C, C).mul_(scale)
    dvl = p.transpose(-1, -2) @ doc
    qet = ch.q.new_empty(NCH, H, R, K, C)  # o's read of the state, transposed once: [NCH, HV, K, C]
    torch.mul(q1.transpose(-1, -2), heads((eg * scale)[..., None, :]), out=qet)
    qet = qet.view(NCH, HV, K, C)
    # the reverse state recurrence: dsn, the gradient of the state leaving each chunk; each step writes the previous
    # step's rows (sequences that end there start from dfinal), step 0 the initial states' gradients
    dinit = _sorted(lay, dfinal, (lay.N, HV, K, V))
    dsn, dvn = torch.empty_like(hs), torch.empty_like(vn)
    dh0 = torch.empty_like(dinit)
    n0 = lay.counts[0] if lay.steps else 0
    dh0[n0:] = dinit[n0:]  # sequences of no token
    if lay.steps:
        n, s0 = lay.counts[-1], lay.starts[-1]
        dsn[s0 : s0 + n] = dinit[:n]
    egam4 = egam[..., None, None]
    wt = ch.w.transpose(-1, -2).contiguous()  # [NCH, HV, K, C], once
    for j in reversed(range(lay.steps)):
        n, s0 = lay.counts[j], lay.starts[j]
        cut = slice(s0, s0 + n)
        torch.baddbmm(
            dvl[cut].view(n * HV, C, V),
            ch.kd[cut].view(n * HV, C, K),
            dsn[cut].view(n * HV, K, V),
            out=dvn[cut].view(n * HV, C, V),
        )
        if j:
            n1, s1 = lay.counts[j - 1], lay.starts[j - 1]
            into = dsn[s1 : s1 + n]
            dsn[s1 + n : s1 + n1] = dinit[n:n1]  # sequences whose last chunk is step j - 1
        else:
            into = dh0[:n]
        torch.mul(dsn[cut], egam4[cut], out=into)
        into = into.view(n * HV, K, V)
        into.baddbmm_(qet[cut].view(n * HV, K, C), doc[cut].view(n * HV, C, V))  # o's read, a step at a time
        into.baddbmm_(wt[cut].view(n * HV, K, C), dvn[cut].view(n * HV, C, V), alpha=-1)
    dh0 = None if initial_state is None else _unsorted(lay, dh0)
    del dvl, qet, wt  # the state-sized tensors go as soon as their last use (the peak is the fallback's or less)
    # the output: its read of the state (q S) and its intra-chunk part (P V'); dg's terms are each summed in fp32
    # over a head dimension, then in fp64: the result is one rounding of their sum
    dqi = (doc @ hs.transpose(-1, -2)).mul_((eg * scale)[..., None])
    dgc = (heads(dqi) * q1).sum(-1).view(NCH, HV, C).double()
    dp = (doc @ vn.transpose(-1, -2)).mul_(ch.decay).mul_(scale)
    pairs = (heads(dp) * qk1).view(NCH, HV, C, C).tril_(-1)  # exp(gc_r - gc_s), r > s: exp(0) of r = s is no g's
    dps = _by_group(dp, H)
    dq = _by_group(dqi, H) + dps @ ch.k
    dk = dps.transpose(-1, -2) @ ch.q
    # what each chunk wrote into the state: exp(gam - gc) k and V'
    dkd = vn @ dsn.transpose(-1, -2)
    gk = (dkd * ch.kd).sum(-1).double()  # exp(gam - gc_r): g of the tokens after r
    dkv = dkd.mul_((gam[..., None] - ch.gc).exp()[..., None])
    NH, KV = NCH * HV, K * V
    state = torch.bmm(hs.view(NH, 1, KV), dsn.view(NH, KV, 1)).view(NCH, HV)  # <S, dS>: one read of each
    dgc[..., -1] += egam * state.double()  # exp(gam) S: every g of the chunk
    del dsn
    # the WY factors: W = Tinv (beta exp(gc) k), U = Tinv (beta v), Tinv = (I + A)^-1
    dw = dvn @ hs.transpose(-1, -2)  # minus dW
    del hs
    tt = ch.tinv.transpose(-1, -2)
    dx = tt @ dw  # minus d(beta exp(gc) k)
    dy = tt @ dvn
    _, strict = _masks(q.device)
    da = (dx @ ch.w.transpose(-1, -2) - dy @ ch.u.transpose(-1, -2)).masked_fill_(~strict, 0.0)
    be = ch.beta * eg
    kdx = (heads(dx) * k1).sum(-1).view(NCH, HV, C)
    dkv.addcmul_(dx, be[..., None], value=-1)
    dgc -= be * kdx.double()
    dbeta = (dy * ch.v).sum(-1) - eg * kdx
    dv = dy.mul_(ch.beta[..., None])
    e = da.mul_(ch.decay)  # strictly lower
    dbeta += (heads(e) * kk1).sum(-1).view(NCH, HV, C)
    be_ = e.mul_(ch.beta[..., None])
    pairs += (heads(be_) * kk1).view(NCH, HV, C, C)
    bes = _by_group(be_, H)
    dk += (bes + bes.transpose(-1, -2)) @ ch.k + _by_group(dkv, H)
    dg = dgc.flip(-1).cumsum(-1).flip(-1) + _straddling(pairs) + _before(gk)
    return (
        from_chunks(lay, dq, q.dtype),
        from_chunks(lay, dk, k.dtype),
        from_chunks(lay, dv, v.dtype),
        from_chunks(lay, dg.unsqueeze(-1), g.dtype).squeeze(-1),
        from_chunks(lay, dbeta.unsqueeze(-1), beta.dtype).squeeze(-1),
        None if dh0 is None else dh0.to(initial_state.dtype),
    )
