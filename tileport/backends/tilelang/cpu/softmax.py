"""softmax forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination,
serving every M and D.

Forward, per row, three passes over a row that stays in cache: m = the row's max (``row_max``); s = the sum
of exp(x - m) in fp64 (``row_sums64``: each term exact, one rounding at the end); y = exp(x - m) / s in fp32,
exp recomputed (``tp_exp`` in simd.h, packed, within 1 ulp measured; no buffer beyond the output, for rows of
any length); an fp32 y first holds the exps and is divided in place (one exp per element, the same bits). Backward, per
row: c = sum(dy * y) in fp64 (exact products), dx = y * (dy - c).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .rowwise import VEC, Io, M, row_map, row_max, row_sums64, splat
from .runtime import CACHE, check_shape, threads_for


def exp_shifted(v, m):
    """exp(v - m) of 16 lanes."""
    return T.call_extern(VEC, "tp_exp", v - splat(m))


def max_and_sum(s, io, x, row):
    """s[0] = the max of ``row``; returns sum(exp(x - max)) over it as an fp64 expression (one pass)."""
    row_max(s, 0, io, x, row)
    return row_sums64([lambda v: (exp_shifted(v, s[0]), splat(T.float32(1.0)))], [(io, x)], row)[0]


def build_forward(x: torch.dtype):
    X = Io(x)
    if x == torch.float32:
        return _forward_in_place(X)

    @T.prim_func
    def softmax_fwd(x: X.rows, y: X.rows):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)  # max, sum
            T.buffer_store(s, T.cast(max_and_sum(s, X, x, row), "float32"), [1])
            row_map(lambda v: exp_shifted(v, s[0]) / splat(s[1]), [(X, x)], [(X, y)], row)

    return softmax_fwd


def _forward_in_place(X: Io):
    """The fp32 forward with one exp per element: y holds exp(x - m), the fp32 value the sum adds, and is then
    divided by the sum in place (the same bits as recomputing the exp, which is half the arithmetic of a pass;
    a 16-bit y could not hold the fp32 exp)."""

    @T.prim_func
    def softmax_fwd(x: X.rows, y: X.rows):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)  # max, sum
            row_max(s, 0, X, x, row)
            row_map(lambda v: exp_shifted(v, s[0]), [(X, x)], [(X, y)], row)
            T.buffer_store(
                s, T.cast(row_sums64([lambda e: (e, splat(T.float32(1.0)))], [(X, y)], row)[0], "float32"), [1]
            )
            row_map(lambda e: e / splat(s[1]), [(X, y)], [(X, y)], row)

    return softmax_fwd


def build_backward(y: torch.dtype, dy: torch.dtype):
    Y, G = Io(y), Io(dy)

    @T.prim_func
    def softmax_bwd(y: Y.rows, dy: G.rows, dx: Y.rows):
        with T.Kernel(M) as row:
            c = T.alloc_local((1,), T.float32)
            T.buffer_store(c, T.cast(row_sums64([lambda yv, g: (yv, g)], [(Y, y), (G, dy)], row)[0], "float32"), [0])
            row_map(lambda yv, g: yv * (g - splat(c[0])), [(Y, y), (G, dy)], [(Y, dx)], row)

    return softmax_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (("softmax_fwd", lambda dt: build_forward(dt)),)  # row max, packed exp


def forward(x: torch.Tensor) -> torch.Tensor:
    """y (x's dtype, contiguous) for a non-empty 2-D ``x`` (M, D) with unit-stride rows."""
    M_, D_ = x.shape
    check_shape(M_, D_)
    y = outputs.empty((M_, D_), x.dtype, x.device)
    CACHE.kernel("softmax_fwd", build_forward, x.dtype)(threads_for(M_ * D_), x=x, y=y)
    return y


def backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx (y's dtype) for non-empty 2-D ``y`` and ``dy`` with unit-stride rows."""
    M_, D_ = y.shape
    check_shape(M_, D_)
    dx = outputs.empty((M_, D_), y.dtype, y.device)
    CACHE.kernel("softmax_bwd", build_backward, y.dtype, dy.dtype)(threads_for(M_ * D_), y=y, dy=dy, dx=dx)
    return dx
