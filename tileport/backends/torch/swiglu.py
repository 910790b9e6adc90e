"""swiglu as the torch composite, the precision benchmark (and, in float64, the golden): silu(gate) * up in fp32
(fp64 for fp64) rounded once, or with the activation rounded to the inputs' dtype first (``casting="eager"``,
transformers' ``act_fn(gate) * up``)."""

from __future__ import annotations

import torch

from . import compute_dtype


def _act(g):
    """silu(g) and silu'(g) = s * (1 + g * (1 - s)), 1 - s = sigmoid(-g): no cancellation at large |g|."""
    s = torch.sigmoid(g)
    return g * s, s * (1 + g * torch.sigmoid(-g))


def forward(gate, up, casting: str, out=None):
    """y = silu(gate) * up (the contract: ``tileport.ops.swiglu``); ``out``: y, written into."""
    if casting == "eager" and gate.dtype != torch.float64:
        y = torch.nn.functional.silu(gate) * up
    else:
        cdt = compute_dtype(gate.dtype)
        y = (torch.nn.functional.silu(gate.to(cdt)) * up.to(cdt)).to(gate.dtype)
    return y if out is None else out.copy_(y)


def backward(dy, gate, up, casting: str):
    """(dgate, dup): dy * up * silu'(gate), dy * silu(gate) (eager: the rounded activation), fp32, rounded once."""
    cdt = compute_dtype(gate.dtype)
    g, u, d = gate.to(cdt), up.to(cdt), dy.to(cdt)
    a, da = _act(g)
    if casting == "eager" and gate.dtype != torch.float64:  # fp64 (the golden): the accurate activation above
        a = torch.nn.functional.silu(gate).to(cdt)
    return (d * u * da).to(gate.dtype), (d * a).to(gate.dtype)
