"""l2norm's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import math

import torch

from .. import spec as s
from .study import refinement_study

DEFAULT_EPS = 1e-6


def _empty_rstd(eps: float, **_) -> float:
    """rstd of a row of nothing (sum 0): 1 / sqrt(eps), inf for eps = 0."""
    return eps**-0.5 if eps > 0 else math.inf


def composite(x: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """The l2norm users write in torch (fp32 math, as flash-linear-attention's reference does)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def example(shape, dtype, device, generator) -> dict:
    return {"x": torch.randn(shape, generator=generator).to(dtype).to(device), "eps": DEFAULT_EPS}


def bytes_moved(shape, dtype, mode: str) -> int:
    """fwd reads x, writes y and rstd; bwd reads x, rstd, dy and writes dx."""
    fwd = s.rows_bytes(shape, dtype, 1, 1, per_row=1)
    bwd = s.rows_bytes(shape, dtype, 2, 1, per_row=1)
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[mode]


def _fla(fn):
    return lambda x, eps=DEFAULT_EPS: fn(x, eps=eps)


SPEC = s.OpSpec(
    name="l2norm",
    model_sites={"x": "qk", "dy": "qk_grad"},  # q and k heads before the L2 norm of linear attention
    aliases=("fla.modules.l2norm.l2norm", "l2_norm", "L2Norm"),
    summary="L2 normalization over the last dimension (flash-linear-attention's l2norm)",
    math="y = x * rsqrt(sum(x^2, -1) + eps); rstd saved for backward",
    inputs=(s.Tensor("x", s.ROWS),),
    attrs=(s.Attr("eps", DEFAULT_EPS, "finite, >= 0", s.EPS, kw_only=False),),
    options=(s.Attr("output_dtype", None, "a floating dtype (default x's)", s.DTYPE, kw_only=False),),
    outputs=(s.Tensor("y", s.ROWS, dtype="output_dtype"), s.Tensor("rstd", s.PER_ROW, dtype="stat", empty=_empty_rstd)),
    backward=s.Backward(("x", "rstd", "dy"), given=("eps",)),
    grads=(s.Tensor("dx", s.ROWS),),
    signatures={
        "function": ("x", "eps", "output_dtype", "backend"),
        "forward": ("x", "eps", "output_dtype", "backend", "out"),
        "backward": ("x", "rstd", "dy", "backend", "*", "eps"),
    },
    docs={
        "function": "Differentiable ``y = x / sqrt(sum(x^2, -1) + eps)`` over the last dimension.",
        "forward": """``(y, rstd)`` of l2norm over the last dimension, without autograd (see the module docstring).

    ``out=(y, rstd)``: contiguous tensors to write into (no allocation; eager mode only), returned as given.
    """,
        "backward": """``dx`` from the forward's input ``x``, its ``rstd`` and the output gradient ``dy``, in x's dtype.

    ``eps``: the forward's; with it, backends that can avoid the cancellation near ``sum(x^2) >> eps`` do.
    """,
    },
    composite=composite,
    example=example,
    bytes_moved=bytes_moved,
    dtypes=s.FLOATS,
    workloads=dict(s.MODEL_WORKLOADS, **{"qk-norm-128": (16384, 128)}),
    bar=s.ROWWISE_BAR,
    originals=(s.Original("fla", "fla.modules.l2norm", "l2norm", _fla),),
    studies=(refinement_study,),
    precision_dtypes={"rstd": torch.float32},  # rstd is fp32 for every low-precision input
    near_eps=lambda attrs, D: math.sqrt(float(attrs.get("eps", DEFAULT_EPS)) / max(D, 1)),  # a sum of D squares
    kernel_out=True,
    usage="""```python
import tileport

y = tileport.l2norm(x, eps=1e-6)                 # differentiable; torch.compile(fullgraph=True) works
y, rstd = tileport.l2norm_fwd(x, eps=1e-6, output_dtype=None, backend=None, out=None)
dx = tileport.l2norm_bwd(x, rstd, dy)
layer = tileport.L2Norm(eps=1e-6)
```""",
)
