"""swiglu's spec: gate and up of one shape (any, 0-d included) by named dimensions, and what the generic layers
(verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import torch

from .. import spec as s
from ..geglu import spec as _shared  # the gated activations share their example, bytes and bar

CASTINGS = ("fp32", "eager")
CASTING = s.Attr("casting", "fp32", "fp32 (math in fp32, rounded once) or eager (the activation rounded first)",
                 s.CHOICE, CASTINGS)  # fmt: skip


def composite(gate, up, casting="fp32"):
    """What users write today: transformers' eager ``act_fn(gate_proj(x)) * up_proj(x)`` (eager), or the same
    math in fp32 rounded once."""
    if casting == "eager":
        return torch.nn.functional.silu(gate) * up
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


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
    bar=_shared.BAR,
)
