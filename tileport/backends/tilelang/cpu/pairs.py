"""The vocabulary of TileLang CPU kernels over pairs or halves of a head's last dimension (rotary embeddings).

Such a kernel is a grid kernel (``interface.py``): its work items are the tokens (b, t) of ``[B, T, H, D]``
tensors, cut into ranges among threads by the driver. Its tensors are declared with their strides (``tokens``:
any layout whose heads are unit-stride, so a transposed ``[B, H, T, D]`` view is read in place), its tables
``[T_ro, R/2]`` with their row stride (``table``: a column slice of a wider table too; the row a token takes is
chosen by its position, never expanded to the tokens), its integer inputs likewise (``index``).

Per token, ``rotate_heads`` walks the R/2 pairs 16 at a time: the table's 16 columns are loaded once and every
head of every tensor rotated with them. The pairs are the halves ``(x[i], x[i + R/2])`` or interleaved
``(x[2i], x[2i + 1])``, the latter split into two vectors in registers (``pairs.h``), never copied. The math
is a function of 16-lane fp32 values ``fn(x1, x2, c, s) -> (o1, o2)``; ``mul`` is a product rounded on its own.
"""

# No `from __future__ import annotations` here or in kernel modules: it breaks T.prim_func annotations.
from pathlib import Path

import tilelang.cpu.language as T

from .rowwise import VEC, VL, get, put, splat, vectors

PRELUDE = Path(__file__).with_name("pairs.h").read_text()  # a pairs kernel's T.Kernel(..., prelude=PRELUDE)

B = T.dynamic("B")  # batch
SEQ = T.dynamic("T")  # tokens per sequence
D = T.dynamic("D")  # a head's columns
T_RO = T.dynamic("T_ro")  # table rows
R2 = T.dynamic("R2")  # pairs per head: the table's columns (R / 2)

_INDEX = {"int32", "int64"}


def _strides(name: str, rank: int) -> tuple:
    return tuple(T.dynamic(f"{name}_s{i}", "int64") for i in range(rank - 1)) + (1,)


def tokens(io, name: str, heads):
    """A ``[B, T, heads, D]`` tensor of ``io``'s storage with any strides but a unit last one; ``name`` is the
    parameter's (its stride variables are named after it)."""
    return T.StridedTensor((B, SEQ, heads, D), _strides(name, 4), io.tl)


def table(io, name: str):
    """A ``[T_ro, R/2]`` table (cos or sin) with its row stride."""
    return T.StridedTensor((T_RO, R2), _strides(name, 2), io.tl)


def index(dtype: str, name: str, *sizes):
    """An integer tensor (int32 or int64) of the given sizes, any strides but a unit last one."""
    if dtype not in _INDEX:
        raise TypeError(f"integer inputs are int32 or int64, not {dtype}")
    return T.StridedTensor(sizes, _strides(name, len(sizes)), dtype)


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def _when(cond, body) -> None:
    with T.If(cond), T.Then():
        body()


def mul(a, b):
    """a * b of 16 lanes, each product rounded to fp32 before it is added to anything (no FMA)."""
    return T.call_extern(VEC, "tp_mul_rounded", a, b)


def rotate_heads(fn, groups, b, t, interleaved: bool, cos=None, sin=None, p=None, streaming=False) -> None:
    """For token (b, t): ``y = fn(pairs of x, c, s)`` over its R/2 pairs, for every head of every group.

    ``groups``: (Io, x, y, heads) per input and output tensor (``tokens``). ``cos``/``sin``: (Io, table) and
    ``p`` the table row; None for a token with no row (its c and s are 0). ``interleaved``: pairs
    (x[2i], x[2i + 1]), else halves (x[i], x[i + R/2]). Plain stores: each 16-column chunk of the tables loaded
    once for every head. ``streaming``: whole chunks written with streaming stores, head by head (each head's
    output lines then fill in order, whole, in the write-combining buffers; the table's chunks come from L1
    again per head); the driver's fence orders them.
    """
    v = vectors(6)
    C, S, X1, X2, O1, O2 = range(6)

    def load_table(j, n):
        for k, src in ((C, cos), (S, sin)):
            if src is None:
                put(v, k, splat(T.float32(0)))
            elif n is None:
                _call(f"tp_load_{src[0].tag}", _ref(src[1], p, j), _ref(v, k))
            else:
                _call(f"tp_loadn_{src[0].tag}", _ref(src[1], p, j), _ref(v, k), n)

    def rotate(io, x, y, h, j, n):  # one head's pairs [j, j + 16), or the first n of them
        tail = "" if n is None else "n"
        more = () if n is None else (n,)
        nt = "_nt" if streaming and n is None else ""
        if interleaved:
            _call(f"tp_load{tail}_pairs_{io.tag}", _ref(x, b, t, h, 2 * j), _ref(v, X1), _ref(v, X2), *more)
        else:
            _call(f"tp_load{tail}_{io.tag}", _ref(x, b, t, h, j), _ref(v, X1), *more)
            _call(f"tp_load{tail}_{io.tag}", _ref(x, b, t, h, R2 + j), _ref(v, X2), *more)
        o1, o2 = fn(get(v, X1), get(v, X2), get(v, C), get(v, S))
        put(v, O1, o1)
        put(v, O2, o2)
        if interleaved:
            _call(f"tp_store{tail}_pairs_{io.tag}{nt}", _ref(v, O1), _ref(v, O2), _ref(y, b, t, h, 2 * j), *more)
        else:
            _call(f"tp_store{tail}_{io.tag}{nt}", _ref(v, O1), _ref(y, b, t, h, j), *more)
            _call(f"tp_store{tail}_{io.tag}{nt}", _ref(v, O2), _ref(y, b, t, h, R2 + j), *more)

    def chunks(body) -> None:  # body(j, n) over the pairs: whole 16-pair chunks, then the tail
        with T.serial(R2 // VL) as jj:
            body(jj * VL, None)
        _when(R2 % VL > 0, lambda: body(R2 - R2 % VL, R2 % VL))

    if streaming:
        for io, x, y, heads in groups:
            with T.serial(heads) as h:
                chunks(lambda j, n, io=io, x=x, y=y, h=h: (load_table(j, n), rotate(io, x, y, h, j, n)))
        return

    def step(j, n):
        load_table(j, n)
        for io, x, y, heads in groups:
            with T.serial(heads) as h:
                rotate(io, x, y, h, j, n)

    chunks(step)


def copy_rest(groups, b, t) -> None:
    """For token (b, t): the columns past the R rotated ones copied, bit for bit, from x to y in every head."""

    def copy():
        for io, x, y, heads in groups:
            with T.serial(heads) as h:
                _call(f"tp_copy_{io.tag}", _ref(x, b, t, h, 2 * R2), _ref(y, b, t, h, 2 * R2), D - 2 * R2)

    _when(D > 2 * R2, copy)
