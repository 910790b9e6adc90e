"""swiglu forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtype, direction,
casting), serving every shape.

The gated activations are elementwise: gate and up (stride 1 in their last dimension) are viewed as (M, F) rows
(``rows_of``: a copy only where no such view exists; 0-d as (1, 1)) and walked 16 lanes at a time by ``row_map``,
math in fp32. silu(v) = v / (1 + exp(-v)) (torch's vectorized form); the backward takes silu and silu'(v) =
s * (1 + v * (1 - s)) from one packed exp per element, in forms whose only cancellation, at the zero of silu', is
kept to the exp's error (``PRELUDE``). ``casting="eager"`` rounds the activation to the storage dtype before the
product (and dup's factor), as transformers' eager ``act_fn(gate) * up`` does.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .rowwise import VEC, Io, M, rounded, row_map
from .runtime import CACHE, check_shape, threads_for

PRELUDE = r"""
// silu(v) = v / (1 + exp(-v)), torch's form: the forward's (eager 16-bit is bit for bit with torch's through it).
TP_HELPER tp_v16 tp_silu(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = v.v[i] / (1.0f + tp_exp_n(0.0f - v.v[i]));
  return r;
}
// silu'(v) = s (1 + v (1 - s)), s = 1 / d, d = 1 + E, E = exp(-v): the forward's E and d (the compiler takes the
// exp once per element for both, dup's silu being the forward's). 1 - s is t = E / d (no cancellation for large v)
// from v = -1 up; below v = -2 it is 1 - s, or 1 where s < 2^-24 (as 1 / (1 + exp(v)) rounds: the correctly
// rounded 1 - s left a larger error there, where s carries 1 + E's rounding, 1.02x torch's at v = -17). Between,
// at the zero of silu' (v = -1.28), 1 + v (1 - s) cancels: written s + t (1 + v), with 1 + v exact and the fma's
// product too, only E's error is left in the sum (half torch's mean relative error there; 1 - s as a quotient
// of its own exp had 1.5x torch's). Where E overflows (v < -88.7) s is 0 and so is silu' (nan at v = -inf, as
// torch's).
TP_HELPER tp_v16 tp_silu_grad(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf x = v.v[i], e = tp_exp_n(0.0f - x), d = 1.0f + e, s = 1.0f / d, t = e / d;
    tp_nf q = x < -2.0f ? (s < 0x1p-24f ? 1.0f : 1.0f - s) : t;
    tp_nf near = (x < -1.0f) & (x >= -2.0f) ? s + t * (1.0f + x) : 1.0f + x * q;
    r.v[i] = e == __builtin_inff() ? 0.0f * (1.0f + x) : s * near;
  }
  return r;
}
"""


def silu(v):
    return T.call_extern(VEC, "tp_silu", v)


def silu_grad(v):
    return T.call_extern(VEC, "tp_silu_grad", v)


def build_forward(dtype: torch.dtype, casting: str, act=silu):
    """y = act(gate) * up for (M, F) rows of ``dtype``; eager: act rounded to ``dtype`` first."""
    X = Io(dtype, subnormals=True)  # bf16 subnormals kept: eager 16-bit bit for bit with torch
    a = (lambda g: rounded(X, act(g))) if casting == "eager" else act

    @T.prim_func
    def gated_fwd(gate: X.rows, up: X.rows, y: X.rows):
        with T.Kernel(M, prelude=PRELUDE) as row:
            row_map(lambda g, u: a(g) * u, [(X, gate), (X, up)], [(X, y)], row)

    return gated_fwd


def build_backward(dtype: torch.dtype, casting: str, act=silu, act_grad=silu_grad):
    """dgate = dy * up * act'(gate), dup = dy * act(gate) (eager: act rounded) for (M, F) rows of ``dtype``."""
    X = Io(dtype, subnormals=True)  # bf16 subnormals kept: eager 16-bit bit for bit with torch
    a = (lambda g: rounded(X, act(g))) if casting == "eager" else act

    @T.prim_func
    def gated_bwd(dy: X.rows, gate: X.rows, up: X.rows, dgate: X.rows, dup: X.rows):
        with T.Kernel(M, prelude=PRELUDE) as row:
            row_map(
                lambda d, g, u: [d * u * act_grad(g), d * a(g)],
                [(X, dy), (X, gate), (X, up)],
                [(X, dgate), (X, dup)],
                row,
            )

    return gated_bwd


# The kernels tests/backends/test_cpu_simd.py checks for packed SIMD in the disassembly: (kernel, builder of a dtype).
PACKED_CHECKS = ()  # elementwise: no row sums, hence no packed FMA to look for


def rows_of(x: torch.Tensor) -> torch.Tensor:
    """x as (M, F) rows with stride 1 in F (a view where one exists, else a contiguous copy; 0-d as (1, 1))."""
    if x.dim() == 0:
        return x.reshape(1, 1)
    if x.stride(-1) != 1 and x.shape[-1] > 1:
        x = x.contiguous()
    return x.reshape(-1, x.shape[-1])


def run_forward(name: str, builder, gate, up, *options, out=None):
    """y (contiguous, gate's shape) from the kernel ``builder(dtype, *options)`` over the rows of gate and up;
    ``out``: y preallocated and contiguous, written into (bench's kernel-only provider)."""
    g, u = rows_of(gate), rows_of(up)
    m, f = g.shape
    check_shape(m, f)
    y = outputs.empty((m, f), gate.dtype, gate.device) if out is None else out.view(m, f)
    CACHE.kernel(name, builder, gate.dtype, *options)(threads_for(m * f), gate=g, up=u, y=y)
    return y.view(gate.shape) if out is None else out


def run_backward(name: str, builder, dy, gate, up, *options):
    """(dgate, dup), contiguous in gate's shape, from the kernel ``builder(dtype, *options)``."""
    d, g, u = rows_of(dy), rows_of(gate), rows_of(up)
    m, f = g.shape
    check_shape(m, f)
    dgate, dup = (outputs.empty((m, f), gate.dtype, gate.device) for _ in range(2))
    kernel = CACHE.kernel(name, builder, gate.dtype, *options)
    kernel(threads_for(m * f), dy=d, gate=g, up=u, dgate=dgate, dup=dup)
    return dgate.view(gate.shape), dup.view(gate.shape)


def forward(gate, up, casting: str, out=None):
    """y = silu(gate) * up (``tileport.ops.swiglu``'s contract)."""
    return run_forward("swiglu_fwd", build_forward, gate, up, casting, out=out)


def backward(dy, gate, up, casting: str):
    """(dgate, dup) = (dy * up * silu'(gate), dy * silu(gate))."""
    return run_backward("swiglu_bwd", build_backward, dy, gate, up, casting)
