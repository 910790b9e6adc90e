"""The vocabulary of row-wise TileLang CPU kernels: argument roles, 16-lane dtype bridges, row sums, row maps.

A kernel is a ``T.prim_func`` over ``M`` rows of ``D`` columns, both dynamic: one compiled kernel serves every
shape. Its parameters, annotated with the roles below, are the one declaration of its interface (the C
prototype, the OpenMP driver and the launch by name are derived from them, ``interface.py``):

- ``io.rows``: an (M, D) matrix with any row stride; ``per_row()``: an (M,) fp32 vector (rstd, mean);
- ``io.vector``: a (D,) vector broadcast to every row (a weight, a bias);
- ``partial()``: a gradient reduced across rows (a weight gradient): the kernel adds each of its rows'
  terms into it (compensated: TwoSum errors gathered); the driver gives each fixed block of rows its own fp32 partial
  and sums
  the partials in a fixed order, so the result has the same bits for any thread count;
- scalars (``T.float32``), such as eps.

Per-element math is written once, as a function of 16-lane fp32 values (``T.float32x16``; ``simd.h`` makes
every operator on them packed SIMD), and the helpers here apply it to the full 16-column chunks of a row and
to its tail, whose partial loads zero the missing lanes and whose partial stores write only real columns.
The helpers are plain Python functions that emit TileLang statements, called from a prim_func body.
"""

# No `from __future__ import annotations` here or in kernel modules: it breaks T.prim_func annotations.
from dataclasses import dataclass

import tilelang.cpu.language as T
import torch

VL = 16  # fp32 lanes of a kernel vector value (one AVX-512 register, two AVX2 ones)
VEC = f"float32x{VL}"
SUM_LANES = 2 * VL  # independent accumulator lanes of a row sum, fixed on every ISA so a sum has the same bits
BLOCK = 16  # SUM_LANES-wide steps per inner block of a row sum (512 columns)

M = T.dynamic("M")  # rows of one call (the driver hands each thread a range)
D = T.dynamic("D")  # columns, a runtime value: one kernel for every D


@dataclass(frozen=True)
class Storage:
    tl: str  # TileLang storage dtype
    tag: str  # suffix of the bridges in simd.h


# fp16/bf16 are held as uint16 and converted by the bridges: the C codegen cannot print bf16 and rejects
# vectorized half casts.
STORAGE = {
    torch.float32: Storage("float32", "f32"),
    torch.float16: Storage("uint16", "f16"),
    torch.bfloat16: Storage("uint16", "bf16"),
}


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def at(buf, row, col):
    """Address of column ``col`` of ``buf`` for ``row``, whatever the buffer's role."""
    if len(buf.shape) == 1:  # broadcast (D,)
        return _ref(buf, col)
    return _ref(buf, 0, col) if is_partial(buf) else _ref(buf, row, col)


class Io:
    """How tensors of one torch dtype are held in a kernel and moved 16 lanes at a time."""

    def __init__(self, dtype: torch.dtype, streaming: bool = False, subnormals: bool = False):
        """``subnormals``: bf16 results keep their subnormal values, as torch's rounding does (the fast bf16 store
        flushes |y| < 2^-126 to zero): for kernels claimed bit for bit with torch's."""
        if dtype not in STORAGE:
            raise TypeError(f"tilelang CPU kernels take float32, float16 or bfloat16, not {dtype}")
        s = STORAGE[dtype]
        tag = s.tag + ("s" if subnormals and dtype == torch.bfloat16 else "")
        self.dtype, self.tl, self.tag, self.streaming = dtype, s.tl, tag, streaming

    @property
    def rows(self):
        return T.Tensor((M, D), self.tl)

    @property
    def vector(self):
        return T.Tensor((D,), self.tl)

    def load(self, buf, row, col, vec, k, n=None):
        """vec[k] = 16 columns of ``buf`` from ``col`` as fp32; with ``n``, only the first n, the rest 0."""
        if n is None:
            _call(f"tp_load_{self.tag}", at(buf, row, col), _ref(vec, k))
        else:
            _call(f"tp_loadn_{self.tag}", at(buf, row, col), _ref(vec, k), n)

    def store(self, vec, k, buf, row, col, n=None):
        """16 columns of ``buf`` from ``col`` = vec[k] rounded to the storage dtype; with ``n``, the first n."""
        if n is None:
            _call(f"tp_store_{self.tag}{'_nt' if self.streaming else ''}", _ref(vec, k), at(buf, row, col))
        else:
            _call(f"tp_storen_{self.tag}", _ref(vec, k), at(buf, row, col), n)


F32 = Io(torch.float32)


def per_row():
    return T.Tensor((M,), "float32")


def partial():
    return T.Tensor((2, D), "float32")


def is_partial(buf) -> bool:
    """A (2, D) buffer: one block's partial of a gradient reduced across rows, [sum; compensation]."""
    return len(buf.shape) == 2 and not isinstance(buf.shape[0], type(M))


def splat(value):
    """A scalar as a 16-lane value."""
    return T.Broadcast(value, VL)


def rounded(io: "Io", value):
    """A 16-lane fp32 value rounded to ``io``'s storage dtype and widened back (what a tensor of it holds)."""
    return T.call_extern(VEC, f"tp_round_{io.tag}", value)


def vectors(n: int):
    """n 16-lane fp32 locals."""
    return T.alloc_local((n,), VEC)


def get(vec, k):
    return T.BufferLoad(vec, [k])


def put(vec, k, value) -> None:
    T.buffer_store(vec, value, [k])


def _when(cond, body) -> None:
    with T.If(cond):
        with T.Then():
            body()


def _tail_lanes(v, k, scratch, n, fill) -> None:
    """v[k] keeps its first n lanes and takes ``fill`` in the rest (v[scratch] is overwritten): a tail chunk's
    missing lanes, zeroed by the partial load, set to what the reduction must ignore."""
    put(v, scratch, splat(T.float32(fill)))
    _call("tp_keep_lanes", _ref(v, scratch), _ref(v, k), n)
    put(v, k, get(v, scratch))


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def row_map(fn, inputs, outputs, row) -> None:
    """For every column of ``row``: outputs = fn(inputs), 16 lanes at a time, the tail included.

    ``inputs`` and ``outputs`` are (Io, buffer) pairs; ``fn`` takes one 16-lane value per input and returns one
    (or a list, one per output). A partial output (``partial()``) is accumulated into, not overwritten.
    """
    n_in, n_out = len(inputs), len(outputs)
    v = vectors(n_in + 4 * n_out)

    def step(col, n=None):
        for k, (io, buf) in enumerate(inputs):
            io.load(buf, row, col, v, k, n)
        for o, value in enumerate(_as_list(fn(*[get(v, k) for k in range(n_in)]))):
            io, buf = outputs[o]
            if is_partial(buf):
                _compensated_add(buf, row, col, v, n_in + 4 * o, value, n)
                continue
            put(v, n_in + o, value)
            io.store(v, n_in + o, buf, row, col, n)

    with T.serial(D // VL) as j:
        step(j * VL)
    _when(D % VL > 0, lambda: step(D - D % VL, D % VL))


def _compensated_add(buf, row, col, v, k, value, n=None) -> None:
    """Add ``value`` into a partial's [sum; compensation] rows at ``col``, compensated (Neumaier's form of
    Kahan's sum: the exact error of every addition, TwoSum, is gathered in the compensation, whatever the
    terms' order of size): sum - compensation is the block's sum to about fp32^2, not one fp32 rounding, so
    the driver's fp64 sum over blocks rounds (nearly) correctly. Kahan's form left about one rounding of each
    block's sum, half an ulp of a 4096-row column sum. v[k..k+3] are scratch."""
    s, c, y, t = k, k + 1, k + 2, k + 3
    F32.load(buf, row, col, v, s, n)
    if n is None:
        _call("tp_load_f32", _ref(buf, 1, col), _ref(v, c))
    else:
        _call("tp_loadn_f32", _ref(buf, 1, col), _ref(v, c), n)
    put(v, y, value)
    put(v, t, get(v, s) + get(v, y))
    put(v, y, T.call_extern(VEC, "tp_two_sum_err", get(v, s), get(v, y), get(v, t)))  # y's slot: s + y - t, exact
    put(v, c, get(v, c) - get(v, y))  # the compensation is subtracted: the lost parts go in negated
    put(v, c, T.call_extern(VEC, "tp_finite_comp", get(v, c), get(v, t)))  # 0 once the sum is inf/nan
    F32.store(v, t, buf, row, col, n)
    if n is None:
        _call("tp_store_f32", _ref(v, c), _ref(buf, 1, col))
    else:
        _call("tp_storen_f32", _ref(v, c), _ref(buf, 1, col), n)


def row_sum(out, k_out, term, inputs, row) -> None:
    """out[k_out] = the sum over ``row``'s columns of ``term`` (16 lanes of fp32 per call), in fp32.

    32 independent lanes, blocked in three levels: each block of BLOCK steps (BLOCK * 32 columns) is summed
    into a fresh accumulator, BLOCK block totals into a second, those into a third, so no lane's chain
    exceeds 2 * BLOCK + D / (32 * BLOCK^2) additions (as torch's cascade sum does with levels of 16; a
    single running sum per lane loses to it by 10-18x in max relative error at D = 65536). The columns past
    the last 32-wide step join lanes of their own before the 32 lanes are added as a fixed pairwise tree, so
    the sum has the same bits on every ISA with FMA (AVX2, AVX-512) and for any thread count.
    """
    n_in = len(inputs)
    v = vectors(n_in + 1)
    acc = vectors(6)  # [0:2) the block, [2:4) the group of blocks, [4:6) the row; each pair is 32 lanes
    BLK, MID, TOP, TMP = 0, 2, 4, n_in
    zero = splat(T.float32(0))

    def terms(col, n=None):
        for k, (io, buf) in enumerate(inputs):
            io.load(buf, row, col, v, k, n)
        return term(*[get(v, k) for k in range(n_in)])

    def block(first_step, steps):
        put(acc, BLK, zero)
        put(acc, BLK + 1, zero)
        with T.serial(steps) as j:
            for u in range(2):
                put(acc, BLK + u, get(acc, BLK + u) + terms((first_step + j) * SUM_LANES + u * VL))

    def add_into(dst, src):
        for u in range(2):
            put(acc, dst + u, get(acc, dst + u) + get(acc, src + u))

    def add_lanes(dst, col, n):  # acc[dst] += terms in the first n lanes only
        put(v, TMP, get(acc, dst) + terms(col, n))
        _call("tp_keep_lanes", _ref(acc, dst), _ref(v, TMP), n)

    nacc = D // SUM_LANES
    nb = nacc // BLOCK
    ngroups = nb // BLOCK
    put(acc, TOP, zero)
    put(acc, TOP + 1, zero)
    with T.serial(ngroups) as g:
        put(acc, MID, zero)
        put(acc, MID + 1, zero)
        with T.serial(BLOCK) as b:
            block((g * BLOCK + b) * BLOCK, BLOCK)
            add_into(MID, BLK)
        add_into(TOP, MID)
    put(acc, MID, zero)
    put(acc, MID + 1, zero)
    with T.serial(nb % BLOCK) as b:
        block((ngroups * BLOCK + b) * BLOCK, BLOCK)
        add_into(MID, BLK)
    block(nb * BLOCK, nacc % BLOCK)
    # the rest of the row: whole groups of 8 columns join the block's lanes, the last D % 8 the row's
    head = D % SUM_LANES - D % 8
    base = nacc * SUM_LANES
    _when(head > 0, lambda: add_lanes(BLK, base, T.min(head, VL)))
    _when(head > VL, lambda: add_lanes(BLK + 1, base + VL, head - VL))
    for u in range(2):
        put(acc, TOP + u, get(acc, TOP + u) + (get(acc, MID + u) + get(acc, BLK + u)))
    _when(D % 8 > 0, lambda: add_lanes(TOP, base + head, D % 8))
    T.buffer_store(out, T.call_extern("float32", "tp_tree32", get(acc, TOP), get(acc, TOP + 1)), [k_out])


@dataclass(frozen=True)
class Dot64:
    """A ``row_sums64`` product with its own accumulation: ``fn(acc, *factors)`` (an extern of simd.h) adds 16
    lanes' fp64 terms to the sum's lanes, for a term that is no product of two fp32 values (an activation's
    output formed in fp64)."""

    fn: str
    factors: tuple


FACTORS = 3  # the most factors a product passes (a Dot64's)


def square(value):
    """The ``row_sums64`` product value * value (one expression: its lanes are widened once)."""
    return (value, value)


def row_sums64(products, inputs, row):
    """Sums over ``row``'s columns of products in fp64, as fp64 expressions (emits one loop over the row, then
    returns the totals). ``products`` lists, per sum, a function of the inputs' 16-lane fp32 values giving the
    two fp32 factors (``square`` for a sum of squares), or a ``Dot64``. Exact products, two sets of 16
    fp64 lanes per sum, a fixed tree (``tp_dot64_*`` in simd.h): rounded once, a sum of squares is (but for
    near-ties) the correctly rounded sum, where an fp32 sum rounds every square and add; a dot product keeps
    what fp32 would cancel away."""
    n_in, n_sums = len(inputs), len(products)
    # the loaded columns, the factors, per sum two sets of fp64 lanes, a scratch slot for the tail's masks
    v = vectors(n_in + FACTORS * n_sums + 4 * n_sums + 1)
    tmp = n_in + (FACTORS + 4) * n_sums

    def acc(p, u):  # sum p's set u (0 or 1): two 16-lane fp32 slots of v
        return n_in + FACTORS * n_sums + 4 * p + 2 * u

    for p in range(n_sums):
        _call("tp_dot64_zero", _ref(v, acc(p, 0)))

    def step(u, col, n=None):
        for k, (io, buf) in enumerate(inputs):  # a partial load zeroes the missing lanes
            io.load(buf, row, col, v, k, n)
        loaded = [get(v, k) for k in range(n_in)]
        for p, factors in enumerate(products):
            terms = factors(*loaded)
            if isinstance(terms, Dot64):
                fn, values = terms.fn, terms.factors
            else:  # a square (one expression twice) widens its lanes once
                fn, values = ("tp_dot64_sq", terms[:1]) if terms[0] is terms[1] else ("tp_dot64_add", terms)
            refs = []
            for f, value in enumerate(values):
                same = [k for k, held in enumerate(loaded) if value is held]
                if (
                    same and n is None
                ):  # a loaded value as it is: its own slot, so every sum reads (and widens) one copy
                    refs.append(_ref(v, same[0]))
                    continue
                put(v, n_in + FACTORS * p + f, value)
                if n is not None:  # the tail: a factor of zeroed lanes need not be 0 (x - mean), so mask it
                    _tail_lanes(v, n_in + FACTORS * p + f, tmp, n, 0.0)
                refs.append(_ref(v, n_in + FACTORS * p + f))
            _call(fn, _ref(v, acc(p, u)), *refs)

    with T.serial(D // (2 * VL)) as j:
        step(0, j * 2 * VL)
        step(1, j * 2 * VL + VL)
    _when(D % (2 * VL) >= VL, lambda: step(0, D - D % (2 * VL)))
    _when(D % VL > 0, lambda: step(1, D - D % VL, D % VL))
    return [T.call_extern("float64", "tp_dot64_total", _ref(v, acc(p, 0))) for p in range(n_sums)]


def row_max(out, k_out, io: Io, buf, row) -> None:
    """out[k_out] = the max of ``row``'s columns (a nan anywhere gives nan): 16 lanes, the tail's missing lanes
    kept at -inf, then a fixed tree across the lanes (``tp_max``, ``tp_hmax`` in simd.h)."""
    v = vectors(3)  # the running max, a loaded chunk, the tail's -inf-padded chunk
    put(v, 0, splat(T.float32(-float("inf"))))

    def step(col, n=None):
        io.load(buf, row, col, v, 1, n)
        if n is not None:
            _tail_lanes(v, 1, 2, n, -float("inf"))
        put(v, 0, T.call_extern(VEC, "tp_max", get(v, 0), get(v, 1)))

    with T.serial(D // VL) as j:
        step(j * VL)
    _when(D % VL > 0, lambda: step(D - D % VL, D % VL))
    T.buffer_store(out, T.call_extern("float32", "tp_hmax", get(v, 0)), [k_out])


SQUARES_BLOCK = 4  # 16-lane vectors whose squares ``row_sum_squares64`` adds in fp32 before widening


def row_sum_squares64(io: Io, buf, row):
    """The sum of squares of ``row``'s columns, accumulated in fp64, as an fp64 expression: per 64 columns the
    16 lanes' four squares added in fp32 (``tp_dot64_sq4``: relative error below 3 * 2^-24 for every D, where
    a running fp32 sum's grows with D), the remaining columns' exact squares in fp64 (``tp_dot64_sq``); one
    fixed tree across the 32 fp64 lanes. A quarter of the widenings of ``row_sums64([square], ...)``."""
    v = vectors(SQUARES_BLOCK + 4)  # the loaded block, two sets of fp64 lanes (the blocks', the rest's)
    acc, rest = SQUARES_BLOCK, SQUARES_BLOCK + 2
    _call("tp_dot64_zero", _ref(v, acc))
    span = SQUARES_BLOCK * VL
    with T.serial(D // span) as j:
        for k in range(SQUARES_BLOCK):
            io.load(buf, row, j * span + k * VL, v, k)
        _call("tp_dot64_sq4", _ref(v, acc), *[_ref(v, k) for k in range(SQUARES_BLOCK)])

    def exact(col, n=None):  # a partial load zeroes the missing lanes, whose squares add nothing
        io.load(buf, row, col, v, 0, n)
        _call("tp_dot64_sq", _ref(v, rest), _ref(v, 0))

    for k in range(SQUARES_BLOCK - 1):
        _when(D % span >= (k + 1) * VL, lambda k=k: exact(D - D % span + k * VL))
    _when(D % VL > 0, lambda: exact(D - D % VL, D % VL))
    return T.call_extern("float64", "tp_dot64_total", _ref(v, acc))
