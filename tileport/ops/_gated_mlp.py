"""The MLP block around a gated activation, shared by ``SwiGLUMLP`` and ``GEGLUMLP``: transformers' ``LlamaMLP``
/ ``GemmaMLP`` layout (``gate_proj``, ``up_proj`` [intermediate, hidden], ``down_proj`` [hidden, intermediate],
``nn.Linear`` each, so their state dicts load as they are), the projections in torch and the activation fused:
``down_proj(act(gate_proj(x)) * up_proj(x))``."""

from __future__ import annotations

import torch

from . import _checks as _c


class GatedMLP(torch.nn.Module):
    """The projections and the forward; a subclass gives ``gated(gate, up)`` (the fused activation)."""

    def __init__(self, hidden_size, intermediate_size, bias=False, *, device=None, dtype=None):
        super().__init__()
        for name, size in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size)):
            if _c.integer(size, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {size}")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        bias = _c.flag(bias, "bias")
        kw = {"bias": bias, "device": device, "dtype": dtype}
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, **kw)

    def gated(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define gated(gate, up)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gated(self.gate_proj(x), self.up_proj(x)))
