"""add_rms_norm's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import math

import torch

from .. import spec as s

DEFAULT_EPS = 1e-6


def run(inputs: dict, backend: str | None, backward: bool) -> dict[str, torch.Tensor]:
    """y, residual_out and rstd from ``add_rms_norm_fwd``; dx and dweight from ``add_rms_norm_bwd`` with the
    forward's residual_out and rstd (the cascade), dy and the direct gradient ``dresidual_out``. The attribute
    ``residual_in_fp32`` keeps residual_out in fp32 (the golden's stays fp64)."""
    x, r, w, eps = inputs["x"], inputs["residual"], inputs.get("weight"), inputs.get("eps", DEFAULT_EPS)
    offset = inputs.get("offset", 0.0)
    rdt = torch.float32 if inputs.get("residual_in_fp32") and x.dtype != torch.float64 else None
    y, res, rstd = SPEC.api.forward(x, r, w, eps, offset=offset, residual_dtype=rdt, backend=backend)
    out = {"y": y, "residual_out": res, "rstd": rstd}
    if backward:
        dsum, dw = SPEC.api.backward(
            res,
            rstd,
            inputs["dy"],
            w,
            dresidual_out=inputs.get("dresidual_out"),
            offset=offset,
            eps=eps,
            backend=backend,
        )
        out["dx"] = dsum.to(x.dtype)
        out["dresidual"] = dsum.to(r.dtype)
        if dw is not None:
            out["dweight"] = dw
    return out


def _to_grads(results: dict, dtypes: dict) -> dict:
    """The sum's gradient is x's and residual's, each in its own dtype."""
    dsum = results["dsum"]
    return {"dx": dsum.to(dtypes["x"]), "dresidual": dsum.to(dtypes["residual"]), "dweight": results["dweight"]}


def composite(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None, eps: float = DEFAULT_EPS):
    """The residual add and RMSNorm users write in torch: (y, residual_out)."""
    res = x + residual
    rf = res.float()
    y = rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + eps)
    return (y if weight is None else y * weight.float()).to(x.dtype), res


def example(shape, dtype, device, generator) -> dict:
    x = torch.randn(shape, generator=generator).to(dtype).to(device)
    r = torch.randn(shape, generator=generator).to(dtype).to(device)
    w = (1.0 + 0.1 * torch.randn(shape[-1:], generator=generator)).to(dtype).to(device)
    return {"x": x, "residual": r, "weight": w, "eps": DEFAULT_EPS}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x, residual and the weight, writes y, residual_out and rstd; bwd reads residual_out, dy, the
    direct gradient, the weight and rstd, writes the gradient of the sum and dweight."""
    fwd = s.rows_bytes(shape, dtype, 2, 2, per_row=1, vectors=1)
    bwd = s.rows_bytes(shape, dtype, 3, 1, per_row=1, vectors=2)
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _liger(fn):  # casting "gemma": everything in fp32, as tileport's contract
    return lambda x, residual, weight, eps=DEFAULT_EPS: fn(x, residual, weight, eps, 0.0, "gemma", False)


def _fla(fn):
    return lambda x, residual, weight=None, eps=DEFAULT_EPS: fn(
        x, weight, None, residual=residual, eps=eps, prenorm=True
    )


SPEC = s.OpSpec(
    name="add_rms_norm",
    model_sites={"x": "hidden", "weight": "hidden_weight", "dy": "hidden_grad"},  # a decoder block's pre-norm
    aliases=("fused_add_rms_norm", "AddRmsNorm", "aclnnAddRmsNorm", "npu_add_rms_norm"),
    summary="residual add fused with RMS normalization: (rms_norm(x + residual), x + residual)",
    math="residual_out = x + residual; y = residual_out * rsqrt(mean(residual_out^2, -1) + eps) * (weight + offset)",
    inputs=(s.Tensor("x", s.ROWS), s.Tensor("residual", s.ROWS), s.Tensor("weight", s.VECTOR, optional=True)),
    attrs=(s.Attr("eps", DEFAULT_EPS, "finite, >= 0", s.EPS, kw_only=False), s.Attr("offset", 0.0, "finite", s.REAL)),
    case_attrs=(s.Attr("residual_in_fp32", False, "residual_out in fp32", s.BOOL),),  # run's: residual_dtype fp32
    options=(
        s.Attr("residual_dtype", None, "a floating dtype (default x's)", s.DTYPE),
        s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE),
    ),
    outputs=(
        s.Tensor("y", s.ROWS, dtype="output_dtype"),
        s.Tensor("residual_out", s.ROWS, dtype="residual_dtype"),
        s.Tensor("rstd", s.PER_ROW, dtype="stat"),
    ),
    backward=s.Backward(
        ("residual_out", "rstd", "dy", "dresidual_out", "weight"),
        ("offset", "eps"),
        returns=(s.Tensor("dsum", s.ROWS), s.Tensor("dweight", s.REDUCED, optional=True)),
        to_grads=_to_grads,
    ),
    grads=(s.Tensor("dx", s.ROWS), s.Tensor("dresidual", s.ROWS), s.Tensor("dweight", s.REDUCED, optional=True)),
    signatures={"backward": ("residual_out", "rstd", "dy", "weight", "*", "dresidual_out", "offset", "eps", "backend")},
    docs={
        "function": (
            "Differentiable ``(y, residual_out)``: ``residual_out = x + residual``, ``y = rms_norm(residual_out)``."
        ),
        "forward": (
            "``(y, residual_out, rstd)`` of the fused add + rms_norm, without autograd (see the module docstring)."
        ),
        "backward": """``(dsum, dweight)`` from the forward's ``residual_out`` and ``rstd``, ``dy`` and the gradient
        reaching
    residual_out directly (None: zero). ``dsum`` (residual_out's dtype) is the gradient of x and of residual:
    ``dx = dsum.to(x.dtype)``, ``dresidual = dsum.to(residual.dtype)``. dweight is None without a weight.
    ``eps``: the forward's (the TileLang CPU kernel uses it to avoid dx's cancellation).""",
    },
    run=run,
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=dict(s.MODEL_WORKLOADS),
    bar=s.with_causes(
        s.ROWWISE_BAR,
        {
            "fwd small: per call vs eager": "three outputs (y, the sum, rstd) allocated and checked per call",
            "fwd in cache vs torch.compile": "three passes: the sum stored, then read back for the statistic and for y",
        },
    ),
    originals=(
        s.Original("liger", "liger_kernel.ops.fused_add_rms_norm", "LigerFusedAddRMSNormFunction.apply", _liger),
        s.Original("fla", "fla.modules.layernorm", "rms_norm", _fla),
    ),
    precision_dtypes={"rstd": torch.float32},
    near_eps=lambda attrs, D: math.sqrt(float(attrs.get("eps", DEFAULT_EPS))),  # a mean: eps per element
    usage="""```python
import tileport

y, residual = tileport.add_rms_norm(x, residual, weight, eps=1e-6)   # differentiable through both outputs
y, residual = tileport.add_rms_norm(x, residual, weight, residual_dtype=torch.float32)  # residual stream in fp32
y, residual_out, rstd = tileport.add_rms_norm_fwd(x, residual, weight, eps=1e-6)
dsum, dweight = tileport.add_rms_norm_bwd(residual_out, rstd, dy, weight, dresidual_out=dres)  # dx = dresidual = dsum
block_norm = tileport.AddRMSNorm(4096, eps=1e-6)       # forward(x, residual) -> (y, residual_out)
```""",
)
