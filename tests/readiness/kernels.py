"""Small Triton kernels, each tripping one known cause of not lowering (or not fitting) on Ascend A2/A3, and one
that lowers clean: the fixtures of tests/readiness (``tileport lower --impl tests/readiness/kernels.py:NAME``).
Each launcher is what a user's package would expose: it takes tensors, launches, returns."""

import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt  # a dispatch stub (as Liger-Kernel imports it without an NPU)

CORES = 40  # Ascend A2's vector cores: the clean launcher's grid


def _elementwise(kernel, grid, x, block):
    """y = kernel(x) over x's elements: the launcher every fixture below but the row one is."""
    y = torch.empty_like(x)
    kernel[grid](x, y, x.numel(), BLOCK=block)
    return y


@triton.jit
def _scale(X, Y, N, BLOCK: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):  # a persistent loop over blocks
        o = blk * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + o, tl.load(X + o, mask=o < N) * 2.0, mask=o < N)


def clean(x):
    return _elementwise(_scale, (CORES,), x, 1024)


@triton.jit
def _exp64(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + o, mask=o < N).to(tl.float64)
    tl.store(Y + o, tl.exp(x).to(tl.float32), mask=o < N)


def fp64(x):
    return _elementwise(_exp64, (triton.cdiv(x.numel(), 1024),), x, 1024)


@triton.jit
def _erf_cuda(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + o, tl.extra.cuda.libdevice.erf(tl.load(X + o, mask=o < N)), mask=o < N)


def cuda_libdevice(x):
    return _elementwise(_erf_cuda, (triton.cdiv(x.numel(), 1024),), x, 1024)


@triton.jit
def _asm(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + o, mask=o < N)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(Y + o, y, mask=o < N)


def inline_asm(x):
    return _elementwise(_asm, (triton.cdiv(x.numel(), 1024),), x, 1024)


@triton.jit
def _one_block(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + o, tl.load(X + o, mask=o < N) + 1.0, mask=o < N)


def big_grid(x):
    """One program per 16 elements: past 65535 programs for a tensor of 2^21 elements."""
    return _elementwise(_one_block, (triton.cdiv(x.numel(), 16),), x, 16)


def whole_row(x):
    """A 65536-wide fp32 row in one tile (256 KB): past the unified buffer."""
    return _elementwise(_one_block, (CORES,), x, 65536)


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (4, 8, 16)], key=["N"])
@triton.jit
def _warps(X, Y, N, BLOCK: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):
        o = blk * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + o, tl.load(X + o, mask=o < N) * 3.0, mask=o < N)


def warp_tuned(x):
    return _elementwise(_warps, (CORES,), x, 1024)


@triton.jit
def _rows(X, Y, D, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    o = tl.arange(0, BLOCK)
    tl.store(Y + r * D + o, tl.load(X + r * D + o, mask=o < D), mask=o < D)


def unaligned_rows(x):
    """Rows of x as they come: fp16 rows of 4099 elements are 8198 bytes, no multiple of 32."""
    y = torch.empty_like(x)
    _rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


@triton.jit
def _rsqrt_of(x):
    return rsqrt(x)  # the dispatch stub, one JIT call below the kernel


@triton.jit
def _stub(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r = _rsqrt_of(tl.load(X + o, mask=o < N) + 1.0)
    tl.store(Y + o, r, mask=o < N)


def libdevice_stub(x):
    return _elementwise(_stub, (triton.cdiv(x.numel(), 1024),), x, 1024)


@triton.jit
def _commented(X, Y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # a float64 (fp64) sum would be exact here: the comment the compiler's message quotes, no fp64 math
    x = tl.load(X + o, mask=o < N)
    tl.store(Y + o, tl.reshape(x, (BLOCK + 1,)), mask=o < N)


def commented_unknown(x):
    return _elementwise(_commented, (triton.cdiv(x.numel(), 1024),), x, 1024)
