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
from tilelang import tvm

from .. import cross_entropy_device
from ..cross_entropy_device import INDEX
from ..cuda.cross_entropy import finite_or_zero, gradient, let, softcapped, zterm
from ..targets import RUNNERS, TL_DTYPE
from ._common import CORES, MAX_WIDTH, bucket, rows_per_block
from ._walk import Walk

RUNNER = RUNNERS["ascend"]


def _compensation(hi, v):
    """The rounding error of hi + v (Neumaier's step: exact in fp32): the compensated sums across chunks, nearly
    as an fp64 sum, where the vector units have no fp64."""
    return let(hi + v, lambda t: T.if_then_else(T.abs(hi) >= T.abs(v), (hi - t) + v, (v - t) + hi))


def _row_at(v, i):
    """Row i's value of a per-row UB vector, or a scalar as it is."""
    return v[i] if isinstance(v, tvm.tirx.Buffer) else v


def _value(src, i, j):
    """Column j's fp32 value of a (rows, width) fp32 tile (row i) or of a per-column vector."""
    return src[i, j] if len(src.shape) == 2 else src[j].astype("float32")


def _passes(walk, xt, weighted: bool, smoothing: bool, capped: bool):
    """The macros both kernels use: ``pick`` adds the target column's value (of a (rows, width) fp32 tile or a
    per-column vector) into a per-row sum, ``total`` adds the chunk's weights, and ``gradients`` writes the
    logits' gradient chunk by chunk from the row terms (``shift`` None: 0)."""
    add = walk.add_row_sums()

    def is_target(tu, k, i, j):
        return T.cast(k * walk.width + j, "int64") == T.cast(tu[i], "int64")

    @T.macro
    def pick(eu, src, tu, part, acc, k, n):
        for i, j in walk.each():
            hit = is_target(tu, k, i, j)
            eu[i, j] = T.if_then_else(j < n, T.if_then_else(hit, _value(src, i, j), 0.0), 0.0)
        add(eu, part, acc)

    @T.macro
    def total(eu, wu, part, acc, n):
        for i, j in walk.each():
            eu[i, j] = T.if_then_else(j < n, wu[j].astype("float32"), 0.0)
        add(eu, part, acc)

    @T.macro
    def gradients(loads, stores, gu, xu, wu, tu, a, k_row, base, shift, wt, ok, C, cap, eps):
        for chunk in walk.chunks(loads, stores):
            for i, j in walk.each():
                hit = is_target(tu, chunk.k, i, j)
                wc = _row_at(a, i) * eps / T.cast(C, "float32") * (wu[j].astype("float32") if weighted else 1.0)
                terms = (k_row[i], base[i], T.float32(0) if shift is None else shift[i], wc, hit, wt[i], ok[i])
                gu[i, j] = gradient(T, capped, smoothing, xu[i, j].astype("float32"), cap, *terms).astype(xt)

    return pick, total, gradients


def build_forward(
    width: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool, fused: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 8)  # x and the gradient, z and exp(z - max) in fp32
    one_chunk = width < MAX_WIDTH
    N, C = T.dynamic("N"), T.dynamic("C")
    walk = Walk(width, block_M)
    pick, total, gradients = _passes(walk, xt, weighted, smoothing, capped)

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
            xu, zu, eu, gu = walk.tiles(xt, "float32", "float32", xt)
            wu = T.alloc_shared((width,), xt)
            tu, part = walk.row_vectors(tt, "float32")
            m = T.alloc_shared((block_M,), "float32")  # running max
            mn = T.alloc_shared((block_M,), "float32")
            bs = T.alloc_shared((block_M,), "float32")  # the exps' base: the max, 0 while it is infinite
            s = T.alloc_shared((block_M,), "float32")  # sum of exp(z - m), and its compensation
            sc = T.alloc_shared((block_M,), "float32")
            swz = T.alloc_shared((block_M,), "float32")  # smoothing: sum of w z (compensated), sum of w
            swc, ws = walk.row_vectors("float32", "float32")
            zt = T.alloc_shared((block_M,), "float32")  # the target's logit and weight
            wt = T.alloc_shared((block_M,), "float32")
            ok = T.alloc_shared((block_M,), "float32")  # 1 for a counted row, 0 for an ignored one
            lu = T.alloc_shared((block_M,), "float32")  # loss, z_loss, lse out
            zl, lsu = walk.row_vectors("float32", "float32")
            vectors = ((W, wu),) if weighted else ()
            for _ in walk.blocks(core, N, C, loads=((TG, tu),), index="bk"):
                for i in walk.each_row():
                    m[i] = -T.infinity("float32")
                    s[i] = 0.0
                    sc[i] = 0.0
                    swz[i] = 0.0
                    swc[i] = 0.0
                    ws[i] = 0.0
                    zt[i] = 0.0
                    wt[i] = 0.0
                    ok[i] = T.if_then_else(T.cast(tu[i], "int64") != ignore_index, 1.0, 0.0)
                for k, n in walk.chunks(((X, xu),) + vectors):
                    for i, j in walk.each():
                        zu[i, j] = T.if_then_else(j < n, logit(xu[i, j].astype("float32"), cap), -T.infinity("float32"))
                    T.reduce_max(zu, part, dim=1)
                    for i in walk.each_row():
                        mn[i] = T.max(m[i], part[i])
                        bs[i] = finite_or_zero(T, T.max(m[i], part[i]))
                    for i, j in walk.each():
                        eu[i, j] = T.if_then_else(j < n, T.exp(zu[i, j] - bs[i]), 0.0)
                    T.reduce_sum(eu, part, dim=1)
                    for i in walk.each_row():  # each buffer read before it is written (no RAW)
                        f = T.exp(m[i] - bs[i])  # 0 from m = -inf
                        sc[i] = sc[i] * f + _compensation(s[i] * f, part[i])
                        s[i] = s[i] * f + part[i]
                        m[i] = mn[i]
                    pick(eu, zu, tu, part, zt, k, n)  # the target's logit, where this chunk holds it
                    if weighted:
                        pick(eu, wu, tu, part, wt, k, n)
                    if smoothing:
                        for i, j in walk.each():
                            wz = wu[j].astype("float32") * zu[i, j] if weighted else zu[i, j]
                            eu[i, j] = T.if_then_else(j < n, wz, 0.0)
                        T.reduce_sum(eu, part, dim=1)
                        for i in walk.each_row():
                            swc[i] = swc[i] + _compensation(swz[i], part[i])
                            swz[i] = swz[i] + part[i]
                        if weighted:
                            total(eu, wu, part, ws, n)
                for i in walk.each_row():
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
                    # the gradient's row terms (their passes are done): k in mn, a (1 - eps) w_t in wt, log s in s
                    w_mean = ws[i] / T.cast(C, "float32") if weighted else T.float32(1)
                    k_smooth = a * (1.0 - eps) * w_t + a * eps * w_mean if smoothing else a * w_t
                    mn[i] = (k_smooth + zterm(T, b * 2.0 * scale, m[i] + ls)) * ok[i]
                    wt[i] = a * (1.0 - eps) * w_t
                    s[i] = ls
                walk.move(((lu, LOSS), (zl, ZL), (lsu, LSE)))
                if fused:
                    loads = () if one_chunk else ((X, xu),) + vectors
                    gradients(loads, ((gu, G),), gu, xu, wu, tu, a, mn, m, s, wt, ok, C, cap, eps)

    return cross_entropy_fwd.with_attr("global_symbol", "cross_entropy_fwd_grad" if fused else "cross_entropy_fwd")


def build_backward(
    width: int, x_dtype: torch.dtype, t_dtype: torch.dtype, weighted: bool, smoothing: bool, capped: bool
):
    xt, tt = TL_DTYPE[x_dtype], INDEX[t_dtype]
    block_M = rows_per_block(width, 2 * x_dtype.itemsize + 4)
    N, C = T.dynamic("N"), T.dynamic("C")
    walk = Walk(width, block_M)
    pick, total, gradients = _passes(walk, xt, weighted, smoothing, capped)

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
            xu, eu, gu = walk.tiles(xt, "float32", xt)
            wu = T.alloc_shared((width,), xt)
            tu, part = walk.row_vectors(tt, "float32")
            du = T.alloc_shared((block_M,), "float32")  # dloss, dz_loss, lse
            dz, lu = walk.row_vectors("float32", "float32")
            wt = T.alloc_shared((block_M,), "float32")  # w_t, then a (1 - eps) w_t
            ws = T.alloc_shared((block_M,), "float32")  # W
            kp, ok = walk.row_vectors("float32", "float32")
            vectors = ((W, wu),) if weighted else ()
            for _ in walk.blocks(core, N, C, loads=((TG, tu), (DL, du), (DZ, dz), (LSE, lu)), index="bk"):
                for i in walk.each_row():
                    ok[i] = T.if_then_else(T.cast(tu[i], "int64") != ignore_index, 1.0, 0.0)
                    wt[i] = 0.0 if weighted else 1.0  # 1 without weights, else summed below
                    ws[i] = T.cast(C, "float32")
                if weighted:  # w_t picked out of its chunk, and W
                    for i in walk.each_row():
                        ws[i] = 0.0
                    for k, n in walk.chunks(vectors):
                        pick(eu, wu, tu, part, wt, k, n)
                        if smoothing:
                            total(eu, wu, part, ws, n)
                for i in walk.each_row():
                    k_row = du[i] * (1.0 - eps) * wt[i]
                    if smoothing:
                        k_row = k_row + du[i] * eps * (ws[i] / T.cast(C, "float32"))
                    kp[i] = (k_row + zterm(T, dz[i] * 2.0 * scale, lu[i])) * ok[i]
                    wt[i] = du[i] * (1.0 - eps) * wt[i]
                gradients(((X, xu),) + vectors, ((gu, DX),), gu, xu, wu, tu, du, kp, lu, None, wt, ok, C, cap, eps)

    return cross_entropy_bwd


lowered, forward, backward = cross_entropy_device.entries(
    build_forward, build_backward, bucket, RUNNER, "an Ascend 950 NPU"
)
