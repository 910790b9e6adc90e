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

from .. import softmax_device
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, bucket, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]


def build_forward(width: int, x_dtype: torch.dtype, log: bool = False):
    xt = TL_DTYPE[x_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4)
    one_chunk = width < MAX_WIDTH
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)
    maxima = walk.row_max()
    total = walk.row_sum(lambda xu, mu, i, j: T.exp(xu[i, j].astype("float32") - mu[i]), inline_count=True)

    @T.prim_func
    def softmax_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), xt)):
        with T.Kernel(CORES) as core:
            xu, sq, yu = walk.tiles(xt, "float32", xt)
            part, mu, su = walk.row_vectors("float32", "float32", "float32")
            for _ in walk.blocks(core, M, D):
                maxima(mu, X, xu, sq, part)
                total(su, ((X, xu),), (xu, mu), sq, part)
                if log:  # a Python constant: one kernel per form
                    for i in walk.each_row():
                        su[i] = T.log(su[i])
                for _ in walk.chunks(() if one_chunk else ((X, xu),), ((yu, Y),)):
                    for i, j in walk.each():
                        z = xu[i, j].astype("float32") - mu[i]
                        yu[i, j] = (z - su[i] if log else T.exp(z) / su[i]).astype(xt)

    return softmax_fwd


def build_backward(width: int, y_dtype: torch.dtype, dy_dtype: torch.dtype, log: bool = False):
    yt, gt = TL_DTYPE[y_dtype], TL_DTYPE[dy_dtype]
    block_M = rows_per_block(width, 2 * y_dtype.itemsize + dy_dtype.itemsize + 4)
    M, D = T.dynamic("M"), T.dynamic("D")
    walk = Walk(width, block_M)

    @T.macro
    def dot(yu, gu, i, j):
        g = gu[i, j].astype("float32")
        return g if log else g * yu[i, j].astype("float32")

    dots = walk.row_sum(dot)

    @T.prim_func
    def softmax_bwd(Y: T.Tensor((M, D), yt), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), yt)):
        with T.Kernel(CORES) as core:
            yu, gu, pu, du = walk.tiles(yt, gt, "float32", yt)
            part, cu = walk.row_vectors("float32", "float32")
            for _ in walk.blocks(core, M, D):
                dots(cu, ((Y, yu), (DY, gu)), (yu, gu), pu, part)
                for _ in walk.chunks(((Y, yu), (DY, gu)), ((du, DX),)):
                    for i, j in walk.each():
                        y, g = yu[i, j].astype("float32"), gu[i, j].astype("float32")
                        du[i, j] = (g - T.exp(y) * cu[i] if log else y * (g - cu[i])).astype(yt)

    return softmax_bwd


lowered, forward, backward = softmax_device.entries(
    build_forward, build_backward, bucket, RUNNER, "an Ascend 950 NPU (torch_npu tensors)"
)
