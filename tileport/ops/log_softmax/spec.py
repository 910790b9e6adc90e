"""log_softmax's spec: what the generic layers (verify, bench, cases, docs, lower) read about it."""

from __future__ import annotations

import torch

from .._softmax_spec import make_spec


def composite(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The log_softmax users write in torch: max subtracted, fp32 math, cast back once."""
    xf = x.float()
    z = xf - xf.amax(dim, keepdim=True)
    return (z - torch.log(torch.exp(z).sum(dim, keepdim=True))).to(x.dtype)


def torch_fused(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch's own fused op (``torch.log_softmax``)."""
    return torch.log_softmax(x, dim)


SPEC = make_spec(
    "log_softmax",
    summary="log_softmax over any dimension (torch.log_softmax), numerically stable",
    math="y = (x - max) - log(sum(exp(x - max))); y saved for backward",
    composite=composite,
    fused=torch_fused,
    aliases=("torch.log_softmax", "torch.nn.functional.log_softmax", "torch.nn.LogSoftmax", "aclnnLogSoftmax"),
    usage="""```python
import tileport

y = tileport.log_softmax(x, dim=-1)              # differentiable; torch.compile(fullgraph=True) works
y = tileport.log_softmax_fwd(x, dim=1, backend=None)
dx = tileport.log_softmax_bwd(y, dy, dim=1)
layer = tileport.LogSoftmax(dim=-1)
```""",
)
