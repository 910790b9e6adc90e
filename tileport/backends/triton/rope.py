"""rope forward and backward in Triton (``tileport.ops.rope``'s contract): one kernel body, the backward its
conjugate (sin negated), both as ``_fwd_kernel`` / ``_bwd_kernel`` for the lowering's names.

Each program walks blocks of ``BLOCK_M`` tokens (persistent, as ``common.blocks`` sizes them): it takes the
tokens' table rows (``position_ids``, or ``t + offset + offsets[b]``), then per chunk of ``BLOCK_D`` pairs loads
cos and sin once and rotates every head of q, then of k, with them (the table is read once per token, not per
head). Pairs are two strided loads of the head (halves ``i, i + R/2`` or GPT-J's ``2i, 2i + 1``): no host-side
copy for any layout (q, k, outputs and tables take their own strides). Columns past R are copied. A token whose
row is outside the table gets zeros in its rotated columns. fp32 math with each product rounded (no fma: the
GPU build is launched with fp fusion off), rounded once to the output's dtype (bf16 by hand, ``common.store``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from .ascend import chip_of
from .common import blocks, check_size, launch_context, storage, store

# fp32 (BLOCK_M, BLOCK_D) tensors live at once (cos, sin, the pair, the rotated pair, and the address and mask
# lanes rounded up): an Ascend block's size in the unified buffer (common.blocks)
LIVE = {"fwd": 8, "bwd": 8}


@triton.jit
def _rotate_heads(
    X, O, x_tok, o_tok, sxh, soh, H, cols, m, ok, c, s, HALF, INTERLEAVED: tl.constexpr, BF16: tl.constexpr
):
    """One chunk of pairs of every head of X rotated by (c, s) into O; ``ok`` zeros the rows off the table."""
    if INTERLEAVED:
        i1 = 2 * cols
        i2 = 2 * cols + 1
    else:
        i1 = cols
        i2 = cols + HALF
    xh, oh = x_tok, o_tok  # int64 head offsets, advanced by a stride per head (no int32 product)
    for _ in range(H):
        xp = X + xh[:, None]
        op = O + oh[:, None]
        x1 = tl.load(xp + i1[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(xp + i2[None, :], mask=m, other=0.0).to(tl.float32)
        a = x1 * c  # each product rounded before the sum (no fma): bit for bit with torch's composite
        b = x2 * s
        o1 = tl.where(ok, a - b, 0.0)
        a2 = x2 * c
        b2 = x1 * s
        o2 = tl.where(ok, a2 + b2, 0.0)
        store(op + i1[None, :], o1, m, BF16)
        store(op + i2[None, :], o2, m, BF16)
        xh += sxh
        oh += soh


@triton.jit
def _copy_heads(X, O, x_tok, o_tok, sxh, soh, H, cols, m, BF16: tl.constexpr):
    """Columns ``cols`` (past R) of every head of X copied into O (exact: widened to fp32 and rounded back)."""
    xh, oh = x_tok, o_tok
    for _ in range(H):
        x = tl.load(X + xh[:, None] + cols[None, :], mask=m, other=0.0).to(tl.float32)
        store(O + oh[:, None] + cols[None, :], x, m, BF16)
        xh += sxh
        oh += soh


@triton.jit
def _rope(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    POS,
    OFFS,
    N,
    T,
    HQ,
    HK,
    D,
    HALF,
    TR,
    offset,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sqob,
    sqot,
    sqoh,
    skob,
    skot,
    skoh,
    sc,
    ss,
    spb,
    spt,
    sfb,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HAS_POS: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    CONJUGATE: tl.constexpr,
    BF16: tl.constexpr,
):
    """rope over N = B * T tokens of q [B, T, HQ, D] and k [B, T, HK, D] (HK = 0: no k); CONJUGATE rotates by
    minus the angle (the backward). Strides (batch, token, head) of q, k and their outputs, cos's and sin's
    rows, position_ids' (batch, token) and offsets'; HALF = R / 2, TR the table's rows."""
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        tok = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        tok_ok = tok < N
        b = (tok // T).to(tl.int64)
        t = (tok % T).to(tl.int64)
        if HAS_POS:
            p = tl.load(POS + b * spb + t * spt, mask=tok_ok, other=-1)
        else:
            p = t + offset
            if HAS_OFFSETS:
                p = p + tl.load(OFFS + b * sfb, mask=tok_ok, other=0)
        on_table = tok_ok & (p >= 0) & (p < TR)
        row = tl.where(on_table, p, 0).to(tl.int64)
        q_tok, k_tok = b * sqb + t * sqt, b * skb + t * skt
        qo_tok, ko_tok = b * sqob + t * sqot, b * skob + t * skot
        ok = on_table[:, None]
        for start in range(0, HALF, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            m = tok_ok[:, None] & (cols[None, :] < HALF)
            c = tl.load(COS + row[:, None] * sc + cols[None, :], mask=m & ok, other=0.0).to(tl.float32)
            s = tl.load(SIN + row[:, None] * ss + cols[None, :], mask=m & ok, other=0.0).to(tl.float32)
            if CONJUGATE:
                s = -s
            _rotate_heads(Q, QO, q_tok, qo_tok, sqh, sqoh, HQ, cols, m, ok, c, s, HALF, INTERLEAVED, BF16)
            _rotate_heads(K, KO, k_tok, ko_tok, skh, skoh, HK, cols, m, ok, c, s, HALF, INTERLEAVED, BF16)
        for start in range(2 * HALF, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            m = tok_ok[:, None] & (cols[None, :] < D)
            _copy_heads(Q, QO, q_tok, qo_tok, sqh, sqoh, HQ, cols, m, BF16)
            _copy_heads(K, KO, k_tok, ko_tok, skh, skoh, HK, cols, m, BF16)


@triton.jit
def _fwd_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    POS,
    OFFS,
    N,
    T,
    HQ,
    HK,
    D,
    HALF,
    TR,
    offset,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sqob,
    sqot,
    sqoh,
    skob,
    skot,
    skoh,
    sc,
    ss,
    spb,
    spt,
    sfb,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HAS_POS: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    BF16: tl.constexpr,
):
    _rope(
        Q,
        K,
        QO,
        KO,
        COS,
        SIN,
        POS,
        OFFS,
        N,
        T,
        HQ,
        HK,
        D,
        HALF,
        TR,
        offset,
        sqb,
        sqt,
        sqh,
        skb,
        skt,
        skh,
        sqob,
        sqot,
        sqoh,
        skob,
        skot,
        skoh,
        sc,
        ss,
        spb,
        spt,
        sfb,
        BLOCK_M,
        BLOCK_D,
        INTERLEAVED,
        HAS_POS,
        HAS_OFFSETS,
        False,
        BF16,
    )


@triton.jit
def _bwd_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    POS,
    OFFS,
    N,
    T,
    HQ,
    HK,
    D,
    HALF,
    TR,
    offset,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    sqob,
    sqot,
    sqoh,
    skob,
    skot,
    skoh,
    sc,
    ss,
    spb,
    spt,
    sfb,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    HAS_POS: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    BF16: tl.constexpr,
):
    _rope(
        Q,
        K,
        QO,
        KO,
        COS,
        SIN,
        POS,
        OFFS,
        N,
        T,
        HQ,
        HK,
        D,
        HALF,
        TR,
        offset,
        sqb,
        sqt,
        sqh,
        skb,
        skt,
        skh,
        sqob,
        sqot,
        sqoh,
        skob,
        skot,
        skoh,
        sc,
        ss,
        spb,
        spt,
        sfb,
        BLOCK_M,
        BLOCK_D,
        INTERLEAVED,
        HAS_POS,
        HAS_OFFSETS,
        True,
        BF16,
    )


def _bth(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _run(kernel, q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    check_size("rope", q)
    if k is not None:
        check_size("rope", k)
    B, T, HQ, D = q.shape
    TR, HALF = cos.shape
    q_out, k_out = (
        out if out is not None else (outputs.empty_in_layout(q), None if k is None else outputs.empty_in_layout(k))
    )
    has_k = k is not None and k.numel() > 0
    kk, ko = (k, k_out) if has_k else (q, q_out)  # no k: its loop runs over 0 heads
    HK = k.shape[2] if has_k else 0
    N = B * T
    block_m, block_d, grid, _ = blocks(N, max(HALF, D - 2 * HALF), q.device, LIVE["fwd"])
    if block_m == 1 and chip_of(q.device) is not None:  # triton-ascend 3.2 cannot lower a gathered [1, BLOCK_D] load
        block_m, block_d, grid, _ = blocks(max(N, 2), max(1, block_d // 2), q.device, LIVE["fwd"])
    pos = position_ids if position_ids is not None else q
    offs = offsets if offsets is not None else q
    spb, spt = position_ids.stride() if position_ids is not None else (0, 0)
    sfb = offsets.stride(0) if offsets is not None else 0
    with launch_context():
        kernel[grid](
            q,
            kk,
            storage(q_out),
            storage(ko),
            cos,
            sin,
            pos,
            offs,
            N,
            T,
            HQ,
            HK,
            D,
            HALF,
            TR,
            offset,
            *_bth(q),
            *_bth(kk),
            *_bth(q_out),
            *_bth(ko),
            cos.stride(0),
            sin.stride(0),
            spb,
            spt,
            sfb,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            INTERLEAVED=bool(interleaved),
            HAS_POS=position_ids is not None,
            HAS_OFFSETS=offsets is not None,
            BF16=q.dtype == torch.bfloat16,
            enable_fp_fusion=False,
        )
    return q_out, k_out


def forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    """(q_out, k_out): q and k rotated (``tileport.ops.rope``); k_out None where k is; ``out``: written into."""
    return _run(_fwd_kernel, q, k, cos, sin, position_ids, offsets, interleaved, offset, out)


def backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """(dq, dk): the output gradients rotated by minus the angle; dk None where dk_out is."""
    return _run(_bwd_kernel, dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)
