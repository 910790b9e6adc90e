"""cross_entropy's row kernels (the contract in ``tileport/ops/cross_entropy``) as TileLang CUDA kernels, one per
(logits dtype, target dtype, chunk bucket, options: weight, smoothing, softcap, fused gradient); N and C are
runtime values. Also the softcap's tanh the Ascend kernels share (``ascend/cross_entropy.py``); the launchers
are ``../cross_entropy_device.py``'s.

One row per CTA, walked in chunks of C's bucket (never the whole row): pass one keeps an online max and sum,
each chunk's max (``T.reduce_max``) raising the running max and rescaling the sum, exp(z - max) summed per chunk
in fp32 across the CTA and across chunks in fp64; with smoothing also sum(w z) and sum(w). The loss is formed
from (max - z_t) + log(sum) in fp64 (no lse rounded at 6e4 in it). The fused forward's second pass writes
``a * dloss/dx + b * dz_loss/dx`` into G, which may be X itself: each element is read and written by the same
thread in the same step, after every read of the row's first pass and of its target's logit. The backward
recomputes the gradient from X and the forward's lse. Without a weight the launcher passes a row of X as W
(never read: the kernels take 1).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch
from tilelang import tvm

from .. import cross_entropy_device
from ..cross_entropy_device import INDEX
from ..targets import RUNNERS, TL_DTYPE
from . import rows
from ._common import bucket
from ._common import threads as _threads

RUNNER = RUNNERS["cuda"]
tirx = tvm.tirx

TANH_SPLIT = 0.625  # tanh by an odd polynomial below (Cephes' tanhf coefficients), 1 - 2 e / (1 + e) above
TANH_POLY = (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2, -5.70498872745e-3)


def let(value, body):
    """``body(v)`` with v bound once to ``value`` (a TIR Let: an expression used twice is computed once)."""
    v = tirx.Var("v", value.dtype)
    return tirx.Let(v, value, body(v))


def softcapped(T, x, cap, body):
    """``body(z, slope)`` for z = cap * tanh(x / cap) and its slope 1 - tanh^2 (fp32 expressions in dialect ``T``,
    tilelang.language or its ascend form): tanh by the polynomial below TANH_SPLIT, else 1 - r with
    r = 2 e / (1 + e), e = exp(-2|u|) (underflowing gradually, never overflowing), the slope (1 - t)(1 + t) or
    r (2 - r): neither end cancels, exp only."""

    def parts(u, a, q, r):
        poly = TANH_POLY[4]
        for c in reversed(TANH_POLY[:4]):
            poly = c + q * poly
        near = a < TANH_SPLIT
        return let(
            T.if_then_else(near, a + a * q * poly, 1.0 - r),
            lambda th: body(
                cap * T.if_then_else(u < 0, -th, th), T.if_then_else(near, (1.0 - th) * (1.0 + th), r * (2.0 - r))
            ),
        )

    def from_abs(u, a):
        e = T.exp(-2.0 * a)
        return let(a * a, lambda q: let(e, lambda e: let(2.0 * e / (1.0 + e), lambda r: parts(u, a, q, r))))

    return let(x / cap, lambda u: let(T.abs(u), lambda a: from_abs(u, a)))


def finite_or_zero(T, v):
    """v where finite, else 0: the base of a row's exps while its max is infinite (a row of -inf so far: exp(-inf)
    = 0; a row holding +inf: its sum +inf and lse +inf, as torch's logsumexp)."""
    return T.if_then_else(T.abs(v) == T.infinity("float32"), T.float32(0), v)


def zterm(T, coef, lse):
    """coef * lse, the z-loss' part of a gradient: absent (0, not 0 * inf) where coef is 0."""
    return T.if_then_else(coef != 0, coef * lse, T.cast(0, coef.dtype))


def gradient(T, capped: bool, smoothing: bool, u, cap, k, m, ls, wc, hit, kt, ok):
    """One element's gradient: slope * (k p - wc - [hit] kt) * ok, p = exp((z - m) - ls), z the (capped) logit of
    u; ``wc`` the smoothing's a eps / C w_c (unused without smoothing). The target's element as
    kt (p - 1) + ((k - kt) p - wc): p - 1 exact where p is near 1, where k p - kt cancels; ``hit`` None: the
    element is not the target's (a kernel that forms that one apart, ``target_grad``)."""

    def g(z, slope):
        def value(p):
            w = wc if smoothing else T.float32(0)
            if hit is None:
                return (k * p - w) * slope * ok
            return T.if_then_else(hit, kt * (p - 1.0) + ((k - kt) * p - w), k * p - w) * slope * ok

        return let(T.exp((z - m) - ls), value)

    return softcapped(T, u, cap, g) if capped else g(u, 1.0)


def target_grad(T, kt, kr, wct, arg, slope):
    """The target's gradient element of a row in fp64, rounded once: slope (kt (p - 1) + (kr p - wct)),
    p = exp(arg): the row's largest element, where fp32 roundings of its terms show against torch (the CUDA
    kernels; Ascend's vector units have no fp64)."""
    return let(T.exp(arg), lambda p: T.cast((kt * (p - 1.0) + (kr * p - wct)) * T.cast(slope, "float64"), "float32"))


def _weight(weighted: bool, W, col):
    """The class weight w_col in fp32 (1 unweighted: W is never read)."""
    return W[col].astype("float32") if weighted else T.float32(1)


def gradient_pass(chunk: int, C, xt: str, weighted: bool, smoothing: bool, capped: bool):
    """A macro ``(bufs, bx)`` writing a row's gradient (the fused forward's and the backward's last pass):
    ``gradient`` of each element with the row's factor ``k``, base ``m`` and log-sum ``s`` (fp64; None: 0) and
    the smoothing's ``kw * w_c``, the target's element ``gt`` in its place."""

    def base(s, i):
        return T.float32(0) if s is None else T.cast(s[i], "float32")

    @T.macro
    def step(X, W, G, k, m, s, kw, ti, gt, ok, cap, bx, col, i, j):
        g = gradient(
            T,
            capped,
            smoothing,
            X[bx, col].astype("float32"),
            cap,
            k[i],
            m[i],
            base(s, i),
            kw[i] * _weight(weighted, W, col),
            None,
            None,
            ok[i],
        )
        G[bx, col] = T.if_then_else(T.cast(col, "int64") == ti[i], gt[i], g).astype(xt)

    return rows.each(chunk, step, C)


def build_forward(
    chunk: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool, fused: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    N, C = T.dynamic("N"), T.dynamic("C")

    def logit(v, cap):
        return softcapped(T, v, cap, lambda z, _: z) if capped else v

    write = gradient_pass(chunk, C, xt, weighted, smoothing, capped)

    @T.prim_func
    def cross_entropy_fwd(
        X: T.Tensor((N, C), xt),
        TG: T.Tensor((N,), tt),
        W: T.Tensor((C,), xt),
        G: T.Tensor((N, C), xt),
        LOSS: T.Tensor((N,), "float32"),
        ZL: T.Tensor((N,), "float32"),
        LSE: T.Tensor((N,), "float32"),
        ignore_index: T.int64,
        eps: T.float64,
        scale: T.float64,
        cap: T.float32,
        a: T.float64,
        b: T.float64,
    ):
        with T.Kernel(N, threads=_threads(chunk)) as bx:
            z = T.alloc_fragment((1, chunk), "float32")
            e = T.alloc_fragment((1, chunk), "float32")
            part = T.alloc_fragment((1,), "float32")
            m = T.alloc_fragment((1,), "float32")  # the running max
            mn = T.alloc_fragment((1,), "float32")
            bs = T.alloc_fragment((1,), "float32")  # the exps' base: the max, 0 while it is infinite
            s = T.alloc_fragment((1,), "float64")  # sum of exp(z - m)
            swz = T.alloc_fragment((1,), "float64")  # smoothing: sum of w z, and W = sum of w
            ws = T.alloc_fragment((1,), "float64")
            ok = T.alloc_fragment((1,), "float32")  # 1 for a counted row, 0 for an ignored one
            ti = T.alloc_fragment((1,), "int64")  # the target (0 where ignored)
            zt = T.alloc_fragment((1,), "float32")  # its logit, the softcap's slope there, its weight
            st = T.alloc_fragment((1,), "float32")
            wt = T.alloc_fragment((1,), "float32")
            gt = T.alloc_fragment((1,), "float32")  # its gradient element (target_grad)
            for i in T.Parallel(1):
                m[i] = -T.infinity("float32")
                s[i] = T.float64(0)
                swz[i] = T.float64(0)
                ws[i] = T.float64(0)
            for i in T.Parallel(1):  # the target's logit and weight, read before G may overwrite the row
                t = TG[bx].astype("int64")
                counted = t != ignore_index
                tc = T.if_then_else(counted, t, T.int64(0))
                ok[i] = T.if_then_else(counted, T.float32(1), T.float32(0))
                ti[i] = tc
                zt[i] = logit(X[bx, tc].astype("float32"), cap)
                st[i] = softcapped(T, X[bx, tc].astype("float32"), cap, lambda _, sl: sl) if capped else T.float32(1)
                wt[i] = T.if_then_else(counted, _weight(weighted, W, tc), T.float32(0))
            for k in T.serial(T.ceildiv(C, chunk)):
                for i, j in T.Parallel(1, chunk):
                    col = k * chunk + j
                    z[i, j] = T.if_then_else(col < C, logit(X[bx, col].astype("float32"), cap), -T.infinity("float32"))
                T.reduce_max(z, part, dim=1)
                for i in T.Parallel(1):
                    mn[i] = T.max(m[i], part[i])
                    bs[i] = finite_or_zero(T, T.max(m[i], part[i]))
                for i, j in T.Parallel(1, chunk):
                    e[i, j] = T.exp(z[i, j] - bs[i])  # exp(-inf) = 0 past C
                T.reduce_sum(e, part, dim=1)
                for i in T.Parallel(1):
                    s[i] = s[i] * T.exp(T.cast(m[i], "float64") - T.cast(bs[i], "float64")) + T.cast(part[i], "float64")
                    m[i] = mn[i]
                if smoothing:
                    for i, j in T.Parallel(1, chunk):
                        col = k * chunk + j
                        e[i, j] = T.if_then_else(col < C, _weight(weighted, W, col) * z[i, j], T.float32(0))
                    T.reduce_sum(e, part, dim=1)
                    for i in T.Parallel(1):
                        swz[i] += T.cast(part[i], "float64")
                    if weighted:
                        for i, j in T.Parallel(1, chunk):
                            col = k * chunk + j
                            e[i, j] = T.if_then_else(col < C, W[col].astype("float32"), T.float32(0))
                        T.reduce_sum(e, part, dim=1)
                        for i in T.Parallel(1):
                            ws[i] += T.cast(part[i], "float64")
            for i in T.Parallel(1):
                mw = T.cast(m[i], "float64")
                ls = T.log(s[i])
                lse = mw + ls
                loss = T.cast(wt[i], "float64") * ((mw - T.cast(zt[i], "float64")) + ls)
                w_all = (ws[i] if weighted else T.cast(C, "float64")) if smoothing else T.float64(0)
                if smoothing:
                    loss = (1.0 - eps) * loss + eps / T.cast(C, "float64") * ((w_all * mw - swz[i]) + w_all * ls)
                LOSS[bx] = T.cast(loss, "float32") * ok[i]
                ZL[bx] = T.if_then_else(scale != 0, T.cast(scale * lse * lse, "float32") * ok[i], T.float32(0))
                LSE[bx] = T.cast(lse, "float32")
                if fused:  # the gradient's row terms in fp64, kept in mn/part/s (their passes are done):
                    # k = kt + kr, a eps / C, log s; the target's element apart (gt)
                    w64 = T.cast(wt[i], "float64")
                    kt = a * (1.0 - eps) * w64
                    kr = a * eps / T.cast(C, "float64") * w_all + zterm(T, b * 2.0 * scale, lse)
                    wct = a * eps / T.cast(C, "float64") * w64 if smoothing else T.float64(0)
                    gt[i] = target_grad(T, kt, kr, wct, (T.cast(zt[i], "float64") - mw) - ls, st[i]) * ok[i]
                    mn[i] = T.cast(kt + kr, "float32") * ok[i]
                    part[i] = T.cast(a * eps / T.cast(C, "float64"), "float32")
                    s[i] = ls
            if fused:
                write((X, W, G, mn, m, s, part, ti, gt, ok, cap), bx)

    return cross_entropy_fwd.with_attr("global_symbol", "cross_entropy_fwd_grad" if fused else "cross_entropy_fwd")


def build_backward(
    chunk: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    N, C = T.dynamic("N"), T.dynamic("C")

    write = gradient_pass(chunk, C, xt, weighted, smoothing, capped)

    @T.prim_func
    def cross_entropy_bwd(
        X: T.Tensor((N, C), xt),
        TG: T.Tensor((N,), tt),
        W: T.Tensor((C,), xt),
        DL: T.Tensor((N,), "float32"),
        DZ: T.Tensor((N,), "float32"),
        LSE: T.Tensor((N,), "float32"),
        DX: T.Tensor((N, C), xt),
        ignore_index: T.int64,
        eps: T.float64,
        scale: T.float64,
        cap: T.float32,
    ):
        with T.Kernel(N, threads=_threads(chunk)) as bx:
            ok = T.alloc_fragment((1,), "float32")  # 1 for a counted row, 0 for an ignored one
            ti = T.alloc_fragment((1,), "int64")  # the target (0 where ignored)
            kp = T.alloc_fragment((1,), "float32")  # the row's factor of p
            kw = T.alloc_fragment((1,), "float32")  # a eps / C, times w_c
            lz = T.alloc_fragment((1,), "float32")  # the row's lse
            gt = T.alloc_fragment((1,), "float32")  # the target's element (target_grad)
            if smoothing and weighted:  # W = sum of the weights
                e = T.alloc_fragment((1, chunk), "float32")
                part = T.alloc_fragment((1,), "float32")
                T.clear(e)
                for k in T.serial(T.ceildiv(C, chunk)):
                    for i, j in T.Parallel(1, chunk):
                        col = k * chunk + j
                        e[i, j] += T.if_then_else(col < C, W[col].astype("float32"), T.float32(0))
                T.reduce_sum(e, part, dim=1)
            for i in T.Parallel(1):
                t = TG[bx].astype("int64")
                counted = t != ignore_index
                tc = T.if_then_else(counted, t, T.int64(0))
                da = T.cast(DL[bx], "float64")
                lse = T.cast(LSE[bx], "float64")
                w64 = T.cast(T.if_then_else(counted, _weight(weighted, W, tc), T.float32(0)), "float64")
                w_all = (
                    (T.cast(part[i], "float64") if weighted else T.cast(C, "float64")) if smoothing else T.float64(0)
                )
                kt = da * (1.0 - eps) * w64  # k = kt + kr as the forward's, in fp64
                kr = da * eps / T.cast(C, "float64") * w_all + zterm(T, T.cast(DZ[bx], "float64") * 2.0 * scale, lse)
                wct = da * eps / T.cast(C, "float64") * w64 if smoothing else T.float64(0)
                xt_ = X[bx, tc].astype("float32")
                zt = softcapped(T, xt_, cap, lambda z, _: z) if capped else xt_
                st = softcapped(T, xt_, cap, lambda _, sl: sl) if capped else T.float32(1)
                ok[i] = T.if_then_else(counted, T.float32(1), T.float32(0))
                ti[i] = tc
                lz[i] = LSE[bx]
                gt[i] = target_grad(T, kt, kr, wct, T.cast(zt, "float64") - lse, st) * ok[i]
                kp[i] = T.cast(kt + kr, "float32") * ok[i]
                kw[i] = T.cast(da * eps / T.cast(C, "float64"), "float32")
            write((X, W, DX, kp, lz, None, kw, ti, gt, ok, cap), bx)

    return cross_entropy_bwd


lowered, forward, backward = cross_entropy_device.entries(build_forward, build_backward, bucket, RUNNER, "the GPU")
