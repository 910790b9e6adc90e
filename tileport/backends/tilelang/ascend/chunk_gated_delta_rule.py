"""chunk_gated_delta_rule (``tileport.ops.chunk_gated_delta_rule``'s contract) for Ascend arch35 (Ascend 950) in
TileLang's ascend dialect (the tilelang wheel's ``ascend`` target), one kernel per (dtype, K, V), the eight kernels
and GM interface of the CUDA module (``../gated_delta_device.py``: the launchers, the host side and the in-chunk
vector math both dialects share).

Each kernel states its cube/vector split itself: a GPU-style kernel does not lower for this target ("T.copy() from
dtype 'float32' to dtype 'float16' outside a VF block is not allowed. DMA copies cannot perform type casting"; fla's
TileLang backward stops at "a T.Parallel loop outside a vector-function block"). Here:
- every matrix product runs on the cube: operands GM -> L1 (or UB -> L1 where the vector unit made them),
  ``T.gemm`` from L1 into an L0C accumulator (the wheel's ``ascend_gemm_l1``, which stages L0A/L0B and issues the
  mmads), the result L0C -> UB (the fixpipe rounding it to the dtype where a kernel stores it as it is);
- every cumulative sum, exp, mask, scaling and row/column sum, and the triangular inverse, runs on the vector unit
  in ``T.SimtVF`` blocks on UB tiles, a block per vector phase (fewer blocks: a faster auto-scheduler search).
What the wheel refused, and what the kernels do instead:
- "Ascend L1 GEMM currently only supports trans_A=False, trans_B=True (NT)", and its template's L1 -> L0B transposed
  load "only works for b16 types; fp32 NN matmul MUST use the NT path (transpose during GM->L1)": every product is
  written A B^T with the reduced dimension contiguous in both operands; a transposed operand is loaded transposed
  from GM (``T.copy(..., transpose=True)``: dn2nz) or written transposed by the vector unit into UB before its
  UB -> L1 copy (the ND -> NZ scatter); a row decay that would need a scaled copy of a GM operand scales the
  product's result or its other operand instead.
- "Unsupported ND->NZ scatter dtype conversion: float -> half" (a casting UB -> L1 copy): the vector unit rounds a
  product's fp32 operand into a UB tile of the dtype first.
- The auto-scheduler refuses a kernel whose UB tiles do not fit ('Z3 loop scheduling failed: scope "shared"
  capacity 188416 is insufficient for minimum buffer usage 238592' for the reverse state recurrence at 64-column V
  blocks; 221184 against 297472 for the WY backward on whole C x 128 tiles): the reverse recurrence takes V blocks
  of 32 columns (16 in fp32), the WY backward walks K and V in 64-column blocks and recomputes its dX block (one
  C x C x 64 product) for dk rather than keeping the whole of it.

A persistent grid of ``CORES`` cube cores walks the tasks (a chunk and value head, or a sequence, head and V block
for the state recurrences). The kernels are mixed (``T.MixedKernel``) with one vector core per cube core
(``sids=1``): the triangular inverse and the row/column sums need whole chunk tiles, which the two-AIV L0C -> UB
split (``T.dual_copy``) would cut in halves; the second vector core idles (splitting the row-independent kernels,
states and output, across both is the next step). The triangular inverse is fp32 SIMT work
(``gated_delta_device.solve``): its diagonal blocks are forward substitutions, and its 16-row block products are
too small (and too precision-sensitive) to round-trip through L1 and L0C. L0A/L0B belong to the GEMM template; the
UB, L1 and L0C bytes each kernel addresses are checked by ``tileport lower`` against ``targets.ON_CHIP_BUDGET`` and
``targets.CUBE_BUDGET``. Lowered to Ascend C here (10 s to 2 min a kernel: the auto-scheduler's search); compiling
needs CANN's bisheng, running an Ascend 950 NPU: none of these kernels has run.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch
from tilelang.language.eager.builder import Builder

from .. import gated_delta_device as gdd
from ..gated_delta_device import BS, C
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, THREADS

RUNNER = RUNNERS["ascend"]
F32 = "float32"


def vector():
    """``with vector():`` a SIMT sub-kernel on the vector unit (``T.SimtVF``); its parallel loops are synchronized
    between each other, so one block holds a whole vector phase (one unit of the auto-scheduler's search)."""
    return T.SimtVF(threads=THREADS)


def each_task(core, total):
    """``for task in each_task(core, total)``: this core's tasks core, core + CORES, ... below ``total``."""
    tb = Builder.current()
    for t in tb.ctx_for(T.serial(T.ceildiv(total, CORES))):
        tb.bind("t", t, loop_target=True)
        task = tb.bind("task", core + t * CORES)
        for branch in tb.ctx_if(task < total):
            for _ in tb.ctx_then(branch):
                yield task


cumsum = gdd.prefix_sums(T)
suffix = gdd.suffix_sums(T)
inverse = gdd.solve(T)
rows_minus_cols = gdd.row_minus_col(T)


def _state_block(V: int, dtype: torch.dtype, widest: int) -> tuple[int, int]:
    """(BV, NV) of a state recurrence: the V block whose state tiles (fp32 and the dtype's, both orientations) fit
    the UB with the chunk's tiles: ``widest`` columns for 16-bit dtypes, half as many for fp32."""
    BV = min(V, widest if dtype.itemsize == 2 else widest // 2)
    return BV, V // BV


def _sizes():
    return T.dynamic("NCH"), T.dynamic("N"), T.dynamic("H"), T.dynamic("HV")


def build_prepare(dtype: torch.dtype, K: int, V: int, keep_tinv: bool):
    """gc, W = Tinv (beta exp(gc) k), U = Tinv (beta v) per (chunk, value head); with ``keep_tinv`` Tinv too
    (rounded to the dtype: the WY backward's product operand). One vector phase between k k^T and the WY products:
    the cumulative g, A, Tinv and both scaled copies of it."""
    dt = TL_DTYPE[dtype]
    gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.macro
    def body(Kc, Vc, G, BETA, GC, W, U, TINV):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            k_l1 = T.alloc_l1((C, K), dt)
            kt_l1 = T.alloc_l1((K, C), dt)
            vt_l1 = T.alloc_l1((V, C), dt)
            pw_l1 = T.alloc_l1((C, C), dt)
            pu_l1 = T.alloc_l1((C, C), dt)
            a_c = T.alloc_l0c((C, C), F32)
            w_c = T.alloc_l0c((C, K), F32)
            u_c = T.alloc_l0c((C, V), F32)
            g_u = T.alloc_shared((C,), F32)
            gc_u = T.alloc_shared((C,), F32)
            b_u = T.alloc_shared((C,), F32)
            a_u = T.alloc_shared((C, C), F32)
            t_u = T.alloc_shared((C, C), F32)
            m_u = T.alloc_shared((BS, C), F32)
            pw_u = T.alloc_shared((C, C), dt)
            pu_u = T.alloc_shared((C, C), dt)
            for task in each_task(core, NCH * HV):
                bn = task // HV
                bh = task % HV
                hk = bh // (HV // H)
                T.copy(Kc[bn, 0:C, hk, 0:K], k_l1)
                T.copy(Kc[bn, 0:C, hk, 0:K], kt_l1, transpose=True)
                T.copy(Vc[bn, 0:C, bh, 0:V], vt_l1, transpose=True)
                T.copy(G[bn, bh, 0:C], g_u)
                T.copy(BETA[bn, bh, 0:C], b_u)
                T.gemm(k_l1, k_l1, a_c, transpose_B=True, clear_accum=True)
                T.copy(a_c, a_u)
                with vector():
                    cumsum(g_u, gc_u)
                    for i, j in T.Parallel(C, C):
                        a_u[i, j] = T.if_then_else(i > j, b_u[i] * a_u[i, j] * T.exp(gc_u[i] - gc_u[j]), 0.0)
                    inverse(a_u, t_u, m_u)
                    # W = (Tinv diag(beta exp(gc))) k, U = (Tinv diag(beta)) v: B^T = k^T, v^T (loaded transposed)
                    for i, j in T.Parallel(C, C):
                        pw_u[i, j] = (t_u[i, j] * b_u[j] * T.exp(gc_u[j])).astype(dt)
                        pu_u[i, j] = (t_u[i, j] * b_u[j]).astype(dt)
                T.copy(pw_u, pw_l1)
                T.copy(pu_u, pu_l1)
                T.gemm(pw_l1, kt_l1, w_c, transpose_B=True, clear_accum=True)
                T.gemm(pu_l1, vt_l1, u_c, transpose_B=True, clear_accum=True)
                T.copy(w_c, W[bn, 0:C, bh, 0:K])  # L0C -> GM, rounded by the fixpipe
                T.copy(u_c, U[bn, 0:C, bh, 0:V])
                T.copy(gc_u, GC[bn, bh, 0:C])
                if TINV is not None:
                    with vector():
                        for i, j in T.Parallel(C, C):
                            pw_u[i, j] = t_u[i, j].astype(dt)
                    T.copy(pw_u, TINV[bn, bh, 0:C, 0:C])

    if keep_tinv:

        @T.prim_func
        def chunk_gdn_bwd_prepare(
            Kc: T.Tensor((NCH, C, H, K), dt),
            Vc: T.Tensor((NCH, C, HV, V), dt),
            G: T.Tensor((NCH, HV, C), F32),
            BETA: T.Tensor((NCH, HV, C), F32),
            GC: T.Tensor((NCH, HV, C), F32),
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
        G: T.Tensor((NCH, HV, C), F32),
        BETA: T.Tensor((NCH, HV, C), F32),
        GC: T.Tensor((NCH, HV, C), F32),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
    ):
        body(Kc, Vc, G, BETA, GC, W, U, None)

    return chunk_gdn_fwd_prepare


def build_states(dtype: torch.dtype, K: int, V: int):
    """The chunk-to-chunk recurrence per (sequence, value head, V block): the state in UB (fp32) across chunks;
    per chunk HS (its dtype copy, and S^T into L1), W S on the cube, V' = U - W S and the decayed V'^T on the
    vector unit, k^T (exp(gam - gc) V') on the cube, S <- exp(gam) S + that."""
    dt = TL_DTYPE[dtype]
    gdd.head_blocks(K, V)
    BV, NV = _state_block(V, dtype, 64)
    NCH, N, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_fwd_states(
        Kc: T.Tensor((NCH, C, H, K), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
        GC: T.Tensor((NCH, HV, C), F32),
        H0: T.Tensor((N, HV, K, V), F32),
        CO: T.Tensor((N + 1,), "int32"),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        HT: T.Tensor((N, HV, K, V), F32),
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            w_l1 = T.alloc_l1((C, K), dt)
            st_l1 = T.alloc_l1((BV, K), dt)
            kt_l1 = T.alloc_l1((K, C), dt)
            vt_l1 = T.alloc_l1((BV, C), dt)
            ws_c = T.alloc_l0c((C, BV), F32)
            kv_c = T.alloc_l0c((K, BV), F32)
            s_u = T.alloc_shared((K, BV), F32)
            s16_u = T.alloc_shared((K, BV), dt)
            st16_u = T.alloc_shared((BV, K), dt)
            ws_u = T.alloc_shared((C, BV), F32)
            u_u = T.alloc_shared((C, BV), dt)
            gc_u = T.alloc_shared((C,), F32)
            vn_u = T.alloc_shared((C, BV), dt)
            vt_u = T.alloc_shared((BV, C), dt)
            kv_u = T.alloc_shared((K, BV), F32)
            for task in each_task(core, N * HV * NV):
                bv = task % NV
                n = task // NV // HV
                bh = task // NV % HV
                hk = bh // (HV // H)
                v0 = bv * BV
                T.copy(H0[n, bh, 0:K, v0 : v0 + BV], s_u)
                c0 = CO[n]
                for i in T.serial(CO[n + 1] - c0):
                    with vector():
                        for r, j in T.Parallel(K, BV):
                            s16_u[r, j] = s_u[r, j].astype(dt)
                            st16_u[j, r] = s_u[r, j].astype(dt)
                    T.copy(s16_u, HS[c0 + i, bh, 0:K, v0 : v0 + BV])
                    T.copy(st16_u, st_l1)
                    T.copy(W[c0 + i, 0:C, bh, 0:K], w_l1)
                    T.gemm(w_l1, st_l1, ws_c, transpose_B=True, clear_accum=True)
                    T.copy(ws_c, ws_u)
                    T.copy(U[c0 + i, 0:C, bh, v0 : v0 + BV], u_u)
                    T.copy(GC[c0 + i, bh, 0:C], gc_u)
                    with vector():
                        for r, j in T.Parallel(C, BV):
                            vn = u_u[r, j].astype(F32) - ws_u[r, j]
                            vn_u[r, j] = vn.astype(dt)
                            vt_u[j, r] = (vn * T.exp(gc_u[C - 1] - gc_u[r])).astype(dt)
                    T.copy(vn_u, VN[c0 + i, 0:C, bh, v0 : v0 + BV])
                    T.copy(vt_u, vt_l1)
                    T.copy(Kc[c0 + i, 0:C, hk, 0:K], kt_l1, transpose=True)
                    T.gemm(kt_l1, vt_l1, kv_c, transpose_B=True, clear_accum=True)
                    T.copy(kv_c, kv_u)
                    with vector():
                        for r, j in T.Parallel(K, BV):
                            s_u[r, j] = s_u[r, j] * T.exp(gc_u[C - 1]) + kv_u[r, j]
                T.copy(s_u, HT[n, bh, 0:K, v0 : v0 + BV])

    return chunk_gdn_fwd_states


def build_output(dtype: torch.dtype, K: int, V: int):
    """O = scale (exp(gc) q S + lower(q k^T decay) V') per (chunk, value head, V block): q k^T, q S (S^T loaded
    transposed) and P V' (V'^T loaded transposed) on the cube, P and the sum on the vector unit."""
    dt = TL_DTYPE[dtype]
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_fwd_output(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), F32),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        O: T.Tensor((NCH, C, HV, V), dt),
        scale: T.float32,
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            q_l1 = T.alloc_l1((C, K), dt)
            k_l1 = T.alloc_l1((C, K), dt)
            ht_l1 = T.alloc_l1((BV, K), dt)
            vt_l1 = T.alloc_l1((BV, C), dt)
            p_l1 = T.alloc_l1((C, C), dt)
            qk_c = T.alloc_l0c((C, C), F32)
            qh_c = T.alloc_l0c((C, BV), F32)
            pv_c = T.alloc_l0c((C, BV), F32)
            gc_u = T.alloc_shared((C,), F32)
            qk_u = T.alloc_shared((C, C), F32)
            p_u = T.alloc_shared((C, C), dt)
            qh_u = T.alloc_shared((C, BV), F32)
            pv_u = T.alloc_shared((C, BV), F32)
            o_u = T.alloc_shared((C, BV), dt)
            for task in each_task(core, NCH * HV * NV):
                bv = task % NV
                bn = task // NV // HV
                bh = task // NV % HV
                hk = bh // (HV // H)
                v0 = bv * BV
                T.copy(Qc[bn, 0:C, hk, 0:K], q_l1)
                T.copy(Kc[bn, 0:C, hk, 0:K], k_l1)
                T.copy(HS[bn, bh, 0:K, v0 : v0 + BV], ht_l1, transpose=True)
                T.copy(VN[bn, 0:C, bh, v0 : v0 + BV], vt_l1, transpose=True)
                T.copy(GC[bn, bh, 0:C], gc_u)
                T.gemm(q_l1, k_l1, qk_c, transpose_B=True, clear_accum=True)
                T.gemm(q_l1, ht_l1, qh_c, transpose_B=True, clear_accum=True)
                T.copy(qk_c, qk_u)
                with vector():
                    for i, j in T.Parallel(C, C):
                        p_u[i, j] = T.if_then_else(i >= j, qk_u[i, j] * T.exp(gc_u[i] - gc_u[j]) * scale, 0.0).astype(
                            dt
                        )
                T.copy(p_u, p_l1)
                T.gemm(p_l1, vt_l1, pv_c, transpose_B=True, clear_accum=True)
                T.copy(qh_c, qh_u)
                T.copy(pv_c, pv_u)
                with vector():
                    for i, j in T.Parallel(C, BV):
                        o_u[i, j] = (qh_u[i, j] * (T.exp(gc_u[i]) * scale) + pv_u[i, j]).astype(dt)
                T.copy(o_u, O[bn, 0:C, bh, v0 : v0 + BV])

    return chunk_gdn_fwd_output


def build_bwd_dv(dtype: torch.dtype, K: int, V: int):
    """dV'_local = P^T dO per (chunk, value head, V block): k q^T on the cube gives P^T's products, the vector unit
    masks and decays them, the cube multiplies by dO (dO^T loaded transposed)."""
    dt = TL_DTYPE[dtype]
    _, _, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_bwd_dv(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), F32),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DVL: T.Tensor((NCH, C, HV, V), F32),
        scale: T.float32,
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            q_l1 = T.alloc_l1((C, K), dt)
            k_l1 = T.alloc_l1((C, K), dt)
            dot_l1 = T.alloc_l1((BV, C), dt)
            pt_l1 = T.alloc_l1((C, C), dt)
            kq_c = T.alloc_l0c((C, C), F32)
            dv_c = T.alloc_l0c((C, BV), F32)
            gc_u = T.alloc_shared((C,), F32)
            kq_u = T.alloc_shared((C, C), F32)
            pt_u = T.alloc_shared((C, C), dt)
            for task in each_task(core, NCH * HV * NV):
                bv = task % NV
                bn = task // NV // HV
                bh = task // NV % HV
                hk = bh // (HV // H)
                v0 = bv * BV
                T.copy(Qc[bn, 0:C, hk, 0:K], q_l1)
                T.copy(Kc[bn, 0:C, hk, 0:K], k_l1)
                T.copy(DO[bn, 0:C, bh, v0 : v0 + BV], dot_l1, transpose=True)
                T.copy(GC[bn, bh, 0:C], gc_u)
                T.gemm(k_l1, q_l1, kq_c, transpose_B=True, clear_accum=True)
                T.copy(kq_c, kq_u)
                with vector():
                    for j, i in T.Parallel(C, C):  # P^T[j, i] = P[i, j], i >= j
                        pt_u[j, i] = T.if_then_else(i >= j, kq_u[j, i] * T.exp(gc_u[i] - gc_u[j]) * scale, 0.0).astype(
                            dt
                        )
                T.copy(pt_u, pt_l1)
                T.gemm(pt_l1, dot_l1, dv_c, transpose_B=True, clear_accum=True)
                T.copy(dv_c, DVL[bn, 0:C, bh, v0 : v0 + BV])

    return chunk_gdn_bwd_dv


def build_bwd_states(dtype: torch.dtype, K: int, V: int):
    """The reverse recurrence per (sequence, value head, V block), chunks last to first: DH, dV' = dV'_local +
    exp(gam - gc) (k dS), dS <- exp(gam) dS + q^T (exp(gc) scale dO) - W^T dV'. The decays scale the rows of a
    product's result or of its V-side operand (k, q^T and W^T load GM -> L1 as they are, transposed where the
    product sums over the chunk): the vector unit makes dS^T, the scaled dO^T and -dV'^T; the two products into dS
    share one L0C accumulator. V blocks of 32 columns (16 in fp32): the state and its gradient's tiles in both
    orientations, dV' and dO's fit the UB beside them."""
    dt = TL_DTYPE[dtype]
    gdd.head_blocks(K, V)
    BV, NV = _state_block(V, dtype, 32)
    NCH, N, H, HV = _sizes()

    @T.prim_func
    def chunk_gdn_bwd_states(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        GC: T.Tensor((NCH, HV, C), F32),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DVL: T.Tensor((NCH, C, HV, V), F32),
        DHT: T.Tensor((N, HV, K, V), F32),
        CO: T.Tensor((N + 1,), "int32"),
        DH: T.Tensor((NCH, HV, K, V), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DH0: T.Tensor((N, HV, K, V), F32),
        scale: T.float32,
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            k_l1 = T.alloc_l1((C, K), dt)
            dst_l1 = T.alloc_l1((BV, K), dt)
            qt_l1 = T.alloc_l1((K, C), dt)
            wt_l1 = T.alloc_l1((K, C), dt)
            dot_l1 = T.alloc_l1((BV, C), dt)
            ndt_l1 = T.alloc_l1((BV, C), dt)
            kds_c = T.alloc_l0c((C, BV), F32)
            dsn_c = T.alloc_l0c((K, BV), F32)
            ds_u = T.alloc_shared((K, BV), F32)
            ds16_u = T.alloc_shared((K, BV), dt)
            dst16_u = T.alloc_shared((BV, K), dt)
            gc_u = T.alloc_shared((C,), F32)
            do_u = T.alloc_shared((C, BV), dt)
            dot_u = T.alloc_shared((BV, C), dt)
            dvl_u = T.alloc_shared((C, BV), F32)
            kds_u = T.alloc_shared((C, BV), F32)
            dvn_u = T.alloc_shared((C, BV), dt)
            ndt_u = T.alloc_shared((BV, C), dt)
            dsn_u = T.alloc_shared((K, BV), F32)
            for task in each_task(core, N * HV * NV):
                bv = task % NV
                n = task // NV // HV
                bh = task // NV % HV
                hk = bh // (HV // H)
                v0 = bv * BV
                T.copy(DHT[n, bh, 0:K, v0 : v0 + BV], ds_u)
                c1 = CO[n + 1]
                for i in T.serial(c1 - CO[n]):
                    c = c1 - 1 - i
                    T.copy(GC[c, bh, 0:C], gc_u)
                    T.copy(DO[c, 0:C, bh, v0 : v0 + BV], do_u)
                    with vector():
                        for r, j in T.Parallel(K, BV):
                            ds16_u[r, j] = ds_u[r, j].astype(dt)
                            dst16_u[j, r] = ds_u[r, j].astype(dt)
                        for r, j in T.Parallel(C, BV):  # (exp(gc) scale dO)^T: q^T's partner in dS's update
                            dot_u[j, r] = (do_u[r, j].astype(F32) * (T.exp(gc_u[r]) * scale)).astype(dt)
                    T.copy(ds16_u, DH[c, bh, 0:K, v0 : v0 + BV])
                    T.copy(dst16_u, dst_l1)
                    T.copy(Kc[c, 0:C, hk, 0:K], k_l1)
                    T.gemm(k_l1, dst_l1, kds_c, transpose_B=True, clear_accum=True)  # k dS
                    T.copy(kds_c, kds_u)
                    T.copy(DVL[c, 0:C, bh, v0 : v0 + BV], dvl_u)
                    with vector():
                        for r, j in T.Parallel(C, BV):
                            dvn = dvl_u[r, j] + T.exp(gc_u[C - 1] - gc_u[r]) * kds_u[r, j]
                            dvn_u[r, j] = dvn.astype(dt)
                            ndt_u[j, r] = (-dvn).astype(dt)
                    T.copy(dvn_u, DVN[c, 0:C, bh, v0 : v0 + BV])
                    T.copy(dot_u, dot_l1)
                    T.copy(ndt_u, ndt_l1)
                    T.copy(Qc[c, 0:C, hk, 0:K], qt_l1, transpose=True)
                    T.copy(W[c, 0:C, bh, 0:K], wt_l1, transpose=True)
                    T.gemm(qt_l1, dot_l1, dsn_c, transpose_B=True, clear_accum=True)
                    T.gemm(wt_l1, ndt_l1, dsn_c, transpose_B=True)
                    T.copy(dsn_c, dsn_u)
                    with vector():
                        for r, j in T.Parallel(K, BV):
                            ds_u[r, j] = ds_u[r, j] * T.exp(gc_u[C - 1]) + dsn_u[r, j]
                T.copy(ds_u, DH0[n, bh, 0:K, v0 : v0 + BV])

    return chunk_gdn_bwd_states


def build_bwd_dqkwg(dtype: torch.dtype, K: int, V: int):
    """Per (chunk, value head, K block), over the V blocks: dO S^T, dO V'^T, V' dS^T and dV' S^T accumulated in
    L0C (each A B^T as stored), sum(S dS) on the vector unit; then dP, dq (+ dP k), the output's dk (+ dP^T q)
    and the K block's terms of dg (DGC[kb]), dq's tiles reused for dk. dW = dV' S^T goes L0C -> GM in the dtype
    (the WY backward's operand)."""
    dt, wide = TL_DTYPE[dtype], dtype == torch.float32
    BK, NK, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()
    sum_s_ds = gdd.row_dot(T, BV, rows=BK, add=True)
    add_dot, dot = gdd.row_dot(T, BK, add=True), gdd.row_dot(T, BK)
    decay_grad = gdd.state_decay_grad(T, BK)

    @T.prim_func
    def chunk_gdn_bwd_dqkwg(
        Qc: T.Tensor((NCH, C, H, K), dt),
        Kc: T.Tensor((NCH, C, H, K), dt),
        GC: T.Tensor((NCH, HV, C), F32),
        HS: T.Tensor((NCH, HV, K, V), dt),
        VN: T.Tensor((NCH, C, HV, V), dt),
        DO: T.Tensor((NCH, C, HV, V), dt),
        DH: T.Tensor((NCH, HV, K, V), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DQ: T.Tensor((NCH, C, HV, K), F32),
        DK: T.Tensor((NCH, C, HV, K), F32),
        DW: T.Tensor((NCH, C, HV, K), dt),
        DGC: T.Tensor((NK, NCH, HV, C), F32),
        scale: T.float32,
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            do_l1 = T.alloc_l1((C, BV), dt)
            vn_l1 = T.alloc_l1((C, BV), dt)
            dvn_l1 = T.alloc_l1((C, BV), dt)
            h_l1 = T.alloc_l1((BK, BV), dt)
            dh_l1 = T.alloc_l1((BK, BV), dt)
            q_l1 = T.alloc_l1((C, BK), dt)
            k_l1 = T.alloc_l1((C, BK), dt)
            kt_l1 = T.alloc_l1((BK, C), dt)
            qt_l1 = T.alloc_l1((BK, C), dt)
            dp_l1 = T.alloc_l1((C, C), dt)
            dpt_l1 = T.alloc_l1((C, C), dt)
            dq_c = T.alloc_l0c((C, BK), F32)
            dp_c = T.alloc_l0c((C, C), F32)
            dk_c = T.alloc_l0c((C, BK), F32)
            dw_c = T.alloc_l0c((C, BK), F32)
            qk_c = T.alloc_l0c((C, C), F32)
            y_c = T.alloc_l0c((C, BK), F32)
            h_u = T.alloc_shared((BK, BV), dt)
            dh_u = T.alloc_shared((BK, BV), dt)
            hd_u = T.alloc_shared((BK,), F32)
            q_u = T.alloc_shared((C, BK), dt)
            k_u = T.alloc_shared((C, BK), dt)
            gc_u = T.alloc_shared((C,), F32)
            dg_u = T.alloc_shared((C,), F32)
            gk_u = T.alloc_shared((C,), F32)
            x_u = T.alloc_shared((C, BK), F32)  # dq's tile, then dk's
            y_u = T.alloc_shared((C, BK), F32)  # dP k, then dP^T q
            dp_u = T.alloc_shared((C, C), F32)
            qk_u = T.alloc_shared((C, C), F32)
            dpt16_u = T.alloc_shared((C, C), dt)
            dp16_u = dp_u if wide else T.alloc_shared((C, C), dt)  # fp32: dP made in place, written last
            for task in each_task(core, NCH * HV * NK):
                bk = task % NK
                bn = task // NK // HV
                bh = task // NK % HV
                hk = bh // (HV // H)
                k0 = bk * BK
                with vector():
                    for r in T.Parallel(BK):
                        hd_u[r] = 0.0
                for bv in T.serial(NV):
                    v0 = bv * BV
                    T.copy(DO[bn, 0:C, bh, v0 : v0 + BV], do_l1)
                    T.copy(VN[bn, 0:C, bh, v0 : v0 + BV], vn_l1)
                    T.copy(DVN[bn, 0:C, bh, v0 : v0 + BV], dvn_l1)
                    T.copy(HS[bn, bh, k0 : k0 + BK, v0 : v0 + BV], h_l1)
                    T.copy(DH[bn, bh, k0 : k0 + BK, v0 : v0 + BV], dh_l1)
                    T.gemm(do_l1, h_l1, dq_c, transpose_B=True, clear_accum=bv == 0)  # dO S^T
                    T.gemm(do_l1, vn_l1, dp_c, transpose_B=True, clear_accum=bv == 0)  # dO V'^T
                    T.gemm(vn_l1, dh_l1, dk_c, transpose_B=True, clear_accum=bv == 0)  # V' dS^T
                    T.gemm(dvn_l1, h_l1, dw_c, transpose_B=True, clear_accum=bv == 0)  # dV' S^T
                    T.copy(HS[bn, bh, k0 : k0 + BK, v0 : v0 + BV], h_u)
                    T.copy(DH[bn, bh, k0 : k0 + BK, v0 : v0 + BV], dh_u)
                    with vector():
                        sum_s_ds(h_u, dh_u, hd_u)
                T.copy(dw_c, DW[bn, 0:C, bh, k0 : k0 + BK])  # L0C -> GM, rounded by the fixpipe
                T.copy(Qc[bn, 0:C, hk, k0 : k0 + BK], q_l1)
                T.copy(Kc[bn, 0:C, hk, k0 : k0 + BK], k_l1)
                T.gemm(q_l1, k_l1, qk_c, transpose_B=True, clear_accum=True)
                T.copy(dp_c, dp_u)
                T.copy(qk_c, qk_u)
                T.copy(dq_c, x_u)
                T.copy(Qc[bn, 0:C, hk, k0 : k0 + BK], q_u)
                T.copy(Kc[bn, 0:C, hk, k0 : k0 + BK], k_u)
                T.copy(GC[bn, bh, 0:C], gc_u)
                with vector():
                    # dP = dO V'^T decay scale (lower): dg's q k^T term is rowsum - colsum of dP * q k^T
                    for i, j in T.Parallel(C, C):
                        dp = T.if_then_else(i >= j, dp_u[i, j] * T.exp(gc_u[i] - gc_u[j]) * scale, 0.0)
                        dpt16_u[j, i] = dp.astype(dt)
                        qk_u[i, j] = dp * qk_u[i, j]
                        dp16_u[i, j] = dp.astype(dt)
                    for i in T.Parallel(C):
                        dg_u[i] = 0.0
                    rows_minus_cols(qk_u, dg_u)
                    # dq's state part exp(gc) scale dO S^T and its dg term
                    for i, j in T.Parallel(C, BK):
                        x_u[i, j] = x_u[i, j] * (T.exp(gc_u[i]) * scale)
                    add_dot(x_u, q_u, dg_u)
                T.copy(dp16_u, dp_l1)
                T.copy(Kc[bn, 0:C, hk, k0 : k0 + BK], kt_l1, transpose=True)
                T.gemm(dp_l1, kt_l1, y_c, transpose_B=True, clear_accum=True)  # dP k
                T.copy(y_c, y_u)
                with vector():
                    for i, j in T.Parallel(C, BK):
                        x_u[i, j] = x_u[i, j] + y_u[i, j]
                T.copy(x_u, DQ[bn, 0:C, bh, k0 : k0 + BK])
                # then dk in the same tiles: exp(gam - gc) V' dS^T (its gk), + dP^T q
                T.copy(dk_c, x_u)
                with vector():
                    for i, j in T.Parallel(C, BK):
                        x_u[i, j] = x_u[i, j] * T.exp(gc_u[C - 1] - gc_u[i])
                    dot(x_u, k_u, gk_u)
                    decay_grad(gk_u, hd_u, gc_u, dg_u)
                T.copy(dg_u, DGC[bk, bn, bh, 0:C])
                T.copy(dpt16_u, dpt_l1)
                T.copy(Qc[bn, 0:C, hk, k0 : k0 + BK], qt_l1, transpose=True)
                T.gemm(dpt_l1, qt_l1, y_c, transpose_B=True, clear_accum=True)  # dP^T q
                T.copy(y_c, y_u)
                with vector():
                    for i, j in T.Parallel(C, BK):
                        x_u[i, j] = x_u[i, j] + y_u[i, j]
                T.copy(x_u, DK[bn, 0:C, bh, k0 : k0 + BK])

    return chunk_gdn_bwd_dqkwg


def build_bwd_wy(dtype: torch.dtype, K: int, V: int):
    """The WY backward per (chunk, value head), its K and V dimensions in blocks (the UB holds a block of each
    C x D fp32 tile, not the whole): per K block dX = Tinv^T dW (Tinv^T and dW^T loaded transposed) on the cube,
    rowsum(dX k) on the vector unit, dA += dX W^T and k k^T on the cube; per V block dY = Tinv^T dV', rowsum(dY v),
    dv = beta dY, dA -= dY U^T; then the masks, decays, row sums and dg's reverse cumulative sum on the vector unit;
    per K block E k + E^T k on the cube (E^T written transposed by the vector unit) and dk = DK + that - beta
    exp(gc) dX, dX recomputed (one C x C x 64 product) rather than kept whole."""
    dt, wide = TL_DTYPE[dtype], dtype == torch.float32
    BK, NK, BV, NV = gdd.head_blocks(K, V)
    NCH, _, H, HV = _sizes()
    dot_k, dot_v = gdd.row_dot(T, BK, add=True), gdd.row_dot(T, BV, add=True)
    e_kk = gdd.row_dot(T, C)

    @T.prim_func
    def chunk_gdn_bwd_wy(
        Kc: T.Tensor((NCH, C, H, K), dt),
        Vc: T.Tensor((NCH, C, HV, V), dt),
        BETA: T.Tensor((NCH, HV, C), F32),
        GC: T.Tensor((NCH, HV, C), F32),
        TINV: T.Tensor((NCH, HV, C, C), dt),
        W: T.Tensor((NCH, C, HV, K), dt),
        U: T.Tensor((NCH, C, HV, V), dt),
        DW: T.Tensor((NCH, C, HV, K), dt),
        DVN: T.Tensor((NCH, C, HV, V), dt),
        DK: T.Tensor((NCH, C, HV, K), F32),
        DGC: T.Tensor((NK, NCH, HV, C), F32),
        DKO: T.Tensor((NCH, C, HV, K), F32),
        DV: T.Tensor((NCH, C, HV, V), F32),
        DBETA: T.Tensor((NCH, HV, C), F32),
        DG: T.Tensor((NCH, HV, C), F32),
    ):
        with T.MixedKernel(CORES, sids=1) as (core, _):
            tt_l1 = T.alloc_l1((C, C), dt)
            dwt_l1 = T.alloc_l1((BK, C), dt)
            dvt_l1 = T.alloc_l1((BV, C), dt)
            dx_l1 = T.alloc_l1((C, BK), dt)
            ndy_l1 = T.alloc_l1((C, BV), dt)
            w_l1 = T.alloc_l1((C, BK), dt)
            u_l1 = T.alloc_l1((C, BV), dt)
            k_l1 = T.alloc_l1((C, BK), dt)
            kt_l1 = T.alloc_l1((BK, C), dt)
            e_l1 = T.alloc_l1((C, C), dt)
            et_l1 = T.alloc_l1((C, C), dt)
            dx_c = T.alloc_l0c((C, BK), F32)
            dy_c = T.alloc_l0c((C, BV), F32)
            da_c = T.alloc_l0c((C, C), F32)
            kk_c = T.alloc_l0c((C, C), F32)
            ek_c = T.alloc_l0c((C, BK), F32)
            b_u = T.alloc_shared((C,), F32)
            gc_u = T.alloc_shared((C,), F32)
            dg_u = T.alloc_shared((C,), F32)
            dgk_u = T.alloc_shared((C,), F32)
            db_u = T.alloc_shared((C,), F32)
            kdx_u = T.alloc_shared((C,), F32)
            dyv_u = T.alloc_shared((C,), F32)
            dx_u = T.alloc_shared((C, BK), F32)
            dy_u = T.alloc_shared((C, BV), F32)
            k_u = T.alloc_shared((C, BK), dt)
            v_u = T.alloc_shared((C, BV), dt)
            da_u = T.alloc_shared((C, C), F32)
            kk_u = T.alloc_shared((C, C), F32)
            et16_u = T.alloc_shared((C, C), dt)
            # the product operands in the dtype; in fp32 the fp32 tiles themselves (-dY then made in place)
            dx16_u = dx_u if wide else T.alloc_shared((C, BK), dt)
            ndy16_u = dy_u if wide else T.alloc_shared((C, BV), dt)
            e16_u = da_u if wide else T.alloc_shared((C, C), dt)
            # dk's last phase in fp32 in tiles done with: k's (read by rowsum(dX k) only) and v's (same shape)
            dk_u = k_u if wide else T.alloc_shared((C, BK), F32)
            ek_u = v_u if wide and BV == BK else T.alloc_shared((C, BK), F32)
            for task in each_task(core, NCH * HV):
                bn = task // HV
                bh = task % HV
                hk = bh // (HV // H)
                T.copy(TINV[bn, bh, 0:C, 0:C], tt_l1, transpose=True)
                T.copy(BETA[bn, bh, 0:C], b_u)
                T.copy(GC[bn, bh, 0:C], gc_u)
                with vector():
                    for i in T.Parallel(C):
                        kdx_u[i] = 0.0
                        dyv_u[i] = 0.0
                for kb in T.serial(NK):  # dX = Tinv^T dW: rowsum(dX k), dA = dX W^T, k k^T
                    T.copy(DW[bn, 0:C, bh, kb * BK : kb * BK + BK], dwt_l1, transpose=True)
                    T.gemm(tt_l1, dwt_l1, dx_c, transpose_B=True, clear_accum=True)
                    T.copy(dx_c, dx_u)
                    T.copy(Kc[bn, 0:C, hk, kb * BK : kb * BK + BK], k_u)
                    with vector():
                        if not wide:
                            for i, j in T.Parallel(C, BK):
                                dx16_u[i, j] = dx_u[i, j].astype(dt)
                        dot_k(dx_u, k_u, kdx_u)
                    T.copy(dx16_u, dx_l1)
                    T.copy(W[bn, 0:C, bh, kb * BK : kb * BK + BK], w_l1)
                    T.copy(Kc[bn, 0:C, hk, kb * BK : kb * BK + BK], k_l1)
                    T.gemm(dx_l1, w_l1, da_c, transpose_B=True, clear_accum=kb == 0)
                    T.gemm(k_l1, k_l1, kk_c, transpose_B=True, clear_accum=kb == 0)
                for vb in T.serial(NV):  # dY = Tinv^T dV': rowsum(dY v), dv = beta dY, dA -= dY U^T
                    T.copy(DVN[bn, 0:C, bh, vb * BV : vb * BV + BV], dvt_l1, transpose=True)
                    T.gemm(tt_l1, dvt_l1, dy_c, transpose_B=True, clear_accum=True)
                    T.copy(dy_c, dy_u)
                    T.copy(Vc[bn, 0:C, bh, vb * BV : vb * BV + BV], v_u)
                    with vector():
                        dot_v(dy_u, v_u, dyv_u)
                        for i, j in T.Parallel(C, BV):
                            ndy16_u[i, j] = (-dy_u[i, j]).astype(dt)
                    T.copy(ndy16_u, ndy_l1)
                    with vector():
                        for i, j in T.Parallel(C, BV):  # dv = beta dY (dY_u holds -dY in fp32)
                            dy_u[i, j] = (-dy_u[i, j] if wide else dy_u[i, j]) * b_u[i]
                    T.copy(dy_u, DV[bn, 0:C, bh, vb * BV : vb * BV + BV])
                    T.copy(U[bn, 0:C, bh, vb * BV : vb * BV + BV], u_l1)
                    T.gemm(ndy_l1, u_l1, da_c, transpose_B=True)
                T.copy(da_c, da_u)
                T.copy(kk_c, kk_u)
                T.copy(DGC[0, bn, bh, 0:C], dg_u)
                for kb in T.serial(1, NK):  # the K blocks' per-position terms of dg, summed
                    T.copy(DGC[kb, bn, bh, 0:C], dgk_u)
                    with vector():
                        for i in T.Parallel(C):
                            dg_u[i] = dg_u[i] + dgk_u[i]
                with vector():
                    # e = dA decay (strictly lower): dbeta's rowsum(e kk), dg's rowsum - colsum of beta e kk
                    for i, j in T.Parallel(C, C):
                        da_u[i, j] = T.if_then_else(i > j, da_u[i, j] * T.exp(gc_u[i] - gc_u[j]), 0.0)
                    e_kk(da_u, kk_u, db_u)
                    for i, j in T.Parallel(C, C):  # E = beta e, and E^T; e16 may be e's own tile: written last
                        kk_u[i, j] = da_u[i, j] * b_u[i] * kk_u[i, j]
                        et16_u[j, i] = (da_u[i, j] * b_u[i]).astype(dt)
                        e16_u[i, j] = (da_u[i, j] * b_u[i]).astype(dt)
                    rows_minus_cols(kk_u, dg_u)
                    # beta exp(gc) k's gradient is -dX: kdx = rowsum(dX k) feeds dbeta and dg
                    for i in T.Parallel(C):
                        db_u[i] = db_u[i] + dyv_u[i] - T.exp(gc_u[i]) * kdx_u[i]
                        dg_u[i] = dg_u[i] - b_u[i] * T.exp(gc_u[i]) * kdx_u[i]
                    suffix(dg_u, dgk_u)
                T.copy(db_u, DBETA[bn, bh, 0:C])
                T.copy(dgk_u, DG[bn, bh, 0:C])
                T.copy(e16_u, e_l1)
                T.copy(et16_u, et_l1)
                for kb in T.serial(NK):  # dk = DK + E k + E^T k - beta exp(gc) dX
                    T.copy(Kc[bn, 0:C, hk, kb * BK : kb * BK + BK], kt_l1, transpose=True)
                    T.gemm(e_l1, kt_l1, ek_c, transpose_B=True, clear_accum=True)
                    T.gemm(et_l1, kt_l1, ek_c, transpose_B=True)
                    T.copy(DW[bn, 0:C, bh, kb * BK : kb * BK + BK], dwt_l1, transpose=True)
                    T.gemm(tt_l1, dwt_l1, dx_c, transpose_B=True, clear_accum=True)
                    T.copy(ek_c, ek_u)
                    T.copy(dx_c, dx_u)
                    T.copy(DK[bn, 0:C, bh, kb * BK : kb * BK + BK], dk_u)
                    with vector():
                        for i, j in T.Parallel(C, BK):
                            dk_u[i, j] = dk_u[i, j] + ek_u[i, j] - dx_u[i, j] * (b_u[i] * T.exp(gc_u[i]))
                    T.copy(dk_u, DKO[bn, 0:C, bh, kb * BK : kb * BK + BK])

    return chunk_gdn_bwd_wy


BUILDERS = gdd.ChunkBuilders(
    build_prepare, build_states, build_output, build_bwd_dv, build_bwd_states, build_bwd_dqkwg, build_bwd_wy
)


WIDEST = gdd.MAX_HEAD_DIM  # the widest dim it lowers (a head's, not a row's): what a budget check lowers


def bucket(dim: int) -> int:
    """A kernel per head dimension (its tiles are the head's): ``tileport lower`` keys its cache on the dim."""
    return dim


lowered, forward, backward = gdd.chunk_entries(BUILDERS, RUNNER, "an Ascend 950 NPU")
