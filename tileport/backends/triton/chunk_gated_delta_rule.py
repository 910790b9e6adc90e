"""chunk_gated_delta_rule in Triton (``tileport.ops.chunk_gated_delta_rule``'s contract): the chunk algorithm of
``tileport/backends/tilelang/cpu/chunked.py`` (chunks of C = 64 tokens, the WY representation), structured as
flash-linear-attention's kernels and written for tileport. Per chunk and value head (r, s its tokens, gc the
chunk's cumulative g, gam = gc at its last row):

    A = strictly-lower(beta_r k_r.k_s exp(gc_r - gc_s)),  Tinv = (I + A)^-1,  W = Tinv (beta e^gc k),  U = Tinv (beta v)
    V' = U - W S,   O = scale (e^gc q S + lower(q k^T exp(gc_r - gc_s)) V'),   S <- e^gam S + (e^(gam - gc) k)^T V'

The kernels (each program walks its tasks, ``for task in range(pid, tasks, programs)``: one program a task on a
GPU and the interpreter, the vector-core count on Ascend; every product an fp32 ``tl.dot`` with IEEE products,
``_delta.mm``). BK is all of K (a power of 2, at least 16), KB the K block of the kernels that walk K, BV the V block
(``_blocks``: GPU KB = BK, BV = 64; interpreter KB = BK, BV = all of V; Ascend KB = 64, BV = 16):

- ``_gates_kernel`` (fla's chunk_local_cumsum): per chunk, every value head at once ([64, HV] tile), gc = the
  in-chunk cumulative sum of g (``tl.cumsum``), and beta, both stored chunk-major [NCH, HV, 64] fp32 so that every
  later load of them is contiguous.
- ``_intra_kernel`` (chunk_scaled_dot_kkt, solve_tril and recompute_w_u): per (chunk, value head), k k^T over K
  blocks of KB, A, Tinv (``_delta.solve_unit_lower``: the four 16 x 16 diagonal blocks by substitution at once,
  merged by four products), then W per K block and U per V block ([64, KB] and [64, BV] tiles, [64, 64] for A and
  Tinv); Tinv stored for the backward.
- ``_recurrence_kernel`` (chunk_fwd_h, and chunk_bwd_dhu with BACKWARD): per (sequence, value head, V block) the
  state [BK, BV] stays in registers across the sequence's chunks ([64, BK] tiles of W, k, q); it stores the state
  entering each chunk and V' = U - W S (forward), or the gradient leaving each chunk and dV' = dV_local + kd dS,
  with dS <- e^gam dS + (q e^gc scale)^T dO - W^T dV' (backward, chunks in reverse); the final state, or
  dinitial_state, at the end.
- ``_local_kernel`` (chunk_fwd_o, and chunk_bwd_dv_local with BACKWARD): per (chunk, value head, V block), P =
  scale lower(q k^T exp(gc_r - gc_s)) over K blocks of KB; O = e^gc scale q S + P V', or dV_local = P^T dO.
- ``_dqkwg_kernel`` (chunk_bwd_dqkwg): per (chunk, key head), its value heads in turn, V blocks of BV accumulated
  into [64, BK] tiles: dq and dk of the output and of the state write (summed over the group into a chunk
  buffer), dW = dV' S^T, and d(gc): of the decays as the rows' sums less the columns' sums of dP * q k^T (the
  diagonal cancels exactly), of the state write, and gam's gradient on the last row.
- ``_wy_bwd_kernel`` (prepare_wy_repr_bwd): per (chunk, key head), its value heads in turn: dX = Tinv^T dW and dY =
  Tinv^T dV' (V blocks), dA = strictly-lower(dX W^T - dY U^T); from them dv = beta dY, dbeta, dk (added to the
  group's, then dq and dk stored) and d(gc), stored as dg = its reverse in-chunk cumulative sum.

Every exponent is a difference gc_r - gc_s (r >= s, masked before the exponential), gam - gc, or gc itself: none
is positive for g <= 0 (g reaches -20 a token in models, so gc reaches -1280 in a chunk). q, k and v are read in
their dtype and widened to fp32 at once (the interpreter computes bf16 wrongly); intermediates are fp32 buffers
(the backward recomputes the forward's from the inputs); outputs are rounded once (bf16 by hand,
``common.store``).

Ascend A2/A3 (triton-ascend 3.2): every kernel lowers to Linalg IR. They are shaped as fla's Triton-Ascend backend
shapes its own: a grid of the vector cores with a loop over tasks; k k^T, the solve and the WY factors unfused from
the state recurrence; g and beta re-laid chunk-major for contiguous loads; narrow blocks (KB 64, BV 16: the tiles
the readiness check counts at K = V = 128 are 46-57 KB for the K-walking kernels, 92-102 KB for the recurrence,
139 and 159 KB for dqkwg and the WY backward, of 192 KB); and every dot's left operand a copy (``_delta.mm``:
triton-ascend's dot may overwrite its left operand, which fla's kernels work around by reloading or copying it).
The state kernels hold [64, K] tiles whole: at K = 256 their tiles pass the unified buffer (K blocks of the state,
fla's b_h1..b_h4, would be the change). ``lowering_examples`` gives the inputs ``tileport lower`` captures them on.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from . import interpreting
from ._delta import (
    SUB,
    C,
    chunk_at,
    decays,
    inner_contiguous,
    load_chunk,
    load_tokens,
    mm,
    plan,
    programs,
    solve_unit_lower,
    store_chunk,
    width,
)
from .ascend import chip_of
from .common import check_size, launch_context, storage, store

F32 = torch.float32
KERNELS = (
    "_gates_kernel",
    "_intra_kernel",
    "_recurrence_kernel",
    "_local_kernel",
    "_dqkwg_kernel",
    "_wy_bwd_kernel",
)
BV_ASCEND = 16  # V block on Ascend: the state kernels' tiles near half the unified buffer at K = 128
LOWERING_DIMS = (16, 64, 128)  # head dims (K = V) the Ascend lowering takes: the tile widths 16, 64 and 128


@triton.jit
def store_tokens(X, row, t0, count, sb, st, cols, D, value, BT: tl.constexpr, BF16: tl.constexpr):
    """The chunk's rows (those under its count) of a token tensor at X (offset to its head), rounded once."""
    r = tl.arange(0, BT)
    m = (r < count)[:, None] & (cols < D)[None, :]
    store(X + row * sb + t0 * st + r[:, None] * st + cols[None, :], value, m, BF16)


@triton.jit
def store_gate(X, row, t0, count, sb, st, value, BT: tl.constexpr, BF16: tl.constexpr):
    """A per-token value of the chunk (rows under its count) into a [B, T, HV] tensor at X (offset to its head)."""
    r = tl.arange(0, BT)
    store(X + row * sb + t0 * st + r * st, value, r < count, BF16)


@triton.jit
def _gates_kernel(G, BETA, GC, BC, CHUNKS, NCH, HV, sgb, sgt, sgh, sbb, sbt, sbh, BT: tl.constexpr, BH: tl.constexpr):
    """gc (the in-chunk cumulative sum of g) and beta of every value head, chunk-major [NCH, HV, BT] fp32; rows
    past the chunk's tokens carry g = 0 (gc stays at its last value) and beta = 0."""
    r = tl.arange(0, BT)
    h = tl.arange(0, BH)
    for c in range(tl.program_id(0), NCH, tl.num_programs(0)):
        row, t0, count = chunk_at(CHUNKS, c)
        m = (r < count)[:, None] & (h < HV)[None, :]
        g = tl.load(G + row * sgb + t0 * sgt + r[:, None] * sgt + h[None, :] * sgh, mask=m, other=0.0)
        beta = tl.load(BETA + row * sbb + t0 * sbt + r[:, None] * sbt + h[None, :] * sbh, mask=m, other=0.0)
        out = tl.cast(c, tl.int64) * HV * BT + h[None, :] * BT + r[:, None]
        keep = (r < BT)[:, None] & (h < HV)[None, :]
        tl.store(GC + out, tl.cumsum(g.to(tl.float32), axis=0), mask=keep)
        tl.store(BC + out, beta.to(tl.float32), mask=keep)


@triton.jit
def _intra_kernel(
    Kp,
    Vp,
    GC,
    BC,
    CHUNKS,
    TINV,
    W,
    U,
    NCH,
    H,
    HV,
    KD,
    VD,
    skb,
    skt,
    skh,
    svb,
    svt,
    svh,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    SB: tl.constexpr,
    STORE_TINV: tl.constexpr,
):
    """Per (chunk, value head): A from k k^T (K blocks of BK), Tinv = (I + A)^-1, W = Tinv (beta e^gc k) and
    U = Tinv (beta v), each [BT, D] fp32, block by block; Tinv [BT, BT] too with STORE_TINV."""
    R = HV // H
    r = tl.arange(0, BT)
    for task in range(tl.program_id(0), NCH * HV, tl.num_programs(0)):
        c = task // HV
        hv = task % HV
        row, t0, count = chunk_at(CHUNKS, c)
        cb = tl.cast(c * HV + hv, tl.int64)
        gc = tl.load(GC + cb * BT + r)
        beta = tl.load(BC + cb * BT + r)
        kp = Kp + tl.cast(hv // R, tl.int64) * skh
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        for k0 in range(0, KD, BK):
            kt = load_tokens(kp, row, t0, count, skb, skt, k0 + tl.arange(0, BK), KD, BT)
            kk += mm(kt, tl.trans(kt))
        tinv = solve_unit_lower(kk * beta[:, None] * decays(gc, True, BT), BT, SB)
        if STORE_TINV:
            store_chunk(TINV, cb * BT * BT, r, BT, tinv, BT)
        eb = beta * tl.exp(gc)
        for k0 in range(0, KD, BK):
            cols = k0 + tl.arange(0, BK)
            kt = load_tokens(kp, row, t0, count, skb, skt, cols, KD, BT)
            store_chunk(W, cb * BT * KD, cols, KD, mm(tinv, kt * eb[:, None]), BT)
        vp = Vp + tl.cast(hv, tl.int64) * svh
        for v0 in range(0, VD, BV):
            cols = v0 + tl.arange(0, BV)
            vt = load_tokens(vp, row, t0, count, svb, svt, cols, VD, BT)
            store_chunk(U, cb * BT * VD, cols, VD, mm(tinv, vt * beta[:, None]), BT)


@triton.jit
def _recurrence_kernel(
    Qp,
    Kp,
    DO,
    GC,
    W,
    XIN,
    XOUT,
    STATES,
    START,
    END,
    CHUNKS,
    SEQS,
    N,
    H,
    HV,
    KD,
    VD,
    scale,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sdb,
    sdt,
    sdh,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BACKWARD: tl.constexpr,
    HAS_START: tl.constexpr,
    HAS_END: tl.constexpr,
    END_BF16: tl.constexpr,
):
    """The chunk-to-chunk recurrence of one (sequence, value head, V block): the state S [BK, BV] (all of K, BV
    of V) in registers from START (zeros without), STATES[c] the state entering chunk c (forward) or the gradient
    leaving it (BACKWARD, chunks in reverse), XOUT[c] = XIN[c] - W S (V' from U) or XIN[c] + kd S (dV' from
    dV_local), and S at the end into END. Forward: S <- e^gam S + kd^T V'; backward: S <- e^gam S + (q e^gc
    scale)^T dO - W^T dV'; kd = e^(gam - gc) k."""
    R = HV // H
    NV = tl.cdiv(VD, BV)
    r = tl.arange(0, BT)
    kr = tl.arange(0, BK)
    for task in range(tl.program_id(0), N * HV * NV, tl.num_programs(0)):
        n = task // (HV * NV)
        hv = (task // NV) % HV
        vc = (task % NV) * BV + tl.arange(0, BV)
        sm = (kr < KD)[:, None] & (vc < VD)[None, :]
        so = kr[:, None] * VD + vc[None, :]
        nb = tl.cast(n * HV + hv, tl.int64) * KD * VD
        if HAS_START:
            s = tl.load(START + nb + so, mask=sm, other=0.0).to(tl.float32)
        else:
            s = tl.zeros([BK, BV], dtype=tl.float32)
        c0 = tl.load(SEQS + n)
        c1 = tl.load(SEQS + n + 1)
        kh = tl.cast(hv // R, tl.int64)
        for j in range(c0, c1):
            if BACKWARD:
                c = c0 + c1 - 1 - j
            else:
                c = j
            row, t0, count = chunk_at(CHUNKS, c)
            cb = tl.cast(c * HV + hv, tl.int64)
            tl.store(STATES + cb * KD * VD + so, s, mask=sm)
            gc = tl.load(GC + cb * BT + r)
            gam = tl.load(GC + cb * BT + BT - 1)
            w = load_chunk(W, cb * BT * KD, kr, KD, BT)
            x = load_chunk(XIN, cb * BT * VD, vc, VD, BT)
            kd = load_tokens(Kp + kh * skh, row, t0, count, skb, skt, kr, KD, BT) * tl.exp(gam - gc)[:, None]
            if BACKWARD:
                x += mm(kd, s)
                qe = load_tokens(Qp + kh * sqh, row, t0, count, sqb, sqt, kr, KD, BT) * (tl.exp(gc) * scale)[:, None]
                do = load_tokens(DO + tl.cast(hv, tl.int64) * sdh, row, t0, count, sdb, sdt, vc, VD, BT)
                s = s * tl.exp(gam) + mm(tl.trans(qe), do) - mm(tl.trans(w), x)
            else:
                x -= mm(w, s)
                s = s * tl.exp(gam) + mm(tl.trans(kd), x)
            store_chunk(XOUT, cb * BT * VD, vc, VD, x, BT)
        if HAS_END:
            store(END + nb + so, s, sm, END_BF16)


@triton.jit
def _local_kernel(
    Qp,
    Kp,
    X,
    STATES,
    OUT,
    GC,
    CHUNKS,
    NCH,
    H,
    HV,
    KD,
    VD,
    scale,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sxb,
    sxt,
    sxh,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BACKWARD: tl.constexpr,
    OUT_BF16: tl.constexpr,
):
    """Per (chunk, value head, V block), P = scale lower(q k^T exp(gc_r - gc_s)) (K blocks of BK). Forward: the
    output O = e^gc scale (q S) + P V' (X = V' chunks, S = STATES[c]) into the token tensor OUT (strides sx*);
    BACKWARD: dV_local = P^T dO (X = dO, strides sx*) into the chunk buffer OUT."""
    R = HV // H
    NV = tl.cdiv(VD, BV)
    r = tl.arange(0, BT)
    for task in range(tl.program_id(0), NCH * HV * NV, tl.num_programs(0)):
        c = task // (HV * NV)
        hv = (task // NV) % HV
        vc = (task % NV) * BV + tl.arange(0, BV)
        row, t0, count = chunk_at(CHUNKS, c)
        cb = tl.cast(c * HV + hv, tl.int64)
        gc = tl.load(GC + cb * BT + r)
        kh = tl.cast(hv // R, tl.int64)
        qk = tl.zeros([BT, BT], dtype=tl.float32)
        qs = tl.zeros([BT, BV], dtype=tl.float32)
        for k0 in range(0, KD, BK):
            cols = k0 + tl.arange(0, BK)
            qt = load_tokens(Qp + kh * sqh, row, t0, count, sqb, sqt, cols, KD, BT)
            kt = load_tokens(Kp + kh * skh, row, t0, count, skb, skt, cols, KD, BT)
            qk += mm(qt, tl.trans(kt))
            if not BACKWARD:
                sm = (cols < KD)[:, None] & (vc < VD)[None, :]
                s = tl.load(STATES + cb * KD * VD + cols[:, None] * VD + vc[None, :], mask=sm, other=0.0)
                qs += mm(qt, s)
        p = qk * decays(gc, False, BT) * scale
        xp = X + tl.cast(hv, tl.int64) * sxh
        if BACKWARD:
            do = load_tokens(xp, row, t0, count, sxb, sxt, vc, VD, BT)
            store_chunk(OUT, cb * BT * VD, vc, VD, mm(tl.trans(p), do), BT)
        else:
            o = qs * (tl.exp(gc) * scale)[:, None] + mm(p, load_chunk(X, cb * BT * VD, vc, VD, BT))
            store_tokens(OUT + tl.cast(hv, tl.int64) * sxh, row, t0, count, sxb, sxt, vc, VD, o, BT, OUT_BF16)


@triton.jit
def _dqkwg_kernel(
    Qp,
    Kp,
    DO,
    GC,
    STATES,
    DSTATES,
    VN,
    DVN,
    DQK,
    DW,
    DGC,
    CHUNKS,
    NCH,
    H,
    HV,
    KD,
    VD,
    scale,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sdb,
    sdt,
    sdh,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """Per (chunk, key head), each value head of its group in turn, V blocks accumulated: from the output, dq =
    e^gc scale dO S^T + dP k and dk = dP^T q (dP = scale lower(dO V'^T exp(gc_r - gc_s))); from the state write,
    dk += e^(gam - gc) V' dS^T; dW = dV' S^T (minus W's gradient, [BT, K] per value head) and d(gc), whose last
    row takes gam's gradient. dq and dk summed over the group into DQK [NCH, H, 2, BT, K]."""
    R = HV // H
    r = tl.arange(0, BT)
    kr = tl.arange(0, BK)
    for task in range(tl.program_id(0), NCH * H, tl.num_programs(0)):
        c = task // H
        h = task % H
        row, t0, count = chunk_at(CHUNKS, c)
        qt = load_tokens(Qp + tl.cast(h, tl.int64) * sqh, row, t0, count, sqb, sqt, kr, KD, BT)
        kt = load_tokens(Kp + tl.cast(h, tl.int64) * skh, row, t0, count, skb, skt, kr, KD, BT)
        qk = mm(qt, tl.trans(kt))
        dq = tl.zeros([BT, BK], dtype=tl.float32)
        dk = tl.zeros([BT, BK], dtype=tl.float32)
        for i in range(R):
            hv = h * R + i
            cb = tl.cast(c * HV + hv, tl.int64)
            gc = tl.load(GC + cb * BT + r)
            gam = tl.load(GC + cb * BT + BT - 1)
            dqi = tl.zeros([BT, BK], dtype=tl.float32)
            dkd = tl.zeros([BT, BK], dtype=tl.float32)
            dw = tl.zeros([BT, BK], dtype=tl.float32)
            dp = tl.zeros([BT, BT], dtype=tl.float32)
            hsd = tl.zeros([BK, BV], dtype=tl.float32)
            for v0 in range(0, VD, BV):
                vc = v0 + tl.arange(0, BV)
                sm = (kr < KD)[:, None] & (vc < VD)[None, :]
                so = cb * KD * VD + kr[:, None] * VD + vc[None, :]
                hs = tl.load(STATES + so, mask=sm, other=0.0)
                ds = tl.load(DSTATES + so, mask=sm, other=0.0)
                do = load_tokens(DO + tl.cast(hv, tl.int64) * sdh, row, t0, count, sdb, sdt, vc, VD, BT)
                vn = load_chunk(VN, cb * BT * VD, vc, VD, BT)
                dqi += mm(do, tl.trans(hs))
                dp += mm(do, tl.trans(vn))
                dkd += mm(vn, tl.trans(ds))
                dw += mm(load_chunk(DVN, cb * BT * VD, vc, VD, BT), tl.trans(hs))
                hsd += hs * ds
            store_chunk(DW, cb * BT * KD, kr, KD, dw, BT)
            dqi = dqi * (tl.exp(gc) * scale)[:, None]
            dp = dp * decays(gc, False, BT) * scale
            dpk = mm(dp, kt)
            dpq = mm(tl.trans(dp), qt)
            dkd = dkd * tl.exp(gam - gc)[:, None]
            gk = tl.sum(kt * dkd, 1)
            dgam = tl.sum(gk, 0) + tl.exp(gam) * tl.sum(tl.sum(hsd, 1), 0)
            gqk = dp * qk  # d(gc) of the output's decays: its rows' sums less its columns' (the diagonal cancels)
            dgc = tl.sum(qt * dqi, 1) + tl.sum(gqk, 1) - tl.sum(gqk, 0) - gk + tl.where(r == BT - 1, dgam, 0.0)
            tl.store(DGC + cb * BT + r, dgc)
            dq += dqi + dpk
            dk += dpq + dkd
        qkb = tl.cast(c * H + h, tl.int64) * 2 * BT * KD
        store_chunk(DQK, qkb, kr, KD, dq, BT)
        store_chunk(DQK, qkb + BT * KD, kr, KD, dk, BT)


@triton.jit
def _wy_bwd_kernel(
    Kp,
    Vp,
    GC,
    BC,
    TINV,
    W,
    U,
    DW,
    DVN,
    DQK,
    DGC,
    DQ,
    DK,
    DV,
    DG,
    DB,
    CHUNKS,
    NCH,
    H,
    HV,
    KD,
    VD,
    skb,
    skt,
    skh,
    svb,
    svt,
    svh,
    sdvb,
    sdvt,
    sdvh,
    sqb,
    sqt,
    sqh,
    sgb,
    sgt,
    sgh,
    sbb,
    sbt,
    sbh,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    Q_BF16: tl.constexpr,
    G_BF16: tl.constexpr,
    B_BF16: tl.constexpr,
):
    """Per (chunk, key head), each value head of its group in turn: through W = Tinv (beta e^gc k) and U = Tinv
    (beta v), dX = Tinv^T dW and dY = Tinv^T dV' (V blocks), dA = strictly-lower(dX W^T - dY U^T); then dv = beta
    dY, dbeta, dk (added to DQK's, over the group) and d(gc), and dg = its reverse in-chunk cumulative sum. dq,
    dk (strides sq*: both are fresh [B, T, H, K] tensors), dv (strides sdv*), dg and dbeta stored in their dtypes."""
    R = HV // H
    r = tl.arange(0, BT)
    kr = tl.arange(0, BK)
    for task in range(tl.program_id(0), NCH * H, tl.num_programs(0)):
        c = task // H
        h = task % H
        row, t0, count = chunk_at(CHUNKS, c)
        kt = load_tokens(Kp + tl.cast(h, tl.int64) * skh, row, t0, count, skb, skt, kr, KD, BT)
        kk = mm(kt, tl.trans(kt))
        qkb = tl.cast(c * H + h, tl.int64) * 2 * BT * KD
        dk = load_chunk(DQK, qkb + BT * KD, kr, KD, BT)
        for i in range(R):
            hv = h * R + i
            cb = tl.cast(c * HV + hv, tl.int64)
            gc = tl.load(GC + cb * BT + r)
            beta = tl.load(BC + cb * BT + r)
            eg = tl.exp(gc)
            tinv_t = tl.trans(load_chunk(TINV, cb * BT * BT, r, BT, BT))
            dx = mm(tinv_t, load_chunk(DW, cb * BT * KD, kr, KD, BT))
            da = mm(dx, tl.trans(load_chunk(W, cb * BT * KD, kr, KD, BT)))
            db = tl.zeros([BT], dtype=tl.float32)
            for v0 in range(0, VD, BV):
                vc = v0 + tl.arange(0, BV)
                dy = mm(tinv_t, load_chunk(DVN, cb * BT * VD, vc, VD, BT))
                da -= mm(dy, tl.trans(load_chunk(U, cb * BT * VD, vc, VD, BT)))
                vp = Vp + tl.cast(hv, tl.int64) * svh
                db += tl.sum(dy * load_tokens(vp, row, t0, count, svb, svt, vc, VD, BT), 1)
                dv = dy * beta[:, None]
                store_tokens(DV + tl.cast(hv, tl.int64) * sdvh, row, t0, count, sdvb, sdvt, vc, VD, dv, BT, Q_BF16)
            kdx = tl.sum(dx * kt, 1)
            dk -= dx * (beta * eg)[:, None]
            e = da * decays(gc, True, BT)
            db += tl.sum(e * kk, 1) - eg * kdx
            be = e * beta[:, None]
            dbk = mm(be, kt)
            dbtk = mm(tl.trans(be), kt)
            dk += dbk + dbtk
            ga = be * kk
            dgc = tl.load(DGC + cb * BT + r) - beta * eg * kdx + tl.sum(ga, 1) - tl.sum(ga, 0)
            dg = tl.cumsum(dgc, axis=0, reverse=True)
            store_gate(DG + tl.cast(hv, tl.int64) * sgh, row, t0, count, sgb, sgt, dg, BT, G_BF16)
            store_gate(DB + tl.cast(hv, tl.int64) * sbh, row, t0, count, sbb, sbt, db, BT, B_BF16)
        dq = load_chunk(DQK, qkb, kr, KD, BT)
        store_tokens(DQ + tl.cast(h, tl.int64) * sqh, row, t0, count, sqb, sqt, kr, KD, dq, BT, Q_BF16)
        store_tokens(DK + tl.cast(h, tl.int64) * sqh, row, t0, count, sqb, sqt, kr, KD, dk, BT, Q_BF16)


def _bth(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _is_bf16(t: torch.Tensor | None) -> bool:
    return t is not None and t.dtype == torch.bfloat16


def _blocks(KD: int, VD: int, device) -> tuple[int, int, int]:
    """(BK, KB, BV): all of K (the state's rows), the K block of the kernels that walk K (``_intra_kernel``,
    ``_local_kernel``) and the V block. On Ascend the blocks are narrow so that a program's tiles stay within the
    unified buffer (KB 64, BV BV_ASCEND); the interpreter takes K and V whole (fewer programs and operations)."""
    bk = width(KD)
    if chip_of(device) is not None:
        return bk, min(bk, 64), min(width(VD), BV_ASCEND)
    if interpreting():
        return bk, bk, width(VD)
    return bk, bk, min(width(VD), 64)


class _Run:
    """One call's sizes, chunk plan and launches (forward and backward share the forward's first steps)."""

    def __init__(self, q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
        for x in (q, k, v):
            check_size("chunk_gated_delta_rule", x)
        self.q, self.k, self.v, self.g, self.beta = (inner_contiguous(x) for x in (q, k, v, g, beta))
        self.h0 = None if initial_state is None else initial_state.contiguous()
        B, T, self.H, self.KD = q.shape
        self.HV, self.VD = v.shape[2], v.shape[3]
        self.scale = float(scale)
        self.device = q.device
        self.plan = plan(B, T, cu_seqlens, q.device, initial_state)
        self.BK, self.KB, self.BV = _blocks(self.KD, self.VD, q.device)
        self.NV = triton.cdiv(self.VD, self.BV)

    def chunks(self, *tail: int) -> torch.Tensor:
        return torch.empty((self.plan.NCH, self.HV, *tail), dtype=F32, device=self.device)

    def launch(self, kernel, tasks: int, *args, **constants):
        if tasks:
            with launch_context():
                kernel[programs(tasks, self.device)](*args, BT=C, **constants)

    def intra(self, store_tinv: bool):
        """(gc, beta, Tinv or None, W, U) chunk-major fp32."""
        p = self.plan
        gc, bc = self.chunks(C), self.chunks(C)
        self.launch(
            _gates_kernel,
            p.NCH,
            self.g,
            self.beta,
            gc,
            bc,
            p.chunks,
            p.NCH,
            self.HV,
            *self.g.stride(),
            *self.beta.stride(),
            BH=width(self.HV),
        )
        tinv = self.chunks(C, C) if store_tinv else gc
        w, u = self.chunks(C, self.KD), self.chunks(C, self.VD)
        self.launch(
            _intra_kernel,
            p.NCH * self.HV,
            self.k,
            self.v,
            gc,
            bc,
            p.chunks,
            tinv,
            w,
            u,
            p.NCH,
            self.H,
            self.HV,
            self.KD,
            self.VD,
            *_bth(self.k),
            *_bth(self.v),
            BK=self.KB,
            BV=self.BV,
            SB=SUB,
            STORE_TINV=store_tinv,
        )
        return gc, bc, (tinv if store_tinv else None), w, u

    def recurrence(self, gc, w, x_in, start, end, do=None):
        """(the states per chunk, X out): the forward (x_in = U, do None) or the backward (x_in = dV_local)."""
        p = self.plan
        states, x_out = self.chunks(self.KD, self.VD), self.chunks(C, self.VD)
        dummy = self.q if do is None else do
        self.launch(
            _recurrence_kernel,
            p.N * self.HV * self.NV,
            self.q,
            self.k,
            dummy,
            gc,
            w,
            x_in,
            x_out,
            states,
            states if start is None else start,
            states if end is None else storage(end),
            p.chunks,
            p.seqs,
            p.N,
            self.H,
            self.HV,
            self.KD,
            self.VD,
            self.scale,
            *_bth(self.q),
            *_bth(self.k),
            *_bth(dummy),
            BK=self.BK,
            BV=self.BV,
            BACKWARD=do is not None,
            HAS_START=start is not None,
            HAS_END=end is not None,
            END_BF16=_is_bf16(end),
        )
        return states, x_out

    def local(self, gc, x, states, out, backward: bool):
        """The output (forward: x = V' chunks, out the token tensor o) or dV_local (x = dO, out a chunk buffer)."""
        tok = x if backward else out
        self.launch(
            _local_kernel,
            self.plan.NCH * self.HV * self.NV,
            self.q,
            self.k,
            x,
            states,
            storage(out),
            gc,
            self.plan.chunks,
            self.plan.NCH,
            self.H,
            self.HV,
            self.KD,
            self.VD,
            self.scale,
            *_bth(self.q),
            *_bth(self.k),
            *_bth(tok),
            BK=self.KB,
            BV=self.BV,
            BACKWARD=backward,
            OUT_BF16=_is_bf16(out) and not backward,
        )


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o [B, T, HV, V] in q's dtype, the final states [N, HV, K, V] fp32, or None without initial_state)."""
    run = _Run(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    gc, _, _, w, u = run.intra(store_tinv=False)
    final = None
    if initial_state is not None:
        final = outputs.empty((run.plan.N, run.HV, run.KD, run.VD), F32, q.device)
    states, vn = run.recurrence(gc, w, u, run.h0, final)
    o = outputs.empty(v.shape, q.dtype, q.device)
    run.local(gc, vn, states, o, backward=False)
    return o, final


def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float):
    """(dq, dk, dv, dg, dbeta, dinitial_state or None), each in its input's dtype: the forward's steps recomputed
    (Tinv kept), then dV_local, the reverse recurrence, dqkwg and the WY backward."""
    run = _Run(q, k, v, g, beta, initial_state, cu_seqlens, scale)
    p, H, HV, KD = run.plan, run.H, run.HV, run.KD
    do = inner_contiguous(do)
    dfinal = None if dfinal_state is None else dfinal_state.contiguous()
    gc, bc, tinv, w, u = run.intra(store_tinv=True)
    states, vn = run.recurrence(gc, w, u, run.h0, None)
    dvl = run.chunks(C, run.VD)
    run.local(gc, do, None, dvl, backward=True)
    dh0 = None if initial_state is None else outputs.empty(initial_state.shape, initial_state.dtype, q.device)
    dstates, dvn = run.recurrence(gc, w, dvl, dfinal, dh0, do=do)
    dqk = torch.empty((p.NCH, H, 2, C, KD), dtype=F32, device=q.device)
    dw, dgc = run.chunks(C, KD), run.chunks(C)
    run.launch(
        _dqkwg_kernel,
        p.NCH * H,
        run.q,
        run.k,
        do,
        gc,
        states,
        dstates,
        vn,
        dvn,
        dqk,
        dw,
        dgc,
        p.chunks,
        p.NCH,
        H,
        HV,
        KD,
        run.VD,
        run.scale,
        *_bth(run.q),
        *_bth(run.k),
        *_bth(do),
        BK=run.BK,
        BV=run.BV,
    )
    dq, dk, dv, dg, db = (outputs.empty(x.shape, x.dtype, q.device) for x in (q, k, v, g, beta))
    run.launch(
        _wy_bwd_kernel,
        p.NCH * H,
        run.k,
        run.v,
        gc,
        bc,
        tinv,
        w,
        u,
        dw,
        dvn,
        dqk,
        dgc,
        storage(dq),
        storage(dk),
        storage(dv),
        storage(dg),
        storage(db),
        p.chunks,
        p.NCH,
        H,
        HV,
        KD,
        run.VD,
        *_bth(run.k),
        *_bth(run.v),
        *_bth(dv),
        *_bth(dq),
        *dg.stride(),
        *db.stride(),
        BK=run.BK,
        BV=run.BV,
        Q_BF16=_is_bf16(q),
        G_BF16=_is_bf16(g),
        B_BF16=_is_bf16(beta),
    )
    return dq, dk, dv, dg, db, dh0


def lowering_examples(dtype: torch.dtype, dim: int, generator: torch.Generator) -> list[dict]:
    """Inputs (in the spec's names) that reach every kernel and constexpr, for ``tileport lower``'s capture at
    head dim K = V = ``dim``: a batch of two with a tail chunk, GVA (HV = 2 H), an initial state and its gradient
    (bf16 where the dtype is); and packed sequences with an empty one, no initial state."""

    def randn(*shape, dt=dtype):
        return torch.randn(shape, generator=generator).to(dt)

    def gates(B, T, HV):
        return {"g": -torch.rand((B, T, HV), generator=generator), "beta": torch.rand((B, T, HV), generator=generator)}

    batch = {"q": randn(2, 80, 2, dim), "k": randn(2, 80, 2, dim), "v": randn(2, 80, 4, dim), **gates(2, 80, 4)}
    batch |= {"initial_state": randn(2, 4, dim, dim), "scale": dim**-0.5}
    packed = {"q": randn(1, 70, 1, dim), "k": randn(1, 70, 1, dim), "v": randn(1, 70, 2, dim), **gates(1, 70, 2)}
    packed |= {"cu_seqlens": torch.tensor([0, 5, 5, 70]), "scale": 1.0}
    return [batch, packed]
