"""l2norm forward and backward as TileLang CPU kernels (C target), one compiled kernel per (D, dtypes).

Forward, per row: rstd = rsqrt(sum(x^2) + eps) (exact: the C target prints 1/sqrtf), y = x * rstd.
With ``rsqrt_steps=k`` the exact rsqrt is replaced by a model of an approximate hardware rsqrt
(``tp_rsqrt_approx`` in bridges.h: 8 fraction bits, relative error below 3.9e-3) refined by k Newton-Raphson
steps, as Ascend A2/A3 ports do; it exists to measure that practice, the default stays exact.
Backward, per row: y = x * rstd recomputed in fp32 (never a saved fp16/bf16 y), s = sum(dy * y),
dx = (dy - s * y) * rstd. Two passes over the row; the row stays in L1 between them.
Caller-provided outputs (``out=``) of STREAM_BYTES or more are written with streaming stores (a separate
kernel, keyed "stream"): measured at [4096, 4096], 1 thread, kernel-only: fp16 5.7 -> 3.1 ms, fp32
11.6 -> 7.4 ms. Fresh outputs keep plain stores: their first touch page-faults and the kernel zeroes each
page into the cache, where a plain store then hits and a streaming store would write around it (measured:
bf16 [4096, 4096] with allocation 10.6 -> 14.2 ms with streaming).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .runtime import (
    ACC,
    CACHE,
    LANES,
    STORAGE,
    Bridge,
    Param,
    RowKernelSpec,
    blocked_row_sum,
    check_rows,
    lanes,
    storage_view,
    threads_for,
)


STREAM_BYTES = 32 << 20  # outputs at least this large are written with streaming stores (no read-for-ownership)


def build_forward(D: int, x_dtype: torch.dtype, y_dtype: torch.dtype, rsqrt_steps=None, streaming=False):
    bx, by = Bridge(x_dtype), Bridge(y_dtype, streaming)
    nv, tail = divmod(D, LANES)
    spec = RowKernelSpec(
        "l2norm_fwd",
        D,
        matrices=(Param("x", STORAGE[x_dtype].ctype), Param("y", STORAGE[y_dtype].ctype)),
        vectors=(Param("rstd", "float"),),
        scalars=(Param("eps", "float"),),
    )

    @T.macro
    def square8(a, b, row, col, acc, k, va, vb, out):
        bx.load8(a, row, col, va)
        for i in lanes(LANES):
            acc[k + i] += va[i] * va[i]

    def square1(a, b, row, col, out):
        return bx.load1(a, row, col) * bx.load1(a, row, col)

    sum_squares = blocked_row_sum(D, square8, square1)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_fwd(
        x: T.Tensor((M, D), bx.tl),
        y: T.Tensor((M, D), by.tl),
        rstd: T.Tensor((M,), T.float32),
        eps: T.float32,
    ):
        with T.Kernel(M, prelude=spec.prelude()) as row:
            va = T.alloc_local((LANES,), T.float32)
            vb = T.alloc_local((LANES,), T.float32)
            acc = T.alloc_local((3 * ACC,), T.float32)
            r = T.alloc_local((2,), T.float32)
            sum_squares(x, x, row, va, vb, acc, r)
            r[0] = r[0] + eps
            if rsqrt_steps is None:
                r[0] = T.rsqrt(r[0])
            else:  # r[1] keeps s; the approximate model, then y <- y * (1.5 - 0.5 * s * y^2) per step
                r[1] = r[0]
                r[0] = T.call_extern("float32", "tp_rsqrt_approx", r[1])
                for _ in T.unroll(rsqrt_steps):
                    r[0] = r[0] * (T.float32(1.5) - T.float32(0.5) * r[1] * r[0] * r[0])
            rstd[row] = r[0]
            for j in T.serial(nv):
                bx.load8(x, row, j * LANES, va)
                for i in lanes(LANES):
                    va[i] = va[i] * r[0]
                by.store8(va, y, row, j * LANES)
            for t in T.serial(tail):
                y[row, nv * LANES + t] = by.store1_value(bx.load1(x, row, nv * LANES + t) * r[0])

    return l2norm_fwd, spec


def build_backward(D: int, x_dtype: torch.dtype, dy_dtype: torch.dtype):
    bx, bg = Bridge(x_dtype), Bridge(dy_dtype)
    nv, tail = divmod(D, LANES)
    spec = RowKernelSpec(
        "l2norm_bwd",
        D,
        matrices=(
            Param("x", STORAGE[x_dtype].ctype),
            Param("dy", STORAGE[dy_dtype].ctype),
            Param("dx", STORAGE[x_dtype].ctype),
        ),
        vectors=(Param("rstd", "float"),),
    )

    # sum(dy * y) with y = x * rstd rounded to fp32 first, exactly as the composite does: the product order
    # matters where dx = (dy - s * y) * rstd cancels to near zero (out[1] holds rstd).
    @T.macro
    def dot8(a, b, row, col, acc, k, va, vb, out):
        bx.load8(a, row, col, va)
        bg.load8(b, row, col, vb)
        for i in lanes(LANES):
            acc[k + i] += (va[i] * out[1]) * vb[i]

    def dot1(a, b, row, col, out):
        return (bx.load1(a, row, col) * out[1]) * bg.load1(b, row, col)

    sum_dy_y = blocked_row_sum(D, dot8, dot1)
    M = T.dynamic("M")

    @T.prim_func
    def l2norm_bwd(
        x: T.Tensor((M, D), bx.tl),
        dy: T.Tensor((M, D), bg.tl),
        dx: T.Tensor((M, D), bx.tl),
        rstd: T.Tensor((M,), T.float32),
    ):
        with T.Kernel(M, prelude=spec.prelude()) as row:
            va = T.alloc_local((LANES,), T.float32)
            vb = T.alloc_local((LANES,), T.float32)
            acc = T.alloc_local((3 * ACC,), T.float32)
            s = T.alloc_local((2,), T.float32)  # s[0] = sum(dy * y), s[1] = rstd
            s[1] = rstd[row]
            sum_dy_y(x, dy, row, va, vb, acc, s)
            for j in T.serial(nv):
                bx.load8(x, row, j * LANES, va)
                bg.load8(dy, row, j * LANES, vb)
                for i in lanes(LANES):
                    va[i] = (vb[i] - s[0] * (va[i] * s[1])) * s[1]
                bx.store8(va, dx, row, j * LANES)
            for t in T.serial(tail):
                dx[row, nv * LANES + t] = bx.store1_value(
                    (bg.load1(dy, row, nv * LANES + t) - s[0] * (bx.load1(x, row, nv * LANES + t) * s[1])) * s[1]
                )

    return l2norm_bwd, spec


def _row_stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def forward(
    x: torch.Tensor, eps: float, output_dtype: torch.dtype, out=None, rsqrt_steps=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) for a non-empty 2-D ``x`` of shape (M, D) whose rows are unit-stride (any row stride).

    ``out``: contiguous (y, rstd) to write into. ``rsqrt_steps``: None for the exact rsqrt, k >= 0 for the
    approximate model plus k Newton-Raphson steps.
    """
    M, D = x.shape
    check_rows(M)
    fresh = out is None
    if fresh:
        y, rstd = torch.empty((M, D), dtype=output_dtype), torch.empty((M,), dtype=torch.float32)
    else:
        y, rstd = out
    launch_forward(x, y, rstd, eps, rsqrt_steps, streaming=not fresh and y.numel() * y.element_size() >= STREAM_BYTES)
    return y, rstd


def launch_forward(
    x: torch.Tensor, y: torch.Tensor, rstd: torch.Tensor, eps: float, rsqrt_steps=None, streaming: bool = False
) -> None:
    """Run the forward kernel into preallocated ``y`` (contiguous, (M, D), D > 0) and ``rstd`` (M,)."""
    M, D = x.shape
    key = (D, x.dtype, y.dtype) + (("nr", rsqrt_steps) if rsqrt_steps is not None else ()) + (("stream",) if streaming else ())
    kernel = CACHE.get("l2norm_fwd", key, lambda: build_forward(D, x.dtype, y.dtype, rsqrt_steps, streaming))
    kernel(
        storage_view(x).data_ptr(), _row_stride(x),
        storage_view(y).data_ptr(), D,
        rstd.data_ptr(), M, eps, threads_for(M * D),
    )  # fmt: skip


def backward(x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx (x's dtype) for non-empty 2-D ``x`` and ``dy`` (M, D) with unit-stride rows and ``rstd`` (M,)."""
    M, D = x.shape
    check_rows(M)
    dx = torch.empty((M, D), dtype=x.dtype)
    rstd = rstd.to(torch.float32).contiguous()
    kernel = CACHE.get("l2norm_bwd", (D, x.dtype, dy.dtype), lambda: build_backward(D, x.dtype, dy.dtype))
    kernel(
        storage_view(x).data_ptr(), _row_stride(x),
        storage_view(dy).data_ptr(), _row_stride(dy),
        storage_view(dx).data_ptr(), D,
        rstd.data_ptr(), M, threads_for(M * D),
    )  # fmt: skip
    return dx
