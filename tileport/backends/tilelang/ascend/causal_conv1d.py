"""causal_conv1d forward and backward (``tileport.ops.causal_conv1d``'s contract) for Ascend arch35 (Ascend 950) in
TileLang's ascend dialect, one kernel per (dtype, width, silu, initial states, seq_idx); batches, tokens and
channels are runtime values. The host side and the kernels' GM form (channel-last ``[B, L, D]``) are
``../causal_conv1d_device.py``'s.

A persistent grid of ``CORES`` vector cores walks tiles of ``BT`` tokens by ``BD`` channels. A tile's rows and
the W - 1 before them move GM -> UB in one copy of runtime length (the initial states' rows before the start; zeros
there without them, the zeros that multiply; the sequence ids' rows likewise, -1 before the start and past the
row, so no term of another sequence or of no sequence enters), the math runs in a SIMT sub-kernel in fp32, the
result moves UB -> GM rounded once. The backward: g = dout * silu'(z) to fp32 GM; each position's correlation of
g with the weight (plus dfinal_states) into dx or dinitial_states; the parameter gradients by a core per channel
chunk walking every tile in order (deterministic), accumulated in an fp32 UB tile ``[W + 1, BD]``.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from .. import causal_conv1d_device as device
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, THREADS

RUNNER = RUNNERS["ascend"]
BT, BD = 64, 128  # tokens and channels of a tile (BD * 2 bytes: 32-byte aligned rows for 16-bit dtypes)
MAX_WIDTH = BT + 1  # the rows before a tile's first token fit one tile's worth


def build(kernel: str, dtype: torch.dtype, width: int, silu: bool, has_init: bool, has_seq: bool):
    """One of ``causal_conv1d_device.KERNELS`` for x of ``dtype`` and ``width`` taps."""
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"the Ascend kernels take widths 1 to {MAX_WIDTH}, got {width}")
    dt = TL_DTYPE[dtype]
    B, L, D, S, NB, NL = (T.dynamic(n) for n in ("B", "L", "D", "S", "NB", "NL"))
    R = BT + width - 1  # a tile's rows: the W - 1 positions before its first token, then its tokens
    W1 = width + 1

    @T.macro
    def fill_rows(xa, iu):
        """xa = 0 and ids = -1 before the copies: positions before the start or past the row."""
        with T.SimtVF(threads=THREADS):
            for i, j in T.Parallel(R, BD):
                xa[i, j] = T.cast(0, dt)
        if has_seq:
            with T.SimtVF(threads=THREADS):
                for i in T.Parallel(R):
                    iu[i] = -1

    @T.macro
    def load_rows(X, H, IDS, xa, iu, b, t0, c0, m):
        """Positions [t0 - (W - 1), t0 + BT) of channels [c0, c0 + m) into xa (and their ids into iu)."""
        fill_rows(xa, iu)
        r0 = T.max(t0 - (width - 1), 0)
        r1 = T.min(t0 + BT, L)
        o = r0 - (t0 - (width - 1))
        T.copy(X[b, r0:r1, c0 : c0 + m], xa[o : o + r1 - r0, 0:m])
        if has_seq:
            T.copy(IDS[b, r0:r1], iu[o : o + r1 - r0])
        if has_init and width > 1:
            if t0 == 0:
                T.copy(H[b, 0:S, c0 : c0 + m], xa[0:S, 0:m])

    def z_of(xa, iu, wu, bu, i, j):
        """z of the tile's token i (row i + W - 1) in fp32: the bias, then the W taps that enter."""
        z = bu[j]
        for w in range(width):
            term = wu[w, j] * xa[i + w, j].astype("float32")
            if has_seq:
                me = iu[i + width - 1]
                term = T.if_then_else(T.And(me >= 0, iu[i + w] == me), term, T.float32(0))
            z = z + term
        return z

    def live(iu, i):
        return T.bool(True) if not has_seq else iu[i + width - 1] >= 0

    def position_grad(ga, iu, wu, fu, q0, i, j):
        """dxe of the tile's position i (q0 + i): dfinal_states there, then the terms it gave to tokens q0 + i + k
        (ga's row i + k) with tap W - 1 - k, where they entered."""
        acc = fu[i, j].astype("float32")
        for k in range(width):
            t = q0 + i + k
            enters = T.And(t >= 0, t < L)
            if has_seq:
                enters = T.And(enters, T.And(q0 + i >= 0, T.And(iu[i + k] >= 0, iu[i + k] == iu[i])))
            acc = acc + T.if_then_else(enters, wu[width - 1 - k, j] * ga[i + k, j], T.float32(0))
        return acc

    def tap_term(xa, iu, gu, t0, i, w, j):
        """Row w < W of the parameter gradients: g of token i times the input tap w read, where it entered; row W:
        g (the bias' term)."""
        x = T.if_then_else(w < width, xa[i + w, j].astype("float32"), T.float32(1))
        enters = t0 + i < L
        if has_seq:
            me = iu[i + width - 1]
            enters = T.And(enters, T.Or(w == width, T.And(me >= 0, iu[i + w] == me)))
        return T.if_then_else(enters, gu[i, j] * x, T.float32(0))

    @T.macro
    def params(WT, BIAS, wu, bu, c0, m):
        T.copy(WT[0:width, c0 : c0 + m], wu[0:width, 0:m])
        T.copy(BIAS[c0 : c0 + m], bu[0:m])

    @T.prim_func
    def causal_conv1d_fwd(
        X: T.Tensor((B, L, D), dt),
        H: T.Tensor((B, S, D), dt),
        IDS: T.Tensor((NB, NL), "int32"),
        WT: T.Tensor((width, D), "float32"),
        BIAS: T.Tensor((D,), "float32"),
        OUT: T.Tensor((B, L, D), dt),
    ):
        with T.Kernel(CORES) as core:
            xa = T.alloc_shared((R, BD), dt)
            iu = T.alloc_shared((R,), "int32")
            wu = T.alloc_shared((width, BD), "float32")
            bu = T.alloc_shared((BD,), "float32")
            ou = T.alloc_shared((BT, BD), dt)
            n_t, n_c = T.ceildiv(L, BT), T.ceildiv(D, BD)
            for it in T.serial(T.ceildiv(B * n_t * n_c, CORES)):
                item = core + it * CORES
                if item < B * n_t * n_c:
                    b, t0, c0 = item // (n_t * n_c), item // n_c % n_t * BT, item % n_c * BD
                    m = T.min(BD, D - c0)
                    params(WT, BIAS, wu, bu, c0, m)
                    load_rows(X, H, IDS, xa, iu, b, t0, c0, m)
                    with T.SimtVF(threads=THREADS):
                        for i, j in T.Parallel(BT, BD):
                            z = z_of(xa, iu, wu, bu, i, j)
                            if silu:
                                z = z / (1.0 + T.exp(-z))
                            ou[i, j] = T.if_then_else(live(iu, i), z, T.float32(0)).astype(dt)
                    rows = T.min(BT, L - t0)
                    T.copy(ou[0:rows, 0:m], OUT[b, t0 : t0 + rows, c0 : c0 + m])

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
        with T.Kernel(CORES) as core:
            xa = T.alloc_shared((R, BD), dt)
            iu = T.alloc_shared((R,), "int32")
            wu = T.alloc_shared((width, BD), "float32")
            bu = T.alloc_shared((BD,), "float32")
            du = T.alloc_shared((BT, BD), dt)
            gu = T.alloc_shared((BT, BD), "float32")
            n_t, n_c = T.ceildiv(L, BT), T.ceildiv(D, BD)
            for it in T.serial(T.ceildiv(B * n_t * n_c, CORES)):
                item = core + it * CORES
                if item < B * n_t * n_c:
                    b, t0, c0 = item // (n_t * n_c), item // n_c % n_t * BT, item % n_c * BD
                    m = T.min(BD, D - c0)
                    rows = T.min(BT, L - t0)
                    params(WT, BIAS, wu, bu, c0, m)
                    load_rows(X, H, IDS, xa, iu, b, t0, c0, m)
                    T.copy(DOUT[b, t0 : t0 + rows, c0 : c0 + m], du[0:rows, 0:m])
                    with T.SimtVF(threads=THREADS):
                        for i, j in T.Parallel(BT, BD):
                            g = du[i, j].astype("float32")
                            if silu:
                                z = z_of(xa, iu, wu, bu, i, j)
                                s = 1.0 / (1.0 + T.exp(-z))
                                g = g * (s * (1.0 + z * (1.0 - s)))
                            gu[i, j] = T.if_then_else(live(iu, i), g, T.float32(0))
                    T.copy(gu[0:rows, 0:m], G[b, t0 : t0 + rows, c0 : c0 + m])

    @T.prim_func
    def causal_conv1d_dx(
        G: T.Tensor((B, L, D), "float32"),
        IDS: T.Tensor((NB, NL), "int32"),
        WT: T.Tensor((width, D), "float32"),
        DF: T.Tensor((B, width - 1, D), dt),
        DX: T.Tensor((B, L, D), dt),
        DH: T.Tensor((B, S, D), dt),
    ):
        with T.Kernel(CORES) as core:
            ga = T.alloc_shared((R, BD), "float32")  # g of tokens [q0, q0 + BT + W - 1)
            iu = T.alloc_shared((R,), "int32")
            wu = T.alloc_shared((width, BD), "float32")
            fu = T.alloc_shared((BT, BD), dt)  # dfinal_states at the tile's positions
            xu = T.alloc_shared((BT, BD), dt)
            n_t, n_c = T.ceildiv(L + width - 1, BT), T.ceildiv(D, BD)
            tail = L - (width - 1)  # the final states' first position
            for it in T.serial(T.ceildiv(B * n_t * n_c, CORES)):
                item = core + it * CORES
                if item < B * n_t * n_c:
                    b, c0 = item // (n_t * n_c), item % n_c * BD
                    q0 = item // n_c % n_t * BT - (width - 1)  # the tile's first position
                    m = T.min(BD, D - c0)
                    T.copy(WT[0:width, c0 : c0 + m], wu[0:width, 0:m])
                    with T.SimtVF(threads=THREADS):
                        for i, j in T.Parallel(R, BD):
                            ga[i, j] = T.float32(0)
                        for i, j in T.Parallel(BT, BD):
                            fu[i, j] = T.cast(0, dt)
                    if has_seq:
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(R):
                                iu[i] = -1
                    r0, r1 = T.max(q0, 0), T.min(q0 + R, L)
                    if r1 > r0:
                        T.copy(G[b, r0:r1, c0 : c0 + m], ga[r0 - q0 : r1 - q0, 0:m])
                        if has_seq:
                            T.copy(IDS[b, r0:r1], iu[r0 - q0 : r1 - q0])
                    if width > 1:
                        f0, f1 = T.max(q0 - tail, 0), T.min(q0 + BT - tail, width - 1)
                        if f1 > f0:
                            T.copy(DF[b, f0:f1, c0 : c0 + m], fu[f0 + tail - q0 : f1 + tail - q0, 0:m])
                    with T.SimtVF(threads=THREADS):
                        for i, j in T.Parallel(BT, BD):
                            xu[i, j] = position_grad(ga, iu, wu, fu, q0, i, j).astype(dt)
                    neg = T.max(0, T.min(BT, -q0))  # the tile's positions before the start
                    rows = T.min(BT, L - q0)
                    if has_init:
                        if neg > 0:
                            T.copy(xu[0:neg, 0:m], DH[b, S + q0 : S + q0 + neg, c0 : c0 + m])
                    if rows > neg:
                        T.copy(xu[neg:rows, 0:m], DX[b, q0 + neg : q0 + rows, c0 : c0 + m])

    @T.prim_func
    def causal_conv1d_dweight(
        X: T.Tensor((B, L, D), dt),
        H: T.Tensor((B, S, D), dt),
        IDS: T.Tensor((NB, NL), "int32"),
        G: T.Tensor((B, L, D), "float32"),
        DWB: T.Tensor((W1, D), "float32"),
    ):
        with T.Kernel(CORES) as core:
            xa = T.alloc_shared((R, BD), dt)
            iu = T.alloc_shared((R,), "int32")
            gu = T.alloc_shared((BT, BD), "float32")
            acc = T.alloc_shared((W1, BD), "float32")
            n_t, n_c = T.ceildiv(L, BT), T.ceildiv(D, BD)
            for it in T.serial(T.ceildiv(n_c, CORES)):
                c = core + it * CORES
                if c < n_c:
                    c0 = c * BD
                    m = T.min(BD, D - c0)
                    with T.SimtVF(threads=THREADS):
                        for w, j in T.Parallel(W1, BD):
                            acc[w, j] = T.float32(0)
                    for r in T.serial(B * n_t):  # every tile of the channel chunk, in order
                        b, t0 = r // n_t, r % n_t * BT
                        rows = T.min(BT, L - t0)
                        load_rows(X, H, IDS, xa, iu, b, t0, c0, m)
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(BT, BD):
                                gu[i, j] = T.float32(0)
                        T.copy(G[b, t0 : t0 + rows, c0 : c0 + m], gu[0:rows, 0:m])
                        with T.SimtVF(threads=THREADS):
                            for w, j in T.Parallel(W1, BD):
                                for i in T.serial(BT):
                                    acc[w, j] = acc[w, j] + tap_term(xa, iu, gu, t0, i, w, j)
                    T.copy(acc[0:W1, 0:m], DWB[0:W1, c0 : c0 + m])

    kernels = {
        "fwd": causal_conv1d_fwd,
        "grad": causal_conv1d_grad,
        "dx": causal_conv1d_dx,
        "dweight": causal_conv1d_dweight,
    }
    return kernels[kernel].with_attr("global_symbol", f"causal_conv1d_{kernel}")


lowered = device.lowered_for(build)


def forward(x, weight, bias, initial_states, seq_idx, activation: str):
    """(out, final_states or None) on an Ascend 950 NPU (``tileport.ops.causal_conv1d``'s contract)."""
    return device.forward(RUNNER, build, x, weight, bias, initial_states, seq_idx, activation)


def backward(x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation: str):
    """(dx, dweight, dbias, dinitial_states or None) on an Ascend 950 NPU."""
    return device.backward(RUNNER, build, x, weight, bias, initial_states, seq_idx, dout, dfinal_states, activation)
