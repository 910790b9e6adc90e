"""swiglu forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtype, direction,
casting), serving every shape.

The gated activations are elementwise: gate and up (stride 1 in their last dimension) are viewed as (M, F) rows
(``rows_of``: a copy only where no such view exists; 0-d as (1, 1)) and walked 16 lanes at a time by ``row_map``,
math in fp32. silu(v) = v / (1 + E) with E = exp(-v) (torch's vectorized form); silu'(v) = s * (1 + v * (1 - s))
with s = 1 / (1 + E) and 1 - s = E / (1 + E), quotients of the same packed exp (``tp_exp_n``), so neither cancels at
large |v| and the backward takes one exp per element (``PRELUDE``). ``casting="eager"`` rounds the activation to
the storage dtype before the product (and dup's factor), as transformers' eager ``act_fn(gate) * up`` does.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from ... import outputs
from .rowwise import VEC, Io, M, rounded, row_map
from .runtime import CACHE, check_shape, threads_for

PRELUDE = r"""
// silu(v) = v / (1 + E), E = exp(-v): the forward's and the backward's, one expression, so the backward's exp is
// the same as silu'(v)'s below once both are inlined (the compiler takes it once per element).
extern "C" inline tp_v16 tp_silu(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = v.v[i] / (1.0f + tp_exp_n(0.0f - v.v[i]));
  return r;
}
// silu'(v) = s (1 + v (1 - s)), s = 1 / (1 + E), 1 - s = E / (1 + E): one exp where sigmoid(v) and sigmoid(-v)
// took two (fp32 backward 0.69x, bf16 0.87x the time, as accurate or more away from silu''s zero at v = -1.28).
// Where E overflows (v < -88.7) s is 0 and 1 - s is 1 (E / (1 + E) would be inf / inf).
extern "C" inline tp_v16 tp_silu_grad(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf x = v.v[i], e = tp_exp_n(0.0f - x);
    tp_nf s = 1.0f / (1.0f + e), q = e < __builtin_inff() ? e / (1.0f + e) : 1.0f;
    r.v[i] = s * (1.0f + x * q);
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
