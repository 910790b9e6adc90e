"""geglu as the torch composite, the precision benchmark (and, in float64, the golden): gelu(gate) * up in fp32
(fp64 for fp64) rounded once, or with the activation rounded to the inputs' dtype first (``casting="eager"``,
Gemma's ``gelu(gate, approximate) * up``). gelu "none" in the erfc form, "tanh" as v * sigmoid(2u): neither
cancels for negative v, as ``1 + erf`` and ``1 + tanh`` do."""

from __future__ import annotations

import math

import torch

from . import compute_dtype

K = math.sqrt(2 / math.pi)
C = 0.044715


def act(g, approximate: str):
    """gelu(g) and gelu'(g) in g's dtype."""
    if approximate == "none":
        phi_cdf = 0.5 * torch.erfc(g * -math.sqrt(0.5))
        pdf = torch.exp(-0.5 * g * g) * (1 / math.sqrt(2 * math.pi))
        return g * phi_cdf, phi_cdf + g * pdf
    u2 = 2 * K * (g + C * g * g * g)
    s = torch.sigmoid(u2)
    # the derivative's second term 2 v s (1 - s) u' is exactly 0 in fp32 for |v| >= 20 (s (1 - s) < e^-600):
    # v clamped there, or at |v| ~ 1e19 (1 - s) = 0 times u' = inf gives nan
    v = g.clamp(-20, 20)
    w2 = 2 * K * (v + C * v * v * v)
    t = torch.sigmoid(w2) * torch.sigmoid(-w2)
    return g * s, s + 2 * K * v * t * (1 + 3 * C * v * v)


def forward(gate, up, approximate: str, casting: str, out=None):
    """y = gelu(gate, approximate) * up (the contract: ``tileport.ops.geglu``); ``out``: y, written into."""
    cdt = compute_dtype(gate.dtype)
    if casting == "eager" and gate.dtype != torch.float64:
        y = torch.nn.functional.gelu(gate, approximate=approximate) * up
    else:
        y = (act(gate.to(cdt), approximate)[0] * up.to(cdt)).to(gate.dtype)
    return y if out is None else out.copy_(y)


def backward(dy, gate, up, approximate: str, casting: str):
    """(dgate, dup): dy * up * gelu'(gate), dy * gelu(gate) (eager: the rounded activation), rounded once."""
    cdt = compute_dtype(gate.dtype)
    g, u, d = gate.to(cdt), up.to(cdt), dy.to(cdt)
    a, da = act(g, approximate)
    if casting == "eager" and gate.dtype != torch.float64:  # fp64 (the golden): the accurate activation above
        a = torch.nn.functional.gelu(gate, approximate=approximate).to(cdt)
    return (d * u * da).to(gate.dtype), (d * a).to(gate.dtype)
