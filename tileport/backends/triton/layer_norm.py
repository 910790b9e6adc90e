"""layer_norm forward and backward in Triton, ``BLOCK_M`` rows per program, rows walked in column chunks.

Forward per program: pass one sums x in fp64 (the mean, rounded once to fp32: the upstream Triton layer
norms' plain fp32 sum of ~1e6 rounds by ~0.06 per add where the mean is 1000 +- 1, and failed L0's fp32 dweight
at 192x75 with N(mu, sigma) inputs, median MERE ratio 1.38; refining an fp32 mean by a second sum of x - mean
was tried and is worse for fp16 inputs), pass two sums (x - mean)^2 masked past D (the variance: two passes,
never E[x^2] - mean^2), pass three writes y = (x - mean) * rstd * w + b. Backward per program: with
xhat = (x - mean) * rstd and g = dy * w, pass one sums g and g * xhat, pass two writes
dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd and the program's own fp32 partials of dweight (dy * xhat)
and dbias (dy), summed as a tree (``column_sum``); the partials are summed in program order afterwards, so
the sums are deterministic. A weight or bias not given is read as ones or zeros (HAS_W, HAS_B constexprs).
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
    storage,
    store,
    wide,
    wide_add,
    wide_sum,
    wide_zeros,
)

# fp32 (BLOCK_M, BLOCK_D) tensors live at once in the forward and backward kernels: an Ascend block's size
# in the unified buffer (common.blocks), the one thing that differs from the GPU build
LIVE = {"fwd": 5, "bwd": 7}


@triton.jit
def _load(P, rows, cols, row_ok, D, stride):
    mask = row_ok[:, None] & (cols[None, :] < D)
    return tl.load(P + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32), mask


@triton.jit
def _fwd_kernel(
    X,
    W,
    B,
    Y,
    MEAN,
    RSTD,
    M,
    D,
    stride_x,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    Y_BF16: tl.constexpr,
    F64: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        # the mean from an fp64 sum, rounded once (as the TileLang CPU kernel); Ascend: a compensated fp32 sum
        acc, comp = wide_zeros(BLOCK_M, BLOCK_D, F64)
        for start in range(0, D, BLOCK_D):
            x, _ = _load(X, rows, start + tl.arange(0, BLOCK_D), row_ok, D, stride_x)
            acc, comp = wide_add(acc, comp, x, F64)
        hi, lo = wide_sum(acc, comp, F64)
        if F64:
            mean = (hi / D).to(tl.float32)
        else:
            mean = div_pair(hi, lo, D * 1.0)
        mean = mean + (mean - mean)  # nan where the row holds inf, as torch's mean (its Welford update takes inf - inf)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            x, mask = _load(X, rows, start + tl.arange(0, BLOCK_D), row_ok, D, stride_x)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / D + eps)
        tl.store(MEAN + rows, mean, mask=row_ok)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            x, mask = _load(X, rows, cols, row_ok, D, stride_x)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_W:
                y = y * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            if HAS_B:
                y = y + tl.load(B + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            store(Y + rows[:, None] * D + cols[None, :], y, mask, Y_BF16)


@triton.jit
def _bwd_kernel(
    X,
    DY,
    W,
    MEAN,
    RSTD,
    DX,
    DWP,
    DBP,
    M,
    D,
    stride_x,
    stride_dy,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_W: tl.constexpr,
    SUMS: tl.constexpr,
    DX_BF16: tl.constexpr,
    TREE: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        r = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        acc_g = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        acc_gx = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            x, mask = _load(X, rows, cols, row_ok, D, stride_x)
            g, _ = _load(DY, rows, cols, row_ok, D, stride_dy)
            if HAS_W:
                g = g * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            acc_g += g
            acc_gx += g * tl.where(mask, (x - mean[:, None]) * r[:, None], 0.0)
        c1 = tl.sum(acc_g, axis=1) / D  # divisions, as torch's means
        c2 = tl.sum(acc_gx, axis=1) / D
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            x, mask = _load(X, rows, cols, row_ok, D, stride_x)
            gy, _ = _load(DY, rows, cols, row_ok, D, stride_dy)
            xhat = (x - mean[:, None]) * r[:, None]
            g = gy
            if HAS_W:
                g = gy * tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)[None, :]
            if SUMS:
                tl.store(DWP + blk * D + cols, column_sum(tl.where(mask, gy * xhat, 0.0), TREE), mask=cols < D)
                tl.store(DBP + blk * D + cols, column_sum(tl.where(mask, gy, 0.0), TREE), mask=cols < D)
            store(
                DX + rows[:, None] * D + cols[None, :],
                ((g - xhat * c2[:, None]) - c1[:, None]) * r[:, None],
                mask,
                DX_BF16,
            )


def forward(x, weight, bias, eps: float, output_dtype: torch.dtype, out=None):
    """(y, mean, rstd) for a non-empty 2-D x with unit-stride rows (any row stride); weight, bias (D,) or None."""
    check_size("layer_norm", x)
    M, D = x.shape
    if out is None:
        out = (
            outputs.empty((M, D), output_dtype, x.device),
            outputs.empty((M,), torch.float32, x.device),
            outputs.empty((M,), torch.float32, x.device),
        )
    y, mean, rstd = out
    w = x if weight is None else weight.contiguous()  # unread placeholders when absent
    b = x if bias is None else bias.contiguous()
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["fwd"])
    with launch_context():
        _fwd_kernel[grid](
            x,
            w,
            b,
            storage(y),
            mean,
            rstd,
            M,
            D,
            row_stride(x),
            eps,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            HAS_B=bias is not None,
            Y_BF16=output_dtype == torch.bfloat16,
            F64=wide(x.device),
        )
    return y, mean, rstd


def backward(x, mean, rstd, dy, weight, bias, eps: float | None = None):
    """(dx, dweight fp32 or None, dbias fp32 or None): the sums are the programs' partials, in program order.
    ``eps`` is not used (the statistics are used as given)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    check_size("layer_norm", x)
    M, D = x.shape
    dx = outputs.empty((M, D), x.dtype, x.device)
    mean, rstd = mean.to(torch.float32).contiguous(), rstd.to(torch.float32).contiguous()
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["bwd"])
    sums = weight is not None or with_dbias
    dwp, dbp = (outputs.empty((n_blocks, D), torch.float32, x.device) for _ in range(2)) if sums else (rstd, rstd)
    w = x if weight is None else weight.contiguous()
    with launch_context():
        _bwd_kernel[grid](
            x,
            dy,
            w,
            mean,
            rstd,
            storage(dx),
            dwp,
            dbp,
            M,
            D,
            row_stride(x),
            row_stride(dy),
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            HAS_W=weight is not None,
            SUMS=sums,
            DX_BF16=x.dtype == torch.bfloat16,
            TREE=interpreting(),
        )
    return dx, (dwp.sum(0) if weight is not None else None), (dbp.sum(0) if with_dbias else None)
