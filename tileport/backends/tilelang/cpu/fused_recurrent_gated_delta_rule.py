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

Per token and 16 columns each row costs, on AVX2 (two ymm per 16 lanes): walk 1 two loads, two multiplies, two
extracts and four widenings to fp64, four fp64 FMAs; walk 2 the same plus two fp32 FMAs and two stores: about 32
instructions per row and strip (K = V = 128: 8 strips x 128 rows, about 33k per token and value head).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
from types import SimpleNamespace

import tilelang.cpu.language as T
import torch

from ... import outputs, sequences
from .interface import GRID
from .rowwise import STORAGE, VEC, VL, Io, get, put, splat, vectors
from .runtime import CACHE, threads_for

B, SEQ, H, K = T.dynamic("B"), T.dynamic("T"), T.dynamic("H"), T.dynamic("K")
HV, V, N, NS = T.dynamic("HV"), T.dynamic("V"), T.dynamic("N"), T.dynamic("NS")
F32 = torch.float32

# fp64 lanes of a K-reduction: 16 of them held in two tp_v16 slots (as simd.h's tp_dot64_*).
PRELUDE = r"""
#if defined(__x86_64__) || defined(__i386__)
#define TP_GD_OPAQUE(r) __asm__("" : "+v"(r))
#elif defined(__aarch64__)
#define TP_GD_OPAQUE(r) __asm__("" : "+w"(r))
#else
#define TP_GD_OPAQUE(r) __asm__("" : "+m"(r))
#endif
extern "C" inline void* tp_gd_zero64(tp_v16* acc) {
  memset(acc, 0, 128);
  return 0;
}
// e * s per lane, rounded to fp32 on its own (never fused into the FMA that adds k v' to it): the decayed state.
extern "C" inline tp_v16 tp_gd_decay(tp_v16 s, float e) {
  tp_v16 r;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf p = s.v[i] * e;
    TP_GD_OPAQUE(p);
    r.v[i] = p;
  }
  return r;
}
// e * s + k * d per lane: the decayed state (rounded as tp_gd_decay's) plus the update, one FMA.
extern "C" inline tp_v16 tp_gd_update(tp_v16 s, float e, float k, tp_v16 d) {
  tp_v16 es = tp_gd_decay(s, e), r;
  const tp_nf kk = (tp_nf){} + k;
#pragma GCC unroll 4
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = tp_fma_nf(kk, d.v[i], es.v[i]);
  return r;
}
// acc (16 fp64 lanes) += x * s, the products exact (24-bit factors).
extern "C" inline void* tp_gd_axpy64(tp_v16* acc, float x, tp_v16 s) {
  tp_nd a[2], lo, hi;
  memcpy(a, acc, 128);
  tp_widen16(&s, &lo, &hi);
  const tp_nd xx = (tp_nd){} + (double)x;
  a[0] = tp_fma_nd(xx, lo, a[0]);
  a[1] = tp_fma_nd(xx, hi, a[1]);
  memcpy(acc, a, 128);
  return 0;
}
// beta * (v - kv) per lane in fp64, rounded once to fp32: the update v'.
extern "C" inline tp_v16 tp_gd_delta(tp_v16* kv, tp_v16 v, float beta) {
  tp_nd a[2], lo, hi;
  memcpy(a, kv, 128);
  tp_widen16(&v, &lo, &hi);
  const tp_nd b = (tp_nd){} + (double)beta;
  return tp_narrow16(b * (lo - a[0]), b * (hi - a[1]));
}
// scale * acc per lane, rounded once to fp32: the output.
extern "C" inline tp_v16 tp_gd_scaled(tp_v16* acc, double scale) {
  tp_nd a[2];
  memcpy(a, acc, 128);
  return tp_narrow16(scale * a[0], scale * a[1]);
}
"""

SR, VP, VV, OUT, KV, ACC_O = 0, 1, 2, 3, 4, 6  # vector slots: a state row, v', v, o; fp64 sums (two slots each)


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


FP32 = Io(F32)


def _state_row(it, src: str, r, col, n) -> None:
    """v[SR] = row r of the state's strip at ``col``: from the initial state, zeros, or the item's fp32 rows."""
    if src == "zero":
        put(it.v, SR, splat(T.float32(0)))
    elif src == "initial":
        _load(it.S0, _ref(it.initial_state, it.n, it.j, r, col), it.v, SR, n)
    else:
        _load(FP32, _ref(it.final_state, it.n, it.j, r, col), it.v, SR, n)


def _token(it, t, src: str, col, n) -> None:
    """Token t's step on the strip at ``col`` (n lanes, None: 16), the state read from ``src``."""
    v, sc, X = it.v, it.sc, it.X
    T.buffer_store(sc, T.float32(1), [0])  # e = exp(g)
    T.buffer_store(sc, T.float32(1), [1])  # beta
    _if(it.has_g != 0, lambda: T.buffer_store(sc, it.exp(_scalar(it.G, it.g[it.b, t, it.j])), [0]))
    _if(it.has_beta != 0, lambda: T.buffer_store(sc, _scalar(it.BT, it.beta[it.b, t, it.j]), [1]))
    _call("tp_gd_zero64", _ref(v, KV))
    with T.serial(K) as r:  # kv = (e S)^T k
        _state_row(it, src, r, col, n)
        kr = _scalar(X, it.k[it.b, t, it.h, r])
        _call("tp_gd_axpy64", _ref(v, KV), kr, T.call_extern(VEC, "tp_gd_decay", get(v, SR), sc[0]))
    _load(X, _ref(it.vv, it.b, t, it.j, col), v, VV, n)
    put(v, VP, T.call_extern(VEC, "tp_gd_delta", _ref(v, KV), get(v, VV), sc[1]))
    _call("tp_gd_zero64", _ref(v, ACC_O))
    with T.serial(K) as r:  # S <- e S + k v'^T; o = S^T q
        _state_row(it, src, r, col, n)
        kr = _scalar(X, it.k[it.b, t, it.h, r])
        put(v, SR, T.call_extern(VEC, "tp_gd_update", get(v, SR), sc[0], kr, get(v, VP)))
        _store(FP32, v, SR, _ref(it.final_state, it.n, it.j, r, col), n)
        _call("tp_gd_axpy64", _ref(v, ACC_O), _scalar(X, it.q[it.b, t, it.h, r]), get(v, SR))
    put(v, OUT, T.call_extern(VEC, "tp_gd_scaled", _ref(v, ACC_O), it.scale))
    _store(X, v, OUT, _ref(it.o, it.b, t, it.j, col), n)


def _strip(it, col, n) -> None:
    """The strip of columns [col, col + 16) (n of them where given) through the item's tokens in order."""
    t0, t1 = it.span[0], it.span[1]

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
            _state_row(it, src, r, col, n)
            _store(FP32, it.v, SR, _ref(it.final_state, it.n, it.j, r, col), n)

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
                v=vectors(8),
                sc=T.alloc_local((2,), "float32"),
                exp=lambda x: T.cast(T.exp(T.cast(x, "float64")), "float32"),
            )
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
