"""l2norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination,
serving every M and D.

Forward, per row: the sum of squares accumulated in fp64 (``row_sum_squares64``: fp32 blocks of four squares,
relative error below 3 * 2^-24 for every D; a running fp32 sum lost long rows to torch's pairwise sum) and
rstd = rsqrt(sum + eps) rounded once, y = x * rstd; ``rsqrt_steps=k`` models an approximate hardware rsqrt refined
by k Newton-Raphson steps (the Ascend practice, for measuring it). Backward, given the forward's eps: ss, d
and sum(dy^2) in fp64, then per row (``norm_stats.by_form``) rows where x and dy are nearly parallel take the
exact eps form, dx = rstd * (eps * dy + (ss * dy - x * d)) / (ss + eps), x * d an exact two-term product, the
others rstd * (dy - x * k), k = d / (ss + eps) from the fp64 sums (the fp32 form leaves rounding noise where
sum(x^2) >> eps); without eps, the fp32 form.
Caller-provided outputs of STREAM_BYTES or more are written with streaming stores; fresh outputs keep plain
stores (their first touch faults the page into the cache). Measurements behind each choice: docs/kernels.md.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .norm_stats import STATS, by_form, choose_form
from .rowwise import Io, M, per_row, row_map, row_sum, row_sum_squares64, row_sums64, splat, square
from .runtime import CACHE, check_shape, threads_for

STREAM_BYTES = 32 << 20  # outputs at least this large are written with streaming stores (no read-for-ownership)


def build_forward(x: torch.dtype, y: torch.dtype, rsqrt_steps=None, streaming=False):
    X, Y = Io(x), Io(y, streaming)

    @T.prim_func
    def l2norm_fwd(x: X.rows, y: Y.rows, rstd: per_row(), eps: T.float32):
        with T.Kernel(M) as row:
            r = T.alloc_local((2,), T.float32)
            if rsqrt_steps is None:  # the fp64-accumulated sum of squares, plus eps, rsqrt, rounded once
                s = row_sum_squares64(X, x, row) + T.cast(eps, "float64")
                T.buffer_store(r, T.cast(T.float64(1.0) / T.sqrt(s), "float32"), [0])
            else:  # the hardware's fp32 sum; r[1] keeps s; the approximate model, then y * (1.5 - 0.5 s y^2) per step
                row_sum(r, 0, lambda v: v * v, [(X, x)], row)
                r[1] = r[0] + eps
                r[0] = T.call_extern("float32", "tp_rsqrt_approx", r[1])
                for _ in T.unroll(rsqrt_steps):
                    r[0] = r[0] * (T.float32(1.5) - T.float32(0.5) * r[1] * r[0] * r[0])
            rstd[row] = r[0]
            row_map(lambda v: v * splat(r[0]), [(X, x)], [(Y, y)], row)

    return l2norm_fwd


def build_backward(x: torch.dtype, dy: torch.dtype):
    X, G = Io(x), Io(dy)

    @T.prim_func
    def l2norm_bwd(x: X.rows, dy: G.rows, rstd: per_row(), dx: X.rows):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)  # s[0] = sum(dy * y), s[1] = rstd
            s[1] = rstd[row]
            # y = x * rstd rounded to fp32 before the product, exactly as the composite does: the order
            # matters where dx = (dy - s * y) * rstd cancels to near zero.
            row_sum(s, 0, lambda xv, g: (xv * splat(s[1])) * g, [(X, x), (G, dy)], row)
            row_map(
                lambda xv, g: (g - splat(s[0]) * (xv * splat(s[1]))) * splat(s[1]), [(X, x), (G, dy)], [(X, dx)], row
            )

    return l2norm_bwd


def build_backward_eps(x: torch.dtype, dy: torch.dtype):
    X, G = Io(x), Io(dy)

    @T.prim_func
    def l2norm_bwd_eps(x: X.rows, dy: G.rows, rstd: per_row(), dx: X.rows, eps: T.float32):
        with T.Kernel(M) as row:
            c = T.alloc_local((STATS,), "float64")  # as norm_stats.eps_stats', eps' = eps, the rstd given
            ss, d, gg = row_sums64(
                [lambda xv, g: square(xv), lambda xv, g: (xv, g), lambda xv, g: square(g)], [(X, x), (G, dy)], row
            )
            c[0] = ss
            c[1] = d
            c[2] = T.cast(eps, "float64")
            c[4] = T.cast(rstd[row], "float64")
            c[3] = c[4] / (c[0] + c[2])
            choose_form(c, gg)
            by_form(c, lambda resid: row_map(lambda xv, g: resid(g, xv, X), [(X, x), (G, dy)], [(X, dx)], row))

    return l2norm_bwd_eps


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (
    ("l2norm_fwd", lambda dt: build_forward(dt, dt)),
    ("l2norm_fwd", lambda dt: build_forward(dt, dt, streaming=True)),
    ("l2norm_bwd", lambda dt: build_backward(dt, dt)),
    ("l2norm_bwd_eps", lambda dt: build_backward_eps(dt, dt)),  # fp64 sums and fp64 per-element math
)


def forward(
    x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, rsqrt_steps=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) for a non-empty 2-D ``x`` of shape (M, D) whose rows are unit-stride (any row stride).

    ``out``: contiguous (y, rstd) to write into. ``rsqrt_steps``: None for the exact rsqrt, k >= 0 for the
    approximate model plus k Newton-Raphson steps.
    """
    M, D = x.shape
    check_shape(M, D)
    fresh = out is None
    y, rstd = (
        (outputs.empty((M, D), output_dtype, x.device), outputs.empty((M,), torch.float32, x.device)) if fresh else out
    )
    streaming = not fresh and y.numel() * y.element_size() >= STREAM_BYTES  # fresh outputs: plain stores
    CACHE.kernel("l2norm_fwd", build_forward, x.dtype, y.dtype, rsqrt_steps, streaming)(
        threads_for(M * D), x=x, y=y, rstd=rstd, eps=eps
    )
    return y, rstd


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """dx (x's dtype) for non-empty 2-D ``x`` and ``dy`` (M, D) with unit-stride rows and ``rstd`` (M,).

    With the forward's ``eps``: dx = rstd * (eps * dy + sum(x^2) * dy - x * sum(x * dy)) / (sum(x^2) + eps) in
    fp64 (see the module docstring); without it, the fp32 form of the contract.
    """
    M, D = x.shape
    check_shape(M, D)
    dx = outputs.empty((M, D), x.dtype, x.device)
    args = dict(x=x, dy=dy, rstd=rstd.to(torch.float32).contiguous(), dx=dx)
    if eps is None:
        CACHE.kernel("l2norm_bwd", build_backward, x.dtype, dy.dtype)(threads_for(M * D), **args)
    else:
        CACHE.kernel("l2norm_bwd_eps", build_backward_eps, x.dtype, dy.dtype)(threads_for(M * D), eps=eps, **args)
    return dx
