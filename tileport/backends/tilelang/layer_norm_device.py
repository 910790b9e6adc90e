"""layer_norm's TileLang device forward launcher (CUDA, Ascend arch35), written once: each target passes its
runner, builder, width bucket and options (Ascend's ``nr_steps``); the backwards differ. A weight or bias not
given is ones or zeros (the kernels always scale and shift)."""

from __future__ import annotations

import torch

from . import launch
from .targets import vectors_or_defaults


def forward(runner, build_forward, bucket, x, weight, bias, eps: float, output_dtype: torch.dtype, out, *options):
    """(y, mean, rstd) for a non-empty 2-D x (rows made contiguous: the kernels index with stride D)."""
    x = x.contiguous()
    out = launch.row_outputs(x, output_dtype, out, stats=2)
    w, b = vectors_or_defaults(weight, bias, x)
    key = (bucket(x.shape[1]), x.dtype, w.dtype, output_dtype, *options)
    runner.kernel("layer_norm_fwd", build_forward, *key)(x, w, b, *out, eps)
    return out
