"""gated_rms_norm forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtypes,
weighted, activation, norm_before_gate), serving every M and D.

Forward, per row: u = x (norm before gate) or x * act(gate); rstd = rsqrt(sum(u^2) / D + eps) in fp64, rounded
once (rms_norm's ``inv_rms`` order); with the gate before the norm, the saved rstd is of u formed in fp64
(``gated_square``) and y is scaled by the fp32 u's; y = u * rstd * w (* act(gate)) in fp32, rounded once.
Backward, per row, in rms_norm's cancellation-free form (``eps_stats``, ``by_form``): with g the gradient
reaching n = u * rstd, du = rstd * (D * eps * g + sum(u^2) * g - u * sum(g * u)) / (sum(u^2) + D * eps) (in
fp64 where u and g are nearly parallel, else as rstd * (g - u * k) with k from the fp64 sums), rounded once; dx = du (or
du * act(gate)), dgate = dy * w * n * act'(gate) (or du * x * act'(gate)); dweight's
term dy * n * act(gate) (or dy * n) rounded once (``dweight_term``) into the block's fp32 partial.
act: silu(v) = v / (1 + exp(-v)), sigmoid(v) = 1 / (1 + exp(-v)), exp packed (``tp_exp``).
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .norm_stats import STATS, by_form, dweight_term, eps_stats, rstd_of, rstd_pair
from .rowwise import F32, VEC, Dot64, Io, M, partial, per_row, row_map, row_sums64, splat, square
from .runtime import CACHE, check_shape, threads_for


def _one():
    return splat(T.float32(1.0))


def _sigmoid(v):
    return _one() / (_one() + T.call_extern(VEC, "tp_exp", splat(T.float32(0.0)) - v))


def act(activation: str, v):
    """act(v) of 16 lanes."""
    return (
        v / (_one() + T.call_extern(VEC, "tp_exp", splat(T.float32(0.0)) - v)) if activation == "silu" else _sigmoid(v)
    )


def gated_square(activation: str):
    """The ``row_sums64`` product u * u of u = x * act(gate), u formed in fp64 from the fp32 exp
    (``tp_dot64_gated_sq``): the statistic of the gate-before-norm form."""

    def product(xv, zv, *rest):
        e = T.call_extern(VEC, "tp_exp", splat(T.float32(0.0)) - zv)
        return Dot64("tp_dot64_gated_sq", (xv, zv if activation == "silu" else _one(), e))

    return product


def act_grad(activation: str, v):
    """act'(v): silu's s * (1 + v * (1 - s)), sigmoid's s * (1 - s), s = sigmoid(v)."""
    s = _sigmoid(v)
    return s * (_one() + v * (_one() - s)) if activation == "silu" else s * (_one() - s)


def build_forward(x: torch.dtype, g: torch.dtype, w, y: torch.dtype, activation: str, norm_before_gate: bool):
    """The forward for x, gate, weight (None: no scale) and y dtypes."""
    X, Z, Y = Io(x), Io(g), Io(y)
    W = Io(w) if w is not None else None
    a = lambda zv: act(activation, zv)  # noqa: E731
    u = (lambda xv, zv: xv) if norm_before_gate else (lambda xv, zv: xv * a(zv))  # noqa: E731

    def value(r, xv, zv, wv=None):
        out = u(xv, zv) * splat(r)
        out = out if wv is None else out * wv
        return out * a(zv) if norm_before_gate else out

    def stats(r, eps, x, gate, row):
        """r[0] = the rstd y is scaled by, r[1] = the rstd saved."""
        if norm_before_gate:  # the gate is not read for the statistic; exact squares (not inv_rms's fp32 blocks:
            # with them L0 retested one more check, a single row of 17264 whose dgate shares the rstd's rounding)
            T.buffer_store(r, rstd_of(row_sums64([square], [(X, x)], row)[0], eps), [0])
            T.buffer_store(r, T.BufferLoad(r, [0]), [1])
        else:  # y takes the rstd of the fp32 u it scales (at D = 1, u / |u|: u's rounding cancels, where the fp64
            # u's rstd left it in y: 49 fp32 y failures at L1); the saved rstd is of u formed in fp64
            ss32, ss64 = row_sums64(
                [lambda xv, zv: square(u(xv, zv)), gated_square(activation)], [(X, x), (Z, gate)], row
            )
            T.buffer_store(r, rstd_of(ss32, eps), [0])
            T.buffer_store(r, rstd_of(ss64, eps), [1])

    if W is None:

        @T.prim_func
        def gated_rms_norm_fwd(x: X.rows, gate: Z.rows, y: Y.rows, rstd: per_row(), eps: T.float32):
            with T.Kernel(M) as row:
                r = T.alloc_local((2,), T.float32)
                stats(r, eps, x, gate, row)
                rstd[row] = r[1]
                row_map(lambda xv, zv: value(r[0], xv, zv), [(X, x), (Z, gate)], [(Y, y)], row)

        return gated_rms_norm_fwd

    @T.prim_func
    def gated_rms_norm_fwd(x: X.rows, gate: Z.rows, weight: W.vector, y: Y.rows, rstd: per_row(), eps: T.float32):
        with T.Kernel(M) as row:
            r = T.alloc_local((2,), T.float32)
            stats(r, eps, x, gate, row)
            rstd[row] = r[1]
            row_map(lambda xv, zv, wv: value(r[0], xv, zv, wv), [(X, x), (Z, gate), (W, weight)], [(Y, y)], row)

    return gated_rms_norm_fwd


def build_backward(x: torch.dtype, g: torch.dtype, dy: torch.dtype, w, activation: str, norm_before_gate: bool):
    """dx, dgate (and, with a weight, dweight's fp32 sum over rows) for x, gate, dy and weight dtypes."""
    X, Z, G = Io(x), Io(g), Io(dy)
    a = lambda zv: act(activation, zv)  # noqa: E731
    da = lambda zv: act_grad(activation, zv)  # noqa: E731
    u = (lambda xv, zv: xv) if norm_before_gate else (lambda xv, zv: xv * a(zv))  # noqa: E731
    gw = (lambda gv, wv: gv) if w is None else (lambda gv, wv: gv * wv)  # noqa: E731
    # g reaching n, from the loaded values after x: (gate, dy[, weight])
    g_of = (lambda zv, gv, wv=None: gw(gv, wv) * a(zv)) if norm_before_gate else (lambda zv, gv, wv=None: gw(gv, wv))

    def grads(r, resid, xv, zv, gv, wv=None):
        du = resid(g_of(zv, gv, wv), u(xv, zv), X)
        n = u(xv, zv) * splat(r[0])
        if norm_before_gate:
            return [du, gw(gv, wv) * n * da(zv), dweight_term(gv * a(zv), xv, r[0], r[1])]
        return [du * a(zv), du * xv * da(zv), dweight_term(gv, u(xv, zv), r[0], r[1])]

    def stats(c, r, eps, rstd, rows, row):
        # u in fp32 here, sum(u^2) included: the form's cancellation needs ss and sum(g * u) of one u (the forward's
        # fp64 u gives an rstd the recomputed one may not round to; the given rstd is then used as given: near=None,
        # as the forward's rstd is the correctly rounded one of its u)
        eps_stats(c, eps, rstd, rows, row, g_of, u_of=lambda xv, zv, *rest: u(xv, zv), near=None)
        rstd_pair(r, c)

    if w is None:

        @T.prim_func
        def gated_rms_norm_bwd(
            x: X.rows, gate: Z.rows, dy: G.rows, rstd: per_row(), dx: X.rows, dgate: Z.rows, eps: T.float32
        ):
            with T.Kernel(M) as row:
                c = T.alloc_local((STATS,), "float64")
                r = T.alloc_local((2,), T.float32)
                rows = [(X, x), (Z, gate), (G, dy)]
                stats(c, r, eps, rstd[row], rows, row)
                by_form(
                    c,
                    lambda resid: row_map(
                        lambda xv, zv, gv: grads(r, resid, xv, zv, gv)[:2], rows, [(X, dx), (Z, dgate)], row
                    ),
                )

        return gated_rms_norm_bwd

    W = Io(w)

    @T.prim_func
    def gated_rms_norm_bwd(
        x: X.rows,
        gate: Z.rows,
        dy: G.rows,
        weight: W.vector,
        rstd: per_row(),
        dx: X.rows,
        dgate: Z.rows,
        dweight: partial(),
        eps: T.float32,
    ):
        with T.Kernel(M) as row:
            c = T.alloc_local((STATS,), "float64")
            r = T.alloc_local((2,), T.float32)
            rows = [(X, x), (Z, gate), (G, dy), (W, weight)]
            stats(c, r, eps, rstd[row], rows, row)
            outs = [(X, dx), (Z, dgate), (F32, dweight)]
            by_form(c, lambda resid: row_map(lambda xv, zv, gv, wv: grads(r, resid, xv, zv, gv, wv), rows, outs, row))

    return gated_rms_norm_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = (
    ("gated_rms_norm_fwd", lambda dt: build_forward(dt, dt, dt, dt, "silu", True)),  # packed exp in the gate
    ("gated_rms_norm_fwd", lambda dt: build_forward(dt, dt, dt, dt, "sigmoid", False)),  # u = x * act(gate) squared
    ("gated_rms_norm_bwd", lambda dt: build_backward(dt, dt, dt, dt, "silu", True)),  # fp64 du, dgate, the partial
    ("gated_rms_norm_bwd", lambda dt: build_backward(dt, dt, dt, dt, "silu", False)),
)


def forward(x, gate, weight, eps: float, activation: str, norm_before_gate: bool, output_dtype: torch.dtype, out=None):
    """(y, rstd) for non-empty 2-D ``x`` and ``gate`` (M, D) with unit-stride rows; ``weight`` (D,) or None."""
    M_, D_ = x.shape
    check_shape(M_, D_)
    y, rstd = (
        (outputs.empty((M_, D_), output_dtype, x.device), outputs.empty((M_,), torch.float32, x.device))
        if out is None
        else out
    )
    wdt = None if weight is None else weight.dtype
    kernel = CACHE.kernel(
        "gated_rms_norm_fwd", build_forward, x.dtype, gate.dtype, wdt, y.dtype, activation, norm_before_gate
    )
    args = dict(x=x, gate=gate, y=y, rstd=rstd, eps=eps)
    if weight is not None:
        args["weight"] = weight.contiguous()
    kernel(threads_for(M_ * D_), **args)
    return y, rstd


def backward(x, gate, rstd, dy, weight, eps: float, activation: str, norm_before_gate: bool):
    """(dx in x's dtype, dgate in the gate's, dweight fp32 (D,) or None) for non-empty 2-D rows and ``rstd`` (M,)."""
    M_, D_ = x.shape
    check_shape(M_, D_)
    dx, dgate = outputs.empty((M_, D_), x.dtype, x.device), outputs.empty((M_, D_), gate.dtype, x.device)
    args = dict(x=x, gate=gate, dy=dy, rstd=rstd.to(torch.float32).contiguous(), dx=dx, dgate=dgate, eps=eps)
    wdt = None if weight is None else weight.dtype
    kernel = CACHE.kernel(
        "gated_rms_norm_bwd", build_backward, x.dtype, gate.dtype, dy.dtype, wdt, activation, norm_before_gate
    )
    if weight is None:
        kernel(threads_for(M_ * D_), **args)
        return dx, dgate, None
    dweight = outputs.empty((D_,), torch.float32, x.device)
    kernel(threads_for(M_ * D_), weight=weight.contiguous(), dweight=dweight, **args)
    return dx, dgate, dweight
