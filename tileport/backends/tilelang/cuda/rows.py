"""The walks the CUDA row kernels share, so that a kernel states only its per-element math: one row per CTA
walked in column chunks (a lane per column, masked at the runtime extent), its sums and maxima reduced across
the CTA, and the parameter-gradient kernels' walk down a column chunk over every row in order.

A walk takes a step: a ``T.macro`` called per element with the kernel's buffers and scalars first (``bufs``, a
tuple spread into the step's first parameters), then its position ``(bx, col, i, j)``; the step's assignments
stay let-bound as written, so a kernel built on a walk is the kernel written out. Names carry into the
generated source: a Var passed to a macro takes the parameter's name (buffers keep theirs), so a step names its
scalars and the row ``bx`` as the kernel does, and a walk takes its extent (D, C) when it is made."""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T

from ._common import rsqrt as _rsqrt
from ._common import threads


def masked(buf, row, col, D):
    """``buf[row, col]`` (``buf[col]`` for a per-column vector: row None) in fp32, 0 past D."""
    return T.if_then_else(col < D, buf[col] if row is None else buf[row, col], T.cast(0, buf.dtype)).astype("float32")


def walk(chunk: int, step, D, inside: bool = False):
    """A macro ``(bufs, bx)``: ``step(*bufs, bx, col, i, j)`` for each column of row ``bx`` (D columns), chunk by
    chunk: every lane of the last chunk (the step masks past D), or with ``inside`` only the columns below D."""

    @T.macro
    def body(bufs, bx):
        for k in T.serial(T.ceildiv(D, chunk)):
            for i, j in T.Parallel(1, chunk):
                col = k * chunk + j
                if inside:
                    if col < D:
                        step(*bufs, bx, col, i, j)
                else:
                    step(*bufs, bx, col, i, j)

    return body


def each(chunk: int, step, D):
    """A macro ``(bufs, bx)``: ``step(*bufs, bx, col, i, j)`` for each column of row ``bx`` below D."""
    return walk(chunk, step, D, inside=True)


def row_sum(chunk: int, step, D, inside: bool = False):
    """A macro ``(bufs, bx, acc, out)``: ``out[0]`` = the sum of what ``step`` adds into the (1, chunk) fragment
    ``acc`` (one of ``bufs``) over the row (``walk``'s columns), reduced across the CTA's threads."""
    over = walk(chunk, step, D, inside)

    @T.macro
    def body(bufs, bx, acc, out):
        T.clear(acc)
        over(bufs, bx)
        T.reduce_sum(acc, out, dim=1)

    return body


def row_max(chunk: int, step, D):
    """A macro ``(bufs, bx, acc, out)``: ``out[0]`` = the max of what ``step`` folds into ``acc`` (one of
    ``bufs``, filled with -inf first) over the row, reduced across the CTA's threads."""
    over = walk(chunk, step, D)

    @T.macro
    def body(bufs, bx, acc, out):
        T.fill(acc, -T.infinity("float32"))
        over(bufs, bx)
        T.reduce_max(acc, out, dim=1)

    return body


def sum_squares(chunk: int, D):
    """A ``row_sum`` over ``(X, acc)``: ``out[0] = sum(X[bx, :D]^2)`` in fp32 through the fragment ``acc``."""

    @T.macro
    def square(X, acc, bx, col, i, j):
        v = masked(X, bx, col, D)
        acc[i, j] += v * v

    return row_sum(chunk, square, D)


def rstd(mode: str, D, mean: bool = True):
    """A macro ``(r, RSTD, bx, eps)``: ``r[0]`` (a row's sum of squares) becomes rsqrt(r / D + eps) (r + eps
    without ``mean``), also stored as the row's RSTD."""

    @T.macro
    def body(r, RSTD, bx, eps):
        for i in T.Parallel(1):
            r[i] = _rsqrt((r[i] / T.cast(D, "float32") if mean else r[i]) + eps, mode)
        for i in T.Parallel(1):
            RSTD[bx] = r[i]

    return body


def normalize(chunk: int, M, D, squares, write, mode: str, mean: bool = True):
    """A macro ``(sums, RSTD, eps, bufs, tail)``: a row norm's forward kernel, a CTA per row ``bx``: ``squares``
    (a ``row_sum`` over ``(*sums, acc)``) gives the row's sum of squares, ``rstd`` turns it into ``r`` (kept in
    RSTD), and ``write`` (an ``each``) runs over ``(*bufs, r, *tail)``."""
    stat = rstd(mode, D, mean)

    @T.macro
    def kernel(sums, RSTD, eps, bufs, tail):
        with T.Kernel(M, threads=threads(chunk)) as bx:
            acc = T.alloc_fragment((1, chunk), "float32")
            r = T.alloc_fragment((1,), "float32")
            squares((*sums, acc), bx, acc, r)
            stat(r, RSTD, bx, eps)
            write((*bufs, r, *tail), bx)

    return kernel


def columns(chunk: int, step, M, D):
    """A macro ``(bufs, outs)``: the kernel of one or two parameters' gradients, a CTA per column chunk ``bx``: a
    fragment per output cleared, ``step(*bufs, *accs, row, col, j)`` for every row in order (deterministic: no
    atomics; the step masks past D), then each of ``outs`` (fp32 per column) takes its fragment for the chunk's
    columns below D."""

    @T.macro
    def body(bufs, outs, accs, bx):
        T.clear(accs[0])
        if len(accs) > 1:
            T.clear(accs[1])
        for row in T.serial(M):
            for j in T.Parallel(chunk):
                col = bx * chunk + j
                step(*bufs, *accs, row, col, j)
        for j in T.Parallel(chunk):
            if bx * chunk + j < D:
                outs[0][bx * chunk + j] = accs[0][j]
                if len(outs) > 1:
                    outs[1][bx * chunk + j] = accs[1][j]

    @T.macro
    def kernel(bufs, outs):
        with T.Kernel(T.ceildiv(D, chunk), threads=threads(chunk)) as bx:
            if len(outs) > 1:  # the fragments named as the weight's and bias's gradients, as the source reads
                acc_w = T.alloc_fragment((chunk,), "float32")
                acc_b = T.alloc_fragment((chunk,), "float32")
                body(bufs, outs, (acc_w, acc_b), bx)
            else:
                acc = T.alloc_fragment((chunk,), "float32")
                body(bufs, outs, (acc,), bx)

    return kernel


@T.macro
def fetch(r, RSTD, bx):
    """``r[0] = RSTD[bx]``: a row's statistic (the forward's rstd) into a fragment."""
    for i in T.Parallel(1):
        r[i] = RSTD[bx]


@T.macro
def mean(v, D):
    """``v[0] /= D``: a row's sum become its mean (``D``: the kernel's extent named D)."""
    for i in T.Parallel(1):
        v[i] = v[i] / T.cast(D, "float32")
