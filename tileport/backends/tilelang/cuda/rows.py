"""The walks the CUDA row kernels share, so that a kernel states only its per-element math: one row per CTA
walked in column chunks (a lane per column, masked at the runtime D), its sums and maxima reduced across the
CTA, and the parameter-gradient kernels' walk down a column chunk over every row in order.

A walk takes a step: a ``T.macro`` called per element with the kernel's buffers first (``bufs``, a tuple spread
into the step's first parameters), then its position ``(row, col, i, j)``; the step's assignments stay
let-bound as written, so a kernel built on a walk is the kernel written out."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T

from ._common import rsqrt as _rsqrt


def masked(buf, row, col, D):
    """``buf[row, col]`` (``buf[col]`` for a per-column vector: row None) in fp32, 0 past D."""
    return T.if_then_else(col < D, buf[col] if row is None else buf[row, col], T.cast(0, buf.dtype)).astype("float32")


def walk(chunk: int, step, inside: bool = False):
    """A macro ``(bufs, row, D)``: ``step(*bufs, row, col, i, j)`` for each column of ``row``, chunk by chunk:
    every lane of the last chunk (the step masks past D), or with ``inside`` only the columns below D."""

    @T.macro
    def body(bufs, row, D):
        for k in T.serial(T.ceildiv(D, chunk)):
            for i, j in T.Parallel(1, chunk):
                col = k * chunk + j
                if inside:
                    if col < D:
                        step(*bufs, row, col, i, j)
                else:
                    step(*bufs, row, col, i, j)

    return body


def each(chunk: int, step):
    """A macro ``(bufs, row, D)``: ``step(*bufs, row, col, i, j)`` for each column of ``row`` below D."""
    return walk(chunk, step, inside=True)


def row_sum(chunk: int, step, inside: bool = False):
    """A macro ``(bufs, row, acc, out, D)``: ``out[0]`` = the sum of what ``step`` adds into the (1, chunk)
    fragment ``acc`` (one of ``bufs``) over the row (``walk``'s columns), reduced across the CTA's threads."""
    over = walk(chunk, step, inside)

    @T.macro
    def body(bufs, row, acc, out, D):
        T.clear(acc)
        over(bufs, row, D)
        T.reduce_sum(acc, out, dim=1)

    return body


def row_max(chunk: int, step):
    """A macro ``(bufs, row, acc, out, D)``: ``out[0]`` = the max of what ``step`` folds into ``acc`` (one of
    ``bufs``, filled with -inf first) over the row, reduced across the CTA's threads."""
    over = walk(chunk, step)

    @T.macro
    def body(bufs, row, acc, out, D):
        T.fill(acc, -T.infinity("float32"))
        over(bufs, row, D)
        T.reduce_max(acc, out, dim=1)

    return body


def sum_squares(chunk: int, D):
    """A macro ``(X, row, acc, out, D)``: ``out[0] = sum(X[row, :D]^2)`` in fp32 through the fragment ``acc``."""

    @T.macro
    def square(X, acc, row, col, i, j):
        v = masked(X, row, col, D)
        acc[i, j] += v * v

    total = row_sum(chunk, square)

    @T.macro
    def body(X, row, acc, out, D):
        total((X, acc), row, acc, out, D)

    return body


def rstd(mode: str, mean: bool = True):
    """A macro ``(r, RSTD, row, eps, D)``: ``r[0]`` (a row's sum of squares) becomes rsqrt(r / D + eps) (r + eps
    without ``mean``), also stored as the row's RSTD."""

    @T.macro
    def body(r, RSTD, row, eps, D):
        for i in T.Parallel(1):
            r[i] = _rsqrt((r[i] / T.cast(D, "float32") if mean else r[i]) + eps, mode)
        for i in T.Parallel(1):
            RSTD[row] = r[i]

    return body


def columns(chunk: int, step):
    """A macro ``(bufs, outs, accs, block, M, D)``: parameters' gradients over the column chunk ``block``: the
    fragments ``accs`` cleared, ``step(*bufs, *accs, row, col, j)`` for every row in order (deterministic: no
    atomics; the step masks past D), then each of ``outs`` (fp32 per column) takes its fragment for the chunk's
    columns below D."""

    @T.macro
    def body(bufs, outs, accs, block, M, D):
        for acc in accs:
            T.clear(acc)
        for row in T.serial(M):
            for j in T.Parallel(chunk):
                col = block * chunk + j
                step(*bufs, *accs, row, col, j)
        for j in T.Parallel(chunk):
            if block * chunk + j < D:
                for out, acc in zip(outs, accs):
                    out[block * chunk + j] = acc[j]

    return body


@T.macro
def fetch(v, V, row):
    """``v[0] = V[row]``: a row's statistic (the forward's rstd) into a fragment."""
    for i in T.Parallel(1):
        v[i] = V[row]


@T.macro
def mean(v, D):
    """``v[0] /= D``: a row's sum become its mean."""
    for i in T.Parallel(1):
        v[i] = v[i] / T.cast(D, "float32")
