"""geglu forward and backward as TileLang CPU kernels (C target): one compiled kernel per (dtype, direction,
approximate, casting), serving every shape; the rows, the walk and the eager rounding are swiglu's
(``swiglu.py``).

"tanh": gelu(v) = v * s with s = sigmoid(2u), u = sqrt(2/pi) * (v + 0.044715 v^3) (the same as v / 2 * (1 +
tanh u), without its cancellation for negative v; for v >= 0 as v - v * (1 - s), ``tp_gelu_tanh``), gelu'(v) = s +
v s (1 - s) (2u)' with s and 1 - s quotients of the gelu's own exp(-|2u|) (``tp_gelu_tanh_grad``: one exp per
element in the backward). "none": Phi(v) = erfc(-v / sqrt 2) / 2 and gelu'(v) = Phi(v) + v phi(v) per lane in fp64
(libm's erfc and exp, ``PRELUDE``: the erfc form does not cancel, and fp64 keeps the exp's argument -v^2 / 2
exact enough), rounded to fp32; gelu = v * Phi(v) in fp32.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.

import tilelang.cpu.language as T
import torch

from .rowwise import VEC, Io, M, rounded, row_map
from .swiglu import run_backward, run_forward

PRELUDE = r"""
#include <math.h>
// Phi(v) = erfc(-v / sqrt 2) / 2 and gelu'(v) = Phi(v) + v phi(v) of each lane, in fp64, rounded to fp32.
TP_HELPER tp_v16 tp_gelu_cdf(tp_v16 x) {
  float in[16], out[16];
  __builtin_memcpy(in, &x, sizeof in);
  for (int i = 0; i < 16; ++i) out[i] = (float)(0.5 * erfc((double)in[i] * -0.70710678118654752440));
  tp_v16 r;
  __builtin_memcpy(&r, out, sizeof out);
  return r;
}
TP_HELPER tp_v16 tp_gelu_grad(tp_v16 x) {
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
// "tanh": 2u = 2 sqrt(2/pi) (v + 0.044715 v^3) and (2u)' = 2 sqrt(2/pi) (1 + 3 * 0.044715 v^2) in fp32 are written
// here, the constants to every bit: TVM's C codegen prints a float literal to 7 digits (2 sqrt(2/pi) as
// 1.595769e+00f, 7.6e-8 off), an error exp(-2u) amplifies by |2u| (L0 found gelu tanh 1.5x torch's fp32 error).
// "tanh": e = exp(-|2u|) of a lane and 2u in w: the gelu's and its derivative's, one expression (the compiler takes
// the exp once per element for both in the backward).
static inline tp_nf tp_gelu_e(tp_nf x, tp_nf* w) {
  *w = 1.5957691216057307117f * (x + 0.044715f * x * x * x);
  return tp_exp_n(*w < 0 ? *w : -*w);
}
// "tanh": gelu = v sigmoid(2u) as t = v e / (1 + e), e = exp(-|2u|), for v <= 0 and v - t for v > 0: the small
// term carries exp's error, so a positive gate's gelu is within about half an ulp (v * sigmoid(2u), rounded twice,
// had 1.2x the error of torch's 0.5 v (1 + tanh u) there). v = +inf gives inf and -inf nan, as v sigmoid(2u).
TP_HELPER tp_v16 tp_gelu_tanh(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf x = v.v[i], w, e = tp_gelu_e(x, &w);
    tp_nf t = x * (e / (1.0f + e));
    r.v[i] = x <= 0 ? t : (e > 0 ? x - t : x);  // <=: -0 keeps its sign
  }
  return r;
}
// "tanh": gelu'(v) = s + v s (1 - s) (2u)' with e = exp(-|2u|) the gelu's own (tp_gelu_e), p = 1 / (1 + e) and
// q = e / (1 + e): s = p or q by 2u's sign and s (1 - s) = p q, neither cancelling (sigmoid(2u) for s and
// sigmoid(+-2u) for s (1 - s), each from its own exp, took four exps).
// p and q share 1 + e's rounding, which p q doubles: it is taken out (k, the exact remainder 1 + e - d, over d),
// or dgate's RMSE was 1.01-1.02x the benchmark's (L0 retests of U[-5, 5] cases; now 0.90x).
// The second term is exactly 0 in fp32 for |v| >= 20 (p q < e^-600): v clamped there in it, or at |v| ~ 1e19 a
// q = 0 times (2u)' = inf gives nan; a nan v stays nan (the comparisons fail).
TP_HELPER tp_v16 tp_gelu_tanh_grad(tp_v16 v) {
  tp_v16 r;
  for (int i = 0; i < TP_PARTS; ++i) {
    tp_nf x = v.v[i], w, e = tp_gelu_e(x, &w);
    tp_nf d = 1.0f + e, k = (e - (d - 1.0f)) / d;  // k: 1 + e - d (exact, e <= 1) over d
    tp_nf p = 1.0f / d, q = e / d;
    p = p - p * k, q = q - q * k;
    tp_nf s = w < 0 ? q : p;
    tp_nf c = x < -20.0f ? -20.0f : (x > 20.0f ? 20.0f : x);
    r.v[i] = s + c * (p * q) * (1.5957691216057307117f * (1.0f + 0.134145f * c * c));
  }
  return r;
}
"""


def gelu(approximate: str):
    """gelu(v) of 16 lanes."""
    if approximate == "none":
        return lambda v: v * T.call_extern(VEC, "tp_gelu_cdf", v)
    return lambda v: T.call_extern(VEC, "tp_gelu_tanh", v)


def gelu_grad(approximate: str):
    """gelu'(v) of 16 lanes."""
    if approximate == "none":
        return lambda v: T.call_extern(VEC, "tp_gelu_grad", v)

    return lambda v: T.call_extern(VEC, "tp_gelu_tanh_grad", v)


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
