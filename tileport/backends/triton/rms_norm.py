"""rms_norm forward and backward in Triton, ``BLOCK_M`` rows per program, rows walked in column chunks.

Forward per program: pass one sums x^2 into a (BLOCK_M, BLOCK_D) fp32 block reduced with ``tl.sum``; rstd =
rsqrt(sum / D + eps); pass two writes y = x * rstd * (w + offset) (casting "llama": x * rstd and the
weight rounded to x's dtype first). Backward per program: c = mean(g * n) with n = x * rstd and
g = dy * (w + offset), dx = (g - n * c) * rstd, and the program's own fp32 partial of dweight (its rows'
dy * n, summed as a tree: ``column_sum``); the partials are summed in program order afterwards, so dweight is
deterministic.
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
    launch_context,
    round_kind,
    round_to,
    row_stride,
    row_sum_squares,
    storage,
    store,
)

# fp32 (BLOCK_M, BLOCK_D) tensors live at once in the forward and backward kernels: an Ascend block's size
# in the unified buffer (common.blocks), the one thing that differs from the GPU build
LIVE = {"fwd": 5, "bwd": 6}


@triton.jit
def _load(X, R, rows, cols, mask, stride_x, stride_r, HAS_RES: tl.constexpr, S_KIND: tl.constexpr):
    """x, or with a residual s = x + r rounded to residual_out's dtype (add_rms_norm), in fp32."""
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        x = round_to(
            x + tl.load(R + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32), S_KIND
        )
    return x


@triton.jit
def _fwd_kernel(
    X,
    R,
    S,
    W,
    Y,
    RSTD,
    M,
    D,
    stride_x,
    stride_r,
    eps,
    offset,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    LLAMA: tl.constexpr,
    X_KIND: tl.constexpr,
    Y_BF16: tl.constexpr,
    HAS_RES: tl.constexpr,
    S_KIND: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        if HAS_RES:  # pass one also writes residual_out; pass two recomputes it from x and r (no read-after-write)
            acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
            for start in range(0, D, BLOCK_D):
                cols = start + tl.arange(0, BLOCK_D)
                mask = row_ok[:, None] & (cols[None, :] < D)
                s = _load(X, R, rows, cols, mask, stride_x, stride_r, HAS_RES, S_KIND)
                store(S + rows[:, None] * D + cols[None, :], s, mask, S_KIND == 2)
                acc += s * s
            ss = tl.sum(acc, axis=1)
        else:
            ss = row_sum_squares(X, rows, row_ok, D, stride_x, BLOCK_M, BLOCK_D)
        rstd = 1.0 / tl.sqrt(ss / D + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            y = _load(X, R, rows, cols, mask, stride_x, stride_r, HAS_RES, S_KIND) * rstd[:, None]
            if HAS_W:
                w = tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32) + offset
                if LLAMA:
                    y = round_to(y, X_KIND) * round_to(w, X_KIND)[None, :]
                else:
                    y = y * w[None, :]
            store(Y + rows[:, None] * D + cols[None, :], y, mask, Y_BF16)


@triton.jit
def _bwd_kernel(
    X,
    DY,
    W,
    RSTD,
    DX,
    DWP,
    DRES,
    M,
    D,
    stride_x,
    stride_dy,
    stride_dres,
    offset,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    LLAMA: tl.constexpr,
    X_KIND: tl.constexpr,
    DX_BF16: tl.constexpr,
    TREE: tl.constexpr,
    HAS_DRES: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        r = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_W:
                g = g * (tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32) + offset)[None, :]
            acc += g * (x * r[:, None])
        c = tl.sum(acc, axis=1) / D  # a division, as torch's mean
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            gy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            n = x * r[:, None]
            g = gy
            if HAS_W:
                g = gy * (tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32) + offset)[None, :]
                if LLAMA:
                    n_w = round_to(n, X_KIND)
                else:
                    n_w = n
                tl.store(DWP + blk * D + cols, column_sum(tl.where(mask, gy * n_w, 0.0), TREE), mask=cols < D)
            dx = (g - n * c[:, None]) * r[:, None]
            if (
                HAS_DRES
            ):  # add_rms_norm: plus the gradient reaching residual_out directly, after a rounding to its dtype
                dx = round_to(dx, X_KIND) + tl.load(
                    DRES + rows[:, None] * stride_dres + cols[None, :], mask=mask, other=0.0
                ).to(tl.float32)
            store(DX + rows[:, None] * D + cols[None, :], dx, mask, DX_BF16)


def forward(
    x,
    weight,
    eps: float,
    offset: float,
    casting: str,
    output_dtype: torch.dtype,
    out=None,
    residual=None,
    residual_out=None,
):
    """(y, rstd) for a non-empty 2-D x with unit-stride rows (any row stride); weight (D,) or None. With
    ``residual`` (rows like x) and ``residual_out`` (contiguous): x + residual is written there and normalized."""
    check_size("rms_norm", x)
    M, D = x.shape
    y, rstd = (
        out
        if out is not None
        else (outputs.empty((M, D), output_dtype, x.device), outputs.empty((M,), torch.float32, x.device))
    )
    w = x if weight is None else weight.contiguous()  # an unread placeholder without a weight
    r, s = (x, y) if residual is None else (residual, residual_out)  # unread placeholders without a residual
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["fwd"])
    with launch_context():
        _fwd_kernel[grid](
            x,
            r,
            storage(s),
            w,
            storage(y),
            rstd,
            M,
            D,
            row_stride(x),
            row_stride(r),
            eps,
            offset,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            LLAMA=casting == "llama",
            X_KIND=round_kind(x.dtype),
            Y_BF16=output_dtype == torch.bfloat16,
            HAS_RES=residual is not None,
            S_KIND=round_kind(s.dtype),
        )
    return y, rstd


def backward(x, rstd, dy, weight, offset: float, casting: str, eps: float | None = None, dres=None):
    """(dx, dweight fp32 or None): dweight is the sum of the programs' partials, in program order. ``eps`` is
    not used: the fp32 form (``tileport.ops.rms_norm``'s contract). ``dres`` (rows like x): added to dx."""
    check_size("rms_norm", x)
    M, D = x.shape
    dx = outputs.empty((M, D), x.dtype, x.device)
    rstd = rstd.to(torch.float32).contiguous()
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["bwd"])
    partials = outputs.empty((n_blocks, D), torch.float32, x.device) if weight is not None else rstd
    w = x if weight is None else weight.contiguous()
    h = dy if dres is None else dres  # an unread placeholder without it
    with launch_context():
        _bwd_kernel[grid](
            x,
            dy,
            w,
            rstd,
            storage(dx),
            partials,
            h,
            M,
            D,
            row_stride(x),
            row_stride(dy),
            row_stride(h),
            offset,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            LLAMA=casting == "llama",
            X_KIND=round_kind(x.dtype),
            DX_BF16=x.dtype == torch.bfloat16,
            TREE=interpreting(),
            HAS_DRES=dres is not None,
        )
    return dx, (None if weight is None else partials.sum(0))
