"""layer_norm's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import math

import torch

from .. import spec as s

DEFAULT_EPS = 1e-5


def golden(inputs: dict, backward: bool) -> dict[str, torch.Tensor]:
    """The float64 golden: torch's forward, and the backward as the contract states it, xhat = (x - mean) *
    rstd from the forward's statistics. torch's float64 backward forms x * rstd - mean * rstd with an fma,
    whose rounding residue is not 0 where x equals its mean (every row of D = 1): there an inf gradient
    gives dweight = +-inf with the residue's sign, where the math gives inf * 0 = nan."""
    x = inputs["x"]
    if not backward or x.numel() == 0:
        return SPEC.run(inputs, "torch", backward)
    out = SPEC.run(inputs, "torch", False)
    D, w = x.shape[-1], inputs.get("weight")
    dy = inputs["dy"].reshape(-1, D)
    rstd = out["rstd"].reshape(-1, 1)
    xhat = (x.reshape(-1, D) - out["mean"].reshape(-1, 1)) * rstd
    g = dy if w is None else dy * w
    out["dx"] = ((g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)) * rstd).view(x.shape)
    if w is not None:
        out["dweight"] = (dy * xhat).sum(0)
    if inputs.get("bias") is not None:
        out["dbias"] = dy.sum(0)
    return out


def composite(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = DEFAULT_EPS
) -> torch.Tensor:
    """The LayerNorm users write in torch, statistics in fp32 (two passes, as a careful hand-written one)."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    y = y if weight is None else y * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)


def torch_fused(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = DEFAULT_EPS
) -> torch.Tensor:
    """torch's own fused op (``torch.nn.functional.layer_norm``)."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


def example(shape, dtype, device, generator) -> dict:
    x = torch.randn(shape, generator=generator).to(dtype).to(device)
    w = (1.0 + 0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)
    b = (0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)
    return {"x": x, "weight": w, "bias": b, "eps": DEFAULT_EPS}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x, the weight and the bias, writes y, mean and rstd; bwd reads x, dy, the weight, mean and
    rstd, writes dx, dweight and dbias."""
    fwd = s.rows_bytes(shape, dtype, 1, 1, per_row=2, vectors=2)
    bwd = s.rows_bytes(shape, dtype, 2, 1, per_row=2, vectors=3)
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _liger(fn):
    return lambda x, weight=None, bias=None, eps=DEFAULT_EPS: fn(x, weight, bias, eps)


def _fla(fn):
    return lambda x, weight=None, bias=None, eps=DEFAULT_EPS: fn(x, weight, bias, eps=eps)


SPEC = s.OpSpec(
    name="layer_norm",
    model_sites={"x": "hidden", "weight": "hidden_weight", "dy": "hidden_grad"},  # a block's norm inputs
    aliases=("torch.nn.functional.layer_norm", "torch.nn.LayerNorm", "LayerNorm", "aclnnLayerNorm", "npu_layer_norm"),
    summary="layer normalization over the last dimension with an optional weight and bias (torch.nn.LayerNorm)",
    math="y = (x - mean) * rsqrt(var + eps) * weight + bias; mean and rstd saved for backward",
    inputs=(
        s.Tensor("x", s.ROWS),
        s.Tensor("weight", s.VECTOR, optional=True),
        s.Tensor("bias", s.VECTOR, optional=True),
    ),
    attrs=(s.Attr("eps", DEFAULT_EPS, "finite, >= 0", s.EPS, kw_only=False),),
    options=(s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE),),
    outputs=(
        s.Tensor("y", s.ROWS, dtype="output_dtype"),
        s.Tensor("mean", s.PER_ROW, dtype="stat"),
        s.Tensor("rstd", s.PER_ROW, dtype="stat"),
    ),
    backward=s.Backward(("x", "mean", "rstd", "dy", "weight", "bias"), given=("eps",)),
    grads=(
        s.Tensor("dx", s.ROWS),
        s.Tensor("dweight", s.REDUCED, optional=True),
        s.Tensor("dbias", s.REDUCED, optional=True),
    ),
    signatures={"backward": ("x", "mean", "rstd", "dy", "weight", "*", "bias", "backend", "eps")},
    docs={
        "function": "Differentiable ``y = (x - mean) * rsqrt(var + eps) * weight + bias`` over the last dimension.",
        "forward": """``(y, mean, rstd)`` of layer_norm over the last dimension, without autograd (see the module
        docstring).

    ``out=(y, mean, rstd)``: contiguous tensors to write into (eager mode only), returned as given.
    """,
        "backward": """``(dx, dweight, dbias)`` from the forward's input, the ``mean`` and ``rstd`` it gave, and ``dy``.
    dweight is None without a weight; dbias is None unless the forward's ``bias`` is passed (only its
    presence and dtype are used, as the output mask of torch's ``native_layer_norm_backward``). ``eps``: the
    forward's (autograd passes it); with it, a backend may recompute the rstd the saved fp32 one rounds.""",
    },
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=dict(s.MODEL_WORKLOADS),
    bar=s.with_causes(
        s.ROWWISE_BAR,
        {
            "fwd in cache: kernel-only share of copy": "layer_norm's forward reads x three times (the fp64 mean, the "
            "centred squares, y)",
            "fwd in cache vs torch.compile": "x read three times",
            "fwd in cache vs eager": "x read three times",
            "fwdbwd in cache vs torch.compile": "the backward recomputes the fp64 rstd (two more fp64 sums per row)",
            "fwdbwd in cache: share of copy": "the backward recomputes the fp64 rstd",
        },
    ),
    competitors={"torch-layer_norm": torch_fused},
    originals=(
        s.Original("liger", "liger_kernel.ops.layer_norm", "LigerLayerNormFunction.apply", _liger),
        s.Original("fla", "fla.modules.layernorm", "layer_norm", _fla),
    ),
    precision_dtypes={"mean": torch.float32, "rstd": torch.float32},
    near_eps=lambda attrs, D: math.sqrt(float(attrs.get("eps", DEFAULT_EPS))),  # a variance: eps per element
    kernel_out=True,
    golden=golden,
    usage="""```python
import tileport

y = tileport.layer_norm(x, weight, bias, eps=1e-5)   # differentiable in x, weight and bias;
torch.compile(fullgraph=True) works
y, mean, rstd = tileport.layer_norm_fwd(x, weight, bias, eps=1e-5, output_dtype=None, backend=None, out=None)
dx, dweight, dbias = tileport.layer_norm_bwd(x, mean, rstd, dy, weight, bias=bias, eps=1e-5)
layer = tileport.LayerNorm(4096, eps=1e-5)           # a drop-in for torch.nn.LayerNorm
```""",
)
