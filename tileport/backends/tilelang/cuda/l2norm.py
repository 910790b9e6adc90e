"""l2norm forward and backward as TileLang CUDA kernels, one per (dtypes, rsqrt mode, chunk bucket); M and D
are dynamic.

Each CTA takes one row and walks it in column chunks (a lane per column, reduced with ``T.reduce_sum``), then
re-reads each chunk to write the output. The chunk is D's bucket, a power of two from 32 to ``MAX_CHUNK``
(TileLang's layout inference needs the fragment to divide by the thread count), masked at the runtime D. One
row per CTA keeps only the column masked (several rows per CTA lowered far slower: docs/kernels.md).
rsqrt: "exact" is ``T.ieee_frsqrt`` (correctly rounded); "approx" is ``T.rsqrt`` (``rsqrt.approx.f32``).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .. import l2norm_device
from ..targets import RUNNERS, TL_DTYPE
from . import rows
from ._common import bucket
from ._common import threads as _threads


def build_forward(chunk: int, x_dtype: torch.dtype, y_dtype: torch.dtype, rsqrt: str = "exact"):
    xt, yt = TL_DTYPE[x_dtype], TL_DTYPE[y_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def scale(X, Y, r, bx, col, i, j):
        Y[bx, col] = (X[bx, col].astype("float32") * r[i]).astype(yt)

    norm = rows.normalize(chunk, M, D, rows.sum_squares(chunk, D), rows.each(chunk, scale, D), rsqrt, mean=False)

    @T.prim_func
    def l2norm_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), yt), RSTD: T.Tensor((M,), "float32"), eps: T.float32):
        norm((X,), RSTD, eps, (X, Y), ())

    return l2norm_fwd


def build_backward(chunk: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dx = (dy - sum(dy * y) * y) * rstd with y = x * rstd recomputed in fp32."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def dot(X, DY, r, acc, bx, col, i, j):
        x = rows.masked(X, bx, col, D)
        g = rows.masked(DY, bx, col, D)
        acc[i, j] += (x * r[i]) * g

    @T.macro
    def grad(X, DY, r, s, DX, bx, col, i, j):
        y = X[bx, col].astype("float32") * r[i]
        DX[bx, col] = ((DY[bx, col].astype("float32") - s[i] * y) * r[i]).astype(xt)

    total, write = rows.row_sum(chunk, dot, D), rows.each(chunk, grad, D)

    @T.prim_func
    def l2norm_bwd(
        X: T.Tensor((M, D), xt), RSTD: T.Tensor((M,), "float32"), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), xt)
    ):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            s = T.alloc_fragment((1,), "float32")
            r = T.alloc_fragment((1,), "float32")
            rows.fetch(r, RSTD, bx)
            total((X, DY, r, acc), bx, acc, s)
            write((X, DY, r, s, DX), bx)

    return l2norm_bwd


RUNNER = RUNNERS["cuda"]


def lowered(dtype: torch.dtype, dim: int, rsqrt: str = "exact") -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {"l2norm_fwd": build_forward(b, dtype, dtype, rsqrt), "l2norm_bwd": build_backward(b, dtype, dtype)}


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, rsqrt: str = "exact"):
    """(y, rstd) on the GPU for a non-empty 2-D x."""
    return l2norm_device.forward(RUNNER, build_forward, bucket, x, eps, output_dtype, out, rsqrt)


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """dx in x's dtype; ``eps`` is not used: the fp32 form (``tileport.ops.l2norm``'s contract)."""
    return l2norm_device.backward(RUNNER, build_backward, bucket, x, rstd, dy)
