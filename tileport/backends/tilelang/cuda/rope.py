"""rope forward and backward (``tileport.ops.rope``'s contract) as TileLang CUDA kernels, one per (dtype, width
bucket, pair chunk, interleaved, with k); tokens, heads, D, R and the table's rows are runtime values.

One CTA per token: its table row (an int32 per token, made on the host from ``position_ids`` or ``t + offset +
offsets[b]``, clamped to [-1, T_ro]) picks a chunk of cos and sin into shared memory once, and every head of q,
then of k, is rotated with it, ``heads`` heads at a time when the chunk is narrower than the CTA. Products are
``__fmul_rn`` (each rounded, never contracted into an fma by nvcc), so fp32 is bit for bit with the torch
composite; one rounding to the output's dtype. The backward is the forward's conjugate (sin negated). Columns
past R are copied; a token off the table gets zeros in its rotated columns.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from ... import outputs
from .. import rope_device
from ..targets import RUNNERS, TL_DTYPE
from ._common import MAX_THREADS, bucket

RUNNER = RUNNERS["cuda"]


def _mul(a, b):
    """a * b in fp32, rounded: an fma cannot absorb it."""
    return T.call_extern("float32", "__fmul_rn", a, b)


def pair_chunk(rotary_dim: int) -> int:
    """Pairs per chunk for a rotary dim: half of R's bucket."""
    return bucket(rotary_dim) // 2


def build(width: int, pairs: int, dtype: torch.dtype, interleaved: bool, conjugate: bool, with_k: bool = True):
    """The kernel: ``pairs`` pairs per rotated chunk, ``width`` columns per pass-through chunk."""
    dt = TL_DTYPE[dtype]
    N, HQ, HK, D, TR, RH = (T.dynamic(n) for n in ("N", "HQ", "HK", "D", "TR", "RH"))
    heads = max(1, MAX_THREADS // pairs)  # heads per rotated pass
    heads_copy = max(1, MAX_THREADS // width)  # heads per pass-through pass
    sign = -1.0 if conjugate else 1.0

    @T.macro
    def rotate(X, O, n, k, cs, sn, ok):
        for hb in T.serial(T.ceildiv(X.shape[1], heads)):
            for hh, j in T.Parallel(heads, pairs):
                h = hb * heads + hh
                i = k * pairs + j
                if h < X.shape[1] and i < RH:
                    i1 = 2 * i if interleaved else i
                    i2 = 2 * i + 1 if interleaved else i + RH
                    x1 = X[n, h, i1].astype("float32")
                    x2 = X[n, h, i2].astype("float32")
                    O[n, h, i1] = T.if_then_else(ok, _mul(x1, cs[j]) - _mul(x2, sn[j]), T.float32(0)).astype(dt)
                    O[n, h, i2] = T.if_then_else(ok, _mul(x2, cs[j]) + _mul(x1, sn[j]), T.float32(0)).astype(dt)

    @T.macro
    def copy_rest(X, O, n):
        for k in T.serial(T.ceildiv(D - 2 * RH, width)):
            for hb in T.serial(T.ceildiv(X.shape[1], heads_copy)):
                for hh, j in T.Parallel(heads_copy, width):
                    h = hb * heads_copy + hh
                    col = 2 * RH + k * width + j
                    if h < X.shape[1] and col < D:
                        O[n, h, col] = X[n, h, col]

    @T.prim_func
    def rope(
        Q: T.Tensor((N, HQ, D), dt),
        K: T.Tensor((N, HK, D), dt),
        QO: T.Tensor((N, HQ, D), dt),
        KO: T.Tensor((N, HK, D), dt),
        COS: T.Tensor((TR, RH), dt),
        SIN: T.Tensor((TR, RH), dt),
        POS: T.Tensor((N,), "int32"),
    ):
        with T.Kernel(N, threads=min(MAX_THREADS, max(heads * pairs, heads_copy * width))) as n:
            cs = T.alloc_shared((pairs,), "float32")
            sn = T.alloc_shared((pairs,), "float32")
            p = POS[n]
            ok = (p >= 0) and (p < TR)
            row = T.if_then_else(ok, p, 0)
            for k in T.serial(T.ceildiv(RH, pairs)):
                for j in T.Parallel(pairs):
                    i = k * pairs + j
                    cs[j] = T.if_then_else(ok and i < RH, COS[row, i].astype("float32"), T.float32(0))
                    sn[j] = T.if_then_else(ok and i < RH, SIN[row, i].astype("float32") * sign, T.float32(0))
                rotate(Q, QO, n, k, cs, sn, ok)
                if with_k:
                    rotate(K, KO, n, k, cs, sn, ok)
            copy_rest(Q, QO, n)
            if with_k:
                copy_rest(K, KO, n)

    return rope.with_attr("global_symbol", "rope_bwd" if conjugate else "rope_fwd")


lowered = rope_device.lowered_for(build, bucket, pair_chunk)


def _run(conjugate: bool, q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """One launch for q and k: contiguous [tokens, heads, D] copies where the inputs are not, the table rows made
    on the host, outputs written back in the inputs' layouts."""
    B, T_, HQ, D = q.shape
    with_k = k is not None and k.numel() > 0
    pos = rope_device.table_rows(position_ids, offsets, offset, B, T_, cos.shape[0], q.device)
    q3 = q.reshape(B * T_, HQ, D).contiguous()
    k3 = k.reshape(B * T_, k.shape[2], D).contiguous() if with_k else q3
    qo3 = outputs.empty_like(q3)
    ko3 = outputs.empty_like(k3) if with_k else qo3
    fn = RUNNER.kernel(
        "rope_bwd" if conjugate else "rope_fwd",
        build,
        bucket(D),
        pair_chunk(2 * cos.shape[1]),
        q.dtype,
        bool(interleaved),
        conjugate,
        with_k,
    )
    fn(q3, k3, qo3, ko3, cos.contiguous(), sin.contiguous(), pos)
    q_out = outputs.empty_in_layout(q)
    q_out.copy_(qo3.view(q.shape))
    if k is None:
        return q_out, None
    k_out = outputs.empty_in_layout(k)
    if with_k:
        k_out.copy_(ko3.view(k.shape))
    return q_out, k_out


def forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    """(q_out, k_out) on the GPU (``tileport.ops.rope``'s contract)."""
    return outputs.copied_into(out, _run(False, q, k, cos, sin, position_ids, offsets, interleaved, offset))


def backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """(dq, dk): the output gradients rotated by minus the angle."""
    return _run(True, dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset)
