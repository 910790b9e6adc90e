"""Gated DeltaNet's TileLang device kernels (CUDA, Ascend arch35): what both dialects share, written once.

The kernels' GM interface (one argument order per kernel, below), the host side around them (sequences padded to
chunks of ``C`` tokens, gates as fp32 rows, the launch sequence of the forward, the backward and the decode step),
the entry points a target's module exports (``lowered`` for ``tileport lower``, ``forward``/``backward`` for the
backend) over its builders and runner, and the in-chunk vector math both dialects write the same way (parallel
loops over shared memory / UB tiles; an Ascend kernel calls them inside a ``T.SimtVF`` block): the chunk's
cumulative sum of g and dg's reverse one, row sums, and the triangular inverse (I + A)^-1.

The math is the chunk algorithm of ``tileport/backends/tilelang/cpu/chunked.py`` (gc: the chunk's cumulative g,
gam its last; A = strictly-lower(beta_r k_r.k_s exp(gc_r - gc_s)); Tinv = (I + A)^-1):
    prepare   W = Tinv (beta exp(gc) k), U = Tinv (beta v)                          per chunk and value head
    states    V' = U - W S;  S <- exp(gam) S + (exp(gam - gc) k)^T V'               per sequence, head, V block
    output    O = scale (exp(gc) q S + lower(q k^T exp(gc_r - gc_s)) V')            per chunk, head, V block
and its backward: dv_local (P^T dO), the reverse state recurrence (dS, dV'), dq/dk/dW/dg (per K block), and the
WY backward (dk, dv, dbeta, dg through Tinv). Intermediates cross GM in the kernels' dtype where a matrix product
reads them (W, U, Tinv, the chunk states, V', dS, dV', dW: the products' operands, as flash-linear-attention keeps
them) and in fp32 where they are sums (gc, the partial gradients). Each sequence is padded to whole chunks with
tokens of k = v = q = 0, beta = 0, g = 0, which leave the state unchanged; the chunks of a sequence are consecutive
(``offsets[n]`` is sequence n's first chunk), so a state kernel walks them in order.

GM interface (NCH chunks of C tokens; N sequences; H key heads, HV value heads, the value head j reading key head
j // (HV / H); dtypes: q, k, v, W, U, TINV, HS, VN, DH, DVN, DW, O in the kernels' dtype, everything else fp32):
    prepare     (Kc [NCH, C, H, K], Vc [NCH, C, HV, V], G [NCH, HV, C], BETA [NCH, HV, C],
                 GC [NCH, HV, C], W [NCH, C, HV, K], U [NCH, C, HV, V][, TINV [NCH, HV, C, C]])
    states      (Kc, W, U, GC, H0 [N, HV, K, V], CO [N + 1] int32, HS [NCH, HV, K, V], VN [NCH, C, HV, V],
                 HT [N, HV, K, V])
    output      (Qc [NCH, C, H, K], Kc, GC, HS, VN, O [NCH, C, HV, V], scale)
    bwd_dv      (Qc, Kc, GC, DO [NCH, C, HV, V], DVL [NCH, C, HV, V], scale)
    bwd_states  (Qc, Kc, W, GC, DO, DVL, DHT [N, HV, K, V], CO, DH [NCH, HV, K, V], DVN [NCH, C, HV, V],
                 DH0 [N, HV, K, V], scale)
    bwd_dqkwg   (Qc, Kc, GC, HS, VN, DO, DH, DVN, DQ [NCH, C, HV, K], DK [NCH, C, HV, K], DW [NCH, C, HV, K],
                 DGC [NK, NCH, HV, C], scale)
    bwd_wy      (Kc, Vc, BETA, GC, TINV, W, U, DW, DVN, DK, DGC, DKO [NCH, C, HV, K], DV [NCH, C, HV, V],
                 DBETA [NCH, HV, C], DG [NCH, HV, C])
    decode      (Q [NT, H, K], K [NT, H, K], V [NT, HV, V], G [NT, HV], BETA [NT, HV], H0 [N, HV, K, V] (state
                 dtype), TOK [N + 1] int32, O [NT, HV, V], HT [N, HV, K, V], scale)
DQ and DK are per value head (summed over each key head's group here); DGC per K block of ``bwd_dqkwg`` (NK =
K / its block), summed by ``bwd_wy``, which also turns dg's per-position terms into dg (the reverse cumulative sum).
None of these kernels has run here (no GPU or NPU): they are lowered and their on-chip bytes checked.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .. import outputs, sequences
from .targets import TL_DTYPE

C = 64  # tokens per chunk (fla's chunk_size, the CPU backend's)
BS = 16  # rows of a diagonal block of the triangular inverse
F32 = torch.float32

PREPARE, STATES, OUTPUT = "chunk_gdn_fwd_prepare", "chunk_gdn_fwd_states", "chunk_gdn_fwd_output"
BWD_PREPARE, BWD_DV, BWD_STATES = "chunk_gdn_bwd_prepare", "chunk_gdn_bwd_dv", "chunk_gdn_bwd_states"
BWD_DQKWG, BWD_WY = "chunk_gdn_bwd_dqkwg", "chunk_gdn_bwd_wy"
DECODE = "fused_recurrent_gdn_fwd"


# ---- the in-chunk math both dialects share (over the dialect T; on Ascend called inside a T.SimtVF block) ----


def prefix_sums(T, n: int = C):
    """A macro ``(g, gc)``: gc[i] = g[0] + ... + g[i] over n positions, each lane summing its own prefix (n^2 / 2
    adds, no cross-lane step: nothing to synchronize, the same order on every target)."""

    @T.macro
    def body(g, gc):
        for i in T.Parallel(n):
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(n):
                if j <= i:
                    acc = acc + g[j]
            gc[i] = acc

    return body


def suffix_sums(T, n: int = C):
    """A macro ``(d, out)``: out[i] = d[i] + ... + d[n - 1] (dg from its per-position terms: g enters through the
    cumulative sum, so its gradient is the reverse one), a lane per position as ``prefix_sums``."""

    @T.macro
    def body(d, out):
        for i in T.Parallel(n):
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(n):
                if j >= i:
                    acc = acc + d[j]
            out[i] = acc

    return body


def row_dot(T, n: int, rows: int = C, add: bool = False):
    """A macro ``(x, y, out)``: out[i] = sum_j x[i, j] y[i, j] over n columns in fp32 (``add``: out[i] += it), a
    lane per row, on shared memory / UB tiles (a fragment's row sum does not lower for every MMA layout: "ReduceOp
    cannot lower a layout where a source index depends on a thread-owned reduce segment")."""

    @T.macro
    def body(x, y, out):
        for i in T.Parallel(rows):
            acc = T.alloc_var("float32")
            acc = out[i] if add else 0.0
            for j in T.serial(n):
                acc = acc + x[i, j].astype("float32") * y[i, j].astype("float32")
            out[i] = acc

    return body


def row_sums(T, n: int = C):
    """A macro ``(x, out)``: out[i] = sum_j x[i, j] of an fp32 tile's n columns, a lane per row."""

    @T.macro
    def body(x, out):
        for i in T.Parallel(n):
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(n):
                acc = acc + x[i, j]
            out[i] = acc

    return body


def row_minus_col(T, n: int = C):
    """A macro ``(x, rows)``: rows[i] += sum_j x[i, j] - sum_j x[j, i] for an n x n fp32 tile (the gradient of a
    decay exp(gc_i - gc_j) reaches gc_i with + and gc_j with -)."""

    @T.macro
    def body(x, rows):
        for i in T.Parallel(n):
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(n):
                acc = acc + x[i, j] - x[j, i]
            rows[i] = rows[i] + acc

    return body


def state_decay_grad(T, bk: int):
    """A macro ``(gk, hd, gc, dg)``: dg[i] -= gk[i], and the chunk state's own decay exp(gam) takes sum(gk) +
    exp(gam) sum(hd) (hd: a K block's rows of sum(S dS)) on the chunk's last position, where gam = gc[C - 1]."""

    @T.macro
    def body(gk, hd, gc, dg):
        for i in T.Parallel(C):
            dg[i] = dg[i] - gk[i]
        for _ in T.Parallel(1):
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(C):
                acc = acc + gk[j]
            for r in T.serial(bk):
                acc = acc + T.exp(gc[C - 1]) * hd[r]
            dg[C - 1] = dg[C - 1] + acc

    return body


def solve(T, n: int = C, bs: int = BS):
    """A macro ``(a, t, m)``: t = (I + a)^-1 for a strictly lower-triangular n x n fp32 ``a``, by blocked forward
    substitution in fp32: first the bs x bs diagonal blocks, a lane per column of each (row r of column c is
    -a[r, c] - sum_{c<j<r} a[r, j] t[j, c]: a lane reads only its own column, so the n / bs blocks run at once),
    then the block rows in order, T_ij = -D_i sum_k A_ik T_kj (k < i), as two products per block row through the
    scratch ``m`` (bs x n): the sum over the rows above, then D_i's. Every product is fp32 (the inverse feeds both
    WY factors; a tensor-core or cube product in the kernels' dtype would round it first). The phases are separate
    parallel loops: each dialect synchronizes its lanes between them."""
    nb = n // bs

    @T.macro
    def body(a, t, m):
        for i, j in T.Parallel(n, n):
            t[i, j] = T.if_then_else(i == j, 1.0, 0.0)
        for b, c in T.Parallel(nb, bs):
            for r in T.serial(1, bs):
                if c < r:
                    acc = T.alloc_var("float32")
                    acc = -a[b * bs + r, b * bs + c]
                    for j in T.serial(bs):
                        if j > c and j < r:
                            acc = acc - a[b * bs + r, b * bs + j] * t[b * bs + j, b * bs + c]
                    t[b * bs + r, b * bs + c] = acc
        for bi in tuple(range(1, nb)):  # unrolled: each block row's extents are static
            for r, c in T.Parallel(bs, bi * bs):
                acc = T.alloc_var("float32")
                acc = 0.0
                for j in T.serial(bi * bs):
                    acc = acc + a[bi * bs + r, j] * t[j, c]
                m[r, c] = acc
            for r, c in T.Parallel(bs, bi * bs):
                acc = T.alloc_var("float32")
                acc = 0.0
                for j in T.serial(bs):
                    acc = acc - t[bi * bs + r, bi * bs + j] * m[j, c]
                t[bi * bs + r, c] = acc

    return body


MAX_HEAD_DIM = 128  # the widest head lowered within the budgets (Qwen3-Next, Qwen3.5: 128); 256 needs narrower blocks


def blocks(V: int, widest: int = 64) -> int:
    """The V (or K) block of the kernels that split a head dimension: the whole of it up to ``widest``."""
    return min(V, widest)


def head_blocks(K: int, V: int):
    """(BK, NK, BV, NV): the K and V blocks and their counts; ValueError for a head dimension the tiles do not take
    (a multiple of 16 up to 64, of 64 up to ``MAX_HEAD_DIM``)."""
    BK, BV = blocks(K), blocks(V)
    for d in (K, V):
        if not (16 <= d <= MAX_HEAD_DIM and d % 16 == 0 and d % min(d, 64) == 0):
            raise ValueError(
                f"gated DeltaNet's device kernels take head dims that are multiples of 16 up to 64 and of 64 up to "
                f"{MAX_HEAD_DIM}, got K = {K}, V = {V}"
            )
    return BK, K // BK, BV, V // BV


# ---- host side: sequences as whole chunks ----


@dataclass(frozen=True)
class Chunking:
    """Where each token of a [B, T] batch (or of B = 1 packed sequences) sits among NCH chunks of C positions.

    ``offsets``: int32 [N + 1], sequence n's chunks are [offsets[n], offsets[n + 1]); ``tokens``: int64 [NCH * C],
    each position's token in the flat B * T, -1 on padding (None: B sequences of T tokens, T a multiple of C,
    taken by a view)."""

    B: int
    T: int
    N: int
    NCH: int
    offsets: torch.Tensor
    tokens: torch.Tensor | None


def chunking(B: int, T: int, cu_seqlens, states, device) -> Chunking:
    """The chunks of B sequences of T tokens or of the ``cu_seqlens`` packed ones (``states`` checked against them)."""
    lengths = sequences.lengths(B, T, cu_seqlens, states)
    counts = [-(-n // C) for n in lengths]
    NCH = sum(counts)
    offsets = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32, device=device)
    if cu_seqlens is None and T % C == 0:
        return Chunking(B, T, len(lengths), NCH, offsets, None)
    firsts = [b * T for b in range(B)] if cu_seqlens is None else cu_seqlens[:-1].tolist()
    seq = torch.repeat_interleave(torch.arange(len(counts), device=device), torch.tensor(counts, device=device))
    within = (torch.arange(NCH, device=device) - offsets.long()[seq])[:, None] * C + torch.arange(C, device=device)
    length = torch.tensor(lengths, dtype=torch.long, device=device)[seq][:, None]
    first = torch.tensor(firsts, dtype=torch.long, device=device)[seq][:, None]
    tokens = torch.where(within < length, first + within, -1).reshape(-1)
    return Chunking(B, T, len(lengths), NCH, offsets, tokens)


def pack(ch: Chunking, x: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, D] (any strides) as contiguous chunks [NCH, C, heads, D] of its dtype, padding zeroed."""
    heads, D = x.shape[2], x.shape[3]
    if ch.tokens is None:
        return x.reshape(ch.NCH, C, heads, D).contiguous()
    y = x.reshape(ch.B * ch.T, heads, D).index_select(0, ch.tokens.clamp_min(0))
    y.masked_fill_((ch.tokens < 0)[:, None, None], 0)
    return y.view(ch.NCH, C, heads, D)


def pack_rows(ch: Chunking, x: torch.Tensor | None, heads: int, fill: float, device) -> torch.Tensor:
    """A per-token, per-head value x [B, T, heads] (None: ``fill``) as fp32 rows [NCH, heads, C], padding 0."""
    if x is None:
        x = torch.full((ch.B, ch.T, heads), fill, dtype=F32, device=device)
    y = pack(ch, x.to(F32).unsqueeze(-1)).squeeze(-1)
    return y.transpose(1, 2).contiguous()


def unpack(ch: Chunking, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Chunks [NCH, C, heads, D] back to tokens [B, T, heads, D] in ``dtype`` (padding dropped)."""
    heads, D = y.shape[2], y.shape[3]
    if ch.tokens is None:
        return y.reshape(ch.B, ch.T, heads, D).to(dtype)
    out = outputs.empty((ch.B * ch.T, heads, D), dtype, y.device)
    valid = ch.tokens >= 0
    out[ch.tokens[valid]] = y.reshape(-1, heads, D)[valid].to(dtype)
    return out.view(ch.B, ch.T, heads, D)


def unpack_rows(ch: Chunking, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows [NCH, heads, C] back to [B, T, heads] in ``dtype``."""
    return unpack(ch, y.transpose(1, 2).unsqueeze(-1), dtype).squeeze(-1)


def by_key_head(x: torch.Tensor, H: int) -> torch.Tensor:
    """x [NCH, C, HV, D] summed over each key head's group of value heads: [NCH, C, H, D]."""
    NCH, C_, HV, D = x.shape
    return x if HV == H else x.view(NCH, C_, H, HV // H, D).sum(3)


def _checked(q, where: str):
    if q.dtype not in TL_DTYPE:
        raise TypeError(f"{where}: backend 'tilelang' on a device takes fp16, bf16 or fp32 q, k and v, got {q.dtype}")


def _state(x: torch.Tensor | None, shape, device) -> torch.Tensor:
    """A state (or its gradient) as contiguous fp32, zeros where there is none."""
    return torch.zeros(shape, dtype=F32, device=device) if x is None else x.to(F32).contiguous()


# ---- entry points ----


class ChunkBuilders(NamedTuple):
    """A target's builders of the chunk kernels, each ``(dtype, K, V) -> prim_func`` (prepare also takes whether
    it writes Tinv, for the backward); the argument orders are this module's."""

    prepare: object
    states: object
    output: object
    bwd_dv: object
    bwd_states: object
    bwd_dqkwg: object
    bwd_wy: object


def chunk_entries(b: ChunkBuilders, runner, device: str):
    """chunk_gated_delta_rule's (lowered, forward, backward) for a target."""

    def lowered(dtype: torch.dtype, dim: int, value_dim: int | None = None) -> dict:
        """{kernel name: prim_func} for heads of K = ``dim`` (and V = ``value_dim``, default ``dim``) columns, for
        ``tileport lower``: the forward's three kernels, then the backward's five."""
        K, V = dim, value_dim or dim
        return {
            PREPARE: b.prepare(dtype, K, V, False),
            STATES: b.states(dtype, K, V),
            OUTPUT: b.output(dtype, K, V),
            BWD_PREPARE: b.prepare(dtype, K, V, True),
            BWD_DV: b.bwd_dv(dtype, K, V),
            BWD_STATES: b.bwd_states(dtype, K, V),
            BWD_DQKWG: b.bwd_dqkwg(dtype, K, V),
            BWD_WY: b.bwd_wy(dtype, K, V),
        }

    def kernel(name, build, *args):
        return runner.kernel(name, build, *args)

    def _prepared(q, k, v, g, beta, initial_state, cu_seqlens, keep_tinv: bool):
        """The chunks of the inputs and the prepare kernel's results: (ch, dims, chunks, gates, WY factors)."""
        _checked(q, "chunk_gated_delta_rule")
        B, T_, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        dev, dt = q.device, q.dtype
        ch = chunking(B, T_, cu_seqlens, initial_state, dev)
        qc, kc, vc = pack(ch, q), pack(ch, k), pack(ch, v.to(dt))
        G, BETA = pack_rows(ch, g, HV, 0.0, dev), pack_rows(ch, beta, HV, 1.0, dev)
        GC = outputs.empty((ch.NCH, HV, C), F32, dev)
        W = outputs.empty((ch.NCH, C, HV, K), dt, dev)
        U = outputs.empty((ch.NCH, C, HV, V), dt, dev)
        args = [kc, vc, G, BETA, GC, W, U]
        TINV = None
        if keep_tinv:
            TINV = outputs.empty((ch.NCH, HV, C, C), dt, dev)
            args.append(TINV)
        kernel(BWD_PREPARE if keep_tinv else PREPARE, b.prepare, dt, K, V, keep_tinv)(*args)
        return ch, (H, HV, K, V), (qc, kc, vc), (BETA, GC), (W, U, TINV)

    def _states(ch, dims, kc, W, U, GC, initial_state, dt):
        H, HV, K, V = dims
        dev = kc.device
        HS = outputs.empty((ch.NCH, HV, K, V), dt, dev)
        VN = outputs.empty((ch.NCH, C, HV, V), dt, dev)
        HT = outputs.empty((ch.N, HV, K, V), F32, dev)
        h0 = _state(initial_state, (ch.N, HV, K, V), dev)
        kernel(STATES, b.states, dt, K, V)(kc, W, U, GC, h0, ch.offsets, HS, VN, HT)
        return HS, VN, HT

    def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
        ch, dims, (qc, kc, _), (_, GC), (W, U, _) = _prepared(q, k, v, g, beta, initial_state, cu_seqlens, False)
        H, HV, K, V = dims
        HS, VN, HT = _states(ch, dims, kc, W, U, GC, initial_state, q.dtype)
        O = outputs.empty((ch.NCH, C, HV, V), q.dtype, q.device)
        kernel(OUTPUT, b.output, q.dtype, K, V)(qc, kc, GC, HS, VN, O, float(scale))
        return unpack(ch, O, q.dtype), (HT if initial_state is not None else None)

    def backward(q, k, v, g, beta, initial_state, cu_seqlens, do, dfinal_state, scale: float):
        ch, dims, (qc, kc, vc), (BETA, GC), (W, U, TINV) = _prepared(q, k, v, g, beta, initial_state, cu_seqlens, True)
        H, HV, K, V = dims
        dev, dt, s = q.device, q.dtype, float(scale)
        HS, VN, _ = _states(ch, dims, kc, W, U, GC, initial_state, dt)
        doc = pack(ch, do.to(dt))
        DVL = outputs.empty((ch.NCH, C, HV, V), F32, dev)
        kernel(BWD_DV, b.bwd_dv, dt, K, V)(qc, kc, GC, doc, DVL, s)
        DH = outputs.empty((ch.NCH, HV, K, V), dt, dev)
        DVN = outputs.empty((ch.NCH, C, HV, V), dt, dev)
        DH0 = outputs.empty((ch.N, HV, K, V), F32, dev)
        dht = _state(dfinal_state, (ch.N, HV, K, V), dev)
        kernel(BWD_STATES, b.bwd_states, dt, K, V)(qc, kc, W, GC, doc, DVL, dht, ch.offsets, DH, DVN, DH0, s)
        DQ, DK = (outputs.empty((ch.NCH, C, HV, K), F32, dev) for _ in range(2))
        DW = outputs.empty((ch.NCH, C, HV, K), dt, dev)
        DGC = outputs.empty((K // blocks(K), ch.NCH, HV, C), F32, dev)
        kernel(BWD_DQKWG, b.bwd_dqkwg, dt, K, V)(qc, kc, GC, HS, VN, doc, DH, DVN, DQ, DK, DW, DGC, s)
        DKO = outputs.empty((ch.NCH, C, HV, K), F32, dev)
        DV = outputs.empty((ch.NCH, C, HV, V), F32, dev)
        DBETA, DG = (outputs.empty((ch.NCH, HV, C), F32, dev) for _ in range(2))
        kernel(BWD_WY, b.bwd_wy, dt, K, V)(kc, vc, BETA, GC, TINV, W, U, DW, DVN, DK, DGC, DKO, DV, DBETA, DG)
        return (
            unpack(ch, by_key_head(DQ, H), q.dtype),
            unpack(ch, by_key_head(DKO, H), k.dtype),
            unpack(ch, DV, v.dtype),
            unpack_rows(ch, DG, g.dtype),
            unpack_rows(ch, DBETA, beta.dtype),
            None if initial_state is None else DH0.to(initial_state.dtype),
        )

    forward.__doc__ = f"(o, final_state) on {device} (``tileport.ops.chunk_gated_delta_rule``'s contract)."
    backward.__doc__ = f"(dq, dk, dv, dg, dbeta, dinitial_state) on {device}, the forward's intermediates recomputed."
    return lowered, forward, backward


STATE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def recurrent_entries(build, runner, device: str):
    """fused_recurrent_gated_delta_rule's (lowered, forward) for a target whose decode builder is
    ``build(dtype, K, V, state_dtype)``: the state read in its own dtype (the step's roofline is its bytes)."""

    def lowered(dtype: torch.dtype, dim: int, value_dim: int | None = None, state_dtype=torch.float32) -> dict:
        """{kernel name: prim_func} for heads of K = ``dim`` (V = ``value_dim``) columns, the initial state read in
        ``state_dtype``, for ``tileport lower``."""
        if state_dtype not in STATE_DTYPES:
            raise ValueError(f"state_dtype must be one of {STATE_DTYPES}, got {state_dtype}")
        return {DECODE: build(dtype, dim, value_dim or dim, state_dtype)}

    def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
        _checked(q, "fused_recurrent_gated_delta_rule")
        B, T_, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        dev, dt = q.device, q.dtype
        lengths = sequences.lengths(B, T_, cu_seqlens, initial_state)
        N = len(lengths)
        tok = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=dev)
        rows = [x.reshape(B * T_, *x.shape[2:]).contiguous() for x in (q, k, v.to(dt))]
        G = torch.zeros(B * T_, HV, dtype=F32, device=dev) if g is None else g.reshape(B * T_, HV).to(F32)
        BETA = torch.ones(B * T_, HV, dtype=F32, device=dev) if beta is None else beta.reshape(B * T_, HV).to(F32)
        sdt = initial_state.dtype if initial_state is not None and initial_state.dtype in STATE_DTYPES else F32
        h0 = (
            torch.zeros(N, HV, K, V, dtype=F32, device=dev)
            if initial_state is None
            else initial_state.to(sdt).contiguous()
        )
        O = outputs.empty((B * T_, HV, V), dt, dev)
        HT = outputs.empty((N, HV, K, V), F32, dev)
        fn = runner.kernel(DECODE, build, dt, K, V, sdt)
        fn(*rows, G.contiguous(), BETA.contiguous(), h0, tok, O, HT, float(scale))
        return O.view(B, T_, HV, V), (HT if initial_state is not None else None)

    forward.__doc__ = f"(o, final_state) on {device} (``tileport.ops.fused_recurrent_gated_delta_rule``'s contract)."
    return lowered, forward
