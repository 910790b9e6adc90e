"""What the Ascend arch35 kernels share: the persistent grid, UB budget and tile-width buckets, the
Newton-Raphson-refined hardware rsqrt and a SIMT fill. The row kernels' walk and reductions are ``_walk.py``'s."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
from tilelang import tvm

tirx = tvm.tirx

CORES = 32  # vector cores of the persistent grid
THREADS = 128  # SIMT threads of a vector sub-kernel
UB_BUDGET = 96 * 1024  # bytes of UB for one stage's tiles (two stages are allocated by T.Pipelined)
MAX_WIDTH = 4096  # widest tile: 16 bytes per column (the fp32 backward's four tiles) * 4096 fits UB_BUDGET
NR_STEPS = 1


def bucket(D: int) -> int:
    """The UB tile width that serves rows of D columns: a power of two in [THREADS, MAX_WIDTH]. Powers of two
    also avoid a layout-inference failure seen with several rows of e.g. 33 * 128 columns (tilelang 0.1.15)."""
    return min(MAX_WIDTH, max(THREADS, 1 << (max(D, 1) - 1).bit_length()))


def rows_per_block(width: int, bytes_per_col: int) -> int:
    return max(1, min(8, UB_BUDGET // (width * bytes_per_col)))


def refined_rsqrt(s, steps: int):
    """The hardware rsqrt of s and ``steps`` Newton-Raphson steps, as one expression whose intermediate values
    are let-bound (each computed once)."""
    sv, ys = tirx.Var("s", "float32"), [tirx.Var(f"y{k}", "float32") for k in range(steps + 1)]
    body = ys[-1]
    for k in range(steps, 0, -1):
        body = tirx.Let(ys[k], ys[k - 1] * (1.5 - 0.5 * sv * ys[k - 1] * ys[k - 1]), body)
    return tirx.Let(sv, s, tirx.Let(ys[0], T.rsqrt(sv), body))


def fill(length: int, value: float = 0.0):
    """A macro: ``v[i] = value`` for i < ``length`` in a SIMT sub-kernel (a UB vector per row or per column)."""

    @T.macro
    def body(v):
        with T.SimtVF(threads=THREADS):
            for i in T.Parallel(length):
                v[i] = value

    return body
