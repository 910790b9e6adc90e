"""rms_norm forward and backward as TileLang CUDA kernels, one per (dtypes, casting, chunk bucket); M and D are
dynamic. Built on l2norm's CUDA layout (``cuda/l2norm.py``): one row per CTA, walked in column chunks of D's
bucket, masked by column only.

Forward: rstd = rsqrt(sum(x^2) / D + eps) (``__frsqrt_rn``; ``rsqrt="approx"``: the hardware one), y = x * rstd * (w +
offset). Backward: one
kernel writes dx per row; a second sums dweight over rows, one CTA per column chunk walking every row in
order (deterministic: no atomics). Without a weight the launcher passes ones (the kernels always scale).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ... import outputs
from .. import launch, rms_norm_device
from ..targets import RUNNERS, TL_DTYPE
from . import rows
from ._common import bucket
from ._common import threads as _threads

RUNNER = RUNNERS["cuda"]


def _scaled(n, w, xt, llama: bool):
    return (n.astype(xt).astype("float32") * w.astype(xt).astype("float32")) if llama else n * w


def build_forward(
    chunk: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype,
    y_dtype: torch.dtype,
    casting: str = "fp32",
    rsqrt: str = "exact",
):
    xt, wt, yt = TL_DTYPE[x_dtype], TL_DTYPE[w_dtype], TL_DTYPE[y_dtype]
    llama = casting == "llama"
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def scale(X, W, Y, r, offset, bx, col, i, j):
        n = X[bx, col].astype("float32") * r[i]
        Y[bx, col] = _scaled(n, W[col].astype("float32") + offset, xt, llama).astype(yt)

    norm = rows.normalize(chunk, M, D, rows.sum_squares(chunk, D), rows.each(chunk, scale, D), rsqrt)

    @T.prim_func
    def rms_norm_fwd(
        X: T.Tensor((M, D), xt),
        W: T.Tensor((D,), wt),
        Y: T.Tensor((M, D), yt),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
        offset: T.float32,
    ):
        norm((X,), RSTD, eps, (X, W, Y), (offset,))

    return rms_norm_fwd


def build_backward(chunk: int, x_dtype: torch.dtype, dy_dtype: torch.dtype, w_dtype: torch.dtype):
    """dx = (g - n * mean(g * n)) * rstd with n = x * rstd and g = dy * (w + offset), one row per CTA."""
    xt, gt, wt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[w_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def dot(X, DY, W, r, offset, acc, bx, col, i, j):
        x = rows.masked(X, bx, col, D)
        g = rows.masked(DY, bx, col, D)
        w = rows.masked(W, None, col, D) + offset
        acc[i, j] += (g * w) * (x * r[i])

    @T.macro
    def grad(X, DY, W, r, offset, s, DX, bx, col, i, j):
        n = X[bx, col].astype("float32") * r[i]
        g = DY[bx, col].astype("float32") * (W[col].astype("float32") + offset)
        DX[bx, col] = ((g - n * s[i]) * r[i]).astype(xt)

    total, write = rows.row_sum(chunk, dot, D), rows.each(chunk, grad, D)

    @T.prim_func
    def rms_norm_bwd(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), wt),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
        offset: T.float32,
    ):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            s = T.alloc_fragment((1,), "float32")
            r = T.alloc_fragment((1,), "float32")
            rows.fetch(r, RSTD, bx)
            total((X, DY, W, r, offset, acc), bx, acc, s)
            rows.mean(s, D)
            write((X, DY, W, r, offset, s, DX), bx)

    return rms_norm_bwd


def build_dweight(chunk: int, x_dtype: torch.dtype, dy_dtype: torch.dtype, casting: str = "fp32"):
    """dweight[col] = sum over rows of dy * n (n rounded to x's dtype for llama), in fp32, rows in order."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    llama = casting == "llama"
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def add(X, DY, RSTD, acc, row, col, j):
        n = rows.masked(X, row, col, D) * RSTD[row]
        n = n.astype(xt).astype("float32") if llama else n
        acc[j] += rows.masked(DY, row, col, D) * n

    walk = rows.columns(chunk, add, M, D)

    @T.prim_func
    def rms_norm_dweight(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        RSTD: T.Tensor((M,), "float32"),
        DW: T.Tensor((D,), "float32"),
    ):
        walk((X, DY, RSTD), (DW,))

    return rms_norm_dweight


def lowered(dtype: torch.dtype, dim: int, rsqrt: str = "exact", casting: str = "fp32") -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "rms_norm_fwd": build_forward(b, dtype, dtype, dtype, casting, rsqrt),
        "rms_norm_bwd": build_backward(b, dtype, dtype, dtype),
        "rms_norm_dweight": build_dweight(b, dtype, dtype, casting),
    }


def forward(x, weight, eps: float, offset: float, casting: str, output_dtype: torch.dtype, out=None):
    """(y, rstd) on the GPU for a non-empty 2-D x."""
    args = (x, weight, eps, offset, casting, output_dtype, out)
    return rms_norm_device.forward(RUNNER, build_forward, bucket, *args)


def backward(x, rstd, dy, weight, offset: float, casting: str, eps: float | None = None):
    """(dx, dweight or None); ``eps`` is not used: the fp32 form (``tileport.ops.rms_norm``'s contract)."""
    x, dy, rstd = x.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    w, off = launch.weight_and_offset(weight, x, offset)
    dx = outputs.empty_like(x)
    b = bucket(x.shape[1])
    RUNNER.kernel("rms_norm_bwd", build_backward, b, x.dtype, dy.dtype, w.dtype)(x, dy, w, rstd, dx, off)
    if weight is None:
        return dx, None
    dw = outputs.empty(x.shape[1], torch.float32, x.device)
    RUNNER.kernel("rms_norm_dweight", build_dweight, b, x.dtype, dy.dtype, casting)(x, dy, rstd, dw)
    return dx, dw
