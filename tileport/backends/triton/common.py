"""What every Triton kernel module shares: program blocking (few, large programs under the interpreter), the
interpreter's size limit, rounding stores to bf16, and launching quietly under numpy."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..registry import BackendUnavailableError
from . import INTERPRET_MAX_ELEMENTS, interpreting
from .ascend import chip_of

MAX_BLOCK_D = 4096  # columns per chunk
INTERPRET_PROGRAMS = 64  # the interpreter's cost is per program instance: few, large programs


@triton.jit
def round_bf16_bits(value):
    """fp32 -> bf16 bits, rounded to nearest even by hand (the interpreter's cast truncates); nan -> 0x7FC0."""
    bits = value.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return tl.where(value != value, 0x7FC0, rounded)


@triton.jit
def store(ptr, value, mask, BF16: tl.constexpr):
    if BF16:  # ptr is the uint16 view of a bf16 tensor
        tl.store(ptr, round_bf16_bits(value).to(tl.uint16), mask=mask)
    else:
        tl.store(ptr, value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def round_to(value, KIND: tl.constexpr):
    """fp32 lanes rounded to a storage dtype and widened back: KIND 0 fp32 (as is), 1 fp16, 2 bf16."""
    if KIND == 1:
        return value.to(tl.float16).to(tl.float32)
    elif KIND == 2:
        return (round_bf16_bits(value) << 16).to(tl.float32, bitcast=True)
    else:
        return value


@triton.jit
def row_sum_squares(X, rows, row_ok, D, stride_x, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """sum(x^2) of each of the program's rows in fp32: a (BLOCK_M, BLOCK_D) block of lanes, one per column
    (a blocked sum), reduced once at the end."""
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(0, D, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = row_ok[:, None] & (cols[None, :] < D)
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += x * x
    return tl.sum(acc, axis=1)


@triton.jit
def column_sum(v, TREE: tl.constexpr):
    """The sum of a (BLOCK_M, BLOCK_D) block's rows. A GPU reduces them as a tree; the interpreter's ``tl.sum``
    over axis 0 is numpy's add-reduce, a sequential sum of the BLOCK_M rows (32 and more per program there), whose
    error grows with BLOCK_M: a weight gradient's fp32 partial lost to torch's cascade sum at L1 (MERE ratio 1.1).
    With TREE (set when interpreting) the rows are added pairwise, halving the block to one row, as a GPU does."""
    if TREE:  # a constexpr branch: a GPU build never sees this plain-Python loop
        while v.shape[0] > 1:  # BLOCK_M is a power of 2
            v = tl.sum(tl.reshape(v, (v.shape[0] // 2, 2, v.shape[1])), axis=1)
    return tl.sum(v, axis=0)


@triton.jit
def neumaier(acc, comp, v):
    """One step of a compensated fp32 sum (Neumaier): ``acc + comp`` carries the sum nearly as an fp64 one would,
    for a target without fp64 (Ascend's vector units: triton-ascend refuses fp64 math functions)."""
    t = acc + v
    comp += tl.where(tl.abs(acc) >= tl.abs(v), (acc - t) + v, (v - t) + acc)
    return t, comp


@triton.jit
def wide_zeros(BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, F64: tl.constexpr):
    """A row block's running sum, (lanes, compensation): fp64 lanes where the target has fp64 (the compensation
    unused), else fp32 lanes and their Neumaier compensation."""
    if F64:
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float64)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    return acc, tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)


@triton.jit
def wide_add(acc, comp, v, F64: tl.constexpr):
    """``wide_zeros``'s sum plus v (fp32 lanes)."""
    if F64:
        acc += v.to(tl.float64)
    else:
        acc, comp = neumaier(acc, comp, v)
    return acc, comp


@triton.jit
def wide_add_product(acc, comp, a, b, F64: tl.constexpr):
    """``wide_zeros``'s sum plus a * b: the exact product in fp64, or the fp32 product compensated."""
    if F64:
        acc += a.to(tl.float64) * b.to(tl.float64)
    else:
        acc, comp = neumaier(acc, comp, a * b)
    return acc, comp


@triton.jit
def wide_sum(acc, comp, F64: tl.constexpr):
    """The rows' sums of ``wide_zeros``'s block as (hi, lo): fp64 (lo 0), or the two-summed fp32 pair."""
    if F64:
        hi = tl.sum(acc, axis=1)
        lo = tl.zeros_like(hi)
    else:
        hi, lo = sum_pair(acc, comp)
    return hi, lo


@triton.jit
def _two_sum(a_hi, a_lo, b_hi, b_lo):
    s = a_hi + b_hi
    bb = s - a_hi
    return s, (a_lo + b_lo) + ((a_hi - (s - bb)) + (b_hi - bb))


@triton.jit
def sum_pair(acc, comp):
    """(hi, lo) of each row of a compensated fp32 block (``neumaier``'s acc and comp), the lanes reduced with
    two-sums: the row sum to about twice fp32's precision, where the target has no fp64."""
    return tl.reduce((acc, comp), 1, _two_sum)


@triton.jit
def div_pair(hi, lo, d):
    """(hi + lo) / d in fp32, rounded about once: the quotient corrected by its remainder (an fma)."""
    q = hi / d
    return q + (tl.fma(-q, d, hi) + lo) / d


@triton.jit
def rsqrt_refined(v):
    """1 / sqrt(v) in fp32, one Newton step on the fp32 estimate with its residual from fmas: about correctly
    rounded, as the fp64 form's single rounding (where the target has no fp64)."""
    r = 1.0 / tl.sqrt(v)
    t = v * r
    e = tl.fma(-t, r, 1.0) - tl.fma(v, r, -t) * r
    return r + 0.5 * r * e


def wide(device: torch.device | None) -> bool:
    """Whether kernels for this launch may compute in fp64 (their ``F64`` constexpr): GPUs and the interpreter
    do; Ascend chips do not, and take the compensated fp32 forms instead (the one difference in the math)."""
    return chip_of(device) is None


def round_kind(dtype: torch.dtype) -> int:
    return {torch.float16: 1, torch.bfloat16: 2}.get(dtype, 0)


def _floor_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def blocks(M: int, D: int, device: torch.device | None = None, live: int = 4) -> tuple[int, int, tuple[int], int]:
    """(rows per block, columns per chunk, grid, row blocks). Every kernel walks row blocks
    ``blk = pid, pid + programs, ...``: on a GPU (and the interpreter) the grid is one program per block; on an
    Ascend chip (an NPU tensor, or a lowering for one: ``ascend.chip_of``) it is the vector-core count, each
    program looping, and a block holds at most what half the unified buffer takes (the other half double-buffers
    the loads) for ``live`` fp32 (BLOCK_M, BLOCK_D) tensors at once, the kernel's own count."""
    chip = chip_of(device)
    if chip is not None:
        cap = _floor_pow2(chip.ub_bytes // 2 // (4 * live))  # fp32 elements of one block
        block_d = min(triton.next_power_of_2(max(D, 1)), cap)
        block_m = max(1, min(cap // block_d, triton.next_power_of_2(max(M, 1)), 64))
        n = triton.cdiv(M, block_m)
        return block_m, block_d, (min(n, chip.vector_cores),), n
    block_d = min(triton.next_power_of_2(max(D, 1)), MAX_BLOCK_D)
    if interpreting():  # few programs: each costs milliseconds, whatever its size
        block_m = triton.next_power_of_2(max(1, math.ceil(M / INTERPRET_PROGRAMS)))
    else:
        block_m = max(1, min(16, 4096 // block_d))
    n = triton.cdiv(M, block_m)
    return block_m, block_d, (n,), n


def check_size(op: str, x: torch.Tensor) -> None:
    if interpreting() and x.numel() > INTERPRET_MAX_ELEMENTS:
        raise BackendUnavailableError(
            f"{op}: backend 'triton' under the CPU interpreter takes at most {INTERPRET_MAX_ELEMENTS} elements "
            f"per call, got {x.numel()} (shape {tuple(x.shape)}); use a GPU or the tilelang backend"
        )


def launch_context():
    """The interpreter computes with numpy, which warns on fp32 overflow (large inputs overflow x*x as torch's
    composite does, silently); on a GPU nothing to silence."""
    return np.errstate(all="ignore") if interpreting() else contextlib.nullcontext()


def storage(t: torch.Tensor) -> torch.Tensor:
    """bf16 outputs are written through their uint16 view (``store`` rounds by hand)."""
    return t.view(torch.uint16) if t.dtype == torch.bfloat16 else t


def row_stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]
