"""The intra-chunk preparation of gated DeltaNet's chunk algorithm (``chunked.prepare``) as a TileLang CPU kernel:
per chunk of C tokens and value head, the decays and the WY representation's inverse, with no LAPACK call.

A grid kernel over (chunk, value head) work items. Given kk = k k^T of the chunk's key head (a GEMM, by the caller),
gc (g's cumulative sum within the chunk, by the caller) and beta, an item writes

    decay[r, s] = exp(gc_r - gc_s) for s <= r, 0 above    (an upper entry is never an exp: its argument is -inf)
    A[r, s]     = (kk[r, s] * decay[r, s]) * beta_r for s < r, 0 elsewhere (each product rounded, as torch's)
    Tinv        = (I + A)^-1

first the decays and A (kept in the item's local memory), rows of 16 columns (simd.h's packed exp), then Tinv by
forward substitution row by row, SIMD across columns: X[r] = e_r - sum_{s < r} A[r, s] X[s], each 16-column block
summed only over the rows s whose X[s] is non-zero there (s >= the block's first column), one FMA a step, in fp32
as LAPACK's trsm computes it (the same algebra; the order of the sums is its own: two accumulators, even and odd
rows). Per item on AVX2: 15 instructions per two rows of a block (four independent FMA chains), about 1900 such
steps; the decays' rows about 90 a block of 16 columns (the exp's polynomial), 256 blocks. torch.linalg.solve_triangular
ran an OpenMP region per 64 x 64 matrix, which collapsed when other processes shared the cores (8 s for 256
matrices on a loaded machine); here the matrices are work items cut among the threads like any grid kernel's.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .interface import GRID
from .rowwise import VL, vectors
from .runtime import CACHE, threads_for

NCH, H, HV = T.dynamic("NCH"), T.dynamic("H"), T.dynamic("HV")
F32 = torch.float32
# accumulators of a block of Tinv's row (rows s dealt round them): two FMA chains in flight, and a sum of the two
# halves' terms, whose error on Tinv (mean relative, against fp64) was LAPACK's fp32 trsm's; one chain's 1.0-1.5x
CHAINS = 2

# Rows of 16 columns, the columns' positions compared with the row's in integer lanes; each helper loads and stores
# its rows itself, register by register.
PRELUDE = r"""
static inline tp_ni tp_wy_columns(int32_t first) {  // first, first + 1, ... in one native register's lanes
  tp_ni lanes;
  for (int l = 0; l < TP_NATIVE; ++l) lanes[l] = l;  // a constant: first is added to all lanes at once
  return lanes + first;
}
// Row r's 16 columns from s0: decay = exp(gr - gc_s) where s <= r, else 0 (exp(-inf)); a = (kk * decay) * br where
// s < r, else 0.
TP_HELPER void* tp_wy_row(float* gcs, float gr, float br, float* kk, float* decay, float* a, int32_t s0,
                                  int32_t r) {
  const tp_nf ninf = (tp_nf){} - INFINITY;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    const tp_ni col = tp_wy_columns(s0 + i * TP_NATIVE);
    tp_nf g, k;
    memcpy(&g, gcs + i * TP_NATIVE, sizeof g);
    memcpy(&k, kk + i * TP_NATIVE, sizeof k);
    const tp_nf x = col <= r ? gr - g : ninf;
    const tp_nf d = tp_exp_n(x);
    const tp_nf av = col < r ? (k * d) * br : (tp_nf){};
    memcpy(decay + i * TP_NATIVE, &d, sizeof d);
    memcpy(a + i * TP_NATIVE, &av, sizeof av);
  }
  return 0;
}
// acc = the unit row's 16 columns (1 in lane `lane`, if 0 <= lane < 16).
TP_HELPER void* tp_wy_unit(tp_v16* acc, int32_t lane) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) acc->v[i] = tp_wy_columns(i * TP_NATIVE) == lane ? (tp_nf){} + 1.0f : (tp_nf){};
  return 0;
}
// acc -= a * x (16 columns of a row of X), one FMA per lane.
TP_HELPER void* tp_wy_sub(tp_v16* acc, float a, float* x) {
  tp_v16 t;
  memcpy(&t, acc, 64);
#if defined(__AVX512F__)
  const tp_nf na = (tp_nf)_mm512_set1_ps(-a);
#elif defined(__AVX__)
  const tp_nf na = (tp_nf)_mm256_set1_ps(-a);
#else
  const tp_nf na = (tp_nf){} - a;
#endif
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf xv;
    memcpy(&xv, x + i * TP_NATIVE, sizeof xv);
    t.v[i] = tp_fma_nf(na, xv, t.v[i]);
  }
  memcpy(acc, &t, 64);
  return 0;
}
TP_HELPER void* tp_wy_add(tp_v16* acc, tp_v16* other) {
  tp_v16 t, o;
  memcpy(&t, acc, 64);
  memcpy(&o, other, 64);
  t += o;
  memcpy(acc, &t, 64);
  return 0;
}
TP_HELPER void* tp_wy_store(tp_v16* acc, float* dst) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) memcpy(dst + i * TP_NATIVE, &acc->v[i], sizeof(tp_nf));
  return 0;
}
"""


def _strides(name: str, rank: int) -> tuple:
    return tuple(T.dynamic(f"{name}_s{i}", "int64") for i in range(rank - 1)) + (1,)


def _tensor(name: str, *sizes):
    """An fp32 tensor of the given sizes with any strides but a unit last one."""
    return T.StridedTensor(sizes, _strides(name, len(sizes)), "float32")


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def _if(cond, then) -> None:
    with T.If(cond), T.Then():
        then()


def _solve_block(acc, chains: int, a, tinv, ch, j, r, col, c: int) -> None:
    """Row r of X over the 16 columns from ``col``: e_r - sum over the rows s in [col, r) of A[r, s] X[s] (X[s] is 0
    there for s < col), the rows dealt round ``chains`` accumulators, then added as a tree."""
    n = T.max(r - col, 0)

    def sub(q, s):
        _call("tp_wy_sub", _ref(acc, q), a[r * c + s], _ref(tinv, ch, j, s, col))

    _call("tp_wy_unit", _ref(acc, 0), r - col)
    for q in range(1, chains):
        _call("tp_wy_unit", _ref(acc, q), -1)
    with T.serial(T.truncdiv(n, chains)) as w:
        for q in range(chains):
            sub(q, col + w * chains + q)
    for q in range(chains - 1):  # the last n % chains rows
        _if(q < T.truncmod(n, chains), lambda q=q: sub(q, col + n - T.truncmod(n, chains) + q))
    span = 1
    while span < chains:
        for q in range(0, chains, 2 * span):
            _call("tp_wy_add", _ref(acc, q), _ref(acc, q + span))
        span *= 2
    _call("tp_wy_store", _ref(acc, 0), _ref(tinv, ch, j, r, col))


def build(c: int = 64):
    """The kernel for chunks of ``c`` tokens (a multiple of 16): every chunk count and head count."""
    if c % VL:
        raise ValueError(f"wy: the chunk size is a multiple of {VL}, got {c}")
    blocks = c // VL

    @T.prim_func
    def wy_prepare(
        kk: _tensor("kk", NCH, H, c, c),
        gc: _tensor("gc", NCH, HV, c),
        beta: _tensor("beta", NCH, HV, c),
        decay: _tensor("decay", NCH, HV, c, c),
        tinv: _tensor("tinv", NCH, HV, c, c),
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["NCH", "HV"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            ch = T.truncdiv(first + i, T.cast(HV, "int64"))
            j = T.cast(T.truncmod(first + i, T.cast(HV, "int64")), "int32")
            h = T.truncdiv(j, T.truncdiv(HV, H))  # grouped values: value head j reads key head j // (HV / H)
            a = T.alloc_local((c * c,), "float32")  # A, row-major
            acc = vectors(CHAINS)
            with T.serial(c) as r:  # the decays and A, row by row
                for u in range(blocks):
                    _call(
                        "tp_wy_row",
                        _ref(gc, ch, j, u * VL),
                        gc[ch, j, r],
                        beta[ch, j, r],
                        _ref(kk, ch, h, r, u * VL),
                        _ref(decay, ch, j, r, u * VL),
                        _ref(a, r * c + u * VL),
                        u * VL,
                        r,
                    )
            with T.serial(c) as r:  # Tinv: X[r] = e_r - sum_{s < r} A[r, s] X[s], block by block of 16 columns
                for u in range(blocks):
                    _solve_block(acc, CHAINS, a, tinv, ch, j, r, u * VL, c)

    return wy_prepare


# tests/backends/test_cpu_simd.py reads this kernel's loops through chunk_gated_delta_rule's PACKED_CHECKS.


def decay_and_inverse(kk, gc, beta, decay=None, tinv=None):
    """(decay, tinv) [NCH, HV, C, C] fp32 of kk [NCH, H, C, C], gc and beta [NCH, HV, C] (fp32, CPU; see above);
    written into ``decay`` and ``tinv`` where given."""
    NCH_, HV_, c = beta.shape
    if decay is None:
        decay = torch.empty(NCH_, HV_, c, c, dtype=F32)
    if tinv is None:
        tinv = torch.empty(NCH_, HV_, c, c, dtype=F32)
    if NCH_ * HV_ == 0:
        return decay, tinv
    kernel = CACHE.kernel("wy", build, c)
    kernel(threads_for(NCH_ * HV_ * c * c * 8), kk=kk, gc=gc, beta=beta, decay=decay, tinv=tinv)
    return decay, tinv
