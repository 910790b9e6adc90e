"""geglu: the GEGLU gate of an MLP, ``gelu(gate, approximate) * up`` (the contract, stated once here).

Semantics (Liger-Kernel's ``LigerGELUMulFunction``, FlagGems' ``gelu_and_mul(x, y, approximate)``, Gemma's eager
MLP ``gelu(gate_proj(x), approximate="tanh") * up_proj(x)``):
- ``gate`` and ``up`` of one shape (any, 0-d included) and one floating dtype; ``y`` of that shape and dtype.
- ``approximate="none"``: gelu(v) = v / 2 * erfc(-v / sqrt 2) (the erfc form: ``1 + erf(v / sqrt 2)`` cancels for
  negative v); ``"tanh"``: gelu(v) = v / 2 * (1 + tanh(u)) = v * sigmoid(2u), u = sqrt(2/pi) * (v + 0.044715 v^3).
- ``casting="fp32"``: ``gelu(gate) * up`` in fp32 (fp64 for fp64), rounded once to the inputs' dtype;
  ``casting="eager"``: the activation rounded to the inputs' dtype first, then the product rounded (transformers'
  eager MLPs and Liger's kernels). A kernel's activation is the exact one rounded (TileLang CPU, bf16/fp16: at
  every gate for "none", all but a few for "tanh"), which torch's is not: its CPU gelu is ``1 + erf`` / ``1 + tanh`` in
  fp32,
  cancelling for negative gates (848 of the 65280 bf16 gates rounded otherwise for "none", 155 for "tanh"), and
  its vectorized and scalar loops give different bits for the same gate (660 and 4 bf16 gates). No kernel is
  bit for bit with that; the torch backend's eager is torch's own ``gelu(gate) * up``. Against transformers'
  ``act_fn(gate) * up`` at bf16 512 x 4096 (N(0, 1)), at most 1 output in 5,000 differs (131 "tanh", 112 "none"
  of 2,097,152 on an AVX2 CPU), each at a negative gate where torch's activation is not the exact one rounded.
- Backward in fp32, each result rounded once: ``dup = dy * gelu(gate)`` (eager: the rounded activation),
  ``dgate = dy * up * gelu'(gate)``: none ``Phi(v) + v * phi(v)`` with ``Phi(v) = erfc(-v / sqrt 2) / 2``; tanh
  ``s + 2 v s (1 - s) u'``, ``s = sigmoid(2u)``, ``1 - s = sigmoid(-2u)`` (no cancellation at large |v|).
- Empty inputs give empty outputs.
- ``GEGLUMLP``: transformers' ``GemmaMLP`` (its parameter names) with this activation fused, eager casting.
- ``gelu_and_mul(x, approximate="none")`` (vLLM's concatenated form, vLLM's default approximation): ``x [...,
  2F]``, gate its first half and up its second (views, no copy), ``y [..., F]``; ``dx`` is ``(dgate, dup)`` side
  by side.

What a backend's ``geglu`` kernel module gives (called by the interface for a non-empty ``gate``; the tensors
as the caller gave them, N-D, stride 1 in the last dimension, one device):

    forward(gate, up, approximate, casting) -> y
    backward(dy, gate, up, approximate, casting) -> (dgate, dup)

outputs allocated by the kernel, contiguous.
"""

from __future__ import annotations

from .. import _halves
from .mlp import GEGLUMLP  # noqa: F401 - a public name of the package
from .spec import SPEC

OP = "geglu"
_API = SPEC.api
geglu, geglu_fwd, geglu_bwd = _API.function, _API.forward, _API.backward
GEGLU = _API.module("GEGLU", "``torch.nn.Module`` form of :func:`geglu` (no parameters): ``forward(gate, up)``.")


_gelu_and_mul = _halves.function("gelu_and_mul", geglu_fwd, geglu_bwd, ("approximate", "casting", "backend"))


def gelu_and_mul(x, approximate="none", *, casting="fp32", backend=None):
    """vLLM's ``gelu_and_mul``: ``gelu(x[..., :F], approximate) * x[..., F:]`` of x [..., 2F], y [..., F];
    differentiable in x. ``casting`` as :func:`geglu`'s. TypeError / ValueError for a non-tensor, 0-d or odd-sized
    x."""
    return _gelu_and_mul(x, approximate, casting, backend)
