"""layer_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination
and form (affine or plain), serving every M and D.

Forward, per row, two passes for the statistics and one for y: the mean is the fp64 sum of x (exact terms)
rounded once; the variance is the fp64 sum of (x - mean)^2 over D, less the square of the mean of (x - mean)
(the corrected two-pass form: it takes back what rounding the mean to fp32 put in), so rows with a large mean
keep their spread (never E[x^2] - mean^2). rstd = 1 / sqrt(var + eps) in fp64, rounded once;
y = ((x * rstd + c) + c') * w + b in fp32, (c, c') = -mean * rstd from the fp64 mean as an fp32 pair (``_stats``).
Measured at L0 first: y = (x - mean) * rstd rounds twice per element (the difference, the product), and its
RMSE lost to torch's x * rstd + (-mean * rstd) by 5% over 1000 seeds (fp32, D = 150, eps 1e-12). Passes two and three re-read a row that is still in cache.
Backward, per row, given mean and rstd: xhat = (x - mean) * rstd and g = dy * w in fp32; sum(g) and
sum(g * xhat) in one fp64 pass (exact products), dx = ((g - xhat * sum(g * xhat) / D) - sum(g) / D) * rstd:
in that order, so that with -ffp-contract=fast (settings.py) whichever product g++ fuses, g is rounded as the
sum saw it before the mean is taken off (at D = 1, xhat = 0 and dx is exactly 0, as the golden's; written
g - mean(g) - ..., g = dy * w fused into the subtraction left its rounding residual, times rstd);
dweight += dy * xhat and dbias += dy into the block's fp32 partials (Kahan), summed by the driver over fixed
blocks of rows: the same bits for any thread count.
A weight or a bias given alone is paired with ones or zeros (the affine form); neither gives the plain form,
with no parameter loads (forward) and no partial sums (backward).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .rowwise import D, F32, M, Io, partial, per_row, row_map, row_sums64, splat
from .runtime import CACHE, check_shape, threads_for
from ..targets import vectors_or_defaults
from ... import outputs


def _stats(s, eps, x_io, x, row):
    """s[0] = the mean of ``row``, s[1] = its rstd (both fp32, each computed in fp64 and rounded once), and
    (s[2], s[3]) = -mean * rstd as an fp32 pair (high part, remainder) with the fp64 mean: y = (x * rstd + s[2])
    + s[3] rounds about once per element, as torch's x * rstd + (-mean * rstd) does, without its loss where the
    mean is large (x * rstd and s[2] cancel exactly in the FMA) and without the fp32 mean's rounding. A row
    holding inf has a nan mean, as torch's (its Welford update takes inf - inf)."""
    n = T.cast(D, "float64")
    total = row_sums64([lambda v: (v, splat(T.float32(1.0)))], [(x_io, x)], row)[0]
    mean = T.call_extern("float64", "tp_nan_if_inf", total) / n
    T.buffer_store(s, T.cast(mean, "float32"), [0])
    ss, shift = row_sums64(
        [lambda v: (v - splat(s[0]), v - splat(s[0])), lambda v: (v - splat(s[0]), splat(T.float32(1.0)))], [(x_io, x)], row
    )
    var = ss / n - (shift / n) * (shift / n)
    T.buffer_store(s, T.cast(T.float64(1.0) / T.sqrt(var + T.cast(eps, "float64")), "float32"), [1])
    c = -(total / n) * T.cast(s[1], "float64")
    T.buffer_store(s, T.cast(c, "float32"), [2])
    T.buffer_store(s, T.cast(c - T.cast(s[2], "float64"), "float32"), [3])


def _normalized(v, s):
    """(x - mean) * rstd of 16 lanes from the row's statistics (``_stats``)."""
    return (v * splat(s[1]) + splat(s[2])) + splat(s[3])


def build_forward(x: torch.dtype, p, y: torch.dtype):
    """The forward for x, parameter (weight and bias; None: the plain form) and y dtypes."""
    X, Y = Io(x), Io(y)
    if p is None:

        @T.prim_func
        def layer_norm_fwd(x: X.rows, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
            with T.Kernel(M) as row:
                s = T.alloc_local((4,), T.float32)
                _stats(s, eps, X, x, row)
                mean[row] = s[0]
                rstd[row] = s[1]
                row_map(lambda v: _normalized(v, s), [(X, x)], [(Y, y)], row)

        return layer_norm_fwd

    P = Io(p)

    @T.prim_func
    def layer_norm_fwd(x: X.rows, weight: P.vector, bias: P.vector, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
        with T.Kernel(M) as row:
            s = T.alloc_local((4,), T.float32)
            _stats(s, eps, X, x, row)
            mean[row] = s[0]
            rstd[row] = s[1]
            row_map(lambda v, wv, bv: _normalized(v, s) * wv + bv, [(X, x), (P, weight), (P, bias)], [(Y, y)], row)

    return layer_norm_fwd


def _grad_stats(s, rows, row, g_of):
    """s[2] = sum(g) / D, s[3] = sum(g * xhat) / D of ``row`` (s[0] mean, s[1] rstd), one fp64 pass."""
    n = T.cast(D, "float64")
    xhat = lambda xv: (xv - splat(s[0])) * splat(s[1])  # noqa: E731
    sg, sgx = row_sums64(
        [lambda xv, *rest: (g_of(*rest), splat(T.float32(1.0))), lambda xv, *rest: (g_of(*rest), xhat(xv))], rows, row
    )
    T.buffer_store(s, T.cast(sg / n, "float32"), [2])
    T.buffer_store(s, T.cast(sgx / n, "float32"), [3])


def build_backward(x: torch.dtype, dy: torch.dtype, p):
    """dx, and with parameters (the affine form) dweight's and dbias's fp32 sums over rows."""
    X, G = Io(x), Io(dy)
    if p is None:

        @T.prim_func
        def layer_norm_bwd(x: X.rows, dy: G.rows, mean: per_row(), rstd: per_row(), dx: X.rows):
            with T.Kernel(M) as row:
                s = T.alloc_local((4,), T.float32)  # mean, rstd, mean(g), mean(g * xhat)
                s[0] = mean[row]
                s[1] = rstd[row]
                _grad_stats(s, [(X, x), (G, dy)], row, lambda g: g)
                row_map(
                    lambda xv, g: ((g - ((xv - splat(s[0])) * splat(s[1])) * splat(s[3])) - splat(s[2])) * splat(s[1]),
                    [(X, x), (G, dy)], [(X, dx)], row,
                )  # fmt: skip

        return layer_norm_bwd

    P = Io(p)

    @T.prim_func
    def layer_norm_bwd(
        x: X.rows, dy: G.rows, weight: P.vector, mean: per_row(), rstd: per_row(), dx: X.rows, dweight: partial(), dbias: partial()
    ):
        with T.Kernel(M) as row:
            s = T.alloc_local((4,), T.float32)
            s[0] = mean[row]
            s[1] = rstd[row]
            _grad_stats(s, [(X, x), (G, dy), (P, weight)], row, lambda g, wv: g * wv)
            row_map(
                lambda xv, g, wv: [
                    ((g * wv - ((xv - splat(s[0])) * splat(s[1])) * splat(s[3])) - splat(s[2])) * splat(s[1]),
                    g * ((xv - splat(s[0])) * splat(s[1])),
                    g,
                ],
                [(X, x), (G, dy), (P, weight)],
                [(X, dx), (F32, dweight), (F32, dbias)],
                row,
            )

    return layer_norm_bwd


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


def backward(x, mean, rstd, dy, weight, with_dbias: bool):
    """(dx in x's dtype, dweight fp32 (D,) or None, dbias fp32 (D,) or None) for non-empty 2-D ``x`` and ``dy``
    with the forward's ``mean`` and ``rstd`` (M,)."""
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
