"""swiglu: the SwiGLU gate of an MLP, ``silu(gate) * up`` (the contract, stated once here).

Semantics (Liger-Kernel's ``LigerSiLUMulFunction``, FlagGems' ``silu_and_mul(x, y)``, transformers' eager
``act_fn(gate_proj(x)) * up_proj(x)``):
- ``gate`` and ``up`` of one shape (any, 0-d included) and one floating dtype; ``y`` of that shape and dtype.
- ``casting="fp32"``: ``silu(gate) * up`` in fp32 (fp64 for fp64), rounded once to the inputs' dtype;
  ``casting="eager"``: the activation ``silu(gate)`` in fp32 rounded to the inputs' dtype first, then the product
  rounded (transformers' eager ``act_fn(gate) * up``, Liger's kernels). silu(v) = v / (1 + exp(-v)). On the CPU
  (torch and TileLang backends) bf16 and fp16 are bit for bit with torch's ``F.silu(gate) * up`` (measured at every
  16-bit gate, subnormals kept; the product of two 16-bit values is exact in fp32, so that is every input pair); in
  fp32 the TileLang kernels' own exp makes the activation differ from torch's (Sleef's) in ~4% of elements, by at
  most 4 ulp (each within 2 ulp of the exact one), the output by at most 5.
- Backward in fp32, each result rounded once to the inputs' dtype: ``dup = dy * silu(gate)`` (eager: the rounded
  activation, the product's own factor), ``dgate = dy * up * silu'(gate)`` with ``silu'(v) = s * (1 + v * (1 - s))``,
  ``s = sigmoid(v)`` and ``1 - s = sigmoid(-v)`` (no cancellation at large |v|).
- Empty inputs give empty outputs.
- ``SwiGLUMLP``: transformers' ``LlamaMLP`` (its parameter names) with this activation fused, eager casting.
- ``silu_and_mul(x)`` (vLLM's concatenated form): ``x [..., 2F]``, gate its first half and up its second (views,
  no copy), ``y [..., F]``; ``dx [..., 2F]`` is ``(dgate, dup)`` side by side.

What a backend's ``swiglu`` kernel module gives (called by the interface for a non-empty ``gate``; the tensors
as the caller gave them, N-D, stride 1 in the last dimension, one device):

    forward(gate, up, casting) -> y
    backward(dy, gate, up, casting) -> (dgate, dup)

outputs allocated by the kernel, contiguous.
"""

from __future__ import annotations

from .. import _halves
from .mlp import SwiGLUMLP  # noqa: F401 - a public name of the package
from .spec import SPEC

OP = "swiglu"
_API = SPEC.api
swiglu, swiglu_fwd, swiglu_bwd = _API.function, _API.forward, _API.backward
SwiGLU = _API.module("SwiGLU", "``torch.nn.Module`` form of :func:`swiglu` (no parameters): ``forward(gate, up)``.")


_silu_and_mul = _halves.function("silu_and_mul", swiglu_fwd, swiglu_bwd, ("casting", "backend"))


def silu_and_mul(x, *, casting="fp32", backend=None):
    """vLLM's ``silu_and_mul``: ``silu(x[..., :F]) * x[..., F:]`` of x [..., 2F], y [..., F]; differentiable in x.
    ``casting`` as :func:`swiglu`'s. TypeError / ValueError for a non-tensor, 0-d or odd-sized x."""
    return _silu_and_mul(x, casting, backend)
