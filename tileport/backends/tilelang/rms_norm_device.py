"""rms_norm's TileLang device forward launcher (CUDA, Ascend arch35), written once: each target passes its
runner, builder, width bucket and options (Ascend's ``nr_steps``); the backwards differ (a dweight kernel on
CUDA, per-core partial rows on Ascend). Without a weight the kernel scales by ones, in the fp32 form."""

from __future__ import annotations

import torch

from . import launch


def forward(runner, build_forward, bucket, x, weight, eps, offset, casting, output_dtype: torch.dtype, out, *options):
    """(y, rstd) for a non-empty 2-D x (rows made contiguous: the kernels index with stride D)."""
    x = x.contiguous()
    y, rstd = launch.row_outputs(x, output_dtype, out)
    w, off = launch.weight_and_offset(weight, x, offset)
    cast = casting if weight is not None else "fp32"
    key = (bucket(x.shape[1]), x.dtype, w.dtype, output_dtype, cast, *options)
    runner.kernel("rms_norm_fwd", build_forward, *key)(x, w, y, rstd, eps, off)
    return y, rstd
