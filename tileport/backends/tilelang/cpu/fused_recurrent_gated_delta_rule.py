"""fused_recurrent_gated_delta_rule (the decode step) as a TileLang CPU kernel (C target): one pass over the state.

A grid kernel over (sequence, value head) work items. An item walks its state [K, V] (fp32) in strips of 16
columns (V in SIMD lanes; a strip of K rows, 8 KB at K = 128, stays in L1), and for each strip the sequence's
tokens in order (its range of the packed tokens with ``cu_seqlens``), per token:

    S <- e S (e = exp(g));  kv = S^T k;  v' = beta (v - kv);  S <- S + k v'^T;  o = scale S^T q

as two walks down the strip's K rows: the first forms e s_r (rounded to fp32, the state the recurrence holds) and
adds k_r e s_r into kv, the second writes s_r = e s_r + k_r v' (one FMA) and adds q_r s_r into o. Both K-reductions
are accumulated in fp64 lanes from exact products (an fp32 dot product measured 2-3x the fp32 benchmark's mean
relative error, whose cascade sum it lost to); v' = beta (v - kv) and scale * o are formed in fp64 and rounded
once. o is read from the new state, never as e S_old^T q + (k.q) v' (the same value, not the same infinities and
nans). The first token reads the initial state (any float dtype; none: zeros), every later one the item's own
rows of ``final_state`` in fp32 (in L1): the state is read from memory once and written once per call.

Per token, strip and row of K (16 columns), from the disassembly (g++ 12, fp32): on AVX2 (two ymm per 16 lanes) walk
1 is 18 instructions (two multiplies, four widenings, four fp64 FMAs, the k broadcast) and walk 2 is 24 (two fp32
FMAs and two stores more); on AVX-512 12 and 15. K = V = 128: 8 strips x 128 rows x 42, about 43k instructions per
token and value head on AVX2.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from types import SimpleNamespace

import tilelang.cpu.language as T
import torch

from ... import outputs, sequences
from .interface import GRID
from .rowwise import STORAGE, VEC, VL, Io, get, put, vectors
from .runtime import CACHE, threads_for

B, SEQ, H, K = T.dynamic("B"), T.dynamic("T"), T.dynamic("H"), T.dynamic("K")
HV, V, N, NS = T.dynamic("HV"), T.dynamic("V"), T.dynamic("N"), T.dynamic("NS")
F32 = torch.float32

# The state rows' arithmetic on 16 lanes, the K-reductions' fp64 sums in native registers. Each row helper loads its
# row itself (a row copied into a kernel local first was written as 16-byte pieces and read back as whole registers:
# a store-forwarding stall per row), and fp64 is moved with the ISA's own conversions and broadcasts (g++ 12 split
# the generic float -> double conversion into 128-bit pieces and built a broadcast from scalar stores).
PRELUDE = r"""
#if defined(__x86_64__) || defined(__i386__)
#define TP_GD_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__aarch64__)
#define TP_GD_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_GD_OPAQUE(r) __asm__("" : "+m"(r))
#endif
typedef double tp_gd_d __attribute__((vector_size(TP_NATIVE * 4)));  // half a native register's lanes, widened
typedef float tp_gd_h __attribute__((vector_size(TP_NATIVE * 2)));   // half a native register
struct tp_gd_acc {
  tp_gd_d v[2 * TP_PARTS];  // 16 fp64 lanes (two tp_v16 slots): native register i's halves in v[2i], v[2i + 1]
};

static inline tp_nf tp_gd_splat(float x) {
#if defined(__AVX512F__)
  return (tp_nf)_mm512_set1_ps(x);
#elif defined(__AVX__)
  return (tp_nf)_mm256_set1_ps(x);
#elif defined(__SSE2__)
  return (tp_nf)_mm_set1_ps(x);
#else
  tp_nf r;
  for (int i = 0; i < TP_NATIVE; ++i) r[i] = x;
  return r;
#endif
}
static inline tp_gd_d tp_gd_splat64(double x) {
#if defined(__AVX512F__)
  return (tp_gd_d)_mm512_set1_pd(x);
#elif defined(__AVX__)
  return (tp_gd_d)_mm256_set1_pd(x);
#elif defined(__SSE2__)
  return (tp_gd_d)_mm_set1_pd(x);
#else
  tp_gd_d r;
  for (int i = 0; i < TP_NATIVE / 2; ++i) r[i] = x;
  return r;
#endif
}
// A native register's lanes as two fp64 registers (its low and high halves), and back.
static inline void tp_gd_widen(tp_nf x, tp_gd_d* lo, tp_gd_d* hi) {
#if defined(__AVX512F__)
  *lo = (tp_gd_d)_mm512_cvtps_pd(_mm512_castps512_ps256((__m512)x));
  *hi = (tp_gd_d)_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd((__m512)x), 1)));
#elif defined(__AVX__)
  *lo = (tp_gd_d)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)x));
  *hi = (tp_gd_d)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)x, 1));
#elif defined(__SSE2__)
  *lo = (tp_gd_d)_mm_cvtps_pd((__m128)x);
  *hi = (tp_gd_d)_mm_cvtps_pd(_mm_movehl_ps((__m128)x, (__m128)x));
#else
  tp_gd_h h[2];
  memcpy(h, &x, sizeof x);
  *lo = __builtin_convertvector(h[0], tp_gd_d);
  *hi = __builtin_convertvector(h[1], tp_gd_d);
#endif
}
static inline tp_nf tp_gd_narrow(tp_gd_d lo, tp_gd_d hi) {
#if defined(__AVX512F__)
  const __m512d l = _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps((__m512d)lo)));
  return (tp_nf)_mm512_castpd_ps(_mm512_insertf64x4(l, _mm256_castps_pd(_mm512_cvtpd_ps((__m512d)hi)), 1));
#elif defined(__AVX__)
  const __m256 l = _mm256_castps128_ps256(_mm256_cvtpd_ps((__m256d)lo));
  return (tp_nf)_mm256_insertf128_ps(l, _mm256_cvtpd_ps((__m256d)hi), 1);
#elif defined(__SSE2__)
  return (tp_nf)_mm_movelh_ps(_mm_cvtpd_ps((__m128d)lo), _mm_cvtpd_ps((__m128d)hi));
#else
  tp_gd_h h[2] = {__builtin_convertvector(lo, tp_gd_h), __builtin_convertvector(hi, tp_gd_h)};
  tp_nf r;
  memcpy(&r, h, sizeof r);
  return r;
#endif
}

// 16 fp32 lanes moved register by register (simd.h's tp_load_f32 is one 64-byte memcpy, which g++ 12 expanded
// for Zen 3 as 16-byte moves into a stack copy read back as whole registers: a failed store forward per row).
static inline void tp_gd_load_f32(float* src, tp_v16* dst) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) memcpy(&dst->v[i], src + i * TP_NATIVE, sizeof(tp_nf));
}
static inline void tp_gd_store_f32(tp_v16* src, float* dst) {
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) memcpy(dst + i * TP_NATIVE, &src->v[i], sizeof(tp_nf));
}
static inline void tp_gd_load_f16(uint16_t* src, tp_v16* dst) { tp_load_f16(src, dst); }
static inline void tp_gd_load_bf16(uint16_t* src, tp_v16* dst) { tp_load_bf16(src, dst); }
// The state rows' tails (V % 16 columns): simd.h's partial moves (masked with AVX2 and AVX-512).
TP_HELPER void* tp_gd_loadn_f32(float* src, tp_v16* dst, int32_t n) { return tp_loadn_f32(src, dst, n); }
TP_HELPER void* tp_gd_storen_f32(tp_v16* src, float* dst, int32_t n) { return tp_storen_f32(src, dst, n); }
TP_HELPER void* tp_gd_loadn_f16(uint16_t* src, tp_v16* dst, int32_t n) { return tp_loadn_f16(src, dst, n); }
TP_HELPER void* tp_gd_loadn_bf16(uint16_t* src, tp_v16* dst, int32_t n) { return tp_loadn_bf16(src, dst, n); }

// e * s, rounded to fp32 on its own (never fused into the FMA that adds k v' to it): the decayed state.
static inline tp_nf tp_gd_decay(tp_nf s, tp_nf e) {
  tp_nf p = s * e;
  TP_GD_OPAQUE(p);
  return p;
}
// acc += x * s on native register i's lanes, in fp64 (the products exact: 24-bit factors).
static inline void tp_gd_axpy(tp_gd_acc* a, int i, tp_gd_d x, tp_nf s) {
  tp_gd_d lo, hi;
  tp_gd_widen(s, &lo, &hi);
  a->v[2 * i] += x * lo;
  a->v[2 * i + 1] += x * hi;
}
// The first walk down a strip's rows, one row s: kv += k * (e * s).
static inline void tp_gd_walk1(tp_v16* kv, const tp_v16& s, float e, float k) {
  tp_gd_acc a;
  memcpy(&a, kv, 128);
  const tp_nf ee = tp_gd_splat(e);
  const tp_gd_d kk = tp_gd_splat64(k);
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) tp_gd_axpy(&a, i, kk, tp_gd_decay(s.v[i], ee));
  memcpy(kv, &a, 128);
}
// The second walk, one row s: s <- e * s + k * d (one FMA after the decay's rounding; d: the strip's v'), and
// acc += q * s; the new row is returned.
static inline tp_v16 tp_gd_walk2(tp_v16* acc, const tp_v16& s, float e, float k, const tp_v16* d, float q) {
  tp_gd_acc a;
  memcpy(&a, acc, 128);
  const tp_nf ee = tp_gd_splat(e), kk = tp_gd_splat(k);
  const tp_gd_d qq = tp_gd_splat64(q);
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    r.v[i] = tp_fma_nf(kk, d->v[i], tp_gd_decay(s.v[i], ee));
    tp_gd_axpy(&a, i, qq, r.v[i]);
  }
  memcpy(acc, &a, 128);
  return r;
}

TP_HELPER void* tp_gd_zero64(tp_v16* acc) {
  const tp_nd zero[2] = {};
  tp_nd_put2(acc, zero);
  return 0;
}

// A row of the state at src (any storage dtype; 16 lanes, or the first n) through walk 1, or through walk 2 with
// the new row written to dst (fp32).
#define TP_GD_ROWS(tag, T)                                                                                     \
  TP_HELPER void* tp_gd_kv_##tag(tp_v16* kv, T* src, float e, float k) {                               \
    tp_v16 s;                                                                                                  \
    tp_gd_load_##tag(src, &s);                                                                                    \
    tp_gd_walk1(kv, s, e, k);                                                                                  \
    return 0;                                                                                                  \
  }                                                                                                            \
  TP_HELPER void* tp_gd_kvn_##tag(tp_v16* kv, T* src, float e, float k, int32_t n) {                   \
    tp_v16 s;                                                                                                  \
    tp_gd_loadn_##tag(src, &s, n);                                                                             \
    tp_gd_walk1(kv, s, e, k);                                                                                  \
    return 0;                                                                                                  \
  }                                                                                                            \
  TP_HELPER void* tp_gd_row_##tag(tp_v16* acc, T* src, float* dst, float e, float k, tp_v16* d,        \
                                          float q) {                                                           \
    tp_v16 s;                                                                                                  \
    tp_gd_load_##tag(src, &s);                                                                                    \
    s = tp_gd_walk2(acc, s, e, k, d, q);                                                                       \
    tp_gd_store_f32(&s, dst);                                                                                     \
    return 0;                                                                                                  \
  }                                                                                                            \
  TP_HELPER void* tp_gd_rown_##tag(tp_v16* acc, T* src, float* dst, float e, float k, tp_v16* d,       \
                                           float q, int32_t n) {                                               \
    tp_v16 s;                                                                                                  \
    tp_gd_loadn_##tag(src, &s, n);                                                                             \
    s = tp_gd_walk2(acc, s, e, k, d, q);                                                                       \
    tp_gd_storen_f32(&s, dst, n);                                                                              \
    return 0;                                                                                                  \
  }                                                                                                            \
  TP_HELPER void* tp_gd_copy_##tag(T* src, float* dst) {                                               \
    tp_v16 s;                                                                                                  \
    tp_gd_load_##tag(src, &s);                                                                                    \
    tp_gd_store_f32(&s, dst);                                                                                     \
    return 0;                                                                                                  \
  }                                                                                                            \
  TP_HELPER void* tp_gd_copyn_##tag(T* src, float* dst, int32_t n) {                                   \
    tp_v16 s;                                                                                                  \
    tp_gd_loadn_##tag(src, &s, n);                                                                             \
    tp_gd_storen_f32(&s, dst, n);                                                                              \
    return 0;                                                                                                  \
  }
TP_GD_ROWS(f32, float)
TP_GD_ROWS(f16, uint16_t)
TP_GD_ROWS(bf16, uint16_t)
#undef TP_GD_ROWS

// v' = beta * (v - kv) in fp64, rounded once to fp32.
TP_HELPER tp_v16 tp_gd_delta(tp_v16* kv, tp_v16 v, float beta) {
  tp_gd_acc a;
  memcpy(&a, kv, 128);
  const tp_gd_d b = tp_gd_splat64(beta);
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_gd_d lo, hi;
    tp_gd_widen(v.v[i], &lo, &hi);
    r.v[i] = tp_gd_narrow(b * (lo - a.v[2 * i]), b * (hi - a.v[2 * i + 1]));
  }
  return r;
}
// scale * acc in fp64, rounded once to fp32: the output.
TP_HELPER tp_v16 tp_gd_scaled(tp_v16* acc, double scale) {
  tp_gd_acc a;
  memcpy(&a, acc, 128);
  const tp_gd_d s = tp_gd_splat64(scale);
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = tp_gd_narrow(s * a.v[2 * i], s * a.v[2 * i + 1]);
  return r;
}
"""

VP, VV, OUT = range(3)  # vector slots: v', v, o
KV, ACC_O = 0, 2  # fp64 sums (two slots each): kv = S^T k, o = S^T q


def _strides(name: str, rank: int) -> tuple:
    return tuple(T.dynamic(f"{name}_s{i}", "int64") for i in range(rank - 1)) + (1,)


def _tensor(dtype: str, name: str, *sizes):
    """A tensor of the given sizes with any strides but a unit last one (its stride variables named after it)."""
    return T.StridedTensor(sizes, _strides(name, len(sizes)), dtype)


def _call(fn: str, *args) -> None:
    T.evaluate(T.call_extern("handle", fn, *args))


def _ref(buf, *index):
    return T.address_of(T.BufferLoad(buf, list(index)))


def _if(cond, then, otherwise=None) -> None:
    with T.If(cond):
        with T.Then():
            then()
        if otherwise is not None:
            with T.Else():
                otherwise()


def _scalar(io: Io, value):
    """One element of ``io``'s storage as fp32."""
    return value if io.tl == "float32" else T.call_extern("float32", f"tp_load1_{io.tag}", value)


def _source(it, src: str, r, col):
    """(address, storage tag) of row r of the state's strip at ``col``: the initial state, zeros, or the item's
    own fp32 rows of the final state."""
    if src == "zero":
        return _ref(it.zeros, 0), "f32"
    if src == "initial":
        return _ref(it.initial_state, it.n, it.j, r, col), it.S0.tag
    return _ref(it.final_state, it.n, it.j, r, col), "f32"


def _token(it, t, src: str, col, n) -> None:
    """Token t's step on the strip at ``col`` (n lanes, None: 16), the state's rows read from ``src``."""
    v, acc, sc, X = it.v, it.acc, it.sc, it.X
    more = () if n is None else (n,)
    tail = "" if n is None else "n"
    T.buffer_store(sc, T.float32(1), [0])  # e = exp(g)
    T.buffer_store(sc, T.float32(1), [1])  # beta
    _if(it.has_g != 0, lambda: T.buffer_store(sc, it.exp(_scalar(it.G, it.g[it.b, t, it.j])), [0]))
    _if(it.has_beta != 0, lambda: T.buffer_store(sc, _scalar(it.BT, it.beta[it.b, t, it.j]), [1]))
    _call("tp_gd_zero64", _ref(acc, KV))
    with T.serial(K) as r:  # kv = (e S)^T k
        row, tag = _source(it, src, r, col)
        _call(f"tp_gd_kv{tail}_{tag}", _ref(acc, KV), row, sc[0], _scalar(X, it.k[it.b, t, it.h, r]), *more)
    _load(X, _ref(it.vv, it.b, t, it.j, col), v, VV, n)
    put(v, VP, T.call_extern(VEC, "tp_gd_delta", _ref(acc, KV), get(v, VV), sc[1]))
    _call("tp_gd_zero64", _ref(acc, ACC_O))
    with T.serial(K) as r:  # S <- e S + k v'^T; o = S^T q
        row, tag = _source(it, src, r, col)
        kr, qr = _scalar(X, it.k[it.b, t, it.h, r]), _scalar(X, it.q[it.b, t, it.h, r])
        dst = _ref(it.final_state, it.n, it.j, r, col)
        _call(f"tp_gd_row{tail}_{tag}", _ref(acc, ACC_O), row, dst, sc[0], kr, _ref(v, VP), qr, *more)
    put(v, OUT, T.call_extern(VEC, "tp_gd_scaled", _ref(acc, ACC_O), it.scale))
    _store(X, v, OUT, _ref(it.o, it.b, t, it.j, col), n)


def _load(io: Io, src, v, slot, n) -> None:
    """v[slot] = 16 lanes at ``src`` (an address) as fp32; with ``n``, the first n, the rest 0."""
    if n is None:
        _call(f"tp_load_{io.tag}", src, _ref(v, slot))
    else:
        _call(f"tp_loadn_{io.tag}", src, _ref(v, slot), n)


def _store(io: Io, v, slot, dst, n) -> None:
    if n is None:
        _call(f"tp_store_{io.tag}", _ref(v, slot), dst)
    else:
        _call(f"tp_storen_{io.tag}", _ref(v, slot), dst, n)


def _strip(it, col, n) -> None:
    """The strip of columns [col, col + 16) (n of them where given) through the item's tokens in order."""
    t0, t1 = it.span[0], it.span[1]
    more = () if n is None else (n,)
    tail = "" if n is None else "n"

    def tokens():
        _if(
            it.has_initial_state != 0,
            lambda: _token(it, t0, "initial", col, n),
            lambda: _token(it, t0, "zero", col, n),
        )
        with T.serial(t1 - t0 - 1) as u:
            _token(it, t0 + 1 + u, "final", col, n)

    def copy(src):  # no token: the final state is the initial one
        with T.serial(K) as r:
            row, tag = _source(it, src, r, col)
            _call(f"tp_gd_copy{tail}_{tag}", row, _ref(it.final_state, it.n, it.j, r, col), *more)

    _if(
        t1 > t0,
        tokens,
        lambda: _if(it.has_initial_state != 0, lambda: copy("initial"), lambda: copy("zero")),
    )


def build(x_dtype: torch.dtype, g_dtype: torch.dtype, beta_dtype: torch.dtype, state_dtype: torch.dtype):
    """The step's kernel for q, k, v (and o) of ``x_dtype``, g, beta and the initial state of their dtypes
    (fp32, fp16 or bf16 each): every shape, packed or not, g / beta / initial state given or not."""
    X, G, BT, S0 = Io(x_dtype), Io(g_dtype), Io(beta_dtype), Io(state_dtype)

    @T.prim_func
    def gated_delta_step(
        q: _tensor(X.tl, "q", B, SEQ, H, K),
        k: _tensor(X.tl, "k", B, SEQ, H, K),
        v: _tensor(X.tl, "v", B, SEQ, HV, V),
        o: _tensor(X.tl, "o", B, SEQ, HV, V),
        final_state: _tensor("float32", "final_state", N, HV, K, V),
        g: _tensor(G.tl, "g", B, SEQ, HV),
        beta: _tensor(BT.tl, "beta", B, SEQ, HV),
        initial_state: _tensor(S0.tl, "initial_state", N, HV, K, V),
        cu_seqlens: _tensor("int64", "cu_seqlens", NS),
        scale: T.float64,
        has_g: T.int32,
        has_beta: T.int32,
        has_initial_state: T.int32,
        has_cu_seqlens: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["N", "HV"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            n = T.truncdiv(first + i, T.cast(HV, "int64"))
            j = T.cast(T.truncmod(first + i, T.cast(HV, "int64")), "int32")
            span = T.alloc_local((2,), "int64")  # the item's tokens [span[0], span[1]) of its batch row
            if has_cu_seqlens != 0:
                span[0] = cu_seqlens[n]
                span[1] = cu_seqlens[n + 1]
            else:
                span[0] = T.int64(0)
                span[1] = T.cast(SEQ, "int64")
            it = SimpleNamespace(
                X=X,
                G=G,
                BT=BT,
                S0=S0,
                n=n,
                j=j,
                h=T.truncdiv(j, T.truncdiv(HV, H)),  # grouped values: value head j reads key head j // (HV / H)
                b=T.if_then_else(has_cu_seqlens != 0, T.int64(0), n),
                span=span,
                q=q,
                k=k,
                vv=v,
                o=o,
                g=g,
                beta=beta,
                initial_state=initial_state,
                final_state=final_state,
                scale=scale,
                has_g=has_g,
                has_beta=has_beta,
                has_initial_state=has_initial_state,
                v=vectors(3),
                acc=vectors(4),
                zeros=T.alloc_local((VL,), "float32"),  # the state's rows before a first token without one
                sc=T.alloc_local((2,), "float32"),
                exp=lambda x: T.cast(T.exp(T.cast(x, "float64")), "float32"),
            )
            with T.serial(VL) as z:
                T.buffer_store(it.zeros, T.float32(0), [z])
            with T.serial(V // VL) as c:
                _strip(it, c * VL, None)
            if V % VL > 0:
                _strip(it, V - V % VL, V % VL)

    return gated_delta_step


PACKED_CHECKS = (("gated_delta_step", lambda dt: build(dt, F32, dt, F32)),)


def _unit_last(x):
    """x, or a contiguous copy where its last dimension is not unit-stride (the kernel reads rows in place)."""
    return x if x is None or x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


def _held(x, like: torch.dtype):
    """x as the kernel takes it: its own dtype where the kernel has one (fp32, fp16, bf16), else ``like``."""
    return x if x is None or x.dtype in STORAGE else x.to(like)


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o [B, T, HV, V] in q's dtype, final_state [N, HV, K, V] fp32 or None without initial_state)."""
    B_, T_, H_, K_ = q.shape
    HV_, V_ = v.shape[2], v.shape[3]
    lengths = sequences.lengths(B_, T_, cu_seqlens, initial_state)
    if 0 in (T_, HV_, K_, V_):  # no token, or states of no element: o is 0, the states pass through
        return torch.zeros_like(v), None if initial_state is None else initial_state.to(F32, copy=True)
    dtype = q.dtype
    q, k, v = (_held(x, F32) for x in (q, k, v))  # fp64: computed in fp32, o given back in fp64
    g, beta, initial_state = (_held(x, F32) for x in (g, beta, initial_state))
    q, k, v, g, beta, initial_state = map(_unit_last, (q, k, v, g, beta, initial_state))
    N_ = len(lengths)
    o = outputs.empty((B_, T_, HV_, V_), q.dtype, q.device)
    # without an initial state there is no final one to give back: the kernel's working rows are scratch
    shape = (N_, HV_, K_, V_)
    final = outputs.empty(shape, F32, q.device) if initial_state is not None else torch.empty(shape, dtype=F32)
    kernel = CACHE.kernel(
        "fused_recurrent_gated_delta_rule",
        build,
        q.dtype,
        F32 if g is None else g.dtype,
        q.dtype if beta is None else beta.dtype,
        F32 if initial_state is None else initial_state.dtype,
    )
    kernel(
        threads_for(N_ * HV_ * K_ * V_ * max(max(lengths), 1)),
        q=q,
        k=k,
        v=v,
        o=o,
        final_state=final,
        g=g,
        beta=beta,
        initial_state=initial_state,
        cu_seqlens=cu_seqlens,
        scale=float(scale),
    )
    return o.to(dtype), (final if initial_state is not None else None)
