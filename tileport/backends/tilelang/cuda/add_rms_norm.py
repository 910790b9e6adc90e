"""add_rms_norm as TileLang CUDA kernels: a fused forward (one row per CTA, rms_norm's layout in
``cuda/rms_norm.py``) and rms_norm's backward kernels over residual_out.

Forward: pass one reads x and residual, writes residual_out = x + residual (fp32 add, rounded once) and sums
its squares; pass two recomputes residual_out from x and residual (no read of what other threads wrote) and
writes y = residual_out * rstd * (w + offset). Backward: rms_norm's dx and dweight kernels over residual_out,
then the direct gradient added by torch (one more elementwise pass: not fused here).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ... import outputs
from .. import launch
from ..targets import RUNNERS, TL_DTYPE
from . import rms_norm, rows
from ._common import bucket

RUNNER = RUNNERS["cuda"]


def build_forward(
    chunk: int,
    x_dtype: torch.dtype,
    r_dtype: torch.dtype,
    s_dtype: torch.dtype,
    w_dtype: torch.dtype,
    y_dtype: torch.dtype,
    rsqrt: str = "exact",
):
    xt, rt, st, wt, yt = (TL_DTYPE[d] for d in (x_dtype, r_dtype, s_dtype, w_dtype, y_dtype))
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def add(X, R, S, acc, bx, col, i, j):
        v = (X[bx, col].astype("float32") + R[bx, col].astype("float32")).astype(st)
        S[bx, col] = v
        acc[i, j] += v.astype("float32") * v.astype("float32")

    @T.macro
    def scale(X, R, W, Y, r, offset, bx, col, i, j):
        v = (X[bx, col].astype("float32") + R[bx, col].astype("float32")).astype(st).astype("float32")
        Y[bx, col] = (v * r[i] * (W[col].astype("float32") + offset)).astype(yt)

    norm = rows.normalize(chunk, M, D, rows.row_sum(chunk, add, D, inside=True), rows.each(chunk, scale, D), rsqrt)

    @T.prim_func
    def add_rms_norm_fwd(
        X: T.Tensor((M, D), xt),
        R: T.Tensor((M, D), rt),
        W: T.Tensor((D,), wt),
        S: T.Tensor((M, D), st),
        Y: T.Tensor((M, D), yt),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
        offset: T.float32,
    ):
        norm((X, R, S), RSTD, eps, (X, R, W, Y), (offset,))

    return add_rms_norm_fwd


def lowered(dtype: torch.dtype, dim: int, rsqrt: str = "exact") -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "add_rms_norm_fwd": build_forward(b, dtype, dtype, dtype, dtype, dtype, rsqrt),
        "add_rms_norm_bwd": rms_norm.build_backward(b, dtype, dtype, dtype),
        "add_rms_norm_dweight": rms_norm.build_dweight(b, dtype, dtype),
    }


def forward(x, residual, weight, eps: float, offset: float, residual_dtype: torch.dtype, output_dtype: torch.dtype):
    """(y, residual_out, rstd) on the GPU (rows made contiguous: the kernels index with stride D)."""
    x, residual = x.contiguous(), residual.contiguous()
    M, D = x.shape
    y, s = outputs.empty_like(x, output_dtype), outputs.empty_like(x, residual_dtype)
    rstd = outputs.empty((M,), torch.float32, x.device)
    w, off = launch.weight_and_offset(weight, x, offset)
    kernel = RUNNER.kernel(
        "add_rms_norm_fwd", build_forward, bucket(D), x.dtype, residual.dtype, residual_dtype, w.dtype, output_dtype
    )
    kernel(x, residual, w, s, y, rstd, eps, off)
    return y, s, rstd


def backward(residual_out, rstd, dy, dresidual_out, weight, offset: float, eps: float):
    """(dsum in residual_out's dtype, dweight or None): rms_norm's kernels, then the direct gradient added."""
    dsum, dw = rms_norm.backward(residual_out, rstd, dy, weight, offset, "fp32", eps)
    return (dsum if dresidual_out is None else dsum.add_(dresidual_out)), dw
