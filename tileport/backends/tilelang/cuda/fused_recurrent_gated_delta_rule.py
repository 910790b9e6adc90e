"""fused_recurrent_gated_delta_rule (``tileport.ops.fused_recurrent_gated_delta_rule``'s contract) as a TileLang CUDA
kernel, one per (dtype, K, V, state dtype): the decode step, its launcher ``../gated_delta_device.py``'s.

A CTA per (V block, sequence, value head) holds its K x BV block of the state in an fp32 register fragment for the
whole sequence: read once from the initial state (in its own dtype: the step's roofline is the state's bytes),
written once as the final state. Per token, from the old state: S^T k and S^T q in one pass (two column sums of
the fragment), v' = beta (v - e S^T k), o = scale (e S^T q + (k.q) v') with e = exp(g), then S <- e S + k v'^T;
so the new state is never read back for o. Lowered (and built to a cubin where nvcc is present), never run here.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .. import gated_delta_device as gdd
from ..targets import RUNNERS, TL_DTYPE

RUNNER = RUNNERS["cuda"]
THREADS = 128


def build(dtype: torch.dtype, K: int, V: int, state_dtype: torch.dtype):
    """The decode kernel over runtime sequences (``TOK``: their token offsets), heads and tokens."""
    dt, st = TL_DTYPE[dtype], TL_DTYPE[state_dtype]
    _, _, BV, NV = gdd.head_blocks(K, V)
    NT, N, H, HV = T.dynamic("NT"), T.dynamic("N"), T.dynamic("H"), T.dynamic("HV")

    @T.prim_func
    def fused_recurrent_gdn_fwd(
        Q: T.Tensor((NT, H, K), dt),
        Kk: T.Tensor((NT, H, K), dt),
        Vv: T.Tensor((NT, HV, V), dt),
        G: T.Tensor((NT, HV), "float32"),
        BETA: T.Tensor((NT, HV), "float32"),
        H0: T.Tensor((N, HV, K, V), st),
        TOK: T.Tensor((N + 1,), "int32"),
        O: T.Tensor((NT, HV, V), dt),
        HT: T.Tensor((N, HV, K, V), "float32"),
        scale: T.float32,
    ):
        with T.Kernel(NV, N * HV, threads=THREADS) as (bv, bnh):
            n = bnh // HV
            bh = bnh % HV
            hk = bh // (HV // H)
            v0 = bv * BV
            s_f = T.alloc_fragment((K, BV), "float32")
            tk_f = T.alloc_fragment((K, BV), "float32")
            tq_f = T.alloc_fragment((K, BV), "float32")
            sk_f = T.alloc_fragment((BV,), "float32")
            sq_f = T.alloc_fragment((BV,), "float32")
            q_s = T.alloc_shared((K,), "float32")
            k_s = T.alloc_shared((K,), "float32")
            v_s = T.alloc_shared((BV,), "float32")
            vn_s = T.alloc_shared((BV,), "float32")
            kq_s = T.alloc_shared((1,), "float32")
            for i, j in T.Parallel(K, BV):
                s_f[i, j] = H0[n, bh, i, v0 + j].astype("float32")
            for t in T.serial(TOK[n + 1] - TOK[n]):
                tok = TOK[n] + t
                e = T.exp(G[tok, bh])
                b = BETA[tok, bh]
                for i in T.Parallel(K):
                    q_s[i] = Q[tok, hk, i].astype("float32")
                    k_s[i] = Kk[tok, hk, i].astype("float32")
                for j in T.Parallel(BV):
                    v_s[j] = Vv[tok, bh, v0 + j].astype("float32")
                for _ in T.Parallel(1):
                    acc = T.alloc_var("float32")
                    acc = 0.0
                    for i in T.serial(K):
                        acc = acc + k_s[i] * q_s[i]
                    kq_s[0] = acc
                for i, j in T.Parallel(K, BV):  # the old state's one read: both column sums
                    tk_f[i, j] = s_f[i, j] * k_s[i]
                    tq_f[i, j] = s_f[i, j] * q_s[i]
                T.reduce_sum(tk_f, sk_f, dim=0)
                T.reduce_sum(tq_f, sq_f, dim=0)
                for j in T.Parallel(BV):
                    vn_s[j] = b * (v_s[j] - e * sk_f[j])
                for j in T.Parallel(BV):
                    O[tok, bh, v0 + j] = (scale * (e * sq_f[j] + kq_s[0] * vn_s[j])).astype(dt)
                for i, j in T.Parallel(K, BV):
                    s_f[i, j] = e * s_f[i, j] + k_s[i] * vn_s[j]
            T.copy(s_f, HT[n, bh, 0:K, v0 : v0 + BV])

    return fused_recurrent_gdn_fwd


def bucket(dim: int) -> int:
    """A kernel per head dimension (its tiles are the head's): ``tileport lower`` keys its cache on the dim."""
    return dim


lowered, forward = gdd.recurrent_entries(build, RUNNER, "a CUDA GPU")
