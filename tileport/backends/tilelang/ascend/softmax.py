"""softmax (and, with ``log``, log_softmax) forward and backward for Ascend arch35 (Ascend 950) in TileLang's
ascend dialect, one kernel per (dtypes, tile-width bucket); M and D are runtime values. l2norm's Ascend
layout (``ascend/l2norm.py``): a persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB
copies of runtime length, SIMT vector sub-kernels, ``T.Pipelined`` double buffering.

Forward: the rows' max (``row_max``), the sum of exp(x - max) (``row_sum``), then y = exp(x - max) / sum
(log: (x - max) - log(sum)). Backward: c = sum(dy * y) (log: sum(dy)), dx = y * (dy - c) (log:
dy - exp(y) * c). No rsqrt here: the hardware exp and log are used as they are.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ... import outputs
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, THREADS, bucket, fill, row_max, row_sum, rows_per_block

RUNNER = RUNNERS["ascend"]


def build_forward(width: int, x_dtype: torch.dtype, log: bool = False):
    xt = TL_DTYPE[x_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4)
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    maxima = row_max(width, block_M)
    total = row_sum(width, block_M, lambda v, aux, i: T.exp(v - aux[i]))

    @T.prim_func
    def softmax_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), xt)):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            sq = T.alloc_shared((block_M, width), "float32")
            yu = T.alloc_shared((block_M, width), xt)
            part = T.alloc_shared((block_M,), "float32")
            mu = T.alloc_shared((block_M,), "float32")
            su = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            chunks = T.ceildiv(D, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    r0 = b * block_M
                    rows = T.min(block_M, M - r0)
                    maxima(X, xu, sq, part, mu, r0, rows, D)
                    total(X, xu, sq, part, su, mu, r0, rows, D)
                    if log:  # a Python constant: one kernel per form
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                su[i] = T.log(su[i])
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        if not one_chunk:
                            T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                z = xu[i, j].astype("float32") - mu[i]
                                yu[i, j] = (z - su[i] if log else T.exp(z) / su[i]).astype(xt)
                        T.copy(yu[0:rows, 0:n], Y[r0 : r0 + rows, k * width : k * width + n])

    return softmax_fwd


def build_backward(width: int, y_dtype: torch.dtype, dy_dtype: torch.dtype, log: bool = False):
    yt, gt = TL_DTYPE[y_dtype], TL_DTYPE[dy_dtype]
    block_M = rows_per_block(width, 2 * y_dtype.itemsize + dy_dtype.itemsize + 4)
    M, D = T.dynamic("M"), T.dynamic("D")
    clear = fill(block_M)

    @T.prim_func
    def softmax_bwd(Y: T.Tensor((M, D), yt), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), yt)):
        with T.Kernel(CORES) as core:
            yu = T.alloc_shared((block_M, width), yt)
            gu = T.alloc_shared((block_M, width), gt)
            pu = T.alloc_shared((block_M, width), "float32")
            du = T.alloc_shared((block_M, width), yt)
            part = T.alloc_shared((block_M,), "float32")
            cu = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            chunks = T.ceildiv(D, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    r0 = b * block_M
                    rows = T.min(block_M, M - r0)
                    clear(cu)
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        T.copy(Y[r0 : r0 + rows, k * width : k * width + n], yu[0:rows, 0:n])
                        T.copy(DY[r0 : r0 + rows, k * width : k * width + n], gu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                g = gu[i, j].astype("float32")
                                pu[i, j] = T.if_then_else(j < n, g if log else g * yu[i, j].astype("float32"), 0.0)
                        T.reduce_sum(pu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                cu[i] += part[i]
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, D - k * width)
                        T.copy(Y[r0 : r0 + rows, k * width : k * width + n], yu[0:rows, 0:n])
                        T.copy(DY[r0 : r0 + rows, k * width : k * width + n], gu[0:rows, 0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                y, g = yu[i, j].astype("float32"), gu[i, j].astype("float32")
                                du[i, j] = (g - T.exp(y) * cu[i] if log else y * (g - cu[i])).astype(yt)
                        T.copy(du[0:rows, 0:n], DX[r0 : r0 + rows, k * width : k * width + n])

    return softmax_bwd


def lowered(dtype: torch.dtype, dim: int, log: bool = False) -> dict:
    """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
    op = "log_softmax" if log else "softmax"
    b = bucket(dim)
    return {f"{op}_fwd": build_forward(b, dtype, log), f"{op}_bwd": build_backward(b, dtype, dtype, log)}


def run_forward(x, log: bool = False):
    x = x.contiguous()
    y = outputs.empty_like(x)
    RUNNER.kernel("log_softmax_fwd" if log else "softmax_fwd", build_forward, bucket(x.shape[1]), x.dtype, log)(x, y)
    return y


def run_backward(y, dy, log: bool = False):
    y, dy = y.contiguous(), dy.contiguous()
    dx = outputs.empty_like(y)
    RUNNER.kernel(
        "log_softmax_bwd" if log else "softmax_bwd", build_backward, bucket(y.shape[1]), y.dtype, dy.dtype, log
    )(y, dy, dx)
    return dx


def forward(x):
    """y on an Ascend 950 NPU (torch_npu tensors) for a non-empty 2-D x."""
    return run_forward(x)


def backward(y, dy):
    return run_backward(y, dy)
