"""The gated activations' TileLang device kernels (CUDA, Ascend arch35): what every target shares, written once.

The activations over a dialect ``T`` (``tilelang.language`` or ``tilelang.ascend.language``), their per-element
math (``Math``), and each op's entry points (``lowered`` for ``tileport lower``, ``forward`` and ``backward`` for
the backend) over a target's flat builder ``build(name, math, dtype, backward)`` and its runner. A target's module
keeps only its kernel's shape (``cuda/swiglu.py``: a CTA per block; ``ascend/swiglu.py``: a persistent vector-core
walk) and, for gelu "none", its erfc (``cdf2(x) = erfc(-x / sqrt 2)``: CUDA's erfcf, a fit on Ascend, which has
none).

silu = x / (1 + exp(-x)); silu' takes sigmoid and 1 - sigmoid from exp(-|x|). gelu "tanh" = x / (1 + exp(-2u))
(1 + tanh(u) = 2 sigmoid(2u)), its derivative s + 2 x s (1 - s) u' with s and 1 - s from exp(-2|u|): no tail
cancels. gelu "none" = x/2 * erfc(-x / sqrt 2) (1 + erf cancels in fp32 for negative x), gelu' = Phi(x) + x phi(x).
Past |x| = 20 erfc's tail, phi and the tanh derivative's second term are exactly 0 in fp32: the gate is clamped
there inside them, so a gate near 1e19 gives no inf * 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from .. import outputs
from .targets import TL_DTYPE

SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
SQRT_2_PI = 0.7978845608028654
KAPPA = 0.044715
LIM = 20.0


def _sig_pair(T, v):
    """(sigmoid(v), 1 - sigmoid(v)), each from exp(-|v|): neither tail cancels."""
    e = T.exp(-T.abs(v))
    r = 1.0 / (1.0 + e)
    return T.if_then_else(v >= 0, r, e * r), T.if_then_else(v >= 0, e * r, r)


def _clamped(T, x):
    return T.max(T.min(x, LIM), -LIM)


def silu(T):
    """(silu, silu') in dialect T."""

    def act(x):
        return x / (1.0 + T.exp(-x))

    def grad(x):
        s, t = _sig_pair(T, x)
        return s * (1.0 + x * t)

    return act, grad


def gelu(T, tanh: bool, cdf2):
    """(gelu, gelu') in dialect T: the tanh form, or the exact one by the target's ``cdf2``."""
    if tanh:

        def act(x):
            return x / (1.0 + T.exp(-2.0 * (SQRT_2_PI * x * (1.0 + KAPPA * x * x))))

        def grad(x):
            s, t = _sig_pair(T, 2.0 * (SQRT_2_PI * x * (1.0 + KAPPA * x * x)))
            w = _clamped(T, x)
            return s + 2.0 * w * s * t * (SQRT_2_PI * (1.0 + 3.0 * KAPPA * w * w))
    else:

        def act(x):
            return 0.5 * x * cdf2(_clamped(T, x))

        def grad(x):
            w = _clamped(T, x)
            return 0.5 * cdf2(w) + x * (INV_SQRT_2PI * T.exp(-0.5 * w * w))

    return act, grad


class Math(NamedTuple):
    """A gated activation's per-element math over fp32 values, rounded to the dtype once (eager casting: the
    activation rounded first, as ``F.silu(gate) * up`` does): y = act(g) * u, dgate = dy * u * act'(g) (rounded
    once in either casting: the contract), dup = dy * act(g). Every target's kernel applies these per element."""

    y: Callable
    dgate: Callable
    dup: Callable


def math(act, act_grad, dtype: torch.dtype, eager: bool) -> Math:
    dt = TL_DTYPE[dtype]

    def rounded(v):
        return v.astype(dt).astype("float32") if eager else v

    return Math(
        lambda g, u: (rounded(act(g)) * u).astype(dt),
        lambda dy, g, u: (dy * u * act_grad(g)).astype(dt),
        lambda dy, g: (dy * rounded(act(g))).astype(dt),
    )


def is_tanh(approximate: str) -> bool:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate == "tanh"


def run(runner, op: str, builder, ins: tuple, n_out: int, *args, out=None):
    """``n_out`` contiguous outputs of ins[-1]'s shape and dtype from the kernel ``builder(*args)`` over the flat,
    contiguous ``ins``; ``out``: the outputs preallocated (contiguous), written into."""
    like = ins[-1]
    flat = tuple(t.contiguous().view(-1) for t in ins)
    outs = (
        tuple(outputs.empty((like.numel(),), like.dtype, like.device) for _ in range(n_out))
        if out is None
        else tuple(o.view(-1) for o in out)
    )
    runner.kernel(op, builder, *args)(*flat, *outs)
    return tuple(o.view(like.shape) for o in outs)


def swiglu_entries(T, build, runner, device: str):
    """swiglu's (lowered, forward, backward) for a target."""

    def _build(dtype: torch.dtype, eager: bool, backward: bool):
        return build("swiglu_bwd" if backward else "swiglu_fwd", math(*silu(T), dtype, eager), dtype, backward)

    def lowered(dtype: torch.dtype, dim: int, casting: str = "fp32") -> dict:
        """{kernel name: prim_func} (``dim`` unused: the element count is a runtime value), for ``tileport lower``."""
        eager = casting == "eager"
        return {"swiglu_fwd": _build(dtype, eager, False), "swiglu_bwd": _build(dtype, eager, True)}

    def forward(gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32", out=None) -> torch.Tensor:
        given = None if out is None else (out,)
        (y,) = run(runner, "swiglu_fwd", _build, (gate, up), 1, gate.dtype, casting == "eager", False, out=given)
        return y if out is None else out

    def backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32"):
        return run(runner, "swiglu_bwd", _build, (dy, gate, up), 2, gate.dtype, casting == "eager", True)

    forward.__doc__ = f"y = silu(gate) * up on {device}."
    backward.__doc__ = f"(dgate, dup) on {device}."
    return lowered, forward, backward


def geglu_entries(T, build, runner, device: str, cdf2):
    """geglu's (lowered, forward, backward) for a target whose erfc form is ``cdf2``."""

    def _build(dtype: torch.dtype, tanh: bool, eager: bool, backward: bool):
        name = "geglu_bwd" if backward else "geglu_fwd"
        return build(name, math(*gelu(T, tanh, cdf2), dtype, eager), dtype, backward)

    def lowered(dtype: torch.dtype, dim: int, approximate: str = "tanh", casting: str = "fp32") -> dict:
        """{kernel name: prim_func} (``dim`` unused: the element count is a runtime value), for ``tileport lower``."""
        tanh, eager = is_tanh(approximate), casting == "eager"
        return {"geglu_fwd": _build(dtype, tanh, eager, False), "geglu_bwd": _build(dtype, tanh, eager, True)}

    def forward(gate, up, approximate: str = "tanh", casting: str = "fp32", out=None) -> torch.Tensor:
        args = (gate.dtype, is_tanh(approximate), casting == "eager")
        (y,) = run(runner, "geglu_fwd", _build, (gate, up), 1, *args, False, out=None if out is None else (out,))
        return y if out is None else out

    def backward(dy, gate, up, approximate: str = "tanh", casting: str = "fp32"):
        args = (gate.dtype, is_tanh(approximate), casting == "eager")
        return run(runner, "geglu_bwd", _build, (dy, gate, up), 2, *args, True)

    forward.__doc__ = f"y = gelu(gate, approximate) * up on {device}."
    backward.__doc__ = f"(dgate, dup) on {device}."
    return lowered, forward, backward
