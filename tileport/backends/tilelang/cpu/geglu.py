"""geglu forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtype, direction,
approximate, casting), serving every shape; the rows, the walk and the eager rounding are swiglu's
(``swiglu.py``).

"tanh": gelu(v) = v * s with s = sigmoid(2u), u = sqrt(2/pi) * (v + 0.044715 v^3) (the same as v / 2 * (1 +
tanh u), without its cancellation for negative v; for v >= 0 as v - v * (1 - s), ``tp_gelu_tanh``), gelu'(v) = s + 2 v s
(1 - s) u', 1 - s = sigmoid(-2u) from
its own packed exp. "none": Phi(v) = erfc(-v / sqrt 2) / 2 and gelu'(v) = Phi(v) + v phi(v) per lane in fp64
(libm's erfc and exp, ``PRELUDE``: the erfc form does not cancel, and fp64 keeps the exp's argument -v^2 / 2
exact enough), rounded to fp32; gelu = v * Phi(v) in fp32.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .rowwise import VEC, Io, M, rounded, row_map, splat
from .swiglu import run_backward, run_forward, sigmoid

PRELUDE = r"""
#include <math.h>
// Phi(v) = erfc(-v / sqrt 2) / 2 and gelu'(v) = Phi(v) + v phi(v) of each lane, in fp64, rounded to fp32.
extern "C" inline tp_v16 tp_gelu_cdf(tp_v16 x) {
  float in[16], out[16];
  __builtin_memcpy(in, &x, sizeof in);
  for (int i = 0; i < 16; ++i) out[i] = (float)(0.5 * erfc((double)in[i] * -0.70710678118654752440));
  tp_v16 r;
  __builtin_memcpy(&r, out, sizeof out);
  return r;
}
extern "C" inline tp_v16 tp_gelu_grad(tp_v16 x) {
  float in[16], out[16];
  __builtin_memcpy(in, &x, sizeof in);
  for (int i = 0; i < 16; ++i) {
    double v = in[i];
    out[i] = (float)(0.5 * erfc(v * -0.70710678118654752440) + v * exp(-0.5 * v * v) * 0.39894228040143267794);
  }
  tp_v16 r;
  __builtin_memcpy(&r, out, sizeof out);
  return r;
}
// "tanh": 2u = 2 sqrt(2/pi) (v + 0.044715 v^3) and (2u)' = 2 sqrt(2/pi) (1 + 3 * 0.044715 v^2) of each lane in fp32,
// the constants to every bit here: TVM's C codegen prints a float literal to 7 digits (2 sqrt(2/pi) as
// 1.595769e+00f, 7.6e-8 off), an error exp(-2u) amplifies by |2u| (L0 found gelu tanh 1.5x torch's fp32 error).
extern "C" inline tp_v16 tp_gelu_twice_u(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = 1.5957691216057307117f * (v.v[i] + 0.044715f * v.v[i] * v.v[i] * v.v[i]);
  return r;
}
// "tanh": gelu = v sigmoid(2u) as t = v e / (1 + e), e = exp(-|2u|), for v <= 0 and v - t for v > 0: the small
// term carries exp's error, so a positive gate's gelu is within about half an ulp (v * sigmoid(2u), rounded twice,
// had 1.2x the error of torch's 0.5 v (1 + tanh u) there). v = +inf gives inf and -inf nan, as v sigmoid(2u).
extern "C" inline tp_v16 tp_gelu_tanh(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf x = v.v[i];
    tp_nf w = 1.5957691216057307117f * (x + 0.044715f * x * x * x);
    tp_nf e = tp_exp_n(w < 0 ? w : -w);
    tp_nf t = x * (e / (1.0f + e));
    r.v[i] = x <= 0 ? t : (e > 0 ? x - t : x);  // <=: -0 keeps its sign
  }
  return r;
}
extern "C" inline tp_v16 tp_gelu_twice_du(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) r.v[i] = 1.5957691216057307117f * (1.0f + 0.134145f * v.v[i] * v.v[i]);
  return r;
}
"""


def _twice_u(v):
    """2u = 2 sqrt(2/pi) (v + 0.044715 v^3) of 16 lanes (in C: its constant to every bit, ``PRELUDE``)."""
    return T.call_extern(VEC, "tp_gelu_twice_u", v)


def gelu(approximate: str):
    """gelu(v) of 16 lanes."""
    if approximate == "none":
        return lambda v: v * T.call_extern(VEC, "tp_gelu_cdf", v)
    return lambda v: T.call_extern(VEC, "tp_gelu_tanh", v)


def gelu_grad(approximate: str):
    """gelu'(v) of 16 lanes."""
    if approximate == "none":
        return lambda v: T.call_extern(VEC, "tp_gelu_grad", v)

    def grad(v):
        # the second term v s (1 - s) (2u)' is exactly 0 in fp32 for |v| >= 20 (s (1 - s) < e^-600): v clamped
        # there, or at |v| ~ 1e19 (1 - s) = 0 times (2u)' = inf gives nan
        zero, lim = splat(T.float32(0.0)), splat(T.float32(-20.0))
        w = T.call_extern(VEC, "tp_max", zero - T.call_extern(VEC, "tp_max", zero - v, lim), lim)  # v in [-20, 20]
        w2 = _twice_u(w)
        s, t = sigmoid(_twice_u(v)), sigmoid(w2) * sigmoid(splat(T.float32(0.0)) - w2)
        du2 = T.call_extern(VEC, "tp_gelu_twice_du", w)
        return s + w * t * du2

    return grad


def build_forward(dtype: torch.dtype, approximate: str, casting: str):
    """y = gelu(gate) * up for (M, F) rows of ``dtype``; eager: gelu rounded to ``dtype`` first."""
    X = Io(dtype, subnormals=True)  # bf16 subnormals kept: eager 16-bit bit for bit with torch
    act = gelu(approximate)
    a = (lambda g: rounded(X, act(g))) if casting == "eager" else act

    @T.prim_func
    def geglu_fwd(gate: X.rows, up: X.rows, y: X.rows):
        with T.Kernel(M, prelude=PRELUDE) as row:
            row_map(lambda g, u: a(g) * u, [(X, gate), (X, up)], [(X, y)], row)

    return geglu_fwd


def build_backward(dtype: torch.dtype, approximate: str, casting: str):
    """dgate = dy * up * gelu'(gate), dup = dy * gelu(gate) (eager: rounded) for (M, F) rows of ``dtype``."""
    X = Io(dtype, subnormals=True)  # bf16 subnormals kept: eager 16-bit bit for bit with torch
    act, act_grad = gelu(approximate), gelu_grad(approximate)
    a = (lambda g: rounded(X, act(g))) if casting == "eager" else act

    @T.prim_func
    def geglu_bwd(dy: X.rows, gate: X.rows, up: X.rows, dgate: X.rows, dup: X.rows):
        with T.Kernel(M, prelude=PRELUDE) as row:
            row_map(
                lambda d, g, u: [d * u * act_grad(g), d * a(g)],
                [(X, dy), (X, gate), (X, up)],
                [(X, dgate), (X, dup)],
                row,
            )

    return geglu_bwd


PACKED_CHECKS = ()  # elementwise: no row sums, hence no packed FMA to look for


def forward(gate, up, approximate: str, casting: str, out=None):
    """y = gelu(gate, approximate) * up (``tileport.ops.geglu``'s contract)."""
    return run_forward("geglu_fwd", build_forward, gate, up, approximate, casting, out=out)


def backward(dy, gate, up, approximate: str, casting: str):
    """(dgate, dup) = (dy * up * gelu'(gate), dy * gelu(gate))."""
    return run_backward("geglu_bwd", build_backward, dy, gate, up, approximate, casting)
