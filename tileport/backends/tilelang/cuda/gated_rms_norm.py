"""gated_rms_norm forward and backward as TileLang CUDA kernels, one per (dtypes, activation, norm_before_gate,
chunk bucket); M and D are dynamic. rms_norm's CUDA layout (``cuda/rms_norm.py``): one row per CTA, walked in
column chunks of D's bucket, masked by column only.

Forward: u = x (or x * act(gate)), rstd = rsqrt(sum(u^2) / D + eps) (``__frsqrt_rn``), y = u * rstd * w
(* act(gate)). Backward: one kernel writes dx and dgate per row (du = (g - n * mean(g * n)) * rstd, g the
gradient reaching n = u * rstd); a second sums dweight over rows, one CTA per column chunk walking every row in
order (deterministic). Without a weight the launcher passes ones.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from functools import partial

import tilelang.language as T
import torch

from ... import outputs
from .. import activations, launch
from ..targets import RUNNERS, TL_DTYPE, vectors_or_defaults
from . import rows
from ._common import bucket
from ._common import threads as _threads

RUNNER = RUNNERS["cuda"]


act, act_grad = partial(activations.act, T), partial(activations.act_grad, T)  # (activation, value) in this dialect


def build_forward(
    chunk: int,
    x_dtype,
    g_dtype,
    w_dtype,
    y_dtype,
    activation: str = "silu",
    norm_before_gate: bool = True,
    rsqrt: str = "exact",
):
    xt, zt, wt, yt = TL_DTYPE[x_dtype], TL_DTYPE[g_dtype], TL_DTYPE[w_dtype], TL_DTYPE[y_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    def u_of(x, z):
        return x if norm_before_gate else x * act(activation, z)

    @T.macro
    def square(X, Z, acc, bx, col, i, j):
        x = rows.masked(X, bx, col, D)
        z = rows.masked(Z, bx, col, D)
        u = u_of(x, z)
        acc[i, j] += u * u

    @T.macro
    def scale(X, Z, W, Y, r, bx, col, i, j):
        z = Z[bx, col].astype("float32")
        y = u_of(X[bx, col].astype("float32"), z) * r[i] * W[col].astype("float32")
        Y[bx, col] = (y * act(activation, z) if norm_before_gate else y).astype(yt)

    norm = rows.normalize(chunk, M, D, rows.row_sum(chunk, square, D), rows.each(chunk, scale, D), rsqrt)

    @T.prim_func
    def gated_rms_norm_fwd(
        X: T.Tensor((M, D), xt),
        Z: T.Tensor((M, D), zt),
        W: T.Tensor((D,), wt),
        Y: T.Tensor((M, D), yt),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
    ):
        norm((X, Z), RSTD, eps, (X, Z, W, Y), ())

    return gated_rms_norm_fwd


def build_backward(
    chunk: int, x_dtype, g_dtype, dy_dtype, w_dtype, activation: str = "silu", norm_before_gate: bool = True
):
    """dx and dgate per row, one row per CTA."""
    xt, zt, gt, wt = TL_DTYPE[x_dtype], TL_DTYPE[g_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[w_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    def u_of(x, z):
        return x if norm_before_gate else x * act(activation, z)

    def g_of(gy, w, z):  # the gradient reaching n
        return gy * w * act(activation, z) if norm_before_gate else gy * w

    @T.macro
    def dot(X, Z, DY, W, r, acc, bx, col, i, j):
        x = rows.masked(X, bx, col, D)
        z = rows.masked(Z, bx, col, D)
        gy = rows.masked(DY, bx, col, D)
        w = rows.masked(W, None, col, D)
        acc[i, j] += g_of(gy, w, z) * (u_of(x, z) * r[i])

    @T.macro
    def grad(X, Z, DY, W, r, s, DX, DZ, bx, col, i, j):
        x, z = X[bx, col].astype("float32"), Z[bx, col].astype("float32")
        gw = DY[bx, col].astype("float32") * W[col].astype("float32")
        n = u_of(x, z) * r[i]
        du = (g_of(DY[bx, col].astype("float32"), W[col].astype("float32"), z) - n * s[i]) * r[i]
        if norm_before_gate:
            DX[bx, col] = du.astype(xt)
            DZ[bx, col] = (gw * n * act_grad(activation, z)).astype(zt)
        else:
            DX[bx, col] = (du * act(activation, z)).astype(xt)
            DZ[bx, col] = (du * x * act_grad(activation, z)).astype(zt)

    total, write = rows.row_sum(chunk, dot, D), rows.each(chunk, grad, D)

    @T.prim_func
    def gated_rms_norm_bwd(
        X: T.Tensor((M, D), xt),
        Z: T.Tensor((M, D), zt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), wt),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
        DZ: T.Tensor((M, D), zt),
    ):
        with T.Kernel(M, threads=_threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            s = T.alloc_fragment((1,), "float32")
            r = T.alloc_fragment((1,), "float32")
            rows.fetch(r, RSTD, bx)
            total((X, Z, DY, W, r, acc), bx, acc, s)
            rows.mean(s, D)
            write((X, Z, DY, W, r, s, DX, DZ), bx)

    return gated_rms_norm_bwd


def build_dweight(chunk: int, x_dtype, g_dtype, dy_dtype, activation: str = "silu", norm_before_gate: bool = True):
    """dweight[col] = sum over rows of dy * n * act(gate) (or dy * n), in fp32, rows in order."""
    xt, zt, gt = TL_DTYPE[x_dtype], TL_DTYPE[g_dtype], TL_DTYPE[dy_dtype]
    M, D = T.dynamic("M"), T.dynamic("D")

    @T.macro
    def add(X, Z, DY, RSTD, acc, row, col, j):
        x = rows.masked(X, row, col, D)
        a = act(activation, rows.masked(Z, row, col, D))
        n = (x if norm_before_gate else x * a) * RSTD[row]
        term = n * a if norm_before_gate else n
        acc[j] += rows.masked(DY, row, col, D) * term

    walk = rows.columns(chunk, add, M, D)

    @T.prim_func
    def gated_rms_norm_dweight(
        X: T.Tensor((M, D), xt),
        Z: T.Tensor((M, D), zt),
        DY: T.Tensor((M, D), gt),
        RSTD: T.Tensor((M,), "float32"),
        DW: T.Tensor((D,), "float32"),
    ):
        walk((X, Z, DY, RSTD), (DW,))

    return gated_rms_norm_dweight


def lowered(
    dtype: torch.dtype, dim: int, rsqrt: str = "exact", activation: str = "silu", norm_before_gate: bool = True
) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "gated_rms_norm_fwd": build_forward(b, dtype, dtype, dtype, dtype, activation, norm_before_gate, rsqrt),
        "gated_rms_norm_bwd": build_backward(b, dtype, dtype, dtype, dtype, activation, norm_before_gate),
        "gated_rms_norm_dweight": build_dweight(b, dtype, dtype, dtype, activation, norm_before_gate),
    }


def forward(x, gate, weight, eps: float, activation: str, norm_before_gate: bool, output_dtype: torch.dtype, out=None):
    """(y, rstd) on the GPU for non-empty 2-D rows (made contiguous: the kernels index with stride D)."""
    x, gate = x.contiguous(), gate.contiguous()
    M, D = x.shape
    y, rstd = launch.row_outputs(x, output_dtype, out)
    w, _ = vectors_or_defaults(weight, None, x)
    key = (bucket(D), x.dtype, gate.dtype, w.dtype, output_dtype, activation, norm_before_gate)
    RUNNER.kernel("gated_rms_norm_fwd", build_forward, *key)(x, gate, w, y, rstd, eps)
    return y, rstd


def backward(x, gate, rstd, dy, weight, eps: float, activation: str, norm_before_gate: bool):
    """(dx, dgate, dweight or None) in the fp32 form; ``eps`` is not used."""
    x, gate, dy, rstd = x.contiguous(), gate.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    w, _ = vectors_or_defaults(weight, None, x)
    dx, dgate = outputs.empty_like(x), outputs.empty_like(gate)
    b = bucket(x.shape[1])
    RUNNER.kernel(
        "gated_rms_norm_bwd", build_backward, b, x.dtype, gate.dtype, dy.dtype, w.dtype, activation, norm_before_gate
    )(x, gate, dy, w, rstd, dx, dgate)
    if weight is None:
        return dx, dgate, None
    dw = outputs.empty(x.shape[1], torch.float32, x.device)
    RUNNER.kernel(
        "gated_rms_norm_dweight", build_dweight, b, x.dtype, gate.dtype, dy.dtype, activation, norm_before_gate
    )(x, gate, dy, rstd, dw)
    return dx, dgate, dw
