"""softmax's and log_softmax's TileLang device kernels (CUDA, Ascend arch35): the launchers every target shares,
written once. A target gives its builders (``build_forward(bucket, dtype, log)``, ``build_backward(bucket,
y_dtype, dy_dtype, log)``), its width bucket and its runner; ``entries`` makes a module's ``lowered`` (for
``tileport lower``), ``forward`` and ``backward`` over them (rows made contiguous: the kernels index with
stride D)."""

from __future__ import annotations

import torch

from .. import outputs


def entries(build_forward, build_backward, bucket, runner, device: str, log: bool = False):
    """A target's (lowered, forward, backward) of softmax, or with ``log`` of log_softmax."""
    op = "log_softmax" if log else "softmax"

    def lowered(dtype: torch.dtype, dim: int, log: bool = log) -> dict:
        """{kernel name: prim_func} serving rows of ``dim`` columns, for ``tileport lower``."""
        name, b = "log_softmax" if log else "softmax", bucket(dim)
        return {f"{name}_fwd": build_forward(b, dtype, log), f"{name}_bwd": build_backward(b, dtype, dtype, log)}

    def forward(x):
        x = x.contiguous()
        y = outputs.empty_like(x)
        runner.kernel(f"{op}_fwd", build_forward, bucket(x.shape[1]), x.dtype, log)(x, y)
        return y

    def backward(y, dy):
        y, dy = y.contiguous(), dy.contiguous()
        dx = outputs.empty_like(y)
        runner.kernel(f"{op}_bwd", build_backward, bucket(y.shape[1]), y.dtype, dy.dtype, log)(y, dy, dx)
        return dx

    forward.__doc__ = f"y on {device} for a non-empty 2-D x."
    backward.__doc__ = f"dx on {device}."
    return lowered, forward, backward
