"""l2norm forward and backward in Triton, ``BLOCK_M`` rows per program, rows walked in column chunks.

Per program: pass one accumulates per-element terms into a (BLOCK_M, BLOCK_D) fp32 block (one lane per
column, a blocked sum) and reduces it with ``tl.sum``; pass two reloads the chunks and writes. fp32 math,
rstd fp32; the backward recomputes y = x * rstd. bf16 outputs are rounded to nearest even with integer ops:
the interpreter's fp32 -> bf16 cast truncates, and the explicit rounding is the same on a GPU.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..registry import BackendUnavailableError
from . import INTERPRET_MAX_ELEMENTS, interpreting

MAX_BLOCK_D = 4096  # columns per chunk
INTERPRET_PROGRAMS = 64  # the interpreter costs ~3 ms per program instance: few, large programs


@triton.jit
def _store(ptr, value, mask, BF16: tl.constexpr):
    if BF16:  # round to nearest even by hand (ptr is the uint16 view); nan -> 0x7FC0 as torch does
        bits = value.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        rounded = tl.where(value != value, 0x7FC0, rounded)
        tl.store(ptr, rounded.to(tl.uint16), mask=mask)
    else:
        tl.store(ptr, value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fwd_kernel(X, Y, RSTD, M, D, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, Y_BF16: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) + eps)
    tl.store(RSTD + rows, rstd, mask=row_ok)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        _store(Y + rows[:, None] * D + cols[None, :], x * rstd[:, None], mask, Y_BF16)


@triton.jit
def _bwd_kernel(X, RSTD, DY, DX, M, D, stride_x, stride_dy, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, DX_BF16: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
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
        _store(DX + rows[:, None] * D + cols[None, :], (g - s[:, None] * y) * r[:, None], mask, DX_BF16)


def _blocks(M: int, D: int) -> tuple[int, int, tuple[int]]:
    block_d = min(triton.next_power_of_2(max(D, 1)), MAX_BLOCK_D)
    if interpreting():  # few programs: each costs milliseconds, whatever its size
        block_m = triton.next_power_of_2(max(1, math.ceil(M / INTERPRET_PROGRAMS)))
    else:
        block_m = max(1, min(16, 4096 // block_d))
    return block_m, block_d, (triton.cdiv(M, block_m),)


def _check(x: torch.Tensor) -> None:
    if interpreting() and x.numel() > INTERPRET_MAX_ELEMENTS:
        raise BackendUnavailableError(
            f"l2norm: backend 'triton' under the CPU interpreter takes at most {INTERPRET_MAX_ELEMENTS} elements "
            f"per call, got {x.numel()} (shape {tuple(x.shape)}); use a GPU or the tilelang backend"
        )


def _launch_context():
    """The interpreter computes with numpy, which warns on fp32 overflow (large inputs overflow x*x as torch's
    composite does, silently); on a GPU nothing to silence."""
    return np.errstate(all="ignore") if interpreting() else contextlib.nullcontext()


def _storage(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint16) if t.dtype == torch.bfloat16 else t


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None):
    """(y, rstd) for a non-empty 2-D x with unit-stride rows (any row stride)."""
    _check(x)
    M, D = x.shape
    y, rstd = out if out is not None else (torch.empty((M, D), dtype=output_dtype, device=x.device), x.new_empty((M,), dtype=torch.float32))
    block_m, block_d, grid = _blocks(M, D)
    with _launch_context():
        _fwd_kernel[grid](x, _storage(y), rstd, M, D, x.stride(0) if M > 1 else D, eps,
                          BLOCK_M=block_m, BLOCK_D=block_d, Y_BF16=output_dtype == torch.bfloat16)  # fmt: skip
    return y, rstd


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    _check(x)
    M, D = x.shape
    dx = torch.empty((M, D), dtype=x.dtype, device=x.device)
    rstd = rstd.to(torch.float32).contiguous()
    block_m, block_d, grid = _blocks(M, D)
    with _launch_context():
        _bwd_kernel[grid](x, rstd, dy, _storage(dx), M, D, x.stride(0) if M > 1 else D, dy.stride(0) if M > 1 else D,
                          BLOCK_M=block_m, BLOCK_D=block_d, DX_BF16=x.dtype == torch.bfloat16)  # fmt: skip
    return dx
