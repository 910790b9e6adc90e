"""swiglu forward and backward in Triton (``tileport.ops.swiglu``'s contract): y = silu(gate) * up, one flat
elementwise walk over the contiguous elements, and the host side the gated activations share (``geglu.py``).

Each program walks blocks of ``BLOCK`` elements (persistent, ``common.blocks`` sizes them: the vector-core grid
and the unified buffer on Ascend). fp32 math, rounded once to the inputs' dtype (bf16 by hand, ``common.store``);
casting "eager" rounds the activation to that dtype before the product (and dup's factor), as ``F.silu(gate) * up``
does in the input dtype; dgate = dy * up * act' is rounded once in either casting (the contract). silu is torch's ``x /
(1 + exp(-x))``;
its derivative takes sigmoid and 1 - sigmoid from exp(-|x|), so neither tail cancels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import outputs
from .common import (
    blocks,
    check_size,
    launch_context,
    round_kind,
    round_to,
    storage,
    store,
)

# fp32 BLOCK-element tensors live at once (gate, up, dy, the activation and its derivative, the outputs): an
# Ascend block's size in the unified buffer (common.blocks)
LIVE = {"fwd": 6, "bwd": 8}
_ROW = 1024  # the flat walk sized by common.blocks as rows of this many elements


@triton.jit
def silu(x):
    """torch's silu form, x / (1 + exp(-x)): -0 past exp's overflow, as torch gives."""
    return x / (1.0 + tl.exp(-x))


@triton.jit
def silu_grad(x):
    """silu'(x) = s * (1 + x * (1 - s)), s = sigmoid(x) and 1 - s both from e = exp(-|x|) (no 1 - s cancellation)."""
    e = tl.exp(-tl.abs(x))
    r = 1.0 / (1.0 + e)
    s = tl.where(x >= 0, r, e * r)
    t = tl.where(x >= 0, e * r, r)
    return s * (1.0 + x * t)


@triton.jit
def _fwd_kernel(G, U, Y, N, BLOCK: tl.constexpr, EAGER: tl.constexpr, KIND: tl.constexpr, BF16: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):  # persistent: see common.blocks
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        g = tl.load(G + offs, mask=m, other=0.0).to(tl.float32)
        u = tl.load(U + offs, mask=m, other=0.0).to(tl.float32)
        a = silu(g)
        if EAGER:
            a = round_to(a, KIND)
        store(Y + offs, a * u, m, BF16)


@triton.jit
def _bwd_kernel(DY, G, U, DG, DU, N, BLOCK: tl.constexpr, EAGER: tl.constexpr, KIND: tl.constexpr, BF16: tl.constexpr):
    for blk in range(tl.program_id(0), tl.cdiv(N, BLOCK), tl.num_programs(0)):
        offs = blk * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        dy = tl.load(DY + offs, mask=m, other=0.0).to(tl.float32)
        g = tl.load(G + offs, mask=m, other=0.0).to(tl.float32)
        u = tl.load(U + offs, mask=m, other=0.0).to(tl.float32)
        a = silu(g)
        if EAGER:  # dup's factor is the product's own, the rounded activation
            a = round_to(a, KIND)
        store(DG + offs, dy * u * silu_grad(g), m, BF16)
        store(DU + offs, dy * a, m, BF16)


def flat(t: torch.Tensor) -> torch.Tensor:
    """The contiguous elements of t (a copy where t is not contiguous)."""
    return t.contiguous().view(-1)


def launch(op: str, kernel, ins: tuple, n_out: int, live: int, shape, dtype: torch.dtype, out=None, **constants):
    """``n_out`` contiguous outputs of ``shape`` in ``dtype`` written by ``kernel`` over the flat ``ins``: the
    persistent grid and block of ``common.blocks`` for rows of ``_ROW`` elements, one BLOCK of whole rows.
    ``out``: the outputs preallocated (contiguous), written into."""
    for t in ins:
        check_size(op, t)
    ins = tuple(flat(t) for t in ins)
    n = ins[0].numel()
    outs = (
        tuple(outputs.empty((n,), dtype, ins[0].device) for _ in range(n_out))
        if out is None
        else tuple(o.view(n) for o in out)
    )
    width = min(triton.next_power_of_2(n), _ROW)
    block_m, block_d, grid, _ = blocks(triton.cdiv(n, width), width, ins[0].device, live)
    with launch_context():
        kernel[grid](
            *ins,
            *(storage(o) for o in outs),
            n,
            BLOCK=block_m * block_d,
            KIND=round_kind(dtype),
            BF16=dtype == torch.bfloat16,
            **constants,
        )
    return tuple(o.view(shape) for o in outs)


def forward(gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32", out=None) -> torch.Tensor:
    """y = silu(gate) * up in gate's dtype (contiguous, gate's shape)."""
    (y,) = launch(
        "swiglu",
        _fwd_kernel,
        (gate, up),
        1,
        LIVE["fwd"],
        gate.shape,
        gate.dtype,
        None if out is None else (out,),
        EAGER=casting == "eager",
    )
    return y if out is None else out


def backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, casting: str = "fp32"):
    """(dgate, dup) = (dy * up * silu'(gate), dy * silu(gate)) in gate's dtype."""
    return launch(
        "swiglu", _bwd_kernel, (dy, gate, up), 2, LIVE["bwd"], gate.shape, gate.dtype, EAGER=casting == "eager"
    )
