"""geglu forward and backward (``tileport.ops.geglu``'s contract) as TileLang CUDA kernels, one per (dtype,
approximate, casting): swiglu's flat builder and launcher (``swiglu.build``, ``swiglu.run``) with gelu for silu.

"none": gelu = x/2 * erfc(-x / sqrt 2) (CUDA's erfcf; 1 + erf cancels in fp32 for negative x), gelu' = Phi(x) +
x * phi(x). "tanh": gelu = x / (1 + exp(-2u)) (1 + tanh(u) = 2 sigmoid(2u)), its derivative s + 2 x s (1 - s) u'
with s and 1 - s from exp(-2|u|): no tail cancels.
"""

# No `from __future__ import annotations`: it breaks T.prim_func annotations.
import tilelang.language as T
import torch

from .swiglu import RUNNER, build, run

SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
SQRT_2_PI = 0.7978845608028654
KAPPA = 0.044715


def _erfc(v):
    return T.call_extern("float32", "erfcf", v)


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
            return s + 2.0 * x * s * t * (SQRT_2_PI * (1.0 + 3.0 * KAPPA * x * x))
    else:
        def act(x):
            return 0.5 * x * _erfc(-x * SQRT1_2)

        def grad(x):
            return 0.5 * _erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * T.exp(-0.5 * x * x)
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
    """y = gelu(gate, approximate) * up on the GPU."""
    return run(RUNNER, "geglu_fwd", _build, (gate, up), 1, gate.dtype, _tanh(approximate), casting == "eager", False)[0]


def backward(dy, gate, up, approximate: str = "tanh", casting: str = "fp32"):
    """(dgate, dup) on the GPU."""
    return run(RUNNER, "geglu_bwd", _build, (dy, gate, up), 2, gate.dtype, _tanh(approximate), casting == "eager", True)
