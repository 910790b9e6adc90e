"""softmax (and, with ``log``, log_softmax) forward and backward as TileLang CUDA kernels, one per (dtypes,
chunk bucket); M and D are dynamic. l2norm's CUDA layout (``cuda/l2norm.py``): one row per CTA, walked in
column chunks of D's bucket, masked by column only; no buffer beyond the output for rows of any length.

Forward: the row's max (``T.reduce_max``), the sum of exp(x - max), then y = exp(x - max) / sum (log:
(x - max) - log(sum)). Backward: c = sum(dy * y) (log: sum(dy)), dx = y * (dy - c) (log: dy - exp(y) * c).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .. import softmax_device
from ..targets import RUNNERS, TL_DTYPE
from . import rows
from ._common import bucket
from ._common import threads as _threads

RUNNER = RUNNERS["cuda"]


def build_forward(chunk: int, x_dtype: torch.dtype, log: bool = False):
    xt = TL_DTYPE[x_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def fold(X, acc, bx, col, i, j):
        acc[i, j] = T.max(acc[i, j], T.if_then_else(col < D, X[bx, col].astype("float32"), -T.infinity("float32")))

    @T.macro
    def add(X, m, acc, bx, col, i, j):
        acc[i, j] += T.if_then_else(col < D, T.exp(X[bx, col].astype("float32") - m[i]), T.float32(0))

    @T.macro
    def normalize(X, Y, m, s, bx, col, i, j):
        z = X[bx, col].astype("float32") - m[i]
        Y[bx, col] = (z - s[i] if log else T.exp(z) / s[i]).astype(xt)

    top, total, write = rows.row_max(chunk, fold, D), rows.row_sum(chunk, add, D), rows.each(chunk, normalize, D)

    @T.prim_func
    def softmax_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), xt)):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            m = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            top((X, acc), bx, acc, m)
            total((X, m, acc), bx, acc, s)
            if log:  # a Python constant: one kernel per form
                for i in T.Parallel(1):
                    s[i] = T.log(s[i])
            write((X, Y, m, s), bx)

    return softmax_fwd


def build_backward(chunk: int, y_dtype: torch.dtype, dy_dtype: torch.dtype, log: bool = False):
    yt, gt = TL_DTYPE[y_dtype], TL_DTYPE[dy_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def dot(Y, DY, acc, bx, col, i, j):
        g = rows.masked(DY, bx, col, D)
        acc[i, j] += g if log else g * rows.masked(Y, bx, col, D)

    @T.macro
    def grad(Y, DY, DX, c, bx, col, i, j):
        y, g = Y[bx, col].astype("float32"), DY[bx, col].astype("float32")
        DX[bx, col] = (g - T.exp(y) * c[i] if log else y * (g - c[i])).astype(yt)

    total, write = rows.row_sum(chunk, dot, D), rows.each(chunk, grad, D)

    @T.prim_func
    def softmax_bwd(Y: T.Tensor((M, D), yt), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), yt)):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            c = T.alloc_fragment((1,), "float32")
            total((Y, DY, acc), bx, acc, c)
            write((Y, DY, DX, c), bx)

    return softmax_bwd


lowered, forward, backward = softmax_device.entries(build_forward, build_backward, bucket, RUNNER, "the GPU")
