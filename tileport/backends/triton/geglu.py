"""geglu forward and backward in Triton (``tileport.ops.geglu``'s contract): y = gelu(gate, approximate) * up,
swiglu's flat walk and host side (``swiglu.launch``) with gelu for silu.

"none": gelu(x) = x/2 * erfc(-x / sqrt 2), never 1 + erf(x / sqrt 2) (it cancels in fp32 for negative x);
erfc is ``_cdf2``'s fit, fp32 without fp64 or libdevice (the interpreter and Ascend have neither);
gelu'(x) = Phi(x) + x * phi(x), phi's exp(-x^2 / 2) with x^2 split exactly by an fma. "tanh": 1 + tanh(u) = 2
sigmoid(2u), so gelu =
x / (1 + exp(-2u)) and its derivative s + 2 x s (1 - s) u' with s, 1 - s from exp(-2|u|): no tail cancels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import round_to, store
from .swiglu import LIVE, launch

SQRT1_2 = tl.constexpr(0.7071067811865476)  # constexpr: triton-ascend's Triton takes no plain global in a kernel
INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
SQRT_2_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi)
KAPPA = tl.constexpr(0.044715)


@triton.jit
def _cdf2(x):
    """2 Phi(x) = erfc(-x / sqrt 2) in fp32: erfc(z), z = |x| / sqrt 2, by the Chebyshev fit t * exp(-z^2 + P(t)),
    t = 1 / (1 + z/2) (Numerical Recipes' erfcc, relative error under 1.2e-7 for every z >= 0), z^2 = x^2 / 2 split
    exactly by an fma so exp's argument loses nothing at large |x|; 2 - erfc(z) for x >= 0 (no cancellation)."""
    z = tl.abs(x) * SQRT1_2
    t = 1.0 / (1.0 + 0.5 * z)
    p = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                )
            )
        )
    )
    hi = x * x
    lo = tl.fma(x, x, -hi)
    e = t * tl.exp(-0.5 * hi) * tl.exp(p - 0.5 * lo)
    return tl.where(x < 0, e, 2.0 - e)


@triton.jit
def gelu(x, TANH: tl.constexpr):
    if TANH:
        u = SQRT_2_PI * x * (1.0 + KAPPA * x * x)
        return x / (1.0 + tl.exp(-2.0 * u))
    else:
        return 0.5 * x * _cdf2(x)


@triton.jit
def gelu_grad(x, TANH: tl.constexpr):
    if TANH:
        u = SQRT_2_PI * x * (1.0 + KAPPA * x * x)
        du = SQRT_2_PI * (1.0 + 3.0 * KAPPA * x * x)
        e = tl.exp(-2.0 * tl.abs(u))
        r = 1.0 / (1.0 + e)
        s = tl.where(u >= 0, r, e * r)
        t = tl.where(u >= 0, e * r, r)
        return s + 2.0 * x * s * t * du
    else:
        hi = x * x
        lo = tl.fma(x, x, -hi)
        pdf = INV_SQRT_2PI * tl.exp(-0.5 * hi) * tl.exp(-0.5 * lo)
        return 0.5 * _cdf2(x) + x * pdf


@triton.jit
def _fwd_kernel(
    G, U, Y, N, BLOCK: tl.constexpr, TANH: tl.constexpr, EAGER: tl.constexpr, KIND: tl.constexpr, BF16: tl.constexpr
):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):  # persistent: see common.blocks
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        g = tl.load(G + offs, mask=m, other=0.0).to(tl.float32)
        u = tl.load(U + offs, mask=m, other=0.0).to(tl.float32)
        a = gelu(g, TANH)
        if EAGER:
            a = round_to(a, KIND)
        store(Y + offs, a * u, m, BF16)


@triton.jit
def _bwd_kernel(
    DY,
    G,
    U,
    DG,
    DU,
    N,
    BLOCK: tl.constexpr,
    TANH: tl.constexpr,
    EAGER: tl.constexpr,
    KIND: tl.constexpr,
    BF16: tl.constexpr,
):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        dy = tl.load(DY + offs, mask=m, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=m, other=0.0).to(tl.float32)
        u = tl.load(U + offs, mask=m, other=0.0).to(tl.float32)
        a = gelu(g, TANH)
        if EAGER:  # dup's factor is the product's own, the rounded activation
            a = round_to(a, KIND)
        store(DG + offs, dy * u * gelu_grad(g, TANH), m, BF16)
        store(DU + offs, dy * a, m, BF16)


def _tanh(approximate: str) -> bool:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"geglu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate == "tanh"


def forward(gate, up, approximate: str = "tanh", casting: str = "fp32", out=None) -> torch.Tensor:
    """y = gelu(gate, approximate) * up in gate's dtype (contiguous, gate's shape)."""
    (y,) = launch(
        "geglu",
        _fwd_kernel,
        (gate, up),
        1,
        LIVE["fwd"],
        gate.shape,
        gate.dtype,
        None if out is None else (out,),
        TANH=_tanh(approximate),
        EAGER=casting == "eager",
    )
    return y if out is None else out


def backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "tanh", casting: str = "fp32"):
    """(dgate, dup) = (dy * up * gelu'(gate), dy * gelu(gate)) in gate's dtype."""
    return launch(
        "geglu",
        _bwd_kernel,
        (dy, gate, up),
        2,
        LIVE["bwd"],
        gate.shape,
        gate.dtype,
        TANH=_tanh(approximate),
        EAGER=casting == "eager",
    )
