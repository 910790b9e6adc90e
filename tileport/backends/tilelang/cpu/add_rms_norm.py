"""add_rms_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtypes and
weighted, serving every M and D; the rms_norm math is rms_norm's (``cpu/rms_norm.py``).

Forward, per row: residual_out = x + residual (fp32 add, rounded once on store; x and residual are read
once), then rms_norm's rstd over residual_out as stored (fp64, rounded once) and y = residual_out * rstd *
(w + offset). Backward, per row: rms_norm's cancellation-free dx (its per-row form) over residual_out (with the fp64
rstd
the saved fp32 one stands for, ``norm_stats.eps_stats``: the fp32 rstd scales all of dx by its rounding, which
showed where dx and dresidual_out cancel: MERE 9.6e-7 against the benchmark's 1.7e-7 at 48x4097 fp32),
rounded to residual_out's dtype, plus dresidual_out, rounded again: the order of torch's autograd for the
unfused add and norm (see the contract in ``tileport/ops/add_rms_norm``). dweight as rms_norm's (the term
rounded once with that rstd, fixed-block fp32 partials: the same bits for any thread count). Without a direct
gradient the backward is rms_norm's own kernel.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from . import norm_stats, rms_norm
from .rowwise import F32, Io, M, partial, per_row, rounded, row_map, splat
from .runtime import CACHE, check_shape, threads_for


def build_forward(x: torch.dtype, r: torch.dtype, s: torch.dtype, w, y: torch.dtype):
    """The forward for x, residual, residual_out, weight (None: no scale) and y dtypes."""
    X, R, S, Y = Io(x), Io(r), Io(s), Io(y)
    if w is None:

        @T.prim_func
        def add_rms_norm_fwd(
            x: X.rows, residual: R.rows, residual_out: S.rows, y: Y.rows, rstd: per_row(), eps: T.float32
        ):
            with T.Kernel(M) as row:
                c = T.alloc_local((1,), T.float32)
                row_map(lambda xv, rv: xv + rv, [(X, x), (R, residual)], [(S, residual_out)], row)
                norm_stats.inv_rms(c, eps, S, residual_out, row)
                rstd[row] = c[0]
                row_map(lambda v: v * splat(c[0]), [(S, residual_out)], [(Y, y)], row)

        return add_rms_norm_fwd

    W = Io(w)

    @T.prim_func
    def add_rms_norm_fwd(
        x: X.rows,
        residual: R.rows,
        weight: W.vector,
        residual_out: S.rows,
        y: Y.rows,
        rstd: per_row(),
        eps: T.float32,
        offset: T.float32,
    ):
        with T.Kernel(M) as row:
            c = T.alloc_local((1,), T.float32)
            row_map(lambda xv, rv: xv + rv, [(X, x), (R, residual)], [(S, residual_out)], row)
            norm_stats.inv_rms(c, eps, S, residual_out, row)
            rstd[row] = c[0]
            row_map(
                lambda v, wv: (v * splat(c[0])) * (wv + splat(offset)), [(S, residual_out), (W, weight)], [(Y, y)], row
            )

    return add_rms_norm_fwd


def build_backward(s: torch.dtype, dy: torch.dtype, dres: torch.dtype, w):
    """dsum = rms_norm's fp64 dx over residual_out + dresidual_out (and dweight's fp32 sum over rows), for
    residual_out, dy, dresidual_out and weight dtypes."""
    S, G, H = Io(s), Io(dy), Io(dres)
    if w is None:

        @T.prim_func
        def add_rms_norm_bwd(
            residual_out: S.rows, dy: G.rows, dres: H.rows, rstd: per_row(), dsum: S.rows, eps: T.float32
        ):
            with T.Kernel(M) as row:
                c = T.alloc_local((norm_stats.STATS,), "float64")
                norm_stats.eps_stats(c, eps, rstd[row], [(S, residual_out), (G, dy)], row, lambda g: g)
                norm_stats.by_form(
                    c,
                    lambda resid: row_map(
                        lambda sv, g, h: rounded(S, resid(g, sv, S)) + h,
                        [(S, residual_out), (G, dy), (H, dres)],
                        [(S, dsum)],
                        row,
                    ),
                )

        return add_rms_norm_bwd

    W = Io(w)

    @T.prim_func
    def add_rms_norm_bwd(
        residual_out: S.rows,
        dy: G.rows,
        dres: H.rows,
        weight: W.vector,
        rstd: per_row(),
        dsum: S.rows,
        dweight: partial(),
        offset: T.float32,
        eps: T.float32,
    ):
        with T.Kernel(M) as row:
            c = T.alloc_local((norm_stats.STATS,), "float64")
            r = T.alloc_local((2,), T.float32)  # the fp64 rstd as an fp32 pair
            norm_stats.eps_stats(
                c,
                eps,
                rstd[row],
                [(S, residual_out), (G, dy), (W, weight)],
                row,
                lambda g, wv: g * (wv + splat(offset)),
            )
            norm_stats.rstd_pair(r, c)
            norm_stats.by_form(
                c,
                lambda resid: row_map(
                    lambda sv, g, h, wv: [
                        rounded(S, resid(g * (wv + splat(offset)), sv, S)) + h,
                        norm_stats.dweight_term(g, sv, r[0], r[1]),
                    ],
                    [(S, residual_out), (G, dy), (H, dres), (W, weight)],
                    [(S, dsum), (F32, dweight)],
                    row,
                ),
            )

    return add_rms_norm_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (
    ("add_rms_norm_fwd", lambda dt: build_forward(dt, dt, dt, dt, dt)),  # the add, then rms_norm's passes
    ("add_rms_norm_bwd", lambda dt: build_backward(dt, dt, dt, dt)),  # fp64 dx plus the direct gradient
)


def forward(x, residual, weight, eps: float, offset: float, residual_dtype: torch.dtype, output_dtype: torch.dtype):
    """(y, residual_out, rstd) for non-empty 2-D ``x`` and ``residual`` (M, D) with unit-stride rows."""
    M_, D = x.shape
    check_shape(M_, D)
    y, s = outputs.empty((M_, D), output_dtype, x.device), outputs.empty((M_, D), residual_dtype, x.device)
    rstd = outputs.empty((M_,), torch.float32, x.device)
    wdt = None if weight is None else weight.dtype
    kernel = CACHE.kernel("add_rms_norm_fwd", build_forward, x.dtype, residual.dtype, residual_dtype, wdt, output_dtype)
    if weight is None:
        kernel(threads_for(M_ * D), x=x, residual=residual, residual_out=s, y=y, rstd=rstd, eps=eps)
    else:
        kernel(
            threads_for(M_ * D),
            x=x,
            residual=residual,
            residual_out=s,
            y=y,
            rstd=rstd,
            eps=eps,
            weight=weight.contiguous(),
            offset=offset,
        )
    return y, s, rstd


def backward(residual_out, rstd, dy, dresidual_out, weight, offset: float, eps: float):
    """(dsum in residual_out's dtype, dweight fp32 (D,) or None) for non-empty 2-D rows."""
    if dresidual_out is None:
        return rms_norm.backward(residual_out, rstd, dy, weight, offset, "fp32", eps)
    M_, D = residual_out.shape
    check_shape(M_, D)
    dsum = outputs.empty((M_, D), residual_out.dtype, residual_out.device)
    args = dict(
        residual_out=residual_out,
        dy=dy,
        dres=dresidual_out,
        rstd=rstd.to(torch.float32).contiguous(),
        dsum=dsum,
        eps=eps,
    )
    wdt = None if weight is None else weight.dtype
    kernel = CACHE.kernel("add_rms_norm_bwd", build_backward, residual_out.dtype, dy.dtype, dresidual_out.dtype, wdt)
    if weight is None:
        kernel(threads_for(M_ * D), **args)
        return dsum, None
    dweight = outputs.empty((D,), torch.float32, residual_out.device)
    kernel(threads_for(M_ * D), weight=weight.contiguous(), dweight=dweight, offset=offset, **args)
    return dsum, dweight
