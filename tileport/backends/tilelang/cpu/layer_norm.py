"""layer_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination
and form (affine or plain), serving every M and D.

Forward, per row: the mean as an fp64 sum rounded once, the variance by the corrected two-pass form (never
E[x^2] - mean^2), rstd in fp64 rounded once, y = xhat * w + b with xhat about the fp64 mean rounded once
(``centered``: TwoSum and one FMA). Backward, given mean and rstd (and the forward's eps: then rstd is the fp64 one the
saved fp32 one rounds, carried as a pair): the row sums in one fp64 pass, xhat about the fp64 mean rounded
once, dx = ((g - xhat * sum(g * xhat) / D) - sum(g) / D) * rstd in that order (whichever product g++ fuses, g
is rounded as the sums saw it); dweight and dbias into compensated per-block fp32 partials summed
by the driver (the same bits for any thread count). A weight or a bias alone is paired with ones or zeros.
Why each rounding is where it is, and what it cost: docs/kernels.md.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from ..targets import vectors_or_defaults
from .norm_stats import dweight_term
from .rowwise import F32, VEC, D, Io, M, partial, per_row, row_map, row_sums64, splat, square
from .runtime import CACHE, check_shape, threads_for


def _stats(s, eps, x_io, x, row):
    """s[0] = the mean of ``row``, s[1] = its rstd (both fp32, each computed in fp64 and rounded once), and
    s[2] = the fp64 mean's remainder (mean - s[0], as fp32): the pair the forward centres x on. A row holding
    inf has a nan mean, as torch's (its Welford update takes inf - inf)."""
    n = T.cast(D, "float64")
    total = row_sums64([lambda v: (v, splat(T.float32(1.0)))], [(x_io, x)], row)[0]
    mean = T.call_extern("float64", "tp_nan_if_inf", total) / n
    T.buffer_store(s, T.cast(mean, "float32"), [0])
    ss, shift = row_sums64(
        [lambda v: square(v - splat(s[0])), lambda v: (v - splat(s[0]), splat(T.float32(1.0)))], [(x_io, x)], row
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
    def layer_norm_fwd(
        x: X.rows, weight: P.vector, bias: P.vector, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32
    ):
        with T.Kernel(M) as row:
            s = T.alloc_local((3,), T.float32)
            _stats(s, eps, X, x, row)
            mean[row] = s[0]
            rstd[row] = s[1]
            row_map(lambda v, wv, bv: _normalized(v, s) * wv + bv, [(X, x), (P, weight), (P, bias)], [(Y, y)], row)

    return layer_norm_fwd


def _grad_stats(s, eps, rows, row, g_of):
    """s[2] = sum(g) / D, s[3] = sum(g * xhat) / D, s[4] = the given mean's low part and s[5] = the rstd's low
    part of ``row`` (s[0] mean, s[1] rstd, as given), in one fp64 pass.

    Where the given mean is the row's fp64 mean rounded to fp32 (what the forward saves), xhat is taken about
    that fp64 mean, s[0] + s[4]: the fp32 mean's rounding is an error of every centred value that no later
    step removes (at mean 100, 4e-6 on every x - mean). Given the forward's eps (``eps >= 0``), the rstd is
    recomputed as the forward computes it (the squares about the fp32 mean, corrected by their shift), and
    where the given rstd is that fp64 value rounded, xhat and dx scale by it as the pair s[1] + s[5]: the fp32
    rstd's rounding, the same for the whole row, is otherwise what a dweight summed over one or two rows keeps
    against the golden. Any other given mean or rstd is used as given."""
    n = T.cast(D, "float64")
    m, one = splat(s[0]), splat(T.float32(1.0))
    sg, sgd, sx, ss, shift = row_sums64(
        [
            lambda xv, *rest: (g_of(*rest), one),
            lambda xv, *rest: (g_of(*rest), xv - m),
            lambda xv, *rest: (xv, one),
            lambda xv, *rest: square(xv - m),
            lambda xv, *rest: (xv - m, one),
        ],
        rows,
        row,
    )
    mean = sx / n
    T.buffer_store(
        s,
        T.cast(
            T.if_then_else(T.cast(mean, "float32") == s[0], mean - T.cast(s[0], "float64"), T.float64(0.0)), "float32"
        ),
        [4],
    )
    given = T.cast(s[1], "float64")
    exact = T.float64(1.0) / T.sqrt(ss / n - (shift / n) * (shift / n) + T.cast(eps, "float64"))
    rstd = T.if_then_else(eps >= T.float32(0.0), T.if_then_else(T.cast(exact, "float32") == s[1], exact, given), given)
    T.buffer_store(s, T.cast(rstd - given, "float32"), [5])
    T.buffer_store(s, T.cast(sg / n, "float32"), [2])
    # sum(g * (x - (s[0] + s[4]))) = sum(g * (x - s[0])) - s[4] * sum(g), in fp64, then the fp64 rstd
    T.buffer_store(s, T.cast(rstd * (sgd - T.cast(s[4], "float64") * sg) / n, "float32"), [3])


def _xhat(xv, s):
    """(x - (s[0] + s[4])) * (s[1] + s[5]) of 16 lanes, rounded once (``tp_centered_pair`` in simd.h)."""
    return T.call_extern(VEC, "tp_centered_pair", xv, splat(s[0]), splat(s[4]), splat(s[1]), splat(s[5]))


def _dx(gw, xv, s):
    """((g - xhat * mean(g * xhat)) - mean(g)) * rstd, the last product by the rstd pair, rounded once: whichever
    product g++ fuses, g is rounded as the sums saw it."""
    return dweight_term(splat(T.float32(1.0)), (gw - _xhat(xv, s) * splat(s[3])) - splat(s[2]), s[1], s[5])


def build_backward(x: torch.dtype, dy: torch.dtype, p):
    """dx, and with parameters (the affine form) dweight's and dbias's fp32 sums over rows; ``eps``: the
    forward's, or negative where not given (the statistics are then used as given)."""
    X, G = Io(x), Io(dy)
    if p is None:

        @T.prim_func
        def layer_norm_bwd(x: X.rows, dy: G.rows, mean: per_row(), rstd: per_row(), dx: X.rows, eps: T.float32):
            with T.Kernel(M) as row:
                s = T.alloc_local((6,), T.float32)  # mean, rstd, mean(g), mean(g * xhat), their low parts
                s[0] = mean[row]
                s[1] = rstd[row]
                _grad_stats(s, eps, [(X, x), (G, dy)], row, lambda g: g)
                row_map(lambda xv, g: _dx(g, xv, s), [(X, x), (G, dy)], [(X, dx)], row)

        return layer_norm_bwd

    P = Io(p)

    @T.prim_func
    def layer_norm_bwd(
        x: X.rows,
        dy: G.rows,
        weight: P.vector,
        mean: per_row(),
        rstd: per_row(),
        dx: X.rows,
        dweight: partial(),
        dbias: partial(),
        eps: T.float32,
    ):
        with T.Kernel(M) as row:
            s = T.alloc_local((6,), T.float32)
            s[0] = mean[row]
            s[1] = rstd[row]
            _grad_stats(s, eps, [(X, x), (G, dy), (P, weight)], row, lambda g, wv: g * wv)
            row_map(
                lambda xv, g, wv: [_dx(g * wv, xv, s), g * _xhat(xv, s), g],
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
        out = (
            outputs.empty((M_, D_), output_dtype, x.device),
            outputs.empty((M_,), torch.float32, x.device),
            outputs.empty((M_,), torch.float32, x.device),
        )
    y, mean, rstd = out
    plain = weight is None and bias is None
    w, b = (None, None) if plain else vectors_or_defaults(weight, bias, x)
    kernel = CACHE.kernel("layer_norm_fwd", build_forward, x.dtype, None if plain else w.dtype, y.dtype)
    if plain:
        kernel(threads_for(M_ * D_), x=x, y=y, mean=mean, rstd=rstd, eps=eps)
    else:
        kernel(threads_for(M_ * D_), x=x, weight=w, bias=b, y=y, mean=mean, rstd=rstd, eps=eps)
    return y, mean, rstd


def backward(x, mean, rstd, dy, weight, bias, eps: float | None = None):
    """(dx in x's dtype, dweight fp32 (D,) or None, dbias fp32 (D,) or None) for non-empty 2-D ``x`` and ``dy``
    with the forward's ``mean`` and ``rstd`` (M,); with the forward's ``eps``, scaled by the fp64 rstd the
    saved one rounds (``_grad_stats``)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    M_, D_ = x.shape
    check_shape(M_, D_)
    dx = outputs.empty((M_, D_), x.dtype, x.device)
    stats = dict(
        mean=mean.to(torch.float32).contiguous(),
        rstd=rstd.to(torch.float32).contiguous(),
        eps=-1.0 if eps is None else eps,
    )
    if weight is None and not with_dbias:
        CACHE.kernel("layer_norm_bwd", build_backward, x.dtype, dy.dtype, None)(
            threads_for(M_ * D_), x=x, dy=dy, dx=dx, **stats
        )
        return dx, None, None
    w, _ = vectors_or_defaults(weight, None, x)
    dw, db = outputs.empty((D_,), torch.float32, x.device), outputs.empty((D_,), torch.float32, x.device)
    CACHE.kernel("layer_norm_bwd", build_backward, x.dtype, dy.dtype, w.dtype)(
        threads_for(M_ * D_), x=x, dy=dy, weight=w, dx=dx, dweight=dw, dbias=db, **stats
    )
    return dx, (dw if weight is not None else None), (db if with_dbias else None)
