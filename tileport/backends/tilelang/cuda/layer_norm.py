"""layer_norm forward and backward as TileLang CUDA kernels, one per (dtypes, chunk bucket); M and D are
dynamic. l2norm's CUDA layout (``cuda/l2norm.py``): one row per CTA, walked in column chunks of D's bucket,
masked by column only.

Forward: the mean (a pass summing x), the variance (a pass summing (x - mean)^2 masked past D: two passes,
never E[x^2] - mean^2), rstd = rsqrt(var + eps) (``__frsqrt_rn``; ``rsqrt="approx"``: the hardware one),
y = (x - mean) * rstd * w + b. Backward: one kernel writes dx per row from sum(g) and sum(g * xhat); a second
sums dweight (dy * xhat) and dbias (dy) over rows, one CTA per column chunk walking every row in order
(deterministic: no atomics). The launcher passes ones and zeros for a weight or bias not given.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ... import outputs
from .. import layer_norm_device
from ..targets import RUNNERS, TL_DTYPE, vectors_or_defaults
from . import rows
from ._common import bucket
from ._common import rsqrt as _rsqrt
from ._common import threads as _threads

RUNNER = RUNNERS["cuda"]


def build_forward(chunk: int, x_dtype: torch.dtype, p_dtype: torch.dtype, y_dtype: torch.dtype, rsqrt: str = "exact"):
    xt, pt, yt = TL_DTYPE[x_dtype], TL_DTYPE[p_dtype], TL_DTYPE[y_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def add(X, acc, bx, col, i, j):
        acc[i, j] += rows.masked(X, bx, col, D)

    @T.macro
    def square(X, m, acc, bx, col, i, j):
        xc = T.if_then_else(col < D, X[bx, col].astype("float32") - m[i], T.float32(0))
        acc[i, j] += xc * xc

    @T.macro
    def scale(X, W, B, Y, m, r, bx, col, i, j):
        xhat = (X[bx, col].astype("float32") - m[i]) * r[i]
        Y[bx, col] = (xhat * W[col].astype("float32") + B[col].astype("float32")).astype(yt)

    total, squares, write = rows.row_sum(chunk, add, D), rows.row_sum(chunk, square, D), rows.each(chunk, scale, D)

    @T.prim_func
    def layer_norm_fwd(
        X: T.Tensor((M, D), xt),
        W: T.Tensor((D,), pt),
        B: T.Tensor((D,), pt),
        Y: T.Tensor((M, D), yt),
        MEAN: T.Tensor((M,), "float32"),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
    ):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            m = T.alloc_fragment((1,), "float32")
            r = T.alloc_fragment((1,), "float32")
            total((X, acc), bx, acc, m)
            rows.mean(m, D)
            squares((X, m, acc), bx, acc, r)
            for i in T.Parallel(1):
                r[i] = _rsqrt(r[i] / T.cast(D, "float32") + eps, rsqrt)
            for i in T.Parallel(1):
                MEAN[bx] = m[i]
                RSTD[bx] = r[i]
            write((X, W, B, Y, m, r), bx)

    return layer_norm_fwd


def build_backward(chunk: int, x_dtype: torch.dtype, dy_dtype: torch.dtype, p_dtype: torch.dtype):
    """dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd with g = dy * w, one row per CTA."""
    xt, gt, pt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[p_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def sums(X, DY, W, MEAN, RSTD, acc_g, acc_gx, bx, col, i, j):
        ok = col < D
        xhat = T.if_then_else(ok, (X[bx, col].astype("float32") - MEAN[bx]) * RSTD[bx], T.float32(0))
        g = T.if_then_else(ok, DY[bx, col].astype("float32") * W[col].astype("float32"), T.float32(0))
        acc_g[i, j] += g
        acc_gx[i, j] += g * xhat

    @T.macro
    def grad(X, DY, W, MEAN, RSTD, c1, c2, DX, bx, col, i, j):
        xhat = (X[bx, col].astype("float32") - MEAN[bx]) * RSTD[bx]
        g = DY[bx, col].astype("float32") * W[col].astype("float32")
        DX[bx, col] = (((g - xhat * c2[i]) - c1[i]) * RSTD[bx]).astype(xt)  # g rounded before the mean comes off

    over, write = rows.walk(chunk, sums, D), rows.each(chunk, grad, D)

    @T.prim_func
    def layer_norm_bwd(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), pt),
        MEAN: T.Tensor((M,), "float32"),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
    ):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc_g = T.alloc_fragment((1, chunk), "float32")
            acc_gx = T.alloc_fragment((1, chunk), "float32")
            c1 = T.alloc_fragment((1,), "float32")
            c2 = T.alloc_fragment((1,), "float32")
            T.clear(acc_g)
            T.clear(acc_gx)
            over((X, DY, W, MEAN, RSTD, acc_g, acc_gx), bx)
            T.reduce_sum(acc_g, c1, dim=1)
            T.reduce_sum(acc_gx, c2, dim=1)
            for i in T.Parallel(1):
                c1[i] = c1[i] / T.cast(D, "float32")
                c2[i] = c2[i] / T.cast(D, "float32")
            write((X, DY, W, MEAN, RSTD, c1, c2, DX), bx)

    return layer_norm_bwd


def build_param_grads(chunk: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dweight[col] = sum over rows of dy * xhat, dbias[col] = sum over rows of dy, in fp32, rows in order."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def add(X, DY, MEAN, RSTD, acc_w, acc_b, row, col, j):
        ok = col < D
        gy = T.if_then_else(ok, DY[row, col], T.cast(0, gt)).astype("float32")
        xhat = T.if_then_else(ok, (X[row, col].astype("float32") - MEAN[row]) * RSTD[row], T.float32(0))
        acc_w[j] += gy * xhat
        acc_b[j] += gy

    walk = rows.columns(chunk, add, M, D)

    @T.prim_func
    def layer_norm_param_grads(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        MEAN: T.Tensor((M,), "float32"),
        RSTD: T.Tensor((M,), "float32"),
        DW: T.Tensor((D,), "float32"),
        DB: T.Tensor((D,), "float32"),
    ):
        walk((X, DY, MEAN, RSTD), (DW, DB))

    return layer_norm_param_grads


def lowered(dtype: torch.dtype, dim: int, rsqrt: str = "exact") -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "layer_norm_fwd": build_forward(b, dtype, dtype, dtype, rsqrt),
        "layer_norm_bwd": build_backward(b, dtype, dtype, dtype),
        "layer_norm_param_grads": build_param_grads(b, dtype, dtype),
    }


def forward(x, weight, bias, eps: float, output_dtype: torch.dtype, out=None):
    """(y, mean, rstd) on the GPU for a non-empty 2-D x."""
    return layer_norm_device.forward(RUNNER, build_forward, bucket, x, weight, bias, eps, output_dtype, out)


def backward(x, mean, rstd, dy, weight, bias, eps: float | None = None):
    """(dx, dweight or None, dbias or None); ``eps`` is not used (the statistics are used as given)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    x, dy = x.contiguous(), dy.contiguous()
    mean, rstd = mean.to(torch.float32).contiguous(), rstd.to(torch.float32).contiguous()
    w, _ = vectors_or_defaults(weight, None, x)
    dx = outputs.empty_like(x)
    b = bucket(x.shape[1])
    RUNNER.kernel("layer_norm_bwd", build_backward, b, x.dtype, dy.dtype, w.dtype)(x, dy, w, mean, rstd, dx)
    if weight is None and not with_dbias:
        return dx, None, None
    dw, db = (outputs.empty(x.shape[1], torch.float32, x.device) for _ in range(2))
    RUNNER.kernel("layer_norm_param_grads", build_param_grads, b, x.dtype, dy.dtype)(x, dy, mean, rstd, dw, db)
    return dx, (dw if weight is not None else None), (db if with_dbias else None)
