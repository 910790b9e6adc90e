"""gated_rms_norm forward and backward in Triton, rms_norm's layout (``triton/rms_norm.py``): ``BLOCK_M`` rows per
program, rows walked in column chunks.

Forward per program: pass one sums u^2 (u = x, or x * act(gate)) into a (BLOCK_M, BLOCK_D) fp32 block reduced
with ``tl.sum``; rstd = rsqrt(sum / D + eps); pass two writes y = u * rstd * w (* act(gate)). Backward per
program: c = mean(g * n) with n = u * rstd and g the gradient reaching n; du = (g - n * c) * rstd gives dx and
dgate; the program's own fp32 partial of dweight (``column_sum``), summed in program order afterwards.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from . import interpreting
from .common import (
    blocks,
    check_size,
    column_sum,
    div_pair,
    launch_context,
    row_stride,
    rsqrt_refined,
    storage,
    store,
    sum_pair,
    wide,
)

# fp32 (BLOCK_M, BLOCK_D) tensors live at once in the forward and backward kernels: an Ascend block's size
# in the unified buffer (common.blocks), the one thing that differs from the GPU build
LIVE = {"fwd": 5, "bwd": 8}


@triton.jit
def _act(z, SILU: tl.constexpr, F64: tl.constexpr):
    """silu (z / (1 + exp(-z))) or sigmoid, in fp64 and rounded once: a gate in the activation's tail gives a
    value the row's normalization scales up, so its rounding shows (an fp32 exp lost the dual benchmark's MERE
    by 20% there). Ascend (no fp64): fp32."""
    if F64:
        zd = z.to(tl.float64)
        if SILU:
            return (zd / (1.0 + tl.exp(-zd))).to(tl.float32)
        else:
            return (1.0 / (1.0 + tl.exp(-zd))).to(tl.float32)
    else:
        if SILU:
            return z / (1.0 + tl.exp(-z))
        else:
            return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _act_grad(z, SILU: tl.constexpr):
    s = 1.0 / (1.0 + tl.exp(-z))
    if SILU:
        return s * (1.0 + z * (1.0 - s))
    else:
        return s * (1.0 - s)


@triton.jit
def _load(P, rows, cols, mask, stride):
    return tl.load(P + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _fwd_kernel(
    X,
    Z,
    W,
    Y,
    RSTD,
    M,
    D,
    stride_x,
    stride_z,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    SILU: tl.constexpr,
    NBG: tl.constexpr,
    Y_BF16: tl.constexpr,
    F64: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            u = _load(X, rows, cols, mask, stride_x)
            if not NBG:
                u = u * _act(_load(Z, rows, cols, mask, stride_z), SILU, F64)
            acc += u * u
        # rstd from the fp32 sum in fp64, rounded once: where one element dominates a row (a gate deep in act's
        # tail leaves the others near 0) y is u * rstd alone, and a twice-rounded fp32 rstd lost the dual benchmark
        if F64:
            rstd = (1.0 / tl.sqrt(tl.sum(acc, axis=1).to(tl.float64) / D + eps)).to(tl.float32)
        else:  # the lanes summed with two-sums, the mean and rsqrt each about correctly rounded
            hi, lo = sum_pair(acc, tl.zeros_like(acc))
            rstd = rsqrt_refined(div_pair(hi, lo, D * 1.0) + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            a = _act(_load(Z, rows, cols, mask, stride_z), SILU, F64)
            y = _load(X, rows, cols, mask, stride_x)
            if not NBG:
                y = y * a
            y = y * rstd[:, None]
            if HAS_W:
                y = y * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            if NBG:
                y = y * a
            store(Y + rows[:, None] * D + cols[None, :], y, mask, Y_BF16)


@triton.jit
def _bwd_kernel(
    X,
    Z,
    DY,
    W,
    RSTD,
    DX,
    DZ,
    DWP,
    M,
    D,
    stride_x,
    stride_z,
    stride_dy,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    SILU: tl.constexpr,
    NBG: tl.constexpr,
    DX_BF16: tl.constexpr,
    DZ_BF16: tl.constexpr,
    TREE: tl.constexpr,
    F64: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        r = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            a = _act(_load(Z, rows, cols, mask, stride_z), SILU, F64)
            u = _load(X, rows, cols, mask, stride_x)
            g = _load(DY, rows, cols, mask, stride_dy)
            if HAS_W:
                g = g * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            if NBG:
                g = g * a
            else:
                u = u * a
            acc += g * (u * r[:, None])
        c = tl.sum(acc, axis=1) / D  # a division, as torch's mean
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            z = _load(Z, rows, cols, mask, stride_z)
            a, da = _act(z, SILU, F64), _act_grad(z, SILU)
            x = _load(X, rows, cols, mask, stride_x)
            gy = _load(DY, rows, cols, mask, stride_dy)
            gw = gy
            if HAS_W:
                gw = gy * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            if NBG:
                n = x * r[:, None]
                dx = (gw * a - n * c[:, None]) * r[:, None]
                dz = gw * n * da
                term = gy * n * a
            else:
                n = x * a * r[:, None]
                du = (gw - n * c[:, None]) * r[:, None]
                dx = du * a
                dz = du * x * da
                term = gy * n
            if HAS_W:
                tl.store(DWP + blk * D + cols, column_sum(tl.where(mask, term, 0.0), TREE), mask=cols < D)
            store(DX + rows[:, None] * D + cols[None, :], dx, mask, DX_BF16)
            store(DZ + rows[:, None] * D + cols[None, :], dz, mask, DZ_BF16)


def forward(x, gate, weight, eps: float, activation: str, norm_before_gate: bool, output_dtype: torch.dtype, out=None):
    """(y, rstd) for non-empty 2-D rows with unit-stride rows (any row stride); weight (D,) or None."""
    check_size("gated_rms_norm", x)
    M, D = x.shape
    y, rstd = (
        out
        if out is not None
        else (outputs.empty((M, D), output_dtype, x.device), outputs.empty((M,), torch.float32, x.device))
    )
    w = x if weight is None else weight.contiguous()  # an unread placeholder without a weight
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["fwd"])
    with launch_context():
        _fwd_kernel[grid](
            x,
            gate,
            w,
            storage(y),
            rstd,
            M,
            D,
            row_stride(x),
            row_stride(gate),
            eps,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            SILU=activation == "silu",
            NBG=norm_before_gate,
            Y_BF16=output_dtype == torch.bfloat16,
            F64=wide(x.device),
        )
    return y, rstd


def backward(x, gate, rstd, dy, weight, eps: float, activation: str, norm_before_gate: bool):
    """(dx, dgate, dweight fp32 or None), the fp32 form (``eps`` is not used); dweight is the sum of the programs'
    partials, in program order."""
    check_size("gated_rms_norm", x)
    M, D = x.shape
    dx, dgate = outputs.empty((M, D), x.dtype, x.device), outputs.empty((M, D), gate.dtype, x.device)
    rstd = rstd.to(torch.float32).contiguous()
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["bwd"])
    partials = outputs.empty((n_blocks, D), torch.float32, x.device) if weight is not None else rstd
    w = x if weight is None else weight.contiguous()
    with launch_context():
        _bwd_kernel[grid](
            x,
            gate,
            dy,
            w,
            rstd,
            storage(dx),
            storage(dgate),
            partials,
            M,
            D,
            row_stride(x),
            row_stride(gate),
            row_stride(dy),
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            SILU=activation == "silu",
            NBG=norm_before_gate,
            DX_BF16=x.dtype == torch.bfloat16,
            DZ_BF16=gate.dtype == torch.bfloat16,
            TREE=interpreting(),
            F64=wide(x.device),
        )
    return dx, dgate, (None if weight is None else partials.sum(0))
