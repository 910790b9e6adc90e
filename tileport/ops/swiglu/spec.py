"""swiglu's spec: gate and up of one shape (any, 0-d included) by named dimensions, and what the generic layers
(verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import torch

from .. import spec as s
from ..geglu import spec as _shared  # the gated activations share their example, bytes and bar

CASTINGS = ("fp32", "eager")
CASTING = s.Attr(
    "casting", "fp32", "fp32 (math in fp32, rounded once) or eager (the activation rounded first)", s.CHOICE, CASTINGS
)


# Measured causes of swiglu's own misses (docs/ops/swiglu.md): its backward's per-element work.
_BACKWARD_CAUSE = (
    "the backward divides three times per element (silu, s, and 1 - s as E / (1 + E), which does not cancel at "
    "large gates as torch.compile's 1 - s does) and selects per lane the form that keeps silu' accurate at its "
    "zero, where torch.compile's generated loop divides twice"
)
_CAUSES = {
    "fwdbwd vs torch.compile": _BACKWARD_CAUSE,
    "fwdbwd vs eager autograd": f"{_BACKWARD_CAUSE}; in cache at 2 threads the split of a call this small costs "
    "about as much as its work",
}


def composite(gate, up, casting="fp32"):
    """What users write today: transformers' eager ``act_fn(gate_proj(x)) * up_proj(x)`` (eager), or the same
    math in fp32 rounded once."""
    if casting == "eager":
        return torch.nn.functional.silu(gate) * up
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def _rounding(name: str, only: str):
    """An original's call in the spec's convention; it rounds one way only (casting ``only``), refusing the other."""

    def adapt(fn):
        def call(gate, up, casting=only):
            if casting != only:
                raise ValueError(f"{name} has one rounding: casting={only!r}")
            return fn(gate, up)

        return call

    return adapt


SPEC = s.OpSpec(
    name="swiglu",
    aliases=("SiLUMul", "LigerSiLUMulFunction", "swiglu_fwd"),
    summary="the SwiGLU gate of an MLP: silu(gate) * up",
    math="silu(gate) * up, silu(v) = v * sigmoid(v)",
    inputs=("gate: [*] float grad", "up: [*] like:gate grad"),
    attrs=(CASTING,),
    outputs=("y: [*] like:gate",),
    grads=("dgate: [*] like:gate", "dup: [*] like:gate"),
    unit_stride=True,
    backward=s.Backward(("dy", "gate", "up"), ("casting",)),
    composite=composite,
    example=_shared.example,
    bytes_moved=_shared.bytes_moved,
    dtypes=s.FLOATS,
    workloads=_shared.WORKLOADS,
    sweep=_shared.SWEEP,
    bar=s.with_causes(_shared.BAR, _CAUSES),
    kernel_out=True,  # swiglu_fwd(out=...): bench's kernel-only provider
    originals=(  # Liger rounds silu(a) to b's dtype before the product; fla's math is fp32, rounded once
        s.Original("liger", "liger_kernel.ops.swiglu", "LigerSiLUMulFunction.apply", _rounding("Liger", "eager")),
        s.Original("fla", "fla.modules.activations", "swiglu", _rounding("fla's swiglu", "fp32")),
    ),
    usage="""```python
import tileport

y = tileport.swiglu(gate, up)                    # silu(gate) * up, any shape; differentiable in gate and up
y = tileport.swiglu(gate, up, casting="eager")   # transformers' act_fn(gate) * up rounding (Liger's, vLLM's)
y = tileport.silu_and_mul(x)                     # vLLM's form: x [..., 2F] = [gate | up] -> y [..., F]
y = tileport.swiglu_fwd(gate, up, casting="fp32", backend=None)
dgate, dup = tileport.swiglu_bwd(dy, gate, up)
mlp = tileport.SwiGLUMLP(4096, 14336)            # a drop-in for LlamaMLP: load its state dict
```""",
)
