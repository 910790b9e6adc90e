"""What the device launchers (CUDA, Ascend) share around their kernels: the outputs a row kernel writes (or
the caller's ``out``), and a weight's offset for kernels that always scale (its default: ``vectors_or_defaults``)."""

from __future__ import annotations

import torch

from .. import outputs
from .targets import vectors_or_defaults


def row_outputs(x: torch.Tensor, output_dtype: torch.dtype, out=None, stats: int = 1) -> tuple:
    """``out`` if given, else (y like x in ``output_dtype``, then ``stats`` fp32 per-row vectors: rstd, mean)."""
    if out is not None:
        return out
    rows = [outputs.empty((x.shape[0],), torch.float32, x.device) for _ in range(stats)]
    return (outputs.empty_like(x, output_dtype), *rows)


def weight_and_offset(weight, x: torch.Tensor, offset: float) -> tuple[torch.Tensor, float]:
    """(the weight as a [D] vector, ones where there is none (``vectors_or_defaults``), the offset added to it: 0
    where there is no weight, whose ones are the scale)."""
    w, _ = vectors_or_defaults(weight, None, x)
    return w, (offset if weight is not None else 0.0)
