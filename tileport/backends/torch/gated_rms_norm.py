"""gated_rms_norm as the torch composite, the precision benchmark: fp32 math (fp64 for fp64), torch's mean and
activations."""

from __future__ import annotations

import torch

from . import compute_dtype


def _act(g: torch.Tensor, activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    """act(g) and its derivative: silu's s * (1 + g * (1 - s)), sigmoid's s * (1 - s), s = sigmoid(g)."""
    s = torch.sigmoid(g)
    if activation == "silu":
        return torch.nn.functional.silu(g), s * (1 + g * (1 - s))
    return s, s * (1 - s)


def forward(x, gate, weight, eps: float, activation: str, norm_before_gate: bool, output_dtype: torch.dtype, out=None):
    """(y, rstd) for rows ``x[M, D]`` and their gate: y = x * rstd * w * act(gate), or with z = x * act(gate)
    normalized, z * rstd * w."""
    cdt = compute_dtype(x.dtype)
    xf = x.to(cdt)
    a, _ = _act(gate.to(cdt), activation)
    u = xf if norm_before_gate else xf * a
    rstd = torch.rsqrt(u.pow(2).mean(-1) + eps)
    y = u * rstd.unsqueeze(-1)
    if weight is not None:
        y = y * weight.to(cdt)
    if norm_before_gate:
        y = y * a
    y = y.to(output_dtype)
    if out is not None:
        out[0].copy_(y)
        out[1].copy_(rstd)
        return out
    return y, rstd


def backward(x, gate, rstd, dy, weight, eps: float, activation: str, norm_before_gate: bool):
    """(dx, dgate, dweight or None) with n = u * rstd (u = x, or x * act(gate)) and g the gradient reaching n:
    du = (g - n * mean(g * n)) * rstd. In fp64 (the golden) du is formed without that cancellation,
    rstd * (D * eps * g + sum(u^2) * g - u * sum(g * u)) / (sum(u^2) + D * eps): the same value, where fp64
    itself would round it to noise as u and g grow parallel (every row of D = 1)."""
    cdt = compute_dtype(x.dtype)
    xf, gy = x.to(cdt), dy.to(cdt)
    a, da = _act(gate.to(cdt), activation)
    u = xf if norm_before_gate else xf * a
    r = rstd.to(cdt).unsqueeze(-1)
    n = u * r
    gw = gy if weight is None else gy * weight.to(cdt)
    g = gw * a if norm_before_gate else gw
    if cdt == torch.float64:
        ss, d, De = u.pow(2).sum(-1, keepdim=True), (g * u).sum(-1, keepdim=True), u.shape[-1] * eps
        du = r * (De * g + (ss * g - u * d)) / (ss + De)
    else:
        du = (g - n * (g * n).mean(-1, keepdim=True)) * r
    if norm_before_gate:
        dx, dgate, term = du, gw * n * da, n * a
    else:
        dx, dgate, term = du * a, du * xf * da, n
    dweight = None if weight is None else (gy * term).sum(0)
    return dx.to(x.dtype), dgate.to(gate.dtype), dweight
