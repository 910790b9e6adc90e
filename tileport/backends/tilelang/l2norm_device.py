"""l2norm's TileLang device launchers (CUDA, Ascend arch35), written once: each target passes its runner, its
builders and width bucket, and its option (CUDA's ``rsqrt``, Ascend's ``nr_steps``). Rows are made contiguous:
the kernels index them with stride D."""

from __future__ import annotations

import torch

from .. import outputs
from . import launch


def forward(runner, build_forward, bucket, x: torch.Tensor, eps: float, output_dtype: torch.dtype, out, *options):
    """(y, rstd) for a non-empty 2-D x."""
    x = x.contiguous()
    y, rstd = launch.row_outputs(x, output_dtype, out)
    runner.kernel("l2norm_fwd", build_forward, bucket(x.shape[1]), x.dtype, output_dtype, *options)(x, y, rstd, eps)
    return y, rstd


def backward(runner, build_backward, bucket, x: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx in x's dtype (the fp32 form: eps is not used, ``tileport.ops.l2norm``'s contract)."""
    x, dy, rstd = x.contiguous(), dy.contiguous(), rstd.to(torch.float32).contiguous()
    dx = outputs.empty_like(x)
    runner.kernel("l2norm_bwd", build_backward, bucket(x.shape[1]), x.dtype, dy.dtype)(x, rstd, dy, dx)
    return dx
