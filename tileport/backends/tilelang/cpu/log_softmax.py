"""log_softmax forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype
combination, serving every M and D.

Forward, per row: m and s = sum(exp(x - m)) as softmax's (``softmax.max_and_sum``: fp64 sum), L = log(s) in
fp64 rounded once, y = (x - m) - L in fp32. Backward, per row: c = sum(dy) in fp64, dx = dy - exp(y) * c.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .rowwise import VEC, Io, M, row_map, row_sums64, splat
from .runtime import CACHE, check_shape, threads_for
from .softmax import max_and_sum


def build_forward(x: torch.dtype):
    X = Io(x)

    @T.prim_func
    def log_softmax_fwd(x: X.rows, y: X.rows):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)  # max, log(sum)
            T.buffer_store(s, T.cast(T.log(max_and_sum(s, X, x, row)), "float32"), [1])
            row_map(lambda v: (v - splat(s[0])) - splat(s[1]), [(X, x)], [(X, y)], row)

    return log_softmax_fwd


def build_backward(y: torch.dtype, dy: torch.dtype):
    Y, G = Io(y), Io(dy)

    @T.prim_func
    def log_softmax_bwd(y: Y.rows, dy: G.rows, dx: Y.rows):
        with T.Kernel(M) as row:
            c = T.alloc_local((1,), T.float32)
            T.buffer_store(
                c,
                T.cast(row_sums64([lambda yv, g: (g, splat(T.float32(1.0)))], [(Y, y), (G, dy)], row)[0], "float32"),
                [0],
            )
            row_map(lambda yv, g: g - T.call_extern(VEC, "tp_exp", yv) * splat(c[0]), [(Y, y), (G, dy)], [(Y, dx)], row)

    return log_softmax_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (("log_softmax_bwd", lambda dt: build_backward(dt, dt)),)


def forward(x: torch.Tensor) -> torch.Tensor:
    """y (x's dtype, contiguous) for a non-empty 2-D ``x`` (M, D) with unit-stride rows."""
    M_, D_ = x.shape
    check_shape(M_, D_)
    y = outputs.empty((M_, D_), x.dtype, x.device)
    CACHE.kernel("log_softmax_fwd", build_forward, x.dtype)(threads_for(M_ * D_), x=x, y=y)
    return y


def backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx (y's dtype) for non-empty 2-D ``y`` and ``dy`` with unit-stride rows."""
    M_, D_ = y.shape
    check_shape(M_, D_)
    dx = outputs.empty((M_, D_), y.dtype, y.device)
    CACHE.kernel("log_softmax_bwd", build_backward, y.dtype, dy.dtype)(threads_for(M_ * D_), y=y, dy=dy, dx=dx)
    return dx
