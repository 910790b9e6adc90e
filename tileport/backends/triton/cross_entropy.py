"""cross_entropy's row kernels in Triton (the contract in ``tileport/ops/cross_entropy``): per row the loss, the
z-loss and the logsumexp, and in the same pass the gradient (``grad``, which may be the input itself); the
backward recomputes the gradient from the input and the forward's lse.

Each program walks blocks of ``BLOCK_M`` rows (persistent: ``common.blocks`` sizes them, the vector-core grid
and the unified buffer on Ascend), a row in ``BLOCK_D``-wide blocks, never the whole row at once: any C, 262144
and beyond. Pass one keeps an online max and sum: a block's exps are taken against the running max and the
row's sum rescaled when the max grows (one exp per element); the sums across blocks are fp64 (Ascend, which has
no fp64: compensated fp32), the elements fp32 (16-bit logits widened in registers). The loss is formed from
(max - z_t) + log(sum), never lse - z_t with lse rounded, and the gradient pass's softmax from
exp((z - max) - log(sum)): exact at bf16 logits of magnitude 6e4, where an fp32 lse is 0.004 off. The fp32
contract: fp64 inputs are the torch and TileLang backends' (this backend declares fp16, bf16 and fp32).

softcap: z = cap * tanh(x / cap), tanh by an odd polynomial below 0.625 (Cephes' tanhf coefficients, 1.3 ulp)
and 1 - r above, r = 2 e / (1 + e), e = exp(-2|u|) (it underflows gradually, never overflows), its slope
1 - tanh^2 as (1 - t)(1 + t), or r (2 - r) where t is near 1: no cancellation at either end, and only exp (no libdevice tanh: neither the interpreter nor
triton-ascend has it; constants as ``tl.constexpr``, which triton-ascend's Triton needs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from .common import blocks, check_size, launch_context, neumaier, storage, store, wide

# fp32 (BLOCK_M, BLOCK_D) tensors live at once (logits, capped logits and slope, exps or softmax, weights,
# gradient, masks): an Ascend block's size in the unified buffer (common.blocks)
LIVE = 8
TANH_SPLIT = tl.constexpr(0.625)
T1 = tl.constexpr(-3.33332819422e-1)  # tanh(u) = u + u^3 (T1 + q (T2 + q (T3 + q (T4 + q T5)))), q = u^2
T2 = tl.constexpr(1.33314422036e-1)
T3 = tl.constexpr(-5.37397155531e-2)
T4 = tl.constexpr(2.06390887954e-2)
T5 = tl.constexpr(-5.70498872745e-3)
NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def softcapped(x, cap):
    """(cap * tanh(x / cap), 1 - tanh^2(x / cap)) in fp32, neither end cancelling."""
    u = x / cap
    a = tl.abs(u)
    q = a * a
    small = a + a * q * (T1 + q * (T2 + q * (T3 + q * (T4 + q * T5))))
    e = tl.exp(-2.0 * a)  # r = 1 - tanh, down to fp32's subnormals (2 / (exp(2a) + 1) lost them at a = 44)
    r = 2.0 * e / (1.0 + e)
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
def _fwd_kernel(X, TGT, WGT, G, LOSS, ZLOSS, LSE, M, C, stride_x, stride_t, stride_g, ignore_index, eps, scale, cap,
                a, b, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, WEIGHT: tl.constexpr, SMOOTH: tl.constexpr,
                SOFTCAP: tl.constexpr, GRAD: tl.constexpr, F64: tl.constexpr, BF16: tl.constexpr):  # fmt: skip
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        rows64 = rows.to(tl.int64)  # N * C passes 2^31 at a 128k vocabulary
        xrow = X + rows64 * stride_x
        t = tl.load(TGT + rows64 * stride_t, mask=row_ok, other=0)
        valid = row_ok & (t != ignore_index)
        tc = tl.where(valid, t, 0).to(tl.int64)
        # the target's logit and weight, read before the gradient pass may overwrite the row (in place)
        zt = tl.load(xrow + tc, mask=valid, other=0.0).to(tl.float32)
        if SOFTCAP:
            zt = softcapped(zt, cap)[0]
        if WEIGHT:
            wt = tl.load(WGT + tc, mask=valid, other=0.0).to(tl.float32)
        else:
            wt = tl.where(valid, 1.0, 0.0)
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
                z = softcapped(z, cap)[0]
            m_new = tl.maximum(m, tl.max(tl.where(mask, z, NEG_INF), axis=1))
            base = tl.where(m_new == NEG_INF, 0.0, m_new)  # a row past M: no inf - inf
            e = tl.where(mask, tl.exp(z - base[:, None]), 0.0)
            if F64:
                s = s * tl.exp(m.to(tl.float64) - base.to(tl.float64)) + tl.sum(e.to(tl.float64), axis=1)
            else:
                f = tl.exp(m - base)
                s, s_lo = neumaier(s * f, s_lo * f, tl.sum(e, axis=1))
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
        log_s = tl.log(s + s_lo)  # s >= 1 on a real row: the max's own term
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
            loss = (1.0 - eps) * loss + (eps / C) * smooth
        tl.store(LOSS + rows, tl.where(valid, loss, 0.0).to(tl.float32), mask=row_ok)
        tl.store(ZLOSS + rows, tl.where(valid, scale * lse * lse, 0.0).to(tl.float32), mask=row_ok)
        tl.store(LSE + rows, lse.to(tl.float32), mask=row_ok)
        if GRAD:
            # g = slope * (k p - a eps / C w_c - a (1 - eps) w_t [c == t]), p = exp((z - m) - log s)
            at = tl.where(valid, a * (1.0 - eps) * wt, 0.0)
            if SMOOTH:
                if WEIGHT:
                    k = a * (1.0 - eps) * wt + a * eps * (wsum / C).to(tl.float32)
                else:
                    k = a * (1.0 - eps) * wt + a * eps
            else:
                k = a * wt
            k = tl.where(valid, k + (b * 2.0 * scale) * lse.to(tl.float32), 0.0)
            log_s32 = log_s.to(tl.float32)
            grow = G + rows64 * stride_g
            for start in range(0, C, BLOCK_D):
                cols = start + tl.arange(0, BLOCK_D)
                cmask = cols < C
                mask = row_ok[:, None] & cmask[None, :]
                z = tl.load(xrow[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
                if SOFTCAP:
                    z, slope = softcapped(z, cap)
                g = k[:, None] * tl.exp((z - m[:, None]) - log_s32[:, None])
                if SMOOTH:
                    if WEIGHT:
                        w = tl.load(WGT + cols, mask=cmask, other=0.0).to(tl.float32)
                        g -= (a * eps / C) * w[None, :]
                    else:
                        g -= a * eps / C
                g = tl.where(cols[None, :] == tc[:, None], g - at[:, None], g)
                if SOFTCAP:
                    g *= slope
                store(grow[:, None] + cols[None, :], tl.where(valid[:, None], g, 0.0), mask, BF16)


@triton.jit
def _bwd_kernel(X, TGT, WGT, DLOSS, DZ, LSE, DX, M, C, stride_x, stride_t, stride_dl, stride_dz, ignore_index, eps,
                scale, cap, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, WEIGHT: tl.constexpr,
                SMOOTH: tl.constexpr, SOFTCAP: tl.constexpr, HAS_DZ: tl.constexpr, BF16: tl.constexpr):  # fmt: skip
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        rows64 = rows.to(tl.int64)
        xrow = X + rows64 * stride_x
        t = tl.load(TGT + rows64 * stride_t, mask=row_ok, other=0)
        valid = row_ok & (t != ignore_index)
        tc = tl.where(valid, t, 0).to(tl.int64)
        da = tl.load(DLOSS + rows64 * stride_dl, mask=row_ok, other=0.0).to(tl.float32)
        if HAS_DZ:
            db = tl.load(DZ + rows64 * stride_dz, mask=row_ok, other=0.0).to(tl.float32)
        else:
            db = tl.zeros((BLOCK_M,), dtype=tl.float32)
        lse = tl.load(LSE + rows, mask=row_ok, other=0.0).to(tl.float32)
        if WEIGHT:
            wt = tl.load(WGT + tc, mask=valid, other=0.0).to(tl.float32)
        else:
            wt = tl.where(valid, 1.0, 0.0)
        k = da * (1.0 - eps) * wt
        if SMOOTH:
            if WEIGHT:  # W = sum of the weights, a pass over them
                wsum = tl.zeros((BLOCK_D,), dtype=tl.float32)
                for start in range(0, C, BLOCK_D):
                    cols = start + tl.arange(0, BLOCK_D)
                    wsum += tl.load(WGT + cols, mask=cols < C, other=0.0).to(tl.float32)
                k += da * eps * (tl.sum(wsum, axis=0) / C)
            else:
                k += da * eps
        at = tl.where(valid, da * (1.0 - eps) * wt, 0.0)
        k = tl.where(valid, k + db * 2.0 * scale * lse, 0.0)
        cw = da * eps / C
        drow = DX + rows64 * C
        for start in range(0, C, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            cmask = cols < C
            mask = row_ok[:, None] & cmask[None, :]
            z = tl.load(xrow[:, None] + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if SOFTCAP:
                z, slope = softcapped(z, cap)
            g = k[:, None] * tl.exp(z - lse[:, None])
            if SMOOTH:
                if WEIGHT:
                    w = tl.load(WGT + cols, mask=cmask, other=0.0).to(tl.float32)
                    g -= cw[:, None] * w[None, :]
                else:
                    g -= cw[:, None]
            g = tl.where(cols[None, :] == tc[:, None], g - at[:, None], g)
            if SOFTCAP:
                g *= slope
            store(drow[:, None] + cols[None, :], tl.where(valid[:, None], g, 0.0), mask, BF16)


DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check(x: torch.Tensor) -> None:
    if x.dtype not in DTYPES:
        raise TypeError(f"cross_entropy: backend 'triton' takes fp16, bf16 or fp32 logits, got {x.dtype} "
                        "(fp64: backend 'torch' or 'tilelang')")  # fmt: skip
    check_size("cross_entropy", x)


def _stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else 0


def _flags(weight, label_smoothing: float, softcap: float) -> dict:
    return {"WEIGHT": weight is not None, "SMOOTH": label_smoothing > 0, "SOFTCAP": bool(softcap)}


def forward(input: torch.Tensor, target: torch.Tensor, weight, ignore_index: int, label_smoothing: float,
            lse_square_scale: float, softcap: float, grad=None, scales=(1.0, 1.0)):  # fmt: skip
    """(loss, z_loss, lse), new fp32 ``[N]`` tensors; with ``grad`` (``[N, C]`` in input's dtype, may be input
    itself) ``a * dloss/dx + b * dz_loss/dx`` written into it in the same pass, ``scales = (a, b)``."""
    _check(input)
    n, c = input.shape
    loss, z_loss, lse = (outputs.empty((n,), torch.float32, input.device) for _ in range(3))
    block_m, block_d, grid, _ = blocks(n, c, input.device, LIVE)
    g = input if grad is None else grad
    with launch_context():
        _fwd_kernel[grid](input, target, input if weight is None else weight, storage(g), loss, z_loss, lse, n, c,
                          _stride(input), _stride(target), _stride(g), ignore_index, float(label_smoothing),
                          float(lse_square_scale), float(softcap or 1.0), float(scales[0]), float(scales[1]),
                          BLOCK_M=block_m, BLOCK_D=block_d, GRAD=grad is not None, F64=wide(input.device),
                          BF16=input.dtype == torch.bfloat16, **_flags(weight, label_smoothing, softcap))  # fmt: skip
    return loss, z_loss, lse


def backward(dloss: torch.Tensor, dz_loss, input: torch.Tensor, target: torch.Tensor, weight, lse: torch.Tensor,
             ignore_index: int, label_smoothing: float, lse_square_scale: float, softcap: float) -> torch.Tensor:  # fmt: skip
    """dinput, a new contiguous ``[N, C]`` in input's dtype: ``dloss_r * dloss_r/dx + dz_loss_r * dz_loss_r/dx``
    from input and the forward's lse (``dz_loss`` None: no z-loss term)."""
    _check(input)
    n, c = input.shape
    dx = outputs.empty((n, c), input.dtype, input.device)
    block_m, block_d, grid, _ = blocks(n, c, input.device, LIVE)
    with launch_context():
        _bwd_kernel[grid](input, target, input if weight is None else weight, dloss, dloss if dz_loss is None else dz_loss,
                          lse, storage(dx), n, c, _stride(input), _stride(target), _stride(dloss),
                          0 if dz_loss is None else _stride(dz_loss), ignore_index, float(label_smoothing),
                          float(lse_square_scale), float(softcap or 1.0), BLOCK_M=block_m, BLOCK_D=block_d,
                          HAS_DZ=dz_loss is not None, BF16=input.dtype == torch.bfloat16,
                          **_flags(weight, label_smoothing, softcap))  # fmt: skip
    return dx
