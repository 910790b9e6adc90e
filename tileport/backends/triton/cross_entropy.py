"""cross_entropy's row kernels in Triton (the contract in ``tileport/ops/cross_entropy``): per row the loss, the
z-loss and the logsumexp, and in the same pass the gradient (``grad``, which may be the input itself); the
backward recomputes the gradient from the input and the forward's lse.

Each program walks blocks of ``BLOCK_M`` rows (persistent: ``common.blocks`` sizes them, the vector-core grid
and the unified buffer on Ascend), a row in ``BLOCK_D``-wide blocks, never the whole row at once: any C, 262144
and beyond. Pass one keeps an online max and sum: a block's exps are taken against the running max and the
row's sum rescaled when the max grows (one exp per element); the sums across blocks are fp64 (Ascend, which has
no fp64: compensated fp32), the elements fp32 (16-bit logits widened in registers). The loss is formed from
(max - z_t) + log(sum), never lse - z_t with lse rounded, and the gradient pass's softmax from
exp((z - max) - log(sum)): exact at bf16 logits of magnitude 6e4, where an fp32 lse is 0.004 off. fp16, bf16 and fp32
logits (the
backend's dtypes; fp64 is the torch backend's).

softcap: z = cap * tanh(x / cap), tanh by an odd polynomial below 0.625 (Cephes' tanhf coefficients, 1.3 ulp)
and 1 - r above, r = 2 e / (1 + e), e = exp(-2|u|) (it underflows gradually, never overflows), its slope
1 - tanh^2 as (1 - t)(1 + t), or r (2 - r) where t is near 1: no cancellation at either end, and only exp (no
libdevice tanh: neither the interpreter nor triton-ascend has it; constants as ``tl.constexpr``, which
triton-ascend's Triton needs). Quotients are corrected by an fma (a GPU's fp32 division is 2 ulps), the softmax's
exp is range-reduced off the interpreter (``exp_reduced``), the target's gradient element is formed per row in
fp64 (``_target_grad``) and the host's scalars reach the kernels to double precision (``_row``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from . import interpreting
from .ascend import chip_of
from .common import blocks, check_size, launch_context, neumaier, storage, store
from .common import wide as wide_math  # fp64 row math on this device (forward's own ``wide`` is its rows' dtype)

# fp32 (BLOCK_M, BLOCK_D) tensors live at once (logits, capped logits and slope, exps or softmax, weights,
# gradient, masks), per direction: an Ascend block's size in the unified buffer (common.blocks)
LIVE = {"fwd": 8, "bwd": 8}
TANH_SPLIT = tl.constexpr(0.625)
T1 = tl.constexpr(-3.33332819422e-1)  # tanh(u) = u + u^3 (T1 + q (T2 + q (T3 + q (T4 + q T5)))), q = u^2
T2 = tl.constexpr(1.33314422036e-1)
T3 = tl.constexpr(-5.37397155531e-2)
T4 = tl.constexpr(2.06390887954e-2)
T5 = tl.constexpr(-5.70498872745e-3)
LOG2E = tl.constexpr(1.4426950408889634)  # rounded to fp32 in a kernel; LOG2E_LO: what that rounding drops
LOG2E_LO = tl.constexpr(1.925963033500011e-08)
INF = tl.constexpr(float("inf"))
NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def div_rn(x, d, inv):
    """x / d to about half an ulp from inv = 1 / d (a GPU's fp32 division is ``div.full``, 2 ulps): the
    quotient corrected by its remainder (an fma); where the remainder is not finite (x = +-inf: inf - inf) the
    quotient as it is, so an infinite logit's softcap is +-cap as torch's, not nan."""
    q = x * inv
    r = tl.fma(-q, d, x)
    return tl.where(r == r, q + r * inv, q)


@triton.jit
def exp_reduced(x):
    """exp(x) in fp32 to exp2's accuracy whatever |x|: x log2(e) = k + f as a two-part product (its rounding
    kept by an fma), 2^f for |f| <= 1/2, 2^k as two exact powers (subnormal results kept). A GPU's ``tl.exp`` is
    ex2.approx of the rounded x log2(e), which costs |x| / 2 ulps: 10 at p ~ 1e-9, where torch's expf is within
    1. nan stays nan, -inf gives 0, +inf gives inf."""
    xc = tl.where(x < -110.0, -110.0, x)  # exp(-110) rounds to 0, exp(89) overflows: nan fails both, stays nan
    xc = tl.where(xc > 89.0, 89.0, xc)
    hi = xc * LOG2E
    lo = tl.fma(xc, LOG2E, -hi) + xc * LOG2E_LO
    k = tl.floor(hi + 0.5)
    ki = k.to(tl.int32)
    k1 = ki // 2
    s1 = ((k1 + 127) << 23).to(tl.float32, bitcast=True)
    s2 = ((ki - k1 + 127) << 23).to(tl.float32, bitcast=True)
    return tl.exp2((hi - k) + lo) * s1 * s2


@triton.jit
def exp_p(x, NATIVE_EXP: tl.constexpr):
    """The softmax's exp: ``tl.exp`` where it is numpy's (the CPU interpreter: correctly rounded), else
    ``exp_reduced`` (a GPU's and Ascend's ``tl.exp`` lose |x| / 2 ulps)."""
    if NATIVE_EXP:
        return tl.exp(x)
    else:
        return exp_reduced(x)


@triton.jit
def softcapped(x, cap, inv_cap):
    """(cap * tanh(x / cap), 1 - tanh^2(x / cap)) in fp32, neither end cancelling; inv_cap = 1 / cap."""
    u = div_rn(x, cap, inv_cap)
    a = tl.abs(u)
    q = a * a
    small = a + a * q * (T1 + q * (T2 + q * (T3 + q * (T4 + q * T5))))
    e = tl.exp(-2.0 * a)  # r = 1 - tanh = 2 e / (1 + e), down to fp32's subnormals (2 / (exp(2a) + 1) overflows)
    d = 1.0 + e
    r = div_rn(2.0 * e, d, 1.0 / d)
    near = a < TANH_SPLIT
    th = tl.where(near, small, 1.0 - r)
    slope = tl.where(near, (1.0 - th) * (1.0 + th), r * (2.0 - r))
    return cap * tl.where(u < 0, -th, th), slope


@triton.jit
def _row_zeros(BLOCK_M: tl.constexpr, F64: tl.constexpr):
    if F64:
        return tl.zeros((BLOCK_M,), dtype=tl.float64)
    else:
        return tl.zeros((BLOCK_M,), dtype=tl.float32)


@triton.jit
def _widen(v, F64: tl.constexpr):
    if F64:
        return v.to(tl.float64)
    else:
        return v


@triton.jit
def _row(v, lo, BLOCK_M: tl.constexpr, F64: tl.constexpr):
    """A host double passed as fp32 v + lo (a kernel's float arguments are fp32) as a row vector of the row
    dtype: v + lo in fp64 (the host's value to 2^-48), v alone in fp32. 1 - eps rounded to fp32 moved the
    largest gradient element of a row by 1.2e-7 (in 4.37) across a rounding midpoint."""
    if F64:
        return (tl.zeros((BLOCK_M,), dtype=tl.float32) + v).to(tl.float64) + (
            tl.zeros((BLOCK_M,), dtype=tl.float32) + lo
        ).to(tl.float64)
    else:
        return tl.zeros((BLOCK_M,), dtype=tl.float32) + v


@triton.jit
def _target_grad(arg, slope_t, at, kr, wct, F64: tl.constexpr, NATIVE_EXP: tl.constexpr):
    """The target's gradient element per row, rounded once: slope_t (at (p_t - 1) + (kr p_t - wct)), p_t =
    exp(arg) (arg = z_t - lse, the max taken out first where known), in the row dtype (fp64 where there is
    one): the row's largest element, where the vector form's k p - at cancels and its fp32 roundings show."""
    if F64:
        p = tl.exp(arg)
    else:
        p = exp_p(arg, NATIVE_EXP)
    return ((at * (p - 1.0) + (kr * p - wct)) * _widen(slope_t, F64)).to(tl.float32)


@triton.jit
def _target_row(
    X,
    TGT,
    WGT,
    blk,
    M,
    stride_x,
    stride_t,
    ignore_index,
    cap,
    inv_cap,
    BLOCK_M: tl.constexpr,
    WEIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """A block of rows and its targets, both kernels' start: (rows, row_ok, rows64, xrow, valid, tc, z_t,
    slope_t, w_t): the target's (capped) logit, its softcap slope and its class weight per row (0 where ignored)."""
    rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    rows64 = rows.to(tl.int64)  # N * C passes 2^31 at a 128k vocabulary
    xrow = X + rows64 * stride_x
    t = tl.load(TGT + rows64 * stride_t, mask=row_ok, other=0)
    valid = row_ok & (t != ignore_index)
    tc = tl.where(valid, t, 0).to(tl.int64)
    zt = tl.load(xrow + tc, mask=valid, other=0.0).to(tl.float32)
    slope_t = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
    if SOFTCAP:
        zt, slope_t = softcapped(zt, cap, inv_cap)
    if WEIGHT:
        wt = tl.load(WGT + tc, mask=valid, other=0.0).to(tl.float32)
    else:
        wt = tl.where(valid, 1.0, 0.0)
    return rows, row_ok, rows64, xrow, valid, tc, zt, slope_t, wt


@triton.jit
def _fwd_kernel(
    X,
    TGT,
    WGT,
    G,
    LOSS,
    ZLOSS,
    LSE,
    M,
    C,
    stride_x,
    stride_t,
    stride_g,
    ignore_index,
    one_m_eps,
    one_m_eps_lo,
    eps_c,
    eps_c_lo,
    scale,
    scale_lo,
    cap,
    inv_cap,
    a1,
    a1_lo,
    ac,
    ac_lo,
    bz,
    bz_lo,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    WEIGHT: tl.constexpr,
    SMOOTH: tl.constexpr,
    SOFTCAP: tl.constexpr,
    GRAD: tl.constexpr,
    F64: tl.constexpr,
    BF16: tl.constexpr,
    NATIVE_EXP: tl.constexpr,
):
    """Scalars from the host in double, each as fp32 and its remainder (``_row``): one_m_eps = 1 - eps,
    eps_c = eps / C, a1 = a (1 - eps), ac = a eps / C, bz = 2 b lse_square_scale."""
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        # the target's logit and weight, read before the gradient pass may overwrite the row (in place)
        rows, row_ok, rows64, xrow, valid, tc, zt, slope_t, wt = _target_row(
            X, TGT, WGT, blk, M, stride_x, stride_t, ignore_index, cap, inv_cap, BLOCK_M, WEIGHT, SOFTCAP
        )
        # pass one: online max m and sum s of exp(z - m) (s_lo: its compensation where there is no fp64);
        # with smoothing also sum(w z) and sum(w)
        m = tl.full((BLOCK_M,), NEG_INF, dtype=tl.float32)
        s = _row_zeros(BLOCK_M, F64)
        s_lo = tl.zeros((BLOCK_M,), dtype=tl.float32)
        swz = _row_zeros(BLOCK_M, F64)
        swz_lo = tl.zeros((BLOCK_M,), dtype=tl.float32)
        wsum = _row_zeros(BLOCK_M, F64)
        for start in range(0, C, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            cmask = cols < C
            mask = row_ok[:, None] & cmask[None, :]
            z = tl.load(xrow[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if SOFTCAP:
                z = softcapped(z, cap, inv_cap)[0]
            m_new = tl.maximum(m, tl.max(tl.where(mask, z, NEG_INF), axis=1))
            # exps against the running max; against 0 while it is infinite (a row past M, a row of -inf: exp(-inf)
            # = 0; a row holding +inf: its sum +inf, lse +inf, as torch's logsumexp)
            base = tl.where(tl.abs(m_new) == INF, 0.0, m_new)
            e = tl.where(mask, tl.exp(z - base[:, None]), 0.0)  # the sum weighs each exp by itself: tl.exp will do
            if F64:
                s = s * tl.exp(m.to(tl.float64) - base.to(tl.float64)) + tl.sum(e.to(tl.float64), axis=1)
            else:
                f = tl.exp(m - base)
                s, s_lo = neumaier(s * f, tl.where(s_lo == 0.0, 0.0, s_lo * f), tl.sum(e, axis=1))
            m = m_new
            if SMOOTH:
                if WEIGHT:
                    w = tl.where(mask, tl.load(WGT + cols, mask=cmask, other=0.0).to(tl.float32)[None, :], 0.0)
                    wsum += tl.sum(_widen(w, F64), axis=1)
                    wz = _widen(w, F64) * _widen(tl.where(mask, z, 0.0), F64)
                else:
                    wz = _widen(tl.where(mask, z, 0.0), F64)
                if F64:
                    swz += tl.sum(wz, axis=1)
                else:
                    swz, swz_lo = neumaier(swz, swz_lo, tl.sum(wz, axis=1))
        mw = _widen(m, F64)
        log_s = tl.log(tl.where(s < INF, s + s_lo, s))  # s >= 1 on a real row: the max's own term
        lse = mw + log_s
        loss = wt * ((mw - zt) + log_s)
        if SMOOTH:
            if WEIGHT:
                w_all = wsum
            else:
                w_all = _widen(tl.zeros((BLOCK_M,), dtype=tl.float32) + C, F64)
            # sum_c w_c (lse - z_c) = (W m - sum w z) + W log s; W m's rounding error kept by an fma
            wm = w_all * mw
            smooth = ((wm - swz) + (tl.fma(w_all, mw, -wm) - swz_lo)) + w_all * log_s
            loss = _row(one_m_eps, one_m_eps_lo, BLOCK_M, F64) * loss + _row(eps_c, eps_c_lo, BLOCK_M, F64) * smooth
        # loss and z_loss in their buffers' dtype: fp64 rows (wide) keep the fp64 math's values unrounded
        tl.store(LOSS + rows, tl.where(valid, loss, 0.0).to(LOSS.dtype.element_ty), mask=row_ok)
        tl.store(
            ZLOSS + rows,
            tl.where(valid & (scale != 0.0), _row(scale, scale_lo, BLOCK_M, F64) * lse * lse, 0.0).to(
                ZLOSS.dtype.element_ty
            ),
            mask=row_ok,
        )
        tl.store(LSE + rows, lse.to(tl.float32), mask=row_ok)
        if GRAD:
            # g = slope * (k p - ac w_c - at [c == t]), p = exp((z - m) - log s), k = at + kr: at = a1 w_t,
            # kr = ac W + bz lse; the target's element apart (_target_grad)
            at = _row(a1, a1_lo, BLOCK_M, F64) * _widen(wt, F64)
            kr = _row_zeros(BLOCK_M, F64)
            if SMOOTH:
                if WEIGHT:
                    kr = _row(ac, ac_lo, BLOCK_M, F64) * wsum
                else:
                    kr = _row(ac, ac_lo, BLOCK_M, F64) * C
            kr = kr + tl.where(bz != 0.0, _row(bz, bz_lo, BLOCK_M, F64) * lse, 0.0)  # no z-loss: no term (no 0 * inf)
            wct = _row_zeros(BLOCK_M, F64)
            if SMOOTH:
                wct = _row(ac, ac_lo, BLOCK_M, F64) * _widen(wt, F64)
            gt = tl.where(
                valid, _target_grad((_widen(zt, F64) - mw) - log_s, slope_t, at, kr, wct, F64, NATIVE_EXP), 0.0
            )
            k = tl.where(valid, (at + kr).to(tl.float32), 0.0)
            log_s32 = log_s.to(tl.float32)
            grow = G + rows64 * stride_g
            for start in range(0, C, BLOCK_D):
                cols = start + tl.arange(0, BLOCK_D)
                cmask = cols < C
                mask = row_ok[:, None] & cmask[None, :]
                z = tl.load(xrow[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                if SOFTCAP:
                    z, slope = softcapped(z, cap, inv_cap)
                p = exp_p((z - m[:, None]) - log_s32[:, None], NATIVE_EXP)
                if SMOOTH:
                    if WEIGHT:
                        wc = ac * tl.load(WGT + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                    else:
                        wc = ac
                else:
                    wc = 0.0
                g = k[:, None] * p - wc
                if SOFTCAP:
                    g *= slope
                g = tl.where(cols[None, :] == tc[:, None], gt[:, None], g)
                store(grow[:, None] + cols[None, :], tl.where(valid[:, None], g, 0.0), mask, BF16)


@triton.jit
def _bwd_kernel(
    X,
    TGT,
    WGT,
    DLOSS,
    DZ,
    LSE,
    DX,
    M,
    C,
    stride_x,
    stride_t,
    stride_dl,
    stride_dz,
    ignore_index,
    one_m_eps,
    one_m_eps_lo,
    eps_c,
    eps_c_lo,
    scale2,
    scale2_lo,
    cap,
    inv_cap,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    WEIGHT: tl.constexpr,
    SMOOTH: tl.constexpr,
    SOFTCAP: tl.constexpr,
    HAS_DZ: tl.constexpr,
    F64: tl.constexpr,
    BF16: tl.constexpr,
    NATIVE_EXP: tl.constexpr,
):
    """Scalars from the host in double, each as fp32 and its remainder (``_row``): one_m_eps = 1 - eps,
    eps_c = eps / C, scale2 = 2 lse_square_scale."""
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows, row_ok, rows64, xrow, valid, tc, zt, slope_t, wt = _target_row(
            X, TGT, WGT, blk, M, stride_x, stride_t, ignore_index, cap, inv_cap, BLOCK_M, WEIGHT, SOFTCAP
        )
        da = tl.load(DLOSS + rows64 * stride_dl, mask=row_ok, other=0.0).to(tl.float32)
        lse = tl.load(LSE + rows, mask=row_ok, other=0.0).to(tl.float32)
        # k = at + kr as the forward's, the target's element apart (_target_grad)
        da_w = _widen(da, F64)
        at = da_w * _row(one_m_eps, one_m_eps_lo, BLOCK_M, F64) * _widen(wt, F64)
        kr = _row_zeros(BLOCK_M, F64)
        if SMOOTH:
            if WEIGHT:  # W = sum of the weights, a pass over them
                wsum = tl.zeros((BLOCK_D,), dtype=tl.float32)
                for start in range(0, C, BLOCK_D):
                    cols = start + tl.arange(0, BLOCK_D)
                    wsum += tl.load(WGT + cols, mask=cols < C, other=0.0).to(tl.float32)
                kr = da_w * _row(eps_c, eps_c_lo, BLOCK_M, F64) * _widen(tl.sum(wsum, axis=0), F64)
            else:
                kr = da_w * _row(eps_c, eps_c_lo, BLOCK_M, F64) * C
        if HAS_DZ:  # no z-loss gradient: no term (no 0 * inf)
            db = tl.load(DZ + rows64 * stride_dz, mask=row_ok, other=0.0).to(tl.float32)
            kr = kr + tl.where(
                scale2 != 0.0, _widen(db, F64) * _row(scale2, scale2_lo, BLOCK_M, F64) * _widen(lse, F64), 0.0
            )
        wct = _row_zeros(BLOCK_M, F64)
        if SMOOTH:
            wct = da_w * _row(eps_c, eps_c_lo, BLOCK_M, F64) * _widen(wt, F64)
        gt = tl.where(
            valid, _target_grad(_widen(zt, F64) - _widen(lse, F64), slope_t, at, kr, wct, F64, NATIVE_EXP), 0.0
        )
        k = tl.where(valid, (at + kr).to(tl.float32), 0.0)
        cw = da * eps_c
        drow = DX + rows64 * C
        for start in range(0, C, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            cmask = cols < C
            mask = row_ok[:, None] & cmask[None, :]
            z = tl.load(xrow[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if SOFTCAP:
                z, slope = softcapped(z, cap, inv_cap)
            p = exp_p(z - lse[:, None], NATIVE_EXP)
            if SMOOTH:
                if WEIGHT:
                    wc = cw[:, None] * tl.load(WGT + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
                else:
                    wc = cw[:, None]
            else:
                wc = 0.0
            g = k[:, None] * p - wc
            if SOFTCAP:
                g *= slope
            g = tl.where(cols[None, :] == tc[:, None], gt[:, None], g)
            store(drow[:, None] + cols[None, :], tl.where(valid[:, None], g, 0.0), mask, BF16)


DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check(x: torch.Tensor) -> None:
    if x.dtype not in DTYPES:
        raise TypeError(
            f"cross_entropy: backend 'triton' takes fp16, bf16 or fp32 logits, got {x.dtype} (fp64: backend 'torch')"
        )
    check_size("cross_entropy", x)


def _stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else 0


def _flags(x: torch.Tensor, weight, label_smoothing: float, softcap: float) -> dict:
    native = interpreting() and chip_of(x.device) is None  # the interpreter's exp is numpy's, unless Ascend's forms
    return {"WEIGHT": weight is not None, "SMOOTH": label_smoothing > 0, "SOFTCAP": bool(softcap), "NATIVE_EXP": native}


def _pair(v: float) -> tuple[float, float]:
    """A double as (its fp32 rounding, the remainder): a kernel's float arguments are fp32 (``_row``)."""
    hi = float(torch.tensor(v, dtype=torch.float32))
    return hi, v - hi


def _scalars(c: int, label_smoothing: float, softcap: float) -> tuple:
    """(1 - eps, eps / C, cap, 1 / cap) in double, rounded once where the kernels take them."""
    cap = float(softcap or 1.0)
    return 1.0 - label_smoothing, label_smoothing / c, cap, 1.0 / cap


def forward(
    input: torch.Tensor,
    target: torch.Tensor,
    weight,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
    grad=None,
    scales=(1.0, 1.0),
    wide=False,
):
    """(loss, z_loss, lse), new fp32 ``[N]`` tensors (loss and z_loss fp64 where ``wide``: unrounded where the
    kernel's row math is fp64); with ``grad`` (``[N, C]`` in input's dtype, may be input
    itself) ``a * dloss/dx + b * dz_loss/dx`` written into it in the same pass, ``scales = (a, b)``."""
    _check(input)
    n, c = input.shape
    rows = torch.float64 if wide and wide_math(input.device) else torch.float32
    loss, z_loss = (outputs.empty((n,), rows, input.device) for _ in range(2))
    lse = outputs.empty((n,), torch.float32, input.device)
    block_m, block_d, grid, _ = blocks(n, c, input.device, LIVE["fwd"])
    g = input if grad is None else grad
    one_m_eps, eps_c, cap, inv_cap = _scalars(c, float(label_smoothing), softcap)
    a, b, zs = float(scales[0]), float(scales[1]), float(lse_square_scale)
    with launch_context():
        _fwd_kernel[grid](
            input,
            target,
            input if weight is None else weight,
            storage(g),
            loss,
            z_loss,
            lse,
            n,
            c,
            _stride(input),
            _stride(target),
            _stride(g),
            ignore_index,
            *_pair(one_m_eps),
            *_pair(eps_c),
            *_pair(zs),
            cap,
            inv_cap,
            *_pair(a * one_m_eps),
            *_pair(a * eps_c),
            *_pair(2.0 * b * zs),
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            GRAD=grad is not None,
            F64=wide_math(input.device),
            BF16=input.dtype == torch.bfloat16,
            **_flags(input, weight, label_smoothing, softcap),
        )
    return (loss.double(), z_loss.double(), lse) if wide else (loss, z_loss, lse)


def backward(
    dloss: torch.Tensor,
    dz_loss,
    input: torch.Tensor,
    target: torch.Tensor,
    weight,
    lse: torch.Tensor,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
) -> torch.Tensor:
    """dinput, a new contiguous ``[N, C]`` in input's dtype: ``dloss_r * dloss_r/dx + dz_loss_r * dz_loss_r/dx``
    from input and the forward's lse (``dz_loss`` None: no z-loss term)."""
    _check(input)
    n, c = input.shape
    dx = outputs.empty((n, c), input.dtype, input.device)
    block_m, block_d, grid, _ = blocks(n, c, input.device, LIVE["bwd"])
    one_m_eps, eps_c, cap, inv_cap = _scalars(c, float(label_smoothing), softcap)
    with launch_context():
        _bwd_kernel[grid](
            input,
            target,
            input if weight is None else weight,
            dloss,
            dloss if dz_loss is None else dz_loss,
            lse,
            storage(dx),
            n,
            c,
            _stride(input),
            _stride(target),
            _stride(dloss),
            0 if dz_loss is None else _stride(dz_loss),
            ignore_index,
            *_pair(one_m_eps),
            *_pair(eps_c),
            *_pair(2.0 * float(lse_square_scale)),
            cap,
            inv_cap,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_DZ=dz_loss is not None,
            F64=wide_math(input.device),
            BF16=input.dtype == torch.bfloat16,
            **_flags(input, weight, label_smoothing, softcap),
        )
    return dx
