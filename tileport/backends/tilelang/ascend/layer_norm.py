"""layer_norm forward and backward for Ascend arch35 (Ascend 950) in TileLang's ascend dialect, one kernel per
(dtypes, tile-width bucket); M and D are runtime values. rms_norm's Ascend layout (``ascend/rms_norm.py``): a
persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB copies of runtime length, SIMT
vector sub-kernels, ``T.Pipelined`` double buffering, the hardware rsqrt refined by ``nr_steps``
Newton-Raphson steps (default 1).

Forward: the mean (``row_sum`` of x), the variance (``row_sum`` of (x - mean)^2: two passes, never
E[x^2] - mean^2), y = (x - mean) * rstd * w + b. Backward: sum(g) and sum(g * xhat) per row (g = dy * w,
xhat = (x - mean) * rstd), dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd; dweight and dbias as fp32
partial rows per core in GM (``CORES x D`` each), each core adding its blocks' column sums of dy * xhat and dy,
summed by the launcher in core order (deterministic). The launcher passes ones and zeros for a weight or bias
not given.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ... import outputs
from .. import layer_norm_device
from ..targets import RUNNERS, TL_DTYPE, vectors_or_defaults
from ._common import CORES, MAX_WIDTH, NR_STEPS, bucket, refined_rsqrt, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]
BWD_WIDTH = (
    2048  # the backward's tiles and three column vectors, double-buffered at 4 bytes: at 4096 they passed the UB
)


def build_forward(
    width: int, x_dtype: torch.dtype, p_dtype: torch.dtype, y_dtype: torch.dtype, nr_steps: int = NR_STEPS
):
    xt, pt, yt = TL_DTYPE[x_dtype], TL_DTYPE[p_dtype], TL_DTYPE[y_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4 + y_dtype.itemsize)  # x double-buffered
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    total = walk.row_sum(lambda xu, i, j: xu[i, j].astype("float32"), inline_count=True)
    centered = walk.row_sum(
        lambda xu, mu, i, j: (xu[i, j].astype("float32") - mu[i]) * (xu[i, j].astype("float32") - mu[i]), True
    )

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
        with T.Kernel(CORES) as core:
            xu, sq, yu = walk.tiles(xt, "float32", yt)
            wu, bu = walk.vectors(pt, pt)
            part, mu, ru = walk.row_vectors("float32", "float32", "float32")
            for _ in walk.blocks(core, M, D, stores=((mu, MEAN), (ru, RSTD))):
                total(mu, ((X, xu),), (xu,), sq, part)
                for i in walk.each_row():
                    mu[i] = mu[i] / T.cast(D, "float32")
                centered(ru, ((X, xu),), (xu, mu), sq, part)
                for i in walk.each_row():
                    ru[i] = refined_rsqrt(ru[i] / T.cast(D, "float32") + eps, nr_steps)
                for _ in walk.chunks((() if one_chunk else ((X, xu),)) + ((W, wu), (B, bu)), ((yu, Y),)):
                    for i, j in walk.each():
                        xhat = (xu[i, j].astype("float32") - mu[i]) * ru[i]
                        yu[i, j] = (xhat * wu[j].astype("float32") + bu[j].astype("float32")).astype(yt)

    return layer_norm_fwd


def build_backward(width: int, x_dtype: torch.dtype, dy_dtype: torch.dtype, p_dtype: torch.dtype):
    """dx per row; each core's dweight and dbias partial rows += its blocks' column sums of dy * xhat and dy."""
    xt, gt, pt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype], TL_DTYPE[p_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + dy_dtype.itemsize + 12)
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    add = walk.add_row_sums()

    @T.prim_func
    def layer_norm_bwd(
        X: T.Tensor((M, D), xt),
        DY: T.Tensor((M, D), gt),
        W: T.Tensor((D,), pt),
        MEAN: T.Tensor((M,), "float32"),
        RSTD: T.Tensor((M,), "float32"),
        DX: T.Tensor((M, D), xt),
        DWP: T.Tensor((CORES, D), "float32"),
        DBP: T.Tensor((CORES, D), "float32"),
    ):
        with T.Kernel(CORES) as core:
            xu, gu, pu, qu, du = walk.tiles(xt, gt, "float32", "float32", xt)
            wu, cu, dwu, dbu = walk.vectors(pt, "float32", "float32", "float32")
            part, s1, s2, mu, ru = walk.row_vectors("float32", "float32", "float32", "float32", "float32")
            stats = ((MEAN, mu), (RSTD, ru))
            for block in walk.blocks(core, M, D, loads=stats, partials=(DWP, DBP), pu=dwu):
                for i in walk.each_row():
                    s1[i] = 0.0
                    s2[i] = 0.0
                for chunk in walk.chunks(((X, xu), (DY, gu), (W, wu))):
                    for i, j in walk.each():
                        g = gu[i, j].astype("float32") * wu[j].astype("float32")
                        pu[i, j] = T.if_then_else(j < chunk.n, g, 0.0)
                        qu[i, j] = T.if_then_else(j < chunk.n, g * ((xu[i, j].astype("float32") - mu[i]) * ru[i]), 0.0)
                    add(pu, part, s1)
                    add(qu, part, s2)
                for i in walk.each_row():
                    s1[i] = s1[i] / T.cast(D, "float32")  # the means: divisions, as torch's
                    s2[i] = s2[i] / T.cast(D, "float32")
                loads = ((X, xu), (DY, gu), (W, wu), (DWP, dwu), (DBP, dbu))
                for _ in walk.chunks(loads, ((du, DX), (dwu, DWP), (dbu, DBP))):
                    for i, j in walk.each():
                        xhat = (xu[i, j].astype("float32") - mu[i]) * ru[i]
                        gy = gu[i, j].astype("float32")
                        du[i, j] = (((gy * wu[j].astype("float32") - xhat * s2[i]) - s1[i]) * ru[i]).astype(xt)
                        pu[i, j] = T.if_then_else(i < block.rows, gy * xhat, 0.0)
                        qu[i, j] = T.if_then_else(i < block.rows, gy, 0.0)
                    for j in walk.each_column():  # dweight's and dbias's column sums, in row order
                        cu[j] = 0.0
                        for i in T.serial(block_M):
                            cu[j] += pu[i, j]
                        dwu[j] += cu[j]
                        cu[j] = 0.0
                        for i in T.serial(block_M):
                            cu[j] += qu[i, j]
                        dbu[j] += cu[j]

    return layer_norm_bwd


def lowered(dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {
        "layer_norm_fwd": build_forward(b, dtype, dtype, dtype, nr_steps),
        "layer_norm_bwd": build_backward(min(b, BWD_WIDTH), dtype, dtype, dtype),
    }


def forward(x, weight, bias, eps: float, output_dtype: torch.dtype, out=None, nr_steps: int = NR_STEPS):
    """(y, mean, rstd) on an Ascend 950 NPU (torch_npu tensors) for a non-empty 2-D x."""
    return layer_norm_device.forward(RUNNER, build_forward, bucket, x, weight, bias, eps, output_dtype, out, nr_steps)


def backward(x, mean, rstd, dy, weight, bias, eps: float | None = None):
    """(dx, dweight or None, dbias or None); ``eps`` is not used (the statistics are used as given)."""
    with_dbias = bias is not None  # only its presence is used (torch's output mask)
    x, dy = x.contiguous(), dy.contiguous()
    mean, rstd = mean.to(torch.float32).contiguous(), rstd.to(torch.float32).contiguous()
    w, _ = vectors_or_defaults(weight, None, x)
    dx = outputs.empty_like(x)
    dwp, dbp = (outputs.empty((CORES, x.shape[1]), torch.float32, x.device) for _ in range(2))
    RUNNER.kernel("layer_norm_bwd", build_backward, min(bucket(x.shape[1]), BWD_WIDTH), x.dtype, dy.dtype, w.dtype)(
        x, dy, w, mean, rstd, dx, dwp, dbp
    )
    return dx, (dwp.sum(0) if weight is not None else None), (dbp.sum(0) if with_dbias else None)
