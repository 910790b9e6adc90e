"""What the Ascend arch35 row kernels share: the persistent grid, UB budget and tile-width buckets, the
Newton-Raphson-refined hardware rsqrt, and the pass that sums a per-element term (x^2, ...) over a block of rows
chunk by chunk."""

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


def row_sum(width: int, block_M: int, term):
    """A macro: ``ru[i] = sum over j < D of term(X[r0 + i, j], aux, i)`` for the block's rows (``aux``: a
    per-row UB vector the term may read, such as a mean), the chunks moved GM -> UB (runtime lengths), the
    terms computed in a SIMT sub-kernel masked past D, reduced per row and accumulated; double-buffered. The
    last chunk stays in ``xu`` (the whole row when D fits one tile)."""

    @T.macro
    def body(X, xu, sq, part, ru, aux, r0, rows, D):
        with T.SimtVF(threads=THREADS):
            for i in T.Parallel(block_M):
                ru[i] = 0.0
        for k in T.Pipelined(T.ceildiv(D, width), num_stages=2):
            n = T.min(width, D - k * width)
            T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
            with T.SimtVF(threads=THREADS):
                for i, j in T.Parallel(block_M, width):
                    sq[i, j] = T.if_then_else(j < n, term(xu[i, j].astype("float32"), aux, i), 0.0)
            T.reduce_sum(sq, part, dim=1)
            with T.SimtVF(threads=THREADS):
                for i in T.Parallel(block_M):
                    ru[i] += part[i]

    return body


def row_max(width: int, block_M: int):
    """A macro: ``ru[i] = max(X[r0 + i, :D])`` for the block's rows (fp32), as ``row_sum``'s pass with -inf past D
    and a max reduction."""

    @T.macro
    def body(X, xu, sq, part, ru, r0, rows, D):
        with T.SimtVF(threads=THREADS):
            for i in T.Parallel(block_M):
                ru[i] = -T.infinity("float32")
        for k in T.Pipelined(T.ceildiv(D, width), num_stages=2):
            n = T.min(width, D - k * width)
            T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
            with T.SimtVF(threads=THREADS):
                for i, j in T.Parallel(block_M, width):
                    sq[i, j] = T.if_then_else(j < n, xu[i, j].astype("float32"), -T.infinity("float32"))
            T.reduce_max(sq, part, dim=1)
            with T.SimtVF(threads=THREADS):
                for i in T.Parallel(block_M):
                    ru[i] = T.max(ru[i], part[i])

    return body


def sum_squares(width: int, block_M: int):
    """A macro: ``ru[i] = sum(X[r0 + i, :D]^2)`` for the block's rows (``row_sum`` of squares; call it with
    ``aux`` = ``ru``, unread)."""
    return row_sum(width, block_M, lambda v, aux, i: v * v)


def fill(length: int, value: float = 0.0):
    """A macro: ``v[i] = value`` for i < ``length`` in a SIMT sub-kernel (a UB vector per row or per column)."""

    @T.macro
    def body(v):
        with T.SimtVF(threads=THREADS):
            for i in T.Parallel(length):
                v[i] = value

    return body


def zero_partials(width: int):
    """A macro: this core's partial row of a parameter's gradient (``P[core, :D]``, fp32 in GM) set to zero
    chunk by chunk through the UB vector ``pu``: each core then adds its blocks' column sums into its own row."""
    clear = fill(width)

    @T.macro
    def body(P, pu, core, chunks, D):
        for k in T.serial(chunks):
            n = T.min(width, D - k * width)
            clear(pu)
            T.copy(pu[0:n], P[core, k * width : k * width + n])

    return body


def add_columns(width: int, block_M: int):
    """A macro: ``acc[j] += sum over the block's rows i of terms[i, j]`` (rows past the block hold 0), summed in
    row order through ``cu``: a parameter's gradient, per column of the chunk."""

    @T.macro
    def body(terms, cu, acc):
        with T.SimtVF(threads=THREADS):
            for j in T.Parallel(width):
                cu[j] = 0.0
                for i in T.serial(block_M):
                    cu[j] += terms[i, j]
                acc[j] += cu[j]

    return body
