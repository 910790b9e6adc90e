"""What the CUDA row kernels share: the chunk bucket of a row length, threads per CTA, the rsqrt modes, and
the row pass that sums a per-element term over one row (one row per CTA, masked at the runtime D)."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T

MAX_THREADS = 128
MAX_CHUNK = 2048  # fp32 fragment columns per chunk: chunk / threads registers per thread
RSQRT_MODES = ("exact", "approx")


def bucket(D: int) -> int:
    """The chunk width that serves rows of D columns: a power of two in [32, MAX_CHUNK]."""
    return min(MAX_CHUNK, max(32, 1 << (max(D, 1) - 1).bit_length()))


def threads(chunk: int) -> int:
    return min(MAX_THREADS, chunk)


def rsqrt(s, mode: str):
    if mode not in RSQRT_MODES:
        raise ValueError(f"rsqrt must be one of {RSQRT_MODES}, got {mode!r}")
    return T.ieee_frsqrt(s) if mode == "exact" else T.rsqrt(s)


def sum_squares(chunk: int, xt: str):
    """A macro: ``out[0] = sum(X[row, :D]^2)`` in fp32, through a (1, chunk) fragment (a lane per column)
    reduced across the CTA's threads."""

    @T.macro
    def body(X, row, acc, out, D):
        T.clear(acc)
        for k in T.serial(T.ceildiv(D, chunk)):
            for i, j in T.Parallel(1, chunk):
                col = k * chunk + j
                v = T.if_then_else(col < D, X[row, col], T.cast(0, xt)).astype("float32")
                acc[i, j] += v * v
        T.reduce_sum(acc, out, dim=1)

    return body
