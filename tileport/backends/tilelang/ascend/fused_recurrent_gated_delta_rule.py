"""fused_recurrent_gated_delta_rule (``tileport.ops.fused_recurrent_gated_delta_rule``'s contract) for Ascend arch35
(Ascend 950) in TileLang's ascend dialect, one kernel per (dtype, K, V, state dtype): the decode step, its launcher
``../gated_delta_device.py``'s.

A matrix-vector step, so vector work only: a persistent grid of ``CORES`` vector cores walks the (sequence, value
head, V block) tasks; a task holds its K x BV block of the state in UB (fp32) for the whole sequence, read once
from the initial state (GM -> UB in its own dtype, a narrower one widened in a SIMT block) and written once as
the final state. Per token q, k and v move GM -> UB and one SIMT block does the step with a lane per state
column, no lane reading another's: S^T k, S^T q and k.q in one pass over the lane's column of the old state,
v' = beta (v - e S^T k), o = scale (e S^T q + (k.q) v') (e = exp(g)), then the column rewritten as e S + k v'^T.
Lowered to Ascend C here; compiling needs CANN's bisheng, running an Ascend 950 NPU: it has not run.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from .. import gated_delta_device as gdd
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, THREADS

RUNNER = RUNNERS["ascend"]
F32 = "float32"


def build(dtype: torch.dtype, K: int, V: int, state_dtype: torch.dtype):
    """The decode kernel over runtime sequences (``TOK``: their token offsets), heads and tokens; V blocks of up to
    ``THREADS`` columns (a lane each)."""
    dt, st = TL_DTYPE[dtype], TL_DTYPE[state_dtype]
    gdd.head_blocks(K, V)
    BV = min(V, THREADS)
    NV = V // BV
    NT, N, H, HV = T.dynamic("NT"), T.dynamic("N"), T.dynamic("H"), T.dynamic("HV")

    @T.prim_func
    def fused_recurrent_gdn_fwd(
        Q: T.Tensor((NT, H, K), dt),
        Kk: T.Tensor((NT, H, K), dt),
        Vv: T.Tensor((NT, HV, V), dt),
        G: T.Tensor((NT, HV), F32),
        BETA: T.Tensor((NT, HV), F32),
        H0: T.Tensor((N, HV, K, V), st),
        TOK: T.Tensor((N + 1,), "int32"),
        O: T.Tensor((NT, HV, V), dt),
        HT: T.Tensor((N, HV, K, V), F32),
        scale: T.float32,
    ):
        with T.Kernel(CORES) as core:
            s_u = T.alloc_shared((K, BV), F32)
            h_u = s_u if st == F32 else T.alloc_shared((K, BV), st)  # a narrower initial state: widened in UB
            q_u = T.alloc_shared((K,), dt)
            k_u = T.alloc_shared((K,), dt)
            v_u = T.alloc_shared((BV,), dt)
            o_u = T.alloc_shared((BV,), dt)
            for t in T.serial(T.ceildiv(N * HV * NV, CORES)):
                task = core + t * CORES
                if task < N * HV * NV:
                    bv = task % NV
                    n = task // NV // HV
                    bh = task // NV % HV
                    hk = bh // (HV // H)
                    v0 = bv * BV
                    T.copy(H0[n, bh, 0:K, v0 : v0 + BV], h_u)
                    if st != F32:
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(K, BV):
                                s_u[i, j] = h_u[i, j].astype(F32)
                    for x in T.serial(TOK[n + 1] - TOK[n]):
                        tok = TOK[n] + x
                        e = T.exp(G[tok, bh])
                        b = BETA[tok, bh]
                        T.copy(Q[tok, hk, 0:K], q_u)
                        T.copy(Kk[tok, hk, 0:K], k_u)
                        T.copy(Vv[tok, bh, v0 : v0 + BV], v_u)
                        with T.SimtVF(threads=THREADS):
                            for j in T.Parallel(BV):
                                sk = T.alloc_var(F32)
                                sq = T.alloc_var(F32)
                                kq = T.alloc_var(F32)
                                sk = 0.0
                                sq = 0.0
                                kq = 0.0
                                for i in T.serial(K):  # the old state's one read: S^T k, S^T q, and k.q
                                    ki = k_u[i].astype(F32)
                                    qi = q_u[i].astype(F32)
                                    sk = sk + s_u[i, j] * ki
                                    sq = sq + s_u[i, j] * qi
                                    kq = kq + ki * qi
                                vn = b * (v_u[j].astype(F32) - e * sk)
                                o_u[j] = (scale * (e * sq + kq * vn)).astype(dt)
                                for i in T.serial(K):
                                    s_u[i, j] = e * s_u[i, j] + k_u[i].astype(F32) * vn
                        T.copy(o_u, O[tok, bh, v0 : v0 + BV])
                    T.copy(s_u, HT[n, bh, 0:K, v0 : v0 + BV])

    return fused_recurrent_gdn_fwd


WIDEST = gdd.MAX_HEAD_DIM  # the widest dim it lowers (a head's, not a row's): what a budget check lowers


def bucket(dim: int) -> int:
    """A kernel per head dimension (its tiles are the head's): ``tileport lower`` keys its cache on the dim."""
    return dim


lowered, forward = gdd.recurrent_entries(build, RUNNER, "an Ascend 950 NPU")
