"""``GEGLUMLP``: a drop-in for transformers' ``GemmaMLP`` (Gemma's MLP, ``hidden_activation="gelu_pytorch_tanh"``;
``approximate="none"`` for the erf gelu) with :func:`~tileport.geglu` fused between the projections."""

from __future__ import annotations

from .. import _checks as _c
from .._gated_mlp import GatedMLP
from .spec import APPROXIMATE, CASTINGS, SPEC


class GEGLUMLP(GatedMLP):
    """``down_proj(gelu(gate_proj(x), approximate) * up_proj(x))`` with GemmaMLP's parameters (``gate_proj``,
    ``up_proj``, ``down_proj``). ``casting="eager"`` (the default) rounds the activation to the dtype before the
    product, as GemmaMLP does; ``"fp32"`` rounds once. ``backend`` as :func:`~tileport.geglu`'s;
    ``device``/``dtype`` as ``nn.Linear``'s."""

    def __init__(
        self,
        hidden_size,
        intermediate_size,
        bias=False,
        approximate="tanh",
        *,
        casting="eager",
        backend=None,
        device=None,
        dtype=None,
    ):
        super().__init__(hidden_size, intermediate_size, bias, device=device, dtype=dtype)
        self.approximate = _c.choice(approximate, "approximate", APPROXIMATE.choices)
        self.casting = _c.choice(casting, "casting", CASTINGS)
        self.backend = backend

    def gated(self, gate, up):
        return SPEC.api.function(gate, up, self.approximate, casting=self.casting, backend=self.backend)

    def extra_repr(self):
        return (
            f"hidden_size={self.hidden_size}, intermediate_size={self.intermediate_size}, "
            f"approximate={self.approximate!r}, casting={self.casting!r}"
        )
