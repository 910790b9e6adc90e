"""layer_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination
and form (affine or plain), serving every M and D.

Forward, per row: the mean as an fp64 sum rounded once, the variance by the corrected two-pass form (never
E[x^2] - mean^2), rstd in fp64 rounded once, y = xhat * w + b with xhat about the fp64 mean rounded once
(``centered``: TwoSum and one FMA). Backward, given mean and rstd: xhat as in the forward, the three row sums
in one fp64 pass, dx = ((g - xhat * sum(g * xhat) / D) - sum(g) / D) * rstd in that order (whichever product
g++ fuses, g is rounded as the sums saw it); dweight and dbias into compensated per-block fp32 partials summed
by the driver (the same bits for any thread count). A weight or a bias alone is paired with ones or zeros.
Why each rounding is where it is, and what it cost: docs/kernels.md.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .rowwise import D, F32, M, VEC, Io, partial, per_row, row_map, row_sums64, splat
from .runtime import CACHE, check_shape, threads_for
from ..targets import vectors_or_defaults
from ... import outputs


def _stats(s, eps, x_io, x, row):
    """s[0] = the mean of ``row``, s[1] = its rstd (both fp32, each computed in fp64 and rounded once), and
    s[2] = the fp64 mean's remainder (mean - s[0], as fp32): the pair the forward centres x on. A row holding
    inf has a nan mean, as torch's (its Welford update takes inf - inf)."""
    n = T.cast(D, "float64")
    total = row_sums64([lambda v: (v, splat(T.float32(1.0)))], [(x_io, x)], row)[0]
    mean = T.call_extern("float64", "tp_nan_if_inf", total) / n
    T.buffer_store(s, T.cast(mean, "float32"), [0])
    ss, shift = row_sums64(
        [lambda v: (v - splat(s[0]), v - splat(s[0])), lambda v: (v - splat(s[0]), splat(T.float32(1.0)))], [(x_io, x)], row
    )
    var = ss / n - (shift / n) * (shift / n)
    T.buffer_store(s, T.cast(T.float64(1.0) / T.sqrt(var + T.cast(eps, "float64")), "float32"), [1])
    T.buffer_store(s, T.cast(mean - T.cast(s[0], "float64"), "float32"), [2])


def centered(v, mean, rstd, mean_lo=0.0):
    """(x - (mean + mean_lo)) * rstd of 16 lanes, rounded once (``tp_centered`` in simd.h)."""
    lo = T.float32(mean_lo) if isinstance(mean_lo, float) else mean_lo
    return T.call_extern(VEC, "tp_centered", v, splat(mean), splat(lo), splat(rstd))


def _normalized(v, s):
    """(x - mean) * rstd of 16 lanes from the row's statistics (``_stats``): the fp64 mean as the pair s[0] + s[2]."""
    return centered(v, s[0], s[1], s[2])


def build_forward(x: torch.dtype, p, y: torch.dtype):
    """The forward for x, parameter (weight and bias; None: the plain form) and y dtypes."""
    X, Y = Io(x), Io(y)
    if p is None:

        @T.prim_func
        def layer_norm_fwd(x: X.rows, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
            with T.Kernel(M) as row:
                s = T.alloc_local((3,), T.float32)
                _stats(s, eps, X, x, row)
                mean[row] = s[0]
                rstd[row] = s[1]
                row_map(lambda v: _normalized(v, s), [(X, x)], [(Y, y)], row)

        return layer_norm_fwd

    P = Io(p)

    @T.prim_func
    def layer_norm_fwd(x: X.rows, weight: P.vector, bias: P.vector, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
        with T.Kernel(M) as row:
            s = T.alloc_local((3,), T.float32)
            _stats(s, eps, X, x, row)
            mean[row] = s[0]
            rstd[row] = s[1]
            row_map(lambda v, wv, bv: _normalized(v, s) * wv + bv, [(X, x), (P, weight), (P, bias)], [(Y, y)], row)

    return layer_norm_fwd


def _grad_stats(s, rows, row, g_of):
    """s[2] = sum(g) / D, s[3] = sum(g * xhat) / D and s[4] = the given mean's low part of ``row`` (s[0] mean,
    s[1] rstd), one fp64 pass. Where the given mean is the row's fp64 mean rounded to fp32 (what the forward
    saves), xhat is taken about that fp64 mean, s[0] + s[4]: the fp32 mean's rounding, ulp(mean) / 2 at most,
    is an error of the centred value that no later step removes (at mean 100, 4e-6 on every x - mean; the
    first-seed dweight failures of layer_norm's L0 were these). Any other given mean is used as given."""
    n = T.cast(D, "float64")
    xhat = lambda xv: centered(xv, s[0], s[1])  # noqa: E731
    one = splat(T.float32(1.0))
    sg, sgx, sx = row_sums64(
        [lambda xv, *rest: (g_of(*rest), one), lambda xv, *rest: (g_of(*rest), xhat(xv)), lambda xv, *rest: (xv, one)], rows, row
    )
    mean = sx / n
    lo = T.if_then_else(T.cast(mean, "float32") == s[0], mean - T.cast(s[0], "float64"), T.float64(0.0))
    T.buffer_store(s, T.cast(lo, "float32"), [4])
    T.buffer_store(s, T.cast(sg / n, "float32"), [2])
    # xhat about s[0] + s[4] is xhat about s[0] less s[4] * rstd: sum(g * xhat) follows exactly, in fp64
    T.buffer_store(s, T.cast((sgx - T.cast(s[4], "float64") * T.cast(s[1], "float64") * sg) / n, "float32"), [3])


def build_backward(x: torch.dtype, dy: torch.dtype, p):
    """dx, and with parameters (the affine form) dweight's and dbias's fp32 sums over rows."""
    X, G = Io(x), Io(dy)
    if p is None:

        @T.prim_func
        def layer_norm_bwd(x: X.rows, dy: G.rows, mean: per_row(), rstd: per_row(), dx: X.rows):
            with T.Kernel(M) as row:
                s = T.alloc_local((5,), T.float32)  # mean, rstd, mean(g), mean(g * xhat), mean's low part
                s[0] = mean[row]
                s[1] = rstd[row]
                _grad_stats(s, [(X, x), (G, dy)], row, lambda g: g)
                row_map(
                    lambda xv, g: ((g - centered(xv, s[0], s[1], s[4]) * splat(s[3])) - splat(s[2])) * splat(s[1]),
                    [(X, x), (G, dy)], [(X, dx)], row,
                )  # fmt: skip

        return layer_norm_bwd

    P = Io(p)

    @T.prim_func
    def layer_norm_bwd(
        x: X.rows, dy: G.rows, weight: P.vector, mean: per_row(), rstd: per_row(), dx: X.rows, dweight: partial(), dbias: partial()
    ):
        with T.Kernel(M) as row:
            s = T.alloc_local((5,), T.float32)
            s[0] = mean[row]
            s[1] = rstd[row]
            _grad_stats(s, [(X, x), (G, dy), (P, weight)], row, lambda g, wv: g * wv)
            row_map(
                lambda xv, g, wv: [
                    ((g * wv - centered(xv, s[0], s[1], s[4]) * splat(s[3])) - splat(s[2])) * splat(s[1]),
                    g * centered(xv, s[0], s[1], s[4]),
                    g,
                ],
                [(X, x), (G, dy), (P, weight)],
                [(X, dx), (F32, dweight), (F32, dbias)],
                row,
            )

    return layer_norm_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (("layer_norm_bwd", lambda dt: build_backward(dt, dt, dt)),)  # two compensated partials

def forward(x, weight, bias, eps: float, output_dtype: torch.dtype, out=None):
    """(y, mean, rstd) for a non-empty 2-D ``x`` (M, D) with unit-stride rows; weight and bias (D,) or None.
    A weight and a bias of different dtypes are both converted to their promoted dtype (exact; [D] vectors)."""
    M_, D_ = x.shape
    check_shape(M_, D_)
    if out is None:
        out = (outputs.empty((M_, D_), output_dtype, x.device), outputs.empty((M_,), torch.float32, x.device),
               outputs.empty((M_,), torch.float32, x.device))  # fmt: skip
    y, mean, rstd = out
    plain = weight is None and bias is None
    w, b = (None, None) if plain else vectors_or_defaults(weight, bias, x)
    kernel = CACHE.kernel("layer_norm_fwd", build_forward, x.dtype, None if plain else w.dtype, y.dtype)
    if plain:
        kernel(threads_for(M_ * D_), x=x, y=y, mean=mean, rstd=rstd, eps=eps)
    else:
        kernel(threads_for(M_ * D_), x=x, weight=w, bias=b, y=y, mean=mean, rstd=rstd, eps=eps)
    return y, mean, rstd


def backward(x, mean, rstd, dy, weight, bias):
    """(dx in x's dtype, dweight fp32 (D,) or None, dbias fp32 (D,) or None) for non-empty 2-D ``x`` and ``dy``
    with the forward's ``mean`` and ``rstd`` (M,)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    M_, D_ = x.shape
    check_shape(M_, D_)
    dx = outputs.empty((M_, D_), x.dtype, x.device)
    stats = dict(mean=mean.to(torch.float32).contiguous(), rstd=rstd.to(torch.float32).contiguous())
    if weight is None and not with_dbias:
        CACHE.kernel("layer_norm_bwd", build_backward, x.dtype, dy.dtype, None)(threads_for(M_ * D_), x=x, dy=dy, dx=dx, **stats)
        return dx, None, None
    w, _ = vectors_or_defaults(weight, None, x)
    dw, db = outputs.empty((D_,), torch.float32, x.device), outputs.empty((D_,), torch.float32, x.device)
    CACHE.kernel("layer_norm_bwd", build_backward, x.dtype, dy.dtype, w.dtype)(
        threads_for(M_ * D_), x=x, dy=dy, weight=w, dx=dx, dweight=dw, dbias=db, **stats
    )
    return dx, (dw if weight is not None else None), (db if with_dbias else None)
