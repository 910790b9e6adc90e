"""rope (rotary position embedding) forward and backward as one TileLang CPU kernel (C target): one compiled
kernel per dtype combination (q/k, tables, position_ids, offsets), serving every shape, both pair layouts and
both directions.

A grid kernel over the B * T tokens (``pairs.py``): each token computes its table row p once (position_ids,
else t + offset + offsets[b]) and rotates all its heads of q and k, 16 pairs at a time, reading the tensors
and tables in place (strided, no expanded tables, no de-interleaving copies). Math in fp32, each product
rounded before the sum (no FMA: fp32 has the bits of torch's ``q * cos + rotate_half(q) * sin``), rounded
once to q's dtype. A token whose p is outside the table gets c = s = 0. The backward is the forward with
``conjugate`` set: sin's sign flipped in registers, not a negated copy of the table.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .interface import GRID
from .pairs import PRELUDE, SEQ, T_RO, B, copy_rest, index, mul, rotate_heads, table, tokens
from .rowwise import Io, splat
from .runtime import CACHE, threads_for

HQ, HK = T.dynamic("Hq"), T.dynamic("Hk")
STREAM_BYTES = 32 << 20  # caller-provided q_out at least this large is written with streaming stores
_INDEX = {torch.int32: "int32", torch.int64: "int64"}


def rotation_by(sign):
    """The rotation of a pair by (c, sign * s): o1 = x1 c - x2 s, o2 = x2 c + x1 s, each product rounded."""

    def rotation(x1, x2, c, s):
        s = s * splat(sign)  # exact: the backward's conjugate rotation has the bits of the forward with -sin
        return mul(x1, c) - mul(x2, s), mul(x2, c) + mul(x1, s)

    return rotation


def build(
    x_dtype: torch.dtype,
    table_dtype: torch.dtype,
    positions: str = "int64",
    offsets_dtype: str = "int64",
    streaming: bool = False,
):
    """The kernel for q and k of ``x_dtype``, tables of ``table_dtype`` and integer inputs of the given dtypes;
    ``streaming``: the outputs written with streaming stores (caller-provided outputs of STREAM_BYTES or more)."""
    X, C = Io(x_dtype), Io(table_dtype)

    @T.prim_func
    def rope(
        q: tokens(X, "q", HQ),
        k: tokens(X, "k", HK),
        q_out: tokens(X, "q_out", HQ),
        k_out: tokens(X, "k_out", HK),
        cos: table(C, "cos"),
        sin: table(C, "sin"),
        position_ids: index(positions, "position_ids", B, SEQ),
        offsets: index(offsets_dtype, "offsets", B),
        offset: T.int64,
        interleaved: T.int32,
        conjugate: T.int32,
        has_k: T.int32,
        has_k_out: T.int32,
        has_position_ids: T.int32,
        has_offsets: T.int32,
        first: T.int64,
        count: T.int64,
    ):
        T.func_attr({GRID: ["B", "T"]})
        with T.Kernel(count, prelude=PRELUDE) as i:
            b = T.truncdiv(first + i, T.cast(SEQ, "int64"))
            t = T.truncmod(first + i, T.cast(SEQ, "int64"))
            p = T.alloc_local((1,), "int64")
            sign = T.alloc_local((1,), "float32")  # -1 for the backward: sin negated
            if has_position_ids != 0:
                p[0] = T.cast(position_ids[b, t], "int64")
            else:
                p[0] = t + offset
                if has_offsets != 0:
                    p[0] = p[0] + T.cast(offsets[b], "int64")
            sign[0] = T.if_then_else(conjugate != 0, T.float32(-1), T.float32(1))
            k_heads = T.if_then_else(T.And(has_k != 0, has_k_out != 0), HK, 0)  # k None: no heads
            groups = [(X, q, q_out, HQ), (X, k, k_out, k_heads)]
            rotation = rotation_by(sign[0])
            if T.And(p[0] >= 0, p[0] < T.cast(T_RO, "int64")):
                if interleaved != 0:
                    rotate_heads(rotation, groups, b, t, True, (C, cos), (C, sin), p[0], streaming)
                else:
                    rotate_heads(rotation, groups, b, t, False, (C, cos), (C, sin), p[0], streaming)
            else:
                if interleaved != 0:
                    rotate_heads(rotation, groups, b, t, True, streaming=streaming)
                else:
                    rotate_heads(rotation, groups, b, t, False, streaming=streaming)
            copy_rest(groups, b, t)

    return rope


# The packed-SIMD check of tests/backends/test_cpu_simd.py asks every kernel for a packed FMA (its row sums); this
# kernel has none by contract, so tests/backends/test_cpu_rope.py checks its disassembly itself.
PACKED_CHECKS = ()


def _unit_last(x):
    """x, or a contiguous copy where its last dimension is not unit-stride (the contract rules it out; an
    expanded gradient such as ``ones.expand(...)`` has stride 0 there)."""
    return x if x is None or x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


def _run(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, conjugate: bool, out=None):
    q, k, cos, sin, position_ids, offsets = map(_unit_last, (q, k, cos, sin, position_ids, offsets))
    if q.dim() != 4 or 2 * cos.shape[-1] > q.shape[-1]:
        raise ValueError(f"rope: q [B, T, H, D], tables [T_ro, R/2], R <= D; got {tuple(q.shape)}, {tuple(cos.shape)}")
    q_out, k_out = (
        out if out is not None else (outputs.empty_in_layout(q), None if k is None else outputs.empty_in_layout(k))
    )
    B_, T_, H, D_ = q.shape
    work = B_ * T_ * (H + (0 if k is None else k.shape[2])) * D_
    # caller-provided outputs this large are streamed (fresh ones keep plain stores: their first touch faults
    # the page into the cache anyway), as l2norm's kernels do
    streaming = out is not None and q_out.numel() * q_out.element_size() >= STREAM_BYTES
    kernel = CACHE.kernel(
        "rope",
        build,
        q.dtype,
        cos.dtype,
        _INDEX.get(getattr(position_ids, "dtype", None), "int64"),
        _INDEX.get(getattr(offsets, "dtype", None), "int64"),
        streaming,
    )
    kernel(
        threads_for(work),
        q=q,
        k=k,
        q_out=q_out,
        k_out=k_out,
        cos=cos,
        sin=sin,
        position_ids=position_ids,
        offsets=offsets,
        offset=int(offset),
        interleaved=int(bool(interleaved)),
        conjugate=int(conjugate),
    )
    return q_out, k_out


def forward(q, k, cos, sin, position_ids, offsets, interleaved: bool, offset: int, out=None):
    """(q_out, k_out): q and k with their first R = 2 * cos.shape[1] columns of each head rotated by the angle of
    each token's table row (``tileport.ops.rope``'s contract); k_out None where k is; ``out``: written into."""
    return _run(q, k, cos, sin, position_ids, offsets, interleaved, offset, False, out)


def backward(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved: bool, offset: int):
    """(dq, dk): the gradients rotated by minus the angle (the forward with sin negated)."""
    return _run(dq_out, dk_out, cos, sin, position_ids, offsets, interleaved, offset, True)
