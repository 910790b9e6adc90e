"""rms_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtypes, casting,
weighted), serving every M and D.

Forward, per row: rstd = rsqrt(sum(x^2) / D + eps) in fp64 rounded once, y = x * rstd * (w + offset) in fp32
(casting "fp32") or round(round(n) * round(w + offset)) (casting "llama", HF LlamaRMSNorm's order). Backward:
given the forward's eps, dx in fp64 without cancellation (``build_backward_eps``) and rstd the fp64 value the
saved fp32 one stands for (``eps_stats``); without it, the fp32 form. dweight's term dy * x * rstd rounded once
(``dweight_term``) into per-block fp32 partials the driver sums (the same bits for any thread count).
Measurements behind these choices: docs/kernels.md.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .norm_stats import STATS, by_form, dweight_term, eps_stats, inv_rms, rstd_pair
from .rowwise import F32, D, Io, M, partial, per_row, rounded, row_map, row_sum, splat
from .runtime import CACHE, check_shape, threads_for

CASTINGS = ("fp32", "llama")


def _mean(total):
    """An fp32 row sum over D divided by D in fp32, as torch's CPU mean does (``sum(...).div_(D)``): a
    multiply by 1/D rounds twice and, measured, loses the standard's retest by a few percent at D = 7."""
    return total / T.cast(D, "float32")


def build_forward(x: torch.dtype, w, y: torch.dtype, casting: str = "fp32"):
    """The forward for x, weight (None: no scale) and y dtypes."""
    X, Y = Io(x), Io(y)
    if w is None:

        @T.prim_func
        def rms_norm_fwd(x: X.rows, y: Y.rows, rstd: per_row(), eps: T.float32):
            with T.Kernel(M) as row:
                r = T.alloc_local((1,), T.float32)
                inv_rms(r, eps, X, x, row)
                rstd[row] = r[0]
                row_map(lambda v: v * splat(r[0]), [(X, x)], [(Y, y)], row)

        return rms_norm_fwd

    W = Io(w)
    if casting == "llama":  # n rounded to x's dtype, the weight to x's dtype, their product rounded on store
        scale = lambda v, wv, r: rounded(X, v * splat(r)) * rounded(X, wv)  # noqa: E731
    else:
        scale = lambda v, wv, r: (v * splat(r)) * wv  # noqa: E731

    @T.prim_func
    def rms_norm_fwd(x: X.rows, weight: W.vector, y: Y.rows, rstd: per_row(), eps: T.float32, offset: T.float32):
        with T.Kernel(M) as row:
            r = T.alloc_local((1,), T.float32)
            inv_rms(r, eps, X, x, row)
            rstd[row] = r[0]
            row_map(lambda v, wv: scale(v, wv + splat(offset), r[0]), [(X, x), (W, weight)], [(Y, y)], row)

    return rms_norm_fwd


def build_backward(x: torch.dtype, dy: torch.dtype, w, casting: str = "fp32"):
    """dx (and, with a weight, dweight's fp32 sum over rows) for x, dy and weight dtypes."""
    X, G = Io(x), Io(dy)
    if w is None:

        @T.prim_func
        def rms_norm_bwd(x: X.rows, dy: G.rows, rstd: per_row(), dx: X.rows):
            with T.Kernel(M) as row:
                s = T.alloc_local((2,), T.float32)  # s[0] = mean(dy * n), s[1] = rstd
                s[1] = rstd[row]
                row_sum(s, 0, lambda xv, g: g * (xv * splat(s[1])), [(X, x), (G, dy)], row)
                s[0] = _mean(s[0])
                row_map(
                    lambda xv, g: (g - (xv * splat(s[1])) * splat(s[0])) * splat(s[1]),
                    [(X, x), (G, dy)],
                    [(X, dx)],
                    row,
                )

        return rms_norm_bwd

    W = Io(w)
    dw_term = dweight_term_of(casting, X)

    @T.prim_func
    def rms_norm_bwd(
        x: X.rows, dy: G.rows, weight: W.vector, rstd: per_row(), dx: X.rows, dweight: partial(), offset: T.float32
    ):
        with T.Kernel(M) as row:
            s = T.alloc_local((2,), T.float32)
            s[1] = rstd[row]
            row_sum(
                s,
                0,
                lambda xv, g, wv: (g * (wv + splat(offset))) * (xv * splat(s[1])),
                [(X, x), (G, dy), (W, weight)],
                row,
            )
            s[0] = _mean(s[0])
            row_map(
                lambda xv, g, wv: [
                    ((g * (wv + splat(offset))) - (xv * splat(s[1])) * splat(s[0])) * splat(s[1]),
                    dw_term(g, xv, s[1], T.float32(0.0)),
                ],
                [(X, x), (G, dy), (W, weight)],
                [(X, dx), (F32, dweight)],
                row,
            )

    return rms_norm_bwd


def dweight_term_of(casting: str, x_io: Io):
    """dweight's term for a casting: ``dweight_term``, or for "llama" dy * round(x * rstd) (the normalized value
    as the llama forward rounded it to x's dtype)."""
    if casting == "llama":
        return lambda g, xv, hi, lo: g * rounded(x_io, xv * splat(hi))
    return dweight_term


def build_backward_eps(x: torch.dtype, dy: torch.dtype, w, casting: str = "fp32"):
    """The backward given the forward's eps: with g = dy * (w + offset) in fp32, ss = sum(x^2) and
    d = sum(g * x) in one fp64 pass, dx = rstd * (D * eps * g + (ss * g - x * d)) / (ss + D * eps) in fp64
    (``tp_resid64``: x * d an exact two-term product), rounded once, for rows where g is nearly parallel to x
    (at D = 1 always: there the fp32 form leaves rounding noise of 1 - (x * rstd)^2); the others the same dx as
    rstd * (g - x * k), k = d / (ss + D * eps) from the fp64 sums (``norm_stats.by_form``). The same dx as the
    fp32 form (D * (mean(x^2) + eps) = ss + D * eps), without its cancellation. dweight as in ``build_backward``."""
    X, G = Io(x), Io(dy)
    if w is None:

        @T.prim_func
        def rms_norm_bwd_eps(x: X.rows, dy: G.rows, rstd: per_row(), dx: X.rows, eps: T.float32):
            with T.Kernel(M) as row:
                c = T.alloc_local((STATS,), "float64")
                eps_stats(c, eps, rstd[row], [(X, x), (G, dy)], row, lambda g: g)
                by_form(c, lambda resid: row_map(lambda xv, g: resid(g, xv, X), [(X, x), (G, dy)], [(X, dx)], row))

        return rms_norm_bwd_eps

    W = Io(w)
    dw_term = dweight_term_of(casting, X)

    @T.prim_func
    def rms_norm_bwd_eps(
        x: X.rows,
        dy: G.rows,
        weight: W.vector,
        rstd: per_row(),
        dx: X.rows,
        dweight: partial(),
        offset: T.float32,
        eps: T.float32,
    ):
        with T.Kernel(M) as row:
            c = T.alloc_local((STATS,), "float64")
            r = T.alloc_local((2,), T.float32)  # the rstd used (c[4]) as an fp32 pair
            eps_stats(c, eps, rstd[row], [(X, x), (G, dy), (W, weight)], row, lambda g, wv: g * (wv + splat(offset)))
            rstd_pair(r, c)
            by_form(
                c,
                lambda resid: row_map(
                    lambda xv, g, wv: [
                        resid(g * (wv + splat(offset)), xv, X),
                        dw_term(g, xv, r[0], r[1]),
                    ],
                    [(X, x), (G, dy), (W, weight)],
                    [(X, dx), (F32, dweight)],
                    row,
                ),
            )

    return rms_norm_bwd_eps


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (
    ("rms_norm_fwd", lambda dt: build_forward(dt, dt, dt)),
    ("rms_norm_fwd", lambda dt: build_forward(dt, dt, dt, "llama")),
    ("rms_norm_bwd", lambda dt: build_backward(dt, dt, dt)),  # with the compensated dweight partial
    ("rms_norm_bwd_eps", lambda dt: build_backward_eps(dt, dt, dt)),  # fp64 dx and the partial
)


def forward(x, weight, eps: float, offset: float, casting: str, output_dtype: torch.dtype, out=None):
    """(y, rstd) for a non-empty 2-D ``x`` (M, D) with unit-stride rows; ``weight`` (D,) or None."""
    M_, D = x.shape
    check_shape(M_, D)
    y, rstd = (
        (outputs.empty((M_, D), output_dtype, x.device), outputs.empty((M_,), torch.float32, x.device))
        if out is None
        else out
    )
    wdt = None if weight is None else weight.dtype
    kernel = CACHE.kernel("rms_norm_fwd", build_forward, x.dtype, wdt, y.dtype, casting if wdt else "fp32")
    if weight is None:
        kernel(threads_for(M_ * D), x=x, y=y, rstd=rstd, eps=eps)
    else:
        kernel(threads_for(M_ * D), x=x, weight=weight.contiguous(), y=y, rstd=rstd, eps=eps, offset=offset)
    return y, rstd


def backward(x, rstd, dy, weight, offset: float, casting: str, eps: float | None = None):
    """(dx in x's dtype, dweight fp32 (D,) or None) for non-empty 2-D ``x``, ``dy`` and ``rstd`` (M,); with the
    forward's ``eps``, dx in the cancellation-free fp64 form (``build_backward_eps``)."""
    M_, D = x.shape
    check_shape(M_, D)
    dx = outputs.empty((M_, D), x.dtype, x.device)
    args = dict(x=x, dy=dy, rstd=rstd.to(torch.float32).contiguous(), dx=dx)
    name, build = ("rms_norm_bwd", build_backward) if eps is None else ("rms_norm_bwd_eps", build_backward_eps)
    if eps is not None:
        args["eps"] = eps
    if weight is None:
        CACHE.kernel(name, build, x.dtype, dy.dtype, None, "fp32")(threads_for(M_ * D), **args)
        return dx, None
    dweight = outputs.empty((D,), torch.float32, x.device)
    CACHE.kernel(name, build, x.dtype, dy.dtype, weight.dtype, casting)(
        threads_for(M_ * D), weight=weight.contiguous(), dweight=dweight, offset=offset, **args
    )
    return dx, dweight
