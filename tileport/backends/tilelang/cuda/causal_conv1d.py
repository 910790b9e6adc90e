"""causal_conv1d forward and backward (``tileport.ops.causal_conv1d``'s contract) as TileLang CUDA kernels, one
per (dtype, width, silu, initial states, seq_idx); batches, tokens and channels are runtime values. The host side
(channel-last inputs, outputs in x's layout) is ``../causal_conv1d_device.py``'s.

- ``causal_conv1d_fwd``: a CTA per (channel chunk, token, batch row), a thread per channel: the bias, then the W
  taps (unrolled; the token's W rows come from L2), silu, 0 at padding, rounded once to x's dtype.
- ``causal_conv1d_grad``: g = dout * silu'(z) in fp32 (z recomputed), 0 at padding.
- ``causal_conv1d_dx``: a CTA per (channel chunk, position, batch row): the position's correlation of g with the
  weight over the tokens it entered, plus dfinal_states, into dx or (before the start) dinitial_states.
- ``causal_conv1d_dweight``: a CTA per channel chunk walks every token in order, summing the W taps' terms and g
  into an fp32 fragment ``[W + 1, chunk]``: deterministic, no atomics.

Without seq_idx a position before the start is the initial state or a zero that multiplies; with it a term enters
only where the ids agree (``if_then_else``: a term left out is no product with 0). These kernels are lowered (and
built to cubins where nvcc is present), never run here.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch
from tilelang import tvm

from .. import causal_conv1d_device as device
from ..targets import RUNNERS, TL_DTYPE

RUNNER = RUNNERS["cuda"]
CHUNK = 128  # channels per CTA, a thread each
tirx = tvm.tirx


def _f32(v):
    return v.astype("float32")


def _xe(X, H, b, s, d, has_init: bool):
    """xe[b, s, d] in fp32: x at s >= 0; before the start the initial state, or 0 (the branch not taken is not
    read: ``if_then_else``)."""
    before = _f32(H[b, H.shape[1] + s, d]) if has_init else T.float32(0)
    return T.if_then_else(s >= 0, _f32(X[b, s, d]), before)


def _enters(IDS, b, t, s, has_seq: bool):
    """Whether position s's term enters token t: always without seq_idx (None); with it, where s is in the row,
    the ids agree and t is no padding (``And`` short-circuits: no id before the start is read)."""
    if not has_seq:
        return None
    return T.And(s >= 0, T.And(IDS[b, t] >= 0, IDS[b, s] == IDS[b, t]))


def _z(X, H, IDS, WT, BIAS, b, t, d, width: int, has_init: bool, has_seq: bool):
    """z[b, t, d] in fp32: the bias, then the W taps that enter."""
    z = BIAS[d]
    for w in range(width):
        s = t - (width - 1) + w
        term = WT[w, d] * _xe(X, H, b, s, d, has_init)
        enters = _enters(IDS, b, t, s, has_seq)
        z = z + (term if enters is None else T.if_then_else(enters, term, T.float32(0)))
    return z


def _let(value, body):
    """body(v) with v let-bound to value (computed once)."""
    v = tirx.Var("z", "float32")
    return tirx.Let(v, value, body(v))


def _live(IDS, b, t, has_seq: bool):
    return T.bool(True) if not has_seq else IDS[b, t] >= 0


def build(kernel: str, dtype: torch.dtype, width: int, silu: bool, has_init: bool, has_seq: bool):
    """One of ``causal_conv1d_device.KERNELS`` for x of ``dtype`` and ``width`` taps."""
    dt = TL_DTYPE[dtype]
    B, L, D, S, NB, NL = (T.dynamic(n) for n in ("B", "L", "D", "S", "NB", "NL"))
    W1 = width + 1

    def act(z):
        return _let(z, lambda v: v / (1.0 + T.exp(-v))) if silu else z

    def act_grad(z):
        return (
            _let(z, lambda v: _let(1.0 / (1.0 + T.exp(-v)), lambda s: s * (1.0 + v * (1.0 - s))))
            if silu
            else T.float32(1)
        )

    @T.prim_func
    def causal_conv1d_fwd(
        X: T.Tensor((B, L, D), dt),
        H: T.Tensor((B, S, D), dt),
        IDS: T.Tensor((NB, NL), "int32"),
        WT: T.Tensor((width, D), "float32"),
        BIAS: T.Tensor((D,), "float32"),
        OUT: T.Tensor((B, L, D), dt),
    ):
        with T.Kernel(T.ceildiv(D, CHUNK), L, B, threads=CHUNK) as (bx, t, b):
            for j in T.Parallel(CHUNK):
                d = bx * CHUNK + j
                if d < D:
                    z = act(_z(X, H, IDS, WT, BIAS, b, t, d, width, has_init, has_seq))
                    OUT[b, t, d] = T.if_then_else(_live(IDS, b, t, has_seq), z, T.float32(0)).astype(dt)

    @T.prim_func
    def causal_conv1d_grad(
        X: T.Tensor((B, L, D), dt),
        H: T.Tensor((B, S, D), dt),
        IDS: T.Tensor((NB, NL), "int32"),
        WT: T.Tensor((width, D), "float32"),
        BIAS: T.Tensor((D,), "float32"),
        DOUT: T.Tensor((B, L, D), dt),
        G: T.Tensor((B, L, D), "float32"),
    ):
        with T.Kernel(T.ceildiv(D, CHUNK), L, B, threads=CHUNK) as (bx, t, b):
            for j in T.Parallel(CHUNK):
                d = bx * CHUNK + j
                if d < D:
                    g = _f32(DOUT[b, t, d]) * act_grad(_z(X, H, IDS, WT, BIAS, b, t, d, width, has_init, has_seq))
                    G[b, t, d] = T.if_then_else(_live(IDS, b, t, has_seq), g, T.float32(0))

    def position_grad(G, IDS, WT, DF, b, q, d):
        """dxe[b, q, d]: the terms position q gave to tokens q .. q + W - 1 (tap W - 1 - k), plus dfinal_states."""
        acc = T.float32(0)
        for k in range(width):
            t = q + k
            inside = T.And(t >= 0, t < L)
            enters = _enters(IDS, b, t, q, has_seq)
            cond = inside if enters is None else T.And(inside, enters)
            acc = acc + T.if_then_else(cond, WT[width - 1 - k, d] * G[b, t, d], T.float32(0))
        f = q - (L - (width - 1))  # the final states' column
        if width > 1:
            acc = acc + T.if_then_else(T.And(f >= 0, f < width - 1), _f32(DF[b, f, d]), T.float32(0))
        return acc

    @T.prim_func
    def causal_conv1d_dx(
        G: T.Tensor((B, L, D), "float32"),
        IDS: T.Tensor((NB, NL), "int32"),
        WT: T.Tensor((width, D), "float32"),
        DF: T.Tensor((B, width - 1, D), dt),
        DX: T.Tensor((B, L, D), dt),
        DH: T.Tensor((B, S, D), dt),
    ):
        with T.Kernel(T.ceildiv(D, CHUNK), L + width - 1, B, threads=CHUNK) as (bx, p, b):
            for j in T.Parallel(CHUNK):
                d = bx * CHUNK + j
                q = p - (width - 1)
                if d < D:
                    if q >= 0:
                        DX[b, q, d] = position_grad(G, IDS, WT, DF, b, q, d).astype(dt)
                    elif has_init:
                        DH[b, S + q, d] = position_grad(G, IDS, WT, DF, b, q, d).astype(dt)

    def tap_term(X, H, IDS, G, b, t, w, d):
        """Row w < W: g[t] times the input tap w read (if it entered); row W: g[t] (the bias' term)."""
        s = t - (width - 1) + w
        g = G[b, t, d]
        term = g * _xe(X, H, b, s, d, has_init)
        enters = _enters(IDS, b, t, s, has_seq)
        term = term if enters is None else T.if_then_else(enters, term, T.float32(0))
        return T.if_then_else(w < width, term, g)

    @T.prim_func
    def causal_conv1d_dweight(
        X: T.Tensor((B, L, D), dt),
        H: T.Tensor((B, S, D), dt),
        IDS: T.Tensor((NB, NL), "int32"),
        G: T.Tensor((B, L, D), "float32"),
        DWB: T.Tensor((W1, D), "float32"),
    ):
        with T.Kernel(T.ceildiv(D, CHUNK), threads=CHUNK) as bx:
            acc = T.alloc_fragment((W1, CHUNK), "float32")
            T.clear(acc)
            for r in T.serial(B * L):
                for w, j in T.Parallel(W1, CHUNK):
                    d = bx * CHUNK + j
                    if d < D:
                        acc[w, j] += tap_term(X, H, IDS, G, r // L, r % L, w, d)
            for w, j in T.Parallel(W1, CHUNK):
                if bx * CHUNK + j < D:
                    DWB[w, bx * CHUNK + j] = acc[w, j]

    kernels = {
        "fwd": causal_conv1d_fwd,
        "grad": causal_conv1d_grad,
        "dx": causal_conv1d_dx,
        "dweight": causal_conv1d_dweight,
    }
    return kernels[kernel].with_attr("global_symbol", f"causal_conv1d_{kernel}")


lowered = device.lowered_for(build)


def forward(x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None) on the GPU (``tileport.ops.causal_conv1d``'s contract)."""
    return device.forward(RUNNER, build, x, weight, bias, initial_states, seq_idx, activation)


def backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None) on the GPU."""
    return device.backward(RUNNER, build, x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation)
