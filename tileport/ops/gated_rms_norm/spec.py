"""gated_rms_norm's spec: the declaration its interface is derived from, and what the generic layers (verify,
bench, cases, docs, lower) read about it."""

from __future__ import annotations

import math

import torch

from .. import spec as s

DEFAULT_EPS = 1e-6
ACTIVATIONS = ("silu", "sigmoid")


def _act(g: torch.Tensor, activation: str) -> torch.Tensor:
    return torch.nn.functional.silu(g) if activation == "silu" else torch.sigmoid(g)


def composite(x, gate, weight=None, eps: float = DEFAULT_EPS, activation: str = "silu", norm_before_gate: bool = True):
    """The gated RMSNorm users write in torch (flash-linear-attention's reference and Mamba2's): fp32 math, the
    gate's activation in fp32, cast back once."""
    xf, gf = x.float(), gate.float()
    a = torch.nn.functional.silu(gf) if activation in ("silu", "swish") else torch.sigmoid(gf)
    if not norm_before_gate:
        xf = xf * a
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return (y * a if norm_before_gate else y).to(x.dtype)


def example(shape, dtype, device, generator) -> dict:
    x = torch.randn(shape, generator=generator).to(dtype).to(device)
    g = torch.randn(shape, generator=generator).to(dtype).to(device)
    w = (1.0 + 0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)
    return {"x": x, "gate": g, "weight": w, "eps": DEFAULT_EPS}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x, the gate and the weight, writes y and rstd; bwd reads x, the gate, dy, the weight and rstd,
    writes dx, dgate and dweight."""
    fwd = s.rows_bytes(shape, dtype, 2, 1, per_row=1, vectors=1)
    bwd = s.rows_bytes(shape, dtype, 3, 2, per_row=1, vectors=2)
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _fla(fn):
    return lambda x, gate, weight=None, eps=DEFAULT_EPS: fn(x, gate, weight, None, eps=eps)


SPEC = s.OpSpec(
    name="gated_rms_norm",
    model_sites={},  # the captured decoders have no gated norm
    aliases=("FusedRMSNormGated", "RMSNormGated", "rms_norm_gated", "fla.modules.fused_norm_gate.rms_norm_gated"),
    summary="RMS normalization gated by act(gate): gated DeltaNet's output norm (norm_before_gate) and Mamba2's",
    math="y = rms_norm(x) * weight * act(gate), or rms_norm(x * act(gate)) * weight; act silu or sigmoid",
    inputs=(s.Tensor("x", s.ROWS), s.Tensor("gate", s.ROWS), s.Tensor("weight", s.VECTOR, optional=True)),
    attrs=(
        s.Attr("eps", DEFAULT_EPS, "finite, >= 0", s.EPS, kw_only=False),
        s.Attr("activation", "silu", "silu (alias swish) or sigmoid", s.CHOICE, ACTIVATIONS, (("swish", "silu"),)),
        s.Attr("norm_before_gate", True, "True: rms_norm(x) * act(gate); False: rms_norm(x * act(gate))", s.BOOL),
    ),
    options=(s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE),),
    outputs=(s.Tensor("y", s.ROWS, dtype="output_dtype"), s.Tensor("rstd", s.PER_ROW, dtype="stat")),
    backward=s.Backward(("x", "gate", "rstd", "dy", "weight"), ("eps", "activation", "norm_before_gate")),
    grads=(
        s.Tensor("dx", s.ROWS),
        s.Tensor("dgate", s.ROWS, dtype="gate"),
        s.Tensor("dweight", s.REDUCED, optional=True),
    ),
    docs={
        "function": "Differentiable gated RMSNorm over the last dimension (see the module docstring).",
        "forward": """``(y, rstd)`` of gated_rms_norm over the last dimension, without autograd.

    ``out=(y, rstd)``: contiguous tensors to write into (eager mode only), returned as given.
    """,
        "backward": """``(dx, dgate, dweight)`` from the forward's inputs, its ``rstd`` and ``dy``; dweight is None
    without a weight. ``eps``, ``activation`` and ``norm_before_gate``: the forward's.""",
    },
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    workloads={"gated-deltanet-1.3b-heads": (16384, 128), "mamba2-2.7b-prefill": (4096, 5120), **s.MODEL_WORKLOADS},
    bar=s.with_causes(
        s.ROWWISE_BAR,
        {
            "fwd in cache: kernel-only share of copy": "the gate's activation: an exp per element",
            "fwd in cache vs torch.compile": "the gate's activation: an exp per element",
            "fwd in cache vs eager": "the gate's activation: an exp per element",
            "fwdbwd in cache vs torch.compile": "the activation's exp and its gradient, and the gate-before-norm "
            "statistic formed in fp64",
            "fwdbwd in cache: share of copy": "the activation's exp and its gradient",
        },
    ),
    originals=(s.Original("fla", "fla.modules.fused_norm_gate", "rms_norm_gated", _fla),),
    precision_dtypes={"rstd": torch.float32},
    near_eps=lambda attrs, D: math.sqrt(float(attrs.get("eps", DEFAULT_EPS))),  # a mean: eps per element
    kernel_out=True,
    usage="""```python
import tileport

y = tileport.gated_rms_norm(x, gate, weight, eps=1e-6)                        # rms_norm(x) * weight * silu(gate)
y = tileport.gated_rms_norm(x, gate, weight, norm_before_gate=False)         # Mamba2: rms_norm(x * silu(gate)) * weight
y = tileport.gated_rms_norm(x, gate, weight, activation="sigmoid")
y, rstd = tileport.gated_rms_norm_fwd(x, gate, weight, eps=1e-6)
dx, dgate, dweight = tileport.gated_rms_norm_bwd(x, gate, rstd, dy, weight)
norm = tileport.GatedRMSNorm(128, eps=1e-6)                                   # forward(x, gate)
```""",
)
