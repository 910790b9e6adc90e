"""The walk the Ascend row kernels share, as loops a kernel writes ``for`` over, so that a kernel states its math:
the persistent grid's blocks of rows (``Walk.blocks``), each block's column chunks (``Walk.chunks``) with their
GM <-> UB moves of runtime length, and the SIMT sub-kernels over a tile, its rows or its columns (``each``,
``each_row``, ``each_column``); and, built on them, the per-row sums and maxima and the per-column sums of a
parameter's gradient.

The loops are Python generators that open the TIR frames around their ``yield``: tilelang's builder expands a
``for`` over a Python iterable in place, so the body sits where the written-out loop's did and the kernel is the
same TIR (its assignments stay let-bound as written)."""

# No `from __future__ import annotations`: kernel modules may not use it either.
from typing import NamedTuple

import tilelang.ascend.language as T
from tilelang.language.eager.builder import Builder

from ._common import CORES, THREADS, fill


class Block(NamedTuple):
    """Rows [r0, r0 + rows) of a block. Yielded whole: a tuple binds as it is, where a loop target unpacking it
    would rename its Vars after the target (and the generated source with them)."""

    r0: object
    rows: object


class Chunk(NamedTuple):
    """Columns [k * width, k * width + n) of a chunk (yielded whole, as ``Block``)."""

    k: object
    n: object


def _loop(frame, name):
    """``for name in frame``, bound as the builder binds a written ``for``'s target."""
    tb = Builder.current()
    for v in tb.ctx_for(frame):
        yield tb.bind(name, v, loop_target=True)


def _simt(frame):
    """``with T.SimtVF(...): for v in frame``."""
    tb = Builder.current()
    with tb.ctx_with(T.SimtVF(threads=THREADS)):
        yield from tb.ctx_for(frame)


def flat(core, N, block: int, loads=(), stores=()):
    """``for _ in flat(core, N, BLOCK, loads, stores)``: this core's contiguous run of ``block``-element tiles of
    N elements, double-buffered, each (GM, UB) pair of ``loads`` moved in before the body and each (UB, GM) pair
    of ``stores`` out after it (runtime lengths: the last tile is partial)."""
    tb = Builder.current()
    blocks = tb.bind("blocks", T.ceildiv(N, block))
    per = tb.bind("per", T.ceildiv(blocks, CORES))
    b0 = tb.bind("b0", core * per)
    for t in _loop(T.Pipelined(T.max(0, T.min(per, blocks - b0)), num_stages=2), "t"):
        k0 = tb.bind("k0", (b0 + t) * block)
        n = tb.bind("n", T.min(block, N - k0))
        for gm, ub in loads:
            tb.eval(T.copy(gm[k0 : k0 + n], ub[0:n]))
        yield
        for ub, gm in stores:
            tb.eval(T.copy(ub[0:n], gm[k0 : k0 + n]))


def lanes(block: int):
    """``for j in lanes(BLOCK)``: a SIMT sub-kernel over a flat tile."""
    return _simt(T.Parallel(block))


class Walk:
    """The loops of a kernel over (M, D) rows in ``block_M`` x ``width`` UB tiles. A move is a (source,
    destination) pair, one side in GM and one in UB, sliced by the buffers' shapes: an (M, D) tensor's block of
    rows and chunk of columns, a (D,) vector's chunk, a (CORES, D) partial's row for this core (its UB side a
    vector), an (M,) per-row vector's block (a move outside ``chunks``)."""

    def __init__(self, width: int, block_M: int):
        self.width, self.block_M = width, block_M

    def blocks(self, core, M, D, loads=(), stores=(), partials=(), pu=None, index: str = "b"):
        """``for block in walk.blocks(...)``: the ``Block`` of rows [r0, r0 + rows) of each block b = core + t *
        CORES (``index`` names b), after zeroing this core's rows of ``partials`` through the UB vector ``pu`` (each
        core then adds its blocks' column sums into its own row); per-row ``loads`` moved in before the body,
        ``stores`` out after it."""
        tb, width = Builder.current(), self.width
        blocks = tb.bind("blocks", T.ceildiv(M, self.block_M))
        self.count = tb.bind("chunks", T.ceildiv(D, width))
        self.core, self.D = core, D
        if partials:
            clear = fill(width)
            for k in _loop(T.serial(self.count), "k"):
                n = tb.bind("n", T.min(width, D - k * width))
                clear(pu)
                for P in partials:
                    tb.eval(T.copy(pu[0:n], P[core, k * width : k * width + n]))
        for t in _loop(T.serial(T.ceildiv(blocks, CORES)), "t"):
            b = tb.bind(index, core + t * CORES)
            for branch in tb.ctx_if(b < blocks):
                for _ in tb.ctx_then(branch):
                    self.r0 = tb.bind("r0", b * self.block_M)
                    self.rows = tb.bind("rows", T.min(self.block_M, M - self.r0))
                    self.move(loads)
                    yield Block(self.r0, self.rows)
                    self.move(stores)

    def chunks(self, loads=(), stores=(), inline_count: bool = False):
        """``for chunk in walk.chunks(...)``: the block's column chunks [k * width, k * width + n), double-buffered,
        ``loads`` moved in before the body and ``stores`` out after it; ``inline_count``: the loop's extent
        written out rather than the kernel's bound chunk count (as the forward kernels' first passes have it)."""
        tb, width = Builder.current(), self.width
        count = T.ceildiv(self.D, width) if inline_count else self.count
        for k in _loop(T.Pipelined(count, num_stages=2), "k"):
            n = tb.bind("n", T.min(width, self.D - k * width))
            self.move(loads, k, n)
            yield Chunk(k, n)
            self.move(stores, k, n)

    def tiles(self, *dtypes):
        """A (block_M, width) UB tile per dtype, allocated in order (``xu, gu = walk.tiles(xt, gt)``)."""
        return tuple(T.alloc_shared((self.block_M, self.width), dt) for dt in dtypes)

    def vectors(self, *dtypes):
        """A (width,) UB vector per dtype (a chunk's columns: a weight's, a gradient's partial sums)."""
        return tuple(T.alloc_shared((self.width,), dt) for dt in dtypes)

    def row_vectors(self, *dtypes):
        """A (block_M,) UB vector per dtype (one value per row of the block: a sum, a statistic)."""
        return tuple(T.alloc_shared((self.block_M,), dt) for dt in dtypes)

    def move(self, pairs, k=None, n=None):
        """Copy each (source, destination) pair: the block's per-row vectors, or with ``k`` the chunk's columns."""
        tb = Builder.current()
        for src, dst in pairs:
            out = src.scope() != "global"
            gm, ub = (dst, src) if out else (src, dst)
            if k is None:
                g, u = gm[self.r0 : self.r0 + self.rows], ub[0 : self.rows]
            elif len(gm.shape) == 1:
                g, u = gm[k * self.width : k * self.width + n], ub[0:n]
            elif len(ub.shape) == 1:
                g, u = gm[self.core, k * self.width : k * self.width + n], ub[0:n]
            else:
                g, u = gm[self.r0 : self.r0 + self.rows, k * self.width : k * self.width + n], ub[0 : self.rows, 0:n]
            tb.eval(T.copy(u, g) if out else T.copy(g, u))

    def each(self):
        """``for i, j in walk.each()``: a SIMT sub-kernel over the tile."""
        return _simt(T.Parallel(self.block_M, self.width))

    def each_row(self):
        """``for i in walk.each_row()``: a SIMT sub-kernel over the block's rows."""
        return _simt(T.Parallel(self.block_M))

    def each_column(self):
        """``for j in walk.each_column()``: a SIMT sub-kernel over the chunk's columns."""
        return _simt(T.Parallel(self.width))

    def add_row_sums(self):
        """A macro ``(tile, part, acc)``: ``acc[i] += sum(tile[i, :])``, reduced through ``part``."""

        @T.macro
        def body(tile, part, acc):
            T.reduce_sum(tile, part, dim=1)
            for i in self.each_row():
                acc[i] += part[i]

        return body

    def row_sum(self, term, inline_count: bool = False):
        """A macro ``(acc, loads, bufs, tile, part)``: ``acc[i]`` = the sum over the row's columns of
        ``term(*bufs, i, j)`` (a function or ``T.macro``), the chunks' ``loads`` moved in first, the terms masked
        past D in ``tile``. The last chunk stays in UB (the whole row when D fits one tile)."""
        clear, add = fill(self.block_M), self.add_row_sums()

        @T.macro
        def body(acc, loads, bufs, tile, part):
            clear(acc)
            for chunk in self.chunks(loads, inline_count=inline_count):
                for i, j in self.each():
                    tile[i, j] = T.if_then_else(j < chunk.n, term(*bufs, i, j), 0.0)
                add(tile, part, acc)

        return body

    def row_max(self):
        """A macro ``(acc, X, xu, tile, part)``: ``acc[i] = max(X[r0 + i, :D])`` in fp32, -inf past D."""
        lowest = -T.infinity("float32")
        start = fill(self.block_M, lowest)

        @T.macro
        def body(acc, X, xu, tile, part):
            start(acc)
            for chunk in self.chunks(((X, xu),), inline_count=True):
                for i, j in self.each():
                    tile[i, j] = T.if_then_else(j < chunk.n, xu[i, j].astype("float32"), lowest)
                T.reduce_max(tile, part, dim=1)
                for i in self.each_row():
                    acc[i] = T.max(acc[i], part[i])

        return body

    def sum_squares(self):
        """A macro ``(acc, X, xu, tile, part)``: ``acc[i] = sum(X[r0 + i, :D]^2)``."""
        squares = self.row_sum(lambda xu, i, j: xu[i, j].astype("float32") * xu[i, j].astype("float32"), True)

        @T.macro
        def body(acc, X, xu, tile, part):
            squares(acc, ((X, xu),), (xu,), tile, part)

        return body

    def add_columns(self):
        """A macro ``(terms, cu, acc)``: ``acc[j] += sum over the block's rows i of terms[i, j]`` (rows past the
        block hold 0), summed in row order through ``cu``: a parameter's gradient, per column of the chunk."""

        @T.macro
        def body(terms, cu, acc):
            for j in self.each_column():
                cu[j] = 0.0
                for i in T.serial(self.block_M):
                    cu[j] += terms[i, j]
                acc[j] += cu[j]

        return body
