"""rms_norm's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import math

import torch

from .. import spec as s

DEFAULT_EPS = 1e-6
CASTINGS = ("fp32", "llama")


def composite(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """The RMSNorm users write in torch (fp32 math, the weight applied in fp32, cast back once)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y if weight is None else y * weight.float()).to(x.dtype)


def torch_fused(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """torch's own fused op (``torch.nn.functional.rms_norm``)."""
    return torch.nn.functional.rms_norm(x, x.shape[-1:], weight, eps)


def example(shape, dtype, device, generator) -> dict:
    x = torch.randn(shape, generator=generator).to(dtype).to(device)
    w = (1.0 + 0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)
    return {"x": x, "weight": w, "eps": DEFAULT_EPS}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x and the weight, writes y and rstd; bwd reads x, dy, the weight and rstd, writes dx and dweight."""
    fwd = s.rows_bytes(shape, dtype, 1, 1, per_row=1, vectors=1)
    bwd = s.rows_bytes(shape, dtype, 2, 1, per_row=1, vectors=2)
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _liger(fn):
    return lambda x, weight=None, eps=DEFAULT_EPS: fn(x, weight, eps)


def _fla(fn):
    return lambda x, weight=None, eps=DEFAULT_EPS: fn(x, weight, None, eps=eps)


SPEC = s.OpSpec(
    name="rms_norm",
    model_sites={"x": "hidden", "weight": "hidden_weight", "dy": "hidden_grad"},  # a decoder's RMSNorm inputs
    aliases=("torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "RmsNorm", "aclnnRmsNorm", "npu_rms_norm"),
    summary="RMS normalization over the last dimension with an optional weight (torch.nn.RMSNorm)",
    math="y = x * rsqrt(mean(x^2, -1) + eps) * (weight + offset); rstd saved for backward",
    inputs=(s.Tensor("x", s.ROWS), s.Tensor("weight", s.VECTOR, optional=True)),
    attrs=(
        s.Attr("eps", DEFAULT_EPS, "finite, >= 0", s.EPS, kw_only=False),
        s.Attr("offset", 0.0, "finite", s.REAL),
        s.Attr("casting", "fp32", "fp32 or llama", s.CHOICE, CASTINGS),
    ),
    options=(s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE),),
    outputs=(s.Tensor("y", s.ROWS, dtype="output_dtype"), s.Tensor("rstd", s.PER_ROW, dtype="stat")),
    backward=s.Backward(("x", "rstd", "dy", "weight"), ("offset", "casting"), given=("eps",)),
    grads=(s.Tensor("dx", s.ROWS), s.Tensor("dweight", s.REDUCED, optional=True)),
    signatures={"backward": ("x", "rstd", "dy", "weight", "*", "offset", "casting", "backend", "eps")},
    docs={
        "function": (
            "Differentiable ``y = x * rsqrt(mean(x^2, -1) + eps) * (weight + offset)`` over the last dimension."
        ),
        "forward": """``(y, rstd)`` of rms_norm over the last dimension, without autograd (see the module docstring).

    ``out=(y, rstd)``: contiguous tensors to write into (eager mode only), returned as given.
    """,
        "backward": """``(dx, dweight)`` from the forward's input, its ``rstd`` and ``dy``; dweight is None without a
        weight.
    ``eps``: the forward's; with it, backends that can avoid dx's cancellation do (see the contract).""",
    },
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=dict(s.MODEL_WORKLOADS),
    bar=s.ROWWISE_BAR,
    competitors={"torch-rms_norm": torch_fused},
    originals=(
        s.Original("liger", "liger_kernel.ops.rms_norm", "LigerRMSNormFunction.apply", _liger),
        s.Original("fla", "fla.modules.layernorm", "rms_norm", _fla),
    ),
    precision_dtypes={"rstd": torch.float32},
    near_eps=lambda attrs, D: math.sqrt(float(attrs.get("eps", DEFAULT_EPS))),  # a mean: eps per element
    kernel_out=True,
    usage="""```python
import tileport

y = tileport.rms_norm(x, weight, eps=1e-6)       # differentiable in x and weight; torch.compile(fullgraph=True) works
y = tileport.rms_norm(x, weight, offset=1.0)     # Gemma: x * rstd * (1 + weight)
y = tileport.rms_norm(x, weight, casting="llama")  # HF LlamaRMSNorm's rounding order, bit for bit
y, rstd = tileport.rms_norm_fwd(x, weight, eps=1e-6, output_dtype=None, backend=None, out=None)
dx, dweight = tileport.rms_norm_bwd(x, rstd, dy, weight)
layer = tileport.RMSNorm(4096, eps=1e-6)         # a drop-in for torch.nn.RMSNorm
```""",
)
