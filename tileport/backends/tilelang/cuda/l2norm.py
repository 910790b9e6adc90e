"""l2norm forward and backward as TileLang CUDA kernels, one per (D, dtypes, rsqrt mode); M is dynamic.

Each CTA takes one row and walks it in column chunks of at most ``MAX_CHUNK``: pass one adds the
per-element terms into a (1, chunk) fp32 fragment (a lane per column: blocked accumulation), reduces it
with ``T.reduce_sum``; pass two re-reads the chunk (L2-resident) and writes the output. Chunks are padded to a
multiple of the thread count and masked: a fragment whose extent is not a multiple of the threads fails
TileLang's layout inference. One row per CTA, with 32-128 threads by D: several rows per CTA lowered 5x
slower here (7 s against 1.5 s per kernel, also the first call's JIT time on a GPU) for no gain at D >= 128.
rsqrt: "exact" is ``T.ieee_frsqrt`` (``__frsqrt_rn``, correctly rounded); "approx" is ``T.rsqrt``
(``rsqrt.approx.f32``, about 2 ulp), the faster hardware instruction.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ..targets import TL_DTYPE, DeviceKernelCache, ceil_to

MAX_THREADS = 128
MAX_CHUNK = 2048  # fp32 fragment columns per chunk: chunk / threads registers per thread
RSQRT_MODES = ("exact", "approx")


def _shape(D: int) -> tuple[int, int, int, int]:
    """(block_M, threads, chunk, chunks) for rows of D."""
    threads = min(MAX_THREADS, ceil_to(D, 32))
    chunk = min(ceil_to(D, threads), MAX_CHUNK)
    return 1, threads, chunk, -(-D // chunk)


def _rsqrt(s, mode: str):
    if mode not in RSQRT_MODES:
        raise ValueError(f"rsqrt must be one of {RSQRT_MODES}, got {mode!r}")
    return T.ieee_frsqrt(s) if mode == "exact" else T.rsqrt(s)


def build_forward(D: int, x_dtype: torch.dtype, y_dtype: torch.dtype, rsqrt: str = "exact"):
    xt, yt = TL_DTYPE[x_dtype], TL_DTYPE[y_dtype]
    block_M, threads, chunk, chunks = _shape(D)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_fwd(X: T.Tensor((M, D), xt), Y: T.Tensor((M, D), yt), RSTD: T.Tensor((M,), "float32"), eps: T.float32):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            acc = T.alloc_fragment((block_M, chunk), "float32")
            r = T.alloc_fragment((block_M,), "float32")
            T.clear(acc)
            for k in T.serial(chunks):
                for i, j in T.Parallel(block_M, chunk):
                    row, col = bx * block_M + i, k * chunk + j
                    v = T.if_then_else((row < M) & (col < D), X[row, col], T.cast(0, xt)).astype("float32")
                    acc[i, j] += v * v
            T.reduce_sum(acc, r, dim=1)
            for i in T.Parallel(block_M):
                r[i] = _rsqrt(r[i] + eps, rsqrt)
            for i in T.Parallel(block_M):
                if bx * block_M + i < M:
                    RSTD[bx * block_M + i] = r[i]
            for k in T.serial(chunks):
                for i, j in T.Parallel(block_M, chunk):
                    row, col = bx * block_M + i, k * chunk + j
                    if (row < M) & (col < D):
                        Y[row, col] = (X[row, col].astype("float32") * r[i]).astype(yt)

    return l2norm_fwd


def build_backward(D: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    """dx = (dy - sum(dy * y) * y) * rstd with y = x * rstd recomputed in fp32."""
    xt, gt = TL_DTYPE[x_dtype], TL_DTYPE[dy_dtype]
    block_M, threads, chunk, chunks = _shape(D)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_bwd(X: T.Tensor((M, D), xt), RSTD: T.Tensor((M,), "float32"), DY: T.Tensor((M, D), gt), DX: T.Tensor((M, D), xt)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            acc = T.alloc_fragment((block_M, chunk), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            r = T.alloc_fragment((block_M,), "float32")
            for i in T.Parallel(block_M):
                r[i] = T.if_then_else(bx * block_M + i < M, RSTD[bx * block_M + i], 0.0)
            T.clear(acc)
            for k in T.serial(chunks):
                for i, j in T.Parallel(block_M, chunk):
                    row, col = bx * block_M + i, k * chunk + j
                    ok = (row < M) & (col < D)
                    x = T.if_then_else(ok, X[row, col], T.cast(0, xt)).astype("float32")
                    g = T.if_then_else(ok, DY[row, col], T.cast(0, gt)).astype("float32")
                    acc[i, j] += (x * r[i]) * g
            T.reduce_sum(acc, s, dim=1)
            for k in T.serial(chunks):
                for i, j in T.Parallel(block_M, chunk):
                    row, col = bx * block_M + i, k * chunk + j
                    if (row < M) & (col < D):
                        y = X[row, col].astype("float32") * r[i]
                        DX[row, col] = ((DY[row, col].astype("float32") - s[i] * y) * r[i]).astype(xt)

    return l2norm_bwd


RUNNER = DeviceKernelCache("cuda", "tvm_ffi")


def forward(x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, rsqrt: str = "exact"):
    """(y, rstd) on the GPU for a 2-D x with unit-stride rows."""
    return RUNNER.forward(build_forward, x, eps, output_dtype, out, rsqrt=rsqrt)


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return RUNNER.backward(build_backward, x, rstd, dy)
