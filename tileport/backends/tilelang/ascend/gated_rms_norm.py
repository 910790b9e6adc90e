"""gated_rms_norm forward and backward for Ascend arch35 (Ascend 950) in TileLang's ascend dialect, one kernel per
(dtypes, activation, norm_before_gate, tile-width bucket); M and D are runtime values. rms_norm's Ascend layout
(``ascend/rms_norm.py``): a persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB copies of
runtime length, SIMT vector sub-kernels, double-buffered chunks, the hardware rsqrt refined by ``nr_steps``
Newton-Raphson steps.

Forward: u = x (or x * act(gate)), rstd = rsqrt(sum(u^2) / D + eps), y = u * rstd * w (* act(gate)).
Backward: dx and dgate per row from du = (g - n * mean(g * n)) * rstd (g the gradient reaching n = u * rstd);
dweight as one fp32 partial row per core in GM, summed by the launcher in core order (deterministic). The
backward holds six row tiles (x, gate, dy, a product, dx, dgate): its tiles are at most ``BWD_WIDTH`` wide so
both stages fit the unified buffer. Without a weight the launcher passes ones.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from functools import partial

import tilelang.ascend.language as T
import torch

from ... import outputs
from .. import activations, launch
from ..targets import RUNNERS, TL_DTYPE, vectors_or_defaults
from ._common import CORES, NR_STEPS, bucket, refined_rsqrt, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]
BWD_WIDTH = 2048  # six row tiles and three column vectors, double-buffered, at 4 bytes: within the UB


act, act_grad = partial(activations.act, T), partial(activations.act_grad, T)  # (activation, value) in this dialect


def build_forward(
    width: int,
    x_dtype,
    g_dtype,
    w_dtype,
    y_dtype,
    activation: str = "silu",
    norm_before_gate: bool = True,
    nr_steps: int = NR_STEPS,
):
    xt, zt, wt, yt = TL_DTYPE[x_dtype], TL_DTYPE[g_dtype], TL_DTYPE[w_dtype], TL_DTYPE[y_dtype]
    block_M = rows_per_block(width, x_dtype.itemsize + g_dtype.itemsize + 4 + y_dtype.itemsize)
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)

    def u_of(x, z):
        return x if norm_before_gate else x * act(activation, z)

    @T.macro
    def square(xu, zu, i, j):
        u = u_of(xu[i, j].astype("float32"), zu[i, j].astype("float32"))
        return u * u

    squares = walk.row_sum(square)

    @T.prim_func
    def gated_rms_norm_fwd(
        X: T.Tensor((M, D), xt),
        Z: T.Tensor((M, D), zt),
        W: T.Tensor((D,), wt),
        Y: T.Tensor((M, D), yt),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
    ):
        with T.Kernel(CORES) as core:
            xu, zu, sq, yu = walk.tiles(xt, zt, "float32", yt)
            wu = T.alloc_shared((width,), wt)
            part, ru = walk.row_vectors("float32", "float32")
            for _ in walk.blocks(core, M, D, stores=((ru, RSTD),)):
                squares(ru, ((X, xu), (Z, zu)), (xu, zu), sq, part)
                for i in walk.each_row():
                    ru[i] = refined_rsqrt(ru[i] / T.cast(D, "float32") + eps, nr_steps)
                for _ in walk.chunks(((X, xu), (Z, zu), (W, wu)), ((yu, Y),)):
                    for i, j in walk.each():
                        z = zu[i, j].astype("float32")
                        y = u_of(xu[i, j].astype("float32"), z) * ru[i] * wu[j].astype("float32")
                        yu[i, j] = (y * act(activation, z) if norm_before_gate else y).astype(yt)

    return gated_rms_norm_fwd


def build_backward(
    width: int, x_dtype, g_dtype, dy_dtype, w_dtype, activation: str = "silu", norm_before_gate: bool = True
):
    """dx and dgate per row; each core's dweight partial row += its blocks' column sums of dweight's terms."""
    xt, zt, gt, wt = TL_DTYPE[x_dtype], TL_DTYPE[g_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[w_dtype]
    # per column: x, gate and dy double-buffered, the fp32 product, dx and dgate
    block_M = rows_per_block(
        width, 2 * (x_dtype.itemsize + g_dtype.itemsize + dy_dtype.itemsize) + 4 + x_dtype.itemsize + g_dtype.itemsize
    )
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    columns = walk.add_columns()

    def u_of(x, z):
        return x if norm_before_gate else x * act(activation, z)

    def g_of(gy, w, z):
        return gy * w * act(activation, z) if norm_before_gate else gy * w

    @T.macro
    def dot(xu, zu, gu, wu, ru, i, j):
        z = zu[i, j].astype("float32")
        g = g_of(gu[i, j].astype("float32"), wu[j].astype("float32"), z)
        return g * (u_of(xu[i, j].astype("float32"), z) * ru[i])

    dots = walk.row_sum(dot)

    @T.prim_func
    def gated_rms_norm_bwd(
        X: T.Tensor((M, D), xt),
        Z: T.Tensor((M, D), zt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), wt),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
        DZ: T.Tensor((M, D), zt),
        DWP: T.Tensor((CORES, D), "float32"),
    ):
        with T.Kernel(CORES) as core:
            xu, zu, gu, pu, du, dzu = walk.tiles(xt, zt, gt, "float32", xt, zt)
            wu, cu, dwu = walk.vectors(wt, "float32", "float32")
            part, su, ru = walk.row_vectors("float32", "float32", "float32")
            for block in walk.blocks(core, M, D, loads=((RSTD, ru),), partials=(DWP,), pu=dwu):
                loads = ((X, xu), (Z, zu), (DY, gu), (W, wu))
                dots(su, loads, (xu, zu, gu, wu, ru), pu, part)
                for i in walk.each_row():
                    su[i] = su[i] / T.cast(D, "float32")  # the mean: a division, as torch's
                for _ in walk.chunks(loads + ((DWP, dwu),), ((du, DX), (dzu, DZ), (dwu, DWP))):
                    for i, j in walk.each():
                        x, z = xu[i, j].astype("float32"), zu[i, j].astype("float32")
                        gy, w = gu[i, j].astype("float32"), wu[j].astype("float32")
                        nv = u_of(x, z) * ru[i]
                        dn = (g_of(gy, w, z) - nv * su[i]) * ru[i]
                        if norm_before_gate:
                            du[i, j] = dn.astype(xt)
                            dzu[i, j] = (gy * w * nv * act_grad(activation, z)).astype(zt)
                            pu[i, j] = T.if_then_else(i < block.rows, gy * nv * act(activation, z), 0.0)
                        else:
                            du[i, j] = (dn * act(activation, z)).astype(xt)
                            dzu[i, j] = (dn * x * act_grad(activation, z)).astype(zt)
                            pu[i, j] = T.if_then_else(i < block.rows, gy * nv, 0.0)
                    columns(pu, cu, dwu)

    return gated_rms_norm_bwd


def widths(D: int) -> tuple[int, int]:
    """(forward, backward) tile widths for rows of D columns."""
    b = bucket(D)
    return b, min(b, BWD_WIDTH)


def lowered(
    dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS, activation: str = "silu", norm_before_gate: bool = True
) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    fw, bw = widths(dim)
    return {
        "gated_rms_norm_fwd": build_forward(fw, dtype, dtype, dtype, dtype, activation, norm_before_gate, nr_steps),
        "gated_rms_norm_bwd": build_backward(bw, dtype, dtype, dtype, dtype, activation, norm_before_gate),
    }


def forward(
    x,
    gate,
    weight,
    eps: float,
    activation: str,
    norm_before_gate: bool,
    output_dtype: torch.dtype,
    out=None,
    nr_steps: int = NR_STEPS,
):
    """(y, rstd) on an Ascend 950 NPU (torch_npu tensors) for non-empty 2-D rows."""
    x, gate = x.contiguous(), gate.contiguous()
    M, D = x.shape
    y, rstd = launch.row_outputs(x, output_dtype, out)
    w, _ = vectors_or_defaults(weight, None, x)
    key = (widths(D)[0], x.dtype, gate.dtype, w.dtype, output_dtype, activation, norm_before_gate, nr_steps)
    RUNNER.kernel("gated_rms_norm_fwd", build_forward, *key)(x, gate, w, y, rstd, eps)
    return y, rstd


def backward(x, gate, rstd, dy, weight, eps: float, activation: str, norm_before_gate: bool):
    """(dx, dgate, dweight or None) in the fp32 form; ``eps`` is not used."""
    x, gate, dy, rstd = x.contiguous(), gate.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    w, _ = vectors_or_defaults(weight, None, x)
    dx, dgate = outputs.empty_like(x), outputs.empty_like(gate)
    partials = outputs.empty((CORES, x.shape[1]), torch.float32, x.device)
    key = (widths(x.shape[1])[1], x.dtype, gate.dtype, dy.dtype, w.dtype, activation, norm_before_gate)
    RUNNER.kernel("gated_rms_norm_bwd", build_backward, *key)(x, gate, dy, w, rstd, dx, dgate, partials)
    return dx, dgate, (None if weight is None else partials.sum(0))
