"""softmax (and, with LOG, log_softmax) forward and backward in Triton, ``BLOCK_M`` rows per program, rows
walked in column chunks: no buffer beyond the output for rows of any length.

Forward per program: pass one takes the rows' max, pass two sums exp(x - max) in fp64, pass three writes
exp(x - max) * (1 / sum) with the reciprocal and the product in fp64, rounded once (LOG: (x - max) - log(sum)).
The fp64 sum and scale: with an fp32 sum, the sum's rounding is one common relative error on the whole row,
which y * (dy - sum(dy * y)) turns into dx error: Triton's fp32 dx at 64x15x150 had a median RMSE ratio of
1.10 against torch over 200 seeds and failed L0; numpy's emulation of this form gives 0.88 (Intel Xeon).
Backward: pass one sums dy * y (LOG: dy) in fp64, rounded once to fp32 (an fp32 sum failed log_softmax's fp32
dx at L1, [37] of U[-0.001, 0.001]: median RMSE ratio 1.02 over 200 seeds); pass two writes y * (dy - sum)
(LOG: dy - exp(y) * sum).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import blocks, check_size, launch_context, row_stride, storage, store
from .. import outputs


@triton.jit
def _fwd_kernel(X, Y, M, D, stride_x, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, LOG: tl.constexpr, Y_BF16: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    mx = tl.full((BLOCK_M, BLOCK_D), float("-inf"), dtype=tl.float32)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        mx = tl.maximum(mx, x)
    m = tl.max(mx, axis=1)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float64)  # fp64: an fp32 sum's rounding scales the whole row
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += tl.where(mask, tl.exp(x - m[:, None]), 0.0).to(tl.float64)
    s = tl.sum(acc, axis=1)
    lse = tl.log(s).to(tl.float32)
    inv = 1.0 / s  # fp64, once per row
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = (x - m[:, None]) - lse[:, None]
        else:
            y = (tl.exp(x - m[:, None]).to(tl.float64) * inv[:, None]).to(tl.float32)
        store(Y + rows[:, None] * D + cols[None, :], y, mask, Y_BF16)


@triton.jit
def _bwd_kernel(Y, DY, DX, M, D, stride_y, stride_dy, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, LOG: tl.constexpr,
                DX_BF16: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float64)  # fp64 (exact fp32 products), as the CPU kernels'
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        g = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float64)
        if LOG:
            acc += g
        else:
            acc += g * tl.load(Y + rows[:, None] * stride_y + cols[None, :], mask=mask, other=0.0).to(tl.float64)
    c = tl.sum(acc, axis=1).to(tl.float32)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        y = tl.load(Y + rows[:, None] * stride_y + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if LOG:
            dx = g - tl.exp(y) * c[:, None]
        else:
            dx = y * (g - c[:, None])
        store(DX + rows[:, None] * D + cols[None, :], dx, mask, DX_BF16)


def run_forward(op: str, x: torch.Tensor, log: bool) -> torch.Tensor:
    check_size(op, x)
    M, D = x.shape
    y = outputs.empty((M, D), x.dtype, x.device)
    block_m, block_d, grid = blocks(M, D)
    with launch_context():
        _fwd_kernel[grid](x, storage(y), M, D, row_stride(x), BLOCK_M=block_m, BLOCK_D=block_d, LOG=log, Y_BF16=x.dtype == torch.bfloat16)
    return y


def run_backward(op: str, y: torch.Tensor, dy: torch.Tensor, log: bool) -> torch.Tensor:
    check_size(op, y)
    M, D = y.shape
    dx = outputs.empty((M, D), y.dtype, y.device)
    block_m, block_d, grid = blocks(M, D)
    with launch_context():
        _bwd_kernel[grid](y, dy, storage(dx), M, D, row_stride(y), row_stride(dy), BLOCK_M=block_m, BLOCK_D=block_d,
                          LOG=log, DX_BF16=y.dtype == torch.bfloat16)  # fmt: skip
    return dx


def forward(x: torch.Tensor) -> torch.Tensor:
    """y for a non-empty 2-D x with unit-stride rows (any row stride)."""
    return run_forward("softmax", x, False)


def backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return run_backward("softmax", y, dy, False)
