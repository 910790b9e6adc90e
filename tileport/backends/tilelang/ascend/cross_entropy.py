"""cross_entropy's row kernels for Ascend arch35 (Ascend 950) in TileLang's ascend dialect, one kernel per (logits
dtype, target dtype, tile-width bucket, options: weight, smoothing, softcap, fused gradient); N and C are runtime
values. The CUDA module's math (``cuda/cross_entropy.py``: its softcap and gradient; the launchers are
``../cross_entropy_device.py``'s) in softmax's Ascend
layout (``ascend/softmax.py``): a persistent grid of ``CORES`` vector cores walking blocks of rows, GM -> UB copies
of runtime length, SIMT vector sub-kernels, ``T.Pipelined`` double buffering.

Pass one, chunk by chunk: the chunk's max raises each row's running max and rescales its sum of exp(z - max),
the sums across chunks compensated (Neumaier: no fp64 on the vector units); the target's logit and weight are
picked out of the chunk holding them by a masked sum (no gather from GM); with smoothing sum(w z) and sum(w) too.
The loss from (max - z_t) + log(sum). The fused forward's second pass writes the gradient into G, which may be X
(each chunk copied to the UB before its gradient is copied back). The backward takes the forward's lse.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from .. import cross_entropy_device
from ..cross_entropy_device import INDEX
from ..cuda.cross_entropy import finite_or_zero, gradient, let, softcapped, zterm
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, THREADS, bucket, rows_per_block

RUNNER = RUNNERS["ascend"]


def _compensation(hi, v):
    """The rounding error of hi + v (Neumaier's step: exact in fp32): the compensated sums across chunks, nearly
    as an fp64 sum, where the vector units have no fp64."""
    return let(hi + v, lambda t: T.if_then_else(T.abs(hi) >= T.abs(v), (hi - t) + v, (v - t) + hi))


def build_forward(
    width: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool, fused: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 8)  # x and the gradient, z and exp(z - max) in fp32
    one_chunk = width < MAX_WIDTH
    N, C = T.dynamic("N"), T.dynamic("C")

    def logit(v, cap):
        return softcapped(T, v, cap, lambda z, _: z) if capped else v

    @T.prim_func
    def cross_entropy_fwd(
        X: T.Tensor((N, C), xt),
        TG: T.Tensor((N,), tt),
        W: T.Tensor((C,), xt),
        G: T.Tensor((N, C), xt),
        LOSS: T.Tensor((N,), "float32"),
        ZL: T.Tensor((N,), "float32"),
        LSE: T.Tensor((N,), "float32"),
        ignore_index: T.int64,
        eps: T.float32,
        scale: T.float32,
        cap: T.float32,
        a: T.float32,
        b: T.float32,
    ):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            zu = T.alloc_shared((block_M, width), "float32")
            eu = T.alloc_shared((block_M, width), "float32")
            gu = T.alloc_shared((block_M, width), xt)
            wu = T.alloc_shared((width,), xt)
            tu = T.alloc_shared((block_M,), tt)
            part = T.alloc_shared((block_M,), "float32")
            m = T.alloc_shared((block_M,), "float32")  # running max
            mn = T.alloc_shared((block_M,), "float32")
            bs = T.alloc_shared((block_M,), "float32")  # the exps' base: the max, 0 while it is infinite
            s = T.alloc_shared((block_M,), "float32")  # sum of exp(z - m), and its compensation
            sc = T.alloc_shared((block_M,), "float32")
            swz = T.alloc_shared((block_M,), "float32")  # smoothing: sum of w z (compensated), sum of w
            swc = T.alloc_shared((block_M,), "float32")
            ws = T.alloc_shared((block_M,), "float32")
            zt = T.alloc_shared((block_M,), "float32")  # the target's logit and weight
            wt = T.alloc_shared((block_M,), "float32")
            ok = T.alloc_shared((block_M,), "float32")  # 1 for a counted row, 0 for an ignored one
            lu = T.alloc_shared((block_M,), "float32")  # loss, z_loss, lse out
            zl = T.alloc_shared((block_M,), "float32")
            lsu = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(N, block_M)
            chunks = T.ceildiv(C, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                bk = core + t * CORES
                if bk < blocks:
                    r0 = bk * block_M
                    rows = T.min(block_M, N - r0)
                    T.copy(TG[r0 : r0 + rows], tu[0:rows])
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            m[i] = -T.infinity("float32")
                            s[i] = 0.0
                            sc[i] = 0.0
                            swz[i] = 0.0
                            swc[i] = 0.0
                            ws[i] = 0.0
                            zt[i] = 0.0
                            wt[i] = 0.0
                            ok[i] = T.if_then_else(T.cast(tu[i], "int64") != ignore_index, 1.0, 0.0)
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, C - k * width)
                        T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                        if weighted:
                            T.copy(W[k * width : k * width + n], wu[0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                zu[i, j] = T.if_then_else(
                                    j < n, logit(xu[i, j].astype("float32"), cap), -T.infinity("float32")
                                )
                        T.reduce_max(zu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                mn[i] = T.max(m[i], part[i])
                                bs[i] = finite_or_zero(T, T.max(m[i], part[i]))
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                eu[i, j] = T.if_then_else(j < n, T.exp(zu[i, j] - bs[i]), 0.0)
                        T.reduce_sum(eu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):  # each buffer read before it is written (no RAW)
                                f = T.exp(m[i] - bs[i])  # 0 from m = -inf
                                sc[i] = sc[i] * f + _compensation(s[i] * f, part[i])
                                s[i] = s[i] * f + part[i]
                                m[i] = mn[i]
                        with T.SimtVF(threads=THREADS):  # the target's logit, where this chunk holds it
                            for i, j in T.Parallel(block_M, width):
                                hit = T.cast(k * width + j, "int64") == T.cast(tu[i], "int64")
                                eu[i, j] = T.if_then_else(j < n, T.if_then_else(hit, zu[i, j], 0.0), 0.0)
                        T.reduce_sum(eu, part, dim=1)
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                zt[i] += part[i]
                        if weighted:
                            with T.SimtVF(threads=THREADS):
                                for i, j in T.Parallel(block_M, width):
                                    hit = T.cast(k * width + j, "int64") == T.cast(tu[i], "int64")
                                    eu[i, j] = T.if_then_else(
                                        j < n, T.if_then_else(hit, wu[j].astype("float32"), 0.0), 0.0
                                    )
                            T.reduce_sum(eu, part, dim=1)
                            with T.SimtVF(threads=THREADS):
                                for i in T.Parallel(block_M):
                                    wt[i] += part[i]
                        if smoothing:
                            with T.SimtVF(threads=THREADS):
                                for i, j in T.Parallel(block_M, width):
                                    wz = wu[j].astype("float32") * zu[i, j] if weighted else zu[i, j]
                                    eu[i, j] = T.if_then_else(j < n, wz, 0.0)
                            T.reduce_sum(eu, part, dim=1)
                            with T.SimtVF(threads=THREADS):
                                for i in T.Parallel(block_M):
                                    swc[i] = swc[i] + _compensation(swz[i], part[i])
                                    swz[i] = swz[i] + part[i]
                            if weighted:
                                with T.SimtVF(threads=THREADS):
                                    for i, j in T.Parallel(block_M, width):
                                        eu[i, j] = T.if_then_else(j < n, wu[j].astype("float32"), 0.0)
                                T.reduce_sum(eu, part, dim=1)
                                with T.SimtVF(threads=THREADS):
                                    for i in T.Parallel(block_M):
                                        ws[i] += part[i]
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            ls = T.log(s[i] + sc[i])
                            w_t = wt[i] if weighted else T.float32(1)
                            loss = w_t * ((m[i] - zt[i]) + ls)
                            if smoothing:
                                w_all = ws[i] if weighted else T.cast(C, "float32")
                                loss = (1.0 - eps) * loss + eps / T.cast(C, "float32") * (
                                    ((w_all * m[i] - swz[i]) - swc[i]) + w_all * ls
                                )
                            lu[i] = loss * ok[i]
                            zl[i] = T.if_then_else(scale != 0, scale * (m[i] + ls) * (m[i] + ls) * ok[i], 0.0)
                            lsu[i] = m[i] + ls
                            # the gradient's row terms (their passes are done): k in mn, a (1 - eps) w_t in wt,
                            # log s in s
                            w_mean = ws[i] / T.cast(C, "float32") if weighted else T.float32(1)
                            k_smooth = a * (1.0 - eps) * w_t + a * eps * w_mean if smoothing else a * w_t
                            mn[i] = (k_smooth + zterm(T, b * 2.0 * scale, m[i] + ls)) * ok[i]
                            wt[i] = a * (1.0 - eps) * w_t
                            s[i] = ls
                    T.copy(lu[0:rows], LOSS[r0 : r0 + rows])
                    T.copy(zl[0:rows], ZL[r0 : r0 + rows])
                    T.copy(lsu[0:rows], LSE[r0 : r0 + rows])
                    if fused:
                        for k in T.Pipelined(chunks, num_stages=2):
                            n = T.min(width, C - k * width)
                            if not one_chunk:
                                T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                                if weighted:
                                    T.copy(W[k * width : k * width + n], wu[0:n])
                            with T.SimtVF(threads=THREADS):
                                for i, j in T.Parallel(block_M, width):
                                    hit = T.cast(k * width + j, "int64") == T.cast(tu[i], "int64")
                                    wc = a * eps / T.cast(C, "float32") * (wu[j].astype("float32") if weighted else 1.0)
                                    gu[i, j] = gradient(
                                        T,
                                        capped,
                                        smoothing,
                                        xu[i, j].astype("float32"),
                                        cap,
                                        mn[i],
                                        m[i],
                                        s[i],
                                        wc,
                                        hit,
                                        wt[i],
                                        ok[i],
                                    ).astype(xt)
                            T.copy(gu[0:rows, 0:n], G[r0 : r0 + rows, k * width : k * width + n])

    return cross_entropy_fwd.with_attr("global_symbol", "cross_entropy_fwd_grad" if fused else "cross_entropy_fwd")


def build_backward(
    width: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4)
    N, C = T.dynamic("N"), T.dynamic("C")

    @T.prim_func
    def cross_entropy_bwd(
        X: T.Tensor((N, C), xt),
        TG: T.Tensor((N,), tt),
        W: T.Tensor((C,), xt),
        DL: T.Tensor((N,), "float32"),
        DZ: T.Tensor((N,), "float32"),
        LSE: T.Tensor((N,), "float32"),
        DX: T.Tensor((N, C), xt),
        ignore_index: T.int64,
        eps: T.float32,
        scale: T.float32,
        cap: T.float32,
    ):
        with T.Kernel(CORES) as core:
            xu = T.alloc_shared((block_M, width), xt)
            eu = T.alloc_shared((block_M, width), "float32")
            gu = T.alloc_shared((block_M, width), xt)
            wu = T.alloc_shared((width,), xt)
            tu = T.alloc_shared((block_M,), tt)
            part = T.alloc_shared((block_M,), "float32")
            du = T.alloc_shared((block_M,), "float32")  # dloss, dz_loss, lse
            dz = T.alloc_shared((block_M,), "float32")
            lu = T.alloc_shared((block_M,), "float32")
            wt = T.alloc_shared((block_M,), "float32")  # w_t, then a (1 - eps) w_t
            ws = T.alloc_shared((block_M,), "float32")  # W
            kp = T.alloc_shared((block_M,), "float32")
            ok = T.alloc_shared((block_M,), "float32")
            blocks = T.ceildiv(N, block_M)
            chunks = T.ceildiv(C, width)
            for t in T.serial(T.ceildiv(blocks, CORES)):
                bk = core + t * CORES
                if bk < blocks:
                    r0 = bk * block_M
                    rows = T.min(block_M, N - r0)
                    T.copy(TG[r0 : r0 + rows], tu[0:rows])
                    T.copy(DL[r0 : r0 + rows], du[0:rows])
                    T.copy(DZ[r0 : r0 + rows], dz[0:rows])
                    T.copy(LSE[r0 : r0 + rows], lu[0:rows])
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            ok[i] = T.if_then_else(T.cast(tu[i], "int64") != ignore_index, 1.0, 0.0)
                            wt[i] = 0.0 if weighted else 1.0  # 1 without weights, else summed below
                            ws[i] = T.cast(C, "float32")
                    if weighted:  # w_t picked out of its chunk, and W
                        with T.SimtVF(threads=THREADS):
                            for i in T.Parallel(block_M):
                                ws[i] = 0.0
                        for k in T.Pipelined(chunks, num_stages=2):
                            n = T.min(width, C - k * width)
                            T.copy(W[k * width : k * width + n], wu[0:n])
                            with T.SimtVF(threads=THREADS):
                                for i, j in T.Parallel(block_M, width):
                                    hit = T.cast(k * width + j, "int64") == T.cast(tu[i], "int64")
                                    eu[i, j] = T.if_then_else(
                                        j < n, T.if_then_else(hit, wu[j].astype("float32"), 0.0), 0.0
                                    )
                            T.reduce_sum(eu, part, dim=1)
                            with T.SimtVF(threads=THREADS):
                                for i in T.Parallel(block_M):
                                    wt[i] += part[i]
                            if smoothing:
                                with T.SimtVF(threads=THREADS):
                                    for i, j in T.Parallel(block_M, width):
                                        eu[i, j] = T.if_then_else(j < n, wu[j].astype("float32"), 0.0)
                                T.reduce_sum(eu, part, dim=1)
                                with T.SimtVF(threads=THREADS):
                                    for i in T.Parallel(block_M):
                                        ws[i] += part[i]
                    with T.SimtVF(threads=THREADS):
                        for i in T.Parallel(block_M):
                            k_row = du[i] * (1.0 - eps) * wt[i]
                            if smoothing:
                                k_row = k_row + du[i] * eps * (ws[i] / T.cast(C, "float32"))
                            kp[i] = (k_row + zterm(T, dz[i] * 2.0 * scale, lu[i])) * ok[i]
                            wt[i] = du[i] * (1.0 - eps) * wt[i]
                    for k in T.Pipelined(chunks, num_stages=2):
                        n = T.min(width, C - k * width)
                        T.copy(X[r0 : r0 + rows, k * width : k * width + n], xu[0:rows, 0:n])
                        if weighted:
                            T.copy(W[k * width : k * width + n], wu[0:n])
                        with T.SimtVF(threads=THREADS):
                            for i, j in T.Parallel(block_M, width):
                                hit = T.cast(k * width + j, "int64") == T.cast(tu[i], "int64")
                                wc = du[i] * eps / T.cast(C, "float32") * (wu[j].astype("float32") if weighted else 1.0)
                                gu[i, j] = gradient(
                                    T,
                                    capped,
                                    smoothing,
                                    xu[i, j].astype("float32"),
                                    cap,
                                    kp[i],
                                    lu[i],
                                    T.float32(0),
                                    wc,
                                    hit,
                                    wt[i],
                                    ok[i],
                                ).astype(xt)
                        T.copy(gu[0:rows, 0:n], DX[r0 : r0 + rows, k * width : k * width + n])

    return cross_entropy_bwd


lowered, forward, backward = cross_entropy_device.entries(
    build_forward, build_backward, bucket, RUNNER, "an Ascend 950 NPU"
)
