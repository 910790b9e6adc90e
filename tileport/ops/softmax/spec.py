"""softmax's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import torch

from .._softmax_spec import make_spec


def composite(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The softmax users write in torch: max subtracted, fp32 math, cast back once."""
    xf = x.float()
    e = torch.exp(xf - xf.amax(dim, keepdim=True))
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)


def torch_fused(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch's own fused op (``torch.softmax``)."""
    return torch.softmax(x, dim)


SPEC = make_spec(
    "softmax",
    summary="softmax over any dimension (torch.softmax), numerically stable",
    math="y = exp(x - max) / sum(exp(x - max)); y saved for backward",
    composite=composite,
    fused=torch_fused,
    aliases=("torch.softmax", "torch.nn.functional.softmax", "torch.nn.Softmax", "aclnnSoftmax", "npu_softmax"),
    usage="""```python
import tileport

y = tileport.softmax(x, dim=-1)                  # differentiable; torch.compile(fullgraph=True) works
y = tileport.softmax_fwd(x, dim=1, backend=None)
dx = tileport.softmax_bwd(y, dy, dim=1)
layer = tileport.Softmax(dim=-1)
```""",
)
