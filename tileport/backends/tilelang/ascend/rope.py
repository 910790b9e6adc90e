"""rope forward and backward (``tileport.ops.rope``'s contract) for Ascend arch35 (Ascend 950) in TileLang's
ascend dialect, one kernel per (dtype, width bucket, pair chunk, interleaved), launched once for q and once for
k; tokens, heads, D, R and the table's rows are runtime values.

A persistent grid of ``CORES`` vector cores walks the tokens. Per token: its table row (an int32 per token made
on the host, ``rope_device.table_rows``), a chunk of cos and sin moved GM -> UB once, then the heads in
blocks of ``heads``: GM -> UB (the pair's halves as two tiles; GPT-J's pairs as one tile read at even and odd
columns), rotated in a SIMT sub-kernel in fp32, rounded once, UB -> GM, double-buffered by ``T.Pipelined``.
Columns past R are moved through UB unchanged. Every copy has runtime lengths, so none leaves the tensor. A
token off the table gets zeros in its rotated columns; the backward is the conjugate (sin negated). One tensor
per launch: two head walks in one kernel stop tilelang 0.1.15's lowering ("__cond_0 has been used before
definition").
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ... import outputs
from .. import rope_device
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, THREADS, UB_BUDGET, bucket

RUNNER = RUNNERS["ascend"]


def pair_chunk(rotary_dim: int) -> int:
    """Pairs per chunk for a rotary dim: half of R's bucket."""
    return bucket(rotary_dim) // 2


def build(width: int, pairs: int, dtype: torch.dtype, interleaved: bool, conjugate: bool):
    """The kernel: ``pairs`` pairs per rotated chunk, ``width`` columns per pass-through chunk."""
    dt = TL_DTYPE[dtype]
    N, H, D, TR, RH = (T.dynamic(n) for n in ("N", "H", "D", "TR", "RH"))
    # heads per block: a head's four pair tiles (in and out), two pipeline stages each, and its pass-through row
    heads = max(1, min(8, UB_BUDGET // ((8 * pairs + width) * dtype.itemsize)))
    sign = -1.0 if conjugate else 1.0

    @T.macro
    def rotate(X, O, n, k, m, cu, su, xa, xb, oa, ob, ok):
        """Pairs [k * pairs, k * pairs + m) of every head of token n, ``heads`` heads at a time."""
        for hb in T.Pipelined(T.ceildiv(X.shape[1], heads), num_stages=2):
            h0 = hb * heads
            hn = T.min(heads, X.shape[1] - h0)
            if interleaved:
                T.copy(X[n, h0 : h0 + hn, 2 * k * pairs : 2 * k * pairs + 2 * m], xa[0:hn, 0 : 2 * m])
                with T.SimtVF(threads=THREADS):
                    for i, j in T.Parallel(heads, pairs):
                        c = cu[j].astype("float32")
                        s = su[j].astype("float32") * sign
                        x1 = xa[i, 2 * j].astype("float32")
                        x2 = xa[i, 2 * j + 1].astype("float32")
                        oa[i, 2 * j] = T.if_then_else(ok, x1 * c - x2 * s, T.float32(0)).astype(dt)
                        oa[i, 2 * j + 1] = T.if_then_else(ok, x2 * c + x1 * s, T.float32(0)).astype(dt)
                T.copy(oa[0:hn, 0 : 2 * m], O[n, h0 : h0 + hn, 2 * k * pairs : 2 * k * pairs + 2 * m])
            else:
                T.copy(X[n, h0 : h0 + hn, k * pairs : k * pairs + m], xa[0:hn, 0:m])
                T.copy(X[n, h0 : h0 + hn, RH + k * pairs : RH + k * pairs + m], xb[0:hn, 0:m])
                with T.SimtVF(threads=THREADS):
                    for i, j in T.Parallel(heads, pairs):
                        c = cu[j].astype("float32")
                        s = su[j].astype("float32") * sign
                        x1 = xa[i, j].astype("float32")
                        x2 = xb[i, j].astype("float32")
                        oa[i, j] = T.if_then_else(ok, x1 * c - x2 * s, T.float32(0)).astype(dt)
                        ob[i, j] = T.if_then_else(ok, x2 * c + x1 * s, T.float32(0)).astype(dt)
                T.copy(oa[0:hn, 0:m], O[n, h0 : h0 + hn, k * pairs : k * pairs + m])
                T.copy(ob[0:hn, 0:m], O[n, h0 : h0 + hn, RH + k * pairs : RH + k * pairs + m])

    @T.macro
    def pair_chunk_of(X, O, COS, SIN, n, p, ok, k, cu, su, xa, xb, oa, ob):
        """Chunk k of the pairs: its cos and sin (tokens on the table), then every head."""
        m = T.min(pairs, RH - k * pairs)
        if ok:
            T.copy(COS[p, k * pairs : k * pairs + m], cu[0:m])
            T.copy(SIN[p, k * pairs : k * pairs + m], su[0:m])
        rotate(X, O, n, k, m, cu, su, xa, xb, oa, ob, ok)

    @T.macro
    def rest_chunk(X, O, n, k, pu):
        """Chunk k of the columns past R of every head of token n, through UB."""
        c0 = 2 * RH + k * width
        m = T.min(width, D - c0)
        for hb in T.serial(T.ceildiv(X.shape[1], heads)):
            h0 = hb * heads
            hn = T.min(heads, X.shape[1] - h0)
            T.copy(X[n, h0 : h0 + hn, c0 : c0 + m], pu[0:hn, 0:m])
            T.copy(pu[0:hn, 0:m], O[n, h0 : h0 + hn, c0 : c0 + m])

    tile = (heads, 2 * pairs) if interleaved else (heads, pairs)
    second = (1, 1) if interleaved else tile  # the second half's tiles: GPT-J's pairs are one tile
    # a chunk loop only where one chunk may not cover R (or D): a loop over dynamic extents around the pipelined
    # head loop overflows the ascend scheduler's latency estimate (int64) for fp32 tiles (tilelang 0.1.15)
    pair_chunks, rest_chunks = 2 * pairs >= MAX_WIDTH, width >= MAX_WIDTH

    @T.prim_func
    def rope(
        X: T.Tensor((N, H, D), dt),
        XO: T.Tensor((N, H, D), dt),
        COS: T.Tensor((TR, RH), dt),
        SIN: T.Tensor((TR, RH), dt),
        POS: T.Tensor((N,), "int32"),
    ):
        with T.Kernel(CORES) as core:
            cu = T.alloc_shared((pairs,), dt)
            su = T.alloc_shared((pairs,), dt)
            xa = T.alloc_shared(tile, dt)
            xb = T.alloc_shared(second, dt)
            oa = T.alloc_shared(tile, dt)
            ob = T.alloc_shared(second, dt)
            pu = T.alloc_shared((heads, width), dt)
            for t in T.serial(T.ceildiv(N, CORES)):
                n = core + t * CORES
                if n < N:
                    p = POS[n]
                    ok = (p >= 0) and (p < TR)
                    if pair_chunks:
                        for k in T.serial(T.ceildiv(RH, pairs)):
                            pair_chunk_of(X, XO, COS, SIN, n, p, ok, k, cu, su, xa, xb, oa, ob)
                    elif RH > 0:
                        pair_chunk_of(X, XO, COS, SIN, n, p, ok, 0, cu, su, xa, xb, oa, ob)
                    if rest_chunks:
                        for k in T.serial(T.ceildiv(D - 2 * RH, width)):
                            rest_chunk(X, XO, n, k, pu)
                    elif 2 * RH < D:
                        rest_chunk(X, XO, n, 0, pu)

    return rope.with_attr("global_symbol", "rope_bwd" if conjugate else "rope_fwd")


lowered = rope_device.lowered_for(build, bucket, pair_chunk)


def _rotate(conjugate: bool, x, cos, sin, rows, interleaved: bool):
    """One launch per tensor (q, then k): a contiguous [tokens, heads, D] copy where x is not, the output written
    back in x's layout."""
    B, T_, H, D = x.shape
    x3 = x.reshape(B * T_, H, D).contiguous()
    o3 = outputs.empty_like(x3)
    fn = RUNNER.kernel(
        "rope_bwd" if conjugate else "rope_fwd",
        build,
        bucket(D),
        pair_chunk(2 * cos.shape[1]),
        x.dtype,
        bool(interleaved),
        conjugate,
    )
    fn(x3, o3, cos, sin, rows)
    out = outputs.empty_in_layout(x)
    out.copy_(o3.view(x.shape))
    return out


def _run(conjugate: bool, q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    B, T_ = q.shape[:2]
    rows = rope_device.table_rows(position_ids, offsets, offset, B, T_, cos.shape[0], q.device)
    cos, sin = cos.contiguous(), sin.contiguous()
    q_out = _rotate(conjugate, q, cos, sin, rows, interleaved)
    if k is None or k.numel() == 0:
        return q_out, None if k is None else outputs.empty_in_layout(k)
    return q_out, _rotate(conjugate, k, cos, sin, rows, interleaved)


def forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    """(q_out, k_out) on an Ascend 950 NPU (``tileport.ops.rope``'s contract)."""
    return outputs.copied_into(out, _run(False, q, k, cos, sin, position_ids, offsets, interleaved, offset))


def backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """(dq, dk): the output gradients rotated by minus the angle."""
    return _run(True, dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)
