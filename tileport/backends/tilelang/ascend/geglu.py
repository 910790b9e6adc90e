"""geglu forward and backward (``tileport.ops.geglu``'s contract) for Ascend arch35 (Ascend 950) in TileLang's
ascend dialect, one kernel per (dtype, approximate, casting): ``swiglu.build``'s persistent flat walk and
``cuda/swiglu.py``'s launcher with gelu for silu.

"none": gelu = x/2 * erfc(-x / sqrt 2), gelu' = Phi(x) + x * phi(x). The ascend dialect offers erf but no erfc,
and 1 + erf(x / sqrt 2) cancels in fp32 for negative x, so erfc is ``backends/triton/geglu.py``'s ``_cdf2`` fit
(Numerical Recipes' erfcc, t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), relative error under 1.2e-7 for every z >= 0;
2 - erfc(z) for x >= 0, no cancellation), fp32 only. The dialect has no fma, so x^2 is not split as Triton's is:
exp's argument -x^2/2 carries x^2's rounding, a relative error under x^2 * 2^-25 (< 3e-6 while the tail is a
normal fp32); the gate is clamped to [-20, 20] inside the fit and phi, where both are exactly 0 or 2 in fp32, so a
huge gate gives no nan. "tanh": gelu = x / (1 + exp(-2u)) (1 + tanh(u) = 2 sigmoid(2u)), its derivative
s + 2 x s (1 - s) u' with s and 1 - s from exp(-2|u|): no tail cancels; the second term's gate clamped to
[-20, 20] (it is exactly 0 in fp32 there), so a gate near 1e19 gives no nan.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.ascend.language as T
import torch

from ..cuda.swiglu import run
from .swiglu import RUNNER, build

SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
SQRT_2_PI = 0.7978845608028654
KAPPA = 0.044715
LIM = 20.0  # |gate| past which erfc's tail, phi and the tanh derivative's second term are exactly 0 in fp32


def _clamped(x):
    return T.max(T.min(x, LIM), -LIM)


def _cdf2(x):
    """2 Phi(x) = erfc(-x / sqrt 2) in fp32 (x already in [-LIM, LIM])."""
    z = T.abs(x) * SQRT1_2
    t = 1.0 / (1.0 + 0.5 * z)
    p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
        0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    e = t * T.exp(p - 0.5 * x * x)
    return T.if_then_else(x < 0, e, 2.0 - e)


def _acts(tanh: bool):
    if tanh:
        def act(x):
            u = SQRT_2_PI * x * (1.0 + KAPPA * x * x)
            return x / (1.0 + T.exp(-2.0 * u))

        def grad(x):
            u = SQRT_2_PI * x * (1.0 + KAPPA * x * x)
            e = T.exp(-2.0 * T.abs(u))
            r = 1.0 / (1.0 + e)
            s = T.if_then_else(u >= 0, r, e * r)
            t = T.if_then_else(u >= 0, e * r, r)
            w = _clamped(x)
            return s + 2.0 * w * s * t * (SQRT_2_PI * (1.0 + 3.0 * KAPPA * w * w))
    else:
        def act(x):
            return 0.5 * x * _cdf2(_clamped(x))

        def grad(x):
            w = _clamped(x)
            return 0.5 * _cdf2(w) + x * (INV_SQRT_2PI * T.exp(-0.5 * w * w))
    return act, grad


def _tanh(approximate: str) -> bool:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate == "tanh"


def _build(dtype: torch.dtype, tanh: bool, eager: bool, backward: bool):
    act, grad = _acts(tanh)
    return build("geglu_bwd" if backward else "geglu_fwd", act, grad, dtype, eager, backward)


def lowered(dtype: torch.dtype, dim: int, approximate: str = "tanh", casting: str = "fp32") -> dict:
    """{kernel name: prim_func} (``dim`` unused: the element count is a runtime value), for ``tileport lower``."""
    tanh, eager = _tanh(approximate), casting == "eager"
    return {"geglu_fwd": _build(dtype, tanh, eager, False), "geglu_bwd": _build(dtype, tanh, eager, True)}


def forward(gate: torch.Tensor, up: torch.Tensor, approximate: str = "tanh", casting: str = "fp32") -> torch.Tensor:
    """y = gelu(gate, approximate) * up on an Ascend 950 NPU."""
    return run(RUNNER, "geglu_fwd", _build, (gate, up), 1, gate.dtype, _tanh(approximate), casting == "eager", False)[0]


def backward(dy, gate, up, approximate: str = "tanh", casting: str = "fp32"):
    """(dgate, dup) on an Ascend 950 NPU."""
    return run(RUNNER, "geglu_bwd", _build, (dy, gate, up), 2, gate.dtype, _tanh(approximate), casting == "eager", True)
