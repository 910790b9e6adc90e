"""rms_norm forward and backward for Ascend arch35 (Ascend 950) in TileLang's ascend dialect, one kernel per
(dtypes, casting, tile-width bucket); M and D are runtime values. Built on l2norm's Ascend layout
(``ascend/l2norm.py``): a persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB copies of
runtime length, SIMT vector sub-kernels, ``T.Pipelined`` double buffering, and the hardware rsqrt refined by
``nr_steps`` Newton-Raphson steps (default 1).

Forward: rstd = rsqrt(sum(x^2) / D + eps), y = x * rstd * (w + offset), the weight chunk copied beside
each x chunk. Backward: dx per row as l2norm's with g = dy * (w + offset) and a mean; dweight as one fp32
partial row per core in GM (``CORES x D``): each core adds its blocks' column sums of dy * n into its row
chunk by chunk, and the launcher sums the rows in core order (deterministic: a core's blocks are fixed by M).
Without a weight the launcher passes ones.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ... import outputs
from .. import launch, rms_norm_device
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, NR_STEPS, bucket, refined_rsqrt, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]


def build_forward(
    width: int,
    x_dtype: torch.dtype,
    w_dtype: torch.dtype,
    y_dtype: torch.dtype,
    casting: str = "fp32",
    nr_steps: int = NR_STEPS,
):
    xt, wt, yt = TL_DTYPE[x_dtype], TL_DTYPE[w_dtype], TL_DTYPE[y_dtype]
    llama = casting == "llama"
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4 + y_dtype.itemsize)  # x double-buffered
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    squares = walk.sum_squares()

    @T.prim_func
    def rms_norm_fwd(
        X: T.Tensor((M, D), xt),
        W: T.Tensor((D,), wt),
        Y: T.Tensor((M, D), yt),
        RSTD: T.Tensor((M,), "float32"),
        eps: T.float32,
        offset: T.float32,
    ):
        with T.Kernel(CORES) as core:
            xu, sq, yu = walk.tiles(xt, "float32", yt)
            wu = T.alloc_shared((width,), wt)
            part, ru = walk.row_vectors("float32", "float32")
            for _ in walk.blocks(core, M, D, stores=((ru, RSTD),)):
                squares(ru, X, xu, sq, part)
                for i in walk.each_row():
                    ru[i] = refined_rsqrt(ru[i] / T.cast(D, "float32") + eps, nr_steps)
                for _ in walk.chunks((() if one_chunk else ((X, xu),)) + ((W, wu),), ((yu, Y),)):
                    for i, j in walk.each():
                        nv = xu[i, j].astype("float32") * ru[i]
                        wv = wu[j].astype("float32") + offset
                        if llama:
                            yu[i, j] = (nv.astype(xt).astype("float32") * wv.astype(xt).astype("float32")).astype(yt)
                        else:
                            yu[i, j] = (nv * wv).astype(yt)

    return rms_norm_fwd


def build_backward(
    width: int, x_dtype: torch.dtype, dy_dtype: torch.dtype, w_dtype: torch.dtype, casting: str = "fp32"
):
    """dx = (g - n * mean(g * n)) * rstd per row; each core's dweight partial row += its blocks' dy * n."""
    xt, gt, wt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[w_dtype]
    llama = casting == "llama"
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + dy_dtype.itemsize + 8)
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    columns = walk.add_columns()

    @T.macro
    def dot(xu, gu, wu, ru, offset, i, j):
        g = gu[i, j].astype("float32") * (wu[j].astype("float32") + offset)
        return g * (xu[i, j].astype("float32") * ru[i])

    dots = walk.row_sum(dot)

    @T.prim_func
    def rms_norm_bwd(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), wt),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
        DWP: T.Tensor((CORES, D), "float32"),
        offset: T.float32,
    ):
        with T.Kernel(CORES) as core:
            xu, gu, pu, du = walk.tiles(xt, gt, "float32", xt)
            wu, cu, dwu = walk.vectors(wt, "float32", "float32")
            part, su, ru = walk.row_vectors("float32", "float32", "float32")
            for block in walk.blocks(core, M, D, loads=((RSTD, ru),), partials=(DWP,), pu=dwu):
                dots(su, ((X, xu), (DY, gu), (W, wu)), (xu, gu, wu, ru, offset), pu, part)
                for i in walk.each_row():
                    su[i] = su[i] / T.cast(D, "float32")  # the mean: a division, as torch's
                loads = () if one_chunk else ((X, xu), (DY, gu), (W, wu))
                for _ in walk.chunks(loads + ((DWP, dwu),), ((du, DX), (dwu, DWP))):
                    for i, j in walk.each():
                        nv = xu[i, j].astype("float32") * ru[i]
                        gy = gu[i, j].astype("float32")
                        du[i, j] = ((gy * (wu[j].astype("float32") + offset) - nv * su[i]) * ru[i]).astype(xt)
                        nw = nv.astype(xt).astype("float32") if llama else nv
                        pu[i, j] = T.if_then_else(i < block.rows, gy * nw, 0.0)
                    columns(pu, cu, dwu)

    return rms_norm_bwd


def lowered(dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS, casting: str = "fp32") -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "rms_norm_fwd": build_forward(b, dtype, dtype, dtype, casting, nr_steps),
        "rms_norm_bwd": build_backward(b, dtype, dtype, dtype, casting),
    }


def forward(
    x, weight, eps: float, offset: float, casting: str, output_dtype: torch.dtype, out=None, nr_steps: int = NR_STEPS
):
    """(y, rstd) on an Ascend 950 NPU (torch_npu tensors) for a non-empty 2-D x."""
    args = (x, weight, eps, offset, casting, output_dtype, out, nr_steps)
    return rms_norm_device.forward(RUNNER, build_forward, bucket, *args)


def backward(x, rstd, dy, weight, offset: float, casting: str, eps: float | None = None):
    """(dx, dweight or None); ``eps`` is not used: the fp32 form (``tileport.ops.rms_norm``'s contract)."""
    x, dy, rstd = x.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    w, off = launch.weight_and_offset(weight, x, offset)
    dx = outputs.empty_like(x)
    partials = outputs.empty((CORES, x.shape[1]), torch.float32, x.device)
    b = bucket(x.shape[1])
    RUNNER.kernel("rms_norm_bwd", build_backward, b, x.dtype, dy.dtype, w.dtype, casting)(
        x, dy, w, rstd, dx, partials, off
    )
    return dx, (None if weight is None else partials.sum(0))
