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

from ... import outputs
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, NR_STEPS, THREADS, bucket, fill, refined_rsqrt, rows_per_block, sum_squares


def build_forward(width: int, x_dtype: torch.dtype, y_dtype: torch.dtype, nr_steps: int = NR_STEPS):
    xt, yt = TL_DTYPE[x_dtype], TL_DTYPE[y_dtype]
    block_M = rows_per_block(width, x_dtype.itemsize + 4 + y_dtype.itemsize)
    one_chunk = width < MAX_WIDTH  # D <= width: the row stays in UB between the passes
    M, D = T.dynamic("M"), T.dynamic("D")
    squares = sum_squares(width, block_M)

    @T.prim_func
    def l2norm_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), yt), RSTD: T.Tensor((M,), "float32"), eps: T.float32):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            sq = T.alloc_shared((block_M, width), "float32")
            yu = T.alloc_shared((block_M, width), yt)
            part = T.alloc_shared((block_M,), "float32")
            ru = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            chunks = T.ceildiv(D, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    r0 = b * block_M
                    rows = T.min(block_M, M - r0)
                    squares(X, xu, sq, part, ru, ru, r0, rows, D)
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            ru[i] = refined_rsqrt(ru[i] + eps, nr_steps)
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        if not one_chunk:
                            T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                yu[i, j] = (xu[i, j].astype("float32") * ru[i]).astype(yt)
                        T.copy(yu[0:rows, 0:n], Y[r0 : r0 + rows, k * width : k * width + n])
                    T.copy(ru[0:rows], RSTD[r0 : r0 + rows])

    return l2norm_fwd


def build_backward(width: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dx = (dy - sum(dy * y) * y) * rstd with y = x * rstd recomputed in fp32 (rstd as saved)."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + dy_dtype.itemsize + 4)
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    clear = fill(block_M)

    @T.prim_func
    def l2norm_bwd(
        X: T.Tensor((M, D), xt), RSTD: T.Tensor((M,), "float32"), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), xt)
    ):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            gu = T.alloc_shared((block_M, width), gt)
            pu = T.alloc_shared((block_M, width), "float32")
            du = T.alloc_shared((block_M, width), xt)
            part = T.alloc_shared((block_M,), "float32")
            su = T.alloc_shared((block_M,), "float32")
            ru = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            chunks = T.ceildiv(D, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    r0 = b * block_M
                    rows = T.min(block_M, M - r0)
                    T.copy(RSTD[r0 : r0 + rows], ru[0:rows])
                    clear(su)
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                        T.copy(DY[r0 : r0 + rows, k * width : k * width + n], gu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                y = xu[i, j].astype("float32") * ru[i]
                                pu[i, j] = T.if_then_else(j < n, y * gu[i, j].astype("float32"), 0.0)
                        T.reduce_sum(pu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                su[i] += part[i]
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        if not one_chunk:
                            T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                            T.copy(DY[r0 : r0 + rows, k * width : k * width + n], gu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                y = xu[i, j].astype("float32") * ru[i]
                                du[i, j] = ((gu[i, j].astype("float32") - su[i] * y) * ru[i]).astype(xt)
                        T.copy(du[0:rows, 0:n], DX[r0 : r0 + rows, k * width : k * width + n])

    return l2norm_bwd


RUNNER = RUNNERS["ascend"]


def lowered(dtype: torch.dtype, dim: int, nr_steps: int = NR_STEPS) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    b = bucket(dim)
    return {"l2norm_fwd": build_forward(b, dtype, dtype, nr_steps), "l2norm_bwd": build_backward(b, dtype, dtype)}


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, nr_steps: int = NR_STEPS):
    """(y, rstd) on an Ascend 950 NPU (torch_npu tensors) for a non-empty 2-D x (rows are made contiguous: the
    kernels index them with stride D)."""
    x = x.contiguous()
    M, D = x.shape
    y, rstd = (
        out if out is not None else (outputs.empty_like(x, output_dtype), outputs.empty((M,), torch.float32, x.device))
    )
    RUNNER.kernel("l2norm_fwd", build_forward, bucket(D), x.dtype, output_dtype, nr_steps)(x, y, rstd, eps)
    return y, rstd


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """dx in x's dtype; ``eps`` is not used: the fp32 form (``tileport.ops.l2norm``'s contract)."""
    x, dy, rstd = x.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    dx = outputs.empty_like(x)
    RUNNER.kernel("l2norm_bwd", build_backward, bucket(x.shape[1]), x.dtype, dy.dtype)(x, rstd, dy, dx)
    return dx
