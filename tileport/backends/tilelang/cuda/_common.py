"""What the CUDA row kernels share: the chunk bucket of a row length, threads per CTA, the rsqrt modes (their
walks are ``rows.py``'s)."""

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
