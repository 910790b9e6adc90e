"""l2norm forward and backward for Ascend arch35 (Ascend 950) in TileLang's ascend dialect.

A persistent grid of ``CORES`` vector cores walks blocks of ``block_M`` rows. Each block is moved GM -> UB in
column chunks that fit the Unified Buffer; squares (or dy * y) are formed in a SIMT sub-kernel and reduced
per row with ``T.reduce_sum``; rows of one chunk are kept in UB between the two passes, longer rows are
streamed twice. ``T.Pipelined`` double-buffers the chunk copies against the vector work.
The hardware rsqrt is approximate; ``nr_steps`` Newton-Raphson steps y <- y * (1.5 - 0.5 * s * y^2) refine
it (default 1: about 1e-5 relative error from about 3e-3; 2 reaches fp32 rounding), as the A2/A3 practice does.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ..targets import TL_DTYPE, DeviceKernelCache, ceil_to

CORES = 32  # vector cores of the persistent grid
THREADS = 128  # SIMT threads of a vector sub-kernel
UB_BUDGET = 96 * 1024  # bytes of UB for one stage's tiles (two stages are allocated by T.Pipelined)
NR_STEPS = 1


def _tiles(D: int, bytes_per_col: int) -> tuple[int, int, int, int]:
    """(block_M, chunk, chunks, width): ``chunks`` equal chunks of ``chunk`` columns cover a row; UB tiles
    are ``width`` (chunk padded to the SIMT thread count) wide and block_M * width * bytes_per_col fits UB.

    The ascend layout inference needs a SIMT loop extent that the threads divide, and GM copies that stay
    inside the tensor: tiles are padded and masked, copies are sliced to the chunk, and a long row is cut
    into chunks that divide D (the largest that fits; multiples of the thread count preferred).
    """
    cap = max(THREADS, (UB_BUDGET // bytes_per_col) // THREADS * THREADS)
    if D <= cap:
        chunk = D
    else:
        aligned = (c for c in range(cap, THREADS - 1, -THREADS) if D % c == 0)
        chunk = next(aligned, None) or next(c for c in range(cap, 0, -1) if D % c == 0)
    width = ceil_to(chunk, THREADS)
    block_M = max(1, min(8, UB_BUDGET // (width * bytes_per_col)))
    if width & (width - 1):  # observed (tilelang 0.1.15): no layout for several rows of e.g. 33 * 128 columns
        block_M = 1
    return block_M, chunk, D // chunk, width


def build_forward(D: int, x_dtype: torch.dtype, y_dtype: torch.dtype, nr_steps: int = NR_STEPS):
    xt, yt = TL_DTYPE[x_dtype], TL_DTYPE[y_dtype]
    block_M, chunk, chunks, width = _tiles(D, x_dtype.itemsize + 4 + y_dtype.itemsize)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), yt), RSTD: T.Tensor((M,), "float32"), eps: T.float32):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            sq = T.alloc_shared((block_M, width), "float32")
            yu = T.alloc_shared((block_M, width), yt)
            part = T.alloc_shared((block_M,), "float32")
            ru = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            ru[i] = 0.0
                    for k in T.Pipelined(chunks, num_stages=2):
                        T.copy(X[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], xu[:, 0:chunk])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                v = xu[i, j].astype("float32")
                                sq[i, j] = T.if_then_else(j < chunk, v * v, 0.0)
                        T.reduce_sum(sq, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                ru[i] += part[i]
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            part[i] = ru[i] + eps  # s
                            ru[i] = T.rsqrt(part[i])  # the approximate hardware rsqrt
                            for _ in T.unroll(nr_steps):  # Newton-Raphson: y <- y * (1.5 - 0.5 * s * y^2)
                                ru[i] = ru[i] * (1.5 - 0.5 * part[i] * ru[i] * ru[i])
                    for k in T.Pipelined(chunks, num_stages=2):
                        if chunks > 1:  # one chunk: the row is still in UB from the first pass
                            T.copy(X[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], xu[:, 0:chunk])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                yu[i, j] = (xu[i, j].astype("float32") * ru[i]).astype(yt)
                        T.copy(yu[:, 0:chunk], Y[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk])
                    T.copy(ru, RSTD[b * block_M : (b + 1) * block_M])

    return l2norm_fwd


def build_backward(D: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dx = (dy - sum(dy * y) * y) * rstd with y = x * rstd recomputed in fp32 (rstd as saved)."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    block_M, chunk, chunks, width = _tiles(D, 2 * x_dtype.itemsize + dy_dtype.itemsize + 4)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_bwd(X: T.Tensor((M, D), xt), RSTD: T.Tensor((M,), "float32"), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), xt)):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            gu = T.alloc_shared((block_M, width), gt)
            pu = T.alloc_shared((block_M, width), "float32")
            du = T.alloc_shared((block_M, width), xt)
            part = T.alloc_shared((block_M,), "float32")
            su = T.alloc_shared((block_M,), "float32")
            ru = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(M, block_M)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                b = core + t * CORES
                if b < blocks:
                    T.copy(RSTD[b * block_M : (b + 1) * block_M], ru)
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            su[i] = 0.0
                    for k in T.Pipelined(chunks, num_stages=2):
                        T.copy(X[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], xu[:, 0:chunk])
                        T.copy(DY[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], gu[:, 0:chunk])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                y = xu[i, j].astype("float32") * ru[i]
                                pu[i, j] = T.if_then_else(j < chunk, y * gu[i, j].astype("float32"), 0.0)
                        T.reduce_sum(pu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                su[i] += part[i]
                    for k in T.Pipelined(chunks, num_stages=2):
                        if chunks > 1:
                            T.copy(X[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], xu[:, 0:chunk])
                            T.copy(DY[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk], gu[:, 0:chunk])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                y = xu[i, j].astype("float32") * ru[i]
                                du[i, j] = ((gu[i, j].astype("float32") - su[i] * y) * ru[i]).astype(xt)
                        T.copy(du[:, 0:chunk], DX[b * block_M : (b + 1) * block_M, k * chunk : (k + 1) * chunk])

    return l2norm_bwd


RUNNER = DeviceKernelCache("ascend", "tvm_ffi")


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, nr_steps: int = NR_STEPS):
    """(y, rstd) on an Ascend 950 NPU (torch_npu tensors) for a 2-D x with unit-stride rows."""
    return RUNNER.forward(build_forward, x, eps, output_dtype, out, nr_steps=nr_steps)


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return RUNNER.backward(build_backward, x, rstd, dy)
