"""``SwiGLUMLP``: a drop-in for transformers' ``LlamaMLP`` (Llama, Mistral, Qwen2's MLP with ``hidden_act="silu"``)
with :func:`~tileport.swiglu` fused between the projections."""

from __future__ import annotations

from .. import _checks as _c
from .._gated_mlp import GatedMLP
from .spec import CASTINGS, SPEC


class SwiGLUMLP(GatedMLP):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` with LlamaMLP's parameters (``gate_proj``, ``up_proj``,
    ``down_proj``; ``bias`` on all three, as ``mlp_bias``). ``casting="eager"`` (the default) rounds the activation
    to the dtype before the product, as LlamaMLP does, so a loaded state dict gives its outputs; ``"fp32"`` rounds
    once. ``backend`` as :func:`~tileport.swiglu`'s; ``device``/``dtype`` as ``nn.Linear``'s."""

    def __init__(
        self, hidden_size, intermediate_size, bias=False, *, casting="eager", backend=None, device=None, dtype=None
    ):
        super().__init__(hidden_size, intermediate_size, bias, device=device, dtype=dtype)
        self.casting = _c.choice(casting, "casting", CASTINGS)
        self.backend = backend

    def gated(self, gate, up):
        return SPEC.api.function(gate, up, casting=self.casting, backend=self.backend)

    def extra_repr(self):
        return f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, casting={self.casting!r}"
