"""l2norm forward and backward for Ascend arch35 (Ascend 950) in TileLang's ascend dialect, one kernel per
(dtypes, tile-width bucket); M and D are runtime values.

A persistent grid of ``CORES`` vector cores walks blocks of ``block_M`` rows. Each block is moved GM -> UB in
column chunks of the bucket's width (the next power of two from ``THREADS`` to ``MAX_WIDTH``); the last chunk
and the last block are moved with runtime lengths (``min(width, D - k * width)`` columns, ``min(block_M,
M - row)`` rows), so no copy leaves the tensor. Squares (or dy * y) are formed in a SIMT sub-kernel, masked
past D, and reduced per row with ``T.reduce_sum``; in buckets below ``MAX_WIDTH`` a row is one chunk and stays
in UB between the two passes, longer rows are streamed twice. ``T.Pipelined`` double-buffers the chunk copies
against the vector work. The hardware rsqrt is approximate; ``nr_steps`` Newton-Raphson steps
y <- y * (1.5 - 0.5 * s * y^2) refine it (default 1: about 1e-5 relative error from about 3e-3; 2 reaches fp32
rounding), as the A2/A3 practice does. The refinement is one expression per row (no UB round trip between
the steps): ThreadSync then has no in-branch conflict to hoist a barrier out of.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from .. import l2norm_device
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, NR_STEPS, bucket, refined_rsqrt, rows_per_block
from ._walk import Walk


def build_forward(width: int, x_dtype: torch.dtype, y_dtype: torch.dtype, nr_steps: int = NR_STEPS):
    xt, yt = TL_DTYPE[x_dtype], TL_DTYPE[y_dtype]
    block_M = rows_per_block(width, x_dtype.itemsize + 4 + y_dtype.itemsize)
    one_chunk = width < MAX_WIDTH  # D <= width: the row stays in UB between the passes
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    squares = walk.sum_squares()

    @T.prim_func
    def l2norm_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), yt), RSTD: T.Tensor((M,), "float32"), eps: T.float32):
        with T.Kernel(CORES) as core:
            xu, sq, yu = walk.tiles(xt, "float32", yt)
            part, ru = walk.row_vectors("float32", "float32")
            for _ in walk.blocks(core, M, D, stores=((ru, RSTD),)):
                squares(ru, X, xu, sq, part)
                for i in walk.each_row():
                    ru[i] = refined_rsqrt(ru[i] + eps, nr_steps)
                for _ in walk.chunks(() if one_chunk else ((X, xu),), ((yu, Y),)):
                    for i, j in walk.each():
                        yu[i, j] = (xu[i, j].astype("float32") * ru[i]).astype(yt)

    return l2norm_fwd


def build_backward(width: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dx = (dy - sum(dy * y) * y) * rstd with y = x * rstd recomputed in fp32 (rstd as saved)."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + dy_dtype.itemsize + 4)
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)

    @T.macro
    def dot(xu, gu, ru, i, j):
        y = xu[i, j].astype("float32") * ru[i]
        return y * gu[i, j].astype("float32")

    dots = walk.row_sum(dot)

    @T.prim_func
    def l2norm_bwd(
        X: T.Tensor((M, D), xt), RSTD: T.Tensor((M,), "float32"), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), xt)
    ):
        with T.Kernel(CORES) as core:
            xu, gu, pu, du = walk.tiles(xt, gt, "float32", xt)
            part, su, ru = walk.row_vectors("float32", "float32", "float32")
            for _ in walk.blocks(core, M, D, loads=((RSTD, ru),)):
                dots(su, ((X, xu), (DY, gu)), (xu, gu, ru), pu, part)
                for _ in walk.chunks(() if one_chunk else ((X, xu), (DY, gu)), ((du, DX),)):
                    for i, j in walk.each():
                        y = xu[i, j].astype("float32") * ru[i]
                        du[i, j] = ((gu[i, j].astype("float32") - su[i] * y) * ru[i]).astype(xt)

    return l2norm_bwd


RUNNER = RUNNERS["ascend"]


def lowered(dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {"l2norm_fwd": build_forward(b, dtype, dtype, nr_steps), "l2norm_bwd": build_backward(b, dtype, dtype)}


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, nr_steps: int = NR_STEPS):
    """(y, rstd) on an Ascend 950 NPU (torch_npu tensors) for a non-empty 2-D x."""
    return l2norm_device.forward(RUNNER, build_forward, bucket, x, eps, output_dtype, out, nr_steps)


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """dx in x's dtype; ``eps`` is not used: the fp32 form (``tileport.ops.l2norm``'s contract)."""
    return l2norm_device.backward(RUNNER, build_backward, bucket, x, rstd, dy)
