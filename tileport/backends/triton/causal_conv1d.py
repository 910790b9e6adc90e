"""causal_conv1d forward and backward in Triton (``tileport.ops.causal_conv1d``'s contract), ``_fwd_kernel`` and
``_bwd_kernel`` for the lowering's names.

A block is one batch row's ``BLOCK_T`` positions by ``BLOCK_D`` channels; each program walks blocks (persistent,
as ``common.blocks`` sizes them for Ascend). x, dout and the initial states are read through their own strides:
the models' channel-last view, a contiguous x or a slice, no host-side copy. The width W is a constexpr: its taps
are unrolled, each a shifted tile load (cached) times the channel's weight, in fp32, rounded once to x's dtype.

- Forward: ``z = bias + sum_w weight[:, w] * xe[t - (W-1) + w]``; without seq_idx a position before the start is
  the initial state or a zero that multiplies; with it a term enters only where the ids agree (``tl.where``, so a
  term left out is not a product with 0); silu; 0 at padding tokens.
- Backward: the block's positions q in ``[-(W-1), T)`` are both the positions whose input gradient it writes
  (``dxe[q] = sum_k weight[W-1-k] * g[q + k]``, g recomputed at the W shifted tiles: ``dout * silu'(z)``) and the
  tokens whose parameter-gradient terms it sums (``g[q] * xe[q - (W-1) + w]`` and ``g[q]``), into the block's
  fp32 partial ``[W + 1, D]``; the host sums the partials in block order (fp64 where the target has it).
  ``dfinal_states`` is added at the last W - 1 positions; positions before the start go to ``dinitial_states``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from . import interpreting
from .ascend import chip_of
from .common import blocks, check_size, column_sum, launch_context, storage, store, wide

# fp32 (BLOCK_T, BLOCK_D) tiles live at once (the sum, a tap's input, the ids' lanes, g and the shifted g, the
# address lanes): an Ascend block's size in the unified buffer (common.blocks)
LIVE = {"fwd": 6, "bwd": 10}


@triton.jit
def _silu(z):
    return z / (1.0 + tl.exp(-z))


@triton.jit
def _tap(
    X,
    H,
    SEQ,
    b,
    s,
    d,
    ok_d,
    me,
    sxb,
    sxd,
    sxt,
    shb,
    shd,
    shs,
    sqb,
    sqt,
    T,
    S,
    HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
):
    """(input, enters) of the terms reading positions s [BLOCK_T] for the block's tokens whose ids are ``me``:
    x (s >= 0), the initial states or 0 (s < 0, without seq_idx); with seq_idx the term enters where the ids
    agree (and not at padding), without it always."""
    inside = (s >= 0) & (s < T)
    m = inside[:, None] & ok_d[None, :]
    v = tl.load(X + b * sxb + d[None, :] * sxd + s[:, None] * sxt, mask=m, other=0.0).to(tl.float32)
    if HAS_SEQ:
        ids = tl.load(SEQ + b * sqb + s * sqt, mask=inside, other=-1).to(tl.int64)
        enters = inside & (ids == me) & (me >= 0)
    else:
        enters = s < T
        if HAS_INIT:
            before = (s < 0) & (s >= -S)
            hm = before[:, None] & ok_d[None, :]
            v += tl.load(H + b * shb + d[None, :] * shd + (s + S)[:, None] * shs, mask=hm, other=0.0).to(tl.float32)
    return v, enters


@triton.jit
def _preactivation(
    X,
    H,
    SEQ,
    WGT,
    BIAS,
    b,
    t,
    d,
    ok_d,
    me,
    sxb,
    sxd,
    sxt,
    shb,
    shd,
    shs,
    sqb,
    sqt,
    swd,
    sww,
    T,
    S,
    W: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
):
    """z [BLOCK_T, BLOCK_D] of tokens t: the bias, then the W taps that enter (tl.where: a term left out is no
    product with 0)."""
    if HAS_BIAS:
        z = (
            tl.zeros((t.shape[0], d.shape[0]), dtype=tl.float32)
            + tl.load(BIAS + d, mask=ok_d, other=0.0).to(tl.float32)[None, :]
        )
    else:
        z = tl.zeros((t.shape[0], d.shape[0]), dtype=tl.float32)
    for w in tl.static_range(W):
        s = t - (W - 1) + w
        v, enters = _tap(X, H, SEQ, b, s, d, ok_d, me, sxb, sxd, sxt, shb, shd, shs, sqb, sqt, T, S, HAS_INIT, HAS_SEQ)
        wv = tl.load(WGT + d * swd + w * sww, mask=ok_d, other=0.0).to(tl.float32)
        z += tl.where(enters[:, None], wv[None, :] * v, 0.0)
    return z


@triton.jit
def _ids(SEQ, b, t, sqb, sqt, T, HAS_SEQ: tl.constexpr):
    """The tokens' sequence ids (int64; 0 without seq_idx, -1 past the row)."""
    if HAS_SEQ:
        me = tl.load(SEQ + b * sqb + t * sqt, mask=(t >= 0) & (t < T), other=-1).to(tl.int64)
    else:
        me = tl.where((t >= 0) & (t < T), 0, -1).to(tl.int64)
    return me


@triton.jit
def _fwd_kernel(
    X,
    H,
    SEQ,
    WGT,
    BIAS,
    OUT,
    B,
    T,
    D,
    S,
    sxb,
    sxd,
    sxt,
    shb,
    shd,
    shs,
    sqb,
    sqt,
    swd,
    sww,
    sob,
    sod,
    sot,
    n_t,
    n_d,
    W: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SILU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    BF16: tl.constexpr,
):
    """out [B, D, T] of x [B, D, T] (strides sxb, sxd, sxt), blocks of BLOCK_T tokens by BLOCK_D channels."""
    for blk in range(tl.program_id(0), B * n_t * n_d, tl.num_programs(0)):  # persistent: see common.blocks
        b = (blk // (n_t * n_d)).to(tl.int64)
        t = (blk // n_d) % n_t * BLOCK_T + tl.arange(0, BLOCK_T)
        d = (blk % n_d) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok_d = d < D
        me = _ids(SEQ, b, t, sqb, sqt, T, HAS_SEQ)
        z = _preactivation(
            X,
            H,
            SEQ,
            WGT,
            BIAS,
            b,
            t,
            d,
            ok_d,
            me,
            sxb,
            sxd,
            sxt,
            shb,
            shd,
            shs,
            sqb,
            sqt,
            swd,
            sww,
            T,
            S,
            W,
            HAS_BIAS,
            HAS_INIT,
            HAS_SEQ,
        )
        if SILU:
            z = _silu(z)
        if HAS_SEQ:
            z = tl.where((me >= 0)[:, None], z, 0.0)
        m = (t < T)[:, None] & ok_d[None, :]
        store(OUT + b * sob + d[None, :] * sod + t[:, None] * sot, z, m, BF16)


@triton.jit
def _g(
    X,
    H,
    SEQ,
    WGT,
    BIAS,
    DOUT,
    b,
    t,
    d,
    ok_d,
    sxb,
    sxd,
    sxt,
    shb,
    shd,
    shs,
    sqb,
    sqt,
    swd,
    sww,
    sgb,
    sgd,
    sgt,
    T,
    S,
    W: tl.constexpr,
    SILU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
):
    """(g, ids) of tokens t: dout * silu'(z) (dout without silu), 0 off the row and at padding tokens."""
    me = _ids(SEQ, b, t, sqb, sqt, T, HAS_SEQ)
    live = (t >= 0) & (t < T) & (me >= 0)
    m = live[:, None] & ok_d[None, :]
    g = tl.load(DOUT + b * sgb + d[None, :] * sgd + t[:, None] * sgt, mask=m, other=0.0).to(tl.float32)
    if SILU:
        z = _preactivation(
            X,
            H,
            SEQ,
            WGT,
            BIAS,
            b,
            t,
            d,
            ok_d,
            me,
            sxb,
            sxd,
            sxt,
            shb,
            shd,
            shs,
            sqb,
            sqt,
            swd,
            sww,
            T,
            S,
            W,
            HAS_BIAS,
            HAS_INIT,
            HAS_SEQ,
        )
        sg = 1.0 / (1.0 + tl.exp(-z))
        g = g * (sg * (1.0 + z * (1.0 - sg)))
    return tl.where(m, g, 0.0), me


@triton.jit
def _bwd_kernel(
    X,
    H,
    SEQ,
    WGT,
    BIAS,
    DOUT,
    DFIN,
    DX,
    DH,
    PART,
    B,
    T,
    D,
    S,
    sxb,
    sxd,
    sxt,
    shb,
    shd,
    shs,
    sqb,
    sqt,
    swd,
    sww,
    sgb,
    sgd,
    sgt,
    sfb,
    sfd,
    sfs,
    sdb,
    sdd,
    sdt,
    seb,
    sed,
    ses,
    n_t,
    n_d,
    W: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SILU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    HAS_DFIN: tl.constexpr,
    HAS_DH: tl.constexpr,
    BF16: tl.constexpr,
    TREE: tl.constexpr,
):
    """dx (and dinitial_states) of positions q in [-(W-1), T), and each block's partial [W + 1, D] of dweight and
    dbias over its tokens q >= 0."""
    for blk in range(tl.program_id(0), B * n_t * n_d, tl.num_programs(0)):
        b = (blk // (n_t * n_d)).to(tl.int64)
        tb = (blk // n_d) % n_t
        q = tb * BLOCK_T + tl.arange(0, BLOCK_T) - (W - 1)
        d = (blk % n_d) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok_d = d < D
        mine = _ids(SEQ, b, q, sqb, sqt, T, HAS_SEQ)  # the positions' own ids (for the terms they gave)
        dxe = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
        part = PART + (b * n_t + tb) * (W + 1) * D + d
        for k in tl.static_range(W):  # the token q + k read position q with tap W - 1 - k
            g, me = _g(
                X,
                H,
                SEQ,
                WGT,
                BIAS,
                DOUT,
                b,
                q + k,
                d,
                ok_d,
                sxb,
                sxd,
                sxt,
                shb,
                shd,
                shs,
                sqb,
                sqt,
                swd,
                sww,
                sgb,
                sgd,
                sgt,
                T,
                S,
                W,
                SILU,
                HAS_BIAS,
                HAS_INIT,
                HAS_SEQ,
            )
            wv = tl.load(WGT + d * swd + (W - 1 - k) * sww, mask=ok_d, other=0.0).to(tl.float32)
            if HAS_SEQ:  # me < 0: the token is off the row or padding, it has no terms
                enters = (q >= 0) & (mine == me) & (me >= 0)
            else:
                enters = (q >= -S) & (me >= 0)
            dxe += tl.where(enters[:, None], wv[None, :] * g, 0.0)
            if k == 0:  # the tokens q: their terms of dweight (tap w reads q - (W-1) + w) and of dbias
                for w in tl.static_range(W):
                    v, took = _tap(
                        X,
                        H,
                        SEQ,
                        b,
                        q - (W - 1) + w,
                        d,
                        ok_d,
                        me,
                        sxb,
                        sxd,
                        sxt,
                        shb,
                        shd,
                        shs,
                        sqb,
                        sqt,
                        T,
                        S,
                        HAS_INIT,
                        HAS_SEQ,
                    )
                    term = tl.where((took & (me >= 0))[:, None], g * v, 0.0)
                    tl.store(part + w * D, column_sum(term, TREE), mask=ok_d)
                tl.store(part + W * D, column_sum(g, TREE), mask=ok_d)
        if HAS_DFIN:
            f = q - (T - (W - 1))  # the final states' column of position q
            fm = ((f >= 0) & (f < W - 1) & (q >= -S))[:, None] & ok_d[None, :]
            dxe += tl.load(DFIN + b * sfb + d[None, :] * sfd + f[:, None] * sfs, mask=fm, other=0.0).to(tl.float32)
        m = ((q >= 0) & (q < T))[:, None] & ok_d[None, :]
        store(DX + b * sdb + d[None, :] * sdd + q[:, None] * sdt, dxe, m, BF16)
        if HAS_DH:
            hm = ((q < 0) & (q >= -S))[:, None] & ok_d[None, :]
            store(DH + b * seb + d[None, :] * sed + (q + S)[:, None] * ses, dxe, hm, BF16)


def _tiles(B: int, positions: int, D: int, device, live: int) -> tuple[int, int, int, int, tuple[int]]:
    """(BLOCK_T, BLOCK_D, token blocks per row, channel blocks, grid): ``common.blocks``' tile for the rows'
    positions and channels; the grid one program per block, or the chip's vector cores looping on Ascend."""
    block_t, block_d, _, _ = blocks(B * max(positions, 1), D, device, live)
    block_t = max(2, min(block_t, triton.next_power_of_2(max(positions, 1))))  # no gathered [1, BLOCK_D] tile
    n_t, n_d = triton.cdiv(max(positions, 1), block_t), triton.cdiv(D, block_d)
    n = B * n_t * n_d
    chip = chip_of(device)
    return block_t, block_d, n_t, n_d, (min(n, chip.vector_cores) if chip is not None else n,)


def _bdt(t: torch.Tensor | None) -> tuple[int, int, int]:
    return (0, 0, 0) if t is None else (t.stride(0), t.stride(1), t.stride(2))


def forward(x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None): out in x's layout where x is dense (``torch.empty_like``)."""
    check_size("causal_conv1d", x)
    B, D, T = x.shape
    width = weight.shape[1]
    out = outputs.empty((B, D, T), x.dtype, x.device) if x.is_contiguous() else torch.empty_like(x)
    S = 0 if initial_states is None else initial_states.shape[2]
    block_t, block_d, n_t, n_d, grid = _tiles(B, T, D, x.device, LIVE["fwd"])
    with launch_context():
        _fwd_kernel[grid](
            x,
            x if initial_states is None else initial_states,
            x if seq_idx is None else seq_idx,
            weight,
            x if bias is None else bias,
            storage(out),
            B,
            T,
            D,
            S,
            *_bdt(x),
            *_bdt(initial_states),
            *(seq_idx.stride() if seq_idx is not None else (0, 0)),
            *weight.stride(),
            *_bdt(out),
            n_t,
            n_d,
            W=width,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            SILU=activation == "silu",
            HAS_BIAS=bias is not None,
            HAS_INIT=initial_states is not None,
            HAS_SEQ=seq_idx is not None,
            BF16=x.dtype == torch.bfloat16,
        )
    final = None
    if initial_states is not None:  # the last W - 1 positions of the initial states and x: a copy
        final = torch.cat((initial_states, x[..., max(0, T - (width - 1)) :]), -1)[..., -(width - 1) :]
        final = final.contiguous() if width > 1 else initial_states.new_empty((B, D, 0))
    return out, final


def backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None): the blocks' partials summed in block order (fp64 where the
    target has it), rounded once to x's dtype."""
    check_size("causal_conv1d", x)
    B, D, T = x.shape
    width = weight.shape[1]
    S = 0 if initial_states is None else initial_states.shape[2]
    positions = T + width - 1
    dx = outputs.empty((B, D, T), x.dtype, x.device) if x.is_contiguous() else torch.empty_like(x)
    dh = None if initial_states is None else outputs.empty((B, D, S), x.dtype, x.device)
    block_t, block_d, n_t, n_d, grid = _tiles(B, positions, D, x.device, LIVE["bwd"])
    part = outputs.empty((B * n_t, width + 1, D), torch.float32, x.device)
    with launch_context():
        _bwd_kernel[grid](
            x,
            x if initial_states is None else initial_states,
            x if seq_idx is None else seq_idx,
            weight,
            x if bias is None else bias,
            dout,
            x if dfinal_states is None else dfinal_states,
            storage(dx),
            storage(dx if dh is None else dh),
            part,
            B,
            T,
            D,
            S,
            *_bdt(x),
            *_bdt(initial_states),
            *(seq_idx.stride() if seq_idx is not None else (0, 0)),
            *weight.stride(),
            *_bdt(dout),
            *_bdt(dfinal_states),
            *_bdt(dx),
            *_bdt(dh),
            n_t,
            n_d,
            W=width,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            SILU=activation == "silu",
            HAS_BIAS=bias is not None,
            HAS_INIT=initial_states is not None,
            HAS_SEQ=seq_idx is not None,
            HAS_DFIN=dfinal_states is not None,
            HAS_DH=dh is not None,
            BF16=x.dtype == torch.bfloat16,
            TREE=interpreting(),
        )
    sums = part.sum(0, dtype=torch.float64 if wide(x.device) else torch.float32)
    return dx, sums[:width].t().to(x.dtype).contiguous(), sums[width].to(x.dtype), dh
