"""fused_recurrent_gated_delta_rule in Triton (``tileport.ops.fused_recurrent_gated_delta_rule``'s contract): gated
DeltaNet a token at a time, for decoding, as flash-linear-attention's fused recurrent kernel computes it, written
for tileport.

``_step_kernel``: one task per (sequence, value head, V block of BV); its state S [BK, BV] (all of K, fp32) is read
once from the initial state (zeros without), kept in registers over the sequence's tokens, and written once to the
final state. Per token: S <- e^g S (no decay without g), v' = beta (v - S^T k) (beta 1 without it), S <- S + k v'^T,
o = scale S^T q, stored in q's dtype (bf16 rounded by hand, ``common.store``). q and k belong to value head j's key
head j // (HV / H). Sequences are the batch's rows or the packed ones of ``cu_seqlens`` (B = 1). BK is all of K (a
power of 2, at least 16); BV all of V under the interpreter (fewer programs), 32 on a GPU and on Ascend. The grid
walks the tasks as the chunk kernels do: one program a task on a GPU and the interpreter, the vector cores on Ascend,
each looping. Ascend A2/A3 (triton-ascend 3.2): it lowers to Linalg IR, its tiles 17 KB at K = V = 128 (the
readiness check's count: the [128, 32] state and its products).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs, sequences
from . import interpreting
from ._delta import inner_contiguous, programs, width
from .ascend import chip_of
from .common import check_size, launch_context, storage, store

KERNELS = ("_step_kernel",)
LOWERING_DIMS = (16, 64, 128)  # head dims (K = V) the Ascend lowering takes


@triton.jit
def _step_kernel(
    Q,
    K_,
    V_,
    G,
    BETA,
    O,
    H0,
    HT,
    CU,
    N,
    T,
    H,
    HV,
    KD,
    VD,
    scale,
    sqb,
    sqt,
    sqh,
    skb,
    skt,
    skh,
    svb,
    svt,
    svh,
    sgb,
    sgt,
    sgh,
    sbb,
    sbt,
    sbh,
    sob,
    sot,
    soh,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_G: tl.constexpr,
    HAS_BETA: tl.constexpr,
    HAS_H0: tl.constexpr,
    VARLEN: tl.constexpr,
    O_BF16: tl.constexpr,
):
    """The recurrence of each (sequence, value head, V block) task, token by token, the state in registers."""
    R = HV // H
    NV = tl.cdiv(VD, BV)
    kr = tl.arange(0, BK)
    mk = kr < KD
    for task in range(tl.program_id(0), N * HV * NV, tl.num_programs(0)):
        n = task // (HV * NV)
        hv = (task // NV) % HV
        vc = (task % NV) * BV + tl.arange(0, BV)
        mv = vc < VD
        sm = mk[:, None] & mv[None, :]
        so = tl.cast(n * HV + hv, tl.int64) * KD * VD + kr[:, None] * VD + vc[None, :]
        if HAS_H0:
            s = tl.load(H0 + so, mask=sm, other=0.0).to(tl.float32)
        else:
            s = tl.zeros([BK, BV], dtype=tl.float32)
        if VARLEN:
            row = tl.zeros((), dtype=tl.int64)
            first = tl.load(CU + n)
            last = tl.load(CU + n + 1)
        else:
            row = tl.cast(n, tl.int64)
            first = tl.zeros((), dtype=tl.int64)
            last = first + T
        kh = tl.cast(hv // R, tl.int64)
        hv64 = tl.cast(hv, tl.int64)
        qp = Q + row * sqb + kh * sqh
        kp = K_ + row * skb + kh * skh
        vp = V_ + row * svb + hv64 * svh
        op = O + row * sob + hv64 * soh
        for t in range(first, last):
            q = tl.load(qp + t * sqt + kr, mask=mk, other=0.0).to(tl.float32)
            k = tl.load(kp + t * skt + kr, mask=mk, other=0.0).to(tl.float32)
            v = tl.load(vp + t * svt + vc, mask=mv, other=0.0).to(tl.float32)
            if HAS_G:
                s = s * tl.exp(tl.load(G + row * sgb + t * sgt + hv64 * sgh).to(tl.float32))
            d = v - tl.sum(s * k[:, None], 0)
            if HAS_BETA:
                d = d * tl.load(BETA + row * sbb + t * sbt + hv64 * sbh).to(tl.float32)
            s = s + k[:, None] * d[None, :]
            store(op + t * sot + vc, tl.sum(s * q[:, None], 0) * scale, mv, O_BF16)
        if HAS_H0:
            tl.store(HT + so, s, mask=sm)


def _value_block(VD: int, device) -> int:
    """BV: the interpreter takes V whole (fewer programs); a GPU 32 columns a program (more programs over a decode
    batch); Ascend 32 as well, the [BK, BV] state and its products well inside the unified buffer."""
    if interpreting() and chip_of(device) is None:
        return width(VD)
    return min(width(VD), 32)


def forward(q, k, v, g, beta, initial_state, cu_seqlens, scale: float):
    """(o [B, T, HV, V] in q's dtype, the final states [N, HV, K, V] fp32, or None without initial_state); g None:
    no decay, beta None: 1."""
    for x in (q, k, v):
        check_size("fused_recurrent_gated_delta_rule", x)
    q, k, v = (inner_contiguous(x) for x in (q, k, v))
    B, T, H, KD = q.shape
    HV, VD = v.shape[2], v.shape[3]
    N = len(sequences.lengths(B, T, cu_seqlens, initial_state))
    h0 = None if initial_state is None else initial_state.contiguous()
    o = outputs.empty(v.shape, q.dtype, q.device)
    final = None if h0 is None else outputs.empty((N, HV, KD, VD), torch.float32, q.device)
    BK, BV = width(KD), _value_block(VD, q.device)
    tasks = N * HV * triton.cdiv(VD, BV)
    if tasks == 0:
        return o, final
    gt = g if g is not None else q  # a placeholder where HAS_G / HAS_BETA are off
    bt = beta if beta is not None else q
    cu = cu_seqlens if cu_seqlens is not None else q
    with launch_context():
        _step_kernel[programs(tasks, q.device)](
            q,
            k,
            v,
            gt,
            bt,
            storage(o),
            h0 if h0 is not None else q,
            final if final is not None else q,
            cu,
            N,
            T,
            H,
            HV,
            KD,
            VD,
            float(scale),
            *q.stride()[:3],
            *k.stride()[:3],
            *v.stride()[:3],
            *gt.stride()[:3],
            *bt.stride()[:3],
            *o.stride()[:3],
            BK=BK,
            BV=BV,
            HAS_G=g is not None,
            HAS_BETA=beta is not None,
            HAS_H0=h0 is not None,
            VARLEN=cu_seqlens is not None,
            O_BF16=q.dtype == torch.bfloat16,
        )
    return o, final


def lowering_examples(dtype: torch.dtype, dim: int, generator: torch.Generator) -> list[dict]:
    """Inputs (in the spec's names) that reach every constexpr of ``_step_kernel`` for ``tileport lower`` at head
    dim K = V = ``dim``: a decode batch with g, beta and a state (GVA, HV = 2 H); packed sequences without g, beta
    or state."""

    def randn(*shape, dt=dtype):
        return torch.randn(shape, generator=generator).to(dt)

    decode = {"q": randn(4, 1, 2, dim), "k": randn(4, 1, 2, dim), "v": randn(4, 1, 4, dim)}
    decode |= {"g": -torch.rand((4, 1, 4), generator=generator), "beta": torch.rand((4, 1, 4), generator=generator)}
    decode |= {"initial_state": randn(4, 4, dim, dim, dt=torch.float32), "scale": dim**-0.5}
    packed = {"q": randn(1, 9, 1, dim), "k": randn(1, 9, 1, dim), "v": randn(1, 9, 1, dim)}
    packed |= {"cu_seqlens": torch.tensor([0, 4, 4, 9]), "scale": 1.0}
    return [decode, packed]
