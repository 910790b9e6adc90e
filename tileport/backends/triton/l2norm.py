"""l2norm forward and backward in Triton, ``BLOCK_M`` rows per program, rows walked in column chunks.

Per program: pass one accumulates per-element terms into a (BLOCK_M, BLOCK_D) fp32 block (one lane per
column, a blocked sum) and reduces it with ``tl.sum``; pass two reloads the chunks and writes. fp32 math,
rstd fp32; the backward recomputes y = x * rstd. bf16 outputs are rounded to nearest even with integer ops:
the interpreter's fp32 -> bf16 cast truncates, and the explicit rounding is the same on a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from .common import blocks, check_size, launch_context, row_stride, row_sum_squares, storage, store

# fp32 (BLOCK_M, BLOCK_D) tensors live at once in the forward and backward kernels: an Ascend block's size
# in the unified buffer (common.blocks), the one thing that differs from the GPU build
LIVE = {"fwd": 3, "bwd": 5}


@triton.jit
def _fwd_kernel(X, Y, RSTD, M, D, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, Y_BF16: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.num_programs(0)):  # persistent: see common.blocks
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        rstd = 1.0 / tl.sqrt(row_sum_squares(X, rows, row_ok, D, stride_x, BLOCK_M, BLOCK_D) + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            store(Y + rows[:, None] * D + cols[None, :], x * rstd[:, None], mask, Y_BF16)


@triton.jit
def _bwd_kernel(
    X, RSTD, DY, DX, M, D, stride_x, stride_dy, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, DX_BF16: tl.constexpr
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
            acc += (x * r[:, None]) * g
        s = tl.sum(acc, axis=1)
        for start in range(0, D, BLOCK_D):
            cols = start + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (cols[None, :] < D)
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            g = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            y = x * r[:, None]
            store(DX + rows[:, None] * D + cols[None, :], (g - s[:, None] * y) * r[:, None], mask, DX_BF16)


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None):
    """(y, rstd) for a non-empty 2-D x with unit-stride rows (any row stride)."""
    check_size("l2norm", x)
    M, D = x.shape
    y, rstd = (
        out
        if out is not None
        else (outputs.empty((M, D), output_dtype, x.device), outputs.empty((M,), torch.float32, x.device))
    )
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["fwd"])
    with launch_context():
        _fwd_kernel[grid](
            x,
            storage(y),
            rstd,
            M,
            D,
            row_stride(x),
            eps,
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            Y_BF16=output_dtype == torch.bfloat16,
        )
    return y, rstd


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """dx in x's dtype; ``eps`` is not used: the fp32 form (``tileport.ops.l2norm``'s contract)."""
    check_size("l2norm", x)
    M, D = x.shape
    dx = outputs.empty((M, D), x.dtype, x.device)
    rstd = rstd.to(torch.float32).contiguous()
    block_m, block_d, grid, n_blocks = blocks(M, D, x.device, LIVE["bwd"])
    with launch_context():
        _bwd_kernel[grid](
            x,
            rstd,
            dy,
            storage(dx),
            M,
            D,
            row_stride(x),
            row_stride(dy),
            BLOCK_M=block_m,
            BLOCK_D=block_d,
            DX_BF16=x.dtype == torch.bfloat16,
        )
    return dx
