"""layer_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per dtype combination
and form (affine or plain), serving every M and D.

Forward, per row, two passes for the statistics and one for y: the mean is the fp64 sum of x (exact terms)
rounded once; the variance is the fp64 sum of (x - mean)^2 over D, less the square of the mean of (x - mean)
(the corrected two-pass form: it takes back what rounding the mean to fp32 put in), so rows with a large mean
keep their spread (never E[x^2] - mean^2). rstd = 1 / sqrt(var + eps) in fp64, rounded once;
y = xhat * w + b in fp32 with xhat = (x - mean) * rstd formed in fp64 from the fp64 mean and rounded once
(``_normalized``, which says what the fp32 forms lost at L0 and L1). Passes two and three re-read a row that
is still in cache.
Backward, per row, given mean and rstd: xhat = (x - mean) * rstd in fp64 rounded once (``tp_center_scale64``:
in fp32 the difference and the product round twice, which left fp32 dweight 3-17% behind torch's in RMSE at L1
on rows of one or two, where dweight is dy * xhat itself; dweight's term dy * xhat is one fp64 product rounded
once) and g = dy * w in fp32; sum(g) and
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

from .rowwise import VEC, D, F32, M, Io, partial, per_row, row_map, row_sums64, splat
from .runtime import CACHE, check_shape, threads_for
from ..targets import vectors_or_defaults
from ... import outputs


def _stats(s, m, eps, x_io, x, row):
    """s[0] = the mean of ``row``, s[1] = its rstd (both fp32, each computed in fp64 and rounded once), and m[0]
    = the fp64 mean, from which y's (x - mean) * rstd is formed in fp64 and rounded once (``_normalized``). A
    row holding inf has a nan mean, as torch's (its Welford update takes inf - inf)."""
    n = T.cast(D, "float64")
    total = row_sums64([lambda v: (v, splat(T.float32(1.0)))], [(x_io, x)], row)[0]
    T.buffer_store(m, T.call_extern("float64", "tp_nan_if_inf", total) / n, [0])
    T.buffer_store(s, T.cast(m[0], "float32"), [0])
    ss, shift = row_sums64(
        [lambda v: (v - splat(s[0]), v - splat(s[0])), lambda v: (v - splat(s[0]), splat(T.float32(1.0)))], [(x_io, x)], row
    )
    var = ss / n - (shift / n) * (shift / n)
    T.buffer_store(s, T.cast(T.float64(1.0) / T.sqrt(var + T.cast(eps, "float64")), "float32"), [1])


def _normalized(v, s, m):
    """(x - mean) * rstd of 16 lanes with the fp64 mean and the fp32 rstd, in fp64, rounded once: the
    correctly rounded value (``tp_center_scale64``). Measured at L0 and L1 first: (x - mean) * rstd in fp32
    rounds twice (its RMSE lost to torch's x * rstd + (-mean * rstd) by 5% over 1000 seeds, fp32, D = 150, eps
    1e-12), and (x * rstd + c) + c' with -mean * rstd as an fp32 pair also rounds twice (bf16 y at D = 2 lost to
    torch's by 5e-8 in 65% of 300 seeds: one bf16 ulp in single elements, the retest's lower bound above 1)."""
    return T.call_extern(VEC, "tp_center_scale64", v, m[0], T.cast(s[1], "float64"))


def build_forward(x: torch.dtype, p, y: torch.dtype):
    """The forward for x, parameter (weight and bias; None: the plain form) and y dtypes."""
    X, Y = Io(x), Io(y)
    if p is None:

        @T.prim_func
        def layer_norm_fwd(x: X.rows, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
            with T.Kernel(M) as row:
                s = T.alloc_local((2,), T.float32)
                m = T.alloc_local((1,), "float64")
                _stats(s, m, eps, X, x, row)
                mean[row] = s[0]
                rstd[row] = s[1]
                row_map(lambda v: _normalized(v, s, m), [(X, x)], [(Y, y)], row)

        return layer_norm_fwd

    P = Io(p)

    @T.prim_func
    def layer_norm_fwd(x: X.rows, weight: P.vector, bias: P.vector, y: Y.rows, mean: per_row(), rstd: per_row(), eps: T.float32):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)
            m = T.alloc_local((1,), "float64")
            _stats(s, m, eps, X, x, row)
            mean[row] = s[0]
            rstd[row] = s[1]
            row_map(lambda v, wv, bv: _normalized(v, s, m) * wv + bv, [(X, x), (P, weight), (P, bias)], [(Y, y)], row)

    return layer_norm_fwd


def _xhat(xv, s, g=None):
    """(x - mean) * rstd of 16 lanes (times g when given), computed in fp64 and rounded once (s[0] mean, s[1]
    rstd)."""
    mean, rstd = T.cast(s[0], "float64"), T.cast(s[1], "float64")
    if g is None:
        return T.call_extern(VEC, "tp_center_scale64", xv, mean, rstd)
    return T.call_extern(VEC, "tp_center_scale_mul64", xv, g, mean, rstd)


def _grad_stats(s, rows, row, g_of):
    """s[2] = sum(g) / D, s[3] = sum(g * xhat) / D of ``row`` (s[0] mean, s[1] rstd), one fp64 pass."""
    n = T.cast(D, "float64")
    xhat = lambda xv: _xhat(xv, s)  # noqa: E731
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
                    lambda xv, g: ((g - _xhat(xv, s) * splat(s[3])) - splat(s[2])) * splat(s[1]),
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
                    ((g * wv - _xhat(xv, s) * splat(s[3])) - splat(s[2])) * splat(s[1]),
                    _xhat(xv, s, g),
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
