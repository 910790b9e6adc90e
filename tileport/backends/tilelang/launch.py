"""What the device launchers (CUDA, Ascend) share around their kernels: the outputs a row kernel writes (or
the caller's ``out``), and a weight's defaults for kernels that always scale."""

from __future__ import annotations

import torch

from .. import outputs


def row_outputs(x: torch.Tensor, output_dtype: torch.dtype, out=None, stats: int = 1) -> tuple:
    """``out`` if given, else (y like x in ``output_dtype``, then ``stats`` fp32 per-row vectors: rstd, mean)."""
    if out is not None:
        return out
    rows = [outputs.empty((x.shape[0],), torch.float32, x.device) for _ in range(stats)]
    return (outputs.empty_like(x, output_dtype), *rows)


def weight_or_ones(weight, x: torch.Tensor) -> torch.Tensor:
    """The weight as a contiguous [D] vector, ones in x's dtype where there is none."""
    return torch.ones(x.shape[1], dtype=x.dtype, device=x.device) if weight is None else weight.contiguous()


def weight_and_offset(weight, x: torch.Tensor, offset: float) -> tuple[torch.Tensor, float]:
    """(``weight_or_ones``, the offset added to it: 0 where there is no weight, whose ones are the scale)."""
    return weight_or_ones(weight, x), (offset if weight is not None else 0.0)
