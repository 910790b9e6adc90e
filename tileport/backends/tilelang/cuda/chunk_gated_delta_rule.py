"""chunk_gated_delta_rule (``tileport.ops.chunk_gated_delta_rule``'s contract) as TileLang CUDA kernels, one per
(dtype, K, V): the forward's prepare, state recurrence and output, the backward's prepare (also writing Tinv),
dv_local, reverse state recurrence, dq/dk/dW/dg and WY backward. Chunks, sequences and heads are runtime values;
the kernels' GM interface, the host side and the shared in-chunk math (the cumulative g, the blocked triangular
inverse) are ``../gated_delta_device.py``'s.

Matrix products are ``T.gemm`` on shared tiles with fp32 fragment accumulators (wgmma on sm_90; fp32 tiles take
tf32 mma_sync); their operands are in the kernels' dtype, as flash-linear-attention's (fla) kernels keep them:
Tinv is rounded once to the dtype as the WY products' left operand, the chunk state once as V' = U - W S's and
q S's, V' and dS once as the state updates'. The triangular inverse is fp32 throughout (SIMT products: a tensor
core would take it as tf32). Decays are exp of differences gc_r - gc_s with r >= s, taken only under their mask
(no exp of a positive difference is formed).

Two things the wheel refused, and what the kernels do instead: a row or column sum of an MMA-layout fragment
("ReduceOp cannot lower a layout where a source index depends on a thread-owned reduce segment", fp16 and fp32
tiles) is taken from a shared-memory copy, a lane per row (``gated_delta_device.row_dot`` and kin); and the
warp-specialized pipelines' register reallocation ("tl::warpgroup_reg_alloc requires a target with CTA register
reconfiguration, such as sm_90a") is switched off (``pipelined``), so the kernels build for sm_90 as ``tileport
lower`` builds them. These kernels are lowered (and built to cubins where nvcc is present), never run here.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .. import gated_delta_device as gdd
from ..gated_delta_device import BS, C
from ..targets import RUNNERS, TL_DTYPE

RUNNER = RUNNERS["cuda"]
THREADS = 128  # 4 warps: one warpgroup per 64-row product
WIDE_THREADS = 256  # the backward kernels holding four fp32 accumulators of a chunk

cumsum = gdd.prefix_sums(T)
suffix = gdd.suffix_sums(T)
inverse = gdd.solve(T)
rows_minus_cols = gdd.row_minus_col(T)
row_sums = gdd.row_sums(T)


@T.macro
def pipelined():
    """In a kernel with a ``T.Pipelined`` loop (warp-specialized, TMA-fed on sm_90): no register reallocation
    between the warp groups, whose ``setmaxnreg`` builds only for sm_90a (``tileport lower`` builds sm_90)."""
    T.disable_warp_group_reg_alloc()


def _stages(dtype: torch.dtype) -> int:
    """Pipeline stages of the chunk loops: two (double-buffered loads) for 16-bit tiles, one for fp32, whose two
    stages of q, k and W tiles alone pass sm_90's 227 KB of shared memory at K = 128."""
    return 2 if dtype.itemsize == 2 else 1


def _sizes():
    return T.dynamic("NCH"), T.dynamic("N"), T.dynamic("H"), T.dynamic("HV")


def build_prepare(dtype: torch.dtype, K: int, V: int, keep_tinv: bool):
    """gc, W = Tinv (beta exp(gc) k) and U = Tinv (beta v) per (chunk, value head); with ``keep_tinv`` Tinv too."""
    dt = TL_DTYPE[dtype]
    gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.macro
    def body(Kc, Vc, G, BETA, GC, W, U, TINV):
        with T.Kernel(NCH, HV, threads=THREADS) as (bn, bh):
            hk = bh // (HV // H)
            k_s = T.alloc_shared((C, K), dt)
            v_s = T.alloc_shared((C, V), dt)
            g_s = T.alloc_shared((C,), "float32")
            gc_s = T.alloc_shared((C,), "float32")
            b_s = T.alloc_shared((C,), "float32")
            a_f = T.alloc_fragment((C, C), "float32")
            a_s = T.alloc_shared((C, C), "float32")
            t_s = T.alloc_shared((C, C), "float32")
            m_s = T.alloc_shared((BS, C), "float32")
            p_s = T.alloc_shared((C, C), dt)
            w_f = T.alloc_fragment((C, K), "float32")
            u_f = T.alloc_fragment((C, V), "float32")
            T.copy(Kc[bn, 0:C, hk, 0:K], k_s)
            T.copy(Vc[bn, 0:C, bh, 0:V], v_s)
            T.copy(G[bn, bh, 0:C], g_s)
            T.copy(BETA[bn, bh, 0:C], b_s)
            cumsum(g_s, gc_s)
            T.gemm(k_s, k_s, a_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                a_s[i, j] = T.if_then_else(i > j, b_s[i] * a_f[i, j] * T.exp(gc_s[i] - gc_s[j]), 0.0)
            inverse(a_s, t_s, m_s)
            # W = (Tinv diag(beta exp(gc))) k and U = (Tinv diag(beta)) v: the row scalings folded into Tinv's columns
            for i, j in T.Parallel(C, C):
                p_s[i, j] = (t_s[i, j] * b_s[j] * T.exp(gc_s[j])).astype(dt)
            T.gemm(p_s, k_s, w_f, clear_accum=True)
            T.copy(w_f, W[bn, 0:C, bh, 0:K])
            for i, j in T.Parallel(C, C):
                p_s[i, j] = (t_s[i, j] * b_s[j]).astype(dt)
            T.gemm(p_s, v_s, u_f, clear_accum=True)
            T.copy(u_f, U[bn, 0:C, bh, 0:V])
            T.copy(gc_s, GC[bn, bh, 0:C])
            if TINV is not None:
                T.copy(t_s, TINV[bn, bh, 0:C, 0:C])

    if keep_tinv:

        @T.prim_func
        def chunk_gdn_bwd_prepare(
            Kc: T.Tensor((NCH, C, H, K), dt),
            Vc: T.Tensor((NCH, C, HV, V), dt),
            G: T.Tensor((NCH, HV, C), "float32"),
            BETA: T.Tensor((NCH, HV, C), "float32"),
            GC: T.Tensor((NCH, HV, C), "float32"),
            W: T.Tensor((NCH, C, HV, K), dt),
            U: T.Tensor((NCH, C, HV, V), dt),
            TINV: T.Tensor((NCH, HV, C, C), dt),
        ):
            body(Kc, Vc, G, BETA, GC, W, U, TINV)

        return chunk_gdn_bwd_prepare

    @T.prim_func
    def chunk_gdn_fwd_prepare(
        Kc: T.Tensor((NCH, C, H, K), dt),
        Vc: T.Tensor((NCH, C, HV, V), dt),
        G: T.Tensor((NCH, HV, C), "float32"),
        BETA: T.Tensor((NCH, HV, C), "float32"),
        GC: T.Tensor((NCH, HV, C), "float32"),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
    ):
        body(Kc, Vc, G, BETA, GC, W, U, None)

    return chunk_gdn_fwd_prepare


def build_states(dtype: torch.dtype, K: int, V: int):
    """The chunk-to-chunk recurrence per (V block, sequence, value head): the state entering each chunk (HS, in the
    dtype), V' = U - W S (VN), the final state (HT, fp32). The state stays in an fp32 fragment across chunks."""
    dt, stages = TL_DTYPE[dtype], _stages(dtype)
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, N, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_fwd_states(
        Kc: T.Tensor((NCH, C, H, K), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
        GC: T.Tensor((NCH, HV, C), "float32"),
        H0: T.Tensor((N, HV, K, V), "float32"),
        CO: T.Tensor((N + 1,), "int32"),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        HT: T.Tensor((N, HV, K, V), "float32"),
    ):
        with T.Kernel(NV, N * HV, threads=THREADS) as (bv, bnh):
            pipelined()
            n = bnh // HV
            bh = bnh % HV
            hk = bh // (HV // H)
            v0 = bv * BV
            s_f = T.alloc_fragment((K, BV), "float32")
            s_s = T.alloc_shared((K, BV), dt)
            k_s = T.alloc_shared((C, K), dt)
            w_s = T.alloc_shared((C, K), dt)
            u_s = T.alloc_shared((C, BV), dt)
            gc_s = T.alloc_shared((C,), "float32")
            vn_f = T.alloc_fragment((C, BV), "float32")
            vs_s = T.alloc_shared((C, BV), dt)
            T.copy(H0[n, bh, 0:K, v0 : v0 + BV], s_f)
            c0 = CO[n]
            for i in T.Pipelined(CO[n + 1] - c0, num_stages=stages):
                T.copy(s_f, s_s)
                T.copy(s_s, HS[c0 + i, bh, 0:K, v0 : v0 + BV])
                T.copy(W[c0 + i, 0:C, bh, 0:K], w_s)
                T.copy(U[c0 + i, 0:C, bh, v0 : v0 + BV], u_s)
                T.copy(Kc[c0 + i, 0:C, hk, 0:K], k_s)
                T.copy(GC[c0 + i, bh, 0:C], gc_s)
                T.gemm(w_s, s_s, vn_f, clear_accum=True)
                for r, j in T.Parallel(C, BV):
                    vn_f[r, j] = u_s[r, j] - vn_f[r, j]
                T.copy(vn_f, VN[c0 + i, 0:C, bh, v0 : v0 + BV])
                # (exp(gam - gc) k)^T V' as k^T (exp(gam - gc) V'): the decay on V's rows, k read as it is
                for r, j in T.Parallel(C, BV):
                    vs_s[r, j] = (vn_f[r, j] * T.exp(gc_s[C - 1] - gc_s[r])).astype(dt)
                for r, j in T.Parallel(K, BV):
                    s_f[r, j] = s_f[r, j] * T.exp(gc_s[C - 1])
                T.gemm(k_s, vs_s, s_f, transpose_A=True)
            T.copy(s_f, HT[n, bh, 0:K, v0 : v0 + BV])

    return chunk_gdn_fwd_states


def build_output(dtype: torch.dtype, K: int, V: int):
    """O = scale (exp(gc) q S + lower(q k^T exp(gc_r - gc_s)) V') per (V block, chunk, value head)."""
    dt = TL_DTYPE[dtype]
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_fwd_output(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), "float32"),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        O: T.Tensor((NCH, C, HV, V), dt),
        scale: T.float32,
    ):
        with T.Kernel(NV, NCH, HV, threads=THREADS) as (bv, bn, bh):
            hk = bh // (HV // H)
            v0 = bv * BV
            q_s = T.alloc_shared((C, K), dt)
            k_s = T.alloc_shared((C, K), dt)
            h_s = T.alloc_shared((K, BV), dt)
            vn_s = T.alloc_shared((C, BV), dt)
            gc_s = T.alloc_shared((C,), "float32")
            qk_f = T.alloc_fragment((C, C), "float32")
            p_s = T.alloc_shared((C, C), dt)
            o_f = T.alloc_fragment((C, BV), "float32")
            T.copy(Qc[bn, 0:C, hk, 0:K], q_s)
            T.copy(Kc[bn, 0:C, hk, 0:K], k_s)
            T.copy(HS[bn, bh, 0:K, v0 : v0 + BV], h_s)
            T.copy(VN[bn, 0:C, bh, v0 : v0 + BV], vn_s)
            T.copy(GC[bn, bh, 0:C], gc_s)
            T.gemm(q_s, k_s, qk_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                p_s[i, j] = T.if_then_else(i >= j, qk_f[i, j] * T.exp(gc_s[i] - gc_s[j]) * scale, 0.0).astype(dt)
            T.gemm(q_s, h_s, o_f, clear_accum=True)
            for i, j in T.Parallel(C, BV):
                o_f[i, j] = o_f[i, j] * (T.exp(gc_s[i]) * scale)
            T.gemm(p_s, vn_s, o_f)
            T.copy(o_f, O[bn, 0:C, bh, v0 : v0 + BV])

    return chunk_gdn_fwd_output


def build_bwd_dv(dtype: torch.dtype, K: int, V: int):
    """The output's direct gradient into V': dV'_local = P^T dO per (V block, chunk, value head), P^T formed from
    k q^T (no transposed operand)."""
    dt = TL_DTYPE[dtype]
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_bwd_dv(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), "float32"),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DVL: T.Tensor((NCH, C, HV, V), "float32"),
        scale: T.float32,
    ):
        with T.Kernel(NV, NCH, HV, threads=THREADS) as (bv, bn, bh):
            hk = bh // (HV // H)
            v0 = bv * BV
            q_s = T.alloc_shared((C, K), dt)
            k_s = T.alloc_shared((C, K), dt)
            do_s = T.alloc_shared((C, BV), dt)
            gc_s = T.alloc_shared((C,), "float32")
            kq_f = T.alloc_fragment((C, C), "float32")
            pt_s = T.alloc_shared((C, C), dt)
            dv_f = T.alloc_fragment((C, BV), "float32")
            T.copy(Qc[bn, 0:C, hk, 0:K], q_s)
            T.copy(Kc[bn, 0:C, hk, 0:K], k_s)
            T.copy(DO[bn, 0:C, bh, v0 : v0 + BV], do_s)
            T.copy(GC[bn, bh, 0:C], gc_s)
            T.gemm(k_s, q_s, kq_f, transpose_B=True, clear_accum=True)
            for j, i in T.Parallel(C, C):  # P^T[j, i] = P[i, j], i >= j
                pt_s[j, i] = T.if_then_else(i >= j, kq_f[j, i] * T.exp(gc_s[i] - gc_s[j]) * scale, 0.0).astype(dt)
            T.gemm(pt_s, do_s, dv_f, clear_accum=True)
            T.copy(dv_f, DVL[bn, 0:C, bh, v0 : v0 + BV])

    return chunk_gdn_bwd_dv


def build_bwd_states(dtype: torch.dtype, K: int, V: int):
    """The reverse recurrence per (V block, sequence, value head), chunks last to first: DH (the gradient of the
    state leaving each chunk), dV' = dV'_local + exp(gam - gc) k dS, dS <- exp(gam) dS + (exp(gc) scale q)^T dO -
    W^T dV'; DH0 the initial state's gradient."""
    dt, stages = TL_DTYPE[dtype], _stages(dtype)
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, N, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_bwd_states(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        GC: T.Tensor((NCH, HV, C), "float32"),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DVL: T.Tensor((NCH, C, HV, V), "float32"),
        DHT: T.Tensor((N, HV, K, V), "float32"),
        CO: T.Tensor((N + 1,), "int32"),
        DH: T.Tensor((NCH, HV, K, V), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DH0: T.Tensor((N, HV, K, V), "float32"),
        scale: T.float32,
    ):
        with T.Kernel(NV, N * HV, threads=THREADS) as (bv, bnh):
            pipelined()
            n = bnh // HV
            bh = bnh % HV
            hk = bh // (HV // H)
            v0 = bv * BV
            ds_f = T.alloc_fragment((K, BV), "float32")
            ds_s = T.alloc_shared((K, BV), dt)
            q_s = T.alloc_shared((C, K), dt)
            k_s = T.alloc_shared((C, K), dt)
            w_s = T.alloc_shared((C, K), dt)
            do_s = T.alloc_shared((C, BV), dt)
            gc_s = T.alloc_shared((C,), "float32")
            dvn_f = T.alloc_fragment((C, BV), "float32")
            dvn_s = T.alloc_shared((C, BV), dt)
            T.copy(DHT[n, bh, 0:K, v0 : v0 + BV], ds_f)
            c1 = CO[n + 1]
            for i in T.Pipelined(c1 - CO[n], num_stages=stages):
                c = c1 - 1 - i
                T.copy(ds_f, ds_s)
                T.copy(ds_s, DH[c, bh, 0:K, v0 : v0 + BV])
                T.copy(Qc[c, 0:C, hk, 0:K], q_s)
                T.copy(Kc[c, 0:C, hk, 0:K], k_s)
                T.copy(W[c, 0:C, bh, 0:K], w_s)
                T.copy(DO[c, 0:C, bh, v0 : v0 + BV], do_s)
                T.copy(GC[c, bh, 0:C], gc_s)
                T.copy(DVL[c, 0:C, bh, v0 : v0 + BV], dvn_f)
                for r, j in T.Parallel(C, K):  # k as exp(gam - gc) k, q as exp(gc) scale q: the products' operands
                    k_s[r, j] = (k_s[r, j] * T.exp(gc_s[C - 1] - gc_s[r])).astype(dt)
                    q_s[r, j] = (q_s[r, j] * (T.exp(gc_s[r]) * scale)).astype(dt)
                T.gemm(k_s, ds_s, dvn_f)
                T.copy(dvn_f, DVN[c, 0:C, bh, v0 : v0 + BV])
                for r, j in T.Parallel(C, BV):
                    dvn_s[r, j] = (-dvn_f[r, j]).astype(dt)
                for r, j in T.Parallel(K, BV):
                    ds_f[r, j] = ds_f[r, j] * T.exp(gc_s[C - 1])
                T.gemm(q_s, do_s, ds_f, transpose_A=True)
                T.gemm(w_s, dvn_s, ds_f, transpose_A=True)
            T.copy(ds_f, DH0[n, bh, 0:K, v0 : v0 + BV])

    return chunk_gdn_bwd_states


def build_bwd_dqkwg(dtype: torch.dtype, K: int, V: int):
    """Per (K block, chunk, value head), over the V blocks: dq, the output's part of dk, dW (minus W's gradient,
    dV' S^T) and dg's per-position terms (the K block's share: DGC[kb], summed by the WY backward)."""
    dt, stages = TL_DTYPE[dtype], _stages(dtype)
    BK, NK, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()
    sum_s_ds = gdd.row_dot(T, BV, rows=BK, add=True)
    add_dot, dot = gdd.row_dot(T, BK, add=True), gdd.row_dot(T, BK)
    decay_grad = gdd.state_decay_grad(T, BK)

    @T.prim_func
    def chunk_gdn_bwd_dqkwg(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), "float32"),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DH: T.Tensor((NCH, HV, K, V), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DQ: T.Tensor((NCH, C, HV, K), "float32"),
        DK: T.Tensor((NCH, C, HV, K), "float32"),
        DW: T.Tensor((NCH, C, HV, K), dt),
        DGC: T.Tensor((NK, NCH, HV, C), "float32"),
        scale: T.float32,
    ):
        with T.Kernel(NK, NCH, HV, threads=WIDE_THREADS) as (bk, bn, bh):
            pipelined()
            hk = bh // (HV // H)
            k0 = bk * BK
            q_s = T.alloc_shared((C, BK), dt)
            k_s = T.alloc_shared((C, BK), dt)
            gc_s = T.alloc_shared((C,), "float32")
            do_s = T.alloc_shared((C, BV), dt)
            vn_s = T.alloc_shared((C, BV), dt)
            dvn_s = T.alloc_shared((C, BV), dt)
            h_s = T.alloc_shared((BK, BV), dt)
            dh_s = T.alloc_shared((BK, BV), dt)
            dq_f = T.alloc_fragment((C, BK), "float32")
            dk_f = T.alloc_fragment((C, BK), "float32")
            dw_f = T.alloc_fragment((C, BK), "float32")
            dp_f = T.alloc_fragment((C, C), "float32")
            hd_s = T.alloc_shared((BK,), "float32")
            qk_f = T.alloc_fragment((C, C), "float32")
            dp_s = T.alloc_shared((C, C), dt)
            x_s = T.alloc_shared((C, C), "float32")
            y_s = T.alloc_shared((C, BK), "float32")
            dg_s = T.alloc_shared((C,), "float32")
            gk_s = T.alloc_shared((C,), "float32")
            T.copy(Qc[bn, 0:C, hk, k0 : k0 + BK], q_s)
            T.copy(Kc[bn, 0:C, hk, k0 : k0 + BK], k_s)
            T.copy(GC[bn, bh, 0:C], gc_s)
            T.clear(dq_f)
            T.clear(dk_f)
            T.clear(dw_f)
            T.clear(dp_f)
            for r in T.Parallel(BK):
                hd_s[r] = 0.0
            for bv in T.Pipelined(NV, num_stages=stages):
                v0 = bv * BV
                T.copy(DO[bn, 0:C, bh, v0 : v0 + BV], do_s)
                T.copy(VN[bn, 0:C, bh, v0 : v0 + BV], vn_s)
                T.copy(DVN[bn, 0:C, bh, v0 : v0 + BV], dvn_s)
                T.copy(HS[bn, bh, k0 : k0 + BK, v0 : v0 + BV], h_s)
                T.copy(DH[bn, bh, k0 : k0 + BK, v0 : v0 + BV], dh_s)
                T.gemm(do_s, h_s, dq_f, transpose_B=True)  # dO S^T
                T.gemm(do_s, vn_s, dp_f, transpose_B=True)  # dO V'^T
                T.gemm(vn_s, dh_s, dk_f, transpose_B=True)  # V' dS^T
                T.gemm(dvn_s, h_s, dw_f, transpose_B=True)  # dV' S^T
                sum_s_ds(h_s, dh_s, hd_s)
            T.copy(dw_f, DW[bn, 0:C, bh, k0 : k0 + BK])
            # dP = (dO V'^T) exp(gc_r - gc_s) scale, lower; its q k^T term of dg is rowsum - colsum of dP * q k^T
            T.gemm(q_s, k_s, qk_f, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(C, C):
                dp_f[i, j] = T.if_then_else(i >= j, dp_f[i, j] * T.exp(gc_s[i] - gc_s[j]) * scale, 0.0)
                x_s[i, j] = dp_f[i, j] * qk_f[i, j]
                dp_s[i, j] = dp_f[i, j].astype(dt)
            for i in T.Parallel(C):
                dg_s[i] = 0.0
            rows_minus_cols(x_s, dg_s)
            # dq = exp(gc) scale dO S^T + dP k; its term of dg: rowsum(dq_state * q)
            for i, j in T.Parallel(C, BK):
                dq_f[i, j] = dq_f[i, j] * (T.exp(gc_s[i]) * scale)
                y_s[i, j] = dq_f[i, j]
            add_dot(y_s, q_s, dg_s)
            T.gemm(dp_s, k_s, dq_f)
            T.copy(dq_f, DQ[bn, 0:C, bh, k0 : k0 + BK])
            # what the chunk wrote into the state: gk = rowsum(V' dS^T * exp(gam - gc) k), dk += exp(gam - gc) V' dS^T
            for i, j in T.Parallel(C, BK):
                dk_f[i, j] = dk_f[i, j] * T.exp(gc_s[C - 1] - gc_s[i])
                y_s[i, j] = dk_f[i, j]
            dot(y_s, k_s, gk_s)
            decay_grad(gk_s, hd_s, gc_s, dg_s)
            T.gemm(dp_s, q_s, dk_f, transpose_A=True)
            T.copy(dk_f, DK[bn, 0:C, bh, k0 : k0 + BK])
            T.copy(dg_s, DGC[bk, bn, bh, 0:C])

    return chunk_gdn_bwd_dqkwg


def build_bwd_wy(dtype: torch.dtype, K: int, V: int):
    """The WY backward per (chunk, value head): dX = Tinv^T dW, dY = Tinv^T dV' (both minus signs of dW folded:
    DW is dV' S^T), dA through A = beta k k^T decay, then dk (with the partial DK), dv, dbeta, and dg = the
    reverse cumulative sum of every per-position term (DGC's K blocks and this kernel's)."""
    dt, wide = TL_DTYPE[dtype], dtype == torch.float32
    _, NK, _, _ = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()
    dot_k, dot_v = gdd.row_dot(T, K), gdd.row_dot(T, V)

    @T.macro
    def dgc_total(DGC, bn, bh, dg):
        """dg[i] = the K blocks' per-position terms of dg, summed."""
        for i in T.Parallel(C):
            acc = T.alloc_var("float32")
            acc = 0.0
            for kb in T.serial(NK):
                acc = acc + DGC[kb, bn, bh, i]
            dg[i] = acc

    @T.prim_func
    def chunk_gdn_bwd_wy(
        Kc: T.Tensor((NCH, C, H, K), dt),
        Vc: T.Tensor((NCH, C, HV, V), dt),
        BETA: T.Tensor((NCH, HV, C), "float32"),
        GC: T.Tensor((NCH, HV, C), "float32"),
        TINV: T.Tensor((NCH, HV, C, C), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
        DW: T.Tensor((NCH, C, HV, K), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DK: T.Tensor((NCH, C, HV, K), "float32"),
        DGC: T.Tensor((NK, NCH, HV, C), "float32"),
        DKO: T.Tensor((NCH, C, HV, K), "float32"),
        DV: T.Tensor((NCH, C, HV, V), "float32"),
        DBETA: T.Tensor((NCH, HV, C), "float32"),
        DG: T.Tensor((NCH, HV, C), "float32"),
    ):
        with T.Kernel(NCH, HV, threads=WIDE_THREADS) as (bn, bh):
            hk = bh // (HV // H)
            k_s = T.alloc_shared((C, K), dt)
            v_s = T.alloc_shared((C, V), dt)
            w_s = T.alloc_shared((C, K), dt)
            u_s = T.alloc_shared((C, V), dt)
            dvn_s = T.alloc_shared((C, V), dt)
            dw_s = T.alloc_shared((C, K), dt)
            tt_s = T.alloc_shared((C, C), dt)
            b_s = T.alloc_shared((C,), "float32")
            gc_s = T.alloc_shared((C,), "float32")
            dg_s = T.alloc_shared((C,), "float32")
            db_s = T.alloc_shared((C,), "float32")
            dx_f = T.alloc_fragment((C, K), "float32")
            dy_f = T.alloc_fragment((C, V), "float32")
            dx_s = T.alloc_shared((C, K), dt)
            dy_s = T.alloc_shared((C, V), dt)
            # fp32 copies of dX and -dY for the row sums: the operand tiles themselves when the dtype is fp32
            dxf_s = dx_s if wide else T.alloc_shared((C, K), "float32")
            dyf_s = dy_s if wide else T.alloc_shared((C, V), "float32")
            da_f = T.alloc_fragment((C, C), "float32")
            kk_f = T.alloc_fragment((C, C), "float32")
            e_s = T.alloc_shared((C, C), dt)
            x_s = T.alloc_shared((C, C), "float32")
            kdx = T.alloc_shared((C,), "float32")
            dyv = T.alloc_shared((C,), "float32")
            T.copy(Kc[bn, 0:C, hk, 0:K], k_s)
            T.copy(Vc[bn, 0:C, bh, 0:V], v_s)
            T.copy(W[bn, 0:C, bh, 0:K], w_s)
            T.copy(U[bn, 0:C, bh, 0:V], u_s)
            T.copy(DVN[bn, 0:C, bh, 0:V], dvn_s)
            T.copy(DW[bn, 0:C, bh, 0:K], dw_s)
            T.copy(TINV[bn, bh, 0:C, 0:C], tt_s)
            T.copy(BETA[bn, bh, 0:C], b_s)
            T.copy(GC[bn, bh, 0:C], gc_s)
            dgc_total(DGC, bn, bh, dg_s)
            T.gemm(tt_s, dw_s, dx_f, transpose_A=True, clear_accum=True)  # dX = Tinv^T dW (minus d(beta eg k))
            T.gemm(tt_s, dvn_s, dy_f, transpose_A=True, clear_accum=True)  # dY = Tinv^T dV'
            T.copy(dx_f, dx_s)
            for i, j in T.Parallel(C, V):
                dy_s[i, j] = (-dy_f[i, j]).astype(dt)
            if not wide:
                T.copy(dx_f, dxf_s)
                for i, j in T.Parallel(C, V):
                    dyf_s[i, j] = -dy_f[i, j]
            T.gemm(dx_s, w_s, da_f, transpose_B=True, clear_accum=True)
            T.gemm(dy_s, u_s, da_f, transpose_B=True)  # dA = dX W^T - dY U^T
            T.gemm(k_s, k_s, kk_f, transpose_B=True, clear_accum=True)
            # e = dA decay (strictly lower): dbeta's rowsum(e kk), dg's rowsum - colsum of beta e kk, dk's E = beta e
            for i, j in T.Parallel(C, C):
                da_f[i, j] = T.if_then_else(i > j, da_f[i, j] * T.exp(gc_s[i] - gc_s[j]), 0.0)
                x_s[i, j] = da_f[i, j] * kk_f[i, j]
                e_s[i, j] = (da_f[i, j] * b_s[i]).astype(dt)
            row_sums(x_s, db_s)
            for i, j in T.Parallel(C, C):
                x_s[i, j] = x_s[i, j] * b_s[i]
            rows_minus_cols(x_s, dg_s)
            # beta exp(gc) k's gradient is -dX: kdx = rowsum(dX k) feeds dbeta and dg, dk takes -dX beta exp(gc)
            dot_k(dxf_s, k_s, kdx)
            dot_v(dyf_s, v_s, dyv)
            for i in T.Parallel(C):  # dyv = rowsum(-dY v)
                db_s[i] = db_s[i] - dyv[i] - T.exp(gc_s[i]) * kdx[i]
                dg_s[i] = dg_s[i] - b_s[i] * T.exp(gc_s[i]) * kdx[i]
            for i, j in T.Parallel(C, K):
                dx_f[i, j] = DK[bn, i, bh, j] - dx_f[i, j] * (b_s[i] * T.exp(gc_s[i]))
            T.gemm(e_s, k_s, dx_f)
            T.gemm(e_s, k_s, dx_f, transpose_A=True)
            T.copy(dx_f, DKO[bn, 0:C, bh, 0:K])
            for i, j in T.Parallel(C, V):
                dy_f[i, j] = dy_f[i, j] * b_s[i]
            T.copy(dy_f, DV[bn, 0:C, bh, 0:V])
            T.copy(db_s, DBETA[bn, bh, 0:C])
            suffix(dg_s, kdx)
            T.copy(kdx, DG[bn, bh, 0:C])

    return chunk_gdn_bwd_wy


BUILDERS = gdd.ChunkBuilders(
    build_prepare, build_states, build_output, build_bwd_dv, build_bwd_states, build_bwd_dqkwg, build_bwd_wy
)


def bucket(dim: int) -> int:
    """A kernel per head dimension (its tiles are the head's): ``tileport lower`` keys its cache on the dim."""
    return dim


lowered, forward, backward = gdd.chunk_entries(BUILDERS, RUNNER, "a CUDA GPU")
